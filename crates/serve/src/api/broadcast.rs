//! The broadcast routes (docs/protocol.md, "Broadcasts"): `POST /v1/broadcasts` checks the
//! request, plans it off the runtime and starts it ([`isnode_control::broadcast`]: groups,
//! admission, channels on the data plane, an end); `GET` describes it (everything a
//! receiver needs to tune in); `DELETE` stops it. A title with renditions is broadcast as
//! one broadcast per rendition ([`create_title_broadcast`]).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use isnode_proto::broadcast::{BroadcastInfo, BroadcastList, BroadcastRung, TitleBroadcastInfo};
use isnode_store::TitleRecord;

use super::common::{broadcast_error, object_and_fdt};
use super::media::NeedsWhole;
use super::{blocking, error, Sh};
use crate::api::state::ApiState;
use isnode_control::broadcast::request::{lifetime_s, parse, Request};
use isnode_control::broadcast::service::{describe, make_plan};
use isnode_control::broadcast::start::{settings, start, unix_now_s, Origin};
use isnode_control::broadcast::{Broadcast, MAX_BROADCASTS};

/// The description of a running broadcast now.
pub(super) fn info(sh: &ApiState, b: &Broadcast) -> BroadcastInfo {
    describe(b, sh.now_ns(), sh.config().multicast_ttl)
}

/// `POST /v1/broadcasts`: a broadcast of the object named, or one per rendition of the
/// title named ([`create_title_broadcast`]).
pub(super) async fn create_broadcast(
    _: super::roles::Operator,
    State(sh): Sh,
    body: Bytes,
) -> Response {
    let req = match parse(&settings(&sh.config()), &body) {
        Ok(r) => r,
        Err(e) => return broadcast_error(&sh, e).into_response(),
    };
    if sh.control.broadcasts.list().len() >= MAX_BROADCASTS {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{MAX_BROADCASTS} broadcasts run already"),
        );
    }
    let name = req.object.clone();
    let title = blocking(&sh, move |sh| {
        sh.control.objects.with_volume(|v| v.catalog().title(&name))
    });
    match title.await {
        Ok(Ok(Some(t))) => return create_title_broadcast(&sh, req, t).await,
        Ok(Ok(None)) => {}
        Ok(Err(e)) => return super::store_error(e),
        Err(r) => return r,
    }
    match start_one(&sh, &req).await {
        Ok(b) => (StatusCode::CREATED, Json(info(&sh, &b))).into_response(),
        Err(r) => r,
    }
}

/// Plans and starts the broadcast `req` asks for (the object filled whole first).
async fn start_one(sh: &Arc<ApiState>, req: &Request) -> Result<Arc<Broadcast>, Response> {
    // A title the volume lacks (or is filling) is filled first: a broadcast sends every
    // codeword in a loop from its start, so it waits (bounded) for the whole title.
    let whole = super::media::complete_object(
        sh,
        super::Asker::Operator,
        req.object.clone(),
        NeedsWhole::Broadcast,
    );
    whole.await?;
    let (obj, fdt) = object_and_fdt(sh, super::Asker::Operator, &req.object).await?;
    let (obj2, scheme, wait_s) = (obj.clone(), req.scheme, req.max_wait_s);
    let planned = blocking(sh, move |_| make_plan(&obj2, scheme, wait_s));
    let plan = match planned.await? {
        Ok(p) => Arc::new(p),
        Err(e) => return Err(broadcast_error(sh, e).into_response()),
    };
    lifetime_s(&settings(&sh.config()), req.end, &plan, unix_now_s())
        .and_then(|lifetime_s| {
            start(
                &sh.control,
                req,
                &obj,
                plan,
                &fdt,
                Origin::Request { lifetime_s },
            )
        })
        .map_err(|e| broadcast_error(sh, e).into_response())
}

/// `POST /v1/broadcasts` naming a title with renditions: one broadcast per rendition, in
/// the title's order, each with its own plan (the request's scheme and wait) and free
/// groups of its own (started one after the other, each rung's groups are in use when the
/// next one picks: no group is shared, and each rung stays within `--broadcast-max-groups`,
/// what one receiver socket joins). All start or none: a rung that cannot start stops
/// those started before it, and its error is the answer.
async fn create_title_broadcast(sh: &Arc<ApiState>, req: Request, title: TitleRecord) -> Response {
    if req.groups.is_some() {
        return error(
            StatusCode::BAD_REQUEST,
            format!(
                "{:?} is a title with renditions: its rungs take free groups of the server's \
                 ranges, one set each (name no source_groups or repair_groups)",
                title.name
            ),
        );
    }
    let running = sh.control.broadcasts.list().len();
    if running + title.renditions.len() > MAX_BROADCASTS {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "{running} broadcasts run: the {} rungs of {:?} would pass {MAX_BROADCASTS}",
                title.renditions.len(),
                title.name
            ),
        );
    }
    let mut started: Vec<Arc<Broadcast>> = Vec::with_capacity(title.renditions.len());
    for (i, r) in title.renditions.iter().enumerate() {
        let rung_req = Request {
            object: r.object.clone(),
            rung: Some(BroadcastRung {
                title: title.name.clone(),
                rendition: i as u32,
                bitrate_bps: r.bitrate_bps,
                width: r.width,
                height: r.height,
                codecs: r.codecs.clone(),
            }),
            ..req.clone()
        };
        match start_one(sh, &rung_req).await {
            Ok(b) => started.push(b),
            Err(resp) => {
                for b in &started {
                    sh.control.broadcasts.remove(&b.id, sh.now_ns());
                }
                return resp;
            }
        }
    }
    let rungs: Vec<BroadcastInfo> = started.iter().map(|b| info(sh, b)).collect();
    let mean: u64 = rungs
        .iter()
        .flat_map(|b| &b.channels)
        .map(|c| c.mean_send_rate_bps)
        .sum();
    let answer = TitleBroadcastInfo {
        title: title.name,
        send_rate_bps: rungs.iter().map(|b| b.send_rate_bps).sum(),
        mean_send_rate_bps: mean,
        rungs,
    };
    (StatusCode::CREATED, Json(answer)).into_response()
}

/// `GET /v1/broadcasts`.
pub(super) async fn list_broadcasts(_: super::roles::Viewer, State(sh): Sh) -> Response {
    let broadcasts = sh
        .control
        .broadcasts
        .list()
        .iter()
        .map(|b| info(&sh, b))
        .collect();
    Json(BroadcastList { broadcasts }).into_response()
}

/// `GET /v1/broadcasts/{id}`.
pub(super) async fn get_broadcast(
    _: super::roles::Viewer,
    State(sh): Sh,
    Path(id): Path<String>,
) -> Response {
    match sh.control.broadcasts.get(&id) {
        Some(b) => Json(info(&sh, &b)).into_response(),
        None => error(StatusCode::NOT_FOUND, format!("no broadcast {id:?}")),
    }
}

/// `DELETE /v1/broadcasts/{id}`.
pub(super) async fn delete_broadcast(
    _: super::roles::Operator,
    State(sh): Sh,
    Path(id): Path<String>,
) -> Response {
    match sh.control.broadcasts.remove(&id, sh.now_ns()) {
        Some(_) => StatusCode::NO_CONTENT.into_response(),
        None => error(StatusCode::NOT_FOUND, format!("no broadcast {id:?}")),
    }
}
