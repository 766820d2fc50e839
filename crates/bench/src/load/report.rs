//! The figures of a load run: per level, per server, and the ratios isnode/nginx.

use serde::{Deserialize, Serialize};

use super::validity::{Nominal, Verdict};
use super::LoadBenchConfig;

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
    /// Server CPU seconds (user + sys of every server process).
    pub server_cpu_s: f64,
    /// Server CPU seconds per GB (10^9 bytes) of title bytes delivered.
    pub cpu_s_per_title_gb: f64,
    /// CPU seconds of this process (the receivers and the control clients).
    pub receivers_cpu_s: f64,
    /// Resident memory of the server processes at the end, bytes.
    pub server_rss_bytes: u64,
    /// Start-up delay (request to first byte) median, seconds.
    pub startup_p50_s: Option<f64>,
    /// Start-up delay 99th percentile, seconds.
    pub startup_p99_s: Option<f64>,
    /// Coefficient of variation of the 1 s window rates of all streams, pooled.
    pub bitrate_cv: Option<f64>,
    /// The server and the receivers together used at least [`SATURATED_SHARE`] of every
    /// core of the machine: a failing level may then be the machine's (or the receivers')
    /// limit rather than the server's.
    #[serde(default)]
    pub machine_saturated: bool,
}

/// Share of all cores that the server and the receivers together must use for a level to
/// count as saturating the machine.
pub const SATURATED_SHARE: f64 = 0.9;

/// Whether `cpu_s` CPU-seconds over `seconds` use at least [`SATURATED_SHARE`] of `cores`.
pub(crate) fn saturates(cpu_s: f64, seconds: f64, cores: usize) -> bool {
    seconds > 0.0 && cpu_s / seconds >= SATURATED_SHARE * cores as f64
}

/// Builds a level's figures from the verdicts (and title bytes) of its streams.
#[allow(clippy::too_many_arguments)]
pub(crate) fn level_result(
    streams: usize,
    pass_fraction: f64,
    seconds: f64,
    server_cpu_s: f64,
    receivers_cpu_s: f64,
    server_rss_bytes: u64,
    tally: &Tally,
    verdicts: Vec<(Verdict, f64)>,
) -> LevelResult {
    let unjudged = verdicts.iter().filter(|(v, _)| !v.judged).count();
    let sessions = tally.accepted.len().saturating_sub(unjudged);
    let valid = verdicts.iter().filter(|(v, _)| v.valid).count();
    let delivered: f64 = verdicts.iter().map(|(_, b)| b).sum();
    let mut startups: Vec<f64> = verdicts.iter().filter_map(|(v, _)| v.startup_s).collect();
    startups.sort_by(f64::total_cmp);
    let rates: Vec<f64> = verdicts
        .iter()
        .flat_map(|(v, _)| v.window_rates.iter().copied())
        .collect();
    let mut reasons: Vec<(String, usize)> = Vec::new();
    if let Some(r) = &tally.first_refusal {
        reasons.push((format!("refused: {r}"), tally.refused));
    }
    for (v, _) in &verdicts {
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
    LevelResult {
        streams,
        sessions,
        unjudged,
        valid,
        passed: sessions > 0 && valid as f64 >= pass_fraction * sessions as f64,
        refused: tally.refused,
        invalid_reasons: reasons,
        seconds,
        delivered_title_bytes: delivered,
        server_cpu_s,
        cpu_s_per_title_gb: server_cpu_s / (delivered / 1e9).max(1e-12),
        receivers_cpu_s,
        server_rss_bytes,
        startup_p50_s: percentile(&startups, 0.50),
        startup_p99_s: percentile(&startups, 0.99),
        bitrate_cv: cv(&rates),
        machine_saturated: saturates(
            server_cpu_s + receivers_cpu_s,
            seconds,
            std::thread::available_parallelism().map_or(1, |n| n.get()),
        ),
    }
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
    /// Engine name, or `nginx` / `nginx-directio`.
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
                level_result(0, 1.0, 0.0, 0.0, 0.0, 0, &Tally::new(0), Vec::new())
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
    /// One entry per server, in the order run.
    pub servers: Vec<ServerResult>,
}

/// The report of `servers`, with the ratios to the (page-cache) nginx.
pub(crate) fn finish(cfg: &LoadBenchConfig, mut servers: Vec<ServerResult>) -> LoadReport {
    let nginx = servers.iter().find(|s| s.server == "nginx").map(|s| {
        (
            s.levels.first().map(|l| l.cpu_s_per_title_gb),
            s.max_valid_streams,
        )
    });
    if let Some((cpu, max)) = nginx {
        for s in &mut servers {
            let mine = s.levels.first().map(|l| l.cpu_s_per_title_gb);
            s.cpu_ratio_to_nginx = mine.zip(cpu).filter(|(_, n)| *n > 0.0).map(|(m, n)| m / n);
            s.streams_ratio_to_nginx = s
                .max_valid_streams
                .zip(max)
                .filter(|(_, n)| *n > 0)
                .map(|(m, n)| m as f64 / n as f64);
        }
    }
    LoadReport {
        titles: cfg.titles,
        bitrate_bps: cfg.bitrate_bps,
        title_s: cfg.title_s,
        seconds: cfg.seconds,
        servers,
    }
}

fn opt(x: Option<f64>, scale: f64, digits: usize) -> String {
    x.map_or("-".into(), |v| format!("{:.*}", digits, v * scale))
}

/// The report as a table: one row per level, then a summary row per server.
pub fn format_table(r: &LoadReport) -> String {
    let mut s = format!(
        "{:<15} {:>7} {:>13} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>6} {:>4}\n",
        "server",
        "streams",
        "valid/total",
        "cpu_s/GB",
        "rx_cpu_s",
        "rss_MB",
        "start50",
        "start99",
        "cv",
        "pass",
        "sat"
    );
    for sv in &r.servers {
        for l in &sv.levels {
            s.push_str(&format!(
                "{:<15} {:>7} {:>13} {:>9.3} {:>9.2} {:>9.1} {:>8} {:>8} {:>8} {:>6} {:>4}\n",
                sv.server,
                l.streams,
                format!("{}/{}", l.valid, l.sessions),
                l.cpu_s_per_title_gb,
                l.receivers_cpu_s,
                l.server_rss_bytes as f64 / 1e6,
                opt(l.startup_p50_s, 1e3, 0) + "ms",
                opt(l.startup_p99_s, 1e3, 0) + "ms",
                opt(l.bitrate_cv, 1.0, 3),
                if l.passed { "yes" } else { "no" },
                if l.machine_saturated { "yes" } else { "-" },
            ));
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
        "cpu_s/GB: server user+sys per GB of title bytes delivered; rx_cpu_s: this process \
         (receivers); cpu_vs_nginx: at the first level (same load); \
         start: request to first byte; cv: of 1 s window rates; sat: server and receivers \
         together used at least 90 % of every core (a failing level may be the machine's limit, \
         not the server's)\n",
    );
    s
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
}
