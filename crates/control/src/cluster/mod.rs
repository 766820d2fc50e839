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
//! The node list, this node's name, `replicate_above_rps` and the probe settings are
//! reloaded on SIGHUP ([`ClusterState::reconfigure`]): the placement follows the new list
//! at once.

pub mod probe;
pub mod tls;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use isnode_edge::cluster::{Cluster, ClusterConfig, Decision};
use serde::Serialize;

use isnode_serve_config::ServeConfig;

/// Half-life of the title request rates that decide replication, milliseconds.
const RATE_HALF_LIFE_MS: u64 = 10_000;

/// The cluster state the API and the prober share.
pub struct ClusterState {
    /// `None`: no node list (a single node).
    core: Mutex<Option<Cluster>>,
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
    /// Its load as last reported (a share of its admission capacity; this node's as last
    /// measured).
    pub load: f64,
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
pub enum Asked {
    /// By the cluster's placement.
    Placed,
    /// Here, by a client failing over along the title's ranking (`Isnode-Serve-Here`):
    /// served here if this node is the next of the ranking after the title's serving
    /// nodes (or one of them), placed otherwise: a stranger cannot make every edge fill
    /// every title.
    FailingOver,
    /// Here, sent for load by another node (`isnode_spill=1`).
    Spilled,
}

/// Why a request is redirected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// To a node serving the title.
    Placement,
    /// Past the title's serving nodes, over the load bound, to the next under it.
    Load,
}

/// What to do with a request for a title.
pub enum Route {
    /// Serve it here; the title's live ranking as URLs (the owner first).
    Here(Vec<String>),
    /// Redirect it to this base URL.
    There(String, Why),
}

/// The core's settings in `config`.
fn core_config(config: &ServeConfig) -> ClusterConfig {
    ClusterConfig {
        replicate_above_rps: config.replicate_above_rps,
        failures_to_dead: config.probe_failures_to_dead,
        rate_half_life_ms: RATE_HALF_LIFE_MS,
        load_bound: config.load_bound,
    }
}

impl ClusterState {
    /// The cluster of `config` (inactive without a node list).
    pub fn of(config: &ServeConfig) -> Result<ClusterState, String> {
        let core = match config.nodes.is_empty() {
            true => None,
            false => Some(
                Cluster::new(
                    config.nodes.clone(),
                    config.node_name.as_deref().unwrap_or_default(),
                    core_config(config),
                )
                .map_err(|e| e.to_string())?,
            ),
        };
        Ok(ClusterState {
            core: Mutex::new(core),
            epoch: Instant::now(),
            next_pick: AtomicU64::new(0),
            redirects: AtomicU64::new(0),
            probes_failed: AtomicU64::new(0),
        })
    }

    /// Puts a reloaded configuration's node list and settings in force (SIGHUP): nodes kept
    /// keep their liveness, new ones start live, the title rates are kept; an empty list
    /// ends the cluster. A list the core refuses (the configuration was validated, so only
    /// in theory) keeps the running one, logged.
    pub fn reconfigure(&self, config: &ServeConfig) {
        let mut core = self.lock();
        let me = config.node_name.as_deref().unwrap_or_default();
        let next = match (config.nodes.is_empty(), core.as_ref()) {
            (true, _) => Ok(None),
            (false, Some(c)) => c
                .reconfigured(config.nodes.clone(), me, core_config(config))
                .map(Some),
            (false, None) => Cluster::new(config.nodes.clone(), me, core_config(config)).map(Some),
        };
        match next {
            Ok(next) => {
                let (was, now) = (
                    core.as_ref().map_or(0, |c| c.nodes().len()),
                    next.as_ref().map_or(0, |c| c.nodes().len()),
                );
                if core.as_ref().map(|c| (c.nodes(), c.config()))
                    != next.as_ref().map(|c| (c.nodes(), c.config()))
                {
                    tracing::info!(
                        nodes_before = was,
                        nodes = now,
                        "cluster node list reloaded: placement follows it now"
                    );
                }
                *core = next;
            }
            Err(e) => tracing::warn!("cluster node list not reloaded: {e}"),
        }
    }

    /// Whether there is a node list.
    pub fn active(&self) -> bool {
        self.lock().is_some()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Cluster>> {
        self.core.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Whether the placement uses loads (a node list and `load_bound` > 0): then the
    /// caller measures this node's load for [`ClusterState::route`].
    pub fn uses_load(&self) -> bool {
        self.lock()
            .as_ref()
            .is_some_and(|c| c.config().load_bound > 0.0)
    }

    /// Counts a request for `title` and decides where it is served (see [`Asked`]);
    /// `own_load`: this node's load now, if measured.
    pub fn route(&self, title: &str, asked: Asked, own_load: Option<f64>) -> Route {
        let now = self.now_ms();
        let pick = self.next_pick.fetch_add(1, Ordering::Relaxed);
        let mut guard = self.lock();
        let Some(core) = guard.as_mut() else {
            return Route::Here(Vec::new());
        };
        if let Some(l) = own_load {
            let me = core.me();
            core.record_load(me, l);
        }
        let rate = core.record_request(title, now);
        let replicas = core.replicas(rate);
        let decision = match asked {
            Asked::FailingOver if core.serving(title, replicas + 1).contains(&core.me()) => {
                Decision::Serve
            }
            Asked::Placed | Asked::FailingOver => core.decide(title, replicas, pick),
            Asked::Spilled => Decision::Serve,
        };
        let why = |i: usize| match core.serving(title, replicas).contains(&i) {
            true => Why::Placement,
            false => Why::Load,
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
                    Route::There(base(&n.url), why(i))
                }
                None => Route::Here(Vec::new()),
            },
        }
    }

    /// The peers to probe: (index, base URL).
    pub fn peers(&self) -> Vec<(usize, String)> {
        let guard = self.lock();
        let Some(core) = guard.as_ref() else {
            return Vec::new();
        };
        let me = core.me();
        core.nodes()
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != me)
            .map(|(i, n)| (i, base(&n.url)))
            .collect()
    }

    /// Records the outcome of a probe of node `i` at `url` (logging a change of liveness);
    /// a probe of a node the list no longer has there (reloaded meanwhile) is dropped.
    pub fn record_probe(
        &self,
        i: usize,
        url: &str,
        outcome: isnode_edge::cluster::Probe,
        load: Option<f64>,
    ) {
        if outcome == isnode_edge::cluster::Probe::Failed {
            self.probes_failed.fetch_add(1, Ordering::Relaxed);
        }
        let mut guard = self.lock();
        let Some(core) = guard.as_mut() else {
            return;
        };
        let name = match core.nodes().get(i) {
            Some(n) if base(&n.url) == url => n.name.clone(),
            _ => return,
        };
        let change = core.record_probe(i, outcome);
        if let Some(l) = load {
            core.record_load(i, l);
        }
        drop(guard);
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

    /// The status of every node (`None` without a node list).
    pub fn status(&self) -> Option<ClusterStatus> {
        let guard = self.lock();
        let core = guard.as_ref()?;
        let me = core.me();
        Some(ClusterStatus {
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
                    load: core.load(i),
                    this_node: i == me,
                })
                .collect(),
            redirects: self.redirects.load(Ordering::Relaxed),
            probes_failed: self.probes_failed.load(Ordering::Relaxed),
        })
    }

    /// The cluster's metric families in OpenMetrics text (inserted before `# EOF`).
    pub fn metrics_text(&self) -> String {
        let Some(s) = self.status() else {
            return String::new();
        };
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
pub fn with_cluster_metrics(metrics: String, cluster: &ClusterState) -> String {
    let extra = cluster.metrics_text();
    if extra.is_empty() {
        return metrics;
    }
    match metrics.rfind("# EOF") {
        Some(at) => {
            let (head, tail) = metrics.split_at(at);
            format!("{head}{extra}{tail}")
        }
        None => metrics + &extra,
    }
}

#[cfg(test)]
mod tests_support {
    use isnode_edge::placement::Node;
    use isnode_serve_config::ServeConfig;

    /// The configuration of node `me` of `n` on loopback ports 9000 + i.
    pub(super) fn config(n: usize, me: usize) -> ServeConfig {
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
}

#[cfg(test)]
mod tests {
    use super::tests_support::config;
    use super::*;

    #[test]
    fn no_node_list_is_no_cluster() {
        let c = ClusterState::of(&ServeConfig::default()).unwrap();
        assert!(!c.active() && c.status().is_none() && c.peers().is_empty());
        assert!(matches!(c.route("t.ts", Asked::Placed, None), Route::Here(r) if r.is_empty()));
    }

    #[test]
    fn a_title_is_served_by_its_owner_and_redirected_elsewhere() {
        let states: Vec<ClusterState> = (0..3)
            .map(|me| ClusterState::of(&config(3, me)).unwrap())
            .collect();
        let owner = isnode_edge::placement::owner(&config(3, 0).nodes, &[true; 3], "t.ts").unwrap();
        for (i, s) in states.iter().enumerate() {
            match s.route("t.ts", Asked::Placed, None) {
                Route::Here(ranking) => {
                    assert_eq!(i, owner);
                    assert_eq!(ranking.len(), 3);
                    assert_eq!(ranking[0], format!("http://127.0.0.1:{}", 9000 + owner));
                }
                Route::There(url, why) => {
                    assert_eq!(why, Why::Placement);
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
        let text = with_cluster_metrics("a 1\n# EOF\n".into(), &states[0]);
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert!(
            text.contains("isnode_cluster_node_live{node=\"e1\"} 1"),
            "{text}"
        );
    }
}

#[cfg(test)]
mod reload_tests {
    use super::tests_support::config;
    use super::*;

    /// A reloaded node list moves the titles at once: a title of a removed node is served
    /// by the next node of its ranking; an empty list ends the cluster.
    #[test]
    fn a_reloaded_list_places_at_once() {
        let three = config(3, 0);
        let state = ClusterState::of(&three).unwrap();
        let title = (0..100)
            .map(|t| format!("t{t}.ts"))
            .find(|t| isnode_edge::placement::owner(&three.nodes, &[true; 3], t) == Some(1))
            .unwrap();
        assert!(
            matches!(state.route(&title, Asked::Placed, None), Route::There(u, _) if u.ends_with(":9001"))
        );
        let mut two = three.clone();
        two.nodes.remove(1);
        state.reconfigure(&two);
        match state.route(&title, Asked::Placed, None) {
            Route::Here(r) => assert_eq!(r.len(), 2),
            Route::There(u, _) => assert!(u.ends_with(":9002"), "{u}"),
        }
        assert_eq!(state.status().unwrap().nodes.len(), 2);
        // A probe answer for the removed node's old index is dropped.
        state.record_probe(
            1,
            "http://127.0.0.1:9001",
            isnode_edge::cluster::Probe::Failed,
            None,
        );
        assert_eq!(state.status().unwrap().nodes[1].failed_probes, 0);
        state.reconfigure(&ServeConfig::default());
        assert!(!state.active());
        state.reconfigure(&three);
        assert!(state.active());
    }
}

#[cfg(test)]
mod load_tests {
    use super::tests_support::config;
    use super::*;

    /// An owner over the load bound sends new requests to the next node of the ranking,
    /// marked as sent for load; below half its capacity it keeps them.
    #[test]
    fn an_overloaded_owner_spills_to_the_next_node() {
        let c = config(3, 0);
        let title = (0..100)
            .map(|t| format!("t{t}.ts"))
            .find(|t| isnode_edge::placement::ranking(&c.nodes, t).first() == Some(&0))
            .unwrap();
        let next = isnode_edge::placement::ranking(&c.nodes, &title)[1];
        let state = ClusterState::of(&c).unwrap();
        assert!(state.uses_load());
        assert!(matches!(
            state.route(&title, Asked::Placed, Some(0.4)),
            Route::Here(_)
        ));
        match state.route(&title, Asked::Placed, Some(0.95)) {
            Route::There(u, Why::Load) => assert!(u.ends_with(&format!(":{}", 9000 + next)), "{u}"),
            _ => panic!("an overloaded owner serves"),
        }
        assert!(matches!(
            state.route(&title, Asked::Spilled, Some(0.95)),
            Route::Here(_)
        ));
        assert_eq!(state.status().unwrap().nodes[0].load, 0.95);
        let off = ClusterState::of(&ServeConfig {
            load_bound: 0.0,
            ..config(3, 0)
        })
        .unwrap();
        assert!(!off.uses_load());
    }

    /// A client failing over is served by the next node of the title's ranking; a node
    /// further down (a stranger's `Isnode-Serve-Here` to any edge) places it as usual.
    #[test]
    fn only_the_next_node_of_the_ranking_takes_a_failover() {
        let nodes = config(4, 0).nodes;
        let title = "some-title.ts";
        let ranking = isnode_edge::placement::ranking(&nodes, title);
        let at = |place: usize| ClusterState::of(&config(4, ranking[place])).unwrap();
        assert!(matches!(
            at(1).route(title, Asked::FailingOver, None),
            Route::Here(_)
        ));
        for far in [2, 3] {
            match at(far).route(title, Asked::FailingOver, None) {
                Route::There(u, Why::Placement) => {
                    assert!(u.ends_with(&format!(":{}", 9000 + ranking[0])), "{u}")
                }
                _ => panic!("node {far} of the ranking took a failover"),
            }
            assert!(matches!(
                at(far).route(title, Asked::Spilled, None),
                Route::Here(_)
            ));
        }
    }
}
