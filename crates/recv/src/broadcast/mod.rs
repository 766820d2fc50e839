//! `isnode play NAME --broadcast`: receive a title from its periodic broadcast
//! (docs/protocol.md, "Broadcasts"; docs/broadcast.md).
//!
//! The shell: reads the broadcast's description (`GET /v1/broadcasts`), recomputes its plan
//! and this arrival's schedule ([`tune`]), joins and leaves each channel's source group as
//! the schedule says (one socket per channel port, `IP_MULTICAST_ALL` off so it gets that
//! channel only), adds a channel's repair group only when a packet of it went missing
//! (`--broadcast-repair auto`; `always`, `never`), and feeds every packet to the receive core
//! ([`Receiver`], with a window of the whole title: the broadcast delivers later segments
//! ahead of time), writing the output in order. A clean receiver never decodes: its source
//! symbols are released as they arrive.

pub mod gap;
pub mod ladder;
pub mod tune;

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::Serialize;

use crate::config::{CutShort, PlayConfig, VerifyDigests};
use crate::control::params_of;
use crate::digest_fetch::{fetch_now, symbols_of, DigestFetcher};
use crate::impair::{ImpairStats, ScheduledImpairer, Verdict};
use crate::play::{Measured, Steer};
use crate::receiver::{Output, PacketClass, Receiver, ReceiverConfig, Release};
use isnode_proto::broadcast::BroadcastInfo;
use tune::{ChannelListen, TunePlan};

pub use crate::config::RepairGroups;
pub use tune::MAX_BROADCAST_CODEWORDS;

/// A steered reception's measurements go to its steer this often.
const STEER_EVERY: Duration = Duration::from_millis(100);
/// A channel is joined this long before its first needed transmission, left this long after.
const MARGIN_S: f64 = 0.25;
/// After the schedule's end, the receiver waits this long for stragglers.
const GRACE_S: f64 = 2.0;
/// Most datagrams read from one socket per pass.
const MAX_READS_PER_PASS: usize = 256;
/// Longest wait for a datagram before the schedule is looked at again.
const POLL_TIMEOUT: Duration = Duration::from_millis(10);
/// After the schedule, incomplete codewords are repaired over HTTP for at most this long.
const REPAIR_REST_S: f64 = 10.0;
/// A codeword completed later than its playing time's end by more than this is late.
const LATE_TOLERANCE_S: f64 = 0.05;

/// What happened on one channel.
#[derive(Clone, Debug, Serialize)]
pub struct ChannelStats {
    /// Index in the plan.
    pub channel: usize,
    /// Its source group and port.
    pub source: String,
    /// Its repair group and port.
    pub repair: String,
    /// When its source group was joined, seconds after the arrival.
    pub joined_s: Option<f64>,
    /// When it was left.
    pub left_s: Option<f64>,
    /// When its repair group was joined, if it was.
    pub repair_joined_s: Option<f64>,
    /// Bytes of source packets (and the FDT) received on it.
    pub source_bytes: u64,
    /// Bytes of repair packets received on it.
    pub repair_bytes: u64,
}

/// What `play --broadcast` reports.
#[derive(Clone, Debug, Serialize)]
pub struct BroadcastStats {
    /// The object.
    pub object: String,
    /// The broadcast's id.
    pub broadcast: String,
    /// Its scheme.
    pub scheme: String,
    /// When the receiver arrived, seconds after the broadcast's start.
    pub arrival_s: f64,
    /// The plan's worst wait, seconds.
    pub plan_worst_wait_s: f64,
    /// This arrival's wait: playback start after the arrival, seconds.
    pub wait_s: f64,
    /// When the first byte went out, seconds after the arrival.
    pub first_byte_s: Option<f64>,
    /// Codewords complete after their playing time's end (plus 50 ms).
    pub late_codewords: u32,
    /// The latest a codeword was complete after its playing time's end, seconds.
    pub max_late_s: f64,
    /// The channels.
    pub channels: Vec<ChannelStats>,
    /// Most channels listened to at once.
    pub max_channels_at_once: usize,
    /// Repair groups joined.
    pub repair_groups_joined: usize,
    /// Symbols rebuilt by decoding (0: nothing was decoded).
    pub symbols_repaired: u64,
    /// Codewords of the title.
    pub codewords: u32,
    /// Codewords lost (written as zeros).
    pub codewords_lost: u32,
    /// Whether packets were checked against the server's digests.
    pub authenticated: bool,
    /// Packets whose digest did not match (forged, or damaged past their CRC): dropped.
    pub packets_forged: u64,
    /// Packets dropped because their codeword's digests had not arrived yet.
    pub packets_unverified: u64,
    /// Bytes written.
    pub bytes_out: u64,
    /// CPU time of the receive thread, seconds.
    pub cpu_s: f64,
    /// What the injected impairment did.
    pub impair: ImpairStats,
    /// The unicast repair over HTTP of codewords the broadcast did not complete by their
    /// playing time (a lost server's gap, heavy loss), unless `--no-repair`.
    pub repair: crate::repair::RepairStats,
    /// The title, when a title with renditions was received rung by rung ([`ladder`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The title's rungs: the first (reason `start`), then every switch.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rung_timeline: Vec<crate::play::RungChange>,
    /// Each rung's reception, in order (the counters above are their sums).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rung_receptions: Vec<BroadcastStats>,
}

impl BroadcastStats {
    /// True when every byte arrived in time.
    pub fn is_clean(&self) -> bool {
        self.codewords_lost == 0 && self.late_codewords == 0
    }

    /// One line for people.
    pub fn summary(&self) -> String {
        format!(
            "broadcast {} ({}): {} codewords, {} lost, {} late (max {:.3} s); wait {:.3} s \
             (plan worst {:.3} s), first byte at {:.3} s; {} channels joined (at most {} at \
             once), {} repair groups; {} symbols decoded; {:.3} s CPU",
            self.object,
            self.scheme,
            self.codewords,
            self.codewords_lost,
            self.late_codewords,
            self.max_late_s,
            self.wait_s,
            self.plan_worst_wait_s,
            self.first_byte_s.unwrap_or(f64::NAN),
            self.channels
                .iter()
                .filter(|c| c.joined_s.is_some())
                .count(),
            self.max_channels_at_once,
            self.repair_groups_joined,
            self.symbols_repaired,
            self.cpu_s
        )
    }
}

/// One channel's socket and state.
struct Chan {
    listen: ChannelListen,
    socket: UdpSocket,
    stats: ChannelStats,
    state: Joined,
    /// The order of its source packets (loss detection for `--broadcast-repair auto`).
    order: gap::SourceOrder,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Joined {
    Not,
    Source,
    SourceAndRepair,
    Left,
}

/// Receives `args.name` from its broadcast on the server; writes `--out`, `--stats-json`.
/// A title with renditions broadcast per rung is received from the rung that fits
/// ([`ladder`]).
pub fn play(args: &PlayConfig) -> anyhow::Result<BroadcastStats> {
    let control = args.control(Duration::from_secs(10))?;
    let asked = Instant::now();
    let list = control.broadcasts()?;
    let rtt = asked.elapsed();
    let (plain, rungs): (Vec<BroadcastInfo>, Vec<BroadcastInfo>) =
        list.broadcasts.into_iter().partition(|b| b.rung.is_none());
    if let Some(info) = plain.into_iter().find(|b| b.object.name == args.name) {
        return play_described(args, &info, asked, rtt);
    }
    let rungs: Vec<BroadcastInfo> = rungs
        .into_iter()
        .filter(|b| b.rung.as_ref().is_some_and(|r| r.title == args.name))
        .collect();
    if !rungs.is_empty() {
        return ladder::play_title(args, rungs);
    }
    bail!("no broadcast of {:?} on {}", args.name, args.server)
}

/// Receives the broadcast `info`, described by an answer to a request sent at `asked` that
/// took `rtt` (the server's `elapsed_s` is placed at its middle).
pub fn play_described(
    args: &PlayConfig,
    info: &BroadcastInfo,
    asked: Instant,
    rtt: Duration,
) -> anyhow::Result<BroadcastStats> {
    check_request(args, info)?;
    let out = crate::playout::open_output(args.out.as_deref())?;
    let (stats, _) = receive(args, info, (asked, rtt), out, Part::whole())?;
    write_stats(args, &stats)?;
    Ok(stats)
}

/// Writes `--stats-json`, if asked.
pub(crate) fn write_stats(args: &PlayConfig, stats: &BroadcastStats) -> anyhow::Result<()> {
    if let Some(p) = &args.stats_json {
        std::fs::write(p, serde_json::to_vec_pretty(stats)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}

/// The part of a broadcast's object a reception writes.
pub(crate) struct Part<'a> {
    /// The first byte written: the object's start (0), or a random-access point (a rung
    /// switched to at a segment boundary).
    pub from_byte: u64,
    /// Fed the reception's measurements about every 100 ms; the reception's output ends at
    /// the byte it returns (a segment boundary: a rung switch). None: to the object's end.
    pub steer: Option<&'a mut dyn Steer>,
}

impl Part<'_> {
    /// The whole object, not steered.
    pub(crate) fn whole() -> Part<'static> {
        Part {
            from_byte: 0,
            steer: None,
        }
    }
}

/// Receives `part` of the broadcast `info` into `out` (see [`play_described`] for
/// `timing`: when the description was asked for and its round trip). Its statistics, and
/// the byte its output was cut at when the steer ended it (None: it ran to the end).
pub(crate) fn receive(
    args: &PlayConfig,
    info: &BroadcastInfo,
    (asked, rtt): (Instant, Duration),
    out: Box<dyn Write + Send>,
    part: Part<'_>,
) -> anyhow::Result<(BroadcastStats, Option<u64>)> {
    // Never ciphertext to the output: an encrypted title is decrypted segment by segment
    // with the key its viewer token fetches, asked before any group is joined.
    let protection = protection_of(args, &info.object.name)?;
    let impair = ScheduledImpairer::new(&args.impair, &args.loss_steps)?;
    // The injected loss's schedule counts from play's start (a title's), else from asking.
    let impair_from = args.play_started.unwrap_or(asked);
    let plan = tune::plan_of(info)?;
    let first = first_codeword(info, part.from_byte)?;
    // Placed in the timetable now, just before joining: the time since the description's
    // middle (the rest of its round trip, the key's request, planning) is not spent as if
    // listening (an arrival just before a codeword's transmission would miss its first
    // packets, and take it a period later).
    let arrived = Instant::now();
    let since_s = arrived
        .saturating_duration_since(asked + rtt / 2)
        .as_secs_f64();
    let arrival_s = info.elapsed_s + since_s;
    let tp = tune::tune_from(&plan, info, arrival_s, MARGIN_S, first)?;
    let (mut rx, codewords) = receiver_of(info, first)?;
    let mut chans = open_channels(&tp)?;
    let mut run = Run::new(&tp, arrived, args.broadcast_repair);
    // The channels due now are joined before the digests are fetched: their packets wait in
    // the sockets' buffers meanwhile, instead of going by unheard.
    run.arrival_s = arrival_s;
    run.schedule(&mut chans, arrived.elapsed().as_secs_f64(), &rx)?;
    let digests = authenticate(args, info, &tp, &mut rx)?;
    let out = match protection {
        Some(p) => p.writer(out, part.from_byte, info.object.size_bytes)?,
        None => out,
    };
    let mut out = Window::new(out, rx.output_start(), part.from_byte);
    let cpu0 = thread_cpu_s();
    run.unicast = unicast_repair(args, info, arrived)?;
    let deadline = (tp.end_s + GRACE_S).min(args.max_seconds.max(0.0));
    let mut reception = Reception {
        run,
        chans,
        digests,
        rx,
        impair,
        impair_from,
    };
    reception.receive(&mut out, deadline, part.steer)?;
    let cut = out.cut;
    if cut.is_some() {
        // Switched: the output ends at the boundary; nothing more is asked of this rung.
        out.flush()?;
        reception.leave_all();
    } else {
        reception.end(args, &mut out)?;
    }
    let stats = reception.stats(info, &tp, codewords, cpu0);
    Ok((stats, cut))
}

/// The codeword of `info`'s object holding byte `from_byte` (0 for 0).
fn first_codeword(info: &BroadcastInfo, from_byte: u64) -> anyhow::Result<u32> {
    if from_byte == 0 {
        return Ok(0);
    }
    let p = params_of(&info.object, &info.fec, 0)?.partition()?;
    if from_byte >= info.object.size_bytes {
        bail!(
            "byte {from_byte} is past the end of {} ({} bytes)",
            info.object.name,
            info.object.size_bytes
        );
    }
    // The last codeword starting at or before the byte.
    let blocks = p.blocks();
    let (mut lo, mut hi) = (0u32, blocks);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if p.block_offset(mid) <= from_byte {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(lo)
}

/// The output of a reception: the receive core's bytes from the object's byte `start` on,
/// of which those before `from` are dropped (a start at a random-access point inside a
/// codeword) and those from `cut` on (a rung switch's boundary, once set) are not written.
struct Window {
    out: Box<dyn Write + Send>,
    /// The object's byte the next byte handed here is.
    pos: u64,
    from: u64,
    cut: Option<u64>,
}

impl Window {
    fn new(out: Box<dyn Write + Send>, start: u64, from: u64) -> Window {
        Window {
            out,
            pos: start,
            from,
            cut: None,
        }
    }

    /// Whether the output has reached its cut.
    fn done(&self) -> bool {
        self.cut.is_some_and(|c| self.pos >= c)
    }
}

impl Write for Window {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let (lo, hi) = (self.pos, self.pos + buf.len() as u64);
        let from = self.from.max(lo);
        let to = self.cut.map_or(hi, |c| c.min(hi));
        if to > from {
            let (a, b) = ((from - lo) as usize, (to - lo) as usize);
            self.out.write_all(&buf[a..b])?;
        }
        self.pos = hi;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// What decrypting the title `name` needs (`None`: it is clear): its segments and the key
/// the viewer token fetches (without one, the server's `401` names the viewer role).
fn protection_of(
    args: &PlayConfig,
    name: &str,
) -> anyhow::Result<Option<crate::decrypt::Protection>> {
    let control = args.control(Duration::from_secs(10))?;
    match control.is_encrypted(name)? {
        true => crate::decrypt::fetch(&control, name).map(Some),
        false => Ok(None),
    }
}

/// Refuses what a broadcast receiver cannot do (`--http`) or take (a title over the limits
/// of `args`) before anything is joined or allocated.
pub(crate) fn check_request(args: &PlayConfig, info: &BroadcastInfo) -> anyhow::Result<()> {
    if args.http.is_some() {
        bail!("--http is not available with a broadcast yet: use --out FILE or --out -");
    }
    // A broadcast's receiver collects the whole object (window = codewords): its memory is
    // bounded by --max-object-bytes.
    args.announce_limits()
        .check(&crate::limits::Announced::of(&info.object), 1)
        .with_context(|| format!("refusing the broadcast {} of {}", info.id, info.object.name))?;
    Ok(())
}

/// The receive core of a broadcast from codeword `first` (its window is the rest of the
/// title, released at once) and the title's codewords.
fn receiver_of(info: &BroadcastInfo, first: u32) -> anyhow::Result<(Receiver, u32)> {
    let params = params_of(&info.object, &info.fec, first)?;
    let codewords = u32::try_from(info.plan.codewords)?;
    let rx = Receiver::new(
        params,
        ReceiverConfig {
            release: Release::Instant,
            loss_horizon: codewords,
            window_codewords: codewords,
        },
    )?;
    Ok((rx, codewords))
}

/// A broadcast being received: the loop's state, the receive core and what feeds it.
/// (Fields drop in this order, as the locals of `play_described` did before they were
/// gathered here: the unicast repair's thread is joined first.)
struct Reception {
    run: Run,
    chans: Vec<Chan>,
    digests: Option<DigestFetcher>,
    rx: Receiver,
    impair: ScheduledImpairer,
    /// The time `impair`'s steps count from.
    impair_from: Instant,
}

impl Reception {
    /// Follows the schedule, receives and writes until the title is complete, `deadline`
    /// (seconds after the arrival) has passed, or the output has reached the cut `steer`
    /// set (fed the measurements every [`STEER_EVERY`]).
    fn receive(
        &mut self,
        out: &mut Window,
        deadline: f64,
        mut steer: Option<&mut dyn Steer>,
    ) -> anyhow::Result<()> {
        let mut steered = Instant::now();
        loop {
            if let (Some(s), None) = (steer.as_deref_mut(), out.cut) {
                if steered.elapsed() >= STEER_EVERY {
                    steered = Instant::now();
                    out.cut = s.observe(&Measured {
                        valid_symbols: self.run.source_heard,
                        missed_symbols: self.run.source_missing,
                        symbol_len: self.rx.params().symbol_len,
                        released_to: out.pos,
                    });
                }
            }
            let now_s = self.run.arrived.elapsed().as_secs_f64();
            if let Some(f) = &mut self.digests {
                f.pump(&mut self.rx, 0);
            }
            self.run.schedule(&mut self.chans, now_s, &self.rx)?;
            self.impair.advance(self.impair_from.elapsed());
            let got = self
                .run
                .receive(&mut self.chans, &mut self.rx, &mut self.impair, now_s)?;
            self.run.write(&mut self.rx, out)?;
            if self.rx.is_complete() || now_s > deadline || out.done() {
                return Ok(());
            }
            if !got {
                wait_readable(&self.chans, POLL_TIMEOUT);
            }
        }
    }

    /// After the loop: repairs and writes the rest (unless cut short by `--max-seconds`),
    /// flushes the output and leaves every channel.
    fn end(&mut self, args: &PlayConfig, out: &mut dyn Write) -> anyhow::Result<()> {
        let arrived = self.run.arrived;
        // Cut short by --max-seconds: the output ends with what was played (unless
        // --keep-length); at the plan's end what is missing is lost and written as zeros.
        let cut_short =
            !self.rx.is_complete() && arrived.elapsed().as_secs_f64() > args.max_seconds;
        if !cut_short {
            self.run.repair_rest(&mut self.rx, out, args.max_seconds)?;
        }
        if !cut_short || args.cut_short() == CutShort::KeepLength {
            self.rx.finish();
            self.run.write(&mut self.rx, out)?;
        }
        out.flush()?;
        self.leave_all();
        Ok(())
    }

    /// Leaves every channel.
    fn leave_all(&mut self) {
        let now_s = self.run.arrived.elapsed().as_secs_f64();
        for c in &mut self.chans {
            leave(c, now_s);
        }
    }

    /// The statistics of the reception of `info` (planned as `tp`, `codewords` long), whose
    /// thread had used `cpu0` seconds of CPU when it started. The channels (their sockets)
    /// are gone after it; the rest (the unicast repair's thread) lives on to the caller's end.
    fn stats(
        &mut self,
        info: &BroadcastInfo,
        tp: &TunePlan,
        codewords: u32,
        cpu0: f64,
    ) -> BroadcastStats {
        let (run, rx) = (&self.run, &self.rx);
        let chans = std::mem::take(&mut self.chans);
        let st = rx.stats();
        BroadcastStats {
            object: info.object.name.clone(),
            broadcast: info.id.clone(),
            scheme: info.scheme.clone(),
            arrival_s: run.arrival_s,
            plan_worst_wait_s: info.plan.worst_wait_s,
            wait_s: tp.playback_start_s,
            first_byte_s: run.first_byte_s,
            late_codewords: run.late,
            max_late_s: run.max_late_s,
            max_channels_at_once: run.max_at_once,
            repair_groups_joined: chans
                .iter()
                .filter(|c| c.stats.repair_joined_s.is_some())
                .count(),
            channels: chans.into_iter().map(|c| c.stats).collect(),
            symbols_repaired: st.symbols_repaired,
            codewords,
            codewords_lost: st.codewords_unrecoverable.len() as u32,
            authenticated: rx.is_authenticating(),
            packets_forged: st.packets_forged,
            packets_unverified: st.packets_unverified,
            bytes_out: run.bytes_out,
            cpu_s: thread_cpu_s() - cpu0,
            impair: self.impair.stats(),
            repair: run.unicast.as_ref().map(|r| r.stats()).unwrap_or_default(),
            title: None,
            rung_timeline: Vec::new(),
            rung_receptions: Vec::new(),
        }
    }
}

/// The unicast repair of a broadcast receiver from `--server` (None with `--no-repair`):
/// a codeword given up at its playing time asks the server for its missing symbols.
fn unicast_repair(
    args: &PlayConfig,
    info: &BroadcastInfo,
    arrived: Instant,
) -> anyhow::Result<Option<crate::repair::Repair>> {
    if args.no_repair {
        return Ok(None);
    }
    // The output is a file, not a player: a codeword is held back as long as a repair may
    // take (a restart's gap), late rather than lost.
    Ok(Some(crate::repair::Repair::start(
        (&args.server, args.tls()?, args.token_for(&args.server)),
        &info.object.name,
        Duration::from_millis(args.repair_backoff_ms),
        crate::repair::MAX_REPAIR_WAIT,
        arrived,
    )))
}

/// Packet authentication of a broadcast receiver (`crate::digests`), when the title has
/// digests and `--verify-digests` is on: the digests of the channels joined first are
/// fetched now, the rest by a thread in the order the channels are joined. The book holds
/// the whole title's digests (a scheme may deliver every segment at once); a title with
/// more codewords than [`crate::digests::MAX_BOOK_CAPACITY`] is received unauthenticated
/// (said in the log).
fn authenticate(
    args: &PlayConfig,
    info: &BroadcastInfo,
    tp: &TunePlan,
    rx: &mut Receiver,
) -> anyhow::Result<Option<DigestFetcher>> {
    use crate::digests::MAX_BOOK_CAPACITY;
    if args.verify_digests == VerifyDigests::Off {
        return Ok(None);
    }
    let name = &info.object.name;
    let codewords = rx.partition().blocks();
    if info.object.packet_digests.is_none() || codewords as usize > MAX_BOOK_CAPACITY {
        tracing::warn!(
            "{name}: packets are checked by their CRC only (no digests, or too many codewords)"
        );
        return Ok(None);
    }
    rx.authenticate(codewords as usize);
    let mut listens: Vec<&ChannelListen> = tp.listens.iter().collect();
    listens.sort_by(|a, b| a.join_s.total_cmp(&b.join_s));
    let (now, later): (Vec<_>, Vec<_>) = listens
        .iter()
        .flat_map(|l| l.codewords.iter().map(move |r| (l.join_s, r.clone())))
        .partition(|(join_s, _)| *join_s <= DIGESTS_NOW_S);
    let control = Arc::new(args.control(Duration::from_secs(10))?);
    let symbols = symbols_of(*rx.partition(), rx.params().repair_symbols);
    for (_, r) in now {
        let rows = fetch_now(
            &control,
            name,
            r.start,
            r.end - r.start,
            codewords,
            &symbols,
        )
        .context("fetching the packet digests")?;
        for (sbn, d) in rows {
            rx.add_digests(sbn, d);
        }
    }
    let later = later.into_iter().map(|(_, r)| r).collect();
    Ok(Some(DigestFetcher::start_ranges(
        control,
        name.clone(),
        symbols,
        later,
    )))
}

/// Channels joined within this long of tuning in get their digests before receiving.
const DIGESTS_NOW_S: f64 = 1.0;

/// One socket per channel port, bound to the wildcard address of the groups' family.
fn open_channels(tp: &TunePlan) -> anyhow::Result<Vec<Chan>> {
    tp.listens
        .iter()
        .map(|l| {
            let any = match l.source.ip() {
                IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            };
            let socket = bind_shared(SocketAddr::new(any, l.source.port()))
                .with_context(|| format!("binding UDP port {}", l.source.port()))?;
            multicast_all_off(&socket, l.source.is_ipv4());
            crate::net::grow_recv_buffer(&socket, 4 << 20);
            socket.set_nonblocking(true)?;
            Ok(Chan {
                stats: ChannelStats {
                    channel: l.channel,
                    source: l.source.to_string(),
                    repair: l.repair.to_string(),
                    joined_s: None,
                    left_s: None,
                    repair_joined_s: None,
                    source_bytes: 0,
                    repair_bytes: 0,
                },
                listen: l.clone(),
                socket,
                state: Joined::Not,
                order: gap::SourceOrder::default(),
            })
        })
        .collect()
}

/// A UDP socket bound to `addr` with `SO_REUSEADDR`: every receiver of a broadcast on this
/// host binds the same channel ports, and each gets its own copy of a group's datagrams.
fn bind_shared(addr: SocketAddr) -> std::io::Result<UdpSocket> {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, None)?;
    s.set_reuse_address(true)?;
    s.bind(&addr.into())?;
    Ok(s.into())
}

/// `IP_MULTICAST_ALL` (`IPV6_MULTICAST_ALL`) off: the socket receives only the groups it
/// joined, not every group some socket of the host joined on its port.
fn multicast_all_off(socket: &UdpSocket, ipv4: bool) {
    use std::os::fd::AsRawFd;
    let (level, name) = if ipv4 {
        (libc::IPPROTO_IP, libc::IP_MULTICAST_ALL)
    } else {
        (libc::IPPROTO_IPV6, libc::IPV6_MULTICAST_ALL)
    };
    let v: libc::c_int = 0;
    // SAFETY: setsockopt with a valid fd and an int option value.
    unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            name,
            (&raw const v).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

fn join_group(socket: &UdpSocket, group: SocketAddr) -> std::io::Result<()> {
    match group.ip() {
        IpAddr::V4(g) => socket.join_multicast_v4(&g, &Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(g) => socket.join_multicast_v6(&g, 0),
    }
}

fn leave_group(socket: &UdpSocket, group: SocketAddr) {
    let _ = match group.ip() {
        IpAddr::V4(g) => socket.leave_multicast_v4(&g, &Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(g) => socket.leave_multicast_v6(&g, 0),
    };
}

fn leave(c: &mut Chan, now_s: f64) {
    match c.state {
        Joined::Source => leave_group(&c.socket, c.listen.source),
        Joined::SourceAndRepair => {
            leave_group(&c.socket, c.listen.source);
            leave_group(&c.socket, c.listen.repair);
        }
        Joined::Not | Joined::Left => return,
    }
    c.state = Joined::Left;
    c.stats.left_s = Some(now_s);
}

/// The receive loop's state.
struct Run {
    playback_start_s: f64,
    codeword_s: f64,
    repair: RepairGroups,
    /// Output written so far (bytes), and of the current codeword.
    bytes_out: u64,
    first_byte_s: Option<f64>,
    arrived: Instant,
    late: u32,
    max_late_s: f64,
    max_at_once: usize,
    /// A packet went missing: every channel joined from now on adds its repair group.
    lossy: bool,
    /// Source packets heard on the channels, and those missing between them
    /// ([`gap::SourceOrder`]): the loss the rung decision sees. Not the receive core's
    /// missed symbols: a channel joined in the middle of a codeword has not missed its
    /// first packets, it was not listening.
    source_heard: u64,
    source_missing: u64,
    /// Completes over HTTP what the broadcast did not by a codeword's playing time.
    unicast: Option<crate::repair::Repair>,
    /// When the receiver tuned in, seconds after the broadcast's start.
    arrival_s: f64,
}

impl Run {
    fn new(tp: &TunePlan, arrived: Instant, repair: RepairGroups) -> Run {
        Run {
            playback_start_s: tp.playback_start_s,
            codeword_s: tp.codeword_s,
            repair,
            bytes_out: 0,
            first_byte_s: None,
            arrived,
            late: 0,
            max_late_s: 0.0,
            max_at_once: 0,
            lossy: false,
            source_heard: 0,
            source_missing: 0,
            unicast: None,
            arrival_s: 0.0,
        }
    }

    /// After the schedule: the codewords still incomplete are repaired over HTTP (all
    /// given up now: their repair is asked for one after the other), for at most
    /// [`REPAIR_REST_S`] and within `--max-seconds`.
    fn repair_rest(
        &mut self,
        rx: &mut Receiver,
        out: &mut dyn Write,
        max_seconds: f64,
    ) -> anyhow::Result<()> {
        if self.unicast.is_none() {
            return Ok(());
        }
        let until_s = (self.arrived.elapsed().as_secs_f64() + REPAIR_REST_S).min(max_seconds);
        rx.give_up_before(u32::MAX);
        while !rx.is_complete() && self.arrived.elapsed().as_secs_f64() < until_s {
            self.write(rx, out)?;
            let waiting = self
                .unicast
                .as_mut()
                .is_some_and(|r| r.wait(rx, Duration::from_millis(20)));
            if !waiting && !rx.is_complete() {
                self.write(rx, out)?;
                if !self.unicast.as_mut().is_some_and(|r| r.holds(rx)) {
                    break;
                }
            }
        }
        Ok(())
    }

    /// Joins the channels due and leaves those done (all their codewords released) or past
    /// their schedule.
    fn schedule(&mut self, chans: &mut [Chan], now_s: f64, rx: &Receiver) -> anyhow::Result<()> {
        let released = rx.next_release();
        for c in chans.iter_mut() {
            if c.state == Joined::Not && now_s >= c.listen.join_s {
                join_group(&c.socket, c.listen.source)
                    .with_context(|| format!("joining {}", c.listen.source))?;
                c.state = Joined::Source;
                c.stats.joined_s = Some(now_s);
                if self.repair == RepairGroups::Always || self.lossy {
                    self.add_repair(c, now_s)?;
                }
            }
            // A channel whose codewords are not all out stays joined until the last of them
            // has played (a later broadcast of a codeword may still complete it).
            let done = released >= c.listen.last_end();
            let last_plays_s =
                self.playback_start_s + f64::from(c.listen.last_end()) * self.codeword_s;
            if matches!(c.state, Joined::Source | Joined::SourceAndRepair)
                && (done || now_s > c.listen.leave_s.max(last_plays_s))
            {
                leave(c, now_s);
            }
        }
        let at_once = chans
            .iter()
            .filter(|c| matches!(c.state, Joined::Source | Joined::SourceAndRepair))
            .count();
        self.max_at_once = self.max_at_once.max(at_once);
        Ok(())
    }

    fn add_repair(&self, c: &mut Chan, now_s: f64) -> anyhow::Result<()> {
        if c.state != Joined::Source {
            return Ok(());
        }
        join_group(&c.socket, c.listen.repair)
            .with_context(|| format!("joining {}", c.listen.repair))?;
        c.state = Joined::SourceAndRepair;
        c.stats.repair_joined_s = Some(now_s);
        Ok(())
    }

    /// Reads what the sockets hold (bounded); true if anything came.
    fn receive(
        &mut self,
        chans: &mut [Chan],
        rx: &mut Receiver,
        impair: &mut ScheduledImpairer,
        now_s: f64,
    ) -> anyhow::Result<bool> {
        let mut buf = [0u8; 2048];
        let mut any = false;
        let now = Duration::from_secs_f64(now_s.max(0.0));
        for i in 0..chans.len() {
            for _ in 0..MAX_READS_PER_PASS {
                let n = match chans[i].socket.recv(&mut buf) {
                    Ok(n) => n,
                    Err(_) => break,
                };
                any = true;
                let pkt = &mut buf[..n];
                if impair.apply(pkt) == Verdict::Drop {
                    continue;
                }
                let class = rx.push(pkt, now);
                let gap = self.account(&mut chans[i], rx, class, n as u64);
                if gap && self.repair == RepairGroups::Auto && !self.lossy {
                    // Loss on one channel is loss on the network: every channel adds repair.
                    self.lossy = true;
                    for c in chans.iter_mut() {
                        self.add_repair(c, now_s)?;
                    }
                }
            }
        }
        Ok(any)
    }

    /// Counts a packet's bytes; true if it shows a source packet of its codeword missing.
    fn account(&mut self, c: &mut Chan, rx: &Receiver, class: PacketClass, bytes: u64) -> bool {
        let PacketClass::Symbol { sbn, esi, .. } = class else {
            c.stats.source_bytes += bytes;
            return false;
        };
        let esi = u32::from(esi);
        let k = rx.partition().source_symbols(sbn);
        if esi >= k {
            c.stats.repair_bytes += bytes;
        } else {
            c.stats.source_bytes += bytes;
            self.source_heard += 1;
        }
        let part = rx.partition();
        let missing = c
            .order
            .push((sbn, esi), k, |last| part.source_symbols(last));
        self.source_missing += u64::from(missing);
        missing > 0
    }

    /// Writes what the receive core releases (zeros for what is lost); checks each
    /// codeword's completion against its playing time, and gives up a codeword a playing
    /// time after its own has ended (so that one lost codeword does not hold the rest).
    fn write(&mut self, rx: &mut Receiver, out: &mut dyn Write) -> anyhow::Result<()> {
        let playing =
            (self.arrived.elapsed().as_secs_f64() - self.playback_start_s) / self.codeword_s;
        if playing >= 2.0 {
            rx.give_up_before(playing as u32 - 1);
        }
        loop {
            if self.unicast.as_mut().is_some_and(|r| r.holds(rx)) {
                break;
            }
            let Some(o) = rx.poll_output() else {
                break;
            };
            let now_s = self.arrived.elapsed().as_secs_f64();
            match &o {
                Output::Data { bytes, .. } => out.write_all(bytes)?,
                Output::Lost { len, .. } => write_zeros(out, *len)?,
            }
            if self.first_byte_s.is_none() {
                self.first_byte_s = Some(now_s);
            }
            self.bytes_out += o.len();
            let sbn = match &o {
                Output::Data { sbn, .. } | Output::Lost { sbn, .. } => *sbn,
            };
            let part = rx.partition();
            if o.offset() + o.len() >= part.block_offset(sbn.saturating_add(1)) {
                let due_s = self.playback_start_s + f64::from(sbn + 1) * self.codeword_s;
                let late_s = now_s - due_s;
                if late_s > LATE_TOLERANCE_S {
                    self.late += 1;
                }
                self.max_late_s = self.max_late_s.max(late_s);
            }
        }
        Ok(())
    }
}

fn write_zeros(out: &mut dyn Write, mut len: u64) -> std::io::Result<()> {
    let zeros = [0u8; 8192];
    while len > 0 {
        let n = len.min(zeros.len() as u64) as usize;
        out.write_all(&zeros[..n])?;
        len -= n as u64;
    }
    Ok(())
}

/// Waits until a channel socket has a datagram, at most `timeout` (the schedule's joins
/// and leaves are checked at least that often).
fn wait_readable(chans: &[Chan], timeout: Duration) {
    use std::os::fd::AsRawFd;
    let mut fds: Vec<libc::pollfd> = chans
        .iter()
        .filter(|c| matches!(c.state, Joined::Source | Joined::SourceAndRepair))
        .map(|c| libc::pollfd {
            fd: c.socket.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(10);
    if fds.is_empty() {
        std::thread::sleep(timeout);
        return;
    }
    // SAFETY: a valid array of pollfd of the given length.
    unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
}

/// CPU time of the calling thread, seconds.
fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes before `from` are dropped, bytes from the cut on are not written, and the
    /// position counts every byte handed in.
    #[test]
    fn a_window_writes_from_its_start_to_its_cut() {
        let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
        struct Sink(std::sync::mpsc::Sender<Vec<u8>>);
        impl Write for Sink {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                let _ = self.0.send(buf.to_vec());
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut w = Window::new(Box::new(Sink(tx)), 100, 105);
        w.write_all(&[1; 10]).unwrap();
        assert!(!w.done());
        w.cut = Some(112);
        w.write_all(&[2; 10]).unwrap();
        assert!(w.done());
        w.write_all(&[3; 10]).unwrap();
        assert_eq!(w.pos, 130);
        let got: Vec<u8> = rx.try_iter().flatten().collect();
        assert_eq!(got, [vec![1; 5], vec![2; 2]].concat());
    }
}
