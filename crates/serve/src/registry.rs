//! The session registry: what the control API and the data plane share about each
//! session, and the table of sessions the API knows.
//!
//! The table is behind one short-lived mutex: the API takes it to look a session up, to
//! copy the streaming sessions for admission ([`Registry::snapshot`]) and to insert an
//! admitted one if nothing was inserted since that copy ([`Registry::register`]); it is
//! never held across admission, a catalog lookup or any I/O.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use isnode_proto::keepalive::ReplayWindow;

use crate::objects::ObjectInfo;

/// Lifecycle of a session, as published by the data plane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum SessionState {
    Streaming = 0,
    Done = 1,
    Expired = 2,
    Deleted = 3,
}

impl SessionState {
    /// The state as the API reports it.
    pub(crate) fn wire(self) -> isnode_proto::SessionState {
        match self {
            SessionState::Streaming => isnode_proto::SessionState::Streaming,
            _ => isnode_proto::SessionState::Done,
        }
    }
}

/// A control request for the data plane to apply to a session's pacer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Control {
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
pub(crate) const MAX_PENDING_CONTROLS: usize = 16;

/// What the control API and the data plane share about one session.
pub(crate) struct StreamShared {
    pub id: String,
    pub object: Arc<ObjectInfo>,
    /// The FDT instance's ALC packets (TOI 0), built for this session (fresh `Expires`).
    pub fdt_packets: Vec<Vec<u8>>,
    pub dest: SocketAddr,
    /// A broadcast channel's repair group (its repair packets go there, the rest to `dest`).
    pub repair_dest: Option<SocketAddr>,
    /// Whether it ends without keepalives.
    pub expiry: Expiry,
    pub peer_ip: IpAddr,
    pub send_rate_bps: u64,
    pub start_codeword: u32,
    /// When it was created (server clock, ns): the start-up latency counts from it.
    pub created_ns: u64,
    pub next_codeword: AtomicU32,
    pub packets_sent: AtomicU64,
    pub bytes_sent: AtomicU64,
    state: AtomicU8,
    pub last_keepalive_ns: AtomicU64,
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
pub(crate) struct Owner {
    /// Keepalives, controls, validation and deletion must carry it.
    pub secret: isnode_proto::auth::Key,
    /// Sent to the destination; its echo starts the stream.
    pub token: isnode_proto::auth::Key,
}

impl Owner {
    /// Fresh random keys (rand's thread generator: a CSPRNG seeded from the OS).
    pub(crate) fn random() -> Owner {
        Owner {
            secret: rand::random(),
            token: rand::random(),
        }
    }
}

/// How a data-plane entry ends besides being deleted or done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Expiry {
    /// A unicast session: expires without keepalives for `--session-timeout-ms`.
    Keepalive,
    /// A broadcast channel: runs until its broadcast is deleted.
    Never,
}

/// [`StreamShared::loss_units`] before the client's first loss report.
pub(crate) const NO_LOSS_REPORT: u32 = u32::MAX;

/// The fixed parts of a new session.
pub(crate) struct NewStreamShared {
    pub id: String,
    pub object: Arc<ObjectInfo>,
    pub fdt_packets: Vec<Vec<u8>>,
    pub dest: SocketAddr,
    /// See [`StreamShared::repair_dest`].
    pub repair_dest: Option<SocketAddr>,
    /// See [`StreamShared::expiry`].
    pub expiry: Expiry,
    /// The send rate (`None`: the object's).
    pub send_rate_bps: Option<u64>,
    pub start_codeword: u32,
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
    pub(crate) fn new(n: NewStreamShared) -> StreamShared {
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
    pub(crate) fn burst_extra_bps(&self, now_ns: u64) -> u64 {
        if now_ns < self.burst_until_ns.load(Ordering::Acquire) {
            self.burst_rate_bps
                .load(Ordering::Acquire)
                .saturating_sub(self.send_rate_bps)
        } else {
            0
        }
    }

    /// The start-up burst factor the client wants (1: none), before the echo.
    pub(crate) fn wanted_burst_factor(&self) -> u32 {
        let rate = self.burst_rate_bps.load(Ordering::Acquire);
        u32::try_from(rate / self.send_rate_bps.max(1))
            .unwrap_or(1)
            .max(1)
    }

    /// Counts a start-up burst of `rate_bps` until `until_ns` (from the echo).
    pub(crate) fn start_burst(&self, rate_bps: u64, until_ns: u64) {
        self.burst_rate_bps.store(rate_bps, Ordering::Release);
        self.burst_until_ns.store(until_ns, Ordering::Release);
    }

    /// Takes a loss report from a keepalive.
    pub(crate) fn report_loss(&self, loss: isnode_proto::keepalive::LossReport) {
        self.loss_units
            .store(u32::from(loss.units()), Ordering::Release);
    }

    /// The client's last loss report, if any.
    pub(crate) fn loss_report(&self) -> Option<isnode_proto::keepalive::LossReport> {
        let units = u16::try_from(self.loss_units.load(Ordering::Acquire)).ok()?;
        isnode_proto::keepalive::LossReport::from_units(units)
    }

    /// Queues a control request for the data plane; false when
    /// [`MAX_PENDING_CONTROLS`] are already waiting.
    pub(crate) fn push_control(&self, c: Control) -> bool {
        let mut q = self.controls.lock().unwrap_or_else(|e| e.into_inner());
        if q.len() >= MAX_PENDING_CONTROLS {
            return false;
        }
        q.push(c);
        self.controls_pending.store(true, Ordering::Release);
        true
    }

    /// The queued control requests, in order (the data plane applies them).
    pub(crate) fn take_controls(&self) -> Vec<Control> {
        if !self.controls_pending.load(Ordering::Acquire) {
            return Vec::new();
        }
        let mut q = self.controls.lock().unwrap_or_else(|e| e.into_inner());
        self.controls_pending.store(false, Ordering::Release);
        std::mem::take(&mut *q)
    }

    pub(crate) fn state(&self) -> SessionState {
        match self.state.load(Ordering::Acquire) {
            0 => SessionState::Streaming,
            1 => SessionState::Done,
            2 => SessionState::Expired,
            _ => SessionState::Deleted,
        }
    }

    /// Moves from streaming to `to`; false if it had already ended.
    pub(crate) fn end(&self, to: SessionState, now_ns: u64) -> bool {
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

/// The sessions by id.
pub(crate) type SessionTable = HashMap<String, Arc<StreamShared>>;

/// The streaming sessions at one moment, and the table's generation then.
pub(crate) struct Snapshot {
    pub sessions: Vec<Arc<StreamShared>>,
    generation: u64,
}

/// Why a session could not be registered.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum RegisterError<E> {
    /// Sessions were registered since the snapshot: admit again over a new one.
    Stale,
    /// The hand-over refused the session.
    HandOver(E),
}

/// The session table and its generation (bumped by every insertion).
pub(crate) struct Registry {
    table: Mutex<(SessionTable, u64)>,
}

impl Registry {
    pub(crate) fn new() -> Registry {
        Registry {
            table: Mutex::new((HashMap::new(), 0)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, (SessionTable, u64)> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The session table, locked (briefly, please).
    pub(crate) fn lock_sessions(&self) -> impl std::ops::DerefMut<Target = SessionTable> + '_ {
        TableGuard(self.lock())
    }

    /// The streaming sessions now.
    pub(crate) fn snapshot(&self) -> Snapshot {
        let t = self.lock();
        Snapshot {
            sessions: t
                .0
                .values()
                .filter(|s| s.state() == SessionState::Streaming)
                .cloned()
                .collect(),
            generation: t.1,
        }
    }

    /// Inserts `s` under a fresh id made by `new_id` if no session was registered since
    /// `snap` was taken, after `hand_over` accepted it (the table stays locked meanwhile,
    /// so `hand_over` must not block).
    pub(crate) fn register<E>(
        &self,
        snap: &Snapshot,
        make: impl FnOnce(String) -> Arc<StreamShared>,
        new_id: impl Fn() -> String,
        hand_over: impl FnOnce(&Arc<StreamShared>) -> Result<(), E>,
    ) -> Result<Arc<StreamShared>, RegisterError<E>> {
        let mut t = self.lock();
        if t.1 != snap.generation {
            return Err(RegisterError::Stale);
        }
        let id = loop {
            let id = new_id();
            if !t.0.contains_key(&id) {
                break id;
            }
        };
        let s = make(id);
        hand_over(&s).map_err(RegisterError::HandOver)?;
        t.0.insert(s.id.clone(), s.clone());
        t.1 += 1;
        Ok(s)
    }

    /// The session `id`.
    pub(crate) fn find(&self, id: &str) -> Option<Arc<StreamShared>> {
        self.lock().0.get(id).cloned()
    }

    /// Removes and returns the session `id`.
    #[allow(dead_code)] // kept for callers that count nothing at removal
    pub(crate) fn remove(&self, id: &str) -> Option<Arc<StreamShared>> {
        self.lock().0.remove(id)
    }

    /// Removes and returns the session `id`; `retire` sees it under the table's lock.
    pub(crate) fn remove_with(
        &self,
        id: &str,
        retire: impl FnOnce(&StreamShared),
    ) -> Option<Arc<StreamShared>> {
        let mut table = self.lock();
        let s = table.0.remove(id)?;
        retire(&s);
        drop(table);
        Some(s)
    }
}

struct TableGuard<'a>(MutexGuard<'a, (SessionTable, u64)>);

impl std::ops::Deref for TableGuard<'_> {
    type Target = SessionTable;
    fn deref(&self) -> &SessionTable {
        &self.0 .0
    }
}

impl std::ops::DerefMut for TableGuard<'_> {
    fn deref_mut(&mut self) -> &mut SessionTable {
        &mut self.0 .0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use isnode_store::{ingest, IngestOptions, Volume};

    fn object() -> Arc<ObjectInfo> {
        let dir = tempfile::tempdir().unwrap();
        let p = crate::test_params();
        let mut vol = Volume::create(dir.path(), p, None).unwrap();
        let bytes = vec![1u8; 30_000];
        let opts = IngestOptions {
            name: "a.ts".into(),
            bitrate_bps: 1_000_000,
            content_type: String::new(),
            replace: false,
        };
        ingest(&mut vol, &opts, &mut &bytes[..], 30_000, &mut |_| {}).unwrap();
        let rec = vol.object("a.ts").unwrap();
        Arc::new(ObjectInfo::new(&vol, rec).unwrap())
    }

    fn make(obj: &Arc<ObjectInfo>) -> impl FnOnce(String) -> Arc<StreamShared> + '_ {
        move |id| {
            Arc::new(StreamShared::new(NewStreamShared {
                id,
                object: obj.clone(),
                fdt_packets: Vec::new(),
                dest: "127.0.0.1:9".parse().unwrap(),
                start_codeword: 0,
                repair_dest: None,
                expiry: Expiry::Keepalive,
                send_rate_bps: None,
                now_ns: 0,
                burst: None,
                owner: None,
                validated: true,
            }))
        }
    }

    fn ok(_: &Arc<StreamShared>) -> Result<(), ()> {
        Ok(())
    }

    #[test]
    fn a_registration_since_the_snapshot_makes_it_stale() {
        let obj = object();
        let r = Registry::new();
        let snap = r.snapshot();
        let other = r.snapshot();
        let ids = std::cell::Cell::new(0u32);
        let new_id = || {
            ids.set(ids.get() + 1);
            format!("s{}", ids.get() / 2)
        };
        // The second id drawn collides with the first and is drawn again.
        let a = r.register(&snap, make(&obj), new_id, ok).unwrap();
        let stale = r.register(&other, make(&obj), new_id, ok);
        assert!(matches!(stale, Err(RegisterError::Stale)));
        let fresh = r.snapshot();
        assert_eq!(fresh.sessions.len(), 1);
        let b = r.register(&fresh, make(&obj), new_id, ok).unwrap();
        assert_ne!(a.id, b.id);
        // A refused hand-over registers nothing.
        let fresh = r.snapshot();
        let refused = r.register(&fresh, make(&obj), new_id, |_| Err(()));
        assert!(matches!(refused, Err(RegisterError::HandOver(()))));
        assert_eq!(r.snapshot().sessions.len(), 2);
        // Ended sessions are not in a snapshot; removal does not make one stale.
        b.end(SessionState::Done, 1);
        let snap = r.snapshot();
        assert_eq!(snap.sessions.len(), 1);
        assert!(r.remove(&a.id).is_some());
        assert!(r.register(&snap, make(&obj), new_id, ok).is_ok());
    }
}
