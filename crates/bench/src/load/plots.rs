//! The figures of a load run, as SVG drawn by [`crate::plot`]:
//! - `load_max_valid.svg`: the most valid streams of each engine and nginx (bars);
//! - `load_cpu_per_gb.svg`: server CPU per GB of title bytes against concurrent streams, one
//!   line per server over the levels of its ramp;
//! - `load_valid.svg`: the share of judged streams that were valid against concurrent
//!   streams, a line per server (what the bars leave out when levels fail);
//! - `load_startup.svg`: the distribution (CDF) of the start-up delays of every stream of
//!   each server's highest passing level (its first level when none passed).

use std::path::{Path, PathBuf};

use anyhow::Context;

use super::report::LoadReport;
use crate::plot::{bars, cdf, lines, Chart, LineStyle, Series};

/// File names of the figures, in the order written.
pub const FILES: [&str; 4] = [
    "load_max_valid.svg",
    "load_cpu_per_gb.svg",
    "load_startup.svg",
    "load_valid.svg",
];

/// The run's key parameters, for every figure's subtitle.
fn subtitle(r: &LoadReport) -> String {
    let net = r.net.split_whitespace().next().unwrap_or("?");
    format!(
        "{} titles of {:.0} s at {:.1} Mbit/s, Zipf 0.729, Poisson arrivals; {:.0} s per level; \
         a level passes with {:.0} % of streams valid; net {net}; seed {}",
        r.titles,
        r.title_s,
        r.bitrate_bps as f64 / 1e6,
        r.seconds,
        r.pass_fraction * 100.0,
        r.seed
    )
}

/// A line per server over the levels of its ramp: `f` of each level against its streams.
fn per_level(r: &LoadReport, f: &dyn Fn(&super::report::LevelResult) -> f64) -> Vec<Series> {
    r.servers
        .iter()
        .map(|s| {
            let mut points: Vec<(f64, f64)> =
                s.levels.iter().map(|l| (l.streams as f64, f(l))).collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            Series {
                name: s.server.clone(),
                points,
            }
        })
        .collect()
}

/// The figures' SVG texts, in [`FILES`]' order.
pub fn render(r: &LoadReport) -> [String; 4] {
    let sub = subtitle(r);
    let chart = |title: &str, x: &str, y: &str| Chart {
        title: title.into(),
        subtitle: sub.clone(),
        x_label: x.into(),
        y_label: y.into(),
    };
    let max: Vec<(String, f64)> = r
        .servers
        .iter()
        .map(|s| (s.server.clone(), s.max_valid_streams.unwrap_or(0) as f64))
        .collect();
    let cpu = per_level(r, &|l| l.cpu_s_per_title_gb);
    let valid = per_level(r, &|l| 100.0 * l.valid as f64 / l.sessions.max(1) as f64);
    let startup: Vec<Series> = r
        .servers
        .iter()
        .map(|s| Series {
            name: format!("{} ({} streams)", s.server, s.at_max.streams),
            points: cdf(&s.at_max.startup_delays_s)
                .into_iter()
                .map(|(x, y)| (x * 1e3, y))
                .collect(),
        })
        .collect();
    [
        bars(
            &chart(
                "Most valid streams per server (0: no level passed)",
                "server",
                "valid concurrent streams",
            ),
            &max,
        ),
        lines(
            &chart(
                "Server CPU per GB of title bytes delivered",
                "concurrent streams",
                "server CPU s per GB (user + sys)",
            ),
            &cpu,
            LineStyle::Marked,
        ),
        lines(
            &chart(
                "Start-up delay (request to first byte), highest passing level",
                "start-up delay, ms",
                "share of streams",
            ),
            &startup,
            LineStyle::Steps,
        ),
        lines(
            &chart(
                "Valid streams against concurrent streams",
                "concurrent streams",
                "valid, % of judged streams",
            ),
            &valid,
            LineStyle::Marked,
        ),
    ]
}

/// Writes the figures into `dir` (created if missing); returns their paths.
pub fn write(r: &LoadReport, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    write_files(dir, &FILES, render(r))
}

/// Writes `svgs` into `dir` (created if missing) under `names`; returns their paths.
fn write_files<const N: usize>(
    dir: &Path,
    names: &[&str; N],
    svgs: [String; N],
) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    names
        .iter()
        .zip(svgs)
        .map(|(name, svg)| {
            let p = dir.join(name);
            std::fs::write(&p, svg).with_context(|| format!("writing {}", p.display()))?;
            Ok(p)
        })
        .collect()
}

/// File names of the memory sweep's figures.
pub const SWEEP_FILES: [&str; 2] = ["load_memory_valid.svg", "load_memory_disk.svg"];

/// The figures of runs at several memory limits (one report per limit): most valid streams
/// and disk bytes per delivered title byte against the memory limit, a line per server.
pub fn render_sweep(reports: &[LoadReport]) -> [String; 2] {
    let sub = reports.first().map(subtitle).unwrap_or_default();
    let chart = |title: &str, y: &str| Chart {
        title: title.into(),
        subtitle: sub.clone(),
        x_label: "memory limit per server, MiB (page cache included)".into(),
        y_label: y.into(),
    };
    let series = |f: &dyn Fn(&super::report::ServerResult) -> Option<f64>| -> Vec<Series> {
        let mut names: Vec<String> = Vec::new();
        for r in reports {
            for sv in &r.servers {
                if !names.contains(&sv.server) {
                    names.push(sv.server.clone());
                }
            }
        }
        names
            .into_iter()
            .map(|name| {
                let mut points: Vec<(f64, f64)> = reports
                    .iter()
                    .filter_map(|r| {
                        let mem = r.confinement.as_ref()?.limits.memory_limit_bytes?;
                        let sv = r.servers.iter().find(|s| s.server == name)?;
                        Some((mem as f64 / (1u64 << 20) as f64, f(sv)?))
                    })
                    .collect();
                points.sort_by(|a, b| a.0.total_cmp(&b.0));
                Series { name, points }
            })
            .collect()
    };
    let valid = series(&|s| Some(s.max_valid_streams.unwrap_or(0) as f64));
    let disk = series(&|s| s.at_max.disk_bytes_per_title_byte);
    [
        lines(
            &chart(
                "Most valid streams against memory",
                "valid concurrent streams",
            ),
            &valid,
            LineStyle::Marked,
        ),
        lines(
            &chart(
                "Disk bytes per delivered byte against memory (at the most valid streams)",
                "disk bytes read per title byte delivered",
            ),
            &disk,
            LineStyle::Marked,
        ),
    ]
}

/// Writes the sweep's figures into `dir`; returns their paths.
pub fn write_sweep(reports: &[LoadReport], dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    write_files(dir, &SWEEP_FILES, render_sweep(reports))
}
