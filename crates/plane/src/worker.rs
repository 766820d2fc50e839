//! Data-plane threads. Each owns its sessions (handed over through a bounded channel),
//! drives their pacers with the real clock, sends from the shared block pool with its
//! engine (`send.rs`, `sendfile.rs`, `traditional.rs`), reads ahead
//! (`isnode_pool::reader`), and rebuilds the symbols of a failed member (`degraded.rs`).
//!
//! Nothing here waits for a read: a burst whose block is not in memory yet starts the
//! read and the session is retried after [`RETRY_BACKOFF_NS`], so one slow disk never
//! stalls the thread's other sessions and a full pool never spins the thread. A thread
//! that panics records why with the server's `Stop::fail` and stops the
//! server: the process fails loudly instead of running half-alive.

use std::collections::HashMap;
use std::net::UdpSocket;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use isnode_fec::Code;
use isnode_pool::cache::BlockKey;
use isnode_pool::demand::{LazyDemand, Positions};
use isnode_pool::front::FrontState;
use isnode_pool::objects::ObjectInfo;
use isnode_pool::reader::{Prefetch, Reader, QUEUE_DEPTH};
use isnode_serve_config::{EngineKind, ReadIo};
use isnode_serve_core::admission::LOOKAHEAD_CODEWORDS;
use isnode_serve_core::pacer::{blocks_of, RepairCounts, Step};
use isnode_serve_core::repair_policy::repair_symbols;
use isnode_serve_core::slack::LATE_BURST_NS;
use isnode_serve_core::{batch, slack};
use isnode_sys::event::IDLE_WAIT;
use isnode_sys::net;

use crate::active::{Active, Dest, Mode, Sent};
use crate::baseline::Baseline;
use crate::deps::PlaneDeps;
use crate::msg::{NewSession, PlaneMsg};
use crate::rebuild::Rebuild;
use crate::segment_files::SegmentFiles;
use crate::stream::{Control, Expiry, SessionState};
use crate::uring::UringSender;

/// Most steps one session may take per loop iteration (catching up stays bounded).
const MAX_STEPS_PER_TURN: u32 = 256;
/// Most new sessions taken per loop iteration.
const MAX_NEW_PER_TURN: usize = 1024;
/// Most blocks read ahead per loop iteration with synchronous reads (asynchronous ones
/// are bounded by the read queue's depth).
const READ_AHEAD_PER_TURN: usize = 8;
/// A session whose block is not in memory (or the pool is full) is retried this much later.
const RETRY_BACKOFF_NS: u64 = 1_000_000;
/// Longest sleep while block reads are in flight (completions are reaped by the loop).
const READ_POLL: Duration = Duration::from_millis(1);
/// Longest sleep of an idle loop (at least the largest pacing slack, so a thread at low
/// load sleeps from one batch to the next: [`batch`]).
const MAX_IDLE: Duration = Duration::from_nanos(batch::MAX_SLACK_NS);
/// Longest sleep of a thread without sessions: its queue wakes it for a new session, a
/// control request or the server's stop (`Stop::stop` wakes it), so it need not
/// look every [`MAX_IDLE`].
const EMPTY_IDLE: Duration = IDLE_WAIT;
/// Positions are published for eviction decisions at most this often.
const PUBLISH_EVERY_NS: u64 = 5_000_000;

pub(crate) struct Worker {
    pub(crate) deps: Arc<PlaneDeps>,
    /// Whether a wake-up is queued for each thread (this one's is cleared when taken).
    pub(crate) queued: Arc<[AtomicBool]>,
    /// Index of this thread (its row on the position board).
    pub(crate) index: usize,
    pub(crate) mode: Mode,
    /// Fills the pool (io_uring or pread).
    pub(crate) reader: Reader,
    pub(crate) v4: Option<UdpSocket>,
    pub(crate) v6: Option<UdpSocket>,
    pub(crate) rebuild: Rebuild,
    pub(crate) codes: HashMap<u32, Code>,
    /// Packets built by this thread (rebuilt runs): up to one burst.
    pub(crate) out: Vec<u8>,
    pub(crate) published_ns: u64,
    /// Whether this thread had sessions at its last publication (a thread whose sessions
    /// all ended publishes at once, before its long sleep).
    pub(crate) published_sessions: bool,
    /// Streams in this thread's last published slack (its first wakes the viewer-pace
    /// writer).
    pub(crate) published_streams: u32,
    /// Open segment files (`sendfile` only).
    pub(crate) files: SegmentFiles,
    /// How early bursts may leave, from this thread's burst rate: bursts due within the
    /// slack are sent in the same turn, so the thread wakes about once per slack instead of
    /// once per burst (each wake-up is a context switch for the server and, on loopback,
    /// for the receivers it wakes). Measured with `bench load` (sendfile, 200 streams): a
    /// fixed 2 ms → 8 ms cut server CPU per GB from 0.36 to 0.24 s; 16 ms gained nothing
    /// more there; below that load the slack grows ([`batch`]).
    pub(crate) batch: batch::BatchWindow,
    /// Bursts sent in this loop turn (for [`Worker::batch`]).
    pub(crate) bursts_this_turn: u64,
}

/// The data-plane thread body: runs the loop, and turns a panic into a recorded failure
/// that stops the server (never a silently dead thread).
pub(crate) fn worker(
    deps: Arc<PlaneDeps>,
    queued: Arc<[AtomicBool]>,
    index: usize,
    rx: Receiver<PlaneMsg>,
) {
    let d = deps.clone();
    let run = std::panic::catch_unwind(AssertUnwindSafe(|| run(d, queued, index, rx)));
    if let Err(payload) = run {
        let why = payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "unknown panic".into());
        let msg = format!("data-plane thread {index} panicked: {why}");
        tracing::error!("{msg}; stopping the server");
        deps.stop.fail(msg);
    }
}

fn run(deps: Arc<PlaneDeps>, queued: Arc<[AtomicBool]>, index: usize, rx: Receiver<PlaneMsg>) {
    let mut w = Worker::new(deps, queued, index);
    let mut sessions: Vec<Active> = Vec::with_capacity(64);
    while !w.deps.stop.is_stopped() {
        w.reader.poll();
        for msg in rx.try_iter().take(MAX_NEW_PER_TURN) {
            match msg {
                PlaneMsg::New(ns) => sessions.push(w.admit(*ns)),
                PlaneMsg::Wake => w.woken(),
            }
        }
        w.serve(&mut sessions);
        if let Mode::Uring(u) = &mut w.mode {
            u.flush();
        }
        match w.mode {
            Mode::Traditional => {}
            Mode::Sendfile => w.advise_ahead(&mut sessions),
            _ => w.read_ahead(&mut sessions),
        }
        w.publish(&sessions);
        let wait = w.idle_time(&sessions);
        if wait.is_zero() {
            continue;
        }
        if w.reader.in_flight() > 0 {
            // Wake on the first completion; new sessions wait at most READ_POLL.
            w.reader.wait(wait.min(READ_POLL));
            continue;
        }
        match rx.recv_timeout(wait) {
            Ok(PlaneMsg::New(ns)) => sessions.push(w.admit(*ns)),
            Ok(PlaneMsg::Wake) => w.woken(),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    if let Mode::Uring(u) = &mut w.mode {
        u.drain(Duration::from_secs(2));
    }
    w.reader.drain(Duration::from_secs(2));
}

/// `ISNODE_FAULT=plane-panic` (debug builds only): the thread panics on its first
/// session, for the test that a dead data-plane thread stops the server.
fn injected_panic() -> bool {
    cfg!(debug_assertions) && std::env::var_os("ISNODE_FAULT").is_some_and(|v| v == "plane-panic")
}

impl Worker {
    fn new(deps: Arc<PlaneDeps>, queued: Arc<[AtomicBool]>, index: usize) -> Worker {
        let params = deps.params;
        let n_max = (params.source_symbols + params.repair_symbols) as usize;
        let mode = match deps.engine {
            EngineKind::Gso => Mode::Gso,
            EngineKind::Sendmmsg => Mode::Mmsg,
            EngineKind::Traditional => Mode::Traditional,
            EngineKind::Sendfile => Mode::Sendfile,
            EngineKind::UringZc => match UringSender::new(&deps.cache, deps.clone()) {
                Ok(u) => Mode::Uring(Box::new(u)),
                Err(err) => {
                    tracing::error!(
                        "io_uring setup failed ({err}); this thread uses the gso engine"
                    );
                    Mode::Gso
                }
            },
        };
        let read_io = match mode {
            Mode::Traditional | Mode::Sendfile => ReadIo::Sync,
            _ => deps.read_io,
        };
        let (on_fail, on_ok) = (deps.members.clone(), deps.members.clone());
        let reader = Reader::new(
            &deps.cache,
            read_io,
            Box::new(move |key: &BlockKey, why| on_fail.read_failed(key, why)),
        )
        .on_ok(Box::new(move |key: &BlockKey, latency| {
            on_ok.read_ok(key.member, latency)
        }));
        Worker {
            mode,
            reader,
            v4: None,
            v6: None,
            rebuild: Rebuild::new(params.symbol_len as usize, n_max),
            codes: HashMap::new(),
            out: vec![0; net::MAX_SEND_BYTES.max(params.packet_len() as usize)],
            published_ns: 0,
            published_sessions: false,
            published_streams: 0,
            files: SegmentFiles::default(),
            batch: batch::BatchWindow::new(deps.clock.now_ns()),
            bursts_this_turn: 0,
            index,
            queued,
            deps,
        }
    }

    /// The thread took its wake-up: the next control request queues another.
    fn woken(&self) {
        if let Some(q) = self.queued.get(self.index) {
            q.store(false, Ordering::Release);
        }
    }

    fn admit(&mut self, ns: NewSession) -> Active {
        assert!(!injected_panic(), "injected fault: plane-panic");
        let baseline = matches!(self.mode, Mode::Traditional)
            .then(|| Box::new(Baseline::new(&ns.shared.object)));
        Active {
            dest: Dest::new(ns.shared.dest),
            repair_dest: ns.shared.repair_dest.map(Dest::new),
            s: ns.shared,
            pacer: ns.pacer,
            read_ahead_at: None,
            retry_at_ns: 0,
            waiting_since_ns: 0,
            baseline,
            applied_loss: None,
            repair_counted: RepairCounts::default(),
            held: false,
        }
    }

    /// Gives every session its turn; drops the ones that ended.
    fn serve(&mut self, sessions: &mut Vec<Active>) {
        let now = self.deps.clock.now_ns();
        let mut i = 0;
        while i < sessions.len() {
            if self.serve_one(&mut sessions[i], now) {
                i += 1;
            } else {
                self.deps
                    .counters
                    .sessions_ended
                    .fetch_add(1, Ordering::Relaxed);
                sessions.swap_remove(i);
            }
        }
        let bursts = std::mem::take(&mut self.bursts_this_turn);
        self.batch.record(bursts, now);
    }

    /// One session's turn; false once it has ended (deleted, expired, or done).
    fn serve_one(&mut self, a: &mut Active, now: u64) -> bool {
        if a.s.state() != SessionState::Streaming {
            return false;
        }
        let idle = now.saturating_sub(a.s.last_keepalive_ns.load(Ordering::Acquire));
        let timeout_ns = self
            .deps
            .config
            .load()
            .session_timeout_ms
            .saturating_mul(1_000_000);
        if a.s.expiry == Expiry::Keepalive && idle > timeout_ns {
            if a.s.end(SessionState::Expired, now) {
                self.deps
                    .counters
                    .sessions_expired
                    .fetch_add(1, Ordering::Relaxed);
                tracing::info!(id = %a.s.id, "session expired: no keepalive for {} ms", idle / 1_000_000);
            }
            return false;
        }
        apply_controls(a, now);
        match hold(a, now) {
            Hold::Go if now >= a.retry_at_ns => self.turn(a, now),
            Hold::Go | Hold::Wait => {}
            Hold::End => {
                if a.s.end(SessionState::Expired, now) {
                    tracing::warn!(id = %a.s.id, object = %a.s.object.rec.name, "session ended: its fill from the origin failed");
                }
                return false;
            }
        }
        if a.pacer.is_done() {
            a.s.end(SessionState::Done, self.deps.clock.now_ns());
            tracing::info!(id = %a.s.id, "session done");
            return false;
        }
        true
    }

    /// Sends what is due for one session (bounded); a step that must wait backs the
    /// session off for [`RETRY_BACKOFF_NS`].
    fn turn(&mut self, a: &mut Active, now: u64) {
        self.adapt_repair(a);
        for _ in 0..MAX_STEPS_PER_TURN {
            let Some(step) = a.pacer.peek(now + a.pacer.early_ns(self.batch.slack_ns())) else {
                break;
            };
            let due = a.pacer.next_due().unwrap_or(now);
            if let Step::Burst(b) = &step {
                if !a.s.object.readable(b.sbn) {
                    // Held at the fill front from when the burst was due: not late later.
                    a.pacer.pause(due.min(now));
                    if !a.held {
                        a.held = true;
                        let holds = &self.deps.counters.sessions_held;
                        holds.fetch_add(1, Ordering::Relaxed);
                    }
                    break;
                }
            }
            let burst = matches!(step, Step::Burst(_));
            let sent = match step {
                Step::Fdt { .. } => {
                    self.send_fdt(a);
                    Sent::Yes
                }
                Step::Burst(b) if a.baseline.is_some() => {
                    self.send_baseline(a, &b);
                    Sent::Yes
                }
                Step::Burst(b) if matches!(self.mode, Mode::Sendfile) => self.send_sendfile(a, &b),
                Step::Burst(b) => self.send_burst(a, &b, now),
            };
            if sent == Sent::Later {
                a.retry_at_ns = now + RETRY_BACKOFF_NS;
                if a.waiting_since_ns == 0 {
                    a.waiting_since_ns = now.max(1);
                }
                break;
            }
            a.waiting_since_ns = 0;
            self.bursts_this_turn += u64::from(burst);
            if burst && now > due.saturating_add(LATE_BURST_NS) {
                let late = &self.deps.counters.bursts_late;
                late.fetch_add(1, Ordering::Relaxed);
            }
            if sent == Sent::Yes {
                a.pacer.advance(now);
            }
        }
        a.s.next_codeword
            .store(a.pacer.codeword(), Ordering::Relaxed);
        self.count_repair(a);
    }

    /// Adaptive repair: a new loss report from the client sets how many stored repair
    /// symbols the codewords from now on send ([`repair_symbols`]).
    fn adapt_repair(&self, a: &mut Active) {
        let report = a.s.loss_report();
        if report == a.applied_loss {
            return;
        }
        a.applied_loss = report;
        let p = a.s.object.layout.params();
        let r = repair_symbols(report, p.source_symbols, p.repair_symbols);
        a.pacer.set_repair_limit(report.map(|_| r));
    }

    /// Adds the repair packets sent and skipped since the last turn to the metrics.
    fn count_repair(&self, a: &mut Active) {
        let c = a.pacer.repair_counts();
        let sent = c.sent - a.repair_counted.sent;
        let skipped = c.skipped - a.repair_counted.skipped;
        a.repair_counted = c;
        if sent > 0 {
            self.deps
                .counters
                .repair_sent
                .fetch_add(sent, Ordering::Relaxed);
            a.s.repair_sent.fetch_add(sent, Ordering::Relaxed);
        }
        if skipped > 0 {
            let m = &self.deps.counters;
            m.repair_skipped.fetch_add(skipped, Ordering::Relaxed);
            a.s.repair_skipped.fetch_add(skipped, Ordering::Relaxed);
        }
    }

    /// How long the loop may sleep: until the next step is due or a backed-off session may
    /// retry, at most [`MAX_IDLE`] ([`EMPTY_IDLE`] without sessions; 1 ms while zero-copy
    /// sends await their notification).
    fn idle_time(&self, sessions: &[Active]) -> Duration {
        let now = self.deps.clock.now_ns();
        let next = next_wake_ns(sessions.iter().map(|a| (a.pacer.next_due(), a.retry_at_ns)));
        let longest = match sessions.is_empty() {
            true => EMPTY_IDLE,
            false => MAX_IDLE,
        };
        let mut wait = Duration::from_nanos(next.saturating_sub(now)).min(longest);
        if let Mode::Uring(u) = &self.mode {
            if u.in_flight() > 0 {
                wait = wait.min(Duration::from_millis(1));
            }
        }
        wait
    }

    /// Publishes where this thread's sessions are (for eviction) and their playback slack
    /// (for pacing background work: [`slack`]), at most every [`PUBLISH_EVERY_NS`], and at
    /// once when its last session ended (the thread may then sleep [`EMPTY_IDLE`]).
    fn publish(&mut self, sessions: &[Active]) {
        let now = self.deps.clock.now_ns();
        let emptied = sessions.is_empty() && self.published_sessions;
        if now.saturating_sub(self.published_ns) < PUBLISH_EVERY_NS && !emptied {
            return;
        }
        self.published_ns = now;
        let deadlines = sessions.iter().map(|a| a.pacer.playback_deadline_ns());
        let s = slack::PlaybackSlack::of(deadlines, now);
        self.deps.slack.publish(self.index, s);
        if self.published_streams == 0 && s.streams > 0 {
            self.deps.pace.set();
        }
        self.published_streams = s.streams;
        self.published_sessions = !sessions.is_empty();
        let mut positions = Positions::new();
        for a in sessions {
            positions
                .entry(a.s.object.rec.toi)
                .or_insert_with(|| (a.s.object.clone(), Vec::new()))
                .1
                .push(a.pacer.codeword());
        }
        for (_, at) in positions.values_mut() {
            at.sort_unstable();
        }
        self.files.retain_titles(|toi| positions.contains_key(&toi));
        self.deps.positions.publish(self.index, positions);
    }

    /// Starts reading the blocks of each session's next codewords that are not in the
    /// pool (bounded: the read queue's free depth, or [`READ_AHEAD_PER_TURN`] synchronous
    /// reads), then submits them.
    fn read_ahead(&mut self, sessions: &mut [Active]) {
        let limit = match self.reader.kind() {
            ReadIo::Uring => QUEUE_DEPTH,
            ReadIo::Sync => READ_AHEAD_PER_TURN,
        };
        let mut budget = self.reader.room().min(limit);
        let demand = LazyDemand::new(&self.deps.positions);
        'sessions: for a in sessions.iter_mut() {
            // Nothing is read for a session whose destination has not echoed its token.
            if a.pacer.is_done() || !a.s.validated.load(Ordering::Acquire) {
                continue;
            }
            let c = a.pacer.codeword();
            if a.read_ahead_at == Some(c) {
                continue;
            }
            let obj = a.s.object.clone();
            let ahead = c.saturating_add(LOOKAHEAD_CODEWORDS);
            let end = readable_end(&obj).min(ahead);
            let mut complete = end == ahead;
            for (member, block) in blocks_of(&obj.layout, c..end) {
                let key = BlockKey {
                    toi: obj.rec.toi,
                    member,
                    block,
                };
                if self.deps.cache.contains(&key) || !self.may_read_ahead(member) {
                    continue;
                }
                if budget == 0 {
                    break 'sessions;
                }
                budget -= 1;
                if self.reader.prefetch(key, &*obj, &demand) == Prefetch::NoRoom {
                    complete = false;
                }
            }
            if complete {
                a.read_ahead_at = Some(c);
            }
        }
        self.reader.poll();
    }
}

impl Worker {
    /// Whether read-ahead may start a read of `member`: never for a failed member, and
    /// for the hedged (slow) member only while none of its reads is in flight here (one
    /// probe at a time tells when it is fast again).
    fn may_read_ahead(&self, member: u32) -> bool {
        isnode_serve_core::member_health::may_read_ahead(
            &self.deps.members.health,
            member,
            self.deps.clock.now_ns(),
            self.reader.in_flight_of(member),
        )
    }
}

/// The codeword before which `obj` may be read ahead: all of it unless it is filling.
pub fn readable_end(obj: &ObjectInfo) -> u32 {
    match &obj.fill {
        Some(f) if f.state() != FrontState::Complete => f.readable(),
        _ => u32::MAX,
    }
}

/// What a session at its object's fill front does this turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hold {
    /// Its codeword is readable: it goes on (released if it was held).
    Go,
    /// Held: nothing is sent, its pacer stays paused (not fed zeros, not late).
    Wait,
    /// The fill failed: the session ends rather than get another version's bytes.
    End,
}

/// Holds a session whose next codeword is past its object's fill front (its pacer
/// paused); releases it once the front passes, unless its client paused it or has not
/// validated it.
fn hold(a: &mut Active, now: u64) -> Hold {
    let Some(front) = &a.s.object.fill else {
        return Hold::Go;
    };
    if a.pacer.is_done() || front.has(a.pacer.codeword()) {
        if a.held {
            a.held = false;
            if !a.s.paused.load(Ordering::Acquire) && a.s.validated.load(Ordering::Acquire) {
                a.pacer.resume(now);
            }
        }
        return Hold::Go;
    }
    if front.state() == FrontState::Failed {
        return Hold::End;
    }
    a.held = true;
    a.pacer.pause(now);
    Hold::Wait
}

/// Applies the session's queued control requests (seek, pause, resume) to its pacer.
fn apply_controls(a: &mut Active, now: u64) {
    for c in a.s.take_controls() {
        match c {
            Control::Pause => a.pacer.pause(now),
            Control::Resume => a.pacer.resume(now),
            Control::Start(burst) => a.pacer.start(burst, now),
            Control::Seek(codeword) => {
                if let Err(e) = a.pacer.seek(codeword, now) {
                    tracing::warn!(id = %a.s.id, "seek refused by the pacer: {e}");
                }
                a.retry_at_ns = 0;
            }
        }
    }
}

/// When the loop must wake next, from each session's (next step due, retry not before):
/// a session backed off after waiting for a block wakes the loop at its retry time, never
/// earlier (the loop does not spin on a step that cannot go out yet).
fn next_wake_ns(sessions: impl Iterator<Item = (Option<u64>, u64)>) -> u64 {
    sessions
        .filter_map(|(due, retry_at)| Some(due?.max(retry_at)))
        .min()
        .unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backed_off_session_does_not_wake_the_loop_early() {
        // Due long ago, but waiting for its block until 5 ms: the loop sleeps until then.
        assert_eq!(
            next_wake_ns([(Some(1_000), 5_000_000)].into_iter()),
            5_000_000
        );
        // Another session due earlier wins; a finished one (no next step) never wakes it.
        let s = [(Some(1_000), 5_000_000), (Some(3_000_000), 0), (None, 0)];
        assert_eq!(next_wake_ns(s.into_iter()), 3_000_000);
        assert_eq!(next_wake_ns([(None, 7)].into_iter()), u64::MAX);
    }
}
