//! Fills from the origin: a request for a title the volume lacks starts one (HEAD for its
//! size and ETag, then parallel 1 MiB-aligned ranged GETs with `If-Match`, pushed in order
//! into the store's [`isnode_store::fill::Fill`] and committed so that the durable front
//! advances), served while it runs up to its front ([`front`]).
//!
//! One fill per title: [`Fills`] maps each title being filled to its [`FillJob`]; every
//! request for it (session, content, playlist, digests, pre-fill) joins that job. The fill
//! runs on its own thread (store writes block) with the origin's requests on a small
//! tokio runtime of its own, off the data plane and the API's runtime. An origin error
//! retries with backoff from the durable front; an object changed at the origin abandons
//! the fill and starts again (sessions of the old version end: never two versions mixed).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use isnode_pool::objects::Objects;
use isnode_serve_config::{ConfigCell, ServeConfig};
use isnode_sys::stop::Stop;

use crate::job::{FillJob, FillReport};
use crate::origin::{ErrorClass, Origin, OriginSettings};
use crate::status::FillStatus;

/// How long a request waits for a fill's first codewords before `503` (a slow origin).
pub const FIRST_BYTES_WAIT: Duration = Duration::from_secs(30);
/// How long a reader (HTTP body, digests) waits at the front for one codeword.
pub const FRONT_WAIT: Duration = Duration::from_secs(30);
/// Finished fills `GET /v1/fills` still reports.
const RECENT_FILLS: usize = 64;

/// The fills from the origin, counted apart from the bytes served.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct FillSnapshot {
    /// Bytes read from the origin.
    pub fill_bytes: u64,
    /// Requests made to the origin (HEAD and ranged GET).
    pub origin_requests: u64,
    /// Fills running now.
    pub fills_active: u64,
    /// Fills started since start (one per title however many requests share it).
    pub fills_started: u64,
    /// Fills finished since start (complete objects).
    pub fills_done: u64,
    /// Failed origin requests by class: not_found, changed, unreachable, refused, garbled.
    pub fill_errors: [u64; 5],
    /// Titles evicted to make room (`cache_max_bytes`).
    pub titles_evicted: u64,
    /// Times a session caught up with a fill front and was held there.
    pub sessions_held: u64,
}

/// The counters of the fills (metrics, status).
#[derive(Debug, Default)]
pub struct FillCounters {
    /// Bytes read from the origin.
    pub fill_bytes: AtomicU64,
    /// Requests made to the origin.
    pub origin_requests: AtomicU64,
    /// Fills started.
    pub fills_started: AtomicU64,
    /// Fills finished (complete objects).
    pub fills_done: AtomicU64,
    /// Failed origin requests by class ([`ErrorClass::index`]).
    pub errors: [AtomicU64; 5],
    /// Titles evicted to make room.
    pub titles_evicted: AtomicU64,
}

impl FillCounters {
    /// Counts a failed origin request of class `c`.
    pub fn error(&self, c: ErrorClass) {
        if let Some(a) = self.errors.get(c.index()) {
            a.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Runs `delete` on the title `name` (TOI `toi`) unless a session or broadcast uses it (it
/// must not be evicted), with the title closed to new sessions from the check until
/// `delete` has run; whether it ran. Asked of the server's session table and broadcasts.
pub type UnlessInUse = Box<dyn Fn(&str, u32, &mut dyn FnMut()) -> bool + Send + Sync>;

/// What the fills use of the rest of the server.
pub struct FillEnv {
    /// The served objects (the volume: fills write to it).
    pub objects: Arc<Objects>,
    /// The configuration in force (range size, parallel ranges, `cache_max_bytes`).
    pub config: ConfigCell,
    /// The server's stop: a fill commits its front and ends.
    pub stop: Arc<Stop>,
    /// Deletes a title unless a session or broadcast uses it.
    pub unless_in_use: UnlessInUse,
    /// The descriptors a new object may take.
    pub descriptors: isnode_sys::fds::DescriptorRoom,
}

/// The fills of a server.
pub struct Fills {
    /// What they use of the rest of the server.
    pub env: FillEnv,
    pub(crate) origin: Option<Arc<Origin>>,
    /// The origin's requests run here (`None` without an origin).
    rt: Option<tokio::runtime::Runtime>,
    jobs: Mutex<HashMap<String, Arc<FillJob>>>,
    recent: Mutex<VecDeque<FillReport>>,
    /// When each complete title's origin ETag was last checked.
    checked: Mutex<HashMap<String, Instant>>,
    /// When each title's last use was recorded.
    pub(crate) touches: crate::touch::Touches,
    /// The viewers' requests waiting on fills now (`fill_max_waiters`).
    pub waiters: crate::limits::Waiters,
    /// Titles the origin lacked lately (`origin_miss_ttl_s`).
    pub misses: crate::limits::Misses,
    /// Set when the server drains: no new fill starts (those under way go on, serving the
    /// sessions that read them, until the server stops and they commit their front).
    draining: std::sync::atomic::AtomicBool,
    /// Their counters.
    pub counters: FillCounters,
}

impl Fills {
    /// The fills of a server with the origin of `config`, if any (its runtime started).
    pub fn new(config: &ServeConfig, env: FillEnv) -> Result<Fills, String> {
        let settings = OriginSettings::from_config(config)?;
        let (origin, rt) = match settings {
            None => (None, None),
            Some(s) => {
                let origin = Origin::new(&s).map_err(|e| e.to_string())?;
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .thread_name("isnode-origin")
                    .enable_all()
                    .build()
                    .map_err(|e| format!("starting the origin runtime: {e}"))?;
                tracing::info!(origin = origin.label(), "origin fills on");
                (Some(Arc::new(origin)), Some(rt))
            }
        };
        Ok(Fills {
            env,
            origin,
            rt,
            jobs: Mutex::default(),
            recent: Mutex::default(),
            checked: Mutex::default(),
            touches: crate::touch::Touches::default(),
            waiters: crate::limits::Waiters::default(),
            misses: crate::limits::Misses::default(),
            draining: std::sync::atomic::AtomicBool::new(false),
            counters: FillCounters::default(),
        })
    }

    /// The server drains: no new fill starts from now.
    pub fn drain(&self) {
        self.draining.store(true, Ordering::Release);
    }

    /// Whether the server drains.
    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// The origin and its runtime, if one is configured.
    pub fn origin(&self) -> Option<(&Arc<Origin>, tokio::runtime::Handle)> {
        Some((self.origin.as_ref()?, self.rt.as_ref()?.handle().clone()))
    }

    pub(crate) fn lock_jobs(&self) -> MutexGuard<'_, HashMap<String, Arc<FillJob>>> {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The fill of `name` running now, if any.
    pub fn job(&self, name: &str) -> Option<Arc<FillJob>> {
        self.lock_jobs().get(name).cloned()
    }

    /// Whether a title is being filled (it must not be evicted).
    pub fn is_filling(&self, name: &str) -> bool {
        self.lock_jobs().contains_key(name)
    }

    /// Forgets a finished job and keeps its report for `GET /v1/fills`.
    pub fn finished(&self, job: &Arc<FillJob>) {
        let mut jobs = self.lock_jobs();
        if jobs.get(&job.name).is_some_and(|j| Arc::ptr_eq(j, job)) {
            jobs.remove(&job.name);
        }
        drop(jobs);
        let report = job.report();
        if report.phase == crate::job::Phase::Failed && job.status() == Some(FillStatus::NotFound) {
            self.misses.remember(&job.name, Instant::now());
        }
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        recent.retain(|r| r.name != job.name);
        if recent.len() >= RECENT_FILLS {
            recent.pop_front();
        }
        recent.push_back(report);
    }

    /// Every fill running and the last ones finished (`GET /v1/fills`).
    pub fn reports(&self) -> Vec<FillReport> {
        let running: Vec<FillReport> = self.lock_jobs().values().map(|j| j.report()).collect();
        let recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        let mut all: Vec<FillReport> = recent
            .iter()
            .filter(|r| !running.iter().any(|x| x.name == r.name))
            .cloned()
            .collect();
        all.extend(running);
        all
    }

    /// Whether the origin ETag of complete title `name` is due for a check (at most every
    /// `interval`; 0: never); marks it checked now if so.
    pub fn check_due(&self, name: &str, interval: Duration) -> bool {
        if interval.is_zero() || self.origin.is_none() {
            return false;
        }
        let mut checked = self.checked.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        match checked.get(name) {
            Some(at) if now.duration_since(*at) < interval => false,
            _ => {
                if checked.len() > 100_000 {
                    checked.clear();
                }
                checked.insert(name.to_string(), now);
                true
            }
        }
    }

    /// Records that `name` was just found at the origin as the volume has it (a fill that
    /// completed): its next check is an interval away.
    pub fn mark_checked(&self, name: &str) {
        let mut checked = self.checked.lock().unwrap_or_else(|e| e.into_inner());
        checked.insert(name.to_string(), Instant::now());
    }

    /// The fills' counters now, with `sessions_held` (counted by the data plane).
    pub fn snapshot(&self, sessions_held: u64) -> FillSnapshot {
        let c = &self.counters;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        FillSnapshot {
            fill_bytes: load(&c.fill_bytes),
            origin_requests: load(&c.origin_requests),
            fills_active: self.lock_jobs().len() as u64,
            fills_started: load(&c.fills_started),
            fills_done: load(&c.fills_done),
            fill_errors: std::array::from_fn(|i| c.errors.get(i).map_or(0, load)),
            titles_evicted: load(&c.titles_evicted),
            sessions_held,
        }
    }
}

impl Drop for Fills {
    fn drop(&mut self) {
        // Dropped wherever the last reference goes (maybe on another runtime's thread):
        // never block there.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}
