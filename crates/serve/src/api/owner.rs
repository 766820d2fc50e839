//! Sessions belong to their creator, and stream only to a destination that proved it
//! listens (`isnode_proto::auth`; docs/protocol.md, "Sessions" and "Return routability").
//!
//! - [`OwnedSession`] (a streaming session) and [`OwnedSessionAnyState`] (one that may
//!   have ended: `DELETE`): the extractors of the session routes. Keepalive, control,
//!   validation and delete are taken only from the creating IP address and with the
//!   session's secret (`Isnode-Session-Secret`); `403` otherwise (`404` for no such
//!   session, so an id alone tells nothing more). Their rejection is [`NotOwned`].
//! - [`send_tokens`]: a new session's pacer starts paused; the token datagram goes to the
//!   destination at once and again at growing intervals; [`validate_session`] takes the
//!   echo and resumes the pacer. Without an echo within `--validate-timeout-ms` the
//!   session ends: a request aimed at a port that does not listen costs a few 24-byte
//!   datagrams, not a stream.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::{ConnectInfo, FromRequestParts, Path};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use isnode_proto::auth::{
    keys_equal, parse_key_hex, parse_session_secret, token_datagram, ValidateSession,
    SESSION_SECRET_HEADER,
};

use super::{ApiError, Sh};
use crate::api::state::ApiState;
use isnode_plane::stream::SessionState;
use isnode_plane::stream::StreamShared;

/// Gaps between token datagrams: the first goes at once, then after each gap, while the
/// session waits (a lost datagram costs the client one gap, not the session).
const TOKEN_GAPS_MS: [u64; 5] = [100, 200, 400, 800, 1600];

/// The streaming session of the route's `{id}`, the request being from its creator with
/// its secret.
pub(super) struct OwnedSession(pub(super) Arc<StreamShared>);

/// The session of the route's `{id}` in any state (streaming or ended, not yet
/// forgotten), the request being from its creator with its secret.
pub(super) struct OwnedSessionAnyState(pub(super) Arc<StreamShared>);

/// Which sessions a route acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Wanted {
    /// Streaming sessions only (`404 no streaming session` for an ended one).
    Streaming,
    /// Any session the table still holds (`404 no session` otherwise).
    AnyState,
}

/// Why a session route refused a request.
#[derive(Debug)]
pub(super) enum NotOwned {
    /// No such session (in the wanted state): `404`.
    NoSession {
        /// The id asked for.
        id: String,
        /// The state asked for.
        wanted: Wanted,
    },
    /// The route's path did not give a session id (its own answer).
    BadPath(axum::extract::rejection::PathRejection),
    /// Not the creator, or not its secret: `403` saying which.
    Forbidden(&'static str),
}

impl IntoResponse for NotOwned {
    fn into_response(self) -> Response {
        match self {
            NotOwned::NoSession { id, wanted } => {
                let which = match wanted {
                    Wanted::Streaming => "no streaming session",
                    Wanted::AnyState => "no session",
                };
                ApiError::new(StatusCode::NOT_FOUND, format!("{which} {id:?}")).into_response()
            }
            NotOwned::BadPath(e) => e.into_response(),
            NotOwned::Forbidden(why) => ApiError::new(StatusCode::FORBIDDEN, why).into_response(),
        }
    }
}

/// Whether a request from `peer` with `headers` may act on `s`: from the creating
/// address, with its secret.
fn authorize(
    s: &StreamShared,
    peer: Option<SocketAddr>,
    headers: &HeaderMap,
) -> Result<(), NotOwned> {
    let Some(owner) = s.owner else {
        return Err(NotOwned::Forbidden(
            "a broadcast channel is steered by its broadcast",
        ));
    };
    let from_creator = peer.is_some_and(|p| p.ip().to_canonical() == s.peer_ip.to_canonical());
    if !from_creator {
        return Err(NotOwned::Forbidden(
            "only the session's creator may do this",
        ));
    }
    let sent = headers.get(SESSION_SECRET_HEADER);
    let secret = sent
        .and_then(|v| v.to_str().ok())
        .and_then(parse_session_secret);
    match (secret, sent) {
        (Some(k), _) if keys_equal(&k, &owner.secret) => Ok(()),
        (Some(_), _) => Err(NotOwned::Forbidden("wrong session secret")),
        (None, Some(_)) => Err(NotOwned::Forbidden(
            "Isnode-Session-Secret must be the session's secret: 32 lowercase hexadecimal digits",
        )),
        (None, None) if headers.contains_key(header::AUTHORIZATION) => Err(NotOwned::Forbidden(
            "the session's secret is missing: it goes in Isnode-Session-Secret \
             (Authorization carries role tokens only)",
        )),
        (None, None) => Err(NotOwned::Forbidden(
            "the session's secret is missing (Isnode-Session-Secret: <secret>)",
        )),
    }
}

/// The session of the request's `{id}` in the `wanted` state if the request may act on
/// it; counted in `isnode_forbidden_total` when it may not.
async fn extract(
    parts: &mut Parts,
    sh: &Arc<ApiState>,
    wanted: Wanted,
) -> Result<Arc<StreamShared>, NotOwned> {
    let Path(id) = Path::<String>::from_request_parts(parts, sh)
        .await
        .map_err(NotOwned::BadPath)?;
    let s = sh
        .control
        .sessions
        .find(&id)
        .filter(|s| wanted == Wanted::AnyState || s.state() == SessionState::Streaming);
    let Some(s) = s else {
        return Err(NotOwned::NoSession { id, wanted });
    };
    let peer = parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0);
    authorize(&s, peer, &parts.headers).inspect_err(|_| {
        sh.metrics.forbidden.fetch_add(1, Ordering::Relaxed);
    })?;
    Ok(s)
}

impl FromRequestParts<Arc<ApiState>> for OwnedSession {
    type Rejection = NotOwned;

    async fn from_request_parts(parts: &mut Parts, sh: &Arc<ApiState>) -> Result<Self, NotOwned> {
        extract(parts, sh, Wanted::Streaming)
            .await
            .map(OwnedSession)
    }
}

impl FromRequestParts<Arc<ApiState>> for OwnedSessionAnyState {
    type Rejection = NotOwned;

    async fn from_request_parts(parts: &mut Parts, sh: &Arc<ApiState>) -> Result<Self, NotOwned> {
        extract(parts, sh, Wanted::AnyState)
            .await
            .map(OwnedSessionAnyState)
    }
}

/// Sends the token datagram to the session's destination until it is validated, and
/// ends it if that does not happen within `--validate-timeout-ms`.
pub(super) async fn send_tokens(sh: Arc<ApiState>, s: Arc<StreamShared>) {
    let Some(owner) = s.owner else {
        return;
    };
    let datagram = token_datagram(&owner.token);
    let deadline =
        tokio::time::Instant::now() + Duration::from_millis(sh.config().validate_timeout_ms);
    let mut gaps = TOKEN_GAPS_MS.iter();
    loop {
        if s.validated.load(Ordering::Acquire) || s.state() != SessionState::Streaming {
            return;
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            break;
        }
        match sh.token_socket.send_to(&datagram, s.dest) {
            Ok(_) => sh
                .control
                .counters
                .tokens_sent
                .fetch_add(1, Ordering::Relaxed),
            Err(e) => {
                tracing::debug!(id = %s.id, dest = %s.dest, "token datagram: {e}");
                0
            }
        };
        let gap = gaps
            .next()
            .map_or(deadline - now, |ms| Duration::from_millis(*ms));
        tokio::time::sleep_until((now + gap).min(deadline)).await;
    }
    if s.end(SessionState::Expired, sh.now_ns()) {
        sh.control
            .counters
            .sessions_unvalidated
            .fetch_add(1, Ordering::Relaxed);
        tracing::info!(id = %s.id, dest = %s.dest, "session ended: its destination never echoed the token");
    }
}

/// `POST /v1/sessions/{id}/validate`: the echo of the token; the stream starts.
pub(super) async fn validate_session(
    OwnedSession(s): OwnedSession,
    State(sh): Sh,
    body: Bytes,
) -> Response {
    let token = serde_json::from_slice::<ValidateSession>(&body)
        .ok()
        .and_then(|v| parse_key_hex(&v.token));
    let Some(token) = token else {
        return ApiError::new(
            StatusCode::BAD_REQUEST,
            "the body must be {\"token\": \"<32 lowercase hexadecimal digits>\"}",
        )
        .into_response();
    };
    let Some(owner) = s.owner else {
        return ApiError::new(StatusCode::FORBIDDEN, "not a unicast session").into_response();
    };
    if !keys_equal(&token, &owner.token) {
        sh.metrics.forbidden.fetch_add(1, Ordering::Relaxed);
        return ApiError::new(StatusCode::FORBIDDEN, "wrong token").into_response();
    }
    if !s.validated.load(Ordering::Acquire) {
        if let Err(e) = isnode_control::sessions::start(&sh.control, &s) {
            return super::common::session_error(&sh, e).into_response();
        }
    }
    sh.wake_data_plane();
    // The keepalive clock starts with the stream (the client keeps it alive from now on).
    s.last_keepalive_ns.store(sh.now_ns(), Ordering::Release);
    tracing::info!(id = %s.id, dest = %s.dest, "session validated: streaming");
    StatusCode::NO_CONTENT.into_response()
}
