//! Broadcast channels and their receivers in the simulation: a title broadcast by a
//! periodic plan (one of the schemes, planned by the real `isnode_broadcast::plan`), each
//! channel paced by the real [`ChannelPacer`] sending the stored packets (source symbols to
//! the channel's source group, repair symbols to its repair group), and receivers arriving
//! at random instants: each recomputes the plan and its schedule as `play --broadcast`
//! does (the real `isnode_recv::broadcast::tune::{plan_of, tune}`), joins and leaves the
//! channels by it (the shell's rule: join at `join_s`, leave once the channel's codewords
//! are released or past both its window and their playing time), and feeds what its
//! groups carry, through a lossy network, to a real receive core (`Receiver`, the window
//! the whole title, packet digests checked).
//!
//! **Modelled**: the network (per receiver: a lossy receiver loses at most m distinct
//! symbols of a codeword while it has the repair groups, and joins them always
//! (`--broadcast-repair always`) or once it tells a loss (`auto`: the real
//! `isnode_recv::broadcast::gap::SourceOrder` on each channel's source packets; what it
//! loses before is repaired over HTTP); a clean one joins the source groups alone and
//! loses nothing), the groups (a packet goes to the
//! receivers joined to its group when it is sent), the clock (the receivers know the
//! broadcast's elapsed time exactly).
//!
//! **Invariants** (after every 1 ms step): every packet a channel sends is the stored
//! packet; no channel sends more than its timetable (n packets per transmission started);
//! every receiver's output is in order and byte-identical to the title, no codeword lost;
//! every codeword of a receiver is complete by the end of its playing time (its arrival,
//! plus its schedule's wait, plus the codewords before it and itself, plus [`SLACK_NS`];
//! one the restart cut (`restart.rs`) one playing time and [`REPAIR_SLACK_NS`] more);
//! every receiver has the whole title when its schedule ends; an `auto` receiver that lost
//! a source packet of a channel (after its first there) has joined the repair groups by
//! the next source packet of that channel it gets (a codeword with a loss before that is
//! given [`REPAIR_SLACK_NS`] more, as a cut one).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use isnode_broadcast::{plan, Plan, PlanRequest, Ratio, Scheme, Title, Transmission};
use isnode_proto::broadcast::{BroadcastChannel, BroadcastInfo, PlanSummary};
use isnode_proto::{FecInfo, ObjectInfo, ObjectStatus};
use isnode_recv::broadcast::gap::SourceOrder;
use isnode_recv::broadcast::tune::{plan_of, tune, TunePlan};
use isnode_recv::receiver::{Output, Receiver, ReceiverConfig, Release};
use isnode_serve_core::channel::ChannelPacer;
use isnode_serve_core::pacer::Step;
use isnode_store::VolumeParams;

use super::store::Obj;
use super::{Rng, SimMutation, Violation};

const TICK_NS: u64 = 1_000_000;
/// The title's bitrate: a 512-byte codeword plays 64 ms (τ).
const BITRATE_BPS: u64 = 64_000;
const MAX_BURST: u32 = 4;
/// The receiver's join margin (`play --broadcast`'s `MARGIN_S`).
const MARGIN_S: f64 = 0.25;
/// A codeword complete this long after its playing time's end is late (two ticks: the
/// clock's grain and the last burst's).
pub(crate) const SLACK_NS: u64 = 2 * TICK_NS;
/// Receivers per seed.
const RECEIVERS: usize = 10;
/// A codeword the restart cut may be complete this much later than its playing time's end
/// (given up one playing time later, then a repair's round trip of at most 30 ms).
const REPAIR_SLACK_NS: u64 = 100_000_000;

/// The volume: E = 64, k = 8, m = 4, 3 members.
fn params() -> VolumeParams {
    VolumeParams {
        symbol_len: 64,
        source_symbols: 8,
        repair_symbols: 4,
        members: 3,
        block_len: 4096,
    }
}

/// What a run of the broadcast world did.
#[derive(Clone, Debug, Default)]
pub(crate) struct BroadcastReport {
    pub scheme: String,
    pub channels: usize,
    pub packets_sent: u64,
    pub receivers: u64,
    pub lossy_receivers: u64,
    pub auto_receivers: u64,
    pub auto_repair_joins: u64,
    pub packets_delivered: u64,
    pub packets_lost: u64,
    pub joins: u64,
    pub codewords_decoded_late_max_ns: u64,
    pub bytes_played: u64,
    pub cut_codewords: u64,
    pub repair_requests: u64,
    pub repaired_codewords: u64,
}

/// What a receiver's network does and when it joins the repair groups.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Loses nothing, never joins the repair groups.
    Clean,
    /// Loses packets; joins the repair groups with every channel (`always`).
    Always,
    /// Loses packets; joins the repair groups once it tells a loss (`auto`).
    Auto,
}

/// An `auto` receiver's loss detection, per listen of its schedule.
#[derive(Default)]
struct AutoRepair {
    /// It told a loss: every channel joined has its repair group too.
    on: bool,
    /// The real rule's state per listen.
    orders: Vec<SourceOrder>,
    /// The planted bug's rule: the last source packet per listen.
    last: Vec<Option<(u32, u32)>>,
    /// Per listen: a source packet was received / one was lost since (to be told).
    seen: Vec<bool>,
    pending: Vec<bool>,
    /// Codewords that lost a packet before the repair groups were joined.
    unrepaired: BTreeSet<u32>,
}

/// A receiver: its schedule, its joins, its receive core and its checks.
struct Rcv {
    arrival_ns: u64,
    tp: Option<TunePlan>,
    kind: Kind,
    auto: AutoRepair,
    /// Per listen: joined (source, repair), left.
    joined: Vec<(bool, bool, bool)>,
    rx: Option<Receiver>,
    out_next: u64,
    /// The codeword whose completion is checked next.
    next_cw: u32,
    /// Distinct symbols the network took per codeword.
    taken: HashMap<u32, BTreeSet<u32>>,
    /// Its unicast repair over HTTP.
    unicast: Option<restart::Unicast>,
    done: bool,
}

struct BroadcastWorld {
    mutation: SimMutation,
    rng: Rng,
    /// The repair loop's clock origin (only differences of it are used).
    epoch: Instant,
    /// When the server restarts, whether it has, and the codewords in flight then.
    restart_ns: u64,
    restarted: bool,
    cut: BTreeSet<u32>,
    now_ns: u64,
    obj: Obj,
    plan: Arc<Plan>,
    info: BroadcastInfo,
    channels: Vec<ChannelPacer>,
    /// Per channel: packets sent, transmissions started so far and the next one.
    sent: Vec<u64>,
    started: Vec<(u64, Option<Transmission>)>,
    rcvs: Vec<Rcv>,
    end_ns: u64,
    report: BroadcastReport,
}

/// The one command that replays a seed of this world.
pub(crate) fn replay_command(seed: u64, mutation: SimMutation) -> String {
    let bug = match mutation {
        SimMutation::None => String::new(),
        m => format!("ISNODE_SIM_MUTATION={m:?} "),
    };
    format!(
        "{bug}ISNODE_SIM_SEED={seed} cargo test -p isnode-serve-core --test sim \
         tests::broadcast_seeds -- --nocapture"
    )
}

/// Runs one seed of the broadcast world; the first broken invariant is the error.
pub(crate) fn run(seed: u64, mutation: SimMutation) -> Result<BroadcastReport, Violation> {
    let violation = |now_ns, what| Violation {
        seed,
        now_ns,
        what,
        replay: replay_command(seed, mutation),
    };
    let mut w = BroadcastWorld::new(seed, mutation).map_err(|e| violation(0, e))?;
    while w.now_ns < w.end_ns {
        w.now_ns += TICK_NS;
        w.step().map_err(|what| violation(w.now_ns, what))?;
        if w.rcvs.iter().all(|r| r.done) {
            return Ok(w.report);
        }
    }
    let open: Vec<usize> = (0..w.rcvs.len()).filter(|&i| !w.rcvs[i].done).collect();
    Err(violation(
        w.now_ns,
        format!("receivers {open:?} never finished"),
    ))
}

/// The schemes the world draws from: every scheme whose plan promises no late byte.
fn scheme(rng: &mut Rng) -> Scheme {
    match rng.below(8) {
        0 => Scheme::Staggered,
        1 => Scheme::Pyramid,
        2 => Scheme::Skyscraper { width: 52 },
        3 => Scheme::Fast,
        4 => Scheme::Pagoda,
        5 => Scheme::CautiousHarmonic,
        6 => Scheme::QuasiHarmonic { m: 4 },
        _ => Scheme::Polyharmonic { m: 2 },
    }
}

impl BroadcastWorld {
    fn new(seed: u64, mutation: SimMutation) -> Result<BroadcastWorld, String> {
        let mut rng = Rng::new(seed ^ 0x4252_4F41_4443_4153);
        let obj = Obj::new(params(), 1, rng.range(8_000, 40_000), &mut rng);
        let codewords = u64::from(obj.layout.codewords());
        let payload = u64::from(params().symbol_len * params().source_symbols);
        let title = Title::new(codewords, payload, BITRATE_BPS).map_err(|e| format!("{e}"))?;
        let tau_s = title.codeword_airtime_s();
        let scheme = scheme(&mut rng);
        let req = PlanRequest {
            title,
            max_wait_s: tau_s * rng.range(2, 9) as f64,
            scheme,
            client_cap_bps: None,
        };
        let plan = Arc::new(plan(&req).map_err(|e| format!("planning {scheme}: {e}"))?);
        let mut channels = Vec::new();
        // The planted bug: every channel runs one codeword late of the epoch reported.
        let epoch_ns = match mutation {
            SimMutation::ChannelLate => (tau_s * 1e9) as u64,
            _ => 0,
        };
        for c in 0..plan.channels.len() {
            let ch = ChannelPacer::new(plan.clone(), c, obj.layout.clone(), MAX_BURST, epoch_ns)
                .map_err(|e| format!("channel {c}: {e}"))?;
            channels.push(ch);
        }
        let info = describe(&obj, &plan, &req);
        let cycle_ns = (plan.longest_cycle().to_f64() * tau_s * 1e9) as u64;
        let rcvs = (0..RECEIVERS)
            .map(|_| Rcv {
                arrival_ns: rng.below(2 * cycle_ns.max(1_000_000_000)),
                tp: None,
                kind: match (rng.one_in(2), rng.one_in(2)) {
                    (false, _) => Kind::Clean,
                    (true, false) => Kind::Always,
                    (true, true) => Kind::Auto,
                },
                auto: AutoRepair::default(),
                joined: Vec::new(),
                rx: None,
                out_next: 0,
                next_cw: 0,
                taken: HashMap::new(),
                unicast: None,
                done: false,
            })
            .collect();
        let started = (0..plan.channels.len())
            .map(|c| (0, plan.next_transmission(c, Ratio::ZERO)))
            .collect();
        let end_ns = 2 * cycle_ns.max(1_000_000_000) + 4 * cycle_ns + 60_000_000_000;
        let restart_ns = rng.range(cycle_ns / 2, 2 * cycle_ns.max(1_000_000_000));
        Ok(BroadcastWorld {
            mutation,
            rng,
            epoch: Instant::now(),
            restart_ns,
            restarted: false,
            cut: BTreeSet::new(),
            now_ns: 0,
            report: BroadcastReport {
                scheme: scheme.to_string(),
                channels: plan.channels.len(),
                ..BroadcastReport::default()
            },
            sent: vec![0; plan.channels.len()],
            started,
            obj,
            plan,
            info,
            channels,
            rcvs,
            end_ns,
        })
    }

    fn tau_ns(&self) -> f64 {
        self.plan.title.codeword_airtime_s() * 1e9
    }

    fn step(&mut self) -> Result<(), String> {
        self.restart()?;
        for i in 0..self.rcvs.len() {
            self.tune_in(i)?;
            self.schedule(i);
            self.repair_answers(i)?;
            self.drain(i)?;
        }
        for c in 0..self.channels.len() {
            self.send_channel(c)?;
        }
        for i in 0..self.rcvs.len() {
            self.check_receiver(i)?;
        }
        Ok(())
    }

    /// A receiver that arrives now computes its plan and schedule, and its receive core.
    fn tune_in(&mut self, i: usize) -> Result<(), String> {
        let r = &self.rcvs[i];
        if r.tp.is_some() || r.done || r.arrival_ns > self.now_ns {
            return Ok(());
        }
        let mut info = self.info.clone();
        info.elapsed_s = r.arrival_ns as f64 / 1e9;
        let plan = plan_of(&info).map_err(|e| format!("receiver {i}: plan_of: {e:#}"))?;
        let tp = tune(&plan, &info, info.elapsed_s, MARGIN_S)
            .map_err(|e| format!("receiver {i}: tune: {e:#}"))?;
        let codewords = self.obj.layout.codewords();
        let config = ReceiverConfig {
            release: Release::Instant,
            loss_horizon: codewords,
            window_codewords: codewords,
        };
        let mut rx = Receiver::new(self.obj.session_params(0), config)
            .map_err(|e| format!("receiver {i}: {e}"))?;
        rx.authenticate(self.obj.digests.len());
        for (sbn, d) in self.obj.digests.iter().enumerate() {
            rx.add_digests(sbn as u32, d.clone());
        }
        self.report.receivers += 1;
        let kind = self.rcvs[i].kind;
        self.report.lossy_receivers += u64::from(kind != Kind::Clean);
        self.report.auto_receivers += u64::from(kind == Kind::Auto);
        let r = &mut self.rcvs[i];
        r.joined = vec![(false, false, false); tp.listens.len()];
        let n = tp.listens.len();
        r.auto.orders = vec![SourceOrder::default(); n];
        r.auto.last = vec![None; n];
        r.auto.seen = vec![false; n];
        r.auto.pending = vec![false; n];
        r.unicast = Some(restart::Unicast::new(Duration::from_secs_f64(
            tp.codeword_s,
        )));
        r.tp = Some(tp);
        r.rx = Some(rx);
        Ok(())
    }

    /// The shell's joins and leaves (`Run::schedule` of `play --broadcast`).
    fn schedule(&mut self, i: usize) {
        let now_ns = self.now_ns;
        let r = &mut self.rcvs[i];
        let (Some(tp), Some(rx)) = (&r.tp, &r.rx) else {
            return;
        };
        let now_s = (now_ns - r.arrival_ns) as f64 / 1e9;
        let released = rx.next_release();
        for (l, j) in tp.listens.iter().zip(r.joined.iter_mut()) {
            if !j.0 && !j.2 && now_s >= l.join_s {
                let repair = r.kind == Kind::Always || (r.kind == Kind::Auto && r.auto.on);
                *j = (true, repair, false);
                self.report.joins += 1;
            }
            let last_plays_s = tp.playback_start_s + f64::from(l.last_end()) * tp.codeword_s;
            let done = released >= l.last_end();
            if j.0 && (done || now_s > l.leave_s.max(last_plays_s)) {
                *j = (false, false, true);
            }
        }
    }

    /// Channel `c` sends what its pacer has due, to its groups' members.
    fn send_channel(&mut self, c: usize) -> Result<(), String> {
        let n = params().source_symbols + params().repair_symbols;
        for _ in 0..4096 {
            let now = self.now_ns;
            let Some(step) = self.channels[c].peek(now) else {
                break;
            };
            if let Step::Burst(b) = step {
                // A codeword's own k: ESIs from it on are repair packets (its repair group).
                let k = self.obj.layout.source_symbols(b.sbn);
                for esi in b.esis.clone() {
                    let p = self
                        .obj
                        .packets
                        .get(b.sbn as usize)
                        .and_then(|cw| cw.get(esi as usize))
                        .ok_or("a burst of a symbol the title lacks")?
                        .clone();
                    self.sent[c] += 1;
                    self.report.packets_sent += 1;
                    self.deliver(c, b.sbn, esi, esi >= k, &p)?;
                }
            }
            self.channels[c].advance(now);
        }
        self.check_egress(c, n)
    }

    /// No channel sends more than its timetable: n packets per transmission started.
    fn check_egress(&mut self, c: usize, n: u32) -> Result<(), String> {
        let title = &self.plan.title;
        let now_tau = Ratio::new(
            i128::from(self.now_ns) * i128::from(title.bitrate_bps),
            i128::from(title.codeword_payload_bytes) * 8 * 1_000_000_000,
        );
        let (count, next) = &mut self.started[c];
        while let Some(tx) = next.filter(|tx| tx.start <= now_tau) {
            *count += 1;
            *next = self.plan.next_transmission(c, tx.start + tx.airtime);
        }
        if self.sent[c] > *count * u64::from(n) {
            return Err(format!(
                "channel {c} sent {} packets, more than its timetable's {} transmissions",
                self.sent[c], count
            ));
        }
        Ok(())
    }

    /// A packet of channel `c` to every receiver joined to its group, through the network.
    fn deliver(
        &mut self,
        c: usize,
        sbn: u32,
        esi: u32,
        repair: bool,
        p: &[u8],
    ) -> Result<(), String> {
        let m = params().repair_symbols as usize;
        let now = Duration::from_nanos(self.now_ns);
        for i in 0..self.rcvs.len() {
            let r = &mut self.rcvs[i];
            let (Some(tp), Some(rx)) = (&r.tp, r.rx.as_mut()) else {
                continue;
            };
            let Some(at) = tp.listens.iter().position(|l| l.channel == c) else {
                continue;
            };
            let (source, rep, _) = r.joined[at];
            if r.kind == Kind::Auto && repair && source && !rep {
                // Repair packets passing by before a loss was told: a loss of this codeword
                // in a later transmission may need unicast repair.
                r.auto.unrepaired.insert(sbn);
            }
            if !(if repair { rep } else { source }) {
                continue;
            }
            let unguarded = r.kind == Kind::Auto && !r.auto.on;
            if r.kind != Kind::Clean && self.rng.one_in(8) {
                let taken = r.taken.entry(sbn).or_default();
                if unguarded || taken.contains(&esi) || taken.len() < m {
                    taken.insert(esi);
                    self.report.packets_lost += 1;
                    if unguarded {
                        r.auto.pending[at] |= r.auto.seen[at];
                        r.auto.unrepaired.insert(sbn);
                    }
                    continue;
                }
            }
            self.report.packets_delivered += 1;
            rx.push(p, now);
            if r.kind == Kind::Auto && !repair {
                self.tell_loss(i, at, (sbn, esi))?;
            }
            self.drain(i)?;
        }
        Ok(())
    }

    /// An `auto` receiver's source packet `(sbn, esi)` of listen `at`: a loss told joins
    /// every joined channel's repair group; one lost since the last source packet of the
    /// channel must be told now.
    fn tell_loss(&mut self, i: usize, at: usize, (sbn, esi): (u32, u32)) -> Result<(), String> {
        let r = &mut self.rcvs[i];
        let Some(rx) = r.rx.as_ref() else {
            return Ok(());
        };
        let part = rx.partition();
        let k = part.source_symbols(sbn);
        let a = &mut r.auto;
        let told = match self.mutation {
            SimMutation::AutoMissesBoundary => {
                let last = a.last[at].replace((sbn, esi));
                last.is_some_and(|(s, e)| esi < k && s == sbn && esi > e + 1)
            }
            _ => a.orders[at].push((sbn, esi), k, |last| part.source_symbols(last)) > 0,
        };
        if told && !a.on {
            a.on = true;
            self.report.auto_repair_joins += 1;
            for j in r.joined.iter_mut().filter(|j| j.0) {
                j.1 = true;
            }
        }
        if std::mem::take(&mut a.pending[at]) && !a.on {
            return Err(format!(
                "receiver {i} (repair groups on loss) lost a source packet of channel {} \
                 before codeword {sbn} ESI {esi} and did not join the repair groups",
                r.tp.as_ref().map_or(0, |tp| tp.listens[at].channel)
            ));
        }
        a.seen[at] = true;
        Ok(())
    }

    /// Takes receiver `i`'s output, checking order and bytes.
    fn drain(&mut self, i: usize) -> Result<(), String> {
        loop {
            if self.repair_holds(i) {
                return Ok(());
            }
            let r = &mut self.rcvs[i];
            let Some(rx) = r.rx.as_mut() else {
                return Ok(());
            };
            let Some(o) = rx.poll_output() else {
                return Ok(());
            };
            if o.offset() != r.out_next {
                return Err(format!(
                    "receiver {i}: output at {} after {}",
                    o.offset(),
                    r.out_next
                ));
            }
            match &o {
                Output::Data { offset, bytes, .. } => {
                    let at = *offset as usize;
                    if self.obj.bytes.get(at..at + bytes.len()) != Some(bytes.as_slice()) {
                        return Err(format!(
                            "receiver {i}: output at {at} differs from the title"
                        ));
                    }
                }
                Output::Lost { sbn, .. } => {
                    return Err(format!("receiver {i}: codeword {sbn} lost"));
                }
            }
            r.out_next += o.len();
            self.report.bytes_played += o.len();
        }
    }

    /// Each codeword complete by the end of its playing time; the whole title by the end
    /// of the schedule.
    fn check_receiver(&mut self, i: usize) -> Result<(), String> {
        let tau_ns = self.tau_ns();
        let codewords = self.obj.layout.codewords();
        let r = &mut self.rcvs[i];
        let Some(tp) = &r.tp else {
            return Ok(());
        };
        if r.done {
            return Ok(());
        }
        let start_ns = r.arrival_ns as f64 + tp.playback_start_s * 1e9;
        while r.next_cw < codewords {
            let end = self.obj.layout.codeword_offset(r.next_cw + 1);
            let end = end.min(self.obj.layout.transfer_len());
            let cut = self.cut.contains(&r.next_cw) || r.auto.unrepaired.contains(&r.next_cw);
            let repair_ns = match cut {
                true => tau_ns + REPAIR_SLACK_NS as f64,
                false => 0.0,
            };
            let due_ns =
                start_ns + f64::from(r.next_cw + 1) * tau_ns + (SLACK_NS as f64) + repair_ns;
            if r.out_next >= end {
                let late = (self.now_ns as f64 - (due_ns - SLACK_NS as f64 - repair_ns)).max(0.0);
                self.report.codewords_decoded_late_max_ns =
                    self.report.codewords_decoded_late_max_ns.max(late as u64);
                r.next_cw += 1;
                continue;
            }
            if self.now_ns as f64 > due_ns {
                return Err(format!(
                    "receiver {i} ({} scheme, {:?}, arrived at {} ms): codeword {} not complete \
                     by the end of its playing time ({} ms)",
                    self.report.scheme,
                    r.kind,
                    r.arrival_ns / 1_000_000,
                    r.next_cw,
                    due_ns as u64 / 1_000_000
                ));
            }
            break;
        }
        if r.next_cw >= codewords {
            r.done = true;
            r.rx = None;
            if let Some(u) = r.unicast.take() {
                self.report.repaired_codewords += u64::from(u.rl.stats().codewords_repaired);
            }
            let joined = r.joined.iter_mut();
            joined.for_each(|j| *j = (false, false, true));
        } else if self.now_ns > r.arrival_ns + ((tp.end_s + 2.0) * 1e9) as u64 {
            return Err(format!(
                "receiver {i}: its schedule ended at codeword {}",
                r.next_cw
            ));
        }
        Ok(())
    }
}

mod restart;

/// The broadcast's description (`GET /v1/broadcasts`) as the server gives it.
fn describe(obj: &Obj, plan: &Plan, req: &PlanRequest) -> BroadcastInfo {
    let p = obj.layout.params();
    let (width, m) = match req.scheme {
        Scheme::Skyscraper { width } => (Some(width), None),
        Scheme::QuasiHarmonic { m } | Scheme::Polyharmonic { m } => (None, Some(m)),
        _ => (None, None),
    };
    BroadcastInfo {
        id: "b1".into(),
        object: ObjectInfo {
            name: "sim-broadcast".into(),
            size_bytes: obj.layout.transfer_len(),
            bitrate_bps: BITRATE_BPS,
            duration_s: 0.0,
            content_type: "application/octet-stream".into(),
            symbol_size: p.symbol_len,
            source_symbols: p.source_symbols,
            repair_symbols: p.repair_symbols,
            codewords: obj.layout.codewords(),
            tsi: obj.tsi,
            toi: obj.toi,
            moov_at_front: None,
            packet_digests: None,
            status: ObjectStatus::Ok,
            problem: None,
            front_codewords: None,
        },
        scheme: req.scheme.name().into(),
        max_wait_s: req.max_wait_s,
        width,
        m,
        plan: PlanSummary {
            codewords: plan.title.codewords,
            codeword_payload_bytes: plan.title.codeword_payload_bytes,
            bitrate_bps: plan.title.bitrate_bps,
            slot_codewords: plan.slot_codewords,
            server_rate_bps: plan.server_rate_bps,
            worst_wait_s: plan.client.worst_wait_s,
            max_channels: plan.client.max_channels,
            peak_buffer_bytes: plan.client.peak_buffer_bytes,
        },
        channels: plan
            .channels
            .iter()
            .map(|c| BroadcastChannel {
                index: c.index,
                rate_bps: c.rate_bps,
                send_rate_bps: 0,
                mean_send_rate_bps: 0,
                source: format!("239.1.1.{}:{}", c.index, 5000 + 2 * c.index),
                repair: format!("239.1.2.{}:{}", c.index, 5001 + 2 * c.index),
            })
            .collect(),
        send_rate_bps: 0,
        elapsed_s: 0.0,
        remaining_s: None,
        ttl: 1,
        fdt_xml: String::new(),
        fec: FecInfo {
            encoding_id: isnode_wire::FEC_ENCODING_ID_RS28,
            symbol_size: p.symbol_len,
            max_source_block_length: p.source_symbols,
            max_encoding_symbols: p.source_symbols + p.repair_symbols,
        },
        packets_sent: 0,
        bytes_sent: 0,
        automatic: false,
        viewers_redirected: 0,
        rung: None,
    }
}
