//! Starting a broadcast on the server: groups, admission (the broadcasts' own budget, then
//! the server's limits beside the sessions), one data-plane entry per channel, and the
//! registration in the table.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use isnode_broadcast::{Plan, Scheme, SchemeParams};

use super::groups::ChannelGroups;
use super::policy::{admit_broadcast, broadcast_budget_bps};
use super::request::{End, Family, Request, Settings};
use super::service::{channel_groups, channel_rates};
use super::{stop_channels, Broadcast, BroadcastError};
use crate::admit::{demand, limits};
use crate::handles::Control;
use crate::registry::{Expiry, NewStreamShared};
use isnode_plane::stream::StreamShared;
use isnode_plane::NewSession;
use isnode_pool::objects::{ObjectInfo, SessionFdt};
use isnode_serve_core::admission::{admit, Demand};
use isnode_serve_core::channel::ChannelPacer;
use isnode_serve_core::schedule::Schedule;

/// Who started a broadcast.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Origin {
    /// `POST /v1/broadcasts`: it runs for `lifetime_s` seconds.
    Request {
        /// Its lifetime, seconds.
        lifetime_s: f64,
    },
    /// The server, for demand (`--broadcast auto`): it runs while it has viewers.
    Auto,
}

/// The request settings of the configuration in force.
pub fn settings(config: &isnode_serve_config::ServeConfig) -> Settings<'_> {
    Settings {
        group_ranges: &config.broadcast_groups,
        max_groups: config.broadcast_max_groups,
        port: config.broadcast_port,
        default_duration_s: config.broadcast_default_duration_s,
        max_duration_s: config.broadcast_max_duration_s,
    }
}

/// The request of an automatic broadcast of `obj`; `None` if the configured scheme does
/// not parse.
pub fn auto_request(sh: &Control, obj: &ObjectInfo) -> Option<Request> {
    let scheme = Scheme::parse(&sh.config().broadcast_scheme, SchemeParams::default()).ok()?;
    Some(Request {
        object: obj.rec.name.clone(),
        scheme,
        width: None,
        m: None,
        max_wait_s: sh.config().broadcast_max_wait_s,
        groups: None,
        family: Family::V4,
        port: sh.config().broadcast_port,
        end: End::Default,
        rung: None,
    })
}

/// The unix time now, seconds.
pub fn unix_now_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The broadcasts' budget (`--broadcast-budget-percent` of the bitrate budget).
fn budget_bps(sh: &Control) -> u64 {
    broadcast_budget_bps(
        sh.config().bitrate_budget_bps(),
        sh.config().broadcast_budget_percent,
    )
}

/// Admits the broadcast's total rate: within the broadcasts' budget, and within the
/// server's limits beside the sessions and the other broadcasts.
fn admit_rate(
    sh: &Control,
    obj: &ObjectInfo,
    group: IpAddr,
    rate_bps: u64,
) -> Result<(), BroadcastError> {
    admit_broadcast(budget_bps(sh), sh.broadcasts.send_rate_bps(), rate_bps)
        .map_err(BroadcastError::Refused)?;
    let snap = sh.sessions.snapshot();
    let others = sh.broadcasts.channels();
    let active: Vec<Demand> = snap
        .sessions
        .iter()
        .chain(others.iter())
        .map(|s| demand(s))
        .collect();
    let new = Demand {
        peer_ip: group,
        send_rate_bps: rate_bps,
        toi: obj.rec.toi,
        layout: &obj.layout,
        codeword: 0,
    };
    admit(&limits(sh), &active, &new).map_err(BroadcastError::Refused)
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
    /// How long the timetable had run at `epoch_ns` (0 for a new broadcast), ns.
    elapsed_ns: u64,
}

/// Where a broadcast's timetable stands when it starts.
#[derive(Clone, Debug, PartialEq)]
pub enum Phase {
    /// At its beginning: a new broadcast.
    New,
    /// Restored after a restart ([`super::durable`]): kept as `id`, its timetable
    /// `elapsed_ns` in, its epoch at unix time `epoch_unix_ns`.
    Restored {
        /// Its id.
        id: String,
        /// How long its timetable had run, ns.
        elapsed_ns: u64,
        /// Its epoch, unix time in ns.
        epoch_unix_ns: u64,
    },
}

/// Starts the channels on the data plane; ends those started if one cannot be.
fn start_channels(sh: &Control, st: &Setup<'_>) -> Result<Vec<Arc<StreamShared>>, BroadcastError> {
    let mut started: Vec<Arc<StreamShared>> = Vec::with_capacity(st.groups.len());
    for (c, (g, rate)) in st.groups.iter().zip(st.rates).enumerate() {
        match start_channel(sh, st, c, g, *rate) {
            Ok(s) => started.push(s),
            Err(msg) => {
                stop_channels(&started, sh.now_ns());
                return Err(BroadcastError::Unavailable(msg));
            }
        }
    }
    Ok(started)
}

/// Hands channel `c` to a data-plane thread.
fn start_channel(
    sh: &Control,
    st: &Setup<'_>,
    c: usize,
    g: &ChannelGroups,
    rate_bps: u64,
) -> Result<Arc<StreamShared>, String> {
    let obj = st.obj;
    let pacer = ChannelPacer::resumed(
        st.plan.clone(),
        c,
        obj.layout.clone(),
        obj.max_burst(),
        (st.epoch_ns, st.elapsed_ns),
    )
    .map_err(|e| format!("channel {c}: {e}"))?;
    let s = Arc::new(StreamShared::new(NewStreamShared {
        id: format!("{}/{c}", st.id),
        object: obj.clone(),
        fdt_packets: st.fdt_packets.to_vec(),
        dest: g.source,
        repair_dest: Some(g.repair),
        expiry: Expiry::Never,
        send_rate_bps: Some(rate_bps),
        start_codeword: 0,
        now_ns: st.epoch_ns,
        burst: None,
        owner: None,
        validated: true,
    }));
    let ns = NewSession {
        shared: s.clone(),
        pacer: Schedule::Channel(pacer),
    };
    match sh.plane.submit(ns) {
        Ok(()) => Ok(s),
        Err(_) => Err("data plane busy, try again".into()),
    }
}

/// Groups, admission, channels, registration.
pub fn start(
    sh: &Control,
    req: &Request,
    obj: &Arc<ObjectInfo>,
    plan: Arc<Plan>,
    fdt: &SessionFdt,
    origin: Origin,
) -> Result<Arc<Broadcast>, BroadcastError> {
    let groups = channel_groups(
        req,
        &sh.config().broadcast_groups,
        sh.config().broadcast_max_groups,
        &sh.broadcasts.groups_in_use(),
        plan.channels.len(),
    )?;
    let what = Launch {
        req,
        obj,
        fdt,
        origin,
        groups,
        phase: Phase::New,
    };
    launch(sh, what, plan)
}

/// A broadcast about to start, its groups chosen.
struct Launch<'a> {
    req: &'a Request,
    obj: &'a Arc<ObjectInfo>,
    fdt: &'a SessionFdt,
    origin: Origin,
    groups: Vec<ChannelGroups>,
    phase: Phase,
}

/// Admission, channels, registration; a broadcast started by request is kept for a restart.
fn launch(sh: &Control, l: Launch<'_>, plan: Arc<Plan>) -> Result<Arc<Broadcast>, BroadcastError> {
    let Launch {
        req,
        obj,
        fdt,
        origin,
        groups,
        phase,
    } = l;
    let rates = channel_rates(obj, &plan);
    let total = rates.iter().fold(0u64, |a, r| a.saturating_add(*r));
    let first = groups
        .first()
        .map(|g| g.source.ip())
        .ok_or_else(|| BroadcastError::BadRequest("a plan without channels".into()))?;
    admit_rate(sh, obj, first, total)?;
    let epoch_ns = sh.now_ns();
    let (id, elapsed_ns, epoch_unix_ns) = match phase {
        Phase::New => (
            format!("{:016x}", rand::random::<u64>()),
            0,
            super::durable::unix_now_ns(),
        ),
        Phase::Restored {
            id,
            elapsed_ns,
            epoch_unix_ns,
        } => (id, elapsed_ns, epoch_unix_ns),
    };
    let setup = Setup {
        id: &id,
        obj,
        plan: &plan,
        groups: &groups,
        rates: &rates,
        fdt_packets: &fdt.packets,
        epoch_ns,
        elapsed_ns,
    };
    let channels = start_channels(sh, &setup)?;
    let end_ns = match origin {
        Origin::Request { lifetime_s } => Some(epoch_ns.saturating_add((lifetime_s * 1e9) as u64)),
        Origin::Auto => None,
    };
    let b = Arc::new(Broadcast {
        id,
        object: obj.clone(),
        plan,
        scheme: req.scheme.name().to_string(),
        width: req.width,
        m: req.m,
        max_wait_s: req.max_wait_s,
        groups,
        channels,
        epoch_ns,
        elapsed_at_epoch_ns: elapsed_ns,
        epoch_unix_ns,
        fdt_xml: fdt.xml.clone(),
        send_rate_bps: total,
        automatic: matches!(origin, Origin::Auto),
        viewers: AtomicU64::new(0),
        last_viewer_ns: AtomicU64::new(epoch_ns),
        end_ns,
        rung: req.rung.clone(),
    });
    if let Err(e) = sh.broadcasts.insert(b.clone(), budget_bps(sh)) {
        stop_channels(&b.channels, sh.now_ns());
        return Err(e);
    }
    sh.reap.notify_one();
    if !b.automatic {
        sh.broadcasts.save(sh.now_ns());
    }
    sh.counters
        .broadcasts_started
        .fetch_add(1, Ordering::Relaxed);
    tracing::info!(id = %b.id, object = %obj.rec.name, scheme = %b.scheme, channels = b.channels.len(), "broadcast started");
    Ok(b)
}

/// Starts again the broadcasts kept in the volume directory `dir` ([`super::durable`]) at
/// the phase of their timetable now; those that ended meanwhile are dropped. What cannot
/// start (object gone, groups taken, admission) is logged and dropped.
pub fn restore(sh: &Control, dir: &std::path::Path) {
    let kept = match super::durable::read(dir) {
        Ok(k) => k,
        Err(e) => {
            tracing::error!("the kept broadcasts are not restored: {e}");
            return;
        }
    };
    for k in &kept {
        match restore_one(sh, k) {
            Ok(Some(b)) => tracing::info!(
                id = %b.id, object = %k.object,
                elapsed_s = b.elapsed_at_epoch_ns as f64 / 1e9,
                "broadcast restored at its phase"
            ),
            Ok(None) => tracing::info!(id = %k.id, "kept broadcast ended meanwhile"),
            Err(e) => {
                tracing::warn!(id = %k.id, object = %k.object, "kept broadcast not restored: {e}")
            }
        }
    }
    sh.broadcasts.save(sh.now_ns());
}

/// One kept broadcast started again; `None` if it has ended.
fn restore_one(
    sh: &Control,
    k: &super::durable::Kept,
) -> Result<Option<Arc<Broadcast>>, BroadcastError> {
    let Some((elapsed_ns, remaining_ns)) = super::durable::phase(k, super::durable::unix_now_ns())
    else {
        return Ok(None);
    };
    let unavailable = |e: isnode_store::StoreError| BroadcastError::Unavailable(e.to_string());
    let obj = sh.objects.get(&k.object).map_err(unavailable)?;
    let fdt = sh.objects.session_fdt(&obj).map_err(unavailable)?;
    let scheme = Scheme::parse(&k.scheme, SchemeParams::from_options(k.width, k.m))
        .map_err(|e| BroadcastError::BadRequest(e.to_string()))?;
    let plan = Arc::new(super::service::make_plan(&obj, scheme, k.max_wait_s)?);
    if plan.channels.len() != k.channels.len() {
        return Err(BroadcastError::BadRequest(format!(
            "{} channels kept, the plan has {}",
            k.channels.len(),
            plan.channels.len()
        )));
    }
    let in_use = sh.broadcasts.groups_in_use();
    let groups: Vec<ChannelGroups> = k
        .channels
        .iter()
        .map(|&(source, repair)| ChannelGroups { source, repair })
        .collect();
    if let Some(g) = groups
        .iter()
        .flat_map(|g| [g.source.ip(), g.repair.ip()])
        .find(|g| in_use.contains(g))
    {
        return Err(BroadcastError::Conflict(format!("group {g} is in use")));
    }
    let req = Request {
        object: k.object.clone(),
        scheme,
        width: k.width,
        m: k.m,
        max_wait_s: k.max_wait_s,
        groups: None,
        family: Family::V4,
        port: groups.first().map_or(1, |g| g.source.port()),
        end: End::Default,
        rung: k.rung.clone(),
    };
    let what = Launch {
        req: &req,
        obj: &obj,
        fdt: &fdt,
        origin: Origin::Request {
            lifetime_s: remaining_ns as f64 / 1e9,
        },
        groups,
        phase: Phase::Restored {
            id: k.id.clone(),
            elapsed_ns,
            epoch_unix_ns: k.epoch_unix_ns,
        },
    };
    launch(sh, what, plan).map(Some)
}
