//! The broadcast routes (docs/protocol.md, "Broadcasts"): `POST /v1/broadcasts` plans a
//! scheme over a stored title, admits its bandwidth, picks its groups and hands one
//! data-plane entry per channel to the data plane; `GET` describes it (everything a
//! receiver needs to tune in); `DELETE` stops it.

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use isnode_broadcast::{Plan, PlanRequest, Scheme, SchemeParams, Title};
use isnode_proto::broadcast::{
    BroadcastChannel, BroadcastInfo, BroadcastList, CreateBroadcast, PlanSummary,
};
use isnode_proto::FecInfo;

use super::{blocking, error, ApiError, Sh};
use crate::admission::{admit, Demand};
use crate::broadcast::channel::ChannelPacer;
use crate::broadcast::groups::{allocate, assign, ChannelGroups, GroupRange};
use crate::broadcast::{stop_channels, Broadcast, MAX_BROADCASTS};
use crate::objects::ObjectInfo;
use crate::plane::{NewSession, Schedule};
use crate::registry::{Expiry, NewSessionShared};
use crate::session::send_rate_bps;
use crate::{SessionShared, Shared};

/// Groups a request names: (source, repair).
type NamedGroups = (Vec<IpAddr>, Vec<IpAddr>);

/// A checked request.
struct Request {
    object: String,
    scheme: Scheme,
    body: CreateBroadcast,
    /// Groups named by the request (source, repair), checked against the ranges.
    groups: Option<NamedGroups>,
    ipv4: bool,
    port: u16,
}

fn bad(msg: impl std::fmt::Display) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, msg)
}

fn parse(sh: &Shared, body: &[u8]) -> Result<Request, ApiError> {
    let b: CreateBroadcast = serde_json::from_slice(body)
        .map_err(|e| bad(format!("malformed broadcast request: {e}")))?;
    if b.object.is_empty() {
        return Err(bad("object is empty"));
    }
    if !(b.max_wait_s.is_finite() && b.max_wait_s > 0.0) {
        return Err(bad(format!(
            "max_wait_s {} is not a positive number",
            b.max_wait_s
        )));
    }
    let params = SchemeParams::from_options(b.width, b.m);
    let scheme = Scheme::parse(&b.scheme, params).map_err(bad)?;
    let ipv4 = match b.ip_version {
        None | Some(4) => true,
        Some(6) => false,
        Some(v) => return Err(bad(format!("ip_version {v}: 4 or 6"))),
    };
    let groups = named_groups(sh, &b)?;
    let ipv4 = groups
        .as_ref()
        .map_or(ipv4, |(s, _)| s.iter().all(IpAddr::is_ipv4));
    let port = b.port.unwrap_or(sh.args.broadcast_port);
    if port == 0 {
        return Err(bad("port 0"));
    }
    Ok(Request {
        object: b.object.clone(),
        scheme,
        groups,
        ipv4,
        port,
        body: b,
    })
}

/// The groups the request names, if any: equally many source and repair groups, all of
/// one family, each in a configured range and named once.
fn named_groups(sh: &Shared, b: &CreateBroadcast) -> Result<Option<NamedGroups>, ApiError> {
    if b.source_groups.is_empty() && b.repair_groups.is_empty() {
        return Ok(None);
    }
    if b.source_groups.len() != b.repair_groups.len() {
        return Err(bad("give as many repair_groups as source_groups"));
    }
    let max = sh.args.broadcast_max_groups as usize;
    if b.source_groups.len() * 2 > max {
        return Err(bad(format!(
            "more than {max} groups (--broadcast-max-groups)"
        )));
    }
    let parse_all = |v: &[String]| -> Result<Vec<IpAddr>, ApiError> {
        v.iter()
            .map(|g| {
                let ip: IpAddr = g.parse().map_err(|e| bad(format!("group {g:?}: {e}")))?;
                if !sh.args.broadcast_groups.iter().any(|r| r.contains(ip)) {
                    return Err(bad(format!(
                        "group {ip} is outside the server's --broadcast-groups ({})",
                        ranges(&sh.args.broadcast_groups)
                    )));
                }
                Ok(ip)
            })
            .collect()
    };
    let (s, r) = (parse_all(&b.source_groups)?, parse_all(&b.repair_groups)?);
    let all: HashSet<IpAddr> = s.iter().chain(&r).copied().collect();
    if all.len() != s.len() + r.len() {
        return Err(bad("a group is named twice"));
    }
    if !(all.iter().all(IpAddr::is_ipv4) || all.iter().all(IpAddr::is_ipv6)) {
        return Err(bad("groups of both IPv4 and IPv6"));
    }
    Ok(Some((s, r)))
}

fn ranges(r: &[GroupRange]) -> String {
    r.iter()
        .map(|g| g.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// The plan of `scheme` over the object. A codeword of the plan holds what the object's
/// first (largest) codeword holds: RFC 5052 partitioning may give every codeword fewer than
/// k source symbols, and a plan of k-symbol codewords would let playback outrun delivery.
fn make_plan(obj: &ObjectInfo, scheme: Scheme, max_wait_s: f64) -> Result<Plan, ApiError> {
    let p = obj.layout.params();
    let title = Title::new(
        u64::from(obj.layout.codewords()),
        u64::from(obj.layout.source_symbols(0)) * u64::from(p.symbol_len),
        obj.rec.bitrate_bps,
    )
    .map_err(bad)?;
    isnode_broadcast::plan(&PlanRequest {
        title,
        max_wait_s,
        scheme,
        client_cap_bps: None,
    })
    .map_err(bad)
}

/// The groups of the plan's channels: the request's, or free ones of the first range of
/// the family.
fn channel_groups(
    sh: &Shared,
    req: &Request,
    channels: usize,
) -> Result<Vec<ChannelGroups>, ApiError> {
    let in_use = sh.broadcasts.groups_in_use();
    let (source, repair) = match &req.groups {
        Some((s, r)) => {
            if let Some(g) = s.iter().chain(r).find(|g| in_use.contains(g)) {
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    format!("group {g} is used by another broadcast"),
                ));
            }
            (s.clone(), r.clone())
        }
        None => {
            let per_kind = channels
                .min(sh.args.broadcast_max_groups as usize / 2)
                .max(1);
            let range = sh
                .args
                .broadcast_groups
                .iter()
                .find(|r| r.is_ipv4() == req.ipv4)
                .ok_or_else(|| bad("no --broadcast-groups range of that IP version"))?;
            let got = allocate(range, &in_use, per_kind * 2).ok_or_else(|| {
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("no {} free groups left in {range}", per_kind * 2),
                )
            })?;
            let (s, r) = got.split_at(per_kind);
            (s.to_vec(), r.to_vec())
        }
    };
    assign(channels, &source, &repair, req.port)
        .ok_or_else(|| bad(format!("ports {}+{channels} run past 65535", req.port)))
}

/// Each channel's wire rate (UDP payload with headers and every stored repair symbol).
fn channel_rates(obj: &ObjectInfo, plan: &Plan) -> Vec<u64> {
    plan.channels
        .iter()
        .map(|c| send_rate_bps(&obj.layout, c.rate_bps.ceil() as u64))
        .collect()
}

/// Admits the broadcast's total rate beside the sessions and the other broadcasts.
fn admit_rate(sh: &Shared, obj: &ObjectInfo, group: IpAddr, rate_bps: u64) -> Result<(), ApiError> {
    let snap = sh.sessions.snapshot();
    let others = sh.broadcasts.channels();
    let active: Vec<Demand> = snap
        .sessions
        .iter()
        .chain(others.iter())
        .map(|s| super::create::demand(s))
        .collect();
    let new = Demand {
        peer_ip: group,
        send_rate_bps: rate_bps,
        toi: obj.rec.toi,
        layout: &obj.layout,
        codeword: 0,
    };
    admit(&super::create::limits(sh), &active, &new).map_err(|r| super::create::refuse(sh, r))
}

/// What the channels of a new broadcast are made of.
struct Setup<'a> {
    id: &'a str,
    obj: &'a Arc<ObjectInfo>,
    plan: &'a Arc<Plan>,
    groups: &'a [ChannelGroups],
    rates: &'a [u64],
    fdt_packets: &'a [Vec<u8>],
    epoch_ns: u64,
}

/// Starts the channels on the data plane; ends those started if one cannot be.
fn start_channels(sh: &Shared, st: &Setup<'_>) -> Result<Vec<Arc<SessionShared>>, ApiError> {
    let Setup {
        id,
        obj,
        plan,
        groups,
        rates,
        fdt_packets,
        epoch_ns,
    } = *st;
    let max_burst = super::create::max_burst(obj);
    let mut started: Vec<Arc<SessionShared>> = Vec::with_capacity(groups.len());
    for (c, (g, rate)) in groups.iter().zip(rates).enumerate() {
        let fail = |started: &[Arc<SessionShared>], msg: String| {
            stop_channels(started, sh.now_ns());
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, msg)
        };
        let pacer = ChannelPacer::new(plan.clone(), c, obj.layout.clone(), max_burst, epoch_ns)
            .map_err(|e| fail(&started, format!("channel {c}: {e}")))?;
        let s = Arc::new(SessionShared::new(NewSessionShared {
            id: format!("{id}/{c}"),
            object: obj.clone(),
            fdt_packets: fdt_packets.to_vec(),
            dest: g.source,
            repair_dest: Some(g.repair),
            expiry: Expiry::Never,
            send_rate_bps: Some(*rate),
            start_codeword: 0,
            now_ns: epoch_ns,
            burst: None,
            owner: None,
            validated: true,
        }));
        let w = sh.next_worker.fetch_add(1, Ordering::Relaxed) % sh.workers.len().max(1);
        let ns = NewSession {
            shared: s.clone(),
            pacer: Schedule::Channel(pacer),
        };
        let handed = sh.workers.get(w).map(|q| {
            q.try_send(crate::plane::PlaneMsg::New(Box::new(ns)))
                .is_ok()
        });
        if handed != Some(true) {
            return Err(fail(&started, "data plane busy, try again".into()));
        }
        started.push(s);
    }
    Ok(started)
}

/// `POST /v1/broadcasts`.
pub(super) async fn create_broadcast(
    _: super::roles::Operator,
    State(sh): Sh,
    body: Bytes,
) -> Response {
    let req = match parse(&sh, &body) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    if sh.broadcasts.list().len() >= MAX_BROADCASTS {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{MAX_BROADCASTS} broadcasts run already"),
        );
    }
    let (obj, fdt) = match super::create::object_and_fdt(&sh, &req.object).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let (obj2, scheme, wait_s) = (obj.clone(), req.scheme, req.body.max_wait_s);
    let planned = blocking(&sh, move |_| make_plan(&obj2, scheme, wait_s));
    let plan = match planned.await {
        Ok(Ok(p)) => Arc::new(p),
        Ok(Err(e)) => return e.into_response(),
        Err(r) => return r,
    };
    match start(&sh, &req, &obj, plan, &fdt, Origin::Request) {
        Ok(b) => (StatusCode::CREATED, Json(info(&sh, &b))).into_response(),
        Err(e) => e.into_response(),
    }
}

/// Who started a broadcast.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    /// `POST /v1/broadcasts`.
    Request,
    /// The server, for demand (`--broadcast auto`).
    Auto,
}

/// Groups, admission, channels, registration.
fn start(
    sh: &Shared,
    req: &Request,
    obj: &Arc<ObjectInfo>,
    plan: Arc<Plan>,
    fdt: &crate::objects::SessionFdt,
    origin: Origin,
) -> Result<Arc<Broadcast>, ApiError> {
    let groups = channel_groups(sh, req, plan.channels.len())?;
    let rates = channel_rates(obj, &plan);
    let total = rates.iter().fold(0u64, |a, r| a.saturating_add(*r));
    let first = groups
        .first()
        .map(|g| g.source.ip())
        .ok_or_else(|| bad("a plan without channels"))?;
    admit_rate(sh, obj, first, total)?;
    let id = format!("{:016x}", rand::random::<u64>());
    let epoch_ns = sh.now_ns();
    let setup = Setup {
        id: &id,
        obj,
        plan: &plan,
        groups: &groups,
        rates: &rates,
        fdt_packets: &fdt.packets,
        epoch_ns,
    };
    let channels = start_channels(sh, &setup)?;
    let b = Arc::new(Broadcast {
        id,
        object: obj.clone(),
        plan,
        scheme: req.scheme.name().to_string(),
        width: matches!(req.scheme, Scheme::Skyscraper { .. })
            .then_some(req.body.width)
            .flatten(),
        m: matches!(
            req.scheme,
            Scheme::QuasiHarmonic { .. } | Scheme::Polyharmonic { .. }
        )
        .then_some(req.body.m)
        .flatten(),
        max_wait_s: req.body.max_wait_s,
        groups,
        channels,
        epoch_ns,
        fdt_xml: fdt.xml.clone(),
        send_rate_bps: total,
        automatic: origin == Origin::Auto,
        viewers: AtomicU64::new(0),
        last_viewer_ns: AtomicU64::new(epoch_ns),
    });
    if let Err(b) = sh.broadcasts.insert(b.clone()) {
        stop_channels(&b.channels, sh.now_ns());
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "another broadcast took a group meanwhile, or too many run: try again",
        ));
    }
    sh.metrics
        .broadcasts_started
        .fetch_add(1, Ordering::Relaxed);
    tracing::info!(id = %b.id, object = %obj.rec.name, scheme = %b.scheme, channels = b.channels.len(), "broadcast started");
    Ok(b)
}

/// The description of a running broadcast.
fn info(sh: &Shared, b: &Broadcast) -> BroadcastInfo {
    let rec = &b.object.rec;
    let plan = &b.plan;
    let channels = plan
        .channels
        .iter()
        .zip(&b.groups)
        .zip(&b.channels)
        .map(|((c, g), s)| BroadcastChannel {
            index: c.index,
            rate_bps: c.rate_bps,
            send_rate_bps: s.send_rate_bps,
            mean_send_rate_bps: send_rate_bps(&b.object.layout, c.mean_rate_bps.ceil() as u64),
            source: g.source.to_string(),
            repair: g.repair.to_string(),
        })
        .collect();
    let sum = |f: fn(&SessionShared) -> u64| b.channels.iter().map(|s| f(s)).sum();
    BroadcastInfo {
        id: b.id.clone(),
        object: b.object.json(),
        scheme: b.scheme.clone(),
        max_wait_s: b.max_wait_s,
        width: b.width,
        m: b.m,
        plan: PlanSummary {
            codewords: plan.title.codewords,
            codeword_payload_bytes: plan.title.codeword_payload_bytes,
            bitrate_bps: plan.title.bitrate_bps,
            slot_codewords: plan.slot_codewords,
            server_rate_bps: plan.server_rate_bps,
            worst_wait_s: plan.client.worst_wait_s,
            max_channels: plan.client.max_channels,
            peak_buffer_bytes: plan.client.peak_buffer_bytes,
        },
        channels,
        send_rate_bps: b.send_rate_bps,
        elapsed_s: sh.now_ns().saturating_sub(b.epoch_ns) as f64 / 1e9,
        ttl: sh.args.multicast_ttl,
        fdt_xml: b.fdt_xml.clone(),
        fec: FecInfo {
            encoding_id: isnode_wire::FEC_ENCODING_ID_RS28,
            symbol_size: rec.symbol_len,
            max_source_block_length: rec.source_symbols,
            max_encoding_symbols: rec.source_symbols + rec.repair_symbols,
        },
        packets_sent: sum(|s| s.packets_sent.load(Ordering::Relaxed)),
        bytes_sent: sum(|s| s.bytes_sent.load(Ordering::Relaxed)),
        automatic: b.automatic,
        viewers_redirected: b.viewers.load(Ordering::Relaxed),
    }
}

/// Hybrid serving (`--broadcast auto`): the answer to a session request for `obj` when the
/// title is (or now becomes) served by broadcast, `None` to serve it by unicast. A running
/// broadcast of the title answers; otherwise one is started when the title's unicast
/// demand with this request, its streaming sessions × their send rate, would exceed the
/// broadcast's paced rate.
pub(super) async fn hybrid(
    sh: &Arc<Shared>,
    obj: &Arc<ObjectInfo>,
    fdt: &crate::objects::SessionFdt,
) -> Option<Response> {
    if sh.args.broadcast_mode != crate::config::BroadcastMode::Auto {
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

/// Starts an automatic broadcast of `obj` if its unicast demand calls for one.
async fn start_auto(
    sh: &Arc<Shared>,
    obj: &Arc<ObjectInfo>,
    fdt: &crate::objects::SessionFdt,
) -> Option<Arc<Broadcast>> {
    let streaming = sh
        .sessions
        .snapshot()
        .sessions
        .iter()
        .filter(|s| s.object.rec.toi == obj.rec.toi)
        .count() as u64;
    let demand_bps = (streaming + 1).saturating_mul(obj.send_rate_bps);
    let scheme = Scheme::parse(&sh.args.broadcast_scheme, SchemeParams::default()).ok()?;
    let wait_s = sh.args.broadcast_max_wait_s;
    let plan = match sh.broadcasts.auto_plan(obj.rec.toi) {
        Some(p) => p,
        None => {
            let o = obj.clone();
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
    if demand_bps <= cost_bps {
        return None;
    }
    let req = Request {
        object: obj.rec.name.clone(),
        scheme,
        body: CreateBroadcast {
            object: obj.rec.name.clone(),
            scheme: scheme.name().into(),
            max_wait_s: wait_s,
            width: None,
            m: None,
            source_groups: Vec::new(),
            repair_groups: Vec::new(),
            port: None,
            ip_version: None,
        },
        groups: None,
        ipv4: true,
        port: sh.args.broadcast_port,
    };
    match start(sh, &req, obj, plan, fdt, Origin::Auto) {
        Ok(b) => {
            tracing::info!(object = %obj.rec.name, demand_bps, cost_bps, "automatic broadcast started");
            Some(b)
        }
        Err(e) => {
            tracing::warn!(object = %obj.rec.name, "automatic broadcast refused: {}", e.body.error);
            None
        }
    }
}

/// `GET /v1/broadcasts`.
pub(super) async fn list_broadcasts(_: super::roles::Viewer, State(sh): Sh) -> Response {
    let broadcasts = sh.broadcasts.list().iter().map(|b| info(&sh, b)).collect();
    Json(BroadcastList { broadcasts }).into_response()
}

/// `GET /v1/broadcasts/{id}`.
pub(super) async fn get_broadcast(
    _: super::roles::Viewer,
    State(sh): Sh,
    Path(id): Path<String>,
) -> Response {
    match sh.broadcasts.get(&id) {
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
    match sh.broadcasts.remove(&id, sh.now_ns()) {
        Some(_) => StatusCode::NO_CONTENT.into_response(),
        None => error(StatusCode::NOT_FOUND, format!("no broadcast {id:?}")),
    }
}
