//! While the server drains (SIGTERM, `docs/protocol.md`, "Shutting down"), requests that
//! would start new work (sessions, broadcasts, uploads) are answered `503` with
//! `Retry-After`; everything a running session needs (keepalive, control, repair, digests,
//! content) is still served.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::ApiError;
use crate::api::state::ApiState;

/// Seconds a refused client is told to wait (another node, or this one restarted).
const RETRY_AFTER_S: &str = "5";

/// Whether `method` on `path` would start new work.
fn starts_work(method: &Method, path: &str) -> bool {
    let creates = *method == Method::POST && matches!(path, "/v1/sessions" | "/v1/broadcasts");
    let uploads = *method == Method::PUT && path.starts_with("/v1/objects/");
    creates || uploads
}

/// The middleware: `503` + `Retry-After` for new work while draining.
pub(super) async fn refuse_new_work_while_draining(
    State(sh): State<Arc<ApiState>>,
    req: Request,
    next: Next,
) -> Response {
    if sh.draining.load(Ordering::Acquire) && starts_work(req.method(), req.uri().path()) {
        let mut r = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server shutting down: no new sessions, broadcasts or uploads",
        )
        .into_response();
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_S));
        return r;
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_new_work_is_refused() {
        assert!(starts_work(&Method::POST, "/v1/sessions"));
        assert!(starts_work(&Method::POST, "/v1/broadcasts"));
        assert!(starts_work(&Method::PUT, "/v1/objects/a.ts"));
        assert!(!starts_work(&Method::POST, "/v1/sessions/abc/keepalive"));
        assert!(!starts_work(&Method::GET, "/o/a.ts"));
        assert!(!starts_work(&Method::DELETE, "/v1/sessions/abc"));
    }
}
