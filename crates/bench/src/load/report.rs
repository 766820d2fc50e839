//! The figures of a load run: per level, per server, and the ratios isnode/nginx.

use serde::{Deserialize, Serialize};

use super::config::LoadBenchConfig;
use super::confine::{ConfinementReport, DiskAdmission};
use super::files::FileOps;
use super::validity::{Nominal, Verdict};

/// What the servers accepted during a level (sans IO).
pub(crate) struct Tally {
    accepted: Vec<Option<(Nominal, f64)>>,
    refused: usize,
    first_refusal: Option<String>,
}

impl Tally {
    /// For a schedule of `sessions`.
    pub(crate) fn new(sessions: usize) -> Tally {
        Tally {
            accepted: vec![None; sessions],
            refused: 0,
            first_refusal: None,
        }
    }

    /// Session `i` was accepted with `nominal`; each byte its receiver counts is
    /// `title_per_counted` bytes of the title.
    pub(crate) fn accept(&mut self, i: usize, nominal: Nominal, title_per_counted: f64) {
        if let Some(a) = self.accepted.get_mut(i) {
            *a = Some((nominal, title_per_counted));
        }
    }

    /// A session could not be opened.
    pub(crate) fn refuse(&mut self, why: String) {
        self.refused += 1;
        self.first_refusal.get_or_insert(why);
    }

    /// The nominal and byte factor of session `i`, if it was accepted.
    pub(crate) fn of(&self, i: usize) -> Option<(Nominal, f64)> {
        self.accepted.get(i).copied().flatten()
    }
}

/// One level of load against one server.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LevelResult {
    /// Concurrent streams aimed at.
    pub streams: usize,
    /// Sessions judged (the schedule's, less the unjudged).
    pub sessions: usize,
    /// Sessions cut short by the end of the level before they could be judged (not counted
    /// in `sessions`).
    pub unjudged: usize,
    /// Sessions whose stream was valid.
    pub valid: usize,
    /// At least `pass_fraction` of the sessions were valid.
    pub passed: bool,
    /// Sessions the server did not accept.
    pub refused: usize,
    /// The first refusal, and the most common reasons streams were invalid (with counts).
    pub invalid_reasons: Vec<(String, usize)>,
    /// Seconds of load.
    pub seconds: f64,
    /// Title bytes delivered (isnode: UDP payload scaled by bitrate / send rate).
    pub delivered_title_bytes: f64,
    /// Bytes the receivers counted: UDP payload (isnode), HTTP body (nginx).
    #[serde(default)]
    pub wire_bytes: u64,
    /// Server CPU seconds (user + sys of every server process).
    pub server_cpu_s: f64,
    /// Server CPU seconds per GB (10^9 bytes) of title bytes delivered.
    pub cpu_s_per_title_gb: f64,
    /// Server CPU seconds per GB of [`LevelResult::wire_bytes`].
    #[serde(default)]
    pub cpu_s_per_wire_gb: f64,
    /// CPU seconds of this process (the receivers and the control clients).
    pub receivers_cpu_s: f64,
    /// Server and receivers together, CPU seconds per GB of title bytes delivered: the
    /// figure no attribution can move. On a veth pair (and on loopback) the kernel charges
    /// part of each side's network work to the other: the receive path of a datagram runs in
    /// the sender's softirq (isnode's clients' UDP receive is charged to the server), while
    /// TCP's ACK-clocked transmissions run in the softirq of the client's ACK (part of
    /// nginx's sending is charged to its clients).
    #[serde(default)]
    pub both_ends_cpu_s_per_title_gb: f64,
    /// Resident memory of the server processes at the end, bytes.
    pub server_rss_bytes: u64,
    /// isnode: block lookups served from the pool over all lookups during the level
    /// (`/metrics`; None for nginx, or when nothing was looked up).
    #[serde(default)]
    pub cache_hit_ratio: Option<f64>,
    /// isnode: bytes read from the members into the pool during the level (`/metrics`).
    #[serde(default)]
    pub disk_read_bytes: Option<u64>,
    /// isnode: [`LevelResult::disk_read_bytes`] per wire byte.
    #[serde(default)]
    pub disk_bytes_per_wire_byte: Option<f64>,
    /// Every server: `read_bytes` of /proc/PID/io during the level, summed over the server's
    /// processes.
    #[serde(default)]
    pub proc_read_bytes: Option<u64>,
    /// Every server: `read_bytes` of /proc/PID/io (all server processes; storage reads the
    /// page cache did not serve) per wire byte.
    #[serde(default)]
    pub proc_read_bytes_per_wire_byte: Option<f64>,
    /// Every server: [`LevelResult::proc_read_bytes`] per title byte delivered: the disk
    /// bytes a delivered byte cost (below 1: some came from memory).
    #[serde(default)]
    pub disk_bytes_per_title_byte: Option<f64>,
    /// Every server: the share of delivered title bytes that did not have to be read from
    /// the disk during the level (1 - disk bytes per title byte, at least 0): the hit ratio
    /// of whatever memory the server uses (isnode's pool, the page cache).
    #[serde(default)]
    pub memory_hit_ratio: Option<f64>,
    /// isnode: packets per UDP receive call (32 when `UDP_GRO` hands whole GSO runs over;
    /// 1 when they arrive segmented). None for nginx.
    #[serde(default)]
    pub rx_packets_per_receive: Option<f64>,
    /// Start-up delay (request to first byte) median, seconds.
    pub startup_p50_s: Option<f64>,
    /// Start-up delay 99th percentile, seconds.
    pub startup_p99_s: Option<f64>,
    /// Every stream's start-up delay, seconds, sorted.
    #[serde(default)]
    pub startup_delays_s: Vec<f64>,
    /// Coefficient of variation of the 1 s window rates of all streams, pooled.
    pub bitrate_cv: Option<f64>,
    /// The server and the receivers together used at least [`SATURATED_SHARE`] of every
    /// core of the machine: a failing level may then be the machine's (or the receivers')
    /// limit rather than the server's.
    #[serde(default)]
    pub machine_saturated: bool,
}

/// What was measured of a level besides its streams.
pub(crate) struct Measured {
    /// Concurrent streams aimed at.
    pub(crate) streams: usize,
    /// Smallest share of valid streams for the level to pass.
    pub(crate) pass_fraction: f64,
    /// Seconds of load.
    pub(crate) seconds: f64,
    /// Server CPU seconds.
    pub(crate) server_cpu_s: f64,
    /// This process's CPU seconds.
    pub(crate) receivers_cpu_s: f64,
    /// Server RSS at the end.
    pub(crate) server_rss_bytes: u64,
    /// The server's reads.
    pub(crate) io: ServerIo,
}

/// The server's reads during a level (None: not known for this server).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ServerIo {
    /// Pool lookups served from memory.
    pub(crate) cache_hits: Option<u64>,
    /// Pool lookups that read.
    pub(crate) cache_misses: Option<u64>,
    /// Bytes read into the pool.
    pub(crate) cache_read_bytes: Option<u64>,
    /// `read_bytes` of /proc/PID/io, summed over the server's processes.
    pub(crate) proc_read_bytes: Option<u64>,
}

/// One stream's verdict and the bytes its receiver counted.
pub(crate) struct Judged {
    /// The verdict.
    pub(crate) verdict: Verdict,
    /// Title bytes delivered.
    pub(crate) title_bytes: f64,
    /// Bytes counted (UDP payload or HTTP body).
    pub(crate) wire_bytes: u64,
    /// UDP packets received.
    pub(crate) packets: u64,
    /// UDP receive calls.
    pub(crate) receives: u64,
}

/// Share of all cores that the server and the receivers together must use for a level to
/// count as saturating the machine.
pub const SATURATED_SHARE: f64 = 0.9;

/// Whether `cpu_s` CPU-seconds over `seconds` use at least [`SATURATED_SHARE`] of `cores`.
pub(crate) fn saturates(cpu_s: f64, seconds: f64, cores: usize) -> bool {
    seconds > 0.0 && cpu_s / seconds >= SATURATED_SHARE * cores as f64
}

/// Builds a level's figures from what was measured and the verdicts of its streams.
pub(crate) fn level_result(m: &Measured, tally: &Tally, judged: Vec<Judged>) -> LevelResult {
    let verdicts: Vec<&Verdict> = judged.iter().map(|j| &j.verdict).collect();
    let unjudged = verdicts.iter().filter(|v| !v.judged).count();
    let sessions = tally.accepted.len().saturating_sub(unjudged);
    let valid = verdicts.iter().filter(|v| v.valid).count();
    let delivered: f64 = judged.iter().map(|j| j.title_bytes).sum();
    let wire: u64 = judged.iter().map(|j| j.wire_bytes).sum();
    let (packets, receives) = judged
        .iter()
        .fold((0, 0), |(p, r), j| (p + j.packets, r + j.receives));
    let mut startups: Vec<f64> = verdicts.iter().filter_map(|v| v.startup_s).collect();
    startups.sort_by(f64::total_cmp);
    let rates: Vec<f64> = verdicts
        .iter()
        .flat_map(|v| v.window_rates.iter().copied())
        .collect();
    let per_wire = |b: Option<u64>| b.filter(|_| wire > 0).map(|b| b as f64 / wire as f64);
    let io = &m.io;
    let lookups = io.cache_hits.zip(io.cache_misses).map(|(h, x)| (h, h + x));
    LevelResult {
        streams: m.streams,
        sessions,
        unjudged,
        valid,
        passed: sessions > 0 && valid as f64 >= m.pass_fraction * sessions as f64,
        refused: tally.refused,
        invalid_reasons: reasons(tally, &verdicts),
        seconds: m.seconds,
        delivered_title_bytes: delivered,
        wire_bytes: wire,
        server_cpu_s: m.server_cpu_s,
        cpu_s_per_title_gb: m.server_cpu_s / (delivered / 1e9).max(1e-12),
        cpu_s_per_wire_gb: m.server_cpu_s / (wire as f64 / 1e9).max(1e-12),
        receivers_cpu_s: m.receivers_cpu_s,
        both_ends_cpu_s_per_title_gb: (m.server_cpu_s + m.receivers_cpu_s)
            / (delivered / 1e9).max(1e-12),
        server_rss_bytes: m.server_rss_bytes,
        cache_hit_ratio: lookups
            .filter(|(_, all)| *all > 0)
            .map(|(h, all)| h as f64 / all as f64),
        disk_read_bytes: io.cache_read_bytes,
        disk_bytes_per_wire_byte: per_wire(io.cache_read_bytes),
        proc_read_bytes: io.proc_read_bytes,
        proc_read_bytes_per_wire_byte: per_wire(io.proc_read_bytes),
        disk_bytes_per_title_byte: per_title(io.proc_read_bytes, delivered),
        memory_hit_ratio: per_title(io.proc_read_bytes, delivered).map(|d| (1.0 - d).max(0.0)),
        rx_packets_per_receive: (receives > 0).then(|| packets as f64 / receives as f64),
        startup_p50_s: percentile(&startups, 0.50),
        startup_p99_s: percentile(&startups, 0.99),
        startup_delays_s: startups,
        bitrate_cv: cv(&rates),
        machine_saturated: saturates(
            m.server_cpu_s + m.receivers_cpu_s,
            m.seconds,
            std::thread::available_parallelism().map_or(1, |n| n.get()),
        ),
    }
}

/// `bytes` per delivered title byte (None when either is unknown or nothing was delivered).
fn per_title(bytes: Option<u64>, delivered: f64) -> Option<f64> {
    bytes
        .filter(|_| delivered > 0.0)
        .map(|b| b as f64 / delivered)
}

/// The first refusal, then the reasons streams were invalid grouped by kind, with counts.
fn reasons(tally: &Tally, verdicts: &[&Verdict]) -> Vec<(String, usize)> {
    let mut reasons: Vec<(String, usize)> = Vec::new();
    if let Some(r) = &tally.first_refusal {
        reasons.push((format!("refused: {r}"), tally.refused));
    }
    for v in verdicts {
        let Some(r) = v.reason.as_ref().filter(|_| v.judged) else {
            continue;
        };
        // Group by the reason's kind (its text up to the first digit).
        let kind: String = r.chars().take_while(|c| !c.is_ascii_digit()).collect();
        match reasons.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, c)) => *c += 1,
            None => reasons.push((kind, 1)),
        }
    }
    reasons
}

/// The `q` quantile of sorted `xs` (nearest rank).
pub fn percentile(xs: &[f64], q: f64) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    let rank = ((q * xs.len() as f64).ceil() as usize).clamp(1, xs.len());
    xs.get(rank - 1).copied()
}

/// Standard deviation over mean of `xs`.
pub fn cv(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    (mean > 0.0).then(|| var.sqrt() / mean)
}

/// One server's levels and its result.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ServerResult {
    /// Engine name, or `nginx` / `nginx-aio` / `nginx-directio`.
    pub server: String,
    /// The most streams of a passing level (None: no level passed).
    pub max_valid_streams: Option<usize>,
    /// The figures at that level (else at the first level run).
    pub at_max: LevelResult,
    /// Every level run, in order.
    pub levels: Vec<LevelResult>,
    /// `cpu_s_per_title_gb` at the first level over nginx's at its first level (same load).
    pub cpu_ratio_to_nginx: Option<f64>,
    /// `max_valid_streams` over nginx's.
    pub streams_ratio_to_nginx: Option<f64>,
}

impl ServerResult {
    /// From the levels run (at least one).
    pub(crate) fn new(server: &str, levels: Vec<LevelResult>) -> ServerResult {
        let best = levels
            .iter()
            .filter(|l| l.passed)
            .max_by_key(|l| l.streams)
            .or(levels.first())
            .cloned();
        ServerResult {
            server: server.to_string(),
            max_valid_streams: levels.iter().filter(|l| l.passed).map(|l| l.streams).max(),
            at_max: best.unwrap_or_else(|| {
                let none = Measured {
                    streams: 0,
                    pass_fraction: 1.0,
                    seconds: 0.0,
                    server_cpu_s: 0.0,
                    receivers_cpu_s: 0.0,
                    server_rss_bytes: 0,
                    io: ServerIo::default(),
                };
                level_result(&none, &Tally::new(0), Vec::new())
            }),
            levels,
            cpu_ratio_to_nginx: None,
            streams_ratio_to_nginx: None,
        }
    }
}

/// The results of one `bench load` run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LoadReport {
    /// Titles.
    pub titles: usize,
    /// Bitrate of each title.
    pub bitrate_bps: u64,
    /// Length of each title, seconds.
    pub title_s: f64,
    /// Seconds of load per level.
    pub seconds: f64,
    /// Smallest share of valid streams for a level to pass.
    #[serde(default)]
    pub pass_fraction: f64,
    /// Seed of the schedules.
    #[serde(default)]
    pub seed: u64,
    /// Where the clients ran (veth: a namespace of their own; loopback).
    #[serde(default)]
    pub net: String,
    /// Ingest against `cp`, `cat` against `cat`, of one title's file.
    #[serde(default)]
    pub file_ops: Option<FileOps>,
    /// One entry per server, in the order run.
    pub servers: Vec<ServerResult>,
    /// The memory and disk limits every server ran under (none: not limited).
    #[serde(default)]
    pub confinement: Option<ConfinementReport>,
}

/// Whether the server named `name` (an `--engines` entry, or `nginx-VARIANT`) serves
/// over TLS.
fn over_tls(name: &str) -> bool {
    match super::run::EngineSpec::parse(name) {
        Ok(spec) => super::run::engine_needs_tls(spec.kind) || spec.kind == "nginx-tls",
        Err(_) => false,
    }
}

/// The report of `servers`, with the ratios to the best nginx variant of the run over the
/// same transport (plain HTTP and UDP to the plain variants, HTTPS to `nginx-tls`): its
/// lowest CPU per GB at the first level, its most valid streams ([`set_ratios`]).
pub(crate) fn finish(
    cfg: &LoadBenchConfig,
    net: String,
    file_ops: Option<FileOps>,
    mut servers: Vec<ServerResult>,
    confinement: Option<ConfinementReport>,
) -> LoadReport {
    set_ratios(&mut servers);
    LoadReport {
        titles: cfg.titles,
        bitrate_bps: cfg.bitrate_bps,
        title_s: cfg.title_s,
        seconds: cfg.seconds,
        pass_fraction: cfg.pass_fraction,
        seed: cfg.seed,
        net,
        file_ops,
        servers,
        confinement,
    }
}

/// Each server's ratios to the best nginx variant of the run over the same transport.
fn set_ratios(servers: &mut [ServerResult]) {
    let best = |tls: bool| {
        let nginxes = || {
            servers
                .iter()
                .filter(|s| s.server.starts_with("nginx") && over_tls(&s.server) == tls)
        };
        let cpu = nginxes()
            .filter_map(|s| s.levels.first().map(|l| l.cpu_s_per_title_gb))
            .filter(|c| *c > 0.0)
            .min_by(f64::total_cmp);
        let max = nginxes().filter_map(|s| s.max_valid_streams).max();
        nginxes().next().map(|_| (cpu, max))
    };
    let (plain, tls) = (best(false), best(true));
    for s in servers.iter_mut() {
        // No nginx over this transport: no ratio.
        let (cpu, max) = (if over_tls(&s.server) { tls } else { plain }).unwrap_or((None, None));
        let mine = s.levels.first().map(|l| l.cpu_s_per_title_gb);
        s.cpu_ratio_to_nginx = mine.zip(cpu).filter(|(_, n)| *n > 0.0).map(|(m, n)| m / n);
        s.streams_ratio_to_nginx = s
            .max_valid_streams
            .zip(max)
            .filter(|(_, n)| *n > 0)
            .map(|(m, n)| m as f64 / n as f64);
    }
}

fn opt(x: Option<f64>, scale: f64, digits: usize) -> String {
    x.map_or("-".into(), |v| format!("{:.*}", digits, v * scale))
}

/// The report as a table: one row per level, then a summary row per server, then the file
/// operations.
pub fn format_table(r: &LoadReport) -> String {
    let mut s = format!("net: {}\n", r.net);
    s.push_str(&format!(
        "{:<15} {:>7} {:>11} {:>8} {:>8} {:>8} {:>8} {:>7} {:>6} {:>7} {:>7} {:>5} {:>7} {:>7} {:>6} {:>4} {:>3}\n",
        "server",
        "streams",
        "valid/total",
        "cpu_s/GB",
        "cpu/wGB",
        "rx_cpu_s",
        "both/GB",
        "rss_MB",
        "hit%",
        "disk/B",
        "io/B",
        "pk/rx",
        "start50",
        "start99",
        "cv",
        "pass",
        "sat"
    ));
    for sv in &r.servers {
        for l in &sv.levels {
            s.push_str(&level_row(&sv.server, l));
        }
    }
    s.push_str(&format!(
        "\n{:<15} {:>11} {:>13} {:>16}\n",
        "server", "max_valid", "cpu_vs_nginx", "streams_vs_nginx"
    ));
    for sv in &r.servers {
        s.push_str(&format!(
            "{:<15} {:>11} {:>13} {:>16}\n",
            sv.server,
            sv.max_valid_streams
                .map_or("none".into(), |m| m.to_string()),
            opt(sv.cpu_ratio_to_nginx, 1.0, 2),
            opt(sv.streams_ratio_to_nginx, 1.0, 2),
        ));
    }
    s.push_str(
        "cpu_s/GB: server user+sys per GB of title bytes delivered; cpu/wGB: per GB on the wire \
         (isnode: UDP payload received; nginx: HTTP body); rx_cpu_s: this process (receivers); \
         both/GB: server and receivers together per title GB (on veth and loopback the kernel \
         charges part of each side's network work to the other: see docs/benchmarks.md); hit%: isnode's pool hits of all lookups; disk/B: isnode's bytes read into the pool per \
         wire byte; io/B: read_bytes of /proc/PID/io of every server process per wire byte; \
         pk/rx: packets per UDP receive call (32: GSO runs arrive whole); cpu_vs_nginx: to the best nginx variant of the same transport (https, hls-tls: nginx-tls), at \
         the first level (same load); start: request to first byte; cv: of 1 s window rates; \
         sat: server and receivers together used at least 90 % of every core (a failing level \
         may be the machine's limit, not the server's)\n",
    );
    s.push_str(&encrypted_lines(r));
    if let Some(c) = &r.confinement {
        s.push('\n');
        s.push_str(&confined_table(r, c));
    }
    if let Some(f) = &r.file_ops {
        s.push('\n');
        s.push_str(&super::files::format_table(f));
    }
    s
}

/// Each pair of an engine serving the titles clear and the same engine serving them
/// encrypted (`ENGINE+enc`), matched in the order run (the n-th clear row with the n-th
/// encrypted one): their server CPU per title GB at the first level (the same load), and
/// its ratio encrypted / clear. Empty without an encrypted engine.
pub fn encrypted_pairs(servers: &[ServerResult]) -> Vec<(String, f64, f64)> {
    let suffix = super::run::ENCRYPTED_SUFFIX;
    let first = |sv: &ServerResult| sv.levels.first().map(|l| l.cpu_s_per_title_gb);
    let mut used = vec![false; servers.len()];
    let mut out = Vec::new();
    for enc in servers.iter().filter(|s| s.server.contains(suffix)) {
        let clear_name = enc.server.replacen(suffix, "", 1);
        let found = servers
            .iter()
            .enumerate()
            .find(|(i, s)| s.server == clear_name && !used.get(*i).copied().unwrap_or(true));
        if let Some((i, clear)) = found {
            if let Some(u) = used.get_mut(i) {
                *u = true;
            }
            if let (Some(c), Some(e)) = (first(clear), first(enc)) {
                out.push((clear_name, c, e));
            }
        }
    }
    out
}

/// The lines of [`encrypted_pairs`]: per engine, each pair's ratio, their median, and the
/// ratio of the summed CPU seconds per GB (steadier than single pairs when a row's CPU
/// is a few hundred 10 ms ticks).
fn encrypted_lines(r: &LoadReport) -> String {
    let pairs = encrypted_pairs(&r.servers);
    if pairs.is_empty() {
        return String::new();
    }
    let mut s = String::from("\nencrypted / clear, server cpu_s/GB at the first level:\n");
    let mut engines: Vec<&str> = pairs.iter().map(|p| p.0.as_str()).collect();
    engines.dedup();
    for engine in engines {
        let mine: Vec<&(String, f64, f64)> = pairs.iter().filter(|p| p.0 == engine).collect();
        let ratios: Vec<f64> = mine.iter().map(|p| p.2 / p.1.max(1e-12)).collect();
        let each: Vec<String> = ratios.iter().map(|x| format!("{x:.3}")).collect();
        let (clear, enc) = mine.iter().fold((0.0, 0.0), |(c, e), p| (c + p.1, e + p.2));
        s.push_str(&format!(
            "{engine}: median {:.3} of {} pairs ({}); summed {:.3}\n",
            median(&ratios),
            ratios.len(),
            each.join(", "),
            enc / f64::max(clear, 1e-12)
        ));
    }
    s
}

/// The median of `xs` (the mean of the middle two of an even count; 0 for none).
fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match (v.get(n / 2), n % 2) {
        (Some(hi), 0) => (v.get(n / 2 - 1).copied().unwrap_or(*hi) + hi) / 2.0,
        (Some(mid), _) => *mid,
        (None, _) => 0.0,
    }
}

/// The summary of a run under memory and disk limits: per server, at its most valid
/// streams (else its first level), what a delivered byte cost the disk.
fn confined_table(r: &LoadReport, c: &ConfinementReport) -> String {
    let mib = |b: Option<u64>| b.map_or("none".into(), |b| format!("{} MiB", b >> 20));
    let mut s =
        format!(
        "limits per server: memory {}, disk reads {} ({} cgroup); library {} MiB ({} x memory); \
         isnode pool {} MiB{}\n",
        mib(c.limits.memory_limit_bytes),
        c.limits
            .disk_read_limit_bps
            .map_or("unlimited".into(), |b| format!("{:.1} MB/s", b as f64 / 1e6)),
        c.cgroup,
        c.library_bytes >> 20,
        opt(c.library_over_memory, 1.0, 1),
        c.isnode_pool_bytes >> 20,
        match c.disk_admission {
            DiskAdmission::AtReadLimit { percent } => {
                format!(", isnode admitting against {percent} % of the disk read limit")
            }
            DiskAdmission::Off => String::new(),
        },
    );
    s.push_str(&format!(
        "{:<15} {:>9} {:>11} {:>9} {:>8} {:>8}\n",
        "server", "max_valid", "disk/title", "mem_hit%", "start50", "start99"
    ));
    for sv in &r.servers {
        let l = &sv.at_max;
        s.push_str(&format!(
            "{:<15} {:>9} {:>11} {:>9} {:>8} {:>8}\n",
            sv.server,
            sv.max_valid_streams
                .map_or("none".into(), |m| m.to_string()),
            opt(l.disk_bytes_per_title_byte, 1.0, 3),
            opt(l.memory_hit_ratio, 100.0, 1),
            opt(l.startup_p50_s, 1e3, 0) + "ms",
            opt(l.startup_p99_s, 1e3, 0) + "ms",
        ));
    }
    s.push_str(
        "disk/title: bytes the server's processes read from the disk (/proc/PID/io) per title \
         byte delivered; mem_hit%: 1 - disk/title (what memory served)\n",
    );
    s
}

fn level_row(server: &str, l: &LevelResult) -> String {
    format!(
        "{:<15} {:>7} {:>11} {:>8.3} {:>8.3} {:>8.2} {:>8.3} {:>7.1} {:>6} {:>7} {:>7} {:>5} {:>7} {:>7} {:>6} {:>4} {:>3}\n",
        server,
        l.streams,
        format!("{}/{}", l.valid, l.sessions),
        l.cpu_s_per_title_gb,
        l.cpu_s_per_wire_gb,
        l.receivers_cpu_s,
        l.both_ends_cpu_s_per_title_gb,
        l.server_rss_bytes as f64 / 1e6,
        opt(l.cache_hit_ratio, 100.0, 1),
        opt(l.disk_bytes_per_wire_byte, 1.0, 3),
        opt(l.proc_read_bytes_per_wire_byte, 1.0, 3),
        opt(l.rx_packets_per_receive, 1.0, 1),
        opt(l.startup_p50_s, 1e3, 0) + "ms",
        opt(l.startup_p99_s, 1e3, 0) + "ms",
        opt(l.bitrate_cv, 1.0, 3),
        if l.passed { "yes" } else { "no" },
        if l.machine_saturated { "yes" } else { "-" },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saturation_is_the_share_of_every_core() {
        assert!(saturates(18.0, 10.0, 2), "1.8 of 2 cores");
        assert!(!saturates(17.9, 10.0, 2));
        assert!(!saturates(18.0, 10.0, 4));
        assert!(!saturates(1.0, 0.0, 2), "no time, no verdict");
    }

    #[test]
    fn percentiles_and_cv_of_small_samples() {
        let xs = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&xs, 0.5), Some(2.0));
        assert_eq!(percentile(&xs, 0.99), Some(4.0));
        assert_eq!(percentile(&[], 0.5), None);
        assert_eq!(cv(&[5.0, 5.0]), Some(0.0));
        let c = cv(&[1.0, 3.0]).unwrap_or(0.0);
        assert!((c - 0.5).abs() < 1e-12);
    }

    fn verdict(valid: bool, startup_s: f64) -> Verdict {
        Verdict {
            valid,
            startup_s: Some(startup_s),
            window_rates: vec![1000.0, 1000.0],
            reason: (!valid).then(|| "window 3 delivered 5 B/s".into()),
            judged: true,
        }
    }

    #[test]
    fn a_level_reports_wire_cache_and_read_figures() {
        let mut tally = Tally::new(2);
        let nominal = Nominal {
            rate_bytes_per_s: 1000.0,
            startup_buffer_s: 1.0,
            slack_bytes: 0.0,
        };
        tally.accept(0, nominal, 0.5);
        tally.accept(1, nominal, 0.5);
        let m = Measured {
            streams: 2,
            pass_fraction: 0.5,
            seconds: 10.0,
            server_cpu_s: 2.0,
            receivers_cpu_s: 1.0,
            server_rss_bytes: 7,
            io: ServerIo {
                cache_hits: Some(3),
                cache_misses: Some(1),
                cache_read_bytes: Some(1_000_000_000),
                proc_read_bytes: Some(500_000_000),
            },
        };
        let judged = vec![
            Judged {
                verdict: verdict(true, 0.2),
                title_bytes: 0.5e9,
                wire_bytes: 1_000_000_000,
                packets: 64,
                receives: 2,
            },
            Judged {
                verdict: verdict(false, 0.1),
                title_bytes: 0.5e9,
                wire_bytes: 1_000_000_000,
                packets: 32,
                receives: 30,
            },
        ];
        let l = level_result(&m, &tally, judged);
        assert_eq!((l.valid, l.sessions, l.passed), (1, 2, true));
        assert_eq!(l.wire_bytes, 2_000_000_000);
        assert!((l.cpu_s_per_title_gb - 2.0).abs() < 1e-9);
        assert!((l.cpu_s_per_wire_gb - 1.0).abs() < 1e-9);
        assert_eq!(l.cache_hit_ratio, Some(0.75));
        assert_eq!(l.disk_bytes_per_wire_byte, Some(0.5));
        assert_eq!(l.proc_read_bytes_per_wire_byte, Some(0.25));
        assert_eq!(l.rx_packets_per_receive, Some(3.0));
        assert_eq!(l.startup_delays_s, vec![0.1, 0.2]);
        assert_eq!(l.invalid_reasons, vec![("window ".to_string(), 1)]);
        // nginx: no pool, no UDP; nothing looked up is no ratio, not 0.
        let m = Measured {
            io: ServerIo {
                proc_read_bytes: Some(0),
                ..ServerIo::default()
            },
            ..m
        };
        let l = level_result(&m, &tally, Vec::new());
        assert_eq!((l.cache_hit_ratio, l.rx_packets_per_receive), (None, None));
        assert_eq!(l.proc_read_bytes_per_wire_byte, None, "no wire bytes");
    }

    /// One level of one valid stream, 1 GB of title delivered for `cpu_s` of server CPU.
    fn one_level(cpu_s: f64) -> Vec<LevelResult> {
        let mut tally = Tally::new(1);
        let nominal = Nominal {
            rate_bytes_per_s: 1000.0,
            startup_buffer_s: 1.0,
            slack_bytes: 0.0,
        };
        tally.accept(0, nominal, 1.0);
        let m = Measured {
            streams: 1,
            pass_fraction: 0.5,
            seconds: 10.0,
            server_cpu_s: cpu_s,
            receivers_cpu_s: 0.0,
            server_rss_bytes: 0,
            io: ServerIo::default(),
        };
        let judged = vec![Judged {
            verdict: verdict(true, 0.1),
            title_bytes: 1e9,
            wire_bytes: 1_000_000_000,
            packets: 1,
            receives: 1,
        }];
        vec![level_result(&m, &tally, judged)]
    }

    #[test]
    fn encrypted_engines_pair_with_their_clear_rows_in_order() {
        let servers: Vec<ServerResult> = [
            ("gso", 2.0),
            ("gso+enc", 2.2),
            ("gso+enc", 1.8),
            ("sendmmsg", 4.0),
            ("gso", 3.0),
            ("http+enc", 1.0),
        ]
        .into_iter()
        .map(|(name, cpu)| ServerResult::new(name, one_level(cpu)))
        .collect();
        let pairs = encrypted_pairs(&servers);
        assert_eq!(
            pairs,
            [("gso".to_string(), 2.0, 2.2), ("gso".to_string(), 3.0, 1.8)],
            "each encrypted row with the next unused clear row of its engine; none for http"
        );
        assert_eq!(median(&[1.5, 0.5]), 1.0);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[]), 0.0);
    }

    #[test]
    fn https_engines_are_compared_with_nginx_over_tls() {
        let mut servers: Vec<ServerResult> = [
            ("http", 2.0),
            ("https", 6.0),
            ("hls-tls@/tmp/old", 9.0),
            ("nginx", 1.0),
            ("nginx-tls", 3.0),
        ]
        .into_iter()
        .map(|(name, cpu)| ServerResult::new(name, one_level(cpu)))
        .collect();
        set_ratios(&mut servers);
        let ratios: Vec<Option<f64>> = servers.iter().map(|s| s.cpu_ratio_to_nginx).collect();
        assert_eq!(
            ratios,
            [Some(2.0), Some(2.0), Some(3.0), Some(1.0), Some(1.0)]
        );
        // Without a TLS variant of nginx, the HTTPS engines have no ratio.
        let mut plain_only: Vec<ServerResult> = servers
            .into_iter()
            .filter(|s| s.server != "nginx-tls")
            .collect();
        set_ratios(&mut plain_only);
        assert_eq!(plain_only[1].cpu_ratio_to_nginx, None);
        assert_eq!(plain_only[0].cpu_ratio_to_nginx, Some(2.0));
    }
}
