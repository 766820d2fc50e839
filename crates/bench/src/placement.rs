//! `isnode bench placement`: the seeded simulation of a cluster of edges (`isnode_edge::sim`)
//! swept over cluster sizes and the most replicas a hot title may have: load balance (max/mean
//! requests and bytes per node), origin bytes per delivered byte, the titles moved by a failure,
//! a return and a join against the ideal 1/N, and a plot of max/mean against the cluster size.

use std::fmt::Write as _;

use isnode_edge::placement::{LoadBound, Replication};
use isnode_edge::sim::{self, Event, SimConfig, SimReport};
use serde::Serialize;

use crate::plot::{self, Chart, LineStyle, Series};

/// What to sweep.
#[derive(Clone, Debug)]
pub struct PlacementBenchConfig {
    /// Cluster sizes (nodes at the start).
    pub nodes: Vec<usize>,
    /// Most replicas per title (1 = the owner alone).
    pub max_replicas: Vec<usize>,
    /// Requests per node at the start (the run's requests: this × nodes).
    pub requests_per_node: u64,
    /// Titles per node at the start (at least 1000 titles in all).
    pub titles_per_node: usize,
    /// A title is hot past this fraction of one node's fair share of requests.
    pub hot_share_of_node: f64,
    /// Load bound (max over mean) past which requests walk down the ranking; `None`: off.
    pub load_bound: Option<f64>,
    /// The seed.
    pub seed: u64,
}

/// The sweep's results, one report per (nodes, max replicas).
#[derive(Clone, Debug, Serialize)]
pub struct PlacementReport {
    /// Every run.
    pub runs: Vec<SimReport>,
}

/// The configuration of one run of the sweep.
pub fn sim_config(cfg: &PlacementBenchConfig, nodes: usize, max_replicas: usize) -> SimConfig {
    let requests = cfg.requests_per_node.saturating_mul(nodes as u64);
    SimConfig {
        nodes,
        titles: (cfg.titles_per_node.saturating_mul(nodes)).max(1000),
        requests,
        zipf_exponent: 0.729,
        cache_share: 2.0,
        replication: Replication {
            hot_share_of_node: cfg.hot_share_of_node,
            max_replicas,
        },
        bound: LoadBound {
            max_over_mean: cfg.load_bound.unwrap_or(f64::INFINITY),
        },
        rate_window_requests: (requests as f64 / 4.0).max(1000.0),
        // About the last 50 requests of each node: a probe's view of its current load.
        load_window_requests: 50.0 * nodes as f64,
        events: vec![
            (0.2, Event::Fail(0)),
            (0.4, Event::Return(0)),
            (0.6, Event::Join),
        ],
        measure_from: 0.7,
        seed: cfg.seed,
    }
}

/// Runs the sweep.
pub fn run(cfg: &PlacementBenchConfig) -> PlacementReport {
    let mut runs = Vec::new();
    for &n in &cfg.nodes {
        for &r in &cfg.max_replicas {
            runs.push(sim::run(&sim_config(cfg, n, r)));
        }
    }
    PlacementReport { runs }
}

/// The report as a table.
pub fn format_table(report: &PlacementReport) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{:>6} {:>8} {:>7} {:>9} {:>9} {:>9} {:>8} {:>10} {:>22}",
        "nodes",
        "titles",
        "max R",
        "req max/",
        "bytes max/",
        "origin/",
        "hot R",
        "replicated",
        "moved/(1/N) fail,ret,join"
    );
    let _ = writeln!(
        o,
        "{:>6} {:>8} {:>7} {:>9} {:>9} {:>9}",
        "", "", "", "mean", "mean", "deliv."
    );
    for r in &report.runs {
        let moved: Vec<String> = r
            .moved
            .iter()
            .map(|m| format!("{:.2}", m.moved_fraction / m.ideal_fraction))
            .collect();
        let only = r
            .moved
            .iter()
            .all(|m| (m.moved_over_necessary - 1.0).abs() < 1e-9);
        let _ = writeln!(
            o,
            "{:>6} {:>8} {:>7} {:>9.3} {:>9.3} {:>9.4} {:>8} {:>10} {:>22}",
            r.config.nodes,
            r.config.titles,
            r.config.replication.max_replicas,
            r.max_over_mean_requests,
            r.max_over_mean_bytes,
            r.origin_bytes_per_delivered_byte,
            r.hottest_replicas,
            r.replicated_titles,
            format!(
                "{}{}",
                moved.join(","),
                if only { "" } else { " (more than the mover's)" }
            )
        );
    }
    o
}

/// Max/mean bytes per node against the cluster size, one line per max replicas.
pub fn plot_balance(report: &PlacementReport) -> String {
    let mut by_r: Vec<Series> = Vec::new();
    for run in &report.runs {
        let r = run.config.replication.max_replicas;
        let name = format!("max R = {r}");
        let point = (run.config.nodes as f64, run.max_over_mean_bytes);
        match by_r.iter_mut().find(|s| s.name == name) {
            Some(s) => s.points.push(point),
            None => by_r.push(Series {
                name,
                points: vec![point],
            }),
        }
    }
    let chart = Chart {
        title: "Load balance of rendezvous placement (Zipf 0.729)".into(),
        subtitle:
            "bytes served by the busiest node over the mean; hot titles on up to R nodes; load bound 1.1"
                .into(),
        x_label: "edge nodes".into(),
        y_label: "max / mean bytes per node".into(),
    };
    plot::lines(&chart, &by_r, LineStyle::Marked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_sweep_reports_every_run() {
        let cfg = PlacementBenchConfig {
            nodes: vec![5, 10],
            max_replicas: vec![1, 4],
            requests_per_node: 500,
            titles_per_node: 20,
            hot_share_of_node: 0.25,
            load_bound: Some(1.1),
            seed: 1,
        };
        let report = run(&cfg);
        assert_eq!(report.runs.len(), 4);
        let table = format_table(&report);
        assert_eq!(table.lines().count(), 2 + 4, "{table}");
        let svg = plot_balance(&report);
        assert!(svg.contains("max R = 4") && svg.contains("<svg"), "{svg}");
        for r in &report.runs {
            assert!(r.max_over_mean_requests >= 1.0, "{r:?}");
            assert_eq!(r.moved.len(), 3);
        }
    }
}
