//! Member health and hedged reads in the simulation: the real sans-IO health core
//! ([`isnode_serve_core::member_health`]: `MemberHealth`, `read_or_rebuild`,
//! `may_read_ahead`, `watch_decision`) driven by sessions' real pacers against member disks
//! that turn slow, fail for a while (probed back), or die and are rebuilt (the rebuild swaps
//! the member's files: the server must read the new ones).
//!
//! **Real**: the objects and their packets (`store.rs`), one `Pacer` per session, every
//! decision of the health core (a member failed after 5 read errors in a row on distinct
//! blocks, slow after a read or a wait over the hedging bound, which burst is read,
//! rebuilt or hedged, when read-ahead may read a member, when a failed member is probed or
//! read again), the codeword rebuild (`read_codeword`, as `plane::degraded`).
//!
//! **Modelled**: the disks (reads 0.2-2 ms, one in 20 10-40 ms; a slow member 0.6-1.2 s; a
//! failing member EIO), the pool (a block lives 400 ms after its read; a failed read is
//! remembered 500 ms), the catalog (the state the shell writes: failed when the data plane
//! fails a member, rebuilding then ok while an operator rebuilds it), the watch's shell
//! (every second; the probe reads the member's current disk through fresh files), the
//! files the server has open (a generation per member; a rebuild makes new files, and
//! reading the old ones fails).
//!
//! **Fault budget**: one member's disk misbehaves at a time (the code rebuilds one
//! member's symbols: m = 4 = one member's share of a codeword), and the next episode
//! starts only once the health core calls every member ok again (read again, and no
//! longer slow: a slow read in flight at an episode's end keeps its member slow a while).
//!
//! **Invariants** (after every 1 ms step): every packet sent is the stored one (read or
//! rebuilt); no session falls more than [`MAX_LAG_NS`] behind its pacer (the client's
//! start-up buffer is 500 ms); no read of a failed member is started (but its probe); a
//! member whose disk has been good for [`REVIVE_BOUND_NS`] is not failed.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use isnode_serve_config::Degraded;
use isnode_serve_core::admission::LOOKAHEAD_CODEWORDS;
use isnode_serve_core::block::BlockKey;
use isnode_serve_core::member_health::{
    block_id, may_read_ahead, read_or_rebuild, watch_decision, CatalogState, MemberHealth,
    MemberState, ReadOrRebuild, WatchDecision,
};
use isnode_serve_core::pacer::{blocks_of, Burst, Pacer, PacerConfig, Step};
use isnode_store::VolumeParams;

use super::store::Obj;
use super::world::rebuild_burst;
use super::{Rng, SimMutation, Violation};

const TICK_NS: u64 = 1_000_000;
const BITRATE_BPS: u64 = 256_000;
const MAX_BURST: u32 = 4;
/// Virtual time each seed runs.
const RUN_NS: u64 = 30_000_000_000;
const SESSIONS: usize = 6;
/// `member_fail_errors`.
const FAIL_ERRORS: u32 = 5;
/// `hedge_after_ms`.
const HEDGE_AFTER: Duration = Duration::from_millis(50);
/// `member_probe_interval_ms`.
const PROBE_INTERVAL_NS: u64 = 2_000_000_000;
/// How often the shell's watch looks at the catalog (`CATALOG_EVERY`).
const WATCH_EVERY_NS: u64 = 1_000_000_000;
/// An operator starts rebuilding a failed member at the earliest this long after the
/// server failed it (what the status shows).
const OPERATOR_NS: u64 = 2_000_000_000;
/// A block stays in the pool this long after its read.
const BLOCK_LIFE_NS: u64 = 400_000_000;
/// A failed read is remembered this long (the cache's retry).
const RETRY_NS: u64 = 500_000_000;
/// Most a session may fall behind its pacer.
pub(crate) const MAX_LAG_NS: u64 = 400_000_000;
/// A member whose disk is good again is read again within this (probe interval, two
/// watch periods, a second of margin).
pub(crate) const REVIVE_BOUND_NS: u64 = PROBE_INTERVAL_NS + 2 * WATCH_EVERY_NS + 1_000_000_000;

/// The volume: E = 64, k = 8, m = 4, 3 members, 4 KiB blocks.
fn params() -> VolumeParams {
    VolumeParams {
        symbol_len: 64,
        source_symbols: 8,
        repair_symbols: 4,
        members: 3,
        block_len: 4096,
    }
}

/// What a member's disk does now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Disk {
    Good,
    /// Reads take 0.6-1.2 s.
    Slow,
    /// Reads fail with EIO (a failing disk, or a dead one before its rebuild).
    Failing,
}

/// One member: its disk, its files, what the catalog says, the watch's memory of it.
#[derive(Clone, Debug)]
struct Member {
    disk: Disk,
    /// Since when the disk has been good (and its files complete).
    good_since_ns: u64,
    /// Generation of its files on disk, and of those the server has open.
    disk_gen: u32,
    open_gen: u32,
    catalog: CatalogState,
    seen_degraded: bool,
    probed_ns: Option<u64>,
    /// When the data plane failed it (until it is read again).
    failed_at_ns: Option<u64>,
}

/// A member disk's episode: what happens to it, and when it is over.
#[derive(Clone, Copy, Debug)]
enum Episode {
    /// Slow until then.
    Slow { member: u32, until_ns: u64 },
    /// EIO until then, then good again (probed back).
    Flaky { member: u32, until_ns: u64 },
    /// Dead until then; then rebuilt (catalog rebuilding) for `rebuild_ns`: new files.
    Dead {
        member: u32,
        until_ns: u64,
        rebuild_ns: u64,
    },
    /// Being rebuilt until then.
    Rebuilding { member: u32, until_ns: u64 },
}

/// A block in the pool: its bytes, or a failed read (until its retry).
enum Pooled {
    Bytes { bytes: Vec<u8>, loaded_ns: u64 },
    Failed { until_ns: u64 },
}

struct Read {
    key: BlockKey,
    obj: usize,
    started_ns: u64,
    result: Result<Vec<u8>, String>,
}

struct Session {
    obj: usize,
    pacer: Pacer,
    /// Since when its next burst has been waiting (0: not waiting).
    waiting_since_ns: u64,
    read_ahead_at: Option<u32>,
}

/// What a run of the health world did.
#[derive(Clone, Debug, Default)]
pub(crate) struct HealthReport {
    pub packets_sent: u64,
    pub reads: u64,
    pub read_errors: u64,
    pub rebuilt_bursts: u64,
    pub hedged_bursts: u64,
    pub hedges_waiting: u64,
    pub members_failed: u64,
    pub probes: u64,
    pub revived_by_probe: u64,
    pub revived_by_rebuild: u64,
    pub slow_episodes: u64,
    pub flaky_episodes: u64,
    pub dead_episodes: u64,
    pub ranges: u64,
}

struct HealthWorld {
    mutation: SimMutation,
    rng: Rng,
    now_ns: u64,
    objs: Vec<Obj>,
    health: MemberHealth,
    members: Vec<Member>,
    episode: Option<Episode>,
    next_episode_ns: u64,
    pool: HashMap<BlockKey, Pooled>,
    reads: BTreeMap<(u64, u64), Read>,
    in_flight: HashMap<BlockKey, u64>,
    seq: u64,
    sessions: Vec<Session>,
    next_watch_ns: u64,
    report: HealthReport,
}

/// The one command that replays a seed of this world.
pub(crate) fn replay_command(seed: u64, mutation: SimMutation) -> String {
    let bug = match mutation {
        SimMutation::None => String::new(),
        m => format!("ISNODE_SIM_MUTATION={m:?} "),
    };
    format!(
        "{bug}ISNODE_SIM_SEED={seed} cargo test -p isnode-serve-core --test sim \
         tests::health_seeds -- --nocapture"
    )
}

/// Runs one seed of the health world; the first broken invariant is the error.
pub(crate) fn run(seed: u64, mutation: SimMutation) -> Result<HealthReport, Violation> {
    let mut w = HealthWorld::new(seed, mutation);
    while w.now_ns < RUN_NS {
        w.now_ns += TICK_NS;
        w.step().map_err(|what| Violation {
            seed,
            now_ns: w.now_ns,
            what,
            replay: replay_command(seed, mutation),
        })?;
    }
    Ok(w.report)
}

impl HealthWorld {
    fn new(seed: u64, mutation: SimMutation) -> HealthWorld {
        let mut rng = Rng::new(seed ^ 0x4845_414C_5448);
        let objs: Vec<Obj> = (0..2)
            .map(|i| Obj::new(params(), 1 + i, rng.range(20_000, 60_000), &mut rng))
            .collect();
        let member = Member {
            disk: Disk::Good,
            good_since_ns: 0,
            disk_gen: 0,
            open_gen: 0,
            catalog: CatalogState::Ok,
            seen_degraded: false,
            probed_ns: None,
            failed_at_ns: None,
        };
        let mut w = HealthWorld {
            mutation,
            next_episode_ns: rng.range(500_000_000, 2_000_000_000),
            rng,
            now_ns: 0,
            objs,
            health: MemberHealth::new(params().members),
            members: vec![member; params().members as usize],
            episode: None,
            pool: HashMap::new(),
            reads: BTreeMap::new(),
            in_flight: HashMap::new(),
            seq: 0,
            sessions: Vec::new(),
            next_watch_ns: WATCH_EVERY_NS,
            report: HealthReport::default(),
        };
        for _ in 0..SESSIONS {
            let s = w.new_session(0);
            w.sessions.push(s);
        }
        w
    }

    fn new_session(&mut self, now_ns: u64) -> Session {
        self.report.ranges += 1;
        let obj = self.rng.below(self.objs.len() as u64) as usize;
        let layout = self.objs[obj].layout.clone();
        let start = self.rng.below(u64::from(layout.codewords())) as u32;
        let cfg = PacerConfig {
            layout,
            bitrate_bps: BITRATE_BPS,
            start_codeword: start,
            max_burst: MAX_BURST,
            fdt_every: 8,
        };
        Session {
            obj,
            pacer: Pacer::new(cfg, now_ns + self.rng.below(50_000_000)).expect("pacer"),
            waiting_since_ns: 0,
            read_ahead_at: None,
        }
    }

    fn step(&mut self) -> Result<(), String> {
        self.episodes();
        self.complete_reads();
        if self.now_ns >= self.next_watch_ns {
            self.next_watch_ns += WATCH_EVERY_NS;
            self.watch();
        }
        let now = self.now_ns;
        self.pool.retain(|_, p| match p {
            Pooled::Bytes { loaded_ns, .. } => now < *loaded_ns + BLOCK_LIFE_NS,
            Pooled::Failed { until_ns } => now < *until_ns,
        });
        for i in 0..self.sessions.len() {
            self.read_ahead(i)?;
            self.send_due(i)?;
            if self.sessions[i].pacer.is_done() {
                self.sessions[i] = self.new_session(now);
            }
        }
        self.check()
    }

    /// Starts, moves on and ends the member disks' episodes (one at a time).
    fn episodes(&mut self) {
        let now = self.now_ns;
        match self.episode {
            Some(Episode::Slow { member, until_ns })
            | Some(Episode::Flaky { member, until_ns })
                if now >= until_ns =>
            {
                self.set_disk(member, Disk::Good);
                self.episode = None;
                self.next_episode_ns = now + self.rng.range(1_000_000_000, 3_000_000_000);
            }
            Some(Episode::Dead {
                member,
                until_ns,
                rebuild_ns,
            }) if now >= until_ns
                && self.members[member as usize]
                    .failed_at_ns
                    .is_some_and(|at| now >= at + OPERATOR_NS) =>
            {
                // The operator replaces the disk and runs `volume rebuild`: new files.
                let m = &mut self.members[member as usize];
                m.catalog = CatalogState::Rebuilding;
                m.disk_gen += 1;
                self.episode = Some(Episode::Rebuilding {
                    member,
                    until_ns: now + rebuild_ns,
                });
            }
            Some(Episode::Rebuilding { member, until_ns }) if now >= until_ns => {
                self.members[member as usize].catalog = CatalogState::Ok;
                self.set_disk(member, Disk::Good);
                self.episode = None;
                self.next_episode_ns = now + self.rng.range(1_000_000_000, 3_000_000_000);
            }
            Some(_) => {}
            None => self.start_episode(),
        }
    }

    /// A new episode once its time has come and every member is read again.
    fn start_episode(&mut self) {
        let now = self.now_ns;
        let members = params().members;
        if now < self.next_episode_ns
            || now + 8_000_000_000 > RUN_NS
            || (0..members).any(|m| self.health.state(m, now) != MemberState::Ok)
        {
            return;
        }
        let member = self.rng.below(u64::from(members)) as u32;
        let until_ns = now + self.rng.range(1_000_000_000, 4_000_000_000);
        let (episode, disk) = match self.rng.below(3) {
            0 => {
                self.report.slow_episodes += 1;
                (Episode::Slow { member, until_ns }, Disk::Slow)
            }
            1 => {
                self.report.flaky_episodes += 1;
                (Episode::Flaky { member, until_ns }, Disk::Failing)
            }
            _ => {
                self.report.dead_episodes += 1;
                let rebuild_ns = self.rng.range(500_000_000, 2_000_000_000);
                let dead = Episode::Dead {
                    member,
                    until_ns,
                    rebuild_ns,
                };
                (dead, Disk::Failing)
            }
        };
        self.episode = Some(episode);
        self.set_disk(member, disk);
    }

    fn set_disk(&mut self, member: u32, disk: Disk) {
        let m = &mut self.members[member as usize];
        if disk == Disk::Good && m.disk != Disk::Good {
            m.good_since_ns = self.now_ns;
        }
        m.disk = disk;
    }

    /// The watch of failed members, as `MemberWatch` runs it every second: the real
    /// `watch_decision`, then a revive (files opened again) or a probe.
    fn watch(&mut self) {
        let now = self.now_ns;
        for m in 0..params().members {
            if !self.health.is_failed(m) {
                continue;
            }
            let by_reads = self.health.failed_by_reads(m);
            let st = &mut self.members[m as usize];
            st.seen_degraded |= st.catalog.is_degraded();
            let since = *st.probed_ns.get_or_insert(now);
            let probe_due =
                self.mutation != SimMutation::NeverProbe && now - since >= PROBE_INTERVAL_NS;
            match watch_decision(st.catalog, st.seen_degraded, by_reads, false, probe_due) {
                WatchDecision::Keep => {}
                WatchDecision::Rebuilt => {
                    self.report.revived_by_rebuild += 1;
                    self.revive(m);
                }
                WatchDecision::Probe => {
                    self.report.probes += 1;
                    st.probed_ns = Some(now);
                    // The probe opens the member's files afresh: its identity and a block.
                    if st.disk == Disk::Good {
                        st.catalog = CatalogState::Ok;
                        self.report.revived_by_probe += 1;
                        self.revive(m);
                    }
                }
            }
        }
    }

    /// `member` is read again: the health core revives it and the shell opens its files
    /// again (`Objects::reopen_member`), unless the planted bug forgets to.
    fn revive(&mut self, member: u32) {
        if self.health.revive(member) && self.mutation != SimMutation::StaleFilesAfterRebuild {
            let m = &mut self.members[member as usize];
            m.open_gen = m.disk_gen;
        }
        let m = &mut self.members[member as usize];
        (m.seen_degraded, m.probed_ns, m.failed_at_ns) = (false, None, None);
    }

    /// Starts the read of `key` (the disk's answer decided now, delivered after its
    /// latency). A read of a failed member is a broken invariant.
    fn start_read(&mut self, key: BlockKey, obj: usize) -> Result<(), String> {
        if self.health.is_failed(key.member) {
            return Err(format!(
                "a read of failed member {} started ({key:?})",
                key.member
            ));
        }
        let m = &self.members[key.member as usize];
        let latency = match m.disk {
            Disk::Slow => self.rng.range(600_000_000, 1_200_000_000),
            // A good disk's tail stays under the hedging bound: two slow members are a
            // slow machine, not hedged (waited for) by design.
            _ if self.rng.one_in(20) => self.rng.range(10_000_000, 40_000_000),
            _ => self.rng.range(200_000, 2_000_000),
        };
        let result = if m.disk == Disk::Failing {
            Err(format!("EIO (member {} failing)", key.member))
        } else if m.open_gen != m.disk_gen {
            Err(format!("member {}: its old files are gone", key.member))
        } else {
            self.objs[obj].read_block(key.member, key.block, &mut self.rng)
        };
        self.report.reads += 1;
        self.seq += 1;
        self.in_flight.insert(key, self.now_ns);
        let read = Read {
            key,
            obj,
            started_ns: self.now_ns,
            result,
        };
        self.reads.insert((self.now_ns + latency, self.seq), read);
        Ok(())
    }

    /// Reads that complete now: into the pool, and reported to the health core.
    fn complete_reads(&mut self) {
        while let Some(entry) = self.reads.first_entry() {
            if entry.key().0 > self.now_ns {
                break;
            }
            let r = entry.remove();
            self.in_flight.remove(&r.key);
            let latency = Duration::from_nanos(self.now_ns - r.started_ns);
            let member = r.key.member;
            match r.result {
                Ok(bytes) => {
                    self.health
                        .read_ok(member, latency, Some(HEDGE_AFTER), self.now_ns);
                    let loaded_ns = self.now_ns;
                    self.pool.insert(r.key, Pooled::Bytes { bytes, loaded_ns });
                }
                Err(_) => {
                    self.report.read_errors += 1;
                    let id = block_id(self.objs[r.obj].toi, r.key.block);
                    if self.health.read_failed(member, id, FAIL_ERRORS) {
                        // The shell writes the failure into the catalog (if it says ok).
                        self.report.members_failed += 1;
                        let m = &mut self.members[member as usize];
                        m.failed_at_ns = Some(self.now_ns);
                        if m.catalog == CatalogState::Ok {
                            m.catalog = CatalogState::Failed;
                        }
                    }
                    let until_ns = self.now_ns + RETRY_NS;
                    self.pool.insert(r.key, Pooled::Failed { until_ns });
                }
            }
        }
    }

    fn in_flight_of(&self, member: u32) -> usize {
        self.in_flight.keys().filter(|k| k.member == member).count()
    }

    /// The data plane's read-ahead: the next codewords' blocks not in the pool, where
    /// `may_read_ahead` allows.
    fn read_ahead(&mut self, i: usize) -> Result<(), String> {
        let s = &self.sessions[i];
        let c = s.pacer.codeword();
        if s.pacer.is_done() || s.read_ahead_at == Some(c) {
            return Ok(());
        }
        let obj = s.obj;
        let toi = self.objs[obj].toi;
        for (member, block) in blocks_of(&self.objs[obj].layout, c..c + LOOKAHEAD_CODEWORDS) {
            let key = BlockKey { toi, member, block };
            if self.pool.contains_key(&key) || self.in_flight.contains_key(&key) {
                continue;
            }
            let n = self.in_flight_of(member);
            if may_read_ahead(&self.health, member, self.now_ns, n) {
                self.start_read(key, obj)?;
            }
        }
        self.sessions[i].read_ahead_at = Some(c);
        Ok(())
    }

    fn send_due(&mut self, i: usize) -> Result<(), String> {
        for _ in 0..256 {
            let Some(step) = self.sessions[i].pacer.peek(self.now_ns) else {
                return Ok(());
            };
            let burst = match step {
                Step::Fdt { .. } => {
                    self.sessions[i].pacer.advance();
                    continue;
                }
                Step::Burst(b) => b,
            };
            let Some(packets) = self.burst_packets(i, &burst)? else {
                let s = &mut self.sessions[i];
                if s.waiting_since_ns == 0 {
                    s.waiting_since_ns = self.now_ns;
                }
                return Ok(());
            };
            self.check_packets(i, &burst, &packets)?;
            let s = &mut self.sessions[i];
            s.waiting_since_ns = 0;
            s.pacer.advance();
        }
        Ok(())
    }

    /// The packets of burst `b` of session `i`: from the pool, or rebuilt (a failed member,
    /// a failed read, the hedged member); `None` while a read is awaited.
    fn burst_packets(&mut self, i: usize, b: &Burst) -> Result<Option<Vec<Vec<u8>>>, String> {
        let obj = self.sessions[i].obj;
        let key = BlockKey {
            toi: self.objs[obj].toi,
            member: b.member,
            block: b.block,
        };
        let plen = self.objs[obj].layout.params().packet_len() as usize;
        let at = b.first_in_block as usize * plen;
        // In the pool: its packets (`Ok`), or a failed read (`Err`).
        let pooled = match self.pool.get(&key) {
            Some(Pooled::Bytes { bytes, .. }) => Some(Ok(bytes
                .get(at..at + b.len() as usize * plen)
                .ok_or("a burst past its block")?
                .chunks(plen)
                .map(<[u8]>::to_vec)
                .collect::<Vec<_>>())),
            Some(Pooled::Failed { .. }) => Some(Err(())),
            None => None,
        };
        match pooled {
            Some(Ok(packets)) => return Ok(Some(packets)),
            Some(Err(())) => return self.rebuilt(obj, b, None),
            None => {}
        }
        let waiting = self.sessions[i].waiting_since_ns;
        let waited_ns = if waiting == 0 {
            0
        } else {
            self.now_ns - waiting
        };
        let policy = (Some(HEDGE_AFTER), Degraded::Rebuild);
        let now = self.now_ns;
        match read_or_rebuild(&self.health, b.member, policy, waited_ns, now) {
            ReadOrRebuild::Rebuild => self.rebuilt(obj, b, None),
            ReadOrRebuild::Hedge if self.mutation != SimMutation::NoHedge => {
                self.rebuilt(obj, b, Some(b.member))
            }
            ReadOrRebuild::Read | ReadOrRebuild::Hedge => {
                if !self.in_flight.contains_key(&key) {
                    self.start_read(key, obj)?;
                }
                Ok(None)
            }
        }
    }

    /// Burst `b` rebuilt from the other members' blocks in the pool (reading those that
    /// are not, unless failed or `hedged`); `None` while reads are awaited.
    fn rebuilt(
        &mut self,
        obj: usize,
        b: &Burst,
        hedged: Option<u32>,
    ) -> Result<Option<Vec<Vec<u8>>>, String> {
        let toi = self.objs[obj].toi;
        let mut pending = false;
        for (member, block) in blocks_of(&self.objs[obj].layout, b.sbn..b.sbn + 1) {
            let key = BlockKey { toi, member, block };
            let skip = hedged == Some(member) || self.health.is_failed(member);
            if skip || self.pool.contains_key(&key) {
                continue;
            }
            pending = true;
            if !self.in_flight.contains_key(&key) {
                self.start_read(key, obj)?;
            }
        }
        if pending {
            return Ok(None);
        }
        let mut blocks: HashMap<(u32, u64), Result<&[u8], String>> = HashMap::new();
        for (member, block) in blocks_of(&self.objs[obj].layout, b.sbn..b.sbn + 1) {
            let key = BlockKey { toi, member, block };
            let got = match self.pool.get(&key) {
                Some(Pooled::Bytes { bytes, .. }) => Ok(bytes.as_slice()),
                Some(Pooled::Failed { .. }) => Err("its read failed".to_string()),
                None => Err(format!("member {member} not read (failed or slow)")),
            };
            blocks.insert((member, block), got);
        }
        let why: Vec<String> = blocks
            .iter()
            .filter_map(|(at, r)| r.as_ref().err().map(|e| format!("{at:?}: {e}")))
            .collect();
        let packets = rebuild_burst(&self.objs[obj], b, blocks);
        if hedged.is_some() && packets.is_err() {
            // A hedge that cannot rebuild waits for the slow read instead (as
            // `plane::degraded` does).
            self.report.hedges_waiting += 1;
            return Ok(None);
        }
        let packets = packets.map_err(|e| {
            let states: Vec<_> = (0..params().members)
                .map(|m| self.health.state(m, self.now_ns))
                .collect();
            format!("{e} (members {states:?}, {:?}; {why:?})", self.episode)
        })?;
        self.report.rebuilt_bursts += 1;
        self.report.hedged_bursts += u64::from(hedged.is_some());
        Ok(Some(packets))
    }

    /// Every packet sent is the stored one.
    fn check_packets(&mut self, i: usize, b: &Burst, packets: &[Vec<u8>]) -> Result<(), String> {
        let obj = &self.objs[self.sessions[i].obj];
        for (sent, esi) in packets.iter().zip(b.esis.clone()) {
            let stored = obj
                .packets
                .get(b.sbn as usize)
                .and_then(|cw| cw.get(esi as usize))
                .ok_or("a burst of a symbol the object lacks")?;
            if sent != stored {
                return Err(format!(
                    "session {i} sent a packet that is not the stored packet (toi {}, sbn {}, \
                     esi {esi})",
                    obj.toi, b.sbn
                ));
            }
        }
        self.report.packets_sent += packets.len() as u64;
        Ok(())
    }

    /// After every step: no session too far behind its pacer; every member whose disk has
    /// been good long enough read again.
    fn check(&self) -> Result<(), String> {
        for (i, s) in self.sessions.iter().enumerate() {
            let due = s.pacer.next_due().unwrap_or(self.now_ns);
            let lag = self.now_ns.saturating_sub(due);
            if lag > MAX_LAG_NS {
                let states: Vec<_> = (0..params().members)
                    .map(|m| self.health.state(m, self.now_ns))
                    .collect();
                return Err(format!(
                    "session {i} is {} ms behind its pacer (codeword {}): a stall the \
                     client's buffer does not cover (members {states:?}, {:?})",
                    lag / 1_000_000,
                    s.pacer.codeword(),
                    self.episode
                ));
            }
        }
        for (m, st) in self.members.iter().enumerate() {
            let good_for = self.now_ns.saturating_sub(st.good_since_ns);
            let rebuilding = matches!(self.episode, Some(Episode::Rebuilding { member, .. }) if member as usize == m);
            if st.disk == Disk::Good
                && !rebuilding
                && good_for > REVIVE_BOUND_NS
                && self.health.is_failed(m as u32)
            {
                return Err(format!(
                    "member {m} still failed {} ms after its disk was good again \
                     (catalog {:?})",
                    good_for / 1_000_000,
                    st.catalog
                ));
            }
        }
        Ok(())
    }
}
