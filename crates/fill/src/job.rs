//! One title's fill as its requests see it: the current version's front and serving view,
//! its progress, and why it failed.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use crate::status::FillStatus;
use serde::Serialize;

use crate::limits::ClientKey;
use crate::origin::OriginError;
use isnode_pool::front::{FillFront, FrontState, Wait};
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
    /// The client whose request started it (`None`: an operator's pre-fill, a resume).
    pub starter: Option<ClientKey>,
    state: Mutex<State>,
    /// Wakes the tasks waiting on the job (a waiter's task that is dropped, its client
    /// gone, stops waiting).
    changed: tokio::sync::Notify,
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
        FillJob::started_by(name, kind, None)
    }

    /// A job not started yet, started by `starter`'s request.
    pub fn started_by(name: &str, kind: FillKind, starter: Option<ClientKey>) -> FillJob {
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
            starter,
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
            changed: tokio::sync::Notify::new(),
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

    /// Wakes the tasks waiting on the job.
    fn wake(&self) {
        self.changed.notify_waiters();
    }

    /// Waits, without a thread, until `check` of the state answers or `deadline` passes
    /// (`None` then). Dropping the future stops the wait.
    async fn until<T>(
        &self,
        deadline: tokio::time::Instant,
        check: impl Fn(&State) -> Option<T>,
    ) -> Option<T> {
        loop {
            let notified = self.changed.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before the state is read: a move in between still wakes this.
            notified.as_mut().enable();
            if let Some(t) = check(&self.lock()) {
                return Some(t);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return check(&self.lock());
            }
        }
    }

    /// Without a thread: until the first codeword may be read, the
    /// fill fails, or `deadline` (`None`).
    pub async fn first_readable(
        &self,
        deadline: tokio::time::Instant,
    ) -> Option<Result<Arc<ObjectInfo>, JobFailure>> {
        self.until(deadline, first_of).await
    }

    /// Without a thread: the phase once the fill ends or at `deadline`.
    pub async fn ended(&self, deadline: tokio::time::Instant) -> Phase {
        let end = |st: &State| matches!(st.phase, Phase::Done | Phase::Failed).then_some(st.phase);
        match self.until(deadline, end).await {
            Some(p) => p,
            None => self.lock().phase,
        }
    }

    /// Without a thread: until codeword `sbn` of the version whose front is `front` may be
    /// read, that version fails, or `deadline`.
    pub async fn reached(
        &self,
        front: &FillFront,
        sbn: u32,
        deadline: tokio::time::Instant,
    ) -> Wait {
        let at = |_: &State| match (front.has(sbn), front.state()) {
            (true, _) => Some(Wait::Ready),
            (false, FrontState::Failed) => Some(Wait::Failed),
            _ => None,
        };
        self.until(deadline, at).await.unwrap_or(Wait::TimedOut)
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
        self.wake();
    }

    /// The serving view of the object being filled (first codewords committed or not).
    pub fn publish(&self, info: Arc<ObjectInfo>) {
        self.bitrate_bps
            .store(info.rec.bitrate_bps, Ordering::Relaxed);
        let mut st = self.lock();
        st.codewords = info.rec.codewords;
        st.info = Some(info);
        st.phase = Phase::Filling;
        self.wake();
    }

    /// The durable front moved: `pushed_bytes` bytes, `readable` codewords readable.
    pub fn progress(&self, pushed_bytes: u64, readable: u32) {
        let mut st = self.lock();
        st.pushed_bytes = pushed_bytes;
        st.readable_codewords = readable;
        st.front.advance(readable);
        self.wake();
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
        self.wake();
    }

    /// The fill failed for good.
    pub fn fail(&self, failure: JobFailure) {
        let mut st = self.lock();
        st.phase = Phase::Failed;
        st.failure = Some(failure);
        st.ended = Some(Instant::now());
        st.front.end(FrontState::Failed, 0);
        self.wake();
    }

    /// [`FillJob::fail`] with a message (`status`: 500 unless given).
    pub fn fail_with(&self, msg: String, status: Option<FillStatus>) {
        self.fail(JobFailure::Other {
            status: status.unwrap_or(FillStatus::Internal),
            msg,
        });
    }

    /// The first codewords if they may be read, or the failure; `None` while neither.
    pub fn first(&self) -> Option<Result<Arc<ObjectInfo>, JobFailure>> {
        first_of(&self.lock())
    }

    /// The failure's status, if the fill failed.
    pub fn status(&self) -> Option<FillStatus> {
        self.lock().failure.as_ref().map(|f| f.answer().0)
    }

    /// Whether the fill is complete (its object is then complete in the catalog, though the
    /// job may still be listed for a moment: [`super::Fills::job`]).
    pub fn is_done(&self) -> bool {
        self.lock().phase == Phase::Done
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

/// The fill's first codewords, if they may be read or it failed.
fn first_of(st: &State) -> Option<Result<Arc<ObjectInfo>, JobFailure>> {
    if let Some(f) = &st.failure {
        return Some(Err(f.clone()));
    }
    let info = st.info.as_ref()?;
    (info.readable(0) || st.phase == Phase::Done).then(|| Ok(info.clone()))
}
