//! The figures of a load run, as SVG drawn by [`crate::plot`]:
//! - `load_max_valid.svg`: the most valid streams of each engine and nginx (bars);
//! - `load_cpu_per_gb.svg`: server CPU per GB of title bytes against concurrent streams, one
//!   line per server over the levels of its ramp;
//! - `load_startup.svg`: the distribution (CDF) of the start-up delays of every stream of
//!   each server's highest passing level (its first level when none passed).

use std::path::{Path, PathBuf};

use anyhow::Context;

use super::report::LoadReport;
use crate::plot::{bars, cdf, lines, Chart, LineStyle, Series};

/// File names of the figures, in the order written.
pub const FILES: [&str; 3] = [
    "load_max_valid.svg",
    "load_cpu_per_gb.svg",
    "load_startup.svg",
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

/// The three figures' SVG texts, in [`FILES`]' order.
pub fn render(r: &LoadReport) -> [String; 3] {
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
    let cpu: Vec<Series> = r
        .servers
        .iter()
        .map(|s| {
            let mut points: Vec<(f64, f64)> = s
                .levels
                .iter()
                .map(|l| (l.streams as f64, l.cpu_s_per_title_gb))
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            Series {
                name: s.server.clone(),
                points,
            }
        })
        .collect();
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
    ]
}

/// Writes the figures into `dir` (created if missing); returns their paths.
pub fn write(r: &LoadReport, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    FILES
        .iter()
        .zip(render(r))
        .map(|(name, svg)| {
            let p = dir.join(name);
            std::fs::write(&p, svg).with_context(|| format!("writing {}", p.display()))?;
            Ok(p)
        })
        .collect()
}
