//! `isnode bench startup`: the time from the session request to the first byte out of the
//! client (`isnode play`'s `startup_delay_ms`), over many sessions on loopback, per bitrate
//! and start-up mode, as p50/p99.
//!
//! One `isnode serve` (a child process, engine of choice) serves one title per bitrate from
//! a volume made for the run; every session is an `isnode play` child process that plays
//! paced for a short while (`--max-seconds`) and writes its statistics as JSON. Modes:
//!
//! - `instant`: the defaults (instant release of source symbols, no prebuffer, the server's
//!   start-up burst);
//! - `classic`: `--release codeword --no-start-burst` (whole decoded codewords, one
//!   codeword's prebuffer, no burst): the behaviour before instant start, for before/after
//!   in one run.
//!
//! A few sessions run at a time (`concurrency`), as viewers arriving together would.
//!
//! Each session also writes the title to its stdout (`--out -`), read by the benchmark: the
//! time from the process start to the first byte read there is what a player fed by
//! `isnode play` sees (process start, session request, stream, playout, the pipe), next to
//! the client's own figure.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context};
use isnode_store::{Volume, VolumeParams};
use rand::SeedableRng;
use serde::Serialize;

use crate::harness::server::{self, ServerSpec};

/// The target of the first byte at the player (issue 20), from the process start, ms.
pub const TARGET_PLAYER_P50_MS: f64 = 20.0;
/// The start-up targets of issue 10, milliseconds (reported, never asserted).
pub const TARGET_P50_MS: f64 = 50.0;
/// p99 target, milliseconds.
pub const TARGET_P99_MS: f64 = 100.0;
/// Seconds of media of each title: every session plays it to its end, paced (a session
/// cut short by `--max-seconds` would still write the rest as zeros at the bitrate).
const TITLE_SECONDS: u64 = 3;

/// How a session starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Instant release, no prebuffer, start-up burst (the defaults).
    Instant,
    /// Whole codewords, one codeword's prebuffer, no burst (before instant start).
    Classic,
}

impl Mode {
    /// The mode of a name (`instant`, `classic`).
    pub fn parse(name: &str) -> anyhow::Result<Mode> {
        match name {
            "instant" => Ok(Mode::Instant),
            "classic" => Ok(Mode::Classic),
            other => bail!("unknown start-up mode {other:?} (instant, classic)"),
        }
    }

    fn play_flags(self) -> &'static [&'static str] {
        match self {
            Mode::Instant => &[],
            Mode::Classic => &["--release", "codeword", "--no-start-burst"],
        }
    }
}

/// What to measure.
#[derive(Clone, Debug)]
pub struct StartupBenchConfig {
    /// The isnode binary of the server.
    pub isnode_exe: PathBuf,
    /// The isnode binary of the clients.
    pub client_exe: PathBuf,
    /// The server's send engine.
    pub engine: String,
    /// Bitrates of the titles, one row each.
    pub bitrates_bps: Vec<u64>,
    /// Modes, one row each per bitrate.
    pub modes: Vec<Mode>,
    /// Sessions per (bitrate, mode).
    pub sessions: usize,
    /// Sessions at a time.
    pub concurrency: usize,
    /// Seed of the titles' bytes.
    pub seed: u64,
}

/// One row: the start-up delays of the sessions of one bitrate and mode.
#[derive(Clone, Debug, Serialize)]
pub struct StartupRow {
    /// Bitrate of the title.
    pub bitrate_bps: u64,
    /// Start-up mode.
    pub mode: Mode,
    /// Sessions run.
    pub sessions: usize,
    /// Sessions that played a first byte (the others count as failures).
    pub started: usize,
    /// Median start-up delay, ms.
    pub p50_ms: Option<f64>,
    /// 99th percentile, ms.
    pub p99_ms: Option<f64>,
    /// Largest, ms.
    pub max_ms: Option<f64>,
    /// Median time from the request to the first valid packet, ms.
    pub first_packet_p50_ms: Option<f64>,
    /// Median time from the process start to the first byte read from its stdout, ms.
    pub player_p50_ms: Option<f64>,
    /// 99th percentile of the same, ms.
    pub player_p99_ms: Option<f64>,
    /// Whether p50 and p99 meet the targets.
    pub meets_target: bool,
    /// Every session's start-up delay, ms, in the order they ran.
    pub delays_ms: Vec<f64>,
}

/// The whole run.
#[derive(Clone, Debug, Serialize)]
pub struct StartupReport {
    /// The server's engine.
    pub engine: String,
    /// Targets, ms: p50 and p99.
    pub target_ms: [f64; 2],
    /// One row per bitrate and mode.
    pub rows: Vec<StartupRow>,
}

/// Runs the benchmark.
pub fn run(cfg: &StartupBenchConfig) -> anyhow::Result<StartupReport> {
    if cfg.sessions == 0 || cfg.bitrates_bps.is_empty() || cfg.modes.is_empty() {
        bail!("nothing to measure: give at least one session, bitrate and mode");
    }
    let dir = tempfile::tempdir()?;
    let vol = dir.path().join("vol");
    let names = make_titles(&vol, &cfg.bitrates_bps, cfg.seed)?;
    let (_server, base) = server::start(&ServerSpec::new(
        &cfg.isnode_exe,
        &vol,
        "127.0.0.1",
        &cfg.engine,
        64 << 20,
    ))?;
    let mut rows = Vec::new();
    for (name, &bitrate) in names.iter().zip(&cfg.bitrates_bps) {
        for &mode in &cfg.modes {
            let delays = sessions(cfg, &base, name, bitrate, mode, dir.path())?;
            rows.push(row(bitrate, mode, cfg.sessions, delays));
        }
    }
    Ok(StartupReport {
        engine: cfg.engine.clone(),
        target_ms: [TARGET_P50_MS, TARGET_P99_MS],
        rows,
    })
}

/// One title of [`TITLE_SECONDS`] per bitrate, random bytes, ingested into a new volume.
fn make_titles(vol: &Path, bitrates: &[u64], seed: u64) -> anyhow::Result<Vec<String>> {
    let mut v = Volume::create(vol, VolumeParams::default(), None)?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut names = Vec::new();
    for (i, &bitrate) in bitrates.iter().enumerate() {
        let name = format!("startup-{i}-{bitrate}.ts");
        let len = usize::try_from(bitrate / 8 * TITLE_SECONDS)?;
        crate::common::ingest_random_title(&mut v, &name, bitrate, len, &mut rng)?;
        names.push(name);
    }
    Ok(names)
}

/// A bound on one session: the title, the classic mode's wait for a codeword and its
/// prebuffer (2 × 223 × 1408 × 8 bits at the bitrate), and a margin.
fn play_seconds(bitrate_bps: u64) -> f64 {
    let codeword_s = 223.0 * 1408.0 * 8.0 / bitrate_bps.max(1) as f64;
    TITLE_SECONDS as f64 + 2.0 * codeword_s + 5.0
}

/// One session's figures: (start-up delay, first packet) in ms; `None` if it played no byte.
type Delays = Option<(f64, Option<f64>)>;

/// One session: its client's figures, and the first byte at its stdout (ms from the process
/// start; `None` if none came).
type Session = (Delays, Option<f64>);

/// Runs the sessions of one row, `concurrency` at a time: each session's start-up delay
/// (ms), `None` if it played no byte.
fn sessions(
    cfg: &StartupBenchConfig,
    base: &str,
    name: &str,
    bitrate: u64,
    mode: Mode,
    dir: &Path,
) -> anyhow::Result<Vec<Session>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < cfg.sessions {
        let batch = cfg.concurrency.max(1).min(cfg.sessions - i);
        let mut running = Vec::new();
        for j in 0..batch {
            let stats = dir.join(format!("s-{bitrate}-{mode:?}-{}.json", i + j));
            let spawned = std::time::Instant::now();
            let mut child = Command::new(&cfg.client_exe)
                .args(["play", name, "--server", base, "--out", "-", "--stats-json"])
                .arg(&stats)
                .args(["--max-seconds", &play_seconds(bitrate).to_string()])
                .args(mode.play_flags())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .context("starting isnode play")?;
            let stdout = child.stdout.take().context("the client's stdout")?;
            let reader = std::thread::spawn(move || first_byte_ms(stdout, spawned));
            running.push((child, stats, reader));
        }
        for (mut child, stats, reader) in running {
            // A session with an unrecoverable codeword exits 1 but still has its figures.
            child.wait()?;
            let player = reader.join().ok().flatten();
            let delays = if stats.exists() {
                read_delays(&stats)?
            } else {
                None
            };
            out.push((delays, player));
        }
        i += batch;
    }
    Ok(out)
}

/// Reads `stdout` to its end (the client ends by `--max-seconds` at the latest); the time
/// from `spawned` to its first byte, ms.
fn first_byte_ms(mut stdout: impl std::io::Read, spawned: std::time::Instant) -> Option<f64> {
    let mut buf = vec![0u8; 1 << 16];
    let mut first = None;
    loop {
        match stdout.read(&mut buf) {
            Ok(0) | Err(_) => return first,
            Ok(_) if first.is_none() => first = Some(spawned.elapsed().as_secs_f64() * 1e3),
            Ok(_) => {}
        }
    }
}

/// (start-up delay, first packet) in ms from a `--stats-json` file.
fn read_delays(path: &Path) -> anyhow::Result<Delays> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text)?;
    let startup = v
        .get("startup_delay_ms")
        .and_then(serde_json::Value::as_f64);
    let first = v.get("first_packet_ms").and_then(serde_json::Value::as_f64);
    Ok(startup.map(|s| (s, first)))
}

fn row(bitrate_bps: u64, mode: Mode, sessions: usize, got: Vec<Session>) -> StartupRow {
    let mut player: Vec<f64> = got.iter().filter_map(|s| s.1).collect();
    player.sort_by(f64::total_cmp);
    let got: Vec<Delays> = got.into_iter().map(|s| s.0).collect();
    let delays_ms: Vec<f64> = got.iter().flatten().map(|d| d.0).collect();
    let mut sorted = delays_ms.clone();
    sorted.sort_by(f64::total_cmp);
    let mut first: Vec<f64> = got.iter().flatten().filter_map(|d| d.1).collect();
    first.sort_by(f64::total_cmp);
    let (p50, p99) = (percentile(&sorted, 0.5), percentile(&sorted, 0.99));
    let started = sorted.len();
    StartupRow {
        bitrate_bps,
        mode,
        sessions,
        started,
        p50_ms: p50,
        p99_ms: p99,
        max_ms: sorted.last().copied(),
        first_packet_p50_ms: percentile(&first, 0.5),
        player_p50_ms: percentile(&player, 0.5),
        player_p99_ms: percentile(&player, 0.99),
        meets_target: started == sessions
            && p50.is_some_and(|v| v <= TARGET_P50_MS)
            && p99.is_some_and(|v| v <= TARGET_P99_MS),
        delays_ms,
    }
}

/// The `q` quantile of sorted values (nearest rank), `None` if empty.
fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted.get(rank.min(sorted.len()) - 1).copied()
}

/// The report as a table.
pub fn format_table(r: &StartupReport) -> String {
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
    let mut s = format!(
        "start-up delay: session request to first byte out of `isnode play` (engine {}; \
         target p50 <= {} ms, p99 <= {} ms); at the player: process start to the first \
         byte read from its stdout (target p50 <= {} ms)\n",
        r.engine, r.target_ms[0], r.target_ms[1], TARGET_PLAYER_P50_MS
    );
    s.push_str(&format!(
        "{:>10} {:>8} {:>9} {:>8} {:>8} {:>8} {:>12} {:>7} {:>11} {:>11}\n",
        "Mbit/s",
        "mode",
        "started",
        "p50 ms",
        "p99 ms",
        "max ms",
        "1st pkt p50",
        "target",
        "player p50",
        "player p99"
    ));
    for row in &r.rows {
        s.push_str(&format!(
            "{:>10.1} {:>8} {:>9} {:>8} {:>8} {:>8} {:>12} {:>7} {:>11} {:>11}\n",
            row.bitrate_bps as f64 / 1e6,
            format!("{:?}", row.mode).to_lowercase(),
            format!("{}/{}", row.started, row.sessions),
            ms(row.p50_ms),
            ms(row.p99_ms),
            ms(row.max_ms),
            ms(row.first_packet_p50_ms),
            if row.meets_target { "met" } else { "missed" },
            ms(row.player_p50_ms),
            ms(row.player_p99_ms),
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_and_percentiles() {
        assert_eq!(percentile(&[], 0.5), None);
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 0.5), Some(2.0));
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 0.99), Some(4.0));
        let r = row(
            4_000_000,
            Mode::Instant,
            3,
            vec![
                (Some((10.0, Some(2.0))), Some(12.0)),
                (Some((30.0, None)), Some(31.0)),
                (None, None),
            ],
        );
        assert_eq!((r.started, r.p50_ms, r.max_ms), (2, Some(10.0), Some(30.0)));
        assert_eq!((r.player_p50_ms, r.player_p99_ms), (Some(12.0), Some(31.0)));
        assert!(
            !r.meets_target,
            "a session without a first byte misses the target"
        );
        let r = row(
            4_000_000,
            Mode::Instant,
            2,
            vec![(Some((10.0, None)), None), (Some((40.0, None)), None)],
        );
        assert!(r.meets_target);
        assert!(Mode::parse("warp").is_err());
        assert_eq!(Mode::parse("classic").unwrap(), Mode::Classic);
        let table = format_table(&StartupReport {
            engine: "gso".into(),
            target_ms: [50.0, 100.0],
            rows: vec![r],
        });
        assert!(
            table.contains("instant") && table.contains("met"),
            "{table}"
        );
        assert!((play_seconds(4_000_000) - 9.256).abs() < 0.01);
    }
}
