//! The simulated world: the store, the pool, the sessions, the network and the clients,
//! stepped on a virtual clock (see the module above for what is real).

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Instant;

use isnode_recv::receiver::{Receiver, ReceiverConfig};
use isnode_store::VolumeParams;

use super::store::{DiskFault, Obj};
use super::Rng;
use isnode_serve_core::admission::LOOKAHEAD_CODEWORDS;
use isnode_serve_core::admission::{self, Limits, PoolLimit, UnvalidatedLimits};
use isnode_serve_core::block::{BlockKey, Demand, FetchError};
use isnode_serve_core::cache_core::{CacheCore, CoreLookup, Mutation};
use isnode_serve_core::pacer::{
    blocks_of, codewords_in_block, send_rate_bps, Burst, Pacer, PacerConfig, StartBurst, Step,
};

const TICK_NS: u64 = 1_000_000;
/// Media bitrate of every object: a 512-byte codeword plays 16 ms.
const BITRATE_BPS: u64 = 256_000;
const MAX_BURST: u32 = 4;
const SLOTS: u32 = 24;
const RETRY_NS: u64 = 500_000_000;
/// Sessions start within this much virtual time per session.
const START_SPREAD_PER_SESSION_NS: u64 = 40_000_000;
/// Every admitted session must have ended by then.
const DEADLINE_NS: u64 = 600_000_000_000;
const OBJECTS: u32 = 4;
/// Concurrent sessions the bitrate budget holds.
const BUDGET_SESSIONS: u64 = 16;
/// Sessions awaiting their token's echo: in all and per client.
const UNVALIDATED: UnvalidatedLimits = UnvalidatedLimits {
    max_sessions: 24,
    max_per_client: 4,
};
/// A session not echoed by then is dropped.
const ECHO_TIMEOUT_NS: u64 = 2_000_000_000;

/// The volume: E = 64, k = 8, m = 4, 3 members (4 + 4 source, 4 repair), 4 KiB blocks.
fn params() -> VolumeParams {
    VolumeParams {
        symbol_len: 64,
        source_symbols: 8,
        repair_symbols: 4,
        members: 3,
        block_len: 4096,
    }
}

/// A deliberate bug, to show that the simulation catches it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SimMutation {
    /// Everything as it is.
    None,
    /// The cache's eviction ignores pins (`cache::core::Mutation::EvictPinned`).
    EvictPinned,
    /// The network takes one symbol more than the fault budget from a codeword, unmarked.
    NetworkOverBudget,
    /// Loaded blocks are not checked against their CRC32C.
    SkipBlockCheck,
    /// The send engine sends what the pacer has due 200 ms from now.
    SendEarly,
    /// The reader stalls: every read takes a second more.
    StuckReader,
    /// The degraded path skips an unreadable block's packets instead of rebuilding them.
    DegradedSkips,
    /// The client trusts a packet's CRC32C and does not check its digest: a forgery with a
    /// valid CRC gets in.
    TrustCrc,
    /// A seek starts a second start-up burst (admission accounted for one).
    BurstAfterSeek,
    /// Adaptive repair sends no repair symbol whatever the client reports.
    RepairIgnoresLoss,
    /// Health: a member read again after its rebuild is still read through its old
    /// (dead) files: the shell does not open them again.
    StaleFilesAfterRebuild,
    /// Health: the data plane never hedges: a slow member's bursts wait for its reads.
    NoHedge,
    /// Health: a member failed by read errors is never probed.
    NeverProbe,
    /// Broadcast: every channel runs one codeword late of the epoch the broadcast reports
    /// (its timetable started after the epoch was taken).
    ChannelLate,
    /// Broadcast: a channel restored after a restart starts its timetable afresh instead of
    /// at its phase (`ChannelPacer::new` where `ChannelPacer::resumed` belongs).
    ResumeLosesPhase,
    /// Unicast repair: the server leaves out a requested packet whose block cannot be
    /// read instead of rebuilding it through the code.
    RepairSkipsUnreadable,
    /// Broadcast: `--broadcast-repair auto` tells a loss only from a jump within a
    /// codeword (the rule before `recv::broadcast::gap`): a lost first or last source
    /// packet of a codeword goes unseen.
    AutoMissesBoundary,
}

/// One run.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SimConfig {
    /// Fixes everything.
    pub seed: u64,
    /// Sessions that ask to start.
    pub sessions: usize,
    /// A planted bug.
    pub mutation: SimMutation,
}

/// What a run did (for the test's summary).
#[derive(Clone, Debug, Default)]
pub(crate) struct SimReport {
    pub admitted: u64,
    pub refused: u64,
    pub refused_unvalidated: u64,
    pub never_echoed: u64,
    pub packets_sent: u64,
    pub bytes_played: u64,
    pub blocks_read: u64,
    pub block_faults: u64,
    pub net_lost: u64,
    pub net_corrupt: u64,
    pub duplicated: u64,
    pub strays: u64,
    pub forgeries: u64,
    pub loss_reports: u64,
    pub burst_codewords: u64,
    pub repair_requests: u64,
    pub repair_rebuilt: u64,
    pub repaired_codewords: u64,
    pub pauses: u64,
    pub seeks: u64,
    pub stops: u64,
    pub rebuilt_bursts: u64,
    pub planted_block_faults: u64,
    pub lost_members: u64,
    pub end_ns: u64,
}

/// A broken invariant: where and what, and how to replay it.
#[derive(Clone, Debug)]
pub(crate) struct Violation {
    pub seed: u64,
    pub now_ns: u64,
    pub what: String,
    /// The command that replays it.
    pub replay: String,
}

/// The one command that replays `cfg`.
pub(crate) fn replay_command(cfg: &SimConfig) -> String {
    let bug = match cfg.mutation {
        SimMutation::None => String::new(),
        m => format!("ISNODE_SIM_MUTATION={m:?} "),
    };
    format!(
        "{bug}ISNODE_SIM_SEED={} ISNODE_SIM_SESSIONS={} cargo test -p isnode-serve-core \
         --test sim tests::seeds -- --nocapture",
        cfg.seed, cfg.sessions
    )
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "simulation seed {} broke an invariant at {} ms: {}\n  replay: {}",
            self.seed,
            self.now_ns / 1_000_000,
            self.what,
            self.replay
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Waiting,
    /// Asked, not yet echoed its token: takes no budget, causes no reads.
    Awaiting {
        expires_ns: u64,
    },
    Playing,
    Paused {
        resume_ns: u64,
    },
    Ended,
}

/// How a played range ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Close {
    /// The pacer sent everything: the client must have the rest of the object.
    Done,
    /// Seek or stop: the client must have what was fully sent.
    Cut,
}

struct Session {
    id: usize,
    obj: usize,
    peer_ip: IpAddr,
    start_ns: u64,
    start_cw: u32,
    phase: Phase,
    pacer: Option<Pacer>,
    rx: Option<Receiver>,
    /// The client's output so far (offset of the next byte).
    out_next: u64,
    /// Symbols of each codeword the network took in this range.
    net_lost: BTreeMap<u32, u32>,
    /// The network takes one packet in this many (a lossy client or a clean one).
    loss_one_in: u64,
    /// Its loss reports (adaptive repair).
    loss: repair::LossWindow,
    /// Whether its client repairs over HTTP (else `--no-repair`), and the repair of the
    /// range played.
    repairs: bool,
    unicast: Option<unicast::Unicast>,
    /// The pacer is done: the client has finished its receive core, a repair may be under
    /// way.
    finishing: bool,
    /// Rate accounting since the range started.
    seg_start_ns: u64,
    paused_ns: u64,
    paused_at: Option<u64>,
    sent_bytes: u64,
    send_rate_bps: u64,
    /// Bits the range's start-up burst may send above the rate (0 without one; a seek
    /// gets none).
    burst_extra_bits: u128,
    /// Packets sent this tick, delivered at its end.
    batch: Vec<Vec<u8>>,
    /// The codeword whose read-ahead was done.
    read_ahead_at: Option<u32>,
    /// When the client echoes its token (after the request, then absolute); `None`: never.
    echo_ns: Option<u64>,
}

/// A read in flight: the slot it fills, the block, what the disk returns.
struct Read {
    slot: u32,
    key: BlockKey,
    obj: usize,
    result: Result<Vec<u8>, String>,
}

struct World {
    cfg: SimConfig,
    rng: Rng,
    now_ns: u64,
    objs: Vec<Obj>,
    core: CacheCore,
    /// The pool's memory: what each slot's buffer holds, and which block wrote it.
    memory: Vec<Option<(BlockKey, Vec<u8>)>>,
    reads: BTreeMap<(u64, u64), Read>,
    /// Pins held by sends in flight: release time → (slot, block).
    pins: BTreeMap<(u64, u64), (u32, BlockKey)>,
    seq: u64,
    sessions: Vec<Session>,
    limits: Limits,
    report: SimReport,
    /// The repair loop's clock origin (only differences of it are used).
    epoch: Instant,
}

/// Runs one seed; the first broken invariant is the error.
pub(crate) fn run(cfg: SimConfig) -> Result<SimReport, Violation> {
    let mut w = World::new(cfg);
    while w.now_ns <= DEADLINE_NS {
        w.now_ns += TICK_NS;
        w.step().map_err(|what| w.violation(what))?;
        if w.quiet() {
            w.final_checks().map_err(|what| w.violation(what))?;
            w.report.end_ns = w.now_ns;
            return Ok(w.report);
        }
    }
    let open: Vec<usize> = w
        .sessions
        .iter()
        .filter(|s| s.phase != Phase::Ended)
        .map(|s| s.id)
        .collect();
    Err(w.violation(format!("sessions {open:?} never ended")))
}

/// Next use of a block: from the sessions' current codewords.
struct Positions<'a> {
    objs: &'a [Obj],
    at: Vec<(u32, u32)>,
}

/// The playing sessions' positions.
fn positions<'a>(objs: &'a [Obj], sessions: &[Session]) -> Positions<'a> {
    Positions {
        objs,
        at: sessions
            .iter()
            .filter(|s| s.phase == Phase::Playing)
            .filter_map(|s| Some((objs[s.obj].toi, s.pacer.as_ref()?.codeword())))
            .collect(),
    }
}

impl Demand for Positions<'_> {
    fn next_use(&self, toi: u32, member: u32, block: u64) -> Option<u64> {
        let obj = self.objs.iter().find(|o| o.toi == toi)?;
        let cws = codewords_in_block(&obj.layout, member, block);
        let cw_ns = 16_000_000u64;
        self.at
            .iter()
            .filter(|(t, cw)| *t == toi && *cw < cws.end)
            .map(|(_, cw)| u64::from(cws.start.saturating_sub(*cw)) * cw_ns)
            .min()
    }
}

impl World {
    fn new(cfg: SimConfig) -> World {
        let mut rng = Rng::new(cfg.seed);
        let mut objs: Vec<Obj> = (0..OBJECTS)
            .map(|i| Obj::new(params(), 1 + i, rng.range(600, 40_000), &mut rng))
            .collect();
        let mut report = SimReport::default();
        for o in &mut objs {
            o.plan_faults(&mut rng, 0);
            report.planted_block_faults += o.faults.len() as u64;
            let members = o.faults.values().filter(|f| **f == DiskFault::LostMember);
            report.lost_members += u64::from(members.count() > 0);
        }
        let mut core = CacheCore::new(SLOTS, RETRY_NS);
        if cfg.mutation == SimMutation::EvictPinned {
            core.mutate(Mutation::EvictPinned);
        }
        let rate = send_rate_bps(&objs[0].layout, BITRATE_BPS);
        let limits = Limits {
            max_sessions_per_client: 3,
            max_bitrate_bps: rate * BUDGET_SESSIONS,
            burst_headroom_bps: admission::burst_headroom_bps(rate * BUDGET_SESSIONS),
            pool: Some(PoolLimit {
                slots: SLOTS as usize,
                reserve_slots: 2,
                lookahead_codewords: LOOKAHEAD_CODEWORDS,
                cache_size_bytes: u64::from(SLOTS) * u64::from(params().block_len),
                disk_read_bps: None,
            }),
            max_sessions: None,
        };
        let sessions = (0..cfg.sessions)
            .map(|id| new_session(id, cfg.sessions, &objs, &mut rng))
            .collect();
        World {
            cfg,
            rng,
            now_ns: 0,
            objs,
            core,
            memory: vec![None; SLOTS as usize],
            reads: BTreeMap::new(),
            pins: BTreeMap::new(),
            seq: 0,
            sessions,
            limits,
            report,
            epoch: Instant::now(),
        }
    }

    fn violation(&self, what: String) -> Violation {
        Violation {
            seed: self.cfg.seed,
            now_ns: self.now_ns,
            what,
            replay: replay_command(&self.cfg),
        }
    }

    fn quiet(&self) -> bool {
        self.sessions.iter().all(|s| s.phase == Phase::Ended)
            && self.reads.is_empty()
            && self.pins.is_empty()
    }

    fn step(&mut self) -> Result<(), String> {
        self.complete_reads()?;
        self.release_pins()?;
        for i in 0..self.sessions.len() {
            if self.sessions[i].pacer.is_some() {
                self.report_loss(i);
            }
            self.repair_answers(i)?;
            self.drive(i)?;
            self.deliver(i)?;
            self.check_playout(i)?;
        }
        self.check_global()
    }

    fn complete_reads(&mut self) -> Result<(), String> {
        while let Some(entry) = self.reads.first_entry() {
            if entry.key().0 > self.now_ns {
                break;
            }
            let r = entry.remove();
            let crc = self.objs[r.obj].block_crc[r.key.member as usize]
                .get(r.key.block as usize)
                .copied();
            let outcome = r.result.and_then(|bytes| {
                if self.cfg.mutation != SimMutation::SkipBlockCheck {
                    isnode_store::codeword::verify_block(&bytes, crc)?;
                }
                self.memory[r.slot as usize] = Some((r.key, bytes));
                Ok(())
            });
            if outcome.is_err() {
                self.report.block_faults += 1;
            }
            if self
                .core
                .finish(r.slot, r.key, outcome, self.now_ns)
                .is_ok()
            {
                // The loader's pin: the waiting sessions look the block up again.
                self.core.unpin(r.slot);
            }
        }
        Ok(())
    }

    fn release_pins(&mut self) -> Result<(), String> {
        while let Some(entry) = self.pins.first_entry() {
            if entry.key().0 > self.now_ns {
                break;
            }
            let (slot, _) = entry.remove();
            self.core.unpin(slot);
        }
        Ok(())
    }

    /// Starts, pauses, resumes, seeks, stops and sends for session `i`.
    fn drive(&mut self, i: usize) -> Result<(), String> {
        let s = &self.sessions[i];
        match s.phase {
            Phase::Ended => return Ok(()),
            Phase::Waiting if s.start_ns <= self.now_ns => return self.request(i),
            Phase::Waiting => return Ok(()),
            Phase::Awaiting { .. } if s.echo_ns.is_some_and(|at| at <= self.now_ns) => {
                return self.start(i)
            }
            Phase::Awaiting { expires_ns } if expires_ns <= self.now_ns => {
                self.report.never_echoed += 1;
                self.sessions[i].phase = Phase::Ended;
                return Ok(());
            }
            Phase::Awaiting { .. } => return Ok(()),
            Phase::Paused { resume_ns } if resume_ns <= self.now_ns => {
                let now = self.now_ns;
                let s = &mut self.sessions[i];
                if let (Some(p), Some(at)) = (s.pacer.as_mut(), s.paused_at.take()) {
                    p.resume(now);
                    s.paused_ns += now - at;
                }
                s.phase = Phase::Playing;
            }
            Phase::Paused { .. } => return Ok(()),
            Phase::Playing => {}
        }
        if !self.sessions[i].finishing && self.rng.one_in(600) {
            return self.viewer_event(i);
        }
        self.read_ahead(i);
        self.send_due(i)?;
        let done = self.sessions[i].pacer.as_ref().is_some_and(Pacer::is_done);
        if done {
            self.finish(i)?;
        }
        Ok(())
    }

    /// The pacer is done: the client finishes its receive core (what is missing is given
    /// up), and once no repair is under way the range ends.
    fn finish(&mut self, i: usize) -> Result<(), String> {
        self.deliver(i)?;
        let s = &mut self.sessions[i];
        if !s.finishing {
            s.finishing = true;
            if let Some(rx) = s.rx.as_mut() {
                rx.finish();
            }
        }
        self.drain(i)?;
        if self.sessions[i]
            .unicast
            .as_ref()
            .is_some_and(unicast::Unicast::busy)
        {
            return Ok(());
        }
        self.close_range(i, Close::Done)?;
        self.sessions[i].phase = Phase::Ended;
        Ok(())
    }

    /// A session request: admitted to await its token's echo, or refused.
    fn request(&mut self, i: usize) -> Result<(), String> {
        let waiting: Vec<IpAddr> = self
            .sessions
            .iter()
            .filter(|s| matches!(s.phase, Phase::Awaiting { .. }))
            .map(|s| s.peer_ip)
            .collect();
        let s = &mut self.sessions[i];
        match admission::admit_unvalidated(&UNVALIDATED, &waiting, s.peer_ip) {
            Ok(()) => {
                s.phase = Phase::Awaiting {
                    expires_ns: self.now_ns + ECHO_TIMEOUT_NS,
                };
                s.echo_ns = s.echo_ns.map(|after| self.now_ns + after);
            }
            Err(_) => {
                self.report.refused_unvalidated += 1;
                s.phase = Phase::Ended;
            }
        }
        Ok(())
    }

    /// The token's echo: admitted against the budget and the pool, or refused.
    fn start(&mut self, i: usize) -> Result<(), String> {
        let now = self.now_ns;
        let active: Vec<admission::Demand<'_>> = self
            .sessions
            .iter()
            .filter(|s| matches!(s.phase, Phase::Playing | Phase::Paused { .. }))
            .map(|s| self.demand_of(s))
            .collect();
        let new = self.demand_of(&self.sessions[i]);
        if admission::admit(&self.limits, &active, &new).is_err() {
            self.report.refused += 1;
            self.sessions[i].phase = Phase::Ended;
            return Ok(());
        }
        self.report.admitted += 1;
        let obj = &self.objs[self.sessions[i].obj];
        let cfg = PacerConfig {
            layout: obj.layout.clone(),
            bitrate_bps: BITRATE_BPS,
            start_codeword: self.sessions[i].start_cw,
            max_burst: MAX_BURST,
            fdt_every: 8,
        };
        let mut pacer = Pacer::new(cfg, now).map_err(|e| format!("pacer: {e}"))?;
        let rate = send_rate_bps(&obj.layout, BITRATE_BPS);
        let burst = self.rng.one_in(2).then(|| self.start_burst());
        if let Some(b) = burst {
            pacer = pacer.with_start_burst(b);
        }
        let extra = burst_extra_bits(&pacer, burst, rate, now);
        let s = &mut self.sessions[i];
        s.pacer = Some(pacer);
        s.send_rate_bps = rate;
        s.phase = Phase::Playing;
        self.open_range(i, self.sessions[i].start_cw)?;
        self.sessions[i].burst_extra_bits = extra;
        Ok(())
    }

    fn demand_of<'a>(&'a self, s: &Session) -> admission::Demand<'a> {
        let obj = &self.objs[s.obj];
        admission::Demand {
            peer_ip: s.peer_ip,
            send_rate_bps: send_rate_bps(&obj.layout, BITRATE_BPS),
            toi: obj.toi,
            layout: &obj.layout,
            codeword: s.pacer.as_ref().map_or(s.start_cw, Pacer::codeword),
        }
    }

    /// A new played range from `cw`: a new client receive core, rate accounting reset.
    fn open_range(&mut self, i: usize, cw: u32) -> Result<(), String> {
        let obj = &self.objs[self.sessions[i].obj];
        let mut rx = Receiver::new(obj.session_params(cw), ReceiverConfig::default())
            .map_err(|e| format!("receiver: {e}"))?;
        if self.cfg.mutation != SimMutation::TrustCrc {
            // The digests the client fetches from the catalog, here all known at once.
            rx.authenticate(obj.digests.len());
            for (sbn, d) in obj.digests.iter().enumerate() {
                rx.add_digests(sbn as u32, d.clone());
            }
        }
        let now = self.now_ns;
        let unicast = self.sessions[i]
            .repairs
            .then(|| unicast::Unicast::new(unicast::codeword_time(obj)));
        let s = &mut self.sessions[i];
        s.unicast = unicast;
        s.finishing = false;
        s.out_next = rx.output_start();
        s.rx = Some(rx);
        s.net_lost.clear();
        s.seg_start_ns = now;
        s.paused_ns = 0;
        s.paused_at = s.pacer.as_ref().filter(|p| p.is_paused()).map(|_| now);
        s.sent_bytes = 0;
        s.burst_extra_bits = 0;
        s.read_ahead_at = None;
        Ok(())
    }

    /// A start-up burst as admission grants one: up to 2 s of media at 2 to 4 times the rate.
    fn start_burst(&mut self) -> StartBurst {
        StartBurst {
            media_ms: self.rng.range(200, 2_000),
            factor: self.rng.range(2, 5) as u32,
        }
    }

    fn viewer_event(&mut self, i: usize) -> Result<(), String> {
        let now = self.now_ns;
        let choice = self.rng.below(6);
        let resume_ns = now + self.rng.range(20, 300) * 1_000_000;
        let codewords = self.objs[self.sessions[i].obj].layout.codewords();
        let target = self.rng.below(u64::from(codewords)) as u32;
        match choice {
            0..=2 => {
                self.report.pauses += 1;
                let s = &mut self.sessions[i];
                if let Some(p) = s.pacer.as_mut() {
                    p.pause(now);
                }
                s.paused_at = Some(now);
                s.phase = Phase::Paused { resume_ns };
            }
            3 | 4 => {
                self.report.seeks += 1;
                self.deliver(i)?;
                self.close_range(i, Close::Cut)?;
                let again =
                    (self.cfg.mutation == SimMutation::BurstAfterSeek).then(|| self.start_burst());
                if let Some(p) = self.sessions[i].pacer.take() {
                    let mut p = p;
                    p.seek(target, now).map_err(|e| format!("seek: {e}"))?;
                    let p = match again {
                        Some(b) => p.with_start_burst(b),
                        None => p,
                    };
                    self.sessions[i].pacer = Some(p);
                }
                self.open_range(i, target)?;
            }
            _ => {
                self.report.stops += 1;
                self.deliver(i)?;
                self.close_range(i, Close::Cut)?;
                let s = &mut self.sessions[i];
                s.pacer = None;
                s.phase = Phase::Ended;
            }
        }
        Ok(())
    }

    /// Sends what the pacer says is due, block by block through the cache.
    fn send_due(&mut self, i: usize) -> Result<(), String> {
        for _ in 0..256 {
            let now = self.now_ns;
            let Some(pacer) = self.sessions[i].pacer.as_mut() else {
                return Ok(());
            };
            let early_ns = match self.cfg.mutation {
                SimMutation::SendEarly => 200_000_000,
                _ => 0,
            };
            let Some(step) = pacer.peek(now + early_ns) else {
                return Ok(());
            };
            let burst = match step {
                Step::Fdt { .. } => {
                    pacer.advance();
                    continue;
                }
                Step::Burst(b) => b,
            };
            if !self.send_burst(i, &burst)? {
                return Ok(());
            }
            if let Some(p) = self.sessions[i].pacer.as_mut() {
                p.advance();
            }
        }
        Ok(())
    }

    /// Sends `b` if its block is in memory (true), skips it if the block is unreadable
    /// (true), or starts its read / waits for it (false).
    fn send_burst(&mut self, i: usize, b: &Burst) -> Result<bool, String> {
        let obj_i = self.sessions[i].obj;
        let key = BlockKey {
            toi: self.objs[obj_i].toi,
            member: b.member,
            block: b.block,
        };
        let positions = positions(&self.objs, &self.sessions);
        match self.core.begin(key, self.now_ns, &positions) {
            Ok(CoreLookup::Ready(slot)) => {
                self.transmit(i, b, slot, key)?;
                self.seq += 1;
                let until = self.now_ns + self.rng.below(3_000_000);
                self.pins.insert((until, self.seq), (slot, key));
                Ok(true)
            }
            Ok(CoreLookup::Loading) | Err(FetchError::Busy) | Err(FetchError::Full) => Ok(false),
            Ok(CoreLookup::Load { slot, .. }) => {
                self.start_read(slot, key, obj_i);
                Ok(false)
            }
            // The block is unreadable: the degraded path rebuilds its packets.
            Err(FetchError::Unavailable(_)) if self.cfg.mutation == SimMutation::DegradedSkips => {
                Ok(true)
            }
            Err(FetchError::Unavailable(_)) => self.send_rebuilt(i, b),
            Err(FetchError::Failed(e)) => Err(format!("begin never reads, yet: {e}")),
        }
    }

    /// Starts the read of `key` into `slot` (the disk's answer is decided now, delivered
    /// after its latency).
    fn start_read(&mut self, slot: u32, key: BlockKey, obj_i: usize) {
        // The read overwrites the buffer from now on.
        self.memory[slot as usize] = None;
        let delay = if self.rng.one_in(20) {
            self.rng.range(20_000_000, 80_000_000)
        } else {
            self.rng.range(200_000, 2_000_000)
        } + match self.cfg.mutation {
            SimMutation::StuckReader => 1_000_000_000,
            _ => 0,
        };
        let result = self.objs[obj_i].read_block(key.member, key.block, &mut self.rng);
        self.report.blocks_read += 1;
        self.seq += 1;
        let read = Read {
            slot,
            key,
            obj: obj_i,
            result,
        };
        self.reads.insert((self.now_ns + delay, self.seq), read);
    }

    /// The data plane's read-ahead: once per codeword, the blocks of the session's next
    /// `LOOKAHEAD_CODEWORDS` codewords not in memory are read.
    fn read_ahead(&mut self, i: usize) {
        let s = &self.sessions[i];
        let Some(c) = s
            .pacer
            .as_ref()
            .filter(|p| !p.is_done())
            .map(Pacer::codeword)
        else {
            return;
        };
        if s.read_ahead_at == Some(c) {
            return;
        }
        let obj_i = s.obj;
        let toi = self.objs[obj_i].toi;
        let mut complete = true;
        for (member, block) in blocks_of(&self.objs[obj_i].layout, c..c + LOOKAHEAD_CODEWORDS) {
            let key = BlockKey { toi, member, block };
            if self.core.contains(&key) {
                continue;
            }
            let positions = positions(&self.objs, &self.sessions);
            match self.core.begin(key, self.now_ns, &positions) {
                Ok(CoreLookup::Load { slot, .. }) => self.start_read(slot, key, obj_i),
                Ok(CoreLookup::Ready(slot)) => self.core.unpin(slot),
                Ok(CoreLookup::Loading) | Err(FetchError::Unavailable(_)) => {}
                Err(_) => complete = false,
            }
        }
        if complete {
            self.sessions[i].read_ahead_at = Some(c);
        }
    }

    /// Sends the packets of `b` from `slot`'s buffer, checking each against the store.
    fn transmit(&mut self, i: usize, b: &Burst, slot: u32, key: BlockKey) -> Result<(), String> {
        let plen = self.objs[self.sessions[i].obj].layout.params().packet_len() as usize;
        let Some((held, bytes)) = &self.memory[slot as usize] else {
            return Err(format!("slot {slot} handed out for {key:?} holds nothing"));
        };
        if *held != key {
            return Err(format!("slot {slot} handed out for {key:?} holds {held:?}"));
        }
        let at = b.first_in_block as usize * plen;
        let packets = bytes
            .get(at..at + b.len() as usize * plen)
            .ok_or("a burst past its block")?
            .chunks(plen)
            .map(<[u8]>::to_vec)
            .collect();
        self.send_packets(i, b, packets)
    }

    /// Sends `packets` (those of burst `b`), checking each against the store and the
    /// session's rate.
    fn send_packets(&mut self, i: usize, b: &Burst, packets: Vec<Vec<u8>>) -> Result<(), String> {
        let obj = &self.objs[self.sessions[i].obj];
        let plen = obj.layout.params().packet_len() as usize;
        for (sent, esi) in packets.into_iter().zip(b.esis.clone()) {
            let stored = obj
                .packets
                .get(b.sbn as usize)
                .and_then(|cw| cw.get(esi as usize))
                .ok_or("a burst of a symbol the object lacks")?;
            if sent != *stored {
                return Err(format!(
                    "session {i} sent a packet that is not the stored packet (toi {}, sbn {}, esi {esi})",
                    obj.toi, b.sbn
                ));
            }
            self.sessions[i].batch.push(sent);
        }
        let s = &mut self.sessions[i];
        s.sent_bytes += (b.len() as usize * plen) as u64;
        self.report.packets_sent += u64::from(b.len());
        let n = u64::from(obj.layout.params().source_symbols + obj.layout.params().repair_symbols);
        let active_ns = self.now_ns - s.seg_start_ns - s.paused_ns;
        let allowed_bits = u128::from(active_ns) * u128::from(s.send_rate_bps) / 1_000_000_000
            + u128::from(u64::from(MAX_BURST) + n) * plen as u128 * 8
            + s.burst_extra_bits;
        if u128::from(s.sent_bytes) * 8 > allowed_bits {
            return Err(format!(
                "session {i} sent {} bytes in {active_ns} ns: above its rate of {} bit/s",
                s.sent_bytes, s.send_rate_bps
            ));
        }
        Ok(())
    }
}

/// The bits a start-up burst `burst` of `pacer` (from `now`) sends above `rate_bps`: the
/// burst's factor less one, times the rate, over the burst's span.
fn burst_extra_bits(pacer: &Pacer, burst: Option<StartBurst>, rate_bps: u64, now: u64) -> u128 {
    let (Some(b), Some(end)) = (burst, pacer.burst_end_ns()) else {
        return 0;
    };
    u128::from(b.factor.saturating_sub(1))
        * u128::from(rate_bps)
        * u128::from(end.saturating_sub(now))
        / 1_000_000_000
}

fn new_session(id: usize, of: usize, objs: &[Obj], rng: &mut Rng) -> Session {
    let obj = rng.below(objs.len() as u64) as usize;
    let client = rng.below(12) as u8;
    let peer_ip = if client < 8 {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, client))
    } else {
        // Hosts of one /64 count as one client.
        IpAddr::V6(Ipv6Addr::new(
            0x2001,
            0xdb8,
            0,
            u16::from(client % 2),
            0,
            0,
            0,
            id as u16,
        ))
    };
    let codewords = objs[obj].layout.codewords();
    let start_cw = if rng.one_in(3) {
        rng.below(u64::from(codewords)) as u32
    } else {
        0
    };
    Session {
        id,
        obj,
        peer_ip,
        start_ns: rng.below(START_SPREAD_PER_SESSION_NS * of as u64),
        start_cw,
        phase: Phase::Waiting,
        pacer: None,
        rx: None,
        out_next: 0,
        net_lost: BTreeMap::new(),
        loss_one_in: if rng.one_in(2) { 25 } else { 400 },
        loss: repair::LossWindow::default(),
        repairs: rng.one_in(2),
        unicast: None,
        finishing: false,
        seg_start_ns: 0,
        paused_ns: 0,
        paused_at: None,
        sent_bytes: 0,
        send_rate_bps: 0,
        burst_extra_bits: 0,
        batch: Vec::new(),
        read_ahead_at: None,
        echo_ns: (!rng.one_in(8)).then(|| rng.range(1_000_000, 30_000_000)),
    }
}

mod client;
mod degraded;
mod repair;
mod unicast;

pub(crate) use degraded::{rebuild_burst, rebuild_packets};
