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
