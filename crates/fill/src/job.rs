//! One title's fill as its requests see it: the current version's front and serving view,
//! its progress, and why it failed.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use crate::status::FillStatus;
use serde::Serialize;

use crate::origin::OriginError;
use isnode_pool::front::{FillFront, FrontState};
use isnode_pool::objects::ObjectInfo;

/// Who asked for a fill.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FillKind {
    /// A viewer's request: as fast as the origin goes.
    Demand,
    /// An operator's pre-fill, at most this fast (bits per second; 0: unlimited).
    Prefill {
        /// The rate cap.
        rate_bps: u64,
    },
}

/// Why a fill failed, as a client is told.
#[derive(Clone, Debug)]
pub enum JobFailure {
    /// The origin's answer (`404`, `409`, `502`).
    Origin(OriginError),
    /// Anything else, with its status.
    Other {
        /// The status a request gets.
        status: FillStatus,
        /// Why.
        msg: String,
    },
}

impl JobFailure {
    /// The status and message a client gets.
    pub fn answer(&self) -> (FillStatus, String) {
        match self {
            JobFailure::Origin(e) => (e.status(), e.to_string()),
            JobFailure::Other { status, msg } => (*status, msg.clone()),
        }
    }
}

/// Where a fill is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Asking the origin (HEAD, probe) or resuming.
    Starting,
    /// Codewords are coming.
    Filling,
    /// Waiting to retry after an origin error (from the durable front).
    Retrying,
    /// Complete.
    Done,
    /// Failed for good.
    Failed,
}

struct State {
    front: Arc<FillFront>,
    info: Option<Arc<ObjectInfo>>,
    phase: Phase,
    failure: Option<JobFailure>,
    size_bytes: u64,
    pushed_bytes: u64,
    readable_codewords: u32,
    codewords: u32,
    attempts: u32,
    ended: Option<Instant>,
}

/// One title's fill.
pub struct FillJob {
    /// The title.
    pub name: String,
    /// The pre-fill's rate cap (bits per second; 0: unlimited); see
    /// [`FillJob::rate_cap_bps`].
    prefill_cap_bps: AtomicU64,
    /// Whether a viewer asked for the title (the cap is then at least twice its bitrate).
    demanded: AtomicBool,
    /// The title's bitrate once known.
    bitrate_bps: AtomicU64,
    /// Bytes read from the origin for this title.
    pub fetched_bytes: AtomicU64,
    /// Origin requests made for this title.
    pub origin_requests: AtomicU64,
    started: Instant,
    state: Mutex<State>,
    moved: Condvar,
}

/// A fill as `GET /v1/fills` reports it.
#[derive(Clone, Debug, Serialize)]
pub struct FillReport {
    /// The title.
    pub name: String,
    /// Where it is.
    pub phase: Phase,
    /// Its size at the origin (0 before the HEAD).
    pub size_bytes: u64,
    /// Bytes durable in the volume (the front, in bytes).
    pub filled_bytes: u64,
    /// Codewords readable (the fill front served).
    pub front_codewords: u32,
    /// Codewords of the object.
    pub codewords: u32,
    /// Bytes read from the origin (more than the size after retries).
    pub fetched_bytes: u64,
    /// Origin requests made.
    pub origin_requests: u64,
    /// Mean rate from the origin so far, bits per second.
    pub rate_bps: u64,
    /// The rate cap (0: unlimited).
    pub rate_cap_bps: u64,
    /// Attempts (1 + retries).
    pub attempts: u32,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl FillJob {
    /// A job not started yet.
    pub fn new(name: &str, kind: FillKind) -> FillJob {
        let cap = match kind {
            FillKind::Demand => 0,
            FillKind::Prefill { rate_bps } => rate_bps,
        };
        FillJob {
            name: name.to_string(),
            prefill_cap_bps: AtomicU64::new(cap),
            demanded: AtomicBool::new(kind == FillKind::Demand),
            bitrate_bps: AtomicU64::new(0),
            fetched_bytes: AtomicU64::new(0),
            origin_requests: AtomicU64::new(0),
            started: Instant::now(),
            state: Mutex::new(State {
                front: Arc::new(FillFront::new()),
                info: None,
                phase: Phase::Starting,
                failure: None,
                size_bytes: 0,
                pushed_bytes: 0,
                readable_codewords: 0,
                codewords: 0,
                attempts: 0,
                ended: None,
            }),
            moved: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Another request joins: a viewer raises a pre-fill's cap to at least twice the
    /// title's bitrate (the fill outruns the playing); a pre-fill with a higher cap (or
    /// none) raises it to that.
    pub fn join(&self, kind: FillKind) {
        match kind {
            FillKind::Demand => self.demanded.store(true, Ordering::Relaxed),
            FillKind::Prefill { rate_bps } => {
                let _ =
                    self.prefill_cap_bps
                        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
                            (c > 0 && (rate_bps == 0 || rate_bps > c)).then_some(rate_bps)
                        });
            }
        }
    }

    /// The rate cap in force, bits per second (0: unlimited): a pre-fill's cap, raised to
    /// twice the title's bitrate once a viewer asks for it; none for a viewer's fill.
    pub fn rate_cap_bps(&self) -> u64 {
        let cap = self.prefill_cap_bps.load(Ordering::Relaxed);
        if cap == 0 || !self.demanded.load(Ordering::Relaxed) {
            return cap;
        }
        let bitrate = self.bitrate_bps.load(Ordering::Relaxed);
        match bitrate {
            0 => 0,
            b => cap.max(b.saturating_mul(2)),
        }
    }

    /// The front of the version being filled.
    pub fn front(&self) -> Arc<FillFront> {
        self.lock().front.clone()
    }

    /// A new attempt begins (size known); `fresh`: a new version (the old front fails, its
    /// readers stop).
    pub fn begin_attempt(&self, size_bytes: u64, fresh: bool) {
        let mut st = self.lock();
        st.attempts += 1;
        st.size_bytes = size_bytes;
        st.phase = Phase::Starting;
        if fresh && st.info.is_some() {
            st.front.end(FrontState::Failed, 0);
            st.front = Arc::new(FillFront::new());
            st.info = None;
            st.pushed_bytes = 0;
            st.readable_codewords = 0;
        }
        self.moved.notify_all();
    }

    /// The serving view of the object being filled (first codewords committed or not).
    pub fn publish(&self, info: Arc<ObjectInfo>) {
        self.bitrate_bps
            .store(info.rec.bitrate_bps, Ordering::Relaxed);
        let mut st = self.lock();
        st.codewords = info.rec.codewords;
        st.info = Some(info);
        st.phase = Phase::Filling;
        self.moved.notify_all();
    }

    /// The durable front moved: `pushed_bytes` bytes, `readable` codewords readable.
    pub fn progress(&self, pushed_bytes: u64, readable: u32) {
        let mut st = self.lock();
        st.pushed_bytes = pushed_bytes;
        st.readable_codewords = readable;
        st.front.advance(readable);
        self.moved.notify_all();
    }

    /// Waiting to retry after an origin error.
    pub fn retrying(&self) {
        self.lock().phase = Phase::Retrying;
    }

    /// The fill is complete.
    pub fn done(&self) {
        let mut st = self.lock();
        st.phase = Phase::Done;
        st.readable_codewords = st.codewords;
        st.pushed_bytes = st.size_bytes;
        st.ended = Some(Instant::now());
        st.front.end(FrontState::Complete, st.codewords);
        self.moved.notify_all();
    }

    /// The fill failed for good.
    pub fn fail(&self, failure: JobFailure) {
        let mut st = self.lock();
        st.phase = Phase::Failed;
        st.failure = Some(failure);
        st.ended = Some(Instant::now());
        st.front.end(FrontState::Failed, 0);
        self.moved.notify_all();
    }

    /// [`FillJob::fail`] with a message (`status`: 500 unless given).
    pub fn fail_with(&self, msg: String, status: Option<FillStatus>) {
        self.fail(JobFailure::Other {
            status: status.unwrap_or(FillStatus::Internal),
            msg,
        });
    }

    /// Waits until the first codeword may be read (the serving view), the fill fails, or
    /// `deadline` (`None`).
    pub fn wait_first(&self, deadline: Instant) -> Option<Result<Arc<ObjectInfo>, JobFailure>> {
        let mut st = self.lock();
        loop {
            if let Some(f) = &st.failure {
                return Some(Err(f.clone()));
            }
            if let Some(info) = &st.info {
                if info.readable(0) || st.phase == Phase::Done {
                    return Some(Ok(info.clone()));
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            st = match self.moved.wait_timeout(st, deadline - now) {
                Ok((g, _)) => g,
                Err(e) => e.into_inner().0,
            };
        }
    }

    /// Whether the fill is complete (its object is then complete in the catalog, though the
    /// job may still be listed for a moment: [`super::Fills::job`]).
    pub fn is_done(&self) -> bool {
        self.lock().phase == Phase::Done
    }

    /// Waits until the fill ends (done or failed) or `deadline`; its phase then.
    pub fn wait_end(&self, deadline: Instant) -> Phase {
        let mut st = self.lock();
        loop {
            if matches!(st.phase, Phase::Done | Phase::Failed) || Instant::now() >= deadline {
                return st.phase;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            st = match self.moved.wait_timeout(st, left) {
                Ok((g, _)) => g,
                Err(e) => e.into_inner().0,
            };
        }
    }

    /// Its state for `GET /v1/fills`.
    pub fn report(&self) -> FillReport {
        let st = self.lock();
        let fetched = self.fetched_bytes.load(Ordering::Relaxed);
        let secs = st
            .ended
            .unwrap_or_else(Instant::now)
            .duration_since(self.started)
            .as_secs_f64();
        FillReport {
            name: self.name.clone(),
            phase: st.phase,
            size_bytes: st.size_bytes,
            filled_bytes: st.pushed_bytes,
            front_codewords: st.readable_codewords,
            codewords: st.codewords,
            fetched_bytes: fetched,
            origin_requests: self.origin_requests.load(Ordering::Relaxed),
            rate_bps: if secs > 0.0 {
                (fetched as f64 * 8.0 / secs) as u64
            } else {
                0
            },
            rate_cap_bps: self.rate_cap_bps(),
            attempts: st.attempts,
            error: st.failure.as_ref().map(|f| f.answer().1),
        }
    }
}
