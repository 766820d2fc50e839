//! This edge in a cluster of edges (docs/scale-out.md): the thin shell around the sans-IO
//! [`isnode_edge::cluster::Cluster`].
//!
//! - [`redirect`]: the API middleware that answers `307 Temporary Redirect` to the node that
//!   serves a title (session creation, HTTP content, the HLS playlist), and adds the title's
//!   live ranking (`Isnode-Ranking`) to what this node serves itself.
//! - [`probe`]: the task that probes every peer's `GET /v1/health` and feeds the outcomes to
//!   the core.
//!
//! Without a node list (`nodes = []`) there is no cluster: every request is served here.

pub(crate) mod probe;
pub(crate) mod redirect;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use isnode_edge::cluster::{Cluster, ClusterConfig, Decision};
use serde::Serialize;

use crate::config::ServeConfig;

/// Half-life of the title request rates that decide replication, milliseconds.
const RATE_HALF_LIFE_MS: u64 = 10_000;

/// The cluster state the API and the prober share.
pub(crate) struct ClusterState {
    core: Mutex<Cluster>,
    epoch: Instant,
    /// Round robin over the nodes of a hot title.
    next_pick: AtomicU64,
    /// Requests redirected to another node.
    pub redirects: AtomicU64,
    /// Probes that failed.
    pub probes_failed: AtomicU64,
}

/// One node of the cluster as `GET /v1/cluster` shows it.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct NodeStatus {
    /// Its name.
    pub name: String,
    /// Its control URL.
    pub url: String,
    /// Its weight.
    pub weight: f64,
    /// Whether this node sees it live.
    pub live: bool,
    /// Probes failed in a row.
    pub failed_probes: u32,
    /// Whether it is this node.
    pub this_node: bool,
}

/// `GET /v1/cluster`.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ClusterStatus {
    /// This node's name.
    pub node_name: String,
    /// Every node of the list.
    pub nodes: Vec<NodeStatus>,
    /// Requests redirected to another node since start.
    pub redirects: u64,
    /// Probes of peers that failed since start.
    pub probes_failed: u64,
}

/// How a request asks to be placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Asked {
    /// By the cluster's placement.
    Placed,
    /// Here (`Isnode-Serve-Here`).
    ServeHere,
}

/// What to do with a request for a title.
pub(crate) enum Route {
    /// Serve it here; the title's live ranking as URLs (the owner first).
    Here(Vec<String>),
    /// Redirect it to this base URL.
    There(String),
}

impl ClusterState {
    /// The cluster of `config`, or `None` without a node list.
    pub(crate) fn of(config: &ServeConfig) -> Result<Option<ClusterState>, String> {
        if config.nodes.is_empty() {
            return Ok(None);
        }
        let me = config.node_name.as_deref().unwrap_or_default();
        let core = Cluster::new(
            config.nodes.clone(),
            me,
            ClusterConfig {
                replicate_above_rps: config.replicate_above_rps,
                failures_to_dead: config.probe_failures_to_dead,
                rate_half_life_ms: RATE_HALF_LIFE_MS,
            },
        )
        .map_err(|e| e.to_string())?;
        Ok(Some(ClusterState {
            core: Mutex::new(core),
            epoch: Instant::now(),
            next_pick: AtomicU64::new(0),
            redirects: AtomicU64::new(0),
            probes_failed: AtomicU64::new(0),
        }))
    }

    fn core(&self) -> std::sync::MutexGuard<'_, Cluster> {
        self.core.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Counts a request for `title` and decides where it is served (`Asked::ServeHere`: here,
    /// a client failing over along the ranking).
    pub(crate) fn route(&self, title: &str, asked: Asked) -> Route {
        let now = self.now_ms();
        let pick = self.next_pick.fetch_add(1, Ordering::Relaxed);
        let mut core = self.core();
        let rate = core.record_request(title, now);
        let replicas = core.replicas(rate);
        let decision = match asked {
            Asked::Placed => core.decide(title, replicas, pick),
            Asked::ServeHere => Decision::Serve,
        };
        match decision {
            Decision::Serve => Route::Here(
                core.live_ranking(title)
                    .into_iter()
                    .filter_map(|i| core.nodes().get(i).map(|n| base(&n.url)))
                    .collect(),
            ),
            Decision::Redirect(i) => match core.nodes().get(i) {
                Some(n) => {
                    self.redirects.fetch_add(1, Ordering::Relaxed);
                    Route::There(base(&n.url))
                }
                None => Route::Here(Vec::new()),
            },
        }
    }

    /// The peers to probe: (index, base URL).
    pub(crate) fn peers(&self) -> Vec<(usize, String)> {
        let core = self.core();
        let me = core.me();
        core.nodes()
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != me)
            .map(|(i, n)| (i, base(&n.url)))
            .collect()
    }

    /// Records a probe's outcome (logging a change of liveness).
    pub(crate) fn record_probe(&self, i: usize, outcome: isnode_edge::cluster::Probe) {
        if outcome == isnode_edge::cluster::Probe::Failed {
            self.probes_failed.fetch_add(1, Ordering::Relaxed);
        }
        let mut core = self.core();
        let change = core.record_probe(i, outcome);
        let name = core
            .nodes()
            .get(i)
            .map(|n| n.name.clone())
            .unwrap_or_default();
        drop(core);
        match change {
            Some(isnode_edge::cluster::Change::Died) => {
                tracing::warn!(node = %name, "cluster node is dead: its titles go to the next live node of each ranking")
            }
            Some(isnode_edge::cluster::Change::Returned) => {
                tracing::info!(node = %name, "cluster node is live again: it takes its titles back")
            }
            None => {}
        }
    }

    /// The status of every node.
    pub(crate) fn status(&self) -> ClusterStatus {
        let core = self.core();
        let me = core.me();
        ClusterStatus {
            node_name: core
                .nodes()
                .get(me)
                .map(|n| n.name.clone())
                .unwrap_or_default(),
            nodes: core
                .nodes()
                .iter()
                .enumerate()
                .map(|(i, n)| NodeStatus {
                    name: n.name.clone(),
                    url: n.url.clone(),
                    weight: n.weight,
                    live: core.live().get(i).copied().unwrap_or(false),
                    failed_probes: core.failures(i),
                    this_node: i == me,
                })
                .collect(),
            redirects: self.redirects.load(Ordering::Relaxed),
            probes_failed: self.probes_failed.load(Ordering::Relaxed),
        }
    }

    /// The cluster's metric families in OpenMetrics text (inserted before `# EOF`).
    pub(crate) fn metrics_text(&self) -> String {
        let s = self.status();
        let mut t = String::new();
        t.push_str("# HELP isnode_cluster_node_live Whether this node sees a cluster node live (1) or dead (0).\n");
        t.push_str("# TYPE isnode_cluster_node_live gauge\n");
        for n in &s.nodes {
            t.push_str(&format!(
                "isnode_cluster_node_live{{node=\"{}\"}} {}\n",
                label(&n.name),
                u8::from(n.live)
            ));
        }
        t.push_str("# HELP isnode_cluster_redirects Requests redirected (307) to another node.\n");
        t.push_str("# TYPE isnode_cluster_redirects counter\n");
        t.push_str(&format!("isnode_cluster_redirects_total {}\n", s.redirects));
        t.push_str("# HELP isnode_cluster_probes_failed Health probes of peers that failed.\n");
        t.push_str("# TYPE isnode_cluster_probes_failed counter\n");
        t.push_str(&format!(
            "isnode_cluster_probes_failed_total {}\n",
            s.probes_failed
        ));
        t
    }
}

/// A node URL without its trailing slashes.
fn base(url: &str) -> String {
    url.trim_end_matches('/').to_string()
}

/// A label value escaped for the text format.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// `metrics` (OpenMetrics text ending in `# EOF`) with the cluster's families added.
pub(crate) fn with_cluster_metrics(metrics: String, cluster: Option<&ClusterState>) -> String {
    let Some(c) = cluster else {
        return metrics;
    };
    let extra = c.metrics_text();
    match metrics.rfind("# EOF") {
        Some(at) => {
            let (head, tail) = metrics.split_at(at);
            format!("{head}{extra}{tail}")
        }
        None => metrics + &extra,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use isnode_edge::placement::Node;

    fn config(n: usize, me: usize) -> ServeConfig {
        ServeConfig {
            node_name: Some(format!("e{me}")),
            nodes: (0..n)
                .map(|i| Node {
                    name: format!("e{i}"),
                    url: format!("http://127.0.0.1:{}/", 9000 + i),
                    weight: 1.0,
                })
                .collect(),
            ..ServeConfig::default()
        }
    }

    #[test]
    fn no_node_list_is_no_cluster() {
        assert!(ClusterState::of(&ServeConfig::default()).unwrap().is_none());
    }

    #[test]
    fn a_title_is_served_by_its_owner_and_redirected_elsewhere() {
        let states: Vec<ClusterState> = (0..3)
            .map(|me| ClusterState::of(&config(3, me)).unwrap().unwrap())
            .collect();
        let owner = isnode_edge::placement::owner(&config(3, 0).nodes, &[true; 3], "t.ts").unwrap();
        for (i, s) in states.iter().enumerate() {
            match s.route("t.ts", Asked::Placed) {
                Route::Here(ranking) => {
                    assert_eq!(i, owner);
                    assert_eq!(ranking.len(), 3);
                    assert_eq!(ranking[0], format!("http://127.0.0.1:{}", 9000 + owner));
                }
                Route::There(url) => {
                    assert_ne!(i, owner);
                    assert_eq!(url, format!("http://127.0.0.1:{}", 9000 + owner));
                }
            }
        }
        let redirected: u64 = states
            .iter()
            .map(|s| s.redirects.load(Ordering::Relaxed))
            .sum();
        assert_eq!(redirected, 2);
        let text = with_cluster_metrics("a 1\n# EOF\n".into(), Some(&states[0]));
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert!(
            text.contains("isnode_cluster_node_live{node=\"e1\"} 1"),
            "{text}"
        );
    }
}
