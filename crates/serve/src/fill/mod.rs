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

mod content_check;
mod evict;
mod job;
mod lookup;
mod probe;
mod resume;
mod run;
mod touch;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub(crate) use job::{FillJob, FillKind, FillReport};
pub(crate) use lookup::object_for;
pub(crate) use resume::resume_all;

use crate::origin::{ErrorClass, Origin, OriginSettings};

/// How long a request waits for a fill's first codewords before `503` (a slow origin).
pub(crate) const FIRST_BYTES_WAIT: Duration = Duration::from_secs(30);
/// How long a reader (HTTP body, digests) waits at the front for one codeword.
pub(crate) const FRONT_WAIT: Duration = Duration::from_secs(30);
/// Finished fills `GET /v1/fills` still reports.
const RECENT_FILLS: usize = 64;

/// The counters of the fills (metrics, status).
#[derive(Debug, Default)]
pub(crate) struct FillCounters {
    pub fill_bytes: AtomicU64,
    pub origin_requests: AtomicU64,
    pub fills_started: AtomicU64,
    pub fills_done: AtomicU64,
    pub errors: [AtomicU64; 5],
    pub titles_evicted: AtomicU64,
}

impl FillCounters {
    /// Counts a failed origin request of class `c`.
    pub(crate) fn error(&self, c: ErrorClass) {
        if let Some(a) = self.errors.get(c.index()) {
            a.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The fills of a server.
pub(crate) struct Fills {
    origin: Option<Arc<Origin>>,
    /// The origin's requests run here (`None` without an origin).
    rt: Option<tokio::runtime::Runtime>,
    jobs: Mutex<HashMap<String, Arc<FillJob>>>,
    recent: Mutex<VecDeque<FillReport>>,
    /// When each complete title's origin ETag was last checked.
    checked: Mutex<HashMap<String, Instant>>,
    /// When each title's last use was recorded.
    touches: touch::Touches,
    pub counters: FillCounters,
}

impl Fills {
    /// The fills of a server with the origin of `config`, if any (its runtime started).
    pub(crate) fn new(config: &crate::ServeConfig) -> Result<Fills, String> {
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
            origin,
            rt,
            jobs: Mutex::default(),
            recent: Mutex::default(),
            checked: Mutex::default(),
            touches: touch::Touches::default(),
            counters: FillCounters::default(),
        })
    }

    /// The origin and its runtime, if one is configured.
    pub(crate) fn origin(&self) -> Option<(&Arc<Origin>, tokio::runtime::Handle)> {
        Some((self.origin.as_ref()?, self.rt.as_ref()?.handle().clone()))
    }

    fn lock_jobs(&self) -> MutexGuard<'_, HashMap<String, Arc<FillJob>>> {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The fill of `name` running now, if any.
    pub(crate) fn job(&self, name: &str) -> Option<Arc<FillJob>> {
        self.lock_jobs().get(name).cloned()
    }

    /// Whether a title is being filled (it must not be evicted).
    pub(crate) fn is_filling(&self, name: &str) -> bool {
        self.lock_jobs().contains_key(name)
    }

    /// Forgets a finished job and keeps its report for `GET /v1/fills`.
    fn finished(&self, job: &Arc<FillJob>) {
        let mut jobs = self.lock_jobs();
        if jobs.get(&job.name).is_some_and(|j| Arc::ptr_eq(j, job)) {
            jobs.remove(&job.name);
        }
        drop(jobs);
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        recent.retain(|r| r.name != job.name);
        if recent.len() >= RECENT_FILLS {
            recent.pop_front();
        }
        recent.push_back(job.report());
    }

    /// Every fill running and the last ones finished (`GET /v1/fills`).
    pub(crate) fn reports(&self) -> Vec<FillReport> {
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
    pub(crate) fn check_due(&self, name: &str, interval: Duration) -> bool {
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
    pub(crate) fn mark_checked(&self, name: &str) {
        let mut checked = self.checked.lock().unwrap_or_else(|e| e.into_inner());
        checked.insert(name.to_string(), Instant::now());
    }

    /// The counters as the metrics and status report them.
    /// The fills' counters now, with `sessions_held` (counted by the data plane).
    pub(crate) fn snapshot(&self, sessions_held: u64) -> crate::metrics::FillSnapshot {
        let c = &self.counters;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        crate::metrics::FillSnapshot {
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

/// Starts the fill of `name` unless one runs (then joins it: one fill per title); the job.
/// An error without an origin.
pub(crate) fn start_or_join(
    sh: &Arc<crate::Shared>,
    name: &str,
    kind: FillKind,
) -> Result<Arc<FillJob>, String> {
    if sh.fills.origin.is_none() {
        return Err("no origin is configured".into());
    }
    let mut jobs = sh.fills.lock_jobs();
    if let Some(j) = jobs.get(name) {
        j.join(kind);
        return Ok(j.clone());
    }
    let job = Arc::new(FillJob::new(name, kind));
    jobs.insert(name.to_string(), job.clone());
    drop(jobs);
    sh.fills
        .counters
        .fills_started
        .fetch_add(1, Ordering::Relaxed);
    let (sh2, j2) = (sh.clone(), job.clone());
    let spawned = std::thread::Builder::new()
        .name("isnode-fill".into())
        .spawn(move || {
            run::run(&sh2, &j2);
            sh2.fills.finished(&j2);
        });
    if let Err(e) = spawned {
        job.fail_with(format!("starting the fill thread: {e}"), None);
        sh.fills.finished(&job);
        return Err(format!("starting the fill thread: {e}"));
    }
    Ok(job)
}
