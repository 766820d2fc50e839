//! Hybrid serving's decision (`--broadcast auto`), with no HTTP in it: whether a title's
//! unicast demand calls for its automatic broadcast, and starting it (one request at a time
//! per title may: concurrent first requests start one). The rules are [`super::policy`]'s;
//! the API answers a session request with the broadcast this returns (`api/hybrid.rs`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use isnode_pool::objects::{ObjectInfo, SessionFdt};

use super::policy::worth_broadcasting;
use super::service::{channel_rates, make_plan};
use super::start::{auto_request, start, Origin};
use super::{Broadcast, BroadcastError};
use crate::handles::Control;

/// Starts an automatic broadcast of `obj` if its unicast demand calls for one and no other
/// request is starting one (that request's broadcast answers the next requests; this one
/// is served by unicast).
pub async fn start_auto(
    sh: &Arc<Control>,
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
        // Sessions awaiting their token's echo are no demand (strangers' would start
        // multicast broadcasts).
        .filter(|s| s.object.rec.toi == obj.rec.toi && s.validated.load(Ordering::Acquire))
        .count() as u64;
    let req = auto_request(sh, obj)?;
    let plan = match sh.broadcasts.auto_plan(obj.rec.toi) {
        Some(p) => p,
        None => {
            let (o, scheme, wait_s) = (obj.clone(), req.scheme, req.max_wait_s);
            let planned = tokio::task::spawn_blocking(move || make_plan(&o, scheme, wait_s));
            let p = Arc::new(planned.await.ok()?.ok()?);
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
                sh.counters.refused(r.limit);
            }
            tracing::warn!(object = %obj.rec.name, "automatic broadcast refused: {e}");
            None
        }
    }
}
