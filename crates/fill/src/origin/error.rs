//! Origin errors: the classes a client is told apart, and the redaction of secrets.

use crate::status::FillStatus;

/// Why an origin request failed.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum OriginError {
    /// No such object at the origin (`404`).
    #[error("not at the origin: {0}")]
    NotFound(String),
    /// The object changed at the origin (ETag, `If-Match` failed) (`409`).
    #[error("changed at the origin: {0}")]
    Changed(String),
    /// The origin could not be reached or did not answer in time (`502`).
    #[error("origin unreachable: {0}")]
    Unreachable(String),
    /// The origin refused our credentials (`502`).
    #[error("origin refused the request: {0}")]
    Refused(String),
    /// The origin's answer was wrong: a short or long body, no ETag (`502`).
    #[error("origin answer garbled: {0}")]
    Garbled(String),
}

/// The class of an [`OriginError`], for metrics and `GET /v1/fills`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// [`OriginError::NotFound`].
    NotFound,
    /// [`OriginError::Changed`].
    Changed,
    /// [`OriginError::Unreachable`].
    Unreachable,
    /// [`OriginError::Refused`].
    Refused,
    /// [`OriginError::Garbled`].
    Garbled,
}

impl ErrorClass {
    /// Position in the metrics' class list (`isnode_fill_errors_total{class}`: not_found,
    /// changed, unreachable, refused, garbled).
    pub fn index(self) -> usize {
        self as usize
    }
}

impl OriginError {
    /// Its class.
    pub fn class(&self) -> ErrorClass {
        match self {
            OriginError::NotFound(_) => ErrorClass::NotFound,
            OriginError::Changed(_) => ErrorClass::Changed,
            OriginError::Unreachable(_) => ErrorClass::Unreachable,
            OriginError::Refused(_) => ErrorClass::Refused,
            OriginError::Garbled(_) => ErrorClass::Garbled,
        }
    }

    /// What a client is answered: `404`, `409` or `502` (docs/protocol.md).
    pub fn status(&self) -> FillStatus {
        match self {
            OriginError::NotFound(_) => FillStatus::NotFound,
            OriginError::Changed(_) => FillStatus::Conflict,
            _ => FillStatus::BadGateway,
        }
    }

    /// Whether a fill may retry after it (from its durable front): not for a missing object.
    pub fn is_retryable(&self) -> bool {
        !matches!(self, OriginError::NotFound(_))
    }
}

/// Removes the secrets from a message (a credential must never reach a log or a client).
#[derive(Clone, Debug, Default)]
pub(super) struct Redact {
    secrets: Vec<String>,
}

impl Redact {
    /// Redacts these strings (empty ones are ignored).
    pub(super) fn new(secrets: Vec<String>) -> Redact {
        Redact {
            secrets: secrets.into_iter().filter(|s| !s.is_empty()).collect(),
        }
    }

    /// `text` with every secret replaced by `***`.
    pub(super) fn text(&self, text: &str) -> String {
        self.secrets
            .iter()
            .fold(text.to_string(), |t, s| t.replace(s.as_str(), "***"))
    }
}

/// The class of an `object_store` error, its message redacted.
pub(super) fn classify(e: object_store::Error, key: &str, redact: &Redact) -> OriginError {
    let msg = redact.text(&format!("{key:?}: {}", chain(&e)));
    match e {
        object_store::Error::NotFound { .. } => OriginError::NotFound(msg),
        object_store::Error::Precondition { .. } | object_store::Error::NotModified { .. } => {
            OriginError::Changed(msg)
        }
        object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. } => OriginError::Refused(msg),
        _ if is_body_error(&msg) => OriginError::Garbled(msg),
        _ => OriginError::Unreachable(msg),
    }
}

/// Whether a generic error is about the answer's body or range rather than the connection.
fn is_body_error(msg: &str) -> bool {
    let m = msg.to_ascii_lowercase();
    [
        "range",
        "body",
        "content-length",
        "decode",
        "parse",
        "invalid",
    ]
    .iter()
    .any(|w| m.contains(w))
        && !m.contains("connect")
}

/// An error and its sources, `: `-joined.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(x) = src {
        let t = x.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        src = x.source();
    }
    s
}
