//! `isnode bench upload`: an upload over HTTP (`isnode ingest FILE --server URL`, i.e.
//! `PUT /v1/objects/{name}` on loopback) against a local `isnode ingest FILE` of the same
//! file, side by side: wall time of each command, rounds alternating, each into a volume
//! of its own on the same file system (made for the run).
//!
//! The file is an MPEG-TS title from `isnode gen-ts`, so both sides probe it (no
//! `--bitrate`). The figure is the ratio of the medians: upload throughput over local
//! ingest throughput (1.0: as fast).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context};
use serde::Serialize;

use crate::harness::server::{self, ServerSpec};

/// What to measure.
#[derive(Clone, Debug)]
pub struct UploadBenchConfig {
    /// The isnode binary (server and both clients).
    pub isnode_exe: PathBuf,
    /// Bitrate of the title.
    pub bitrate_bps: u64,
    /// Playing time of the title, seconds (its size: bitrate × seconds / 8).
    pub seconds: u64,
    /// Rounds per side (alternating).
    pub rounds: usize,
}

/// The result.
#[derive(Clone, Debug, Serialize)]
pub struct UploadReport {
    /// Bytes of the file.
    pub size_bytes: u64,
    /// Wall seconds of each local ingest.
    pub local_s: Vec<f64>,
    /// Wall seconds of each upload.
    pub upload_s: Vec<f64>,
    /// Median local ingest throughput, MB/s.
    pub local_mb_per_s: f64,
    /// Median upload throughput, MB/s.
    pub upload_mb_per_s: f64,
    /// `upload_mb_per_s / local_mb_per_s`.
    pub ratio: f64,
}

/// Runs the benchmark.
pub fn run(cfg: &UploadBenchConfig) -> anyhow::Result<UploadReport> {
    if cfg.rounds == 0 {
        bail!("--rounds must be at least 1");
    }
    let dir = tempfile::tempdir().context("creating the bench directory")?;
    let file = dir.path().join("title.ts");
    isnode(
        &cfg.isnode_exe,
        dir.path(),
        &[
            "gen-ts",
            "--bitrate",
            &cfg.bitrate_bps.to_string(),
            "--duration",
            &cfg.seconds.to_string(),
            &file.display().to_string(),
        ],
    )?;
    let size_bytes = std::fs::metadata(&file)?.len();
    let local_vol = dir.path().join("local");
    let server_vol = dir.path().join("server");
    for v in [&local_vol, &server_vol] {
        isnode(&cfg.isnode_exe, v, &["volume", "create"])?;
    }
    let (_server, base) = server::start(&ServerSpec::new(
        &cfg.isnode_exe,
        &server_vol,
        "127.0.0.1",
        "gso",
        64 << 20,
    ))?;
    let (mut local_s, mut upload_s) = (Vec::new(), Vec::new());
    let f = file.display().to_string();
    for round in 0..cfg.rounds {
        let name = format!("r{round}.ts");
        let t = Instant::now();
        isnode(
            &cfg.isnode_exe,
            &local_vol,
            &["ingest", &f, "--name", &name],
        )?;
        local_s.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        isnode(
            &cfg.isnode_exe,
            &local_vol,
            &["ingest", &f, "--name", &name, "--server", &base],
        )?;
        upload_s.push(t.elapsed().as_secs_f64());
    }
    let mb = size_bytes as f64 / 1e6;
    let local_mb_per_s = mb / median(&local_s);
    let upload_mb_per_s = mb / median(&upload_s);
    Ok(UploadReport {
        size_bytes,
        local_s,
        upload_s,
        local_mb_per_s,
        upload_mb_per_s,
        ratio: upload_mb_per_s / local_mb_per_s,
    })
}

/// The report as a table.
pub fn format_table(r: &UploadReport) -> String {
    let secs = |v: &[f64]| {
        v.iter()
            .map(|s| format!("{s:.2}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    format!(
        "file {} bytes\nlocal ingest  {:>8.1} MB/s  (s: {})\nHTTP upload   {:>8.1} MB/s  (s: {})\nupload / local = {:.2}\n",
        r.size_bytes,
        r.local_mb_per_s,
        secs(&r.local_s),
        r.upload_mb_per_s,
        secs(&r.upload_s),
        r.ratio
    )
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s.get(s.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Runs `exe --volume vol ARGS` to its end; fails with its stderr.
fn isnode(exe: &Path, vol: &Path, args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new(exe)
        .arg("--volume")
        .arg(vol)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running isnode {}", args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "isnode {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}
