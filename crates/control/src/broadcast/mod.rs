//! Periodic broadcast of stored titles on multicast channels (docs/protocol.md,
//! "Broadcasts"; the plans: `isnode-broadcast`, docs/broadcast.md).
//!
//! A broadcast is a plan over one object and one data-plane entry per channel: a
//! `isnode_serve_core::channel::ChannelPacer` walking the channel's timetable from the broadcast's epoch,
//! sending the object's stored packets unchanged (source packets and the FDT to the
//! channel's source group, repair packets to its repair group: [`groups`]) from the same
//! block pool as the unicast sessions. The server's bandwidth for the title is the plan's,
//! whatever the number of viewers.
//!
//! The table here is behind one short mutex, never held across I/O; the channels' entries
//! are the data plane's, ended by [`Broadcasts::remove`] like a deleted session.

pub mod durable;
pub mod groups;
pub mod hybrid;
pub mod policy;
pub mod request;
pub mod service;
pub mod start;

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use isnode_broadcast::Plan;

use groups::ChannelGroups;
use isnode_plane::stream::{SessionState, StreamShared};
use isnode_pool::objects::ObjectInfo;
use isnode_serve_core::admission::Refusal;
use policy::{AutoClaim, AutoStarts};

/// Most broadcasts running at once.
pub const MAX_BROADCASTS: usize = 64;
/// Most plans of automatic broadcasts kept.
pub const MAX_CACHED_PLANS: usize = 1024;

/// Why a broadcast cannot start (the API answers `400`, `409`, `503`, or `503` naming the
/// admission limit).
#[derive(Debug)]
pub enum BroadcastError {
    /// The request is malformed or asks for what the server does not allow.
    BadRequest(String),
    /// A group it names is in use.
    Conflict(String),
    /// No room now (groups, broadcasts, the data plane): try again later.
    Unavailable(String),
    /// Admission refuses its rate.
    Refused(Refusal),
}

impl std::fmt::Display for BroadcastError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BroadcastError::BadRequest(m)
            | BroadcastError::Conflict(m)
            | BroadcastError::Unavailable(m) => f.write_str(m),
            BroadcastError::Refused(r) => write!(f, "admission refused: {}", r.reason),
        }
    }
}

/// One running broadcast.
pub struct Broadcast {
    /// Its id (16 hex digits).
    pub id: String,
    /// The title it sends.
    pub object: Arc<ObjectInfo>,
    /// Its scheme's plan: the channels and their segments.
    pub plan: Arc<Plan>,
    /// The scheme's name and parameters as requested.
    pub scheme: String,
    /// Skyscraper's width cap, if one was asked.
    pub width: Option<u64>,
    /// Quasi-/polyharmonic's m, if one was asked.
    pub m: Option<u32>,
    /// The longest wait for the start of the title the plan promises, seconds.
    pub max_wait_s: f64,
    /// Where each channel's packets go.
    pub groups: Vec<ChannelGroups>,
    /// Each channel's data-plane entry.
    pub channels: Vec<Arc<StreamShared>>,
    /// The timetable's origin on the server's clock (ns): its epoch (τ = 0) for a broadcast
    /// started here, the restart for one restored ([`durable`]).
    pub epoch_ns: u64,
    /// How long the timetable had run at `epoch_ns` (0 unless restored), ns.
    pub elapsed_at_epoch_ns: u64,
    /// The epoch as wall-clock time (unix, ns): what is kept across a restart.
    pub epoch_unix_ns: u64,
    /// The FDT instance (XML) receivers tune with.
    pub fdt_xml: String,
    /// Wire rate of all channels.
    pub send_rate_bps: u64,
    /// Started by the server for demand (`--broadcast auto`).
    pub automatic: bool,
    /// Session requests answered with it.
    pub viewers: AtomicU64,
    /// When the last of them came (server clock, ns).
    pub last_viewer_ns: AtomicU64,
    /// When it stops by itself (server clock, ns); `None` for an automatic broadcast,
    /// which stops once its viewers are done.
    pub end_ns: Option<u64>,
    /// The title and rung it sends, when it is one rung of a title's broadcast.
    pub rung: Option<isnode_proto::broadcast::BroadcastRung>,
}

impl Broadcast {
    /// Counts a session request answered with this broadcast.
    pub fn add_viewer(&self, now_ns: u64) {
        self.viewers.fetch_add(1, Ordering::Relaxed);
        self.last_viewer_ns.fetch_max(now_ns, Ordering::Relaxed);
    }

    /// An automatic broadcast whose last viewer has had the time to finish (the title's
    /// duration and the wait since its request).
    pub fn idle(&self, now_ns: u64) -> bool {
        let title_ns = (self.object.rec.duration_s + self.max_wait_s).max(0.0) * 1e9;
        let last = self.last_viewer_ns.load(Ordering::Relaxed);
        self.automatic && now_ns.saturating_sub(last) as f64 > title_ns
    }

    /// Whether it is over at `now_ns`: past its end, or automatic and idle.
    pub fn over(&self, now_ns: u64) -> bool {
        self.end_ns.is_some_and(|end| now_ns >= end) || self.idle(now_ns)
    }

    /// How long its timetable has run at `now_ns` (server clock), ns.
    pub fn elapsed_ns(&self, now_ns: u64) -> u64 {
        now_ns
            .saturating_sub(self.epoch_ns)
            .saturating_add(self.elapsed_at_epoch_ns)
    }

    /// What is kept of it across a restart; `None` for an automatic broadcast.
    pub fn kept(&self, now_ns: u64, now_unix_ns: u64) -> Option<durable::Kept> {
        let end_ns = self.end_ns.filter(|_| !self.automatic)?;
        Some(durable::Kept {
            id: self.id.clone(),
            object: self.object.rec.name.clone(),
            scheme: self.scheme.clone(),
            width: self.width,
            m: self.m,
            max_wait_s: self.max_wait_s,
            channels: self.groups.iter().map(|g| (g.source, g.repair)).collect(),
            epoch_unix_ns: self.epoch_unix_ns,
            end_unix_ns: now_unix_ns.saturating_add(end_ns.saturating_sub(now_ns)),
            rung: self.rung.clone(),
        })
    }

    /// The groups it uses.
    pub fn group_ips(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.groups
            .iter()
            .flat_map(|g| [g.source.ip(), g.repair.ip()])
    }
}

/// The running broadcasts by id.
#[derive(Default)]
pub struct Broadcasts {
    table: Mutex<HashMap<String, Arc<Broadcast>>>,
    /// Plans of automatic broadcasts, by object TOI (planning a long title takes seconds).
    auto_plans: Mutex<HashMap<u32, Arc<Plan>>>,
    /// The titles whose automatic broadcast a request is starting.
    auto_starts: AutoStarts,
    /// The directory the broadcasts started by request are kept in ([`durable`]; None:
    /// not kept).
    kept_in: Option<std::path::PathBuf>,
    /// Orders the writes of the kept broadcasts.
    saving: Mutex<()>,
}

impl Broadcasts {
    /// An empty table whose broadcasts started by request are kept in `dir`.
    pub fn kept_in(dir: &std::path::Path) -> Broadcasts {
        Broadcasts {
            kept_in: Some(dir.to_path_buf()),
            ..Broadcasts::default()
        }
    }

    /// Rewrites the kept broadcasts (those started by request that run now); a failure is
    /// logged (the broadcasts run on, not kept).
    pub fn save(&self, now_ns: u64) {
        let Some(dir) = &self.kept_in else {
            return;
        };
        let _order = self.saving.lock().unwrap_or_else(|e| e.into_inner());
        let now_unix_ns = durable::unix_now_ns();
        let kept: Vec<_> = self
            .list()
            .iter()
            .filter_map(|b| b.kept(now_ns, now_unix_ns))
            .collect();
        if let Err(e) = durable::write(dir, &kept) {
            tracing::error!("keeping the broadcasts for a restart: {e}");
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<Broadcast>>> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The running broadcast of the object `toi`, if any (the first started).
    pub fn of_object(&self, toi: u32) -> Option<Arc<Broadcast>> {
        self.list().into_iter().find(|b| b.object.rec.toi == toi)
    }

    /// Stops the broadcasts that are over: past their end, or automatic ones whose viewers
    /// have finished; their ids.
    pub fn stop_over(&self, now_ns: u64) -> Vec<String> {
        let over: Vec<String> = self
            .lock()
            .values()
            .filter(|b| b.over(now_ns))
            .map(|b| b.id.clone())
            .collect();
        for id in &over {
            self.remove(id, now_ns);
        }
        over
    }

    /// The claim to start an automatic broadcast of object `toi`: `None` while another
    /// request starts one (so concurrent first requests start one broadcast).
    pub fn claim_auto(&self, toi: u32) -> Option<AutoClaim<'_>> {
        self.auto_starts.claim(toi)
    }

    /// The send rate of the running broadcasts together (their budget's use).
    pub fn send_rate_bps(&self) -> u64 {
        self.lock()
            .values()
            .fold(0u64, |sum, b| sum.saturating_add(b.send_rate_bps))
    }

    /// The cached plan of an automatic broadcast of object `toi`.
    pub fn auto_plan(&self, toi: u32) -> Option<Arc<Plan>> {
        let plans = self.auto_plans.lock().unwrap_or_else(|e| e.into_inner());
        plans.get(&toi).cloned()
    }

    /// Caches the plan of an automatic broadcast of object `toi` (bounded: at most
    /// [`MAX_CACHED_PLANS`], the oldest entries dropped arbitrarily beyond).
    pub fn cache_auto_plan(&self, toi: u32, plan: Arc<Plan>) {
        let mut plans = self.auto_plans.lock().unwrap_or_else(|e| e.into_inner());
        if plans.len() >= MAX_CACHED_PLANS {
            plans.clear();
        }
        plans.insert(toi, plan);
    }

    /// Every running broadcast.
    pub fn list(&self) -> Vec<Arc<Broadcast>> {
        let mut v: Vec<_> = self.lock().values().cloned().collect();
        v.sort_by_key(|b| b.epoch_ns);
        v
    }

    /// One broadcast.
    pub fn get(&self, id: &str) -> Option<Arc<Broadcast>> {
        self.lock().get(id).cloned()
    }

    /// The groups the running broadcasts use.
    pub fn groups_in_use(&self) -> HashSet<IpAddr> {
        self.lock().values().flat_map(|b| b.group_ips()).collect()
    }

    /// The channels of every running broadcast (admission counts them).
    pub fn channels(&self) -> Vec<Arc<StreamShared>> {
        self.lock()
            .values()
            .flat_map(|b| b.channels.iter().cloned())
            .collect()
    }

    /// Adds `b` unless [`MAX_BROADCASTS`] run already, one of its groups is taken (by a
    /// broadcast created meanwhile), or the broadcasts would pass their budget `budget_bps`
    /// (re-checked here, under the table's lock, for requests admitted concurrently).
    pub fn insert(&self, b: Arc<Broadcast>, budget_bps: u64) -> Result<(), BroadcastError> {
        let mut t = self.lock();
        let taken: HashSet<IpAddr> = t.values().flat_map(|o| o.group_ips()).collect();
        if t.len() >= MAX_BROADCASTS || b.group_ips().any(|g| taken.contains(&g)) {
            return Err(BroadcastError::Conflict(
                "another broadcast took a group meanwhile, or too many run: try again".into(),
            ));
        }
        let running = t
            .values()
            .fold(0u64, |sum, o| sum.saturating_add(o.send_rate_bps));
        policy::admit_broadcast(budget_bps, running, b.send_rate_bps)
            .map_err(BroadcastError::Refused)?;
        t.insert(b.id.clone(), b);
        Ok(())
    }

    /// Stops and removes a broadcast: its channels leave the data plane on their next turn.
    pub fn remove(&self, id: &str, now_ns: u64) -> Option<Arc<Broadcast>> {
        let b = self.lock().remove(id)?;
        stop_channels(&b.channels, now_ns);
        if !b.automatic {
            self.save(now_ns);
        }
        Some(b)
    }

    /// Stops every broadcast (server shutdown; the kept ones stay kept, to start again with
    /// the server).
    pub fn clear(&self, now_ns: u64) {
        let all: Vec<_> = self.lock().drain().map(|(_, b)| b).collect();
        for b in all {
            stop_channels(&b.channels, now_ns);
        }
    }
}

/// Ends the data-plane entries of channels.
pub fn stop_channels(channels: &[Arc<StreamShared>], now_ns: u64) {
    for c in channels {
        c.end(SessionState::Deleted, now_ns);
    }
}
