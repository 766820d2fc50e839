//! `isnode bench load`: isnode's engines and nginx side by side, in one run, under the same
//! Zipf/Poisson load of paced clients; the most valid streams each holds, and what each
//! spends on them.
//!
//! - [`workload`]: the schedule of sessions (sans IO).
//! - [`validity`]: the validity rule of a stream (sans IO).
//! - `receivers`: the clients (threads of this process) and what they verify.
//! - `isnode`, [`nginx`]: the servers under test.
//! - `run`: one level of load against one server, and the ramp to the most valid streams.
//! - [`files`]: ingest against `cp`, `cat` against `cat`, of one title's file.
//! - [`report`]: the figures, the table; [`plots`]: its SVG figures.
//!
//! With [`NetMode::Veth`] the clients live in a network namespace of the benchmark's own
//! behind a veth pair (the servers stay in the root namespace, listening on the host side):
//! the thread that runs the levels enters the namespace after the server has started, so the
//! control requests, the sockets it creates and the receiver threads it spawns are all
//! inside, and isnode (which sends to the HTTP peer's address) streams across the pair.

mod config;
pub mod confine;
pub mod files;
mod isnode;
mod net;
pub mod nginx;
pub mod plots;
mod receivers;
pub mod report;
mod run;
mod title;
mod tls;
pub mod validity;
pub mod workload;

use std::path::PathBuf;
use std::sync::Arc;

use self::net::Net;
use self::title::Title;
use anyhow::Context;
pub use config::LoadBenchConfig;
pub use confine::{Confinement, ConfinementReport, DiskAdmission};
pub use files::FileOps;
pub use net::NetMode;
pub use nginx::NginxVariant;
pub use report::{LevelResult, LoadReport, ServerResult};

/// Runs every server of `cfg` in turn; `progress` hears what is going on.
pub fn run(cfg: &LoadBenchConfig, progress: &mut dyn FnMut(&str)) -> anyhow::Result<LoadReport> {
    // First, so that a run that cannot have its namespace fails before any work.
    progress("setting up the network");
    let net = Net::new(cfg.net)?;
    let dir = tempfile::tempdir().context("creating a scratch directory")?;
    progress("generating the titles");
    let titles = make_titles(cfg)?;
    let library_bytes: u64 = titles.iter().map(|t| t.bytes.len() as u64).sum();
    cfg.confine.check_library(library_bytes)?;
    let file_ops = match titles.first() {
        Some(t) => {
            progress("ingest against cp, cat against cat");
            Some(files::compare(
                &cfg.isnode_exe,
                &dir.path().join("files"),
                t,
            )?)
        }
        None => None,
    };
    let tls = run_certificate(cfg, &net, dir.path())?;
    let mut servers = Vec::new();
    if !cfg.engines.is_empty() {
        let mut volumes = Volumes::default();
        for engine in &cfg.engines {
            let spec = run::EngineSpec::parse(engine)?;
            let (vol, served) = volumes.for_engine(cfg, dir.path(), &spec, &titles, progress)?;
            let r = run::ramp_isnode(cfg, (&net, tls.as_ref()), &vol, engine, &served, progress)
                .with_context(|| format!("engine {engine}"))?;
            servers.push(r);
        }
    }
    if !cfg.nginx.is_empty() {
        let ndir = dir.path().join("nginx");
        nginx::write_titles(&ndir, &titles)?;
        for v in &cfg.nginx {
            let r = run::ramp_nginx(cfg, (&net, tls.as_ref()), &ndir, *v, &titles, progress)
                .with_context(|| format!("nginx ({v:?})"))?;
            servers.push(r);
        }
    }
    let confinement = confinement_report(cfg, library_bytes)?;
    Ok(report::finish(
        cfg,
        net.describe(),
        file_ops,
        servers,
        confinement,
    ))
}

/// The volumes of a run: one per block length and kind of titles the engines name
/// (`ENGINE[+enc]/BYTES`), made once, each with the titles as its clients must get them.
#[derive(Default)]
struct Volumes(Vec<(VolumeKey, PathBuf, Arc<Vec<Title>>)>);

/// What tells two volumes of a run apart: the block length and the kind of titles.
type VolumeKey = (Option<u32>, run::Titles);

impl Volumes {
    /// The volume `spec` serves (made now if no engine before needed it) and its titles.
    fn for_engine(
        &mut self,
        cfg: &LoadBenchConfig,
        dir: &std::path::Path,
        spec: &run::EngineSpec<'_>,
        titles: &[Title],
        progress: &mut dyn FnMut(&str),
    ) -> anyhow::Result<(PathBuf, Arc<Vec<Title>>)> {
        let key = (spec.block_len, spec.titles);
        if let Some((_, vol, served)) = self.0.iter().find(|(k, _, _)| *k == key) {
            return Ok((vol.clone(), served.clone()));
        }
        let vol = dir.join(format!("vol-{}", spec.label()));
        progress(&format!("ingesting the titles ({})", spec.label()));
        let served = match spec.titles {
            run::Titles::Clear => {
                isnode::make_volume(&vol, titles, spec.block_len)?;
                titles.to_vec()
            }
            run::Titles::Encrypted => isnode::make_encrypted_volume(&vol, titles, spec.block_len)?,
        };
        if cfg.confine.is_none() {
            // Written with O_DIRECT, the segment files are not in the page cache, while
            // nginx's title files were just written through it: both start warm (a
            // confined run starts every server cold instead).
            files::warm_segments(&vol)?;
        }
        let served = Arc::new(served);
        self.0.push((key, vol.clone(), served.clone()));
        Ok((vol, served))
    }
}

/// The run's certificate and key, when an engine or nginx variant serves HTTPS: one pair
/// for every server, so that isnode and nginx do the same handshakes.
fn run_certificate(
    cfg: &LoadBenchConfig,
    net: &Net,
    dir: &std::path::Path,
) -> anyhow::Result<Option<tls::TlsPair>> {
    let engines = cfg
        .engines
        .iter()
        .map(|e| run::EngineSpec::parse(e).map(|s| run::engine_needs_tls(s.kind)))
        .collect::<anyhow::Result<Vec<bool>>>()?;
    let nginx = cfg.nginx.contains(&NginxVariant::Tls);
    if !nginx && !engines.contains(&true) {
        return Ok(None);
    }
    let pair = tls::TlsPair::make(&cfg.isnode_exe, &dir.join("tls"), net.server_host())
        .context("making the run's certificate")?;
    Ok(Some(pair))
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

/// What the servers ran under, when limited.
fn confinement_report(
    cfg: &LoadBenchConfig,
    library_bytes: u64,
) -> anyhow::Result<Option<ConfinementReport>> {
    if cfg.confine.is_none() {
        return Ok(None);
    }
    let cgroup = match crate::cgroup::version()? {
        crate::cgroup::Version::V1 => "v1",
        crate::cgroup::Version::V2 => "v2",
    };
    Ok(Some(ConfinementReport {
        limits: cfg.confine,
        library_bytes,
        library_over_memory: cfg
            .confine
            .memory_limit_bytes
            .map(|m| library_bytes as f64 / m as f64),
        isnode_pool_bytes: cfg.confine.isnode_pool_bytes(cfg.cache_size_bytes)?,
        cgroup: cgroup.into(),
        disk_admission: cfg.disk_admission,
    }))
}
