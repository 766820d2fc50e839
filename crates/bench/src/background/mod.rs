//! `isnode bench background`: viewers beside background work on a disk-bound volume.
//!
//! `isnode serve` (the `gso` engine, block reads with O_DIRECT into a small pool) and the
//! background work (its own scrub, `isnode volume rebuild`) run in a control group
//! ([`crate::cgroup`]) that reads the disk holding the volume at most at `disk_read_bps`
//! and holds at most `memory_bytes` of memory, so that their reads really wait for a slow
//! disk. Paced `isnode play` clients (outside the group), one per title, started a little
//! apart ([`spacing`]), play their titles to the end in each phase:
//!
//! 1. alone: first a ramp ([`ramp`]) that doubles the clients from `clients` while every
//!    stream is valid, up to `max_clients`, then bisects: the most clients valid alone;
//! 2. during the server's background scrub (`--scrub-rate-bps`, paced by the viewers), at
//!    that load;
//! 3. during `isnode volume rebuild` of a removed member (paced by the viewers through
//!    `VOLUME/run/viewer-pace.json`), started once every client has started;
//! 4. with [`CpuLoad::OneCore`], the three again beside one busy thread ([`busy`]).
//!
//! The clients stand in for players on other machines: they run at `client_nice` (root:
//! -10 by default), so that the machine's other work and the busy core compete with the
//! server and its background work, not with them (at nice 0 on a machine shared with
//! builds, their own underruns made streams invalid while the server's slack never fell
//! below 224 ms).
//!
//! Each phase counts the valid streams (no underrun after a start-up buffer of
//! `prebuffer_ms`, every full second at 95 % of the bitrate or more), the server's late bursts, the clients' underruns, the smallest
//! playback slack the server reported (its status, sampled every 200 ms) and the
//! background work's rate; and traces what bounds it ([`trace`]): each stream's underruns
//! and worst second, the throttled disk's use of its limit, the server's CPU and the
//! background work's own (the scrub thread's, the rebuild process's). Then the same
//! rebuild runs with no server, for its rate alone.
//!
//! The server's pool holds what admission asks of each client for the volume's block
//! length ([`pool_bytes`]) within the memory limit (less [`MEMORY_HEADROOM`]): a pool
//! larger than the group's memory got the server killed before it answered (24 clients of
//! 1 MiB blocks: 304 MiB in a 256 MiB group); capped, the sessions it cannot hold are
//! refused, and count as invalid.

mod busy;
mod cores;
mod report;
mod trace;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::Serialize;

use crate::cgroup::{Cgroup, Limits};
use crate::harness::metrics::{self, metric};
use crate::harness::process::{process_cpu_s, threads_cpu_s};
use crate::harness::server::{self, BlockIo, Output, ServerChild, ServerSpec};
use busy::BusyCore;
pub use busy::CpuLoad;
pub use cores::Cores;
pub use report::format_table;
pub use trace::StreamTrace;

/// What to run.
#[derive(Clone, Debug)]
pub struct BackgroundConfig {
    /// The isnode binary (clients, titles; server and rebuild unless `server_exe`).
    pub isnode_exe: PathBuf,
    /// Another isnode binary for the server and the rebuild (before/after runs).
    pub server_exe: Option<PathBuf>,
    /// Paced clients (one title each) of the first level.
    pub clients: usize,
    /// The most clients the ramp tries (at most `clients`: no ramp, `clients` it is).
    pub max_clients: usize,
    /// Bisection steps after the first level with an invalid stream.
    pub bisect_steps: usize,
    /// Each title's bitrate.
    pub bitrate_bps: u64,
    /// Each title's playing time, seconds.
    pub title_s: u64,
    /// Most bytes per second the server and the background work read from the disk.
    pub disk_read_bps: u64,
    /// Most memory of the group (page cache included), bytes.
    pub memory_bytes: u64,
    /// The server's block pool, bytes (`None`: [`pool_bytes`]).
    pub cache_size_bytes: Option<u64>,
    /// The background scrub's rate cap, bits per second.
    pub scrub_rate_bps: u64,
    /// The volume's block length, bytes (`None`: `isnode volume create`'s default).
    pub block_len: Option<u32>,
    /// Whether the phases run again beside a busy core.
    pub cpu_load: CpuLoad,
    /// Where the node and the clients run.
    pub cores: Cores,
    /// What each client buffers before its paced playout starts, ms (`isnode play
    /// --prebuffer-ms`; a player's start-up buffer, as `bench load`'s one second).
    pub prebuffer_ms: u64,
    /// The clients' nice value: they stand in for players on other machines, so the
    /// machine's other work (and the busy core) competes with the server, not with them.
    pub client_nice: i32,
    /// The background work's priority (the server's scrub thread, the rebuild).
    pub priority: BackgroundPriority,
    /// Where the volume is made (a directory on the disk to throttle).
    pub dir: PathBuf,
    /// Seed of the titles.
    pub seed: u64,
}

/// The CPU and I/O priority of the background work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum BackgroundPriority {
    /// As isnode runs it: nice 19, the lowest best-effort I/O level
    /// (`isnode_sys::priority`).
    Low,
    /// The server's own (`ISNODE_BACKGROUND_PRIORITY=normal`): the behaviour before.
    Normal,
}

impl BackgroundPriority {
    /// The environment the server and the rebuild get.
    fn env(self) -> Option<(&'static str, &'static str)> {
        match self {
            BackgroundPriority::Low => None,
            BackgroundPriority::Normal => Some(("ISNODE_BACKGROUND_PRIORITY", "normal")),
        }
    }
}

impl BackgroundConfig {
    /// The binary of the server and the rebuild.
    fn server_exe(&self) -> &Path {
        self.server_exe.as_deref().unwrap_or(&self.isnode_exe)
    }
}

/// One phase's figures.
#[derive(Clone, Debug, Serialize)]
pub struct PhaseRow {
    /// alone, scrub, rebuild.
    pub phase: String,
    /// Whether a busy core competed.
    pub cpu_load: CpuLoad,
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
    /// What bounds the phase: the streams, the disk, the CPU.
    pub trace: trace::PhaseTrace,
}

/// One level of the ramp (clients alone).
#[derive(Clone, Debug, Serialize)]
pub struct LevelRow {
    /// Clients.
    pub clients: usize,
    /// Valid streams.
    pub valid: usize,
    /// The server's pool, bytes.
    pub pool_bytes: u64,
    /// Clients refused by the server (admission: the pool, the disk).
    pub refused: u64,
    /// Streams with an underrun.
    pub streams_stalled: usize,
    /// The server's late bursts.
    pub late_bursts: u64,
    /// The smallest playback slack the server reported, ms.
    pub min_slack_ms: Option<i64>,
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
    /// The volume's block length, bytes.
    pub block_len: u32,
    /// The background work's priority.
    pub priority: BackgroundPriority,
    /// Each client's start-up buffer, ms.
    pub prebuffer_ms: u64,
    /// The clients' nice value.
    pub client_nice: i32,
    /// Where the node and the clients ran ([`Cores::Shared`] when the machine has one CPU).
    pub cores: Cores,
    /// The ramp's levels, alone, in the order run.
    pub ramp: Vec<LevelRow>,
    /// The most clients valid alone (the load of the phases; the first level when none
    /// was valid).
    pub clients: usize,
    /// The server's pool at that load, bytes.
    pub pool_bytes: u64,
    /// The phases at that load.
    pub rows: Vec<PhaseRow>,
    /// The rebuild's rate with no server, MB/s.
    pub rebuild_alone_mb_s: f64,
    /// `/proc/loadavg` at the start and at the end.
    pub load_average: (String, String),
}

/// The clients start at most this far apart (viewers arrive one by one: each start reads
/// a block of every member at once, which a slow disk takes a while to serve).
const CLIENT_SPACING: Duration = Duration::from_secs(1);

/// Memory of the group left to the server beside its pool (threads, sockets, catalog,
/// page cache of the catalog and of the rebuild), bytes.
pub const MEMORY_HEADROOM: u64 = 64 << 20;

/// The member rebuilt (of the volume's default members).
const REBUILT: u32 = 1;

/// How far apart `clients` start on titles of `title_s`: a second, or less so that
/// they all play together for at least half of a title.
pub fn spacing(clients: usize, title_s: u64) -> Duration {
    let half = Duration::from_secs(title_s) / 2;
    CLIENT_SPACING.min(half / u32::try_from(clients.max(1)).unwrap_or(u32::MAX))
}

/// The pool the server gets for `clients`: what admission asks of each (the blocks of
/// [`isnode_serve_core`]'s three codewords of look-ahead, one more block per member for a
/// codeword across a block boundary) and 16 MiB, within the memory limit less
/// [`MEMORY_HEADROOM`].
pub fn pool_bytes(params: &isnode_store::VolumeParams, clients: usize, memory_bytes: u64) -> u64 {
    let per_member = u64::from(params.max_source_per_member().max(params.repair_symbols));
    let per_block = u64::from(params.packets_per_block().max(1));
    let blocks = u64::from(params.members) * ((3 * per_member).div_ceil(per_block) + 1);
    let asked = clients as u64 * blocks * u64::from(params.block_len) + (16 << 20);
    asked.min(memory_bytes.saturating_sub(MEMORY_HEADROOM))
}

/// Runs the benchmark.
pub fn run(
    cfg: &BackgroundConfig,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<BackgroundReport> {
    if cfg.clients == 0 || cfg.title_s == 0 {
        bail!("nothing to measure: give clients and a title length");
    }
    let load_before = load_average();
    std::fs::create_dir_all(&cfg.dir)?;
    let work = tempfile::tempdir_in(&cfg.dir).context("a directory for the volume")?;
    let vol = work.path().join("vol");
    let most = cfg.max_clients.max(cfg.clients);
    progress(&format!("making {most} titles"));
    let titles = make_titles(cfg, most, &vol, work.path())?;
    let params = *isnode_store::Volume::open(&vol)?.params();
    let limits = Limits {
        disk_read_bps: Some(cfg.disk_read_bps),
        memory_bytes: Some(cfg.memory_bytes),
    };
    let group = Cgroup::create(
        &format!("isnode-bench-{}", std::process::id()),
        limits,
        &vol,
    )?;
    let outputs = outputs_dir(work.path())?;
    let client_cpus = cores::place(cfg.cores)?;
    let bench = Bench {
        cfg,
        client_cpus,
        group: &group,
        vol: &vol,
        outputs: outputs.path(),
        params,
    };
    let (ramp, clients, alone) = ramp(&bench, &titles, progress)?;
    let titles = &titles[..clients];
    let mut rows = vec![alone];
    for load in cpu_loads(cfg.cpu_load) {
        for which in [Phase::Alone, Phase::Scrub, Phase::Rebuild] {
            if which == Phase::Alone && load == CpuLoad::Idle {
                continue; // the ramp's level
            }
            progress(&format!("{} ({clients} clients, {load:?})", which.name()));
            rows.push(phase(&bench, titles, which, load)?);
        }
    }
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
        block_len: params.block_len,
        priority: cfg.priority,
        prebuffer_ms: cfg.prebuffer_ms,
        client_nice: cfg.client_nice,
        cores: match client_cpus {
            Some(_) => Cores::Split,
            None => Cores::Shared,
        },
        ramp,
        clients,
        pool_bytes: bench.pool(clients),
        rows,
        rebuild_alone_mb_s: alone.wait()?.mb_s,
        load_average: (load_before, load_average()),
    })
}

/// A directory for the clients' outputs in memory (`/dev/shm`), else in `work`: players
/// write nothing to disk, and a client's write held up by the machine's writeback (the
/// rebuild's writes, other work's) stalled its playout while the server was on time.
fn outputs_dir(work: &Path) -> anyhow::Result<tempfile::TempDir> {
    let shm = Path::new("/dev/shm");
    let parent = if shm.is_dir() { shm } else { work };
    tempfile::tempdir_in(parent).with_context(|| format!("a directory in {}", parent.display()))
}

/// The competing loads the phases run beside.
fn cpu_loads(asked: CpuLoad) -> Vec<CpuLoad> {
    match asked {
        CpuLoad::Idle => vec![CpuLoad::Idle],
        CpuLoad::OneCore => vec![CpuLoad::Idle, CpuLoad::OneCore],
    }
}

/// `/proc/loadavg`'s three averages (empty if unreadable).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// What every phase shares.
struct Bench<'a> {
    cfg: &'a BackgroundConfig,
    group: &'a Cgroup,
    vol: &'a Path,
    /// Where the clients write their outputs (memory: [`outputs_dir`]).
    outputs: &'a Path,
    params: isnode_store::VolumeParams,
    /// The CPUs the clients run on (`None`: wherever the kernel runs them).
    client_cpus: Option<libc::cpu_set_t>,
}

impl Bench<'_> {
    /// The server's pool for `clients`.
    fn pool(&self, clients: usize) -> u64 {
        self.cfg
            .cache_size_bytes
            .unwrap_or_else(|| pool_bytes(&self.params, clients, self.cfg.memory_bytes))
    }
}

/// Doubles the clients alone from `cfg.clients` while every stream is valid (up to
/// `cfg.max_clients`), then bisects between the last valid level and the first invalid
/// one; the levels, the most clients valid (the first level when none was) and its row.
fn ramp(
    b: &Bench<'_>,
    titles: &[(String, PathBuf)],
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<(Vec<LevelRow>, usize, PhaseRow)> {
    let cfg = b.cfg;
    let most = cfg.max_clients.max(cfg.clients);
    let (mut good, mut bad): (Option<(usize, PhaseRow)>, Option<usize>) = (None, None);
    let mut first = None;
    let mut levels = Vec::new();
    let mut n = cfg.clients;
    let mut bisections = 0;
    loop {
        progress(&format!("alone: {n} clients"));
        let row = phase(b, &titles[..n], Phase::Alone, CpuLoad::Idle)?;
        levels.push(LevelRow {
            clients: n,
            valid: row.valid,
            pool_bytes: b.pool(n),
            refused: row.trace.refused,
            streams_stalled: row.trace.streams_with_underruns,
            late_bursts: row.late_bursts,
            min_slack_ms: row.min_slack_ms,
        });
        if row.valid == n {
            if good.as_ref().is_none_or(|(g, _)| *g < n) {
                good = Some((n, row));
            }
        } else {
            bad = Some(bad.map_or(n, |x| x.min(n)));
            first.get_or_insert(row);
        }
        n = match bad {
            None if n < most => (n * 2).min(most),
            None => break,
            Some(_) if most <= cfg.clients => break, // one level asked: no ramp
            Some(x) => {
                let lo = good.as_ref().map_or(0, |(g, _)| *g);
                if bisections >= cfg.bisect_steps || x - lo <= 1 {
                    break;
                }
                bisections += 1;
                (lo + x) / 2
            }
        };
    }
    let (clients, row) = match (good, first) {
        (Some(g), _) => g,
        (None, Some(f)) => (f.clients, f),
        (None, None) => bail!("the ramp ran no level"),
    };
    Ok((levels, clients, row))
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

/// A volume (of `cfg.block_len` blocks), and `count` MPEG-TS titles (`isnode gen-ts`)
/// ingested into it; their names and files.
fn make_titles(
    cfg: &BackgroundConfig,
    count: usize,
    vol: &Path,
    work: &Path,
) -> anyhow::Result<Vec<(String, PathBuf)>> {
    let v = vol.display().to_string();
    let block = cfg.block_len.map(|b| b.to_string());
    let mut create = vec!["volume", "create", "--volume", &v];
    if let Some(b) = &block {
        create.extend(["--block-size", b]);
    }
    isnode(&cfg.isnode_exe, &create)?;
    (0..count)
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

/// One phase: a server in the group, the clients (one per title), the background work,
/// the competing load.
fn phase(
    b: &Bench<'_>,
    titles: &[(String, PathBuf)],
    which: Phase,
    load: CpuLoad,
) -> anyhow::Result<PhaseRow> {
    let cfg = b.cfg;
    let scrub = cfg.scrub_rate_bps.to_string();
    let extra: Vec<&str> = match which {
        Phase::Scrub => vec!["--scrub-rate-bps", &scrub],
        _ => vec![],
    };
    let pool = b.pool(titles.len());
    let (server, base) = start_server(cfg, b.group, b.vol, pool, &extra)?;
    let pid = server.0.id();
    let _busy = match load {
        CpuLoad::OneCore => Some(BusyCore::start(phase_limit(cfg, titles.len()))?),
        CpuLoad::Idle => None,
    };
    let before = Metrics::get(&base)?;
    let (cpu0, read0) = (process_cpu_s(pid).unwrap_or(0.0), b.group.disk_read_bytes());
    let started = Instant::now();
    let (clients, watch, rebuild_run) = play(b, &base, titles, which)?;
    let elapsed_s = started.elapsed().as_secs_f64();
    let after = Metrics::get(&base)?;
    let mut streams = Vec::new();
    let mut identical = 0;
    for (c, (_, source)) in clients.iter().zip(titles) {
        let (stream, same) = c.outcome(cfg.bitrate_bps, source)?;
        streams.push(stream);
        identical += usize::from(same);
    }
    let mut trace = trace::PhaseTrace::of_streams(streams);
    trace.server_cpu_s = process_cpu_s(pid).unwrap_or(0.0) - cpu0;
    let background_mb_s = match (which, rebuild_run) {
        (Phase::Scrub, _) => {
            trace.background_cpu_s = Some(threads_cpu_s(pid, "isnode-scrub"));
            Some(watch.scrub_mb_s())
        }
        (Phase::Rebuild, Some(r)) => {
            let done = r.wait()?;
            trace.background_cpu_s = Some(done.cpu_s);
            Some(done.mb_s)
        }
        _ => None,
    };
    trace.disk_busy = match (read0, b.group.disk_read_bytes()) {
        (Some(r0), Some(r1)) => Some((r1 - r0) as f64 / (cfg.disk_read_bps as f64 * elapsed_s)),
        _ => None,
    };
    trace.refused = after.refused - before.refused;
    trace.elapsed_s = elapsed_s;
    Ok(PhaseRow {
        phase: which.name().to_string(),
        cpu_load: load,
        clients: clients.len(),
        valid: trace.streams.iter().filter(|s| s.valid).count(),
        identical,
        late_bursts: after.late_bursts - before.late_bursts,
        underruns: trace.streams.iter().map(|s| s.underruns.min(1 << 32)).sum(),
        min_slack_ms: watch.min_slack_ms,
        late_samples: watch.late_samples,
        serve_read_mb_s: (after.pool_read - before.pool_read) as f64 / elapsed_s / 1e6,
        background_mb_s,
        trace,
    })
}

/// The longest a phase of `clients` may last.
fn phase_limit(cfg: &BackgroundConfig, clients: usize) -> Duration {
    spacing(clients, cfg.title_s) * u32::try_from(clients).unwrap_or(u32::MAX)
        + Duration::from_secs(cfg.title_s * 3 + 60)
}

/// Starts the clients (spaced), the rebuild once they all started (a rebuild phase), and
/// watches the server until every client ended (bounded by [`phase_limit`]).
fn play(
    b: &Bench<'_>,
    base: &str,
    titles: &[(String, PathBuf)],
    which: Phase,
) -> anyhow::Result<(Vec<Client>, SlackWatch, Option<RebuildRun>)> {
    let cfg = b.cfg;
    let deadline = Instant::now() + phase_limit(cfg, titles.len());
    let work = b.outputs;
    let mut watch = SlackWatch::default();
    let mut clients = Vec::new();
    let gap = spacing(titles.len(), cfg.title_s);
    for (i, (name, _)) in titles.iter().enumerate() {
        if i > 0 {
            std::thread::sleep(gap);
            watch.sample(base);
        }
        let prefix = work.join(format!("c{i}"));
        clients.push(Client::start(cfg, (base, name), &prefix, b.client_cpus)?);
    }
    let mut rebuild_run = None;
    while clients.iter_mut().any(|c| c.running()) {
        if Instant::now() > deadline {
            bail!("{}: the clients did not end in time", which.name());
        }
        if which == Phase::Rebuild && rebuild_run.is_none() {
            remove_member(b.vol)?;
            rebuild_run = Some(rebuild(cfg, b.group, b.vol)?);
        }
        watch.sample(base);
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok((clients, watch, rebuild_run))
}

/// `isnode serve` in the group (gso engine, a pool of `pool_bytes`, O_DIRECT block
/// reads, its output discarded), ready.
fn start_server(
    cfg: &BackgroundConfig,
    group: &Cgroup,
    vol: &Path,
    pool_bytes: u64,
    extra: &[&str],
) -> anyhow::Result<(ServerChild, String)> {
    server::start(&ServerSpec {
        extra,
        group: Some(group),
        output: Output::Silent,
        block_io: BlockIo::Direct,
        env: cfg.priority.env(),
        ..ServerSpec::new(cfg.server_exe(), vol, "127.0.0.1", "gso", pool_bytes)
    })
}

/// A rebuild of the removed member, in the group, running.
struct RebuildRun {
    child: Child,
    report: PathBuf,
}

/// A rebuild's end: its rate and its CPU.
struct RebuildDone {
    /// Bytes written over its run, MB/s.
    mb_s: f64,
    /// Its CPU, user + sys seconds.
    cpu_s: f64,
}

/// Starts `isnode volume rebuild --member REBUILT --json` in the group.
fn rebuild(cfg: &BackgroundConfig, group: &Cgroup, vol: &Path) -> anyhow::Result<RebuildRun> {
    let report = vol.with_extension("rebuild.json");
    let mut command = group.command(cfg.server_exe());
    if let Some((k, v)) = cfg.priority.env() {
        command.env(k, v);
    }
    let child = command
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
    /// Waits for its end (bounded: an hour); its rate and CPU.
    fn wait(mut self) -> anyhow::Result<RebuildDone> {
        let deadline = Instant::now() + Duration::from_secs(3600);
        let pid = self.child.id();
        let mut cpu_s = 0.0;
        let status = loop {
            // Its CPU so far, while it can still be read (the last reading before its end).
            cpu_s = process_cpu_s(pid).unwrap_or(cpu_s);
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
        Ok(RebuildDone {
            mb_s: bytes / secs / 1e6,
            cpu_s,
        })
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
        (base, name): (&str, &str),
        prefix: &Path,
        cpus: Option<libc::cpu_set_t>,
    ) -> anyhow::Result<Client> {
        let out = prefix.with_extension("out");
        let stats = prefix.with_extension("json");
        let _ = std::fs::remove_file(&stats);
        let mut command = Command::new(&cfg.isnode_exe);
        command
            .args(["play", name, "--server", base, "--out"])
            .arg(&out)
            .arg("--stats-json")
            .arg(&stats)
            .args(["--max-seconds", &(cfg.title_s * 2 + 30).to_string()])
            .args(["--prebuffer-ms", &cfg.prebuffer_ms.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(prefix.with_extension("stderr"))?);
        let nice = cfg.client_nice;
        // SAFETY: setpriority and sched_setaffinity are async-signal-safe and touch only
        // the new child.
        #[allow(unsafe_code)]
        unsafe {
            command.pre_exec(move || {
                if let Some(cpus) = &cpus {
                    cores::run_on(cpus)?;
                }
                match libc::setpriority(libc::PRIO_PROCESS, 0, nice) {
                    0 => Ok(()),
                    _ => Err(std::io::Error::last_os_error()),
                }
            })
        };
        let child = command.spawn().context("starting isnode play")?;
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

    /// Its stream, and whether its output is `source` byte for byte. A client the server
    /// refused wrote no statistics: an invalid stream of no second.
    fn outcome(&self, bitrate_bps: u64, source: &Path) -> anyhow::Result<(StreamTrace, bool)> {
        let stats = match std::fs::read(&self.stats) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .with_context(|| format!("parsing {}", self.stats.display()))?,
            Err(_) => serde_json::Value::Null,
        };
        let identical = std::fs::read(&self.out).ok() == std::fs::read(source).ok();
        Ok((StreamTrace::of(&stats, bitrate_bps), identical))
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

/// The server's counters a phase needs.
#[derive(Clone, Copy, Debug, Default)]
struct Metrics {
    late_bursts: u64,
    pool_read: u64,
    refused: u64,
}

impl Metrics {
    fn get(base: &str) -> anyhow::Result<Metrics> {
        let text = metrics::fetch(&ureq::Agent::new_with_defaults(), base)?;
        let m = |name| metric(&text, name).with_context(|| format!("{name} in /metrics"));
        Ok(Metrics {
            late_bursts: m("isnode_bursts_late_total")?,
            pool_read: m("isnode_cache_read_bytes_total")?,
            refused: metric(&text, "isnode_sessions_refused_total").unwrap_or(0),
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

#[cfg(test)]
mod tests {
    use super::*;
    use isnode_store::VolumeParams;

    #[test]
    fn the_pool_is_what_admission_asks_for_the_block_within_the_memory_limit() {
        let mib = |b: u32| VolumeParams {
            block_len: b,
            ..VolumeParams::default()
        };
        // 1 MiB: 8 members x 2 blocks a client; 64 KiB: 8 x 4 blocks (a run of 32 packets
        // in blocks of 45).
        assert_eq!(pool_bytes(&mib(1 << 20), 1, 1 << 40), (16 + 16) << 20);
        assert_eq!(pool_bytes(&mib(64 << 10), 1, 1 << 40), (2 + 16) << 20);
        // 24 clients of 1 MiB blocks in 256 MiB: capped at the limit less the headroom,
        // where the old sizing (12 MiB a client and 16) asked 304 MiB.
        assert_eq!(
            pool_bytes(&mib(1 << 20), 24, 256 << 20),
            (256 << 20) - MEMORY_HEADROOM
        );
    }

    #[test]
    fn clients_start_a_second_apart_or_closer_to_play_together() {
        assert_eq!(spacing(8, 30), Duration::from_secs(1));
        assert_eq!(spacing(30, 30), Duration::from_millis(500));
        assert_eq!(spacing(0, 30), Duration::from_secs(1));
    }
}
