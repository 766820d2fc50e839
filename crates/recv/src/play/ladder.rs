//! `isnode play TITLE` of a title with renditions: the thin I/O shell around the rung
//! decision ([`crate::abr`]).
//!
//! The title's renditions come from `GET /v1/titles` (the video ones when the title has
//! both video and audio-only renditions), each with its FEC parameters
//! (`GET /v1/objects/{name}`) and its random-access points (`GET /v1/objects/{name}/index`:
//! the segment boundaries, key frames aligned across the rungs at ingest). Play starts on
//! the rung the decision picks, in a session of that rendition. Every ~100 ms the session's
//! receive loop hands its counters to [`RungSteer`], which turns them into an
//! [`Observation`] (loss and receive rate over the last [`WINDOW`]) for the decision. When
//! the decision switches, the session's output ends at the first random-access point at or
//! after what it has handed to the playout, and a session of the new rung starts at that
//! point's time (`start_at_s`): the output goes on with the new rung's key frame, one
//! continuous stream. MPEG-TS (the PAT and PMT repeat at every segment) gets the first
//! packet of each PID after a switch marked with the `discontinuity_indicator` where it has
//! an adaptation field ([`super::ts_mark`]). A fragmented MP4 (CMAF) rung gets its initialization segment (the bytes before
//! its first fragment) written before its first fragment.
//!
//! One session per rung played, not one session switched in place: a session is one
//! object's stream (its TSI/TOI, FDT, packet digests, the admission of its bitrate), and a
//! switch up is a new admission decision at a higher rate, which the session request
//! already is. A resume after a server loss works within each rung's session as for any
//! object.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::net::UdpSocket;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::Deserialize;

use super::session::{Measured, Steer};
use super::stats::{EndReason, PlayStats, RungChange, RungSession};
use super::{InitBy, LocalSetup};
use crate::abr::{Abr, AbrConfig, Observation, Reason, Rung};
use crate::config::PlayConfig;
use crate::control::ControlClient;

/// The loss and receive rate are measured over this window.
const WINDOW: Duration = Duration::from_secs(2);
/// Fewest symbols expected over the window for a loss rate.
const MIN_EXPECTED_SYMBOLS: u64 = 40;

/// One rendition of `GET /v1/titles`.
#[derive(Clone, Debug, Deserialize)]
pub(super) struct RenditionJson {
    object: String,
    bitrate_bps: u64,
    #[serde(default)]
    width: Option<u32>,
}

/// One title of `GET /v1/titles`.
#[derive(Clone, Debug, Deserialize)]
pub(super) struct Title {
    name: String,
    renditions: Vec<RenditionJson>,
}

/// The title `args.name` names on its server, if it is one with renditions (None: an
/// object, or a server that lists no titles; its failure is logged and the plain play
/// that follows reports what is wrong).
pub(super) fn title_of(args: &PlayConfig) -> Option<Title> {
    let listed = args
        .control(Duration::from_secs(10))
        .and_then(|c| c.titles_json());
    let json = match listed {
        Ok(json) => json,
        Err(e) => {
            tracing::debug!("no titles listed: {e:#}");
            return None;
        }
    };
    let titles: Vec<Title> = match serde_json::from_str(&json) {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!("the server's titles could not be read: {e}");
            return None;
        }
    };
    titles
        .into_iter()
        .find(|t| t.name == args.name && !t.renditions.is_empty())
}

/// A rung as played: its object, its decision inputs and its segment boundaries.
#[derive(Clone, Debug)]
pub(crate) struct RungMedia {
    /// The rendition's object.
    pub object: String,
    /// What the decision knows of it.
    pub rung: Rung,
    /// Random-access points: (seconds, byte offset).
    pub points: Vec<(f64, u64)>,
    /// A fragmented MP4's initialization segment length (the bytes before its first
    /// fragment); None for MPEG-TS.
    pub init_len: Option<u64>,
}

/// The rungs of a ladder out of a title's renditions `all`, lowest bitrate first: the
/// video renditions if it has any (`width` says which), one rendition per bitrate. Unicast
/// and broadcast play order a title the same way.
pub(crate) fn ladder_order<T>(
    all: Vec<T>,
    bitrate_bps: impl Fn(&T) -> u64,
    width: impl Fn(&T) -> Option<u32>,
) -> Vec<T> {
    let video = all.iter().any(|r| width(r).is_some());
    let mut chosen: Vec<T> = all
        .into_iter()
        .filter(|r| !video || width(r).is_some())
        .collect();
    chosen.sort_by_key(|r| bitrate_bps(r));
    chosen.dedup_by_key(|r| bitrate_bps(r));
    chosen
}

/// The title's rungs, lowest bitrate first ([`ladder_order`]).
fn ladder_of(control: &ControlClient, title: &Title) -> anyhow::Result<Vec<RungMedia>> {
    let chosen = ladder_order(
        title.renditions.iter().collect(),
        |r| r.bitrate_bps,
        |r| r.width,
    );
    chosen
        .into_iter()
        .map(|r| rung_of(control, &r.object, r.bitrate_bps))
        .collect::<anyhow::Result<Vec<_>>>()
        .with_context(|| format!("reading the renditions of {}", title.name))
}

/// The rung of rendition `object` of `bitrate_bps`: its FEC parameters and random-access
/// points from the server.
pub(crate) fn rung_of(
    control: &ControlClient,
    object: &str,
    bitrate_bps: u64,
) -> anyhow::Result<RungMedia> {
    let info = control.object(object)?;
    let index = control.media_index(object)?;
    let points: Vec<(f64, u64)> = index
        .points
        .iter()
        .map(|p| (p.time_s, p.offset_bytes))
        .collect();
    if points.is_empty() {
        bail!("{object} has no random-access points: it cannot be switched at segment boundaries");
    }
    let init_len = match index.container.as_str() {
        "mp4" => Some(points[0].1).filter(|&l| l > 0),
        _ => None,
    };
    Ok(RungMedia {
        object: object.to_string(),
        rung: Rung::new(bitrate_bps, info.source_symbols, info.repair_symbols),
        points,
        init_len,
    })
}

/// The output shared by the rungs' sessions (each session's playout writes its part).
#[derive(Clone)]
pub(crate) struct SharedOut(pub Arc<Mutex<Box<dyn Write + Send>>>);

impl Write for SharedOut {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0
            .lock()
            .map_err(|_| io::Error::other("the output's lock is poisoned"))?
            .write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0
            .lock()
            .map_err(|_| io::Error::other("the output's lock is poisoned"))?
            .flush()
    }
}

/// A switch decided during a session and where its output ends.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Decided {
    /// When it was decided, from the start of play.
    pub at: Duration,
    /// The rung left.
    pub from: usize,
    /// The rung played next.
    pub to: usize,
    /// Why.
    pub reason: Reason,
    /// The random-access point the output switches at: its time.
    pub media_s: f64,
}

/// Whether the receive rate is a signal of the rung decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RateSignal {
    /// A session's rate: it falls behind the bitrate when the path cannot carry it.
    Measured,
    /// A broadcast's: its channels' rates are the plan's, not the path's (a receiver that
    /// holds what comes next listens to no channel at all): loss is the only signal.
    Ignored,
}

/// Feeds a session's measurements to the decision; ends the session at a segment
/// boundary when the rung is to change.
pub(crate) struct RungSteer<'a> {
    abr: &'a mut Abr,
    /// Play's start (the decision's clock).
    clock: Instant,
    /// The rung played's random-access points.
    points: &'a [(f64, u64)],
    /// The byte the session started at (a switch is at a later boundary).
    start_offset: u64,
    /// (time, valid symbols, missed symbols) over the last [`WINDOW`].
    samples: VecDeque<(Duration, u64, u64)>,
    /// Whether the receive rate counts.
    rate: RateSignal,
    /// The switch decided, once it is.
    pub decided: Option<Decided>,
}

impl<'a> RungSteer<'a> {
    /// The steer of a reception of the rung with random-access `points` from byte
    /// `start_offset`, deciding with `abr` on `clock`.
    pub(crate) fn new(
        abr: &'a mut Abr,
        clock: Instant,
        points: &'a [(f64, u64)],
        start_offset: u64,
        rate: RateSignal,
    ) -> RungSteer<'a> {
        RungSteer {
            abr,
            clock,
            points,
            start_offset,
            samples: VecDeque::new(),
            rate,
            decided: None,
        }
    }

    /// The observation of `m` taken at `at`, over the samples of the window.
    fn observation(&mut self, at: Duration, m: &Measured) -> Observation {
        self.samples
            .push_back((at, m.valid_symbols, m.missed_symbols));
        while self
            .samples
            .front()
            .is_some_and(|&(t, ..)| at.saturating_sub(t) > WINDOW)
        {
            self.samples.pop_front();
        }
        let Some(&(t0, v0, m0)) = self.samples.front() else {
            return Observation {
                at,
                loss: None,
                received_bps: None,
            };
        };
        let (valid, missed) = (
            m.valid_symbols.saturating_sub(v0),
            m.missed_symbols.saturating_sub(m0),
        );
        let span = at.saturating_sub(t0);
        let expected = valid + missed;
        Observation {
            at,
            loss: (expected >= MIN_EXPECTED_SYMBOLS).then(|| missed as f64 / expected as f64),
            received_bps: (self.rate == RateSignal::Measured && span >= WINDOW.mul_f64(0.75)).then(
                || (valid as f64 * f64::from(m.symbol_len) * 8.0 / span.as_secs_f64()) as u64,
            ),
        }
    }
}

impl Steer for RungSteer<'_> {
    fn observe(&mut self, m: &Measured) -> Option<u64> {
        if self.decided.is_some() {
            return None;
        }
        let at = self.clock.elapsed();
        let obs = self.observation(at, m);
        tracing::debug!(
            ?obs,
            valid = m.valid_symbols,
            missed = m.missed_symbols,
            "rung steer"
        );
        let switch = self.abr.observe(obs)?;
        // The first boundary at or after what the playout has: the output stays whole
        // segments of one rung, then of the next.
        let after = m.released_to.max(self.start_offset.saturating_add(1));
        let Some(&(media_s, offset)) = self.points.iter().find(|p| p.1 >= after) else {
            // Past the last segment boundary: the title ends on this rung.
            tracing::info!("rung switch {switch:?} past the title's last boundary: not made");
            return None;
        };
        tracing::info!(
            from = switch.from, to = switch.to, reason = ?switch.reason,
            loss = ?obs.loss, received_bps = ?obs.received_bps,
            "switching rung at {media_s:.3} s (byte {offset})"
        );
        self.decided = Some(Decided {
            at,
            from: switch.from,
            to: switch.to,
            reason: switch.reason,
            media_s,
        });
        Some(offset)
    }
}

/// Plays the title `title` adaptively (see the module documentation) on `socket`.
pub(super) fn play_title(
    args: &PlayConfig,
    socket: &UdpSocket,
    title: Title,
) -> anyhow::Result<PlayStats> {
    if args.http.is_some() {
        bail!(
            "--http of a title with renditions is not built yet: play one rendition \
             ({}@N) or use the title's master.m3u8",
            title.name
        );
    }
    if args.start_codeword != 0 {
        bail!("--start-codeword names a codeword of one object: use --start-at with a title");
    }
    let control = args.control(Duration::from_secs(10))?;
    let ladder = pinned(ladder_of(&control, &title)?, args.rung, &title.name)?;
    let estimate = first_estimate(&control, args, &ladder);
    let clock = Instant::now();
    let (mut abr, out) = start_ladder(args, &ladder, &title.name, estimate)?;
    let mut media_s = args.start_at.unwrap_or(0.0);
    let first = &ladder[abr.current()];
    let mut timeline = vec![RungChange::start(
        &first.object,
        first.rung.bitrate_bps,
        media_s,
    )];
    let mut all = Vec::new();
    let mut sessions = Vec::new();
    loop {
        let rung = &ladder[abr.current()];
        let rung_args = rung_args(args, rung, media_s, sessions.is_empty(), clock)?;
        let switched = match all.is_empty() {
            true => Entry::First,
            false => Entry::Switched,
        };
        let out_rung = rung_output(&control, rung, &out, media_s, switched)?;
        let local = LocalSetup::with(&rung_args, socket, (None, Some(out_rung)), InitBy::Caller)?;
        let mut steer = RungSteer::new(
            &mut abr,
            clock,
            &rung.points,
            start_offset(&rung.points, rung_args.start_at),
            RateSignal::Measured,
        );
        let stats = super::play_with(&rung_args, socket, local, Some(&mut steer))?;
        let decided = steer.decided;
        sessions.push(RungSession::of(&stats, media_s));
        all.push(stats.clone());
        match (stats.end_reason, decided) {
            (EndReason::Switched, Some(d)) => {
                timeline.push(change_of(&ladder, d, clock.elapsed()));
                media_s = d.media_s;
            }
            _ => {
                let mut end = out.clone();
                end.flush().context("writing the output")?;
                let mut merged = super::stats::merge(&title.name, stats, &all, sessions, timeline);
                merged.duration_s = clock.elapsed().as_secs_f64();
                merged.first_estimate_bps = estimate;
                super::write_stats_json(args, &merged)?;
                return Ok(merged);
            }
        }
    }
}

/// How a rung's output begins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Entry {
    /// The title's first rung.
    First,
    /// A rung switched to.
    Switched,
}

/// The output of `rung` played from `media_s` into `out`: a CMAF rung started inside the
/// title gets its initialization segment written first; an MPEG-TS rung switched to has
/// the first packet of each PID marked with the `discontinuity_indicator`.
pub(crate) fn rung_output(
    control: &ControlClient,
    rung: &RungMedia,
    out: &SharedOut,
    media_s: f64,
    entry: Entry,
) -> anyhow::Result<Box<dyn Write + Send>> {
    let mut out_here = out.clone();
    if let (Some(len), true) = (rung.init_len, media_s > 0.0) {
        // A start inside the rung: its initialization segment first, less its `sidx` (its
        // offsets name the whole file's fragments), as a plain play writes it.
        let head = control.head_bytes(&rung.object, len)?;
        let init = crate::cmaf_init::without_sidx(&head).unwrap_or(head);
        out_here.write_all(&init)?;
    }
    Ok(match (rung.init_len, entry) {
        // After a switch, an MPEG-TS rung's first packets are marked.
        (None, Entry::Switched) => Box::new(super::ts_mark::TsDiscontinuity::new(out_here)),
        _ => Box::new(out_here),
    })
}

/// The rung decision of `ladder` (title `name`) under `--max-bitrate` and the first
/// `estimate` (bit/s; None: the cap only), and the output every rung's session writes
/// into, in turn.
pub(crate) fn start_ladder(
    args: &PlayConfig,
    ladder: &[RungMedia],
    name: &str,
    estimate: Option<u64>,
) -> anyhow::Result<(Abr, SharedOut)> {
    let config = AbrConfig {
        max_bitrate_bps: args.max_bitrate_bps,
        start_estimate_bps: estimate,
        ..AbrConfig::default()
    };
    let abr = Abr::new(
        ladder.iter().map(|r| r.rung).collect(),
        config,
        Duration::ZERO,
    )
    .with_context(|| format!("the ladder of {name}"))?;
    let out = SharedOut(Arc::new(Mutex::new(crate::playout::open_output(
        args.out.as_deref(),
    )?)));
    Ok((abr, out))
}

/// Bytes a probe of the path reads at most (`isnode play TITLE`'s first estimate).
const PROBE_BYTES: u64 = 256 << 10;
/// How long a probe reads at most after its first bytes: what it may add to the start.
const PROBE_BUDGET: Duration = Duration::from_millis(300);

/// The first estimate of the path's rate for a play of `ladder` (bit/s): the start of the
/// highest rung under `--max-bitrate` read over HTTP (`GET /o/{NAME@i}`, at most
/// [`PROBE_BYTES`] for at most [`PROBE_BUDGET`] after its first bytes) and timed
/// ([`crate::abr::first_estimate_bps`]). None for a pinned or one-rung ladder, or when the
/// probe fails or tells no rate (play then starts under the cap only).
fn first_estimate(control: &ControlClient, args: &PlayConfig, ladder: &[RungMedia]) -> Option<u64> {
    if ladder.len() < 2 || args.rung.is_some() {
        return None;
    }
    let top = ladder
        .iter()
        .rposition(|r| r.rung.bitrate_bps <= args.max_bitrate_bps)
        .unwrap_or(0);
    let object = &ladder[top].object;
    match control.probe(object, PROBE_BYTES, PROBE_BUDGET) {
        Ok(p) => {
            let estimate = crate::abr::first_estimate_bps(p.bytes_after_first, p.span);
            tracing::info!(
                "first estimate {estimate:?} bit/s: {} bytes of {object} in {:.1} ms",
                p.bytes_after_first,
                p.span.as_secs_f64() * 1000.0
            );
            estimate
        }
        Err(e) => {
            tracing::info!("no first estimate (probing {object}: {e:#}): starting under the cap");
            None
        }
    }
}

/// The rungs of `ladder` a play may use: rung `pin` only when given (`--rung`), or all.
pub(crate) fn pinned<T>(ladder: Vec<T>, pin: Option<usize>, title: &str) -> anyhow::Result<Vec<T>> {
    let Some(n) = pin else {
        return Ok(ladder);
    };
    let len = ladder.len();
    match ladder.into_iter().nth(n) {
        Some(r) => Ok(vec![r]),
        None => bail!(
            "--rung {n}: {title} has {len} rungs (0 to {})",
            len.saturating_sub(1)
        ),
    }
}

/// The byte a session of a rung with random-access `points` starts at from `start_at`
/// (the point at or before it, as the server picks it; 0 from the start).
pub(crate) fn start_offset(points: &[(f64, u64)], start_at: Option<f64>) -> u64 {
    start_at.map_or(0, |t| {
        points
            .iter()
            .take_while(|p| p.0 <= t)
            .last()
            .map_or(0, |p| p.1)
    })
}

/// The timeline entry of the switch `d` over `ladder`, made at `at` from the start of play.
pub(crate) fn change_of(ladder: &[RungMedia], d: Decided, at: Duration) -> RungChange {
    RungChange {
        decided_at_s: d.at.as_secs_f64(),
        at_s: at.as_secs_f64(),
        media_s: d.media_s,
        from: Some(ladder[d.from].object.clone()),
        from_bitrate_bps: Some(ladder[d.from].rung.bitrate_bps),
        to: ladder[d.to].object.clone(),
        to_bitrate_bps: ladder[d.to].rung.bitrate_bps,
        reason: d.reason,
    }
}

/// The arguments of the session of `rung` from `media_s` (`first`: the title's first
/// session, which keeps `--start-at`); `--max-seconds` counts from `clock`.
fn rung_args(
    args: &PlayConfig,
    rung: &RungMedia,
    media_s: f64,
    first: bool,
    clock: Instant,
) -> anyhow::Result<PlayConfig> {
    let mut a = args.clone();
    a.name = rung.object.clone();
    a.stats_json = None;
    a.out = None;
    if !first {
        // The point at or before the time is the boundary itself (1 ms: rounding).
        a.start_at = Some(media_s + 0.001);
    }
    let left = args.max_seconds - clock.elapsed().as_secs_f64();
    if left <= 0.0 {
        bail!("--max-seconds ran out between two rungs of the title");
    }
    a.max_seconds = left;
    // Every rung's injected loss follows one schedule, from play's start.
    a.play_started = Some(args.play_started.unwrap_or(clock));
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn abr() -> Abr {
        let rungs = vec![Rung::new(300_000, 12, 4), Rung::new(600_000, 12, 4)];
        let config = AbrConfig {
            settle: Duration::ZERO,
            ..AbrConfig::default()
        };
        Abr::new(rungs, config, Duration::ZERO).unwrap()
    }

    fn measured(valid: u64, missed: u64, released_to: u64) -> Measured {
        Measured {
            valid_symbols: valid,
            missed_symbols: missed,
            symbol_len: 1408,
            released_to,
        }
    }

    const POINTS: [(f64, u64); 3] = [(0.0, 0), (2.0, 1000), (4.0, 2000)];

    /// A steer over [`POINTS`] whose session starts at byte `start_offset`.
    fn steer(abr: &mut Abr, start_offset: u64) -> RungSteer<'_> {
        RungSteer::new(
            abr,
            Instant::now(),
            &POINTS,
            start_offset,
            RateSignal::Measured,
        )
    }

    /// A switch ends the output at the first boundary at or after what the playout has;
    /// once decided, nothing more is.
    #[test]
    fn a_switch_cuts_at_the_next_boundary() {
        let mut abr = abr();
        let mut steer = steer(&mut abr, 0);
        assert_eq!(steer.observe(&measured(0, 0, 500)), None, "no window yet");
        assert_eq!(
            steer.observe(&measured(50, 10, 800)),
            None,
            "17 %: repaired"
        );
        assert_eq!(steer.observe(&measured(100, 60, 1500)), Some(2000));
        let d = steer.decided.expect("decided");
        assert_eq!(
            (d.from, d.to, d.reason, d.media_s),
            (1, 0, Reason::Loss, 4.0)
        );
        assert_eq!(steer.observe(&measured(200, 200, 1600)), None);
        assert_eq!(abr.current(), 0);
    }

    /// A session that has released nothing yet switches at the boundary after its start,
    /// never at its start (which would be an empty run of the rung).
    #[test]
    fn a_switch_is_after_the_session_start() {
        assert_eq!(start_offset(&POINTS, Some(2.001)), 1000);
        assert_eq!(start_offset(&POINTS, None), 0);
        let mut abr = abr();
        let mut steer = steer(&mut abr, 1000);
        steer.observe(&measured(0, 0, 0));
        assert_eq!(steer.observe(&measured(50, 50, 0)), Some(2000));
    }

    /// Unicast and broadcast play order a title's renditions alike: the video ones, one per
    /// bitrate, lowest first; `--rung N` keeps rung N of that order only.
    #[test]
    fn ladders_are_ordered_and_pinned() {
        let all = vec![
            (900, Some(640)),
            (300, Some(320)),
            (64, None),
            (300, Some(320)),
        ];
        let ladder = ladder_order(all, |r| r.0, |r| r.1);
        assert_eq!(ladder, vec![(300, Some(320)), (900, Some(640))]);
        assert_eq!(pinned(ladder.clone(), None, "t").unwrap(), ladder);
        assert_eq!(
            pinned(ladder.clone(), Some(1), "t").unwrap(),
            vec![(900, Some(640))]
        );
        let e = pinned(ladder, Some(2), "t").unwrap_err().to_string();
        assert!(e.contains("has 2 rungs"), "{e}");
        let audio = ladder_order(
            vec![(64, None), (32, None)],
            |r| r.0,
            |r: &(u64, Option<u32>)| r.1,
        );
        assert_eq!(audio, vec![(32, None), (64, None)]);
    }

    /// Past the last boundary the title ends on the rung it plays.
    #[test]
    fn no_switch_past_the_last_boundary() {
        let mut abr = abr();
        let mut steer = steer(&mut abr, 0);
        steer.observe(&measured(0, 0, 2100));
        assert_eq!(steer.observe(&measured(50, 50, 2500)), None);
        assert!(steer.decided.is_none());
    }
}
