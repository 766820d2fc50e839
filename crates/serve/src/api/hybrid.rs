//! Hybrid serving (`--broadcast auto`): a session request for a title that is (or now
//! becomes) served by broadcast is answered with the broadcast. The decision and the start
//! are `isnode_control::broadcast::hybrid`'s; this renders the answer.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::broadcast::info;
use crate::api::state::ApiState;
use isnode_control::broadcast::hybrid::start_auto;
use isnode_pool::objects::{ObjectInfo, SessionFdt};
use isnode_serve_config::BroadcastMode;

/// The answer to a session request for `obj` when the title is (or now becomes) served by
/// broadcast, `None` to serve it by unicast. A running broadcast of the title answers;
/// otherwise one is started when the title's unicast demand with this request, its
/// streaming sessions × their send rate, would exceed the broadcast's paced rate.
pub(super) async fn hybrid(
    sh: &Arc<ApiState>,
    obj: &Arc<ObjectInfo>,
    fdt: &SessionFdt,
) -> Option<Response> {
    if sh.config().broadcast_mode != BroadcastMode::Auto {
        return None;
    }
    let b = match sh.control.broadcasts.of_object(obj.rec.toi) {
        Some(b) => b,
        None => start_auto(&sh.control, obj, fdt).await?,
    };
    b.add_viewer(sh.now_ns());
    sh.control
        .counters
        .broadcast_redirects
        .fetch_add(1, Ordering::Relaxed);
    let body = isnode_proto::broadcast::SessionRedirect {
        broadcast: info(sh, &b),
    };
    Some((StatusCode::OK, Json(body)).into_response())
}
