//! `isnode bench load`: isnode's engines and nginx side by side, in one run, under the same
//! Zipf/Poisson load of paced clients; the most valid streams each holds, and what each
//! spends on them.
//!
//! - [`workload`]: the schedule of sessions (sans IO).
//! - [`validity`]: the validity rule of a stream (sans IO).
//! - `receivers`: the clients (threads of this process) and what they verify.
//! - `isnode`, [`nginx`]: the servers under test.
//! - `run`: one level of load against one server, and the ramp to the most valid streams.
//! - [`report`]: the figures, the table.

mod isnode;
pub mod nginx;
mod receivers;
pub mod report;
mod run;
pub mod validity;
pub mod workload;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;

pub use nginx::NginxVariant;
pub use report::{LevelResult, LoadReport, ServerResult};

/// One title: its name, bitrate and bytes.
pub(crate) struct Title {
    name: String,
    bitrate_bps: u64,
    bytes: Arc<Vec<u8>>,
}

/// What to run.
#[derive(Clone, Debug)]
pub struct LoadBenchConfig {
    /// The `isnode` binary to start servers from.
    pub isnode_exe: PathBuf,
    /// isnode engines to load, in order.
    pub engines: Vec<String>,
    /// nginx variants to load after the engines (none: isnode only).
    pub nginx: Vec<NginxVariant>,
    /// Number of titles.
    pub titles: usize,
    /// Bitrate of every title.
    pub bitrate_bps: u64,
    /// Length of every title, seconds.
    pub title_s: f64,
    /// Seconds of load per level.
    pub seconds: f64,
    /// Concurrent streams of the first level.
    pub streams: usize,
    /// Highest level tried (no ramp when at most `streams`).
    pub max_streams: usize,
    /// Bisection steps after the doubling found a failing level.
    pub bisect_steps: usize,
    /// Smallest share of valid streams for a level to pass.
    pub pass_fraction: f64,
    /// Seconds of the stream a client buffers before playing.
    pub startup_buffer_s: f64,
    /// isnode's block pool size.
    pub cache_size_bytes: u64,
    /// Seed of the schedules.
    pub seed: u64,
}

/// Runs every server of `cfg` in turn; `progress` hears what is going on.
pub fn run(cfg: &LoadBenchConfig, progress: &mut dyn FnMut(&str)) -> anyhow::Result<LoadReport> {
    let dir = tempfile::tempdir().context("creating a scratch directory")?;
    progress("generating the titles");
    let titles = make_titles(cfg)?;
    let mut servers = Vec::new();
    if !cfg.engines.is_empty() {
        progress("ingesting the titles");
        let vol = dir.path().join("vol");
        isnode::make_volume(&vol, &titles)?;
        for engine in &cfg.engines {
            let r = run::ramp_isnode(cfg, &vol, engine, &titles, progress)
                .with_context(|| format!("engine {engine}"))?;
            servers.push(r);
        }
    }
    if !cfg.nginx.is_empty() {
        let ndir = dir.path().join("nginx");
        nginx::write_titles(&ndir, &titles)?;
        for v in &cfg.nginx {
            let r = run::ramp_nginx(cfg, &ndir, *v, &titles, progress)
                .with_context(|| format!("nginx ({v:?})"))?;
            servers.push(r);
        }
    }
    Ok(report::finish(cfg, servers))
}

fn make_titles(cfg: &LoadBenchConfig) -> anyhow::Result<Vec<Title>> {
    (0..cfg.titles.max(1))
        .map(|i| {
            let g = isnode_media::TsGenConfig {
                bitrate_bps: cfg.bitrate_bps,
                duration_s: cfg.title_s,
                seed: i as u64 + 1,
            };
            let mut bytes = Vec::new();
            isnode_media::generate_ts(&g, &mut bytes)?;
            Ok(Title {
                name: format!("title-{i:03}.ts"),
                bitrate_bps: cfg.bitrate_bps,
                bytes: Arc::new(bytes),
            })
        })
        .collect()
}
