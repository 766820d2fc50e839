//! What the session and broadcast routes share: the object lookup and the answers of
//! refusals.

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::Response;
use isnode_proto::ErrorBody;

use super::{blocking, store_error, ApiError};
use crate::api::state::ApiState;
use isnode_control::broadcast::BroadcastError;
use isnode_pool::objects::{ObjectInfo, SessionFdt};
use isnode_serve_core::admission::Refusal;

/// The object called `name` and a fresh FDT instance of it (catalog lookups, off the
/// runtime); the error answer otherwise.
pub(super) async fn object_and_fdt(
    sh: &Arc<ApiState>,
    asker: super::Asker,
    name: &str,
) -> Result<(Arc<ObjectInfo>, SessionFdt), Response> {
    let obj = super::lookup(sh, asker, name.to_string()).await?;
    let found = blocking(sh, move |sh| {
        let fdt = sh.control.objects.session_fdt(&obj)?;
        Ok::<_, isnode_store::StoreError>((obj, fdt))
    });
    match found.await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(store_error(e)),
        Err(resp) => Err(resp),
    }
}

/// Counts the refusal; the `503` answer naming the limit.
pub(super) fn refuse(sh: &ApiState, r: Refusal) -> ApiError {
    sh.control.counters.refused(r.limit);
    ApiError::with_body(
        StatusCode::SERVICE_UNAVAILABLE,
        ErrorBody {
            error: format!("admission refused: {}", r.reason),
            limit: Some(r.limit),
            value: Some(r.value),
        },
    )
}

/// The answer to a session that could not be created or started.
pub(super) fn session_error(sh: &ApiState, e: isnode_control::sessions::SessionError) -> ApiError {
    match e {
        isnode_control::sessions::SessionError::Refused(r) => refuse(sh, r),
        isnode_control::sessions::SessionError::Busy => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "data plane busy, try again",
        ),
        isnode_control::sessions::SessionError::Deleted => {
            ApiError::new(StatusCode::NOT_FOUND, "the object is being deleted")
        }
    }
}

/// The answer to a broadcast that cannot start.
pub(super) fn broadcast_error(sh: &ApiState, e: BroadcastError) -> ApiError {
    let status = match e {
        BroadcastError::Refused(r) => return refuse(sh, r),
        BroadcastError::BadRequest(_) => StatusCode::BAD_REQUEST,
        BroadcastError::Conflict(_) => StatusCode::CONFLICT,
        BroadcastError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    ApiError::new(status, e)
}

/// `name` percent-encoded as one URL path segment (every byte but RFC 3986's unreserved
/// `A-Z a-z 0-9 - . _ ~` as `%XX`).
pub(super) fn path_segment(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(char::from(b))
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// `r`, marked `Cache-Control: private, no-store` when the request's `query` carries a
/// viewer's token onto the URLs it lists (a playlist or manifest is then that viewer's).
pub(super) fn private_if_token(mut r: Response, query: Option<&str>) -> Response {
    if super::roles::carried_token(query).is_some() {
        r.headers_mut().insert(
            axum::http::header::CACHE_CONTROL,
            axum::http::HeaderValue::from_static("private, no-store"),
        );
    }
    r
}
