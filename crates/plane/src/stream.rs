//! The hand-off record between the control API and the data plane: what both know about
//! one stream (a unicast session or a broadcast channel), its lifecycle, and the control
//! requests the API queues for the data plane to apply.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use isnode_pool::objects::ObjectInfo;
use isnode_proto::keepalive::ReplayWindow;

/// Lifecycle of a session, as published by the data plane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum SessionState {
    /// Sending (or paused, or waiting for its token's echo).
    Streaming = 0,
    /// Sent to its end.
    Done = 1,
    /// Ended without keepalives (or its fill failed).
    Expired = 2,
    /// Deleted by its owner or an operator.
    Deleted = 3,
}

impl SessionState {
    /// The state as the API reports it.
    pub fn wire(self) -> isnode_proto::SessionState {
        match self {
            SessionState::Streaming => isnode_proto::SessionState::Streaming,
            _ => isnode_proto::SessionState::Done,
        }
    }
}

/// A control request for the data plane to apply to a session's pacer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// Continue from this codeword.
    Seek(u32),
    /// Stop sending until resumed.
    Pause,
    /// Send again.
    Resume,
    /// The destination echoed its token: start sending, with this start-up burst.
    Start(isnode_serve_core::pacer::StartBurst),
}

/// Most control requests waiting for the data plane per session (more are refused).
pub const MAX_PENDING_CONTROLS: usize = 16;

/// What the control API and the data plane share about one session.
pub struct StreamShared {
    /// Its id (the API's).
    pub id: String,
    /// The object it sends.
    pub object: Arc<ObjectInfo>,
    /// The FDT instance's ALC packets (TOI 0), built for this session (fresh `Expires`).
    pub fdt_packets: Vec<Vec<u8>>,
    /// Where its packets go.
    pub dest: SocketAddr,
    /// A broadcast channel's repair group (its repair packets go there, the rest to `dest`).
    pub repair_dest: Option<SocketAddr>,
    /// Whether it ends without keepalives.
    pub expiry: Expiry,
    /// The client that asked for it.
    pub peer_ip: IpAddr,
    /// Its send rate, bits per second.
    pub send_rate_bps: u64,
    /// The codeword it started from.
    pub start_codeword: u32,
    /// When it was created (server clock, ns): the start-up latency counts from it.
    pub created_ns: u64,
    /// The codeword it is at (published by the data plane).
    pub next_codeword: AtomicU32,
    /// Packets sent.
    pub packets_sent: AtomicU64,
    /// Bytes sent.
    pub bytes_sent: AtomicU64,
    state: AtomicU8,
    /// When its last keepalive came (server clock, ns).
    pub last_keepalive_ns: AtomicU64,
    /// When it ended (server clock, ns; 0 while streaming).
    pub ended_ns: AtomicU64,
    /// Set by the control API (its last pause or resume), read by the status answer.
    pub paused: AtomicBool,
    /// Control requests not yet applied by the data plane, in order; `controls_pending`
    /// says cheaply whether there are any.
    controls: Mutex<Vec<Control>>,
    controls_pending: AtomicBool,
    /// The client's last loss report in units of 1/10 000 ([`NO_LOSS_REPORT`] before any).
    pub loss_units: AtomicU32,
    /// The send rate during the start-up burst (`send_rate_bps` without one); before the
    /// token's echo, the rate the burst would have (the factor the client wants).
    pub burst_rate_bps: AtomicU64,
    /// When the start-up burst ends (0 without one, or before the echo): admission counts
    /// `burst_rate_bps` until.
    pub burst_until_ns: AtomicU64,
    /// Stored repair packets sent.
    pub repair_sent: AtomicU64,
    /// Stored repair packets skipped by adaptive repair.
    pub repair_skipped: AtomicU64,
    /// Who may steer the session (`None`: a broadcast channel, steered by nobody).
    pub owner: Option<Owner>,
    /// Whether the destination has echoed the owner's token (always true without an
    /// owner): the pacer stays paused until then.
    pub validated: AtomicBool,
    /// The counters of the keepalive datagrams taken (replays are refused).
    pub keepalive_window: Mutex<ReplayWindow>,
}

/// A unicast session's keys (`isnode_proto::auth`).
#[derive(Clone, Copy)]
pub struct Owner {
    /// Keepalives, controls, validation and deletion must carry it.
    pub secret: isnode_proto::auth::Key,
    /// Sent to the destination; its echo starts the stream.
    pub token: isnode_proto::auth::Key,
}

/// How a data-plane entry ends besides being deleted or done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// A unicast session: expires without keepalives for `--session-timeout-ms`.
    Keepalive,
    /// A broadcast channel: runs until its broadcast is deleted.
    Never,
}

/// [`StreamShared::loss_units`] before the client's first loss report.
pub const NO_LOSS_REPORT: u32 = u32::MAX;

/// The fixed parts of a new session.
pub struct NewStreamShared {
    /// Its id (the API's).
    pub id: String,
    /// The object it sends.
    pub object: Arc<ObjectInfo>,
    /// The FDT instance's ALC packets (TOI 0).
    pub fdt_packets: Vec<Vec<u8>>,
    /// Where its packets go.
    pub dest: SocketAddr,
    /// See [`StreamShared::repair_dest`].
    pub repair_dest: Option<SocketAddr>,
    /// See [`StreamShared::expiry`].
    pub expiry: Expiry,
    /// The send rate (`None`: the object's).
    pub send_rate_bps: Option<u64>,
    /// The codeword it started from.
    pub start_codeword: u32,
    /// Now (server clock, ns).
    pub now_ns: u64,
    /// The start-up burst: (rate during it, when it ends); `None` without one.
    pub burst: Option<(u64, u64)>,
    /// See [`StreamShared::owner`].
    pub owner: Option<Owner>,
    /// See [`StreamShared::validated`]: false while the destination must echo the token.
    pub validated: bool,
}

impl StreamShared {
    /// A streaming session; its keepalive clock starts at `now_ns`.
    pub fn new(n: NewStreamShared) -> StreamShared {
        StreamShared {
            send_rate_bps: n.send_rate_bps.unwrap_or(n.object.send_rate_bps),
            peer_ip: n.dest.ip(),
            repair_dest: n.repair_dest,
            expiry: n.expiry,
            id: n.id,
            object: n.object,
            fdt_packets: n.fdt_packets,
            dest: n.dest,
            start_codeword: n.start_codeword,
            created_ns: n.now_ns,
            next_codeword: AtomicU32::new(n.start_codeword),
            packets_sent: AtomicU64::new(0),
            bytes_sent: AtomicU64::new(0),
            state: AtomicU8::new(SessionState::Streaming as u8),
            last_keepalive_ns: AtomicU64::new(n.now_ns),
            ended_ns: AtomicU64::new(0),
            paused: AtomicBool::new(false),
            controls: Mutex::new(Vec::new()),
            controls_pending: AtomicBool::new(false),
            loss_units: AtomicU32::new(NO_LOSS_REPORT),
            burst_rate_bps: AtomicU64::new(n.burst.map_or(0, |b| b.0)),
            burst_until_ns: AtomicU64::new(n.burst.map_or(0, |b| b.1)),
            repair_sent: AtomicU64::new(0),
            repair_skipped: AtomicU64::new(0),
            validated: AtomicBool::new(n.validated),
            owner: n.owner,
            keepalive_window: Mutex::new(ReplayWindow::default()),
        }
    }

    /// The extra rate of the start-up burst at `now_ns` (beyond the plain send rate): what
    /// it draws on the burst headroom (see `isnode_serve_core::admission`); 0 once it is over.
    pub fn burst_extra_bps(&self, now_ns: u64) -> u64 {
        if now_ns < self.burst_until_ns.load(Ordering::Acquire) {
            self.burst_rate_bps
                .load(Ordering::Acquire)
                .saturating_sub(self.send_rate_bps)
        } else {
            0
        }
    }

    /// The start-up burst factor the client wants (1: none), before the echo.
    pub fn wanted_burst_factor(&self) -> u32 {
        let rate = self.burst_rate_bps.load(Ordering::Acquire);
        u32::try_from(rate / self.send_rate_bps.max(1))
            .unwrap_or(1)
            .max(1)
    }

    /// Counts a start-up burst of `rate_bps` until `until_ns` (from the echo).
    pub fn start_burst(&self, rate_bps: u64, until_ns: u64) {
        self.burst_rate_bps.store(rate_bps, Ordering::Release);
        self.burst_until_ns.store(until_ns, Ordering::Release);
    }

    /// Takes a loss report from a keepalive.
    pub fn report_loss(&self, loss: isnode_proto::keepalive::LossReport) {
        self.loss_units
            .store(u32::from(loss.units()), Ordering::Release);
    }

    /// The client's last loss report, if any.
    pub fn loss_report(&self) -> Option<isnode_proto::keepalive::LossReport> {
        let units = u16::try_from(self.loss_units.load(Ordering::Acquire)).ok()?;
        isnode_proto::keepalive::LossReport::from_units(units)
    }

    /// Queues a control request for the data plane; false when
    /// [`MAX_PENDING_CONTROLS`] are already waiting.
    pub fn push_control(&self, c: Control) -> bool {
        let mut q = self.controls.lock().unwrap_or_else(|e| e.into_inner());
        if q.len() >= MAX_PENDING_CONTROLS {
            return false;
        }
        q.push(c);
        self.controls_pending.store(true, Ordering::Release);
        true
    }

    /// The queued control requests, in order (the data plane applies them).
    pub fn take_controls(&self) -> Vec<Control> {
        if !self.controls_pending.load(Ordering::Acquire) {
            return Vec::new();
        }
        let mut q = self.controls.lock().unwrap_or_else(|e| e.into_inner());
        self.controls_pending.store(false, Ordering::Release);
        std::mem::take(&mut *q)
    }

    /// Its lifecycle state now.
    pub fn state(&self) -> SessionState {
        match self.state.load(Ordering::Acquire) {
            0 => SessionState::Streaming,
            1 => SessionState::Done,
            2 => SessionState::Expired,
            _ => SessionState::Deleted,
        }
    }

    /// Moves from streaming to `to`; false if it had already ended.
    pub fn end(&self, to: SessionState, now_ns: u64) -> bool {
        let ok = self
            .state
            .compare_exchange(
                SessionState::Streaming as u8,
                to as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok();
        if ok {
            self.ended_ns.store(now_ns, Ordering::Release);
        }
        ok
    }
}
