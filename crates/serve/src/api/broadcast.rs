//! The broadcast routes (docs/protocol.md, "Broadcasts"): `POST /v1/broadcasts` checks the
//! request, plans it off the runtime and starts it ([`isnode_control::broadcast`]: groups,
//! admission, channels on the data plane, an end); `GET` describes it (everything a
//! receiver needs to tune in); `DELETE` stops it.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use isnode_proto::broadcast::{BroadcastInfo, BroadcastList};

use super::common::{broadcast_error, object_and_fdt};
use super::media::NeedsWhole;
use super::{blocking, error, Sh};
use crate::api::state::ApiState;
use isnode_control::broadcast::request::{lifetime_s, parse};
use isnode_control::broadcast::service::{describe, make_plan};
use isnode_control::broadcast::start::{settings, start, unix_now_s, Origin};
use isnode_control::broadcast::{Broadcast, MAX_BROADCASTS};

/// The description of a running broadcast now.
pub(super) fn info(sh: &ApiState, b: &Broadcast) -> BroadcastInfo {
    describe(b, sh.now_ns(), sh.config().multicast_ttl)
}

/// `POST /v1/broadcasts`.
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
    // A title the volume lacks (or is filling) is filled first: a broadcast sends every
    // codeword in a loop from its start, so it waits (bounded) for the whole title.
    let whole = super::media::complete_object(
        &sh,
        super::Asker::Operator,
        req.object.clone(),
        NeedsWhole::Broadcast,
    );
    if let Err(r) = whole.await {
        return r;
    }
    let (obj, fdt) = match object_and_fdt(&sh, super::Asker::Operator, &req.object).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let (obj2, scheme, wait_s) = (obj.clone(), req.scheme, req.max_wait_s);
    let planned = blocking(&sh, move |_| make_plan(&obj2, scheme, wait_s));
    let plan = match planned.await {
        Ok(Ok(p)) => Arc::new(p),
        Ok(Err(e)) => return broadcast_error(&sh, e).into_response(),
        Err(r) => return r,
    };
    let started =
        lifetime_s(&settings(&sh.config()), req.end, &plan, unix_now_s()).and_then(|lifetime_s| {
            start(
                &sh.control,
                &req,
                &obj,
                plan,
                &fdt,
                Origin::Request { lifetime_s },
            )
        });
    match started {
        Ok(b) => (StatusCode::CREATED, Json(info(&sh, &b))).into_response(),
        Err(e) => broadcast_error(&sh, e).into_response(),
    }
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
