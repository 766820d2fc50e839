//! One session's receive loop: socket → source filter → impairment → receive core → playout.

use std::io::Write;
use std::net::UdpSocket;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use isnode_wire::DATA_HEADER_LEN;

use crate::digest_fetch::{ahead_codewords, symbols_of, DigestFetcher};
use crate::impair::{ScheduledImpairer, Verdict};
use crate::loss::LossMeter;
use crate::net::{enable_gro, grow_recv_buffer, set_poll_timeout, Batch};
use crate::playout::{self, AtDeadline, Pacing, PlayoutConfig, PlayoutStats};
use crate::queue::{self, Producer};
use crate::receiver::{Output, Receiver, ReceiverConfig, Release};
use crate::repair::{self, Repair};

use super::resume::{Moved, Rebind, Resume, Resumed};
use super::setup::{SessionSetup, SourceFilter, RECV_BUFFER_BYTES};
use super::stats::{assemble, EndReason, LoopCounts, PlayStats, PlayTimes};
use crate::config::{CutShort, PlayConfig};

/// When the receive loop gives up, from `--timeout-s` and `--max-seconds`.
#[derive(Clone, Copy, Debug)]
struct Limits {
    /// No datagram for this long ends the session.
    idle_timeout: Duration,
    /// Once the last codeword has been seen, no datagram for this long ends the session.
    tail_idle: Duration,
    /// The session (receive loop, playout) ends at this instant in any case.
    deadline: Instant,
    /// No datagram for this long (before the last codeword): ask the server to resume.
    resume_after: Option<Duration>,
}

impl Limits {
    /// The limits of a session started at `start` (`--max-seconds` counts from there).
    fn from_args(args: &PlayConfig, start: Instant) -> anyhow::Result<Limits> {
        let idle_timeout = secs(args.timeout_s, "--timeout-s")?;
        Ok(Limits {
            idle_timeout,
            tail_idle: idle_timeout.min(Duration::from_secs(1)),
            deadline: deadline_after(start, args.max_seconds)?,
            resume_after: (args.resume_after_ms > 0)
                .then(|| Duration::from_millis(args.resume_after_ms)),
        })
    }
}

/// `start` plus `--max-seconds` (far in the future if that does not fit an `Instant`).
pub(super) fn deadline_after(start: Instant, max_seconds: f64) -> anyhow::Result<Instant> {
    let max = secs(max_seconds, "--max-seconds")?;
    Ok(start
        .checked_add(max)
        .unwrap_or_else(|| start + Duration::from_secs(100 * 365 * 86_400)))
}

fn secs(v: f64, what: &str) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(v).map_err(|_| anyhow::anyhow!("{what} must be >= 0, got {v}"))
}

/// How the playout buffer writes this session: paced at the bitrate unless
/// `--as-fast-as-possible`, after `--prebuffer-ms`. Default prebuffer: none with
/// [`Release::Instant`] (playout starts at the first byte released; the server's start-up
/// burst gives the lead that covers waiting for a codeword's decode), one codeword's playing
/// time with [`Release::Codeword`] (as before instant start).
fn playout_config(
    args: &PlayConfig,
    setup: &SessionSetup,
    rx: &Receiver,
    deadline: Instant,
) -> PlayoutConfig {
    let codeword_bits =
        f64::from(rx.partition().a_large) * f64::from(setup.params.symbol_len) * 8.0;
    let codeword_time = if setup.bitrate_bps > 0 {
        Duration::from_secs_f64(codeword_bits / setup.bitrate_bps as f64)
    } else {
        Duration::ZERO
    };
    PlayoutConfig {
        bitrate_bps: setup.bitrate_bps,
        pacing: if args.as_fast_as_possible {
            Pacing::AsFastAsPossible
        } else {
            Pacing::AtBitrate
        },
        prebuffer: match (args.prebuffer_ms, Release::from(args.release)) {
            (Some(ms), _) => Duration::from_millis(ms),
            (None, Release::Instant) => Duration::ZERO,
            (None, Release::Codeword) => codeword_time,
        },
        deadline: Some(deadline),
        at_deadline: match args.cut_short() {
            CutShort::Truncate => AtDeadline::Stop,
            CutShort::KeepLength => AtDeadline::Unpaced,
        },
    }
}

/// Packet authentication of a session: the digests fetched before the stream started
/// and the control client that fetches the rest.
pub(super) struct Auth {
    pub control: std::sync::Arc<crate::control::ControlClient>,
    pub initial: crate::digests::DigestRows,
}
/// How a drain of the receive core ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Drained {
    /// Nothing more is decided (or the output was cut there).
    Empty,
    /// The queue to playout is full: the rest stays in the core (back-pressure).
    QueueFull,
    /// The unicast repair holds the release point.
    RepairHolds,
    /// The playout thread is gone.
    WriterGone,
}

/// The receive core and what feeds it and drains it.
struct Feed<'a> {
    rx: Receiver,
    /// Fetches packet digests ahead of the release point (None: no authentication).
    digests: Option<DigestFetcher>,
    /// How far ahead digests are fetched.
    digests_ahead: u32,
    source: &'a SourceFilter,
    /// Injected loss and corruption; None when `--loss`, `--corrupt` and every
    /// `--loss-step` are 0.
    impairer: Option<ScheduledImpairer>,
    /// From play's start to the session's request: the impairer's time is the receive
    /// loop's (from the request) plus this.
    impair_lead: Duration,
    counts: LoopCounts,
    /// The bounded queue to the playout thread.
    pieces: Producer,
    /// The stream's bitrate (0: unknown).
    bitrate_bps: u64,
    /// When a datagram that is not a valid packet of this stream last came (another
    /// source, corrupt, foreign, forged): the receive loop does not sleep between
    /// receives for a while after ([`Ticks`]).
    stray_at: Option<Duration>,
    /// Highest SBN of a symbol taken into the window.
    max_sbn: Option<u32>,
    /// Codewords from this one on are not released (a session cut short).
    cut_at: Option<u32>,
    /// Set when the playout thread stopped taking pieces.
    writer_gone: bool,
    /// Unicast repair of what the code cannot decode (None: `--no-repair`, or no server).
    repair: Option<Repair>,
    /// The packets of a receive kept for the core (reused from receive to receive).
    kept: Vec<usize>,
    /// Their digests, when packets are authenticated (reused likewise).
    digest_buf: Vec<isnode_wire::digest::Digest>,
    /// The measured loss, published to the keepalive thread through `loss`.
    meter: LossMeter,
    /// When the meter was last fed.
    metered_at: Option<Duration>,
    /// The loss over the meter's window in units of 1/10 000 (the keepalive's loss report),
    /// [`super::NO_LOSS_MEASURED`] before any.
    loss: &'a AtomicU32,
    /// The session's id, whose goodbye datagram ends the loop (None: a preset session).
    session_id: Option<String>,
    /// Set when the server's goodbye datagram came.
    goodbye: Option<isnode_proto::goodbye::GoodbyeReason>,
    /// The object's name (digests and repairs of a resumed session are asked for it).
    object: String,
    /// Fed the session's measurements; ends the session at a byte it names (a rung switch).
    steer: Option<&'a mut dyn Steer>,
    /// Output ends before this byte of the object (a rung switch at a segment boundary).
    cut_bytes: Option<u64>,
    /// The end of what was handed to the playout, in object bytes.
    released_to: Option<u64>,
    /// Set when the output reached `cut_bytes`: the session ends ([`EndReason::Switched`]).
    switched: bool,
    /// `--ca-cert`, for the clients of a resumed session's server.
    ca_cert: Option<std::path::PathBuf>,
    /// The role token of `--token`, carried by the digest and repair requests of a resumed
    /// session to a server of `scope`.
    token: Option<String>,
    /// Where the token may go.
    scope: crate::control::TokenScope,
}

impl Feed<'_> {
    /// A piece for the playout: `piece` cut at `cut_bytes`, None if it starts there or
    /// after (the output is complete up to the switch: `switched` is set).
    fn cut(&mut self, piece: Output) -> Option<Output> {
        let Some(cut) = self.cut_bytes else {
            return Some(piece);
        };
        let offset = piece.offset();
        if offset >= cut {
            self.switched = true;
            return None;
        }
        let keep = cut - offset;
        if piece.len() <= keep {
            return Some(piece);
        }
        self.switched = true;
        Some(match piece {
            Output::Data { sbn, offset, bytes } => Output::Data {
                sbn,
                offset,
                bytes: bytes[..usize::try_from(keep).unwrap_or(usize::MAX).min(bytes.len())]
                    .to_vec(),
            },
            Output::Lost { sbn, offset, .. } => Output::Lost {
                sbn,
                offset,
                len: keep,
            },
        })
    }

    /// A resumed session streams another copy of the object from codeword `from` (the
    /// release point): the receive core takes that copy's packets and digests from there
    /// on. False (said in the log) if the core refuses, which cannot happen when `from`
    /// is its release point.
    fn rebind(&mut self, from: u32, to: Rebind) -> bool {
        if let Err(e) = self.rx.rebind(from, to.tsi, to.toi) {
            tracing::error!("re-binding the receive core to the new copy: {e}");
            return false;
        }
        for (sbn, d) in to.digests {
            self.rx.add_digests(sbn, d);
        }
        if let Some(r) = &mut self.repair {
            r.rebound();
        }
        true
    }

    /// A resumed session streams from `server`: packet digests are fetched from it when it
    /// is another server, the fetcher gave up during the gap, or the stream is another
    /// copy (`restart`: an answer of the old fetcher in flight would book the old copy's);
    /// repairs go to it when it is another server.
    fn fetch_from(&mut self, server: &str, moved: Moved, restart: Restart) {
        let tls = match crate::control::tls_config(self.ca_cert.as_deref()) {
            Ok(tls) => tls,
            Err(e) => {
                tracing::warn!("the resumed session's server {server}: {e:#}");
                return;
            }
        };
        let restart_digests = self.digests.as_ref().is_some_and(|d| {
            moved == Moved::OtherServer || d.gave_up().is_some() || restart == Restart::Digests
        });
        if restart_digests {
            let control = crate::control::ControlClient::with_tls(
                server,
                Duration::from_secs(10),
                tls.clone(),
            )
            .with_token(self.token.as_deref())
            .with_scope(self.scope.clone());
            let params = self.rx.params();
            let symbols = symbols_of(*self.rx.partition(), params.repair_symbols);
            let fetcher = DigestFetcher::start(control.into(), self.object.clone(), symbols);
            self.digests = Some(fetcher);
        }
        if let (Moved::OtherServer, Some(r)) = (moved, &mut self.repair) {
            let token = self.token.as_deref().filter(|_| self.scope.allows(server));
            r.retarget(server, tls, token);
        }
    }

    /// Takes the `n` packets of one receive (a datagram coalesced by `UDP_GRO` is several):
    /// filters and impairs each ([`Feed::admit`]), digests those kept together, in lanes
    /// (when packets are authenticated), pushes them into the receive core, and hands what
    /// it releases to the playout thread after each datagram (so the release point is
    /// current for the next). True if one of them was a packet of this stream (what keeps
    /// the session alive: a datagram of another stream, as a refused server's, or a stray
    /// one does not).
    fn take(&mut self, batch: &mut Batch, n: usize, at: Duration) -> bool {
        let mut kept = std::mem::take(&mut self.kept);
        kept.clear();
        self.admit(batch, n, at, &mut kept);
        let mut digests = std::mem::take(&mut self.digest_buf);
        digests.clear();
        if self.rx.is_authenticating() {
            let packets: Vec<&[u8]> = kept.iter().map(|&i| batch.packet(i)).collect();
            digests.resize(packets.len(), [0u8; isnode_wire::digest::DIGEST_LEN]);
            isnode_wire::digest::packet_digests_each(&packets, &mut digests);
        }
        let mut ours = false;
        for (j, &i) in kept.iter().enumerate() {
            ours |= self.push(batch.packet(i), at, digests.get(j));
            let next = kept.get(j + 1).and_then(|&k| batch.datagram(k));
            if next != batch.datagram(i) {
                self.drain();
            }
        }
        (self.kept, self.digest_buf) = (kept, digests);
        if let Some(f) = &mut self.digests {
            f.pump(&mut self.rx, self.digests_ahead);
        }
        ours
    }

    /// The packets of a receive of `n` (at `at`) that go on to the receive core, into
    /// `kept`: those from the session's source, not the server's goodbye (noted), not
    /// dropped by the impairment (which may corrupt them in place).
    fn admit(&mut self, batch: &mut Batch, n: usize, at: Duration, kept: &mut Vec<usize>) {
        for i in 0..n {
            self.counts.received += 1;
            if !self.source.accepts(batch.source(i)) {
                self.counts.wrong_source += 1;
                self.stray_at = Some(at);
                continue;
            }
            let (packet, _truncated) = batch.packet_mut(i);
            if let Some(reason) = self
                .session_id
                .as_deref()
                .and_then(|id| isnode_proto::goodbye::parse_goodbye(packet, id))
            {
                self.goodbye = Some(reason);
                continue;
            }
            // A truncated datagram fails the CRC check: the core counts it corrupt.
            let lead = self.impair_lead;
            let verdict = self.impairer.as_mut().map(|i| {
                i.advance(at + lead);
                i.apply(packet)
            });
            if verdict != Some(Verdict::Drop) {
                kept.push(i);
            }
        }
    }

    /// Pushes one packet (with its `digest` if computed) into the receive core; true if it
    /// was a packet of this stream.
    fn push(
        &mut self,
        packet: &[u8],
        at: Duration,
        digest: Option<&isnode_wire::digest::Digest>,
    ) -> bool {
        use crate::receiver::PacketClass;
        let class = self.rx.push_digested(packet, at, digest);
        if let PacketClass::Symbol { sbn, .. } = class {
            self.max_sbn = self.max_sbn.max(Some(sbn));
        }
        if matches!(
            class,
            PacketClass::Corrupt | PacketClass::Foreign | PacketClass::Forged
        ) {
            self.stray_at = Some(at);
        }
        matches!(
            class,
            PacketClass::Symbol { .. }
                | PacketClass::Redundant
                | PacketClass::Duplicate
                | PacketClass::Fdt
                | PacketClass::Unverified
        )
    }

    /// Hands released pieces to the playout thread while its queue has room.
    fn drain(&mut self) -> Drained {
        loop {
            if self.writer_gone {
                return Drained::WriterGone;
            }
            if self.switched {
                return Drained::Empty;
            }
            if self.cut_at.is_some_and(|cut| self.rx.next_release() >= cut) {
                return Drained::Empty;
            }
            if self.repair.as_mut().is_some_and(|r| r.holds(&mut self.rx)) {
                return Drained::RepairHolds;
            }
            if !self.pieces.has_room() {
                self.writer_gone = self.pieces.is_closed();
                if self.writer_gone {
                    return Drained::WriterGone;
                }
                return Drained::QueueFull;
            }
            let Some(piece) = self.rx.poll_output() else {
                return Drained::Empty;
            };
            let Some(piece) = self.cut(piece) else {
                return Drained::Empty;
            };
            self.released_to = Some(piece.offset() + piece.len());
            self.writer_gone = self.pieces.send(piece).is_err();
        }
    }

    /// Drains, waiting for room in the queue to playout until `until` (None: as long as
    /// the playout takes pieces).
    fn drain_waiting(&mut self, until: Option<Instant>) {
        while self.drain() == Drained::QueueFull && until.is_none_or(|u| Instant::now() < u) {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Feeds the loss meter (at most every 100 ms: the counters are not free) and publishes
    /// the loss over its window.
    fn measure(&mut self, at: Duration) {
        if self
            .metered_at
            .is_some_and(|t| at.saturating_sub(t) < Duration::from_millis(100))
        {
            return;
        }
        self.metered_at = Some(at);
        let s = self.rx.stats();
        // Missing below the highest ESI seen: the repair symbols the server chose not to
        // send (adaptive repair) are not loss.
        self.meter.record(at, s.packets_missed, s.packets_valid);
        if let Some(rate) = self.meter.loss_rate() {
            let report = isnode_proto::keepalive::LossReport::from_rate(rate);
            self.loss
                .store(u32::from(report.units()), Ordering::Relaxed);
        }
        if let (Some(steer), None) = (self.steer.as_deref_mut(), self.cut_bytes) {
            let released = self
                .released_to
                .unwrap_or_else(|| self.rx.partition().block_offset(self.rx.next_release()));
            self.cut_bytes = steer.observe(&Measured {
                valid_symbols: s.packets_valid,
                missed_symbols: s.packets_missed,
                symbol_len: self.rx.params().symbol_len,
                released_to: released,
            });
        }
    }

    /// The stream is over (`end`): whatever is not decoded now never will be. A session cut
    /// short (server gone, `--max-seconds`) releases only the codewords up to the last one
    /// received, unless `cut` keeps the length. Waits for room in the queue to playout until
    /// `deadline` (truncating) or without limit (keeping the length: the playout is unpaced
    /// past its deadline).
    fn finish(&mut self, end: EndReason, cut: CutShort, deadline: Instant) {
        if end == EndReason::Switched {
            // Everything up to the switch was handed to the playout: the rest is the
            // next rung's.
            return;
        }
        if !self.rx.is_complete() {
            self.rx.finish();
        }
        let cut_short = matches!(
            end,
            EndReason::Timeout | EndReason::MaxDuration | EndReason::ServerShutdown
        );
        let until = match cut {
            CutShort::Truncate => {
                if cut_short {
                    let first = self.rx.params().start_codeword;
                    self.cut_at = Some(self.max_sbn.map_or(first, |m| m.saturating_add(1)));
                }
                Some(deadline)
            }
            CutShort::KeepLength => None,
        };
        self.drain_waiting(until);
        // Repairs still under way end by their answer or their deadline.
        while self
            .repair
            .as_mut()
            .is_some_and(|r| r.wait(&mut self.rx, Duration::from_millis(20)))
        {
            self.drain_waiting(until);
        }
    }
}

/// Receives until the session ends (see the module documentation of [`super`]).
fn receive(
    socket: &UdpSocket,
    feed: &mut Feed<'_>,
    limits: Limits,
    requested: Instant,
    mut resume: Option<&mut dyn Resume>,
) -> anyhow::Result<EndReason> {
    grow_recv_buffer(socket, RECV_BUFFER_BYTES);
    set_poll_timeout(socket, Duration::from_millis(50))?;
    // FDT packets may be a little longer than data packets: leave room.
    let slot = (DATA_HEADER_LEN + feed.rx.params().symbol_len as usize + 256).max(2048);
    let mut batch = Batch::new(32, slot, enable_gro(socket));
    let mut last_datagram = Instant::now();
    let mut resuming = Resuming::default();
    let ticks = Ticks::new(feed.rx.params(), feed.bitrate_bps);
    loop {
        let now = Instant::now();
        if now >= limits.deadline {
            return Ok(EndReason::MaxDuration);
        }
        if feed.switched {
            return Ok(EndReason::Switched);
        }
        // The playout thread gone (its error is reported when it is joined) ends it too.
        if feed.rx.is_complete() || feed.writer_gone {
            return Ok(EndReason::Complete);
        }
        let idle = now - last_datagram;
        let resumable = limits.resume_after.is_some() && resume.is_some();
        // A server shutting down may be restarting, or others may serve: its goodbye is
        // final only when the session cannot resume, or has not for --timeout-s.
        if feed.goodbye.is_some()
            && (!resumable || idle >= limits.idle_timeout || feed.rx.saw_last_codeword())
        {
            return Ok(EndReason::ServerShutdown);
        }
        if idle >= limits.idle_timeout {
            return Ok(EndReason::Timeout);
        }
        if let (Some(after), Some(r)) = (limits.resume_after, resume.as_deref_mut()) {
            let due = resuming.next_try.is_none_or(|t| now >= t);
            // A new session gets its own --timeout-s.
            if (idle >= after || feed.goodbye.is_some())
                && !feed.rx.saw_last_codeword()
                && due
                && resuming.attempt(r, feed, now, last_datagram)
            {
                last_datagram = now;
            }
        }
        if feed.rx.saw_last_codeword() && idle >= limits.tail_idle {
            return Ok(EndReason::EndOfStream);
        }
        let n = batch.recv(socket).context("receiving")?;
        let arrived = Instant::now();
        if feed.take(&mut batch, n, arrived - requested) {
            last_datagram = arrived;
            resuming.bridged(last_datagram, &mut feed.counts);
        }
        if n == 0 {
            feed.drain(); // repair answers come in while the stream is quiet too
        }
        feed.measure(Instant::now() - requested);
        if n > 0 {
            if batch.was_full() {
                feed.stray_at = Some(arrived - requested);
            }
            let first = feed.rx.symbol_times().0.map(|t| requested + t);
            let stray = feed.stray_at.map(|t| requested + t);
            let calm = stray.is_none_or(|t| arrived >= t + CALM_AFTER);
            ticks.pause(arrived, first.filter(|_| calm), limits.deadline);
        }
    }
}

/// How often the receive loop wakes once the stream is steady: after a receive that got
/// packets, it sleeps out the rest of a tick, and the next receive takes what came
/// meanwhile at once. A server sends a codeword in member runs, about 26 a second at
/// 8 Mbit/s, each a wake-up (a thread switch costs 30-40 µs on the machines measured, as
/// much as the packets it brings); a tick of 200 ms takes five runs a wake-up.
/// Not during start-up (the playout has no lead yet: the first seconds go through at
/// once), not while strays come or receives fill the batch ([`CALM_AFTER`]), and never
/// longer than what fills a fraction of the socket's receive buffer at
/// four times the stream's rate (a start-up burst of a resumed session), so that nothing
/// is dropped while the loop sleeps.
struct Ticks {
    /// The tick.
    tick: Duration,
}

/// The longest tick.
const MAX_TICK: Duration = Duration::from_millis(200);
/// Time after the first symbol before the loop sleeps between receives.
const STEADY_AFTER: Duration = Duration::from_secs(2);
/// Time after a stray datagram (another source, corrupt, foreign, forged: a flood may be
/// under way, which would fill the socket's buffer while the loop sleeps) or a receive
/// that filled the batch (more may be waiting) before the loop sleeps again.
const CALM_AFTER: Duration = Duration::from_secs(2);
/// Wire bytes that may arrive during one tick (an eighth of the receive buffer asked for).
const TICK_BUDGET_BYTES: u64 = (RECV_BUFFER_BYTES / 8) as u64;

impl Ticks {
    /// The ticks of a stream of `params` at `bitrate_bps` (0: unknown, no sleeping).
    fn new(params: &crate::receiver::SessionParams, bitrate_bps: u64) -> Ticks {
        // Wire bytes per media byte: n/k symbols, each with its headers; four times that
        // for a start-up burst.
        let k = u64::from(params.max_source_block_len.max(1));
        let e = u64::from(params.symbol_len.max(1));
        let wire_per_media =
            ((k + u64::from(params.repair_symbols)) * (e + 64)) as f64 / (k * e) as f64;
        let burst_bytes_per_s = bitrate_bps as f64 / 8.0 * wire_per_media * 4.0;
        let tick = if burst_bytes_per_s > 0.0 {
            Duration::from_secs_f64(TICK_BUDGET_BYTES as f64 / burst_bytes_per_s).min(MAX_TICK)
        } else {
            Duration::ZERO
        };
        Ticks { tick }
    }

    /// After a receive with packets that `arrived` then: once the stream is steady (its
    /// `first` symbol [`STEADY_AFTER`] ago), sleeps until a tick after it (never past
    /// `deadline`).
    fn pause(&self, arrived: Instant, first: Option<Instant>, deadline: Instant) {
        let steady = first.is_some_and(|f| arrived.saturating_duration_since(f) >= STEADY_AFTER);
        if steady {
            let wake = (arrived + self.tick).min(deadline);
            let now = Instant::now();
            if wake > now {
                std::thread::sleep(wake - now);
            }
        }
    }
}

/// What a unicast session's receive loop works with besides its packets.
pub(super) struct Aids<'a> {
    /// The measured loss, published for the keepalives' loss reports.
    pub loss: &'a AtomicU32,
    /// Packet digests to check against (None: CRC only).
    pub auth: Option<Auth>,
    /// Re-opens the session when the server goes quiet (None: a preset session).
    pub resume: Option<&'a mut dyn Resume>,
    /// Fed the measurements, may end the session at a byte (a rung switch; None: plays to
    /// the end).
    pub steer: Option<&'a mut dyn Steer>,
}

/// What a session measured, for a [`Steer`] (about every 100 ms).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Measured {
    /// Valid symbols received so far (source and repair; a broadcast's reception: the
    /// source packets heard on its channels).
    pub valid_symbols: u64,
    /// Symbols missed so far (below the highest ESI received of their codeword, corrupt
    /// ones included: what the loss meter counts; a broadcast's reception: the source
    /// packets missing between those heard on each channel).
    pub missed_symbols: u64,
    /// Bytes of a symbol.
    pub symbol_len: u32,
    /// The end of what was handed to the playout so far, in object bytes.
    pub released_to: u64,
}

/// Steers a session from its measurements (`isnode play TITLE`: the rung decision).
pub(crate) trait Steer {
    /// Takes one measurement; a byte of the object at or after `m.released_to` where the
    /// session's output must end (a segment boundary), once it is to end.
    fn observe(&mut self, m: &Measured) -> Option<u64>;
}

/// The receive loop's resume state: when to try next, and the gap being bridged.
#[derive(Default)]
struct Resuming {
    /// No attempt before this.
    next_try: Option<Instant>,
    /// Failed attempts in a row (the back-off doubles with each).
    failures: u32,
    /// The last datagram before the gap a resume is bridging.
    gap_from: Option<Instant>,
}

impl Resuming {
    /// One attempt; true if a new session now streams.
    fn attempt(
        &mut self,
        r: &mut dyn Resume,
        feed: &mut Feed<'_>,
        now: Instant,
        last: Instant,
    ) -> bool {
        let from = feed.rx.next_release();
        let booked = feed.rx.digests_of(from).map(<[u8]>::to_vec);
        match r.resume(from, booked.as_deref()) {
            Resumed::NewSession {
                id,
                server,
                moved,
                rebind,
            } => {
                // Not re-bound (cannot happen at the release point): the new copy's
                // packets are foreign, the stream ends as one that went quiet (never a
                // byte of the other copy).
                let restart = if rebind.is_some_and(|to| feed.rebind(from, to)) {
                    feed.counts.rebinds += 1;
                    Restart::Digests
                } else {
                    Restart::AsNeeded
                };
                feed.session_id = Some(id);
                feed.goodbye = None;
                feed.fetch_from(&server, moved, restart);
                feed.counts.resumes += 1;
                self.gap_from = Some(self.gap_from.unwrap_or(last));
                self.failures = 0;
                self.next_try = Some(now + RESUME_BACKOFF_MIN);
                true
            }
            Resumed::StillStreaming => {
                self.next_try = Some(now + RESUME_BACKOFF_MIN);
                false
            }
            Resumed::TryNext => {
                // The next server at once (a little jitter spreads the clients).
                self.next_try = Some(now + RESUME_BACKOFF_MIN.mul_f64(rand::random::<f64>() / 4.0));
                false
            }
            Resumed::NotYet => {
                self.failures = self.failures.saturating_add(1);
                self.next_try = Some(now + backoff(self.failures));
                false
            }
        }
    }

    /// A datagram came at `at`: the gap (if one was being bridged) is over.
    fn bridged(&mut self, at: Instant, counts: &mut LoopCounts) {
        if let Some(from) = self.gap_from.take() {
            counts.longest_gap = counts.longest_gap.max(at - from);
            if counts.gaps.len() < super::stats::MAX_RESUME_GAPS {
                counts.gaps.push(at - from);
            }
        }
    }
}

/// Whether [`Feed::fetch_from`] starts a new digest fetcher whatever the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Restart {
    /// Only when the server changed or the fetcher gave up.
    AsNeeded,
    /// Always (the stream is another copy: its digests differ).
    Digests,
}

/// The shortest wait between resume attempts.
const RESUME_BACKOFF_MIN: Duration = Duration::from_millis(200);

/// The wait after `failures` failed attempts: doubling from 200 ms up to 2 s, with up to
/// half of it again as jitter (so that many clients of one restarted server spread out).
fn backoff(failures: u32) -> Duration {
    let base = RESUME_BACKOFF_MIN
        .saturating_mul(1u32 << failures.min(4))
        .min(Duration::from_secs(2));
    base + base.mul_f64(rand::random::<f64>() / 2.0)
}

/// The receive loop of one session: receives, repairs and plays out `setup` from `socket`
/// into `out`; `requested` is when the session was asked for. The measured loss is
/// published in `loss` (for the keepalives' loss reports).
pub(super) fn run_session(
    args: &PlayConfig,
    socket: &UdpSocket,
    setup: &SessionSetup,
    out: Box<dyn Write + Send>,
    requested: Instant,
    aids: Aids<'_>,
) -> anyhow::Result<PlayStats> {
    let Aids {
        loss,
        auth,
        resume,
        steer,
    } = aids;
    let limits = Limits::from_args(args, requested)?;
    let (rx, digests, config) = receiver_for(args, setup, auth)?;
    let playout_config = playout_config(args, setup, &rx, limits.deadline);
    let codeword_bytes = u64::from(rx.partition().a_large) * u64::from(setup.params.symbol_len);
    let queue_limit =
        crate::limits::queue_limit_bytes(setup.bitrate_bps, codeword_bytes, args.max_queue_bytes);
    // Checked even when it does nothing, as `play_on` checks it before the session.
    let impairer = ScheduledImpairer::new(&args.impair, &args.loss_steps)?;
    let impair_lead = args
        .play_started
        .map_or(Duration::ZERO, |s| requested.saturating_duration_since(s));
    let (pieces, to_play) = queue::bounded(queue_limit);
    let repair = start_repair(args, setup, &rx, requested)?;
    let mut feed = Feed {
        rx,
        digests,
        digests_ahead: ahead_codewords(config.effective_window_codewords()),
        source: &setup.source,
        impairer: (!impairer.is_transparent()).then_some(impairer),
        impair_lead,
        counts: LoopCounts::default(),
        pieces,
        bitrate_bps: setup.bitrate_bps,
        stray_at: None,
        max_sbn: None,
        cut_at: None,
        writer_gone: false,
        repair,
        kept: Vec::new(),
        digest_buf: Vec::new(),
        meter: LossMeter::default(),
        metered_at: None,
        loss,
        session_id: setup.session_id.clone(),
        goodbye: None,
        object: setup.object.clone(),
        // A shorter-lived trait object (`&mut dyn` is invariant in it otherwise).
        steer: match steer {
            Some(s) => Some(&mut *s as &mut dyn Steer),
            None => None,
        },
        cut_bytes: None,
        released_to: None,
        switched: false,
        ca_cert: args.ca_cert.clone(),
        token: args.token.clone(),
        scope: args.scope(),
    };
    let writer = playout::spawn(out, playout_config, to_play)?;
    let end_reason = receive(socket, &mut feed, limits, requested, resume)?;
    feed.finish(end_reason, args.cut_short(), limits.deadline);
    let times = PlayTimes {
        requested,
        first_symbol: feed.rx.symbol_times().0,
        paced: playout_config.pacing == Pacing::AtBitrate && setup.bitrate_bps > 0,
        end_reason,
    };
    session_stats(setup, feed, writer, times)
}

/// The receive core of a session, its configuration from `args`, and, when its packets
/// are authenticated (`auth`), the digests fetched first booked in it and the fetcher of
/// the rest.
fn receiver_for(
    args: &PlayConfig,
    setup: &SessionSetup,
    auth: Option<Auth>,
) -> anyhow::Result<(Receiver, Option<DigestFetcher>, ReceiverConfig)> {
    let config = ReceiverConfig {
        release: args.release.into(),
        loss_horizon: args.loss_horizon,
        window_codewords: args.window_codewords,
    };
    let mut rx = Receiver::new(setup.params.clone(), config)?;
    let digests = auth.map(|a| {
        rx.authenticate(crate::digests::MAX_BOOK_CODEWORDS);
        for (sbn, d) in a.initial {
            rx.add_digests(sbn, d);
        }
        let symbols = symbols_of(*rx.partition(), setup.params.repair_symbols);
        DigestFetcher::start(a.control, setup.object.clone(), symbols)
    });
    Ok((rx, digests, config))
}

/// The unicast repair of a session from its server, unless `--no-repair` or the session is
/// preset (no server to ask).
fn start_repair(
    args: &PlayConfig,
    setup: &SessionSetup,
    rx: &Receiver,
    requested: Instant,
) -> anyhow::Result<Option<Repair>> {
    let tls = args.tls()?;
    Ok((!args.no_repair && setup.session_id.is_some()).then(|| {
        let backoff = Duration::from_millis(args.repair_backoff_ms);
        let cw = repair::codeword_time(rx, setup.bitrate_bps);
        Repair::start(
            (&args.server, tls, args.token_for(&args.server)),
            &setup.object,
            backoff,
            cw,
            requested,
        )
    }))
}

/// The statistics of a session whose receive loop ended: waits for the playout thread
/// (`writer`) to write what `feed` handed it, and adds up what both measured.
fn session_stats(
    setup: &SessionSetup,
    feed: Feed<'_>,
    writer: std::thread::JoinHandle<std::io::Result<PlayoutStats>>,
    times: PlayTimes,
) -> anyhow::Result<PlayStats> {
    let Feed {
        rx,
        impairer,
        counts,
        pieces,
        repair,
        ..
    } = feed;
    let queue = pieces.stats();
    drop(pieces);
    let playout: PlayoutStats = match writer.join() {
        Ok(r) => r.context("writing the output")?,
        Err(_) => bail!("the playout thread panicked"),
    };
    let mut stats = assemble(
        setup,
        &rx,
        impairer.map(|i| i.stats()).unwrap_or_default(),
        counts,
        playout,
        times,
    );
    stats.repair = repair.map(|r| r.stats()).unwrap_or_default();
    stats.playout_queue = queue;
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> crate::receiver::SessionParams {
        crate::receiver::SessionParams {
            tsi: 1,
            toi: 1,
            transfer_length: 40_000_000,
            symbol_len: 1408,
            max_source_block_len: 223,
            repair_symbols: 32,
            start_codeword: 0,
        }
    }

    /// The receive tick is 200 ms at 8 Mbit/s, shorter at higher rates (what arrives in a
    /// tick at four times the rate stays within an eighth of the receive buffer), none
    /// for a stream of unknown rate.
    #[test]
    fn receive_ticks_keep_the_socket_buffer_from_filling() {
        assert_eq!(Ticks::new(&params(), 8_000_000).tick, MAX_TICK);
        for bitrate in [10_000_000u64, 40_000_000, 400_000_000] {
            let tick = Ticks::new(&params(), bitrate).tick;
            assert!(tick < MAX_TICK, "{bitrate}: {tick:?}");
            let wire_bytes = tick.as_secs_f64() * bitrate as f64 / 8.0 * 4.0 * 1.2;
            assert!(
                wire_bytes <= TICK_BUDGET_BYTES as f64 * 1.01,
                "{bitrate}: {tick:?}"
            );
        }
        assert_eq!(Ticks::new(&params(), 0).tick, Duration::ZERO);
    }

    /// Resume attempts back off from 200 ms, doubling to 2 s, each with up to half again
    /// of random jitter: the clients of one restarted server spread out.
    #[test]
    fn resume_backoff_doubles_with_jitter() {
        for (failures, base_ms) in [(1, 400), (2, 800), (3, 1600), (4, 2000), (9, 2000)] {
            let waits: Vec<_> = (0..64).map(|_| backoff(failures)).collect();
            let base = Duration::from_millis(base_ms);
            assert!(
                waits.iter().all(|w| *w >= base && *w <= base.mul_f64(1.5)),
                "{failures}: {waits:?}"
            );
            let distinct: std::collections::HashSet<_> = waits.iter().collect();
            assert!(distinct.len() > 32, "{failures}: no jitter: {waits:?}");
        }
    }
}
