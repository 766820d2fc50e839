//! `isnode bench soak`: a long run of churn against one `isnode serve`, sampling the server's
//! resident memory, open descriptors and threads every second, and reporting their drift.
//!
//! The server and every client run in a network namespace of the soak's own
//! (`isnode-soak-<pid>`, loopback up with a multicast route, so broadcasts have somewhere to
//! go and the host's routes are not touched; root and iproute2 needed). The churn, from a
//! seeded PRNG, each tick:
//! - keeps `sessions` `isnode play` clients running, starting each at a random position and
//!   leaving (SIGKILL, as a closed player) after 3 to 15 s unless the title ends first;
//! - stops clients (SIGKILL: a client that vanishes), seeks (a client killed and started
//!   again elsewhere in the title), pauses them (SIGSTOP for a few seconds, then SIGCONT: the
//!   client resumes), and lets some time out (SIGSTOP, until the server drops the session);
//! - uploads titles (`isnode ingest --server`) and deletes them (`isnode rm --force`, which
//!   ends the sessions that use them);
//! - starts broadcasts that end by themselves, and stops some early.
//!
//! Errors are what should not happen: a client that exits with a failure it was not made to
//! have, an upload or delete that fails, a broadcast request answered other than 201 or 503
//! (a budget refusal is the server doing its job, counted apart).

mod churn;
mod config;
pub mod drift;
mod sample;

use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;

pub use self::churn::Actions;
use self::churn::Churn;
pub use self::config::SoakConfig;
use self::drift::{default_bounds, drift, exceeded, Drift};
use self::sample::Sample;
use crate::plot::{self, Chart, LineStyle, Series};

/// The result.
#[derive(Clone, Debug, Serialize)]
pub struct SoakReport {
    /// Seconds run.
    pub seconds: f64,
    /// Clients kept running.
    pub sessions: usize,
    /// Every sample, one a second.
    pub samples: Vec<Sample>,
    /// Drift of the server's RSS, bytes.
    pub rss: Option<Drift>,
    /// Drift of its open descriptors.
    pub fds: Option<Drift>,
    /// Drift of its threads.
    pub threads: Option<Drift>,
    /// What the churn did.
    pub actions: Actions,
    /// Errors (the first 50; `error_count` has them all).
    pub errors: Vec<String>,
    /// How many errors.
    pub error_count: u64,
    /// Drift bounds exceeded (empty: none).
    pub exceeded: Vec<String>,
}

impl SoakReport {
    /// Whether the run is clean: no error, no bound exceeded, and long enough to tell.
    pub fn clean(&self) -> bool {
        self.error_count == 0 && self.exceeded.is_empty() && self.rss.is_some()
    }
}

/// Runs the soak.
pub fn run(cfg: &SoakConfig, progress: &mut dyn FnMut(&str)) -> anyhow::Result<SoakReport> {
    anyhow::ensure!(
        cfg.seconds >= 10.0,
        "a soak needs at least 10 s to have a drift"
    );
    progress("setting up the namespace and the titles");
    let mut churn = Churn::start(cfg).context("starting the soak")?;
    let pid = churn.server_pid();
    let start = Instant::now();
    let mut samples = Vec::new();
    let mut next_sample = start;
    while start.elapsed().as_secs_f64() < cfg.seconds {
        churn.tick(start.elapsed());
        if Instant::now() >= next_sample {
            let s = sample::take(pid, start.elapsed().as_secs_f64(), churn.running())
                .context("sampling the server")?;
            if samples.len() % 30 == 0 {
                progress(&format!(
                    "{:>5.0} s: RSS {:.1} MiB, {} fds, {} threads, {} clients, {} errors",
                    s.t_s,
                    s.rss_bytes as f64 / 1048576.0,
                    s.fds,
                    s.threads,
                    s.clients,
                    churn.error_count()
                ));
            }
            samples.push(s);
            next_sample += Duration::from_secs(1);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let (actions, errors, error_count) = churn.finish();
    Ok(report(cfg, samples, actions, errors, error_count))
}

fn report(
    cfg: &SoakConfig,
    samples: Vec<Sample>,
    actions: Actions,
    errors: Vec<String>,
    error_count: u64,
) -> SoakReport {
    let series = |f: fn(&Sample) -> f64| samples.iter().map(f).collect::<Vec<f64>>();
    let rss = drift(&series(|s| s.rss_bytes as f64), 1.0);
    let fds = drift(&series(|s| s.fds as f64), 1.0);
    let threads = drift(&series(|s| s.threads as f64), 1.0);
    let exceeded = match (&rss, &fds, &threads) {
        (Some(r), Some(f), Some(t)) => exceeded(r, f, t, &default_bounds(r.settled)),
        _ => vec!["too few samples to tell".into()],
    };
    SoakReport {
        seconds: cfg.seconds,
        sessions: cfg.sessions,
        samples,
        rss,
        fds,
        threads,
        actions,
        errors,
        error_count,
        exceeded,
    }
}

/// The report as text.
pub fn format_table(r: &SoakReport) -> String {
    let mut o = String::new();
    let line = |name: &str, d: &Option<Drift>, unit: f64, u: &str| {
        match d {
        Some(d) => format!(
            "{name:<8} settled {:>9.1} {u}  last {:>9.1} {u}  peak {:>9.1} {u}  slope {:>+8.2} {u}/min\n",
            d.settled / unit,
            d.last / unit,
            d.peak / unit,
            d.slope_per_min / unit
        ),
        None => format!("{name:<8} (too few samples)\n"),
    }
    };
    o += &format!(
        "soak: {:.0} s, {} clients kept running\n",
        r.seconds, r.sessions
    );
    o += &line("RSS", &r.rss, 1048576.0, "MiB");
    o += &line("fds", &r.fds, 1.0, "");
    o += &line("threads", &r.threads, 1.0, "");
    o += &format!(
        "actions: {}\n",
        serde_json::to_string(&r.actions).unwrap_or_default()
    );
    o += &format!("errors: {}\n", r.error_count);
    for e in r.errors.iter().take(10) {
        o += &format!("  {e}\n");
    }
    if r.exceeded.is_empty() {
        o += "drift: within bounds\n";
    }
    for e in &r.exceeded {
        o += &format!("drift: {e}\n");
    }
    o
}

/// RSS (MiB) and descriptors and threads over time, as two SVG charts.
pub fn plots(r: &SoakReport) -> (String, String) {
    let pts = |f: fn(&Sample) -> f64| r.samples.iter().map(|s| (s.t_s, f(s))).collect::<Vec<_>>();
    let sub = format!("{} clients churning for {:.0} s", r.sessions, r.seconds);
    let rss = plot::lines(
        &Chart {
            title: "Server memory during a soak".into(),
            subtitle: sub.clone(),
            x_label: "time, s".into(),
            y_label: "RSS, MiB".into(),
        },
        &[Series {
            name: "RSS".into(),
            points: pts(|s| s.rss_bytes as f64 / 1048576.0),
        }],
        LineStyle::Steps,
    );
    let fds = plot::lines(
        &Chart {
            title: "Server descriptors and threads during a soak".into(),
            subtitle: sub,
            x_label: "time, s".into(),
            y_label: "count".into(),
        },
        &[
            Series {
                name: "open fds".into(),
                points: pts(|s| s.fds as f64),
            },
            Series {
                name: "threads".into(),
                points: pts(|s| s.threads as f64),
            },
            Series {
                name: "clients".into(),
                points: pts(|s| s.clients as f64),
            },
        ],
        LineStyle::Steps,
    );
    (rss, fds)
}
