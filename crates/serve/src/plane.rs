//! Data-plane threads. Each owns its sessions (handed over through a bounded channel),
//! drives their pacers with the real clock, sends from the shared block pool with its
//! engine, reads ahead, and rebuilds the symbols of a failed member.

use std::cell::OnceCell;
use std::collections::HashMap;
use std::fs::File;
use std::net::{SocketAddr, UdpSocket};
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use isnode_fec::Code;
use isnode_wire::{build_data_packet, parse_data_packet, DataPacketId, DATA_HEADER_LEN};

use crate::cache::{BlockKey, Demand, FetchError, Pinned};
use crate::net::{self, RawAddr};
use crate::objects::ObjectInfo;
use crate::reader::{Prefetch, Reader, QUEUE_DEPTH};
use crate::session::{blocks_of, codewords_in_block, Burst, Pacer, Step};
use crate::uring::UringSender;
use crate::{Degraded, EngineKind, ReadIo, SessionShared, SessionState, Shared};

/// Codewords (current one included) whose blocks a session keeps in the pool.
pub(crate) const LOOKAHEAD_CODEWORDS: u32 = 3;
/// Most steps one session may take per loop iteration (catching up stays bounded).
const MAX_STEPS_PER_TURN: u32 = 256;
/// Most blocks read ahead per loop iteration with synchronous reads (asynchronous ones
/// are bounded by the read queue's depth).
const READ_AHEAD_PER_TURN: usize = 8;
/// Longest wait of a burst for its block's read (then the burst is retried next turn
/// and pacing catches up).
const FETCH_WAIT: Duration = Duration::from_millis(100);
/// Longest sleep while block reads are in flight (completions are reaped by the loop).
const READ_POLL: Duration = Duration::from_millis(1);
/// Longest sleep of an idle loop.
const MAX_IDLE: Duration = Duration::from_millis(10);
/// Bursts due within this window are sent in the same turn: the thread wakes at most
/// about once per window instead of once per burst (each wake-up is a context switch,
/// the largest single cost of the send path in `perf`); a burst leaves at most this
/// early, against tens of milliseconds between one session's bursts.
const PACING_SLACK_NS: u64 = 2_000_000;

/// A session handed to a data-plane thread.
pub(crate) struct NewSession {
    pub shared: Arc<SessionShared>,
    pub pacer: Pacer,
}

struct Active {
    s: Arc<SessionShared>,
    pacer: Pacer,
    dest: RawAddr,
    /// Codeword up to which read-ahead was done.
    read_ahead_at: Option<u32>,
    trad: Option<Box<Trad>>,
}

/// Per object: the object and the sorted codewords its active sessions are at.
type Positions = HashMap<u32, (Arc<ObjectInfo>, Vec<u32>)>;

/// Eviction demand computed lazily from the registry, once per cache miss that needs it.
struct LazyDemand<'a> {
    sh: &'a Shared,
    snap: OnceCell<Positions>,
}

impl<'a> LazyDemand<'a> {
    fn new(sh: &'a Shared) -> Self {
        LazyDemand {
            sh,
            snap: OnceCell::new(),
        }
    }
}

impl Demand for LazyDemand<'_> {
    fn next_use(&self, toi: u32, member: u32, block: u64) -> Option<u64> {
        let snap = self.snap.get_or_init(|| {
            let mut m: Positions = HashMap::new();
            for s in self.sh.lock_sessions().values() {
                if s.state() != SessionState::Streaming {
                    continue;
                }
                m.entry(s.object.rec.toi)
                    .or_insert_with(|| (s.object.clone(), Vec::new()))
                    .1
                    .push(s.next_codeword.load(Ordering::Relaxed));
            }
            for v in m.values_mut() {
                v.1.sort_unstable();
            }
            m
        });
        let (obj, at) = snap.get(&toi)?;
        let cws = codewords_in_block(&obj.layout, member, block);
        if cws.is_empty() {
            return None;
        }
        // The nearest session before the block's end.
        let i = at.partition_point(|&c| c < cws.end);
        let c = *at.get(i.checked_sub(1)?)?;
        Some(u64::from(cws.start.saturating_sub(c)).saturating_mul(obj.codeword_ns()))
    }
}

/// Per-thread scratch for rebuilding a codeword of a failed member.
struct Rebuild {
    key: Option<(u32, u32)>,
    work: Vec<u8>,
    present: Vec<bool>,
    ok: bool,
}

/// Per-session state of the traditional engine.
struct Trad {
    files: Vec<Option<File>>,
    tried: Vec<bool>,
    loaded: Option<u32>,
    /// n symbols of the loaded codeword.
    work: Vec<u8>,
    present: Vec<bool>,
    pkt: Vec<u8>,
}

enum Mode {
    Gso,
    Mmsg,
    Uring(Box<UringSender>),
    Traditional,
}

impl Mode {
    /// The engine every packet a session sends is counted under, whatever the path
    /// (FDT datagrams and rebuilt packets included).
    fn engine(&self) -> EngineKind {
        match self {
            Mode::Traditional => EngineKind::Traditional,
            Mode::Uring(_) => EngineKind::UringZc,
            Mode::Mmsg => EngineKind::Sendmmsg,
            Mode::Gso => EngineKind::Gso,
        }
    }
}

struct Worker {
    sh: Arc<Shared>,
    mode: Mode,
    /// Fills the pool (io_uring or pread).
    reader: Reader,
    v4: Option<UdpSocket>,
    v6: Option<UdpSocket>,
    rebuild: Rebuild,
    codes: HashMap<u32, Code>,
    /// Packets built by this thread (rebuilt runs): up to one burst.
    out: Vec<u8>,
}

/// The data-plane thread body.
pub(crate) fn worker(sh: Arc<Shared>, rx: Receiver<NewSession>) {
    let params = *sh.objects.params();
    let n_max = (params.source_symbols + params.repair_symbols) as usize;
    let e = params.symbol_len as usize;
    let mode = match sh.engine {
        EngineKind::Gso => Mode::Gso,
        EngineKind::Sendmmsg => Mode::Mmsg,
        EngineKind::Traditional => Mode::Traditional,
        EngineKind::UringZc => match UringSender::new(&sh.cache, sh.clone()) {
            Ok(u) => Mode::Uring(Box::new(u)),
            Err(err) => {
                tracing::error!("io_uring setup failed ({err}); this thread uses the gso engine");
                Mode::Gso
            }
        },
    };
    let read_io = if matches!(mode, Mode::Traditional) {
        ReadIo::Sync
    } else {
        sh.read_io
    };
    let fail_sh = sh.clone();
    let reader = Reader::new(
        &sh.cache,
        read_io,
        Box::new(move |key, why| fail_sh.metrics.member_error(key.member, why)),
    );
    let mut w = Worker {
        mode,
        reader,
        v4: None,
        v6: None,
        rebuild: Rebuild {
            key: None,
            work: vec![0; n_max * e],
            present: vec![false; n_max],
            ok: false,
        },
        codes: HashMap::new(),
        out: vec![0; net::MAX_SEND_BYTES.max(params.packet_len() as usize)],
        sh,
    };
    let mut sessions: Vec<Active> = Vec::with_capacity(64);
    while !w.sh.shutdown.load(Ordering::Acquire) {
        w.reader.poll();
        for _ in 0..1024 {
            match rx.try_recv() {
                Ok(ns) => sessions.push(w.admit(ns)),
                Err(_) => break,
            }
        }
        let now = w.sh.now_ns();
        let timeout_ns = w.sh.args.session_timeout_ms.saturating_mul(1_000_000);
        let mut i = 0;
        while i < sessions.len() {
            let a = &mut sessions[i];
            let state = a.s.state();
            let idle = now.saturating_sub(a.s.last_keepalive_ns.load(Ordering::Acquire));
            let end = if state != SessionState::Streaming {
                true
            } else if idle > timeout_ns {
                if a.s.end(SessionState::Expired, now) {
                    w.sh.metrics
                        .sessions_expired
                        .fetch_add(1, Ordering::Relaxed);
                    tracing::info!(id = %a.s.id, "session expired: no keepalive for {} ms", idle / 1_000_000);
                }
                true
            } else {
                w.turn(a, now + PACING_SLACK_NS);
                if a.pacer.is_done() {
                    a.s.end(SessionState::Done, w.sh.now_ns());
                    tracing::info!(id = %a.s.id, "session done");
                    true
                } else {
                    false
                }
            };
            if end {
                w.sh.metrics.sessions_ended.fetch_add(1, Ordering::Relaxed);
                sessions.swap_remove(i);
            } else {
                i += 1;
            }
        }
        if let Mode::Uring(u) = &mut w.mode {
            u.flush();
        }
        if !matches!(w.mode, Mode::Traditional) {
            w.read_ahead(&mut sessions);
        }
        // Sleep until the next step is due, a new session arrives, or MAX_IDLE.
        let now = w.sh.now_ns();
        let next = sessions
            .iter()
            .filter_map(|a| a.pacer.next_due())
            .min()
            .unwrap_or(u64::MAX);
        let mut wait = Duration::from_nanos(next.saturating_sub(now)).min(MAX_IDLE);
        if let Mode::Uring(u) = &w.mode {
            if u.in_flight() > 0 {
                wait = wait.min(Duration::from_millis(1));
            }
        }
        if wait.is_zero() {
            continue;
        }
        if w.reader.in_flight() > 0 {
            // Wake on the first completion; new sessions wait at most READ_POLL.
            w.reader.wait(wait.min(READ_POLL));
            continue;
        }
        match rx.recv_timeout(wait) {
            Ok(ns) => sessions.push(w.admit(ns)),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    if let Mode::Uring(u) = &mut w.mode {
        u.drain(Duration::from_secs(2));
    }
    w.reader.drain(Duration::from_secs(2));
}

impl Worker {
    fn admit(&mut self, ns: NewSession) -> Active {
        let trad = matches!(self.mode, Mode::Traditional).then(|| {
            let p = ns.shared.object.layout.params();
            let n = (p.source_symbols + p.repair_symbols) as usize;
            Box::new(Trad {
                files: (0..p.members).map(|_| None).collect(),
                tried: vec![false; p.members as usize],
                loaded: None,
                work: vec![0; n * p.symbol_len as usize],
                present: vec![false; n],
                pkt: vec![0; p.packet_len() as usize],
            })
        });
        Active {
            dest: RawAddr::new(&ns.shared.dest),
            s: ns.shared,
            pacer: ns.pacer,
            read_ahead_at: None,
            trad,
        }
    }

    fn socket(&mut self, dest: &SocketAddr) -> std::io::Result<&UdpSocket> {
        let slot = if dest.is_ipv4() {
            &mut self.v4
        } else {
            &mut self.v6
        };
        if slot.is_none() {
            *slot = Some(net::send_socket(dest)?);
        }
        slot.as_ref()
            .ok_or_else(|| std::io::Error::other("no socket"))
    }

    /// Sends what is due for one session (bounded).
    fn turn(&mut self, a: &mut Active, now: u64) {
        for _ in 0..MAX_STEPS_PER_TURN {
            let Some(step) = a.pacer.peek(now) else { break };
            let sent = match step {
                Step::Fdt { .. } => {
                    self.send_fdt(a);
                    true
                }
                Step::Burst(b) => {
                    if a.trad.is_some() {
                        self.send_traditional(a, &b);
                        true
                    } else {
                        self.send_burst(a, &b)
                    }
                }
            };
            if !sent {
                break;
            }
            a.pacer.advance();
        }
        a.s.next_codeword
            .store(a.pacer.codeword(), Ordering::Relaxed);
    }

    fn count(&self, a: &Active, engine: EngineKind, packets: u64, bytes: u64) {
        self.sh.metrics.sent(engine, packets, bytes);
        a.s.packets_sent.fetch_add(packets, Ordering::Relaxed);
        a.s.bytes_sent.fetch_add(bytes, Ordering::Relaxed);
    }

    fn send_error(&self, e: &std::io::Error) {
        if self.sh.metrics.send_errors.fetch_add(1, Ordering::Relaxed) == 0 {
            tracing::warn!("send failed: {e}");
        }
    }

    fn send_fdt(&mut self, a: &Active) {
        // Counted under the session's engine (the FDT is a few small datagrams: sendto).
        let engine = self.mode.engine();
        for p in &a.s.fdt_packets {
            let r = self
                .socket(&a.s.dest)
                .and_then(|s| net::send_to(s, &a.dest, p));
            match r {
                Ok(()) => self.count(a, engine, 1, p.len() as u64),
                Err(e) => self.send_error(&e),
            }
        }
    }

    /// Sends a run of packets that this thread built (rebuilt symbols), synchronously.
    fn send_built(&mut self, a: &Active, len: usize, seg: usize) {
        let packets = len.div_ceil(seg) as u64;
        let gso = !matches!(self.mode, Mode::Mmsg);
        if let Err(e) = self.socket(&a.s.dest) {
            return self.send_error(&e);
        }
        let Some(sock) = (if a.s.dest.is_ipv4() {
            &self.v4
        } else {
            &self.v6
        }) else {
            return;
        };
        let data = &self.out[..len];
        let r = if gso {
            net::send_gso(sock, &a.dest, data, seg)
        } else {
            net::send_mmsg(sock, &a.dest, data, seg)
        };
        match r {
            Ok(()) => self.count(a, self.mode.engine(), packets, len as u64),
            Err(e) => self.send_error(&e),
        }
    }

    /// Sends one burst from the pool. False: try again later (pool busy or full).
    fn send_burst(&mut self, a: &Active, b: &Burst) -> bool {
        let obj = &a.s.object;
        let p = obj.layout.params().packet_len() as usize;
        let key = BlockKey {
            toi: obj.rec.toi,
            member: b.member,
            block: b.block,
        };
        let demand = LazyDemand::new(&self.sh);
        // A failed read has gone to `member_error` through the reader's callback.
        let pin = match self.reader.fetch(key, &**obj, &demand, FETCH_WAIT) {
            Ok(pin) => pin,
            Err(FetchError::Failed(_)) | Err(FetchError::Unavailable(_)) => {
                self.degraded(a, obj, b);
                return true;
            }
            Err(FetchError::Busy) | Err(FetchError::Full) => return false,
        };
        let range = b.slot as usize * p..(b.slot + b.len()) as usize * p;
        assert!(range.end <= pin.bytes().len(), "burst beyond its block");
        self.send_pinned(a, pin, range, p);
        true
    }

    fn send_pinned(&mut self, a: &Active, pin: Pinned, range: std::ops::Range<usize>, seg: usize) {
        let packets = range.len().div_ceil(seg) as u64;
        let bytes = range.len() as u64;
        if let Mode::Uring(u) = &mut self.mode {
            match u.send(&a.s.dest, &a.dest, pin, range, seg) {
                Ok(()) => self.count(a, EngineKind::UringZc, packets, bytes),
                Err(e) => self.send_error(&e),
            }
            return;
        }
        let gso = matches!(self.mode, Mode::Gso);
        let sock = match self.socket(&a.s.dest) {
            Ok(s) => s,
            Err(e) => return self.send_error(&e),
        };
        if gso {
            match net::send_gso(sock, &a.dest, &pin.bytes()[range.clone()], seg) {
                Ok(()) => return self.count(a, EngineKind::Gso, packets, bytes),
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EIO)
                            | Some(libc::EINVAL)
                            | Some(libc::EOPNOTSUPP)
                            | Some(libc::ENOPROTOOPT)
                    ) =>
                {
                    tracing::warn!("the kernel refuses UDP GSO ({e}): falling back to sendmmsg");
                    self.mode = Mode::Mmsg;
                }
                Err(e) => return self.send_error(&e),
            }
        }
        let sock = match self.socket(&a.s.dest) {
            Ok(s) => s,
            Err(e) => return self.send_error(&e),
        };
        match net::send_mmsg(sock, &a.dest, &pin.bytes()[range], seg) {
            Ok(()) => self.count(a, EngineKind::Sendmmsg, packets, bytes),
            Err(e) => self.send_error(&e),
        }
    }

    /// The packets of a burst whose block cannot be read.
    fn degraded(&mut self, a: &Active, obj: &Arc<ObjectInfo>, b: &Burst) {
        if self.sh.args.degraded == Degraded::SendAvailable {
            self.sh
                .metrics
                .packets_skipped
                .fetch_add(u64::from(b.len()), Ordering::Relaxed);
            return;
        }
        if !self.rebuild_codeword(obj, b.sbn, b.member) {
            self.sh
                .metrics
                .packets_skipped
                .fetch_add(u64::from(b.len()), Ordering::Relaxed);
            return;
        }
        let e = obj.layout.params().symbol_len as usize;
        let p = obj.layout.params().packet_len() as usize;
        let mut len = 0;
        for esi in b.esis.clone() {
            let id = DataPacketId {
                tsi: obj.tsi,
                toi: obj.rec.toi,
                sbn: b.sbn,
                esi: esi as u8,
            };
            let sym = &self.rebuild.work[esi as usize * e..(esi as usize + 1) * e];
            match build_data_packet(&mut self.out[len..len + p], &id, sym) {
                Ok(n) => len += n,
                Err(err) => {
                    tracing::error!("framing a rebuilt packet: {err}");
                    return;
                }
            }
        }
        self.sh
            .metrics
            .symbols_rebuilt
            .fetch_add(u64::from(b.len()), Ordering::Relaxed);
        self.send_built(a, len, p);
    }

    /// Decodes codeword `sbn` of `obj` from every member but `lost` into `self.rebuild`.
    fn rebuild_codeword(&mut self, obj: &Arc<ObjectInfo>, sbn: u32, lost: u32) -> bool {
        if self.rebuild.key == Some((obj.rec.toi, sbn)) {
            return self.rebuild.ok;
        }
        self.rebuild.key = Some((obj.rec.toi, sbn));
        self.rebuild.ok = false;
        let layout = &obj.layout;
        let params = layout.params();
        let e = params.symbol_len as usize;
        let p = params.packet_len() as usize;
        let k = layout.source_symbols(sbn);
        let n = layout.encoding_symbols(sbn);
        self.rebuild.present[..n as usize].fill(false);
        let demand = LazyDemand::new(&self.sh);
        let mut have = 0u32;
        for member in 0..params.members {
            if member == lost {
                continue;
            }
            let run = layout.member_run(sbn, member);
            let mut pin: Option<(u64, Pinned)> = None;
            for esi in run.esis.clone() {
                let (block, off) =
                    layout.packet_position(run.first_packet + u64::from(esi - run.esis.start));
                if pin.as_ref().is_none_or(|(b, _)| *b != block) {
                    let key = BlockKey {
                        toi: obj.rec.toi,
                        member,
                        block,
                    };
                    pin = self
                        .reader
                        .fetch(key, &**obj, &demand, FETCH_WAIT)
                        .ok()
                        .map(|pn| (block, pn));
                }
                let Some((_, pn)) = &pin else { continue };
                let Some(bytes) = pn.bytes().get(off..off + p) else {
                    continue;
                };
                let Ok(pkt) = parse_data_packet(bytes) else {
                    continue;
                };
                if pkt.id.tsi != obj.tsi
                    || pkt.id.toi != obj.rec.toi
                    || pkt.id.sbn != sbn
                    || u32::from(pkt.id.esi) != esi
                    || pkt.symbol.len() != e
                {
                    continue;
                }
                self.rebuild.work[esi as usize * e..(esi as usize + 1) * e]
                    .copy_from_slice(pkt.symbol);
                self.rebuild.present[esi as usize] = true;
                have += 1;
            }
        }
        if have < k {
            tracing::warn!(
                toi = obj.rec.toi,
                sbn,
                have,
                k,
                "codeword cannot be rebuilt: too few symbols readable"
            );
            return false;
        }
        let Some(code) = code_for(&mut self.codes, k, n) else {
            return false;
        };
        let mut shards: Vec<&mut [u8]> = self.rebuild.work[..n as usize * e]
            .chunks_exact_mut(e)
            .collect();
        if let Err(err) = code.reconstruct_all(&mut shards, &self.rebuild.present[..n as usize]) {
            tracing::error!("rebuilding codeword {sbn}: {err}");
            return false;
        }
        self.rebuild.ok = true;
        true
    }

    /// The traditional engine: per packet, header built, payload copied, one `sendto`.
    fn send_traditional(&mut self, a: &mut Active, b: &Burst) {
        let obj = a.s.object.clone();
        let Some(mut t) = a.trad.take() else { return };
        if t.loaded != Some(b.sbn) {
            self.trad_load(&mut t, &obj, b.sbn);
        }
        let e = obj.layout.params().symbol_len as usize;
        for esi in b.esis.clone() {
            if !t.present[esi as usize] {
                self.sh
                    .metrics
                    .packets_skipped
                    .fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let id = DataPacketId {
                tsi: obj.tsi,
                toi: obj.rec.toi,
                sbn: b.sbn,
                esi: esi as u8,
            };
            let sym = &t.work[esi as usize * e..(esi as usize + 1) * e];
            let n = match build_data_packet(&mut t.pkt, &id, sym) {
                Ok(n) => n,
                Err(err) => {
                    tracing::error!("framing a packet: {err}");
                    continue;
                }
            };
            let r = self
                .socket(&a.s.dest)
                .and_then(|s| net::send_to(s, &a.dest, &t.pkt[..n]));
            match r {
                Ok(()) => self.count(a, EngineKind::Traditional, 1, n as u64),
                Err(err) => self.send_error(&err),
            }
        }
        a.trad = Some(t);
    }

    /// Reads the source packets of codeword `sbn` with buffered reads, rebuilds lost ones
    /// from the repair member, and encodes the parity.
    fn trad_load(&mut self, t: &mut Trad, obj: &Arc<ObjectInfo>, sbn: u32) {
        let layout = &obj.layout;
        let params = layout.params();
        let e = params.symbol_len as usize;
        let k = layout.source_symbols(sbn);
        let n = layout.encoding_symbols(sbn);
        t.loaded = Some(sbn);
        t.present.fill(false);
        let read_member = |t: &mut Trad, member: u32, sh: &Shared| -> u32 {
            if !t.tried[member as usize] {
                t.tried[member as usize] = true;
                match File::open(&obj.seg_paths[member as usize]) {
                    Ok(f) => t.files[member as usize] = Some(f),
                    Err(err) => sh.metrics.member_error(
                        member,
                        &format!("{}: {err}", obj.seg_paths[member as usize].display()),
                    ),
                }
            }
            let run = layout.member_run(sbn, member);
            let mut got = 0;
            for esi in run.esis.clone() {
                let Some(f) = &t.files[member as usize] else {
                    return got;
                };
                let (block, off) =
                    layout.packet_position(run.first_packet + u64::from(esi - run.esis.start));
                let at = block * u64::from(params.block_len) + off as u64;
                if let Err(err) = f.read_exact_at(&mut t.pkt, at) {
                    sh.metrics.member_error(
                        member,
                        &format!("{}: {err}", obj.seg_paths[member as usize].display()),
                    );
                    continue;
                }
                let Ok(pkt) = parse_data_packet(&t.pkt) else {
                    continue;
                };
                if pkt.id.tsi != obj.tsi
                    || pkt.id.toi != obj.rec.toi
                    || pkt.id.sbn != sbn
                    || u32::from(pkt.id.esi) != esi
                {
                    continue;
                }
                t.work[esi as usize * e..(esi as usize + 1) * e]
                    .copy_from_slice(&t.pkt[DATA_HEADER_LEN..]);
                t.present[esi as usize] = true;
                got += 1;
            }
            got
        };
        let mut have = 0;
        for member in 0..params.members - 1 {
            have += read_member(t, member, &self.sh);
        }
        let Some(code) = code_for(&mut self.codes, k, n) else {
            return;
        };
        if have < k {
            let repair = read_member(t, params.members - 1, &self.sh);
            if have + repair < k {
                tracing::warn!(sbn, "codeword cannot be rebuilt: too few symbols readable");
                return;
            }
            let mut shards: Vec<&mut [u8]> = t.work[..n as usize * e].chunks_exact_mut(e).collect();
            if code
                .reconstruct(&mut shards, &t.present[..n as usize])
                .is_err()
            {
                return;
            }
            self.sh
                .metrics
                .symbols_rebuilt
                .fetch_add(u64::from(k - have), Ordering::Relaxed);
        }
        // Parity at send time, as the seeds' baseline server computed it.
        let (src, rep) = t.work[..n as usize * e].split_at_mut(k as usize * e);
        let sources: Vec<&[u8]> = src.chunks_exact(e).collect();
        let mut repairs: Vec<&mut [u8]> = rep.chunks_exact_mut(e).collect();
        if let Err(err) = code.encode(&sources, &mut repairs) {
            tracing::error!("encoding codeword {sbn}: {err}");
            return;
        }
        t.present[..n as usize].fill(true);
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
        'sessions: for a in sessions.iter_mut() {
            if a.pacer.is_done() {
                continue;
            }
            let c = a.pacer.codeword();
            if a.read_ahead_at == Some(c) {
                continue;
            }
            let obj = a.s.object.clone();
            let demand = LazyDemand::new(&self.sh);
            let mut complete = true;
            for (member, block) in blocks_of(&obj.layout, c..c.saturating_add(LOOKAHEAD_CODEWORDS))
            {
                let key = BlockKey {
                    toi: obj.rec.toi,
                    member,
                    block,
                };
                if self.sh.cache.peek(&key).is_some() {
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

fn code_for(codes: &mut HashMap<u32, Code>, k: u32, n: u32) -> Option<&Code> {
    if let std::collections::hash_map::Entry::Vacant(v) = codes.entry(k) {
        match Code::new(k as usize, n as usize) {
            Ok(c) => {
                v.insert(c);
            }
            Err(err) => {
                tracing::error!("no code for k={k} n={n}: {err}");
                return None;
            }
        }
    }
    codes.get(&k)
}
