//! The role checks of every route, in one place: handlers take a [`Viewer`], an
//! [`Operator`] or a [`MetricsReader`] argument (docs/protocol.md, "Authentication").
//!
//! - No token file: operator and metrics routes are open (the server refuses to start
//!   like that off loopback unless told so); viewer routes are open unless
//!   `--anonymous-viewers false` (then every viewer request is `401`).
//! - A token file: operator and metrics routes need a token with that role. Viewer routes
//!   take anonymous requests while anonymous viewers are allowed; a token sent is checked.
//! - `401` for no or an unknown token, `403` for a token without the role; JSON bodies that
//!   name the role. The token is `Authorization: Bearer TOKEN`, or `?token=TOKEN` on
//!   viewer routes (players that cannot send headers).
//! - A client (IPv4 address, IPv6 /64) that failed too often ([`isnode_auth::throttle`]:
//!   a burst of 10, then one a second) has its failures answered `429` with `Retry-After`;
//!   a good token passes whoever shares its address.

use std::sync::Arc;

use super::ApiError;
use crate::api::state::ApiState;
use crate::metrics::AuthFailure;
use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use isnode_auth::Role;

/// A request allowed on a viewer route.
pub(super) struct Viewer;
/// A request holding a token with the viewer role, whether or not anonymous viewers are
/// allowed: the key and licence routes of encrypted titles (issue 32).
pub(super) struct ViewerToken {
    /// When the token expires (seconds since the Unix epoch; `None`: never).
    pub expires_unix_s: Option<u64>,
}
/// A request holding the operator role.
pub(super) struct Operator;
/// A request holding the metrics role.
pub(super) struct MetricsReader;

/// The token of the request: `Authorization: Bearer`, else `?token=` where `query_ok`.
fn token_of(parts: &Parts, query_ok: bool) -> Option<String> {
    let bearer = parts
        .headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    if bearer.is_some() || !query_ok {
        return bearer.map(str::to_string);
    }
    query_token(parts.uri.query()).map(str::to_string)
}

/// The `token=` parameter of a request's query (as sent: tokens are hexadecimal).
pub(super) fn query_token(query: Option<&str>) -> Option<&str> {
    query?.split('&').find_map(|kv| kv.strip_prefix("token="))
}

/// The `?token=` of a playlist or manifest request that its URIs carry on (plain
/// hexadecimal of at most 128 characters: anything else is not a token the server knows
/// and is not echoed).
pub(super) fn carried_token(query: Option<&str>) -> Option<&str> {
    query_token(query)
        .filter(|t| !t.is_empty() && t.len() <= 128 && t.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The client the request counts against: its IPv4 address or IPv6 /64 (none when the
/// connection's address is unknown: in-process callers).
fn client_of(parts: &Parts) -> Option<std::net::IpAddr> {
    let peer = parts
        .extensions
        .get::<ConnectInfo<std::net::SocketAddr>>()?;
    Some(isnode_serve_core::admission::client_key(peer.0.ip()))
}

/// A refused request: its error, and how long to wait for a client slowed down.
pub(super) struct Refusal {
    error: ApiError,
    retry_after_s: Option<u64>,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let mut r = self.error.into_response();
        if let Some(s) = self.retry_after_s {
            if let Ok(v) = header::HeaderValue::from_str(&s.to_string()) {
                r.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        r
    }
}

/// Whether anonymous requests may use a route: as the configuration says, or never.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Anonymous {
    /// Viewer routes: `anonymous_viewers`; operator and metrics: without a token file.
    AsConfigured,
    /// A token is needed whatever the configuration (the key route).
    Never,
}

/// Whether the request may use a route of `role`.
pub(super) fn check(sh: &ApiState, parts: &Parts, role: Role) -> Result<(), Refusal> {
    check_as(sh, parts, role, Anonymous::AsConfigured)
}

/// [`check`], anonymous requests allowed as `anon` says.
fn check_as(sh: &ApiState, parts: &Parts, role: Role, anon: Anonymous) -> Result<(), Refusal> {
    // An anonymous viewer is not slowed down (it may share its address with a guesser).
    let anonymous = token_of(parts, role == Role::Viewer).is_none();
    let configured = anon == Anonymous::AsConfigured && sh.config().anonymous_viewers;
    if anonymous && role == Role::Viewer && configured {
        return Ok(());
    }
    // A good token passes whoever shares its address (NAT, proxies, a cloud's /64): only
    // failures are slowed down. Tokens are 128-bit random: the throttle bounds the work
    // and the noise of guessing, not its odds.
    let Err(error) = check_token(sh, parts, role, anon) else {
        return Ok(());
    };
    let Some(client) = client_of(parts) else {
        return Err(Refusal {
            error,
            retry_after_s: None,
        });
    };
    let now = sh.now_ns();
    let mut throttle = sh.auth_throttle.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(wait_s) = throttle.wait_s(client, now) {
        sh.metrics.auth_failure(AuthFailure::Throttled);
        return Err(Refusal {
            error: ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!("too many failed authentications from this address: retry in {wait_s} s"),
            ),
            retry_after_s: Some(wait_s),
        });
    }
    throttle.failed(client, now);
    Err(Refusal {
        error,
        retry_after_s: None,
    })
}

/// Whether the request's token (or its absence) allows `role`; a use of a good token is
/// recorded, a refusal counted.
fn check_token(sh: &ApiState, parts: &Parts, role: Role, anon: Anonymous) -> Result<(), ApiError> {
    match verdict(sh, parts, role, anon) {
        Ok(Some(sha256)) => {
            sh.last_use.touch(&sha256, unix_now_s());
            Ok(())
        }
        Ok(None) => Ok(()),
        Err(why) => Err(fail(sh, why, role)),
    }
}

/// Whether the request would be allowed `role`, with no side effect (nothing counted,
/// no use recorded): what a middleware asks before it acts for the route.
pub(super) fn allowed(sh: &ApiState, parts: &Parts, role: Role) -> bool {
    verdict(sh, parts, role, Anonymous::AsConfigured).is_ok()
}

/// The token's verdict for `role`: allowed (the good token's hash, `None` when anonymous
/// requests are allowed) or why not.
fn verdict(
    sh: &ApiState,
    parts: &Parts,
    role: Role,
    anon: Anonymous,
) -> Result<Option<String>, Failure> {
    let store = sh.tokens.read().unwrap_or_else(|e| e.into_inner()).clone();
    let token = token_of(parts, role == Role::Viewer);
    let anonymous_ok = match role {
        _ if anon == Anonymous::Never => false,
        Role::Viewer => sh.config().anonymous_viewers,
        Role::Operator | Role::Metrics => store.is_none(),
    };
    let Some(token) = token else {
        return match anonymous_ok {
            true => Ok(None),
            false => Err(Failure::Missing),
        };
    };
    let Some(store) = store else {
        // No token file: no token is known.
        return match anonymous_ok {
            true => Ok(None),
            false => Err(Failure::Unknown),
        };
    };
    match store.lookup(&token) {
        None => Err(Failure::Unknown),
        Some(r) if r.expired(unix_now_s()) => Err(Failure::Expired),
        Some(r) if r.has(role) => Ok(Some(r.sha256.clone())),
        Some(_) => Err(Failure::WrongRole),
    }
}

/// Seconds since the Unix epoch (0 if the clock is before it).
fn unix_now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Why a request was refused (its index in `metrics::AUTH_FAILURE_REASONS`).
#[derive(Clone, Copy)]
enum Failure {
    /// No token sent.
    Missing,
    /// A token that is not in the file.
    Unknown,
    /// A token without the route's role.
    WrongRole,
    /// A token past its expiry.
    Expired,
}

fn fail(sh: &ApiState, why: Failure, role: Role) -> ApiError {
    sh.metrics.auth_failure(match why {
        Failure::Missing => AuthFailure::Missing,
        Failure::Unknown => AuthFailure::Unknown,
        Failure::WrongRole => AuthFailure::WrongRole,
        Failure::Expired => AuthFailure::Expired,
    });
    let r = role.name();
    match why {
        Failure::Missing => ApiError::new(
            StatusCode::UNAUTHORIZED,
            format!("this route needs a token with the {r} role (Authorization: Bearer TOKEN)"),
        ),
        Failure::Unknown => ApiError::new(
            StatusCode::UNAUTHORIZED,
            format!("unknown token: this route needs a token with the {r} role"),
        ),
        Failure::WrongRole => ApiError::new(
            StatusCode::FORBIDDEN,
            format!("the token lacks the {r} role this route needs"),
        ),
        Failure::Expired => ApiError::new(
            StatusCode::UNAUTHORIZED,
            format!("the token has expired: this route needs an unexpired token with the {r} role"),
        ),
    }
}

macro_rules! role_extractor {
    ($t:ty, $role:expr) => {
        impl FromRequestParts<Arc<ApiState>> for $t {
            type Rejection = Refusal;

            async fn from_request_parts(
                parts: &mut Parts,
                sh: &Arc<ApiState>,
            ) -> Result<Self, Refusal> {
                check(sh, parts, $role).map(|()| Self)
            }
        }
    };
}

role_extractor!(Viewer, Role::Viewer);

impl FromRequestParts<Arc<ApiState>> for ViewerToken {
    type Rejection = Refusal;

    async fn from_request_parts(parts: &mut Parts, sh: &Arc<ApiState>) -> Result<Self, Refusal> {
        check_as(sh, parts, Role::Viewer, Anonymous::Never)?;
        Ok(ViewerToken {
            expires_unix_s: token_expiry(sh, parts),
        })
    }
}

/// The expiry of the request's token (a known one; `None`: it never expires).
fn token_expiry(sh: &ApiState, parts: &Parts) -> Option<u64> {
    let token = token_of(parts, true)?;
    let store = sh
        .tokens
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .clone()?;
    store.lookup(&token).and_then(|r| r.expires_unix_s)
}

/// When a key or licence handed out now stops being good: the earlier of the token's
/// expiry and `licence_ttl_s` from now (`None`: neither is set).
pub(super) fn key_expiry(sh: &ApiState, token: &ViewerToken) -> Option<u64> {
    let ttl = sh.config().licence_ttl_s;
    let by_ttl = (ttl > 0).then(|| unix_now_s().saturating_add(ttl));
    match (by_ttl, token.expires_unix_s) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
role_extractor!(Operator, Role::Operator);
role_extractor!(MetricsReader, Role::Metrics);

/// Who may use a route.
#[cfg(test)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Rule {
    /// Needs a token with this role (viewer routes: unless anonymous viewers are allowed).
    Role(Role),
    /// Needs a token with the viewer role even where anonymous viewers are allowed.
    ViewerToken,
    /// Checked by the session's creator address and secret (`owner.rs`), not by a role.
    SessionOwner,
    /// Anyone (the status page itself; its data needs `metrics`).
    Public,
}

/// Every route (method, path) and its rule: the role table of docs/protocol.md. The
/// table tests (`api/tests/roles.rs`) check it against the real router (the paths it was
/// built with, and the methods each answers) and every route against each token.
#[cfg(test)]
pub(super) const ROUTES: &[(&str, &str, Rule)] = &[
    ("GET", "/v1/objects", Rule::Role(Role::Viewer)),
    ("GET", "/v1/objects/{name}", Rule::Role(Role::Viewer)),
    ("PUT", "/v1/objects/{name}", Rule::Role(Role::Operator)),
    ("DELETE", "/v1/objects/{name}", Rule::Role(Role::Operator)),
    (
        "GET",
        "/v1/objects/{name}/content",
        Rule::Role(Role::Viewer),
    ),
    ("GET", "/o/{name}", Rule::Role(Role::Viewer)),
    (
        "GET",
        "/v1/objects/{name}/codewords/{sbn}/packets",
        Rule::Role(Role::Viewer),
    ),
    (
        "GET",
        "/v1/objects/{name}/digests",
        Rule::Role(Role::Viewer),
    ),
    ("GET", "/v1/objects/{name}/index", Rule::Role(Role::Viewer)),
    (
        "GET",
        "/v1/objects/{name}/index.m3u8",
        Rule::Role(Role::Viewer),
    ),
    ("GET", "/v1/objects/{name}/key", Rule::ViewerToken),
    ("POST", "/v1/objects/{name}/license", Rule::ViewerToken),
    (
        "GET",
        "/v1/objects/{name}/master.m3u8",
        Rule::Role(Role::Viewer),
    ),
    (
        "GET",
        "/v1/objects/{name}/manifest.mpd",
        Rule::Role(Role::Viewer),
    ),
    ("GET", "/v1/titles", Rule::Role(Role::Viewer)),
    ("PUT", "/v1/titles/{name}", Rule::Role(Role::Operator)),
    (
        "GET",
        "/v1/objects/{name}/iframes.m3u8",
        Rule::Role(Role::Viewer),
    ),
    ("POST", "/v1/sessions", Rule::Role(Role::Viewer)),
    ("GET", "/v1/sessions/{id}", Rule::Role(Role::Viewer)),
    ("DELETE", "/v1/sessions/{id}", Rule::SessionOwner),
    ("POST", "/v1/sessions/{id}/keepalive", Rule::SessionOwner),
    ("POST", "/v1/sessions/{id}/validate", Rule::SessionOwner),
    ("POST", "/v1/sessions/{id}/control", Rule::SessionOwner),
    ("POST", "/v1/broadcasts", Rule::Role(Role::Operator)),
    ("GET", "/v1/broadcasts", Rule::Role(Role::Viewer)),
    ("GET", "/v1/broadcasts/{id}", Rule::Role(Role::Viewer)),
    ("DELETE", "/v1/broadcasts/{id}", Rule::Role(Role::Operator)),
    ("GET", "/metrics", Rule::Role(Role::Metrics)),
    ("GET", "/v1/status", Rule::Role(Role::Metrics)),
    ("POST", "/v1/fills", Rule::Role(Role::Operator)),
    ("GET", "/v1/fills", Rule::Role(Role::Operator)),
    ("POST", "/v1/objects/{name}/pin", Rule::Role(Role::Operator)),
    (
        "DELETE",
        "/v1/objects/{name}/pin",
        Rule::Role(Role::Operator),
    ),
    ("GET", "/v1/health", Rule::Public),
    ("GET", "/v1/cluster", Rule::Role(Role::Metrics)),
    ("GET", "/", Rule::Public),
    ("GET", "/ui/app.js", Rule::Public),
    ("GET", "/ui/style.css", Rule::Public),
    ("GET", "/ui/vendor/hls.min.js", Rule::Public),
    ("GET", "/ui/vendor/hls.js.LICENSE", Rule::Public),
    ("GET", "/ui/vendor/dash.all.min.js", Rule::Public),
    ("GET", "/ui/vendor/dash.js.LICENSE", Rule::Public),
];
