//! Hybrid serving (`--broadcast auto`): a session request for a title that is (or now
//! becomes) served by broadcast is answered with the broadcast. The rules are
//! [`crate::broadcast::policy`]'s; one request at a time per title may start the title's
//! automatic broadcast, so concurrent first requests start one.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::blocking;
use super::broadcast::info;
use crate::broadcast::policy::worth_broadcasting;
use crate::broadcast::service::{channel_rates, make_plan};
use crate::broadcast::start::{auto_request, start, Origin};
use crate::broadcast::{Broadcast, BroadcastError};
use crate::Shared;
use isnode_pool::objects::{ObjectInfo, SessionFdt};
use isnode_serve_config::BroadcastMode;

/// The answer to a session request for `obj` when the title is (or now becomes) served by
/// broadcast, `None` to serve it by unicast. A running broadcast of the title answers;
/// otherwise one is started when the title's unicast demand with this request, its
/// streaming sessions × their send rate, would exceed the broadcast's paced rate.
pub(super) async fn hybrid(
    sh: &Arc<Shared>,
    obj: &Arc<ObjectInfo>,
    fdt: &SessionFdt,
) -> Option<Response> {
    if sh.config().broadcast_mode != BroadcastMode::Auto {
        return None;
    }
    let b = match sh.broadcasts.of_object(obj.rec.toi) {
        Some(b) => b,
        None => start_auto(sh, obj, fdt).await?,
    };
    b.add_viewer(sh.now_ns());
    sh.metrics
        .broadcast_redirects
        .fetch_add(1, Ordering::Relaxed);
    let body = isnode_proto::broadcast::SessionRedirect {
        broadcast: info(sh, &b),
    };
    Some((StatusCode::OK, Json(body)).into_response())
}

/// Starts an automatic broadcast of `obj` if its unicast demand calls for one and no other
/// request is starting one (that request's broadcast answers the next requests; this one
/// is served by unicast).
async fn start_auto(
    sh: &Arc<Shared>,
    obj: &Arc<ObjectInfo>,
    fdt: &SessionFdt,
) -> Option<Arc<Broadcast>> {
    if obj.fill.is_some() {
        // Being filled from the origin: its sessions are held at the fill front; a
        // broadcast needs the whole title, so the title's requests after the fill may
        // start one.
        return None;
    }
    let _claim = sh.broadcasts.claim_auto(obj.rec.toi)?;
    // Started by the claim's previous holder meanwhile.
    if let Some(b) = sh.broadcasts.of_object(obj.rec.toi) {
        return Some(b);
    }
    let streaming = sh
        .sessions
        .snapshot()
        .sessions
        .iter()
        .filter(|s| s.object.rec.toi == obj.rec.toi)
        .count() as u64;
    let req = auto_request(sh, obj)?;
    let plan = match sh.broadcasts.auto_plan(obj.rec.toi) {
        Some(p) => p,
        None => {
            let (o, scheme, wait_s) = (obj.clone(), req.scheme, req.max_wait_s);
            let p = Arc::new(
                blocking(sh, move |_| make_plan(&o, scheme, wait_s))
                    .await
                    .ok()?
                    .ok()?,
            );
            sh.broadcasts.cache_auto_plan(obj.rec.toi, p.clone());
            p
        }
    };
    let cost_bps: u64 = channel_rates(obj, &plan).iter().sum();
    if !worth_broadcasting(streaming, obj.send_rate_bps, cost_bps) {
        return None;
    }
    match start(sh, &req, obj, plan, fdt, Origin::Auto) {
        Ok(b) => {
            tracing::info!(object = %obj.rec.name, streaming, cost_bps, "automatic broadcast started");
            Some(b)
        }
        Err(e) => {
            if let BroadcastError::Refused(r) = &e {
                sh.metrics.refused(r.limit);
            }
            tracing::warn!(object = %obj.rec.name, "automatic broadcast refused: {e}");
            None
        }
    }
}
