//! `isnode bench background`: viewers beside background work on a disk-bound volume.
//!
//! `isnode serve` (the `gso` engine, block reads with O_DIRECT into a small pool) and the
//! background work (its own scrub, `isnode volume rebuild`) run in a control group
//! ([`crate::cgroup`]) that reads the disk holding the volume at most at `disk_read_bps`
//! and holds at most `memory_bytes` of memory, so that their reads really wait for a slow
//! disk. `clients` paced `isnode play` clients (outside the group), one per title, started
//! a second apart, play their titles to the end in each phase:
//!
//! 1. alone;
//! 2. during the server's background scrub (`--scrub-rate-bps`, paced by the viewers);
//! 3. during `isnode volume rebuild` of a removed member (paced by the viewers through
//!    `VOLUME/run/viewer-pace.json`), started once every client has started.
//!
//! Each phase counts the valid streams (no underrun, every full second at 95 % of the
//! bitrate or more), the server's late bursts, the clients' underruns, the smallest
//! playback slack the server reported (its status, sampled every 200 ms) and the
//! background work's rate; then the same rebuild runs with no server, for its rate alone.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::Serialize;

use crate::cgroup::{Cgroup, Limits};
use crate::harness::metrics::{self, metric};
use crate::harness::server::{self, BlockIo, Output, ServerChild, ServerSpec};

/// What to run.
#[derive(Clone, Debug)]
pub struct BackgroundConfig {
    /// The isnode binary (server, clients, rebuild).
    pub isnode_exe: PathBuf,
    /// Paced clients (one title each).
    pub clients: usize,
    /// Each title's bitrate.
    pub bitrate_bps: u64,
    /// Each title's playing time, seconds.
    pub title_s: u64,
    /// Most bytes per second the server and the background work read from the disk.
    pub disk_read_bps: u64,
    /// Most memory of the group (page cache included), bytes.
    pub memory_bytes: u64,
    /// The server's block pool, bytes (small: reads go to the disk).
    pub cache_size_bytes: u64,
    /// The background scrub's rate cap, bits per second.
    pub scrub_rate_bps: u64,
    /// Where the volume is made (a directory on the disk to throttle).
    pub dir: PathBuf,
    /// Seed of the titles.
    pub seed: u64,
}

/// One phase's figures.
#[derive(Clone, Debug, Serialize)]
pub struct PhaseRow {
    /// alone, scrub, rebuild.
    pub phase: String,
    /// Clients.
    pub clients: usize,
    /// Clients whose stream was valid.
    pub valid: usize,
    /// Clients whose output was the title, byte for byte.
    pub identical: usize,
    /// The server's bursts sent more than 100 ms late.
    pub late_bursts: u64,
    /// The clients' underruns, summed.
    pub underruns: u64,
    /// The smallest playback slack the server reported, ms (`None`: never a stream).
    pub min_slack_ms: Option<i64>,
    /// Samples in which the server reported a late stream.
    pub late_samples: u64,
    /// What the server's members read into its pool, MB/s over the phase.
    pub serve_read_mb_s: f64,
    /// The background work's rate, MB/s, while serving: the scrub's reads over its first
    /// pass (then it pauses a minute), the rebuild's writes over its run.
    pub background_mb_s: Option<f64>,
}

/// The benchmark's report.
#[derive(Clone, Debug, Serialize)]
pub struct BackgroundReport {
    /// The throttled disk, `major:minor`.
    pub disk: String,
    /// Its read limit, bytes per second.
    pub disk_read_bps: u64,
    /// The group's memory limit, bytes.
    pub memory_bytes: u64,
    /// Each title's bitrate.
    pub bitrate_bps: u64,
    /// Each title's playing time, seconds.
    pub title_s: u64,
    /// The phases.
    pub rows: Vec<PhaseRow>,
    /// The rebuild's rate with no server, MB/s.
    pub rebuild_alone_mb_s: f64,
}

/// The clients start this far apart (viewers arrive one by one: each start reads a block of
/// every member at once, which a slow disk takes a while to serve).
const CLIENT_SPACING: Duration = Duration::from_secs(1);

/// The member rebuilt (of the volume's default members).
const REBUILT: u32 = 1;

/// Runs the benchmark.
pub fn run(
    cfg: &BackgroundConfig,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<BackgroundReport> {
    if cfg.clients == 0 || cfg.title_s == 0 {
        bail!("nothing to measure: give clients and a title length");
    }
    std::fs::create_dir_all(&cfg.dir)?;
    let work = tempfile::tempdir_in(&cfg.dir).context("a directory for the volume")?;
    let vol = work.path().join("vol");
    progress("making the titles");
    let titles = make_titles(cfg, &vol, work.path())?;
    let limits = Limits {
        disk_read_bps: Some(cfg.disk_read_bps),
        memory_bytes: Some(cfg.memory_bytes),
    };
    let group = Cgroup::create(
        &format!("isnode-bench-{}", std::process::id()),
        limits,
        &vol,
    )?;
    let mut rows = Vec::new();
    progress("alone");
    rows.push(phase(cfg, &group, &vol, &titles, Phase::Alone)?);
    progress("during a scrub");
    rows.push(phase(cfg, &group, &vol, &titles, Phase::Scrub)?);
    progress("during a rebuild");
    rows.push(phase(cfg, &group, &vol, &titles, Phase::Rebuild)?);
    progress("a rebuild alone");
    remove_member(&vol)?;
    let alone = rebuild(cfg, &group, &vol)?;
    let (major, minor) = group.disk();
    Ok(BackgroundReport {
        disk: format!("{major}:{minor}"),
        disk_read_bps: cfg.disk_read_bps,
        memory_bytes: cfg.memory_bytes,
        bitrate_bps: cfg.bitrate_bps,
        title_s: cfg.title_s,
        rows,
        rebuild_alone_mb_s: alone.wait_mb_s()?,
    })
}

/// The phases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Alone,
    Scrub,
    Rebuild,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Alone => "alone",
            Phase::Scrub => "during a scrub",
            Phase::Rebuild => "during a rebuild",
        }
    }
}

/// Runs `isnode ARGS` to its end; fails with its output unless it succeeds.
fn isnode(exe: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running isnode {args:?}"))?;
    if !out.status.success() {
        bail!(
            "isnode {args:?}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// One MPEG-TS title per client (`isnode gen-ts`), ingested; their names and bytes.
fn make_titles(
    cfg: &BackgroundConfig,
    vol: &Path,
    work: &Path,
) -> anyhow::Result<Vec<(String, PathBuf)>> {
    let v = vol.display().to_string();
    isnode(&cfg.isnode_exe, &["volume", "create", "--volume", &v])?;
    (0..cfg.clients)
        .map(|i| {
            let name = format!("bg{i}.ts");
            let file = work.join(&name);
            let f = file.display().to_string();
            let seed = (cfg.seed + i as u64).to_string();
            let (rate, secs) = (cfg.bitrate_bps.to_string(), cfg.title_s.to_string());
            isnode(
                &cfg.isnode_exe,
                &[
                    "gen-ts",
                    "--bitrate",
                    &rate,
                    "--duration",
                    &secs,
                    "--seed",
                    &seed,
                    &f,
                ],
            )?;
            isnode(
                &cfg.isnode_exe,
                &["ingest", "--volume", &v, "--name", &name, &f],
            )?;
            Ok((name, file))
        })
        .collect()
}

/// Moves the rebuilt member's directory away (a replaced disk).
fn remove_member(vol: &Path) -> anyhow::Result<()> {
    let dir = vol.join("members").join(REBUILT.to_string());
    std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))
}

/// One phase: a server in the group, the clients, the background work.
fn phase(
    cfg: &BackgroundConfig,
    group: &Cgroup,
    vol: &Path,
    titles: &[(String, PathBuf)],
    which: Phase,
) -> anyhow::Result<PhaseRow> {
    let scrub = cfg.scrub_rate_bps.to_string();
    let extra: Vec<&str> = match which {
        Phase::Scrub => vec!["--scrub-rate-bps", &scrub],
        _ => vec![],
    };
    let (_server, base) = start_server(cfg, group, vol, &extra)?;
    let before = Metrics::get(&base)?;
    let started = Instant::now();
    let work = vol.parent().context("the volume's directory")?;
    let mut watch = SlackWatch::default();
    let mut clients = Vec::new();
    for (i, (name, _)) in titles.iter().enumerate() {
        if i > 0 {
            std::thread::sleep(CLIENT_SPACING);
            watch.sample(&base);
        }
        clients.push(Client::start(
            cfg,
            &base,
            name,
            &work.join(format!("c{i}")),
        )?);
    }
    let mut rebuild_run = None;
    let deadline = Instant::now() + Duration::from_secs(cfg.title_s * 3 + 60);
    while clients.iter_mut().any(|c| c.running()) {
        if Instant::now() > deadline {
            bail!("{}: the clients did not end in time", which.name());
        }
        if which == Phase::Rebuild && rebuild_run.is_none() {
            remove_member(vol)?;
            rebuild_run = Some(rebuild(cfg, group, vol)?);
        }
        watch.sample(&base);
        std::thread::sleep(Duration::from_millis(200));
    }
    let elapsed_s = started.elapsed().as_secs_f64();
    let after = Metrics::get(&base)?;
    let background_mb_s = match (which, rebuild_run) {
        (Phase::Scrub, _) => Some(watch.scrub_mb_s()),
        (Phase::Rebuild, Some(r)) => Some(r.wait_mb_s()?),
        _ => None,
    };
    let mut row = PhaseRow {
        phase: which.name().to_string(),
        clients: clients.len(),
        valid: 0,
        identical: 0,
        late_bursts: after.late_bursts - before.late_bursts,
        underruns: 0,
        min_slack_ms: watch.min_slack_ms,
        late_samples: watch.late_samples,
        serve_read_mb_s: (after.pool_read - before.pool_read) as f64 / elapsed_s / 1e6,
        background_mb_s,
    };
    for (c, (_, source)) in clients.iter().zip(titles) {
        let (valid, underruns, identical) = c.outcome(cfg.bitrate_bps, source)?;
        row.valid += usize::from(valid);
        row.identical += usize::from(identical);
        row.underruns += underruns;
    }
    Ok(row)
}

/// `isnode serve` in the group (gso engine, small pool, O_DIRECT block reads, its output
/// discarded), ready.
fn start_server(
    cfg: &BackgroundConfig,
    group: &Cgroup,
    vol: &Path,
    extra: &[&str],
) -> anyhow::Result<(ServerChild, String)> {
    server::start(&ServerSpec {
        extra,
        group: Some(group),
        output: Output::Silent,
        block_io: BlockIo::Direct,
        ..ServerSpec::new(
            &cfg.isnode_exe,
            vol,
            "127.0.0.1",
            "gso",
            cfg.cache_size_bytes,
        )
    })
}

/// A rebuild of the removed member, in the group, running.
struct RebuildRun {
    child: Child,
    report: PathBuf,
}

/// Starts `isnode volume rebuild --member REBUILT --json` in the group.
fn rebuild(cfg: &BackgroundConfig, group: &Cgroup, vol: &Path) -> anyhow::Result<RebuildRun> {
    let report = vol.with_extension("rebuild.json");
    let child = group
        .command(&cfg.isnode_exe)
        .args(["--volume", &vol.display().to_string(), "volume", "rebuild"])
        .args(["--member", &REBUILT.to_string(), "--json"])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&report)?)
        .stderr(Stdio::null())
        .spawn()
        .context("starting isnode volume rebuild")?;
    Ok(RebuildRun { child, report })
}

impl RebuildRun {
    /// Waits for its end (bounded); its rate, MB/s written.
    fn wait_mb_s(mut self) -> anyhow::Result<f64> {
        let deadline = Instant::now() + Duration::from_secs(3600);
        let status = loop {
            if let Some(s) = self.child.try_wait()? {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                bail!("the rebuild did not end within an hour");
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        if !status.success() {
            bail!("the rebuild failed: {status}");
        }
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&self.report)?)?;
        let bytes = v["report"]["bytes_written"].as_f64().unwrap_or(0.0);
        let secs = v["elapsed_s"].as_f64().unwrap_or(1.0).max(1e-9);
        Ok(bytes / secs / 1e6)
    }
}

/// One paced client.
struct Client {
    child: Option<Child>,
    out: PathBuf,
    stats: PathBuf,
}

impl Client {
    fn start(
        cfg: &BackgroundConfig,
        base: &str,
        name: &str,
        prefix: &Path,
    ) -> anyhow::Result<Client> {
        let out = prefix.with_extension("out");
        let stats = prefix.with_extension("json");
        let child = Command::new(&cfg.isnode_exe)
            .args(["play", name, "--server", base, "--out"])
            .arg(&out)
            .arg("--stats-json")
            .arg(&stats)
            .args(["--max-seconds", &(cfg.title_s * 2 + 30).to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(prefix.with_extension("stderr"))?)
            .spawn()
            .context("starting isnode play")?;
        Ok(Client {
            child: Some(child),
            out,
            stats,
        })
    }

    /// Whether it still runs (reaped once it ends).
    fn running(&mut self) -> bool {
        match self.child.as_mut().map(|c| c.try_wait()) {
            Some(Ok(None)) => true,
            Some(_) => {
                self.child = None;
                false
            }
            None => false,
        }
    }

    /// (valid stream, underruns, output identical to `source`).
    fn outcome(&self, bitrate_bps: u64, source: &Path) -> anyhow::Result<(bool, u64, bool)> {
        let log = std::fs::read_to_string(self.out.with_extension("stderr")).unwrap_or_default();
        let stats: serde_json::Value = serde_json::from_slice(
            &std::fs::read(&self.stats)
                .with_context(|| format!("a client's statistics; its log:\n{log}"))?,
        )?;
        let identical = std::fs::read(&self.out).ok() == std::fs::read(source).ok();
        let underruns = stats["underruns"].as_u64().unwrap_or(u64::MAX);
        Ok((is_valid(&stats, bitrate_bps), underruns, identical))
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// No underrun, and every full second at 95 % of the bitrate or more.
fn is_valid(stats: &serde_json::Value, bitrate_bps: u64) -> bool {
    let windows: Vec<f64> = stats["per_second_bitrate_bps"]
        .as_array()
        .map(|a| a.iter().filter_map(|x| x.as_f64()).collect())
        .unwrap_or_default();
    let full = windows.split_last().map_or(&[][..], |(_, f)| f);
    stats["underruns"].as_u64() == Some(0)
        && !full.is_empty()
        && full.iter().all(|&w| w >= 0.95 * bitrate_bps as f64)
}

/// The server's counters a phase needs.
#[derive(Clone, Copy, Debug, Default)]
struct Metrics {
    late_bursts: u64,
    pool_read: u64,
}

impl Metrics {
    fn get(base: &str) -> anyhow::Result<Metrics> {
        let text = metrics::fetch(&ureq::Agent::new_with_defaults(), base)?;
        let m = |name| metric(&text, name).with_context(|| format!("{name} in /metrics"));
        Ok(Metrics {
            late_bursts: m("isnode_bursts_late_total")?,
            pool_read: m("isnode_cache_read_bytes_total")?,
        })
    }
}

/// The smallest playback slack and the late samples seen in the server's status, and the
/// background scrub's progress.
#[derive(Debug)]
struct SlackWatch {
    started: Instant,
    min_slack_ms: Option<i64>,
    late_samples: u64,
    /// The scrub's first pass: its bytes and seconds, once it finished.
    scrub_pass: Option<(u64, f64)>,
    /// The scrub's bytes read so far in its first pass (while it runs).
    scrub_done: u64,
}

impl Default for SlackWatch {
    fn default() -> SlackWatch {
        SlackWatch {
            started: Instant::now(),
            min_slack_ms: None,
            late_samples: 0,
            scrub_pass: None,
            scrub_done: 0,
        }
    }
}

impl SlackWatch {
    fn sample(&mut self, base: &str) {
        let Ok(mut r) = ureq::get(format!("{base}/v1/status")).call() else {
            return;
        };
        let Ok(v) = r.body_mut().read_json::<serde_json::Value>() else {
            return;
        };
        let p = &v["playback"];
        if let Some(s) = p["min_slack_ms"].as_i64() {
            self.min_slack_ms = Some(self.min_slack_ms.map_or(s, |m| m.min(s)));
        }
        if p["late_streams"].as_u64().unwrap_or(0) > 0 {
            self.late_samples += 1;
        }
        let sc = &v["scrub"];
        if self.scrub_pass.is_none() {
            if sc["passes"].as_u64().unwrap_or(0) >= 1 {
                let bytes = sc["bytes_read"].as_u64().unwrap_or(0);
                self.scrub_pass = Some((bytes, self.started.elapsed().as_secs_f64()));
            } else {
                self.scrub_done = sc["pass_done_bytes"].as_u64().unwrap_or(0);
            }
        }
    }

    /// The scrub's rate while it ran, MB/s: its first pass's bytes over its time, or what
    /// it read so far over the whole phase when no pass finished.
    fn scrub_mb_s(&self) -> f64 {
        match self.scrub_pass {
            Some((bytes, secs)) => bytes as f64 / secs.max(1e-9) / 1e6,
            None => self.scrub_done as f64 / self.started.elapsed().as_secs_f64().max(1e-9) / 1e6,
        }
    }
}

/// The report as a table.
pub fn format_table(r: &BackgroundReport) -> String {
    let mut s = format!(
        "disk {} read-limited to {:.1} MB/s, memory {} MiB; {} clients of {:.1} Mbit/s, {} s titles\n",
        r.disk,
        r.disk_read_bps as f64 / 1e6,
        r.memory_bytes >> 20,
        r.rows.first().map_or(0, |x| x.clients),
        r.bitrate_bps as f64 / 1e6,
        r.title_s
    );
    s.push_str(&format!(
        "{:<18} {:>6} {:>9} {:>10} {:>9} {:>13} {:>12} {:>14} {:>15}\n",
        "phase",
        "valid",
        "identical",
        "late bursts",
        "underruns",
        "min slack ms",
        "late samples",
        "serve MB/s",
        "background MB/s"
    ));
    for x in &r.rows {
        s.push_str(&format!(
            "{:<18} {:>3}/{:<2} {:>9} {:>10} {:>9} {:>13} {:>12} {:>14.2} {:>15}\n",
            x.phase,
            x.valid,
            x.clients,
            x.identical,
            x.late_bursts,
            x.underruns,
            x.min_slack_ms.map_or("-".into(), |m| m.to_string()),
            x.late_samples,
            x.serve_read_mb_s,
            x.background_mb_s.map_or("-".into(), |m| format!("{m:.2}")),
        ));
    }
    s.push_str(&format!(
        "rebuild alone (no server): {:.2} MB/s\n",
        r.rebuild_alone_mb_s
    ));
    s
}
