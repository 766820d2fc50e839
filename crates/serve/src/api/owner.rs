//! Sessions belong to their creator, and stream only to a destination that proved it
//! listens (`isnode_proto::auth`; docs/protocol.md, "Sessions" and "Return routability").
//!
//! - [`authorize`]: keepalive, control, validation and delete are taken only from the
//!   creating IP address and with the session's secret (`Authorization: Bearer`); `403`
//!   otherwise (`404` for no such session, so an id alone tells nothing more).
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
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use isnode_proto::auth::{
    keys_equal, parse_bearer, parse_key_hex, token_datagram, ValidateSession,
};

use super::{ApiError, Sh};
use crate::pacer::StartBurst;
use crate::registry::Control;
use crate::{SessionState, Shared, StreamShared};

/// Gaps between token datagrams: the first goes at once, then after each gap, while the
/// session waits (a lost datagram costs the client one gap, not the session).
const TOKEN_GAPS_MS: [u64; 5] = [100, 200, 400, 800, 1600];

/// Whether the request may act on `s`: from the creating address, with its secret.
pub(super) fn authorize(
    s: &StreamShared,
    peer: SocketAddr,
    headers: &HeaderMap,
) -> Result<(), ApiError> {
    let forbidden = |why: &str| ApiError::new(StatusCode::FORBIDDEN, why);
    let Some(owner) = s.owner else {
        return Err(forbidden("a broadcast channel is steered by its broadcast"));
    };
    if peer.ip().to_canonical() != s.peer_ip.to_canonical() {
        return Err(forbidden("only the session's creator may do this"));
    }
    let secret = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_bearer);
    match secret {
        Some(k) if keys_equal(&k, &owner.secret) => Ok(()),
        Some(_) => Err(forbidden("wrong session secret")),
        None => Err(forbidden(
            "the session's secret is missing (Authorization: Bearer <secret>)",
        )),
    }
}

/// The streaming session `id` if the request may act on it; the error answer otherwise.
pub(super) fn owned(
    sh: &Shared,
    id: &str,
    peer: SocketAddr,
    headers: &HeaderMap,
) -> Result<Arc<StreamShared>, ApiError> {
    let s = sh
        .sessions
        .find(id)
        .filter(|s| s.state() == SessionState::Streaming)
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                format!("no streaming session {id:?}"),
            )
        })?;
    authorize(&s, peer, headers).inspect_err(|_| {
        sh.metrics.forbidden.fetch_add(1, Ordering::Relaxed);
    })?;
    Ok(s)
}

/// Admits `s` at its token's echo (its bitrate, pool and burst counted from now) and
/// starts its stream; the `503` naming the limit otherwise (the session still waits: the
/// client may echo again until the validation timeout).
fn start(sh: &Shared, s: &StreamShared) -> Result<(), ApiError> {
    let factor = super::create::admit_at_echo(sh, s).map_err(|r| super::common::refuse(sh, r))?;
    let burst = StartBurst {
        media_ms: sh.config().start_burst_ms,
        factor,
    };
    if !s.push_control(Control::Start(burst)) {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "data plane busy, try again",
        ));
    }
    s.validated.store(true, Ordering::Release);
    if factor >= 2 {
        // An upper bound of the burst's end (the rest of the title may be shorter).
        let media_ns = sh.config().start_burst_ms.saturating_mul(1_000_000);
        let until = sh.now_ns().saturating_add(media_ns / u64::from(factor));
        s.start_burst(s.send_rate_bps.saturating_mul(u64::from(factor)), until);
        sh.metrics.start_bursts.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

/// Sends the token datagram to the session's destination until it is validated, and
/// ends it if that does not happen within `--validate-timeout-ms`.
pub(super) async fn send_tokens(sh: Arc<Shared>, s: Arc<StreamShared>) {
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
            Ok(_) => sh.metrics.tokens_sent.fetch_add(1, Ordering::Relaxed),
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
        sh.metrics
            .sessions_unvalidated
            .fetch_add(1, Ordering::Relaxed);
        tracing::info!(id = %s.id, dest = %s.dest, "session ended: its destination never echoed the token");
    }
}

/// `POST /v1/sessions/{id}/validate`: the echo of the token; the stream starts.
pub(super) async fn validate_session(
    State(sh): Sh,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let s = match owned(&sh, &id, peer, &headers) {
        Ok(s) => s,
        Err(e) => return e.into_response(),
    };
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
        if let Err(e) = start(&sh, &s) {
            return e.into_response();
        }
    }
    sh.wake_data_plane();
    // The keepalive clock starts with the stream (the client keeps it alive from now on).
    s.last_keepalive_ns.store(sh.now_ns(), Ordering::Release);
    tracing::info!(id = %s.id, dest = %s.dest, "session validated: streaming");
    StatusCode::NO_CONTENT.into_response()
}
