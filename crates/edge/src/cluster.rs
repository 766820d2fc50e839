//! One edge's view of its cluster, sans-IO: which peers are live (from the outcomes of health
//! probes the shell runs), how busy each title is (a decayed request rate), and the decision
//! for a request: serve it here or redirect it to another node.
//!
//! The rule (docs/scale-out.md, docs/protocol.md "Redirects between edges"): a title is served
//! by the first `R` live nodes of its ranking ([`crate::placement::top_live`]), `R` = 1 unless
//! the title's request rate passes `replicate_above_rps` ([`Cluster::replicas`]). A node among
//! those `R` serves the request itself; any other node redirects it to one of them, picked by
//! the caller's `pick` value (round robin, or a hash of the client). This node is always live
//! in its own view; a peer is dead after `failures_to_dead` probes in a row failed and live
//! again at its first probe that succeeds.
//!
//! Load (docs/scale-out.md, "Load"): each node's health answer carries its load, the share
//! of its admission capacity in use; with `load_bound` > 0 a request whose chosen node is
//! above the bound ([`Cluster::load_limit`]: `load_bound` times the live nodes' mean load,
//! and at least [`LOAD_FLOOR`]) walks on down the title's live ranking to the first node
//! under it, the least loaded when none is: the simulation's bounded-load rule
//! ([`crate::placement::route_bounded`]) with a floor, so that a lightly loaded cluster keeps
//! every title on its owner (one fill per title) however uneven the loads.

use std::collections::HashMap;

use crate::placement::{top_live, Node, Replication};

/// Why a node list cannot be used.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ClusterError {
    /// This node's name is not in the list.
    #[error("node_name {0:?} is not one of the names in `nodes`")]
    NotListed(String),
    /// Two nodes share a name.
    #[error("node name {0:?} is listed twice in `nodes`")]
    Duplicate(String),
    /// A weight is not a finite positive number.
    #[error("node {0:?} has weight {1}: a weight must be finite and above 0")]
    BadWeight(String, f64),
}

/// The outcome of one health probe of a peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// The peer answered its health route in time with a success.
    Answered,
    /// No answer within the deadline, a connection error, or an error status.
    Failed,
}

/// A change of a peer's liveness, for the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// The peer was live and is now dead (its titles move to the next node of each ranking).
    Died,
    /// The peer was dead and is live again (it takes its titles back).
    Returned,
}

/// What to do with a request for a title.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// This node serves it.
    Serve,
    /// Redirect it to node `index` of the node list.
    Redirect(usize),
}

/// The settings of [`Cluster`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClusterConfig {
    /// A title requested more often than this (requests per second, as this node sees them)
    /// is served by more than one node: `ceil(rate / replicate_above_rps)` of them, at most
    /// every live node. 0: never.
    pub replicate_above_rps: f64,
    /// Consecutive failed probes that mark a peer dead (at least 1).
    pub failures_to_dead: u32,
    /// Half-life of the decayed title request rates, milliseconds.
    pub rate_half_life_ms: u64,
    /// Most load a node takes new requests at, as a multiple of the live nodes' mean load
    /// (and never below [`LOAD_FLOOR`]); 0: loads are not used.
    pub load_bound: f64,
}

/// The load under which a node always takes the requests it is chosen for, whatever the
/// mean (a share of its admission capacity): below it, staying on the title's owner (one
/// fill, a warm cache) is worth more than an even spread.
pub const LOAD_FLOOR: f64 = 0.5;

/// Most titles whose request rate is tracked (the quietest are forgotten beyond).
pub const MAX_TRACKED_TITLES: usize = 4096;

/// One edge's view of its cluster.
#[derive(Clone, Debug)]
pub struct Cluster {
    nodes: Vec<Node>,
    me: usize,
    live: Vec<bool>,
    failures: Vec<u32>,
    config: ClusterConfig,
    /// Each node's load as last reported (this node's as last measured): a share of its
    /// admission capacity.
    loads: Vec<f64>,
    /// Per title: (decayed request count, at ms).
    rates: HashMap<String, (f64, u64)>,
}

impl Cluster {
    /// The view of node `me_name` of `nodes`; every node starts live (a peer down at start is
    /// found by its first probes).
    pub fn new(
        nodes: Vec<Node>,
        me_name: &str,
        config: ClusterConfig,
    ) -> Result<Self, ClusterError> {
        check_nodes(&nodes)?;
        let me = nodes
            .iter()
            .position(|n| n.name == me_name)
            .ok_or_else(|| ClusterError::NotListed(me_name.to_string()))?;
        let n = nodes.len();
        Ok(Cluster {
            nodes,
            me,
            live: vec![true; n],
            failures: vec![0; n],
            config,
            loads: vec![0.0; n],
            rates: HashMap::new(),
        })
    }

    /// The view after a configuration reload (SIGHUP): the new node list, name and
    /// settings; a node kept in the list (same name and URL) keeps its liveness and failed
    /// probes, a new one starts live (as at start), and the titles' request rates are kept.
    /// The placement follows the new list at once. A list that cannot be used leaves this
    /// view as it is (the error says why).
    pub fn reconfigured(
        &self,
        nodes: Vec<Node>,
        me_name: &str,
        config: ClusterConfig,
    ) -> Result<Cluster, ClusterError> {
        let mut next = Cluster::new(nodes, me_name, config)?;
        for (i, n) in next.nodes.iter().enumerate() {
            let before = self
                .nodes
                .iter()
                .position(|o| o.name == n.name && o.url == n.url);
            if let Some(j) = before.filter(|_| i != next.me) {
                next.live[i] = self.live.get(j).copied().unwrap_or(true);
                next.failures[i] = self.failures.get(j).copied().unwrap_or(0);
            }
            if let Some(j) = before {
                next.loads[i] = self.loads.get(j).copied().unwrap_or(0.0);
            }
        }
        next.rates = self.rates.clone();
        Ok(next)
    }

    /// The settings in force.
    pub fn config(&self) -> ClusterConfig {
        self.config
    }

    /// The node list.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// This node's index in the list.
    pub fn me(&self) -> usize {
        self.me
    }

    /// Each node's liveness in this node's view (this node always live).
    pub fn live(&self) -> &[bool] {
        &self.live
    }

    /// Failed probes in a row of node `i` (0 for this node).
    pub fn failures(&self, i: usize) -> u32 {
        self.failures.get(i).copied().unwrap_or(0)
    }

    /// Records a probe of node `i`; the change of its liveness, if any. Probes of this node
    /// or of an index outside the list change nothing.
    pub fn record_probe(&mut self, i: usize, outcome: Probe) -> Option<Change> {
        if i == self.me || i >= self.nodes.len() {
            return None;
        }
        let was = self.live[i];
        match outcome {
            Probe::Answered => {
                self.failures[i] = 0;
                self.live[i] = true;
            }
            Probe::Failed => {
                self.failures[i] = self.failures[i].saturating_add(1);
                if self.failures[i] >= self.config.failures_to_dead.max(1) {
                    self.live[i] = false;
                }
            }
        }
        match (was, self.live[i]) {
            (true, false) => Some(Change::Died),
            (false, true) => Some(Change::Returned),
            _ => None,
        }
    }

    /// Records node `i`'s load (its health answer's; this node's own as measured): a share
    /// of its admission capacity, 1 = full. Not a finite number ≥ 0: 0.
    pub fn record_load(&mut self, i: usize, load: f64) {
        if let Some(l) = self.loads.get_mut(i) {
            *l = if load.is_finite() && load >= 0.0 {
                load
            } else {
                0.0
            };
        }
    }

    /// Node `i`'s load as last recorded (0 when unknown).
    pub fn load(&self, i: usize) -> f64 {
        self.loads.get(i).copied().unwrap_or(0.0)
    }

    /// The load above which a node takes no new request (`f64::INFINITY` with
    /// `load_bound` 0): `load_bound` times the live nodes' mean load, at least
    /// [`LOAD_FLOOR`].
    pub fn load_limit(&self) -> f64 {
        if self.config.load_bound <= 0.0 || !self.config.load_bound.is_finite() {
            return f64::INFINITY;
        }
        let live: Vec<f64> = (0..self.nodes.len())
            .filter(|&i| self.live.get(i).copied().unwrap_or(false))
            .map(|i| self.load(i))
            .collect();
        let mean = live.iter().sum::<f64>() / live.len().max(1) as f64;
        (self.config.load_bound * mean).max(LOAD_FLOOR)
    }

    /// Where a request for `title` whose chosen node is `chosen` goes under the load bound:
    /// `chosen` if its load is within [`Cluster::load_limit`], else the first node of the
    /// title's live ranking within it, else the least loaded of the ranking.
    pub fn bounded(&self, title: &str, chosen: usize) -> usize {
        let limit = self.load_limit();
        if self.load(chosen) <= limit {
            return chosen;
        }
        let ranking = self.live_ranking(title);
        ranking
            .iter()
            .copied()
            .find(|&i| self.load(i) <= limit)
            .or_else(|| {
                ranking
                    .iter()
                    .copied()
                    .min_by(|&a, &b| self.load(a).total_cmp(&self.load(b)))
            })
            .unwrap_or(chosen)
    }

    /// Counts one request for `title` at `now_ms`; its decayed rate, requests per second.
    pub fn record_request(&mut self, title: &str, now_ms: u64) -> f64 {
        let half = self.config.rate_half_life_ms.max(1) as f64;
        if !self.rates.contains_key(title) && self.rates.len() >= MAX_TRACKED_TITLES {
            self.forget_quiet(now_ms);
            if self.rates.len() >= MAX_TRACKED_TITLES {
                // Full of titles asked for lately (a flood of names, say): the quietest
                // gives way, so a title asked for often always gets its place and its
                // rate, and names asked for once only push each other out.
                self.forget_quietest(now_ms);
            }
        }
        let e = self.rates.entry(title.to_string()).or_insert((0.0, now_ms));
        e.0 = decay(e.0, now_ms.saturating_sub(e.1), half) + 1.0;
        e.1 = e.1.max(now_ms);
        rate_per_s(e.0, half)
    }

    /// `title`'s decayed request rate at `now_ms`, requests per second.
    pub fn rate(&self, title: &str, now_ms: u64) -> f64 {
        let half = self.config.rate_half_life_ms.max(1) as f64;
        self.rates.get(title).map_or(0.0, |&(c, at)| {
            rate_per_s(decay(c, now_ms.saturating_sub(at), half), half)
        })
    }

    fn forget_quietest(&mut self, now_ms: u64) {
        let half = self.config.rate_half_life_ms.max(1) as f64;
        let quietest = self
            .rates
            .iter()
            .map(|(t, &(c, at))| (decay(c, now_ms.saturating_sub(at), half), t))
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(_, t)| t.clone());
        if let Some(t) = quietest {
            self.rates.remove(&t);
        }
    }

    fn forget_quiet(&mut self, now_ms: u64) {
        let half = self.config.rate_half_life_ms.max(1) as f64;
        self.rates
            .retain(|_, &mut (c, at)| decay(c, now_ms.saturating_sub(at), half) >= 0.5);
    }

    /// How many nodes serve a title requested at `rate_rps` (1 when not hot), through
    /// [`Replication`]: a title is hot above `replicate_above_rps`.
    pub fn replicas(&self, rate_rps: f64) -> usize {
        let live = self.live.iter().filter(|&&l| l).count();
        if self.config.replicate_above_rps <= 0.0 || live == 0 {
            return 1;
        }
        // Replication counts shares of a node's fair share; with hot_share_of_node = 1 the
        // title needs ceil(rate / threshold) nodes.
        let share = rate_rps / (self.config.replicate_above_rps * live as f64);
        Replication {
            hot_share_of_node: 1.0,
            max_replicas: live,
        }
        .replicas(share, live)
    }

    /// The live nodes serving `title` when it needs `replicas` of them: its ranking's first
    /// live nodes, the owner first.
    pub fn serving(&self, title: &str, replicas: usize) -> Vec<usize> {
        top_live(&self.nodes, &self.live, title, replicas.max(1))
    }

    /// The live ranking of `title` (every live node, the owner first): where a client goes
    /// next if its node dies.
    pub fn live_ranking(&self, title: &str) -> Vec<usize> {
        top_live(&self.nodes, &self.live, title, self.nodes.len())
    }

    /// Serve here or redirect: this node is chosen for `title` when it is among the title's
    /// first `replicas` live nodes; else one of those is, `pick` choosing which. The chosen
    /// node serves it unless its load is over the bound ([`Cluster::bounded`]).
    pub fn decide(&self, title: &str, replicas: usize, pick: u64) -> Decision {
        let serving = self.serving(title, replicas);
        if serving.is_empty() {
            return Decision::Serve;
        }
        let chosen = match serving.contains(&self.me) {
            true => self.me,
            false => {
                let at = (pick % serving.len() as u64) as usize;
                match serving.get(at) {
                    Some(&i) => i,
                    None => return Decision::Serve,
                }
            }
        };
        match self.bounded(title, chosen) {
            i if i == self.me => Decision::Serve,
            i => Decision::Redirect(i),
        }
    }
}

/// Names unique, weights finite and positive.
pub fn check_nodes(nodes: &[Node]) -> Result<(), ClusterError> {
    let mut seen = std::collections::HashSet::new();
    for n in nodes {
        if !seen.insert(n.name.as_str()) {
            return Err(ClusterError::Duplicate(n.name.clone()));
        }
        if !(n.weight.is_finite() && n.weight > 0.0) {
            return Err(ClusterError::BadWeight(n.name.clone(), n.weight));
        }
    }
    Ok(())
}

/// A count decayed over `dt_ms` with half-life `half_ms`.
fn decay(count: f64, dt_ms: u64, half_ms: f64) -> f64 {
    count * (-(dt_ms as f64) / half_ms * std::f64::consts::LN_2).exp()
}

/// The steady rate a decayed count stands for: a rate r keeps the count at r·half/ln 2.
fn rate_per_s(count: f64, half_ms: f64) -> f64 {
    count * std::f64::consts::LN_2 / (half_ms / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::{ranking, top_live};
    use proptest::prelude::*;

    fn nodes(n: usize) -> Vec<Node> {
        (0..n)
            .map(|i| Node {
                name: format!("edge-{i}"),
                url: format!("http://127.0.0.1:{}", 9000 + i),
                weight: 1.0,
            })
            .collect()
    }

    fn config() -> ClusterConfig {
        ClusterConfig {
            replicate_above_rps: 10.0,
            failures_to_dead: 2,
            rate_half_life_ms: 1000,
            load_bound: 0.0,
        }
    }

    fn bounded_config() -> ClusterConfig {
        ClusterConfig {
            load_bound: 1.25,
            ..config()
        }
    }

    #[test]
    fn a_peer_dies_after_failures_in_a_row_and_returns_at_one_answer() {
        let mut c = Cluster::new(nodes(3), "edge-0", config()).unwrap();
        assert_eq!(c.record_probe(1, Probe::Failed), None);
        assert_eq!(c.record_probe(1, Probe::Answered), None, "not in a row");
        assert_eq!(c.record_probe(1, Probe::Failed), None);
        assert_eq!(c.record_probe(1, Probe::Failed), Some(Change::Died));
        assert_eq!(c.live(), &[true, false, true]);
        assert_eq!(c.record_probe(1, Probe::Answered), Some(Change::Returned));
        assert_eq!(
            c.record_probe(0, Probe::Failed),
            None,
            "this node is never probed"
        );
        assert_eq!(c.record_probe(7, Probe::Failed), None);
    }

    #[test]
    fn bad_lists_are_refused() {
        let mut n = nodes(2);
        assert_eq!(
            Cluster::new(n.clone(), "x", config()).unwrap_err(),
            ClusterError::NotListed("x".into())
        );
        n[1].name = "edge-0".into();
        assert!(matches!(check_nodes(&n), Err(ClusterError::Duplicate(_))));
        let mut n = nodes(2);
        n[0].weight = 0.0;
        assert!(matches!(check_nodes(&n), Err(ClusterError::BadWeight(..))));
    }

    #[test]
    fn a_hot_title_is_spread_and_a_cold_one_is_not() {
        let mut c = Cluster::new(nodes(4), "edge-0", config()).unwrap();
        // 100 requests within 100 ms: far above 10 per second.
        let mut rate = 0.0;
        for t in 0..100 {
            rate = c.record_request("hot", t);
        }
        assert!(rate > 40.0, "{rate}");
        assert_eq!(c.replicas(rate), 4);
        assert_eq!(c.replicas(c.rate("cold", 100)), 1);
        // The rate decays: ten half-lives later it is about a thousandth.
        assert!(c.rate("hot", 10_100) < rate / 500.0);
    }

    #[test]
    fn the_rate_tracker_stays_bounded() {
        let mut c = Cluster::new(nodes(2), "edge-0", config()).unwrap();
        for t in 0..(MAX_TRACKED_TITLES + 10) {
            c.record_request(&format!("t{t}"), 0);
        }
        assert!(c.rates.len() <= MAX_TRACKED_TITLES);
        // Much later the quiet ones are forgotten for new ones.
        assert!(c.record_request("new", 60_000) > 0.0);
    }

    #[test]
    fn a_reload_keeps_the_liveness_of_kept_nodes_and_places_by_the_new_list() {
        let mut c = Cluster::new(nodes(3), "edge-0", config()).unwrap();
        c.record_probe(1, Probe::Failed);
        c.record_probe(1, Probe::Failed);
        c.record_probe(2, Probe::Failed);
        c.record_request("t", 0);
        let mut list = nodes(4);
        list.swap(1, 3); // edge-3 inserted before; edge-1 moved to the end
        list[2].url = "http://127.0.0.1:9999".into(); // edge-2 moved: a new node
        let r = c.reconfigured(list.clone(), "edge-0", config()).unwrap();
        assert_eq!(r.live(), &[true, true, true, false]);
        assert_eq!(r.failures(2), 0, "a node at a new URL starts afresh");
        assert!(r.rate("t", 0) > 0.0, "the rates are kept");
        for t in 0..50 {
            let title = format!("t{t}");
            assert_eq!(r.live_ranking(&title), top_live(&list, r.live(), &title, 4));
        }
        assert_eq!(
            c.reconfigured(list, "nobody", config()).unwrap_err(),
            ClusterError::NotListed("nobody".into())
        );
        // This node renamed: a new list with another name for it.
        let r = c.reconfigured(nodes(2), "edge-1", config()).unwrap();
        assert_eq!(r.me(), 1);
        assert_eq!(r.live(), &[true, true], "this node is always live");
    }

    #[test]
    fn an_overloaded_owner_sends_new_requests_down_the_ranking() {
        let list = nodes(3);
        let title = "film.ts";
        let rank = ranking(&list, title);
        let (owner, second) = (rank[0], rank[1]);
        let mut c = Cluster::new(list.clone(), &list[owner].name, bounded_config()).unwrap();
        assert_eq!(c.decide(title, 1, 0), Decision::Serve);
        // Loads below the floor change nothing, however uneven.
        c.record_load(owner, 0.45);
        assert_eq!(c.decide(title, 1, 0), Decision::Serve);
        c.record_load(owner, 0.9);
        assert_eq!(c.decide(title, 1, 0), Decision::Redirect(second));
        // The next node is full too: the third.
        c.record_load(second, 0.95);
        assert_eq!(c.decide(title, 1, 0), Decision::Redirect(rank[2]));
        // Everyone loaded: the mean rises with them and the owner is within the bound.
        c.record_load(rank[2], 0.99);
        assert_eq!(c.decide(title, 1, 0), Decision::Serve);
        // Off: the owner serves whatever its load.
        let mut off = Cluster::new(list.clone(), &list[owner].name, config()).unwrap();
        off.record_load(owner, 5.0);
        assert_eq!(off.decide(title, 1, 0), Decision::Serve);
        // The second node, seeing the owner full, serves what it is sent.
        let mut there = Cluster::new(list.clone(), &list[second].name, bounded_config()).unwrap();
        there.record_load(owner, 0.9);
        assert_eq!(there.decide(title, 1, 0), Decision::Serve);
        there.record_load(7, f64::NAN);
        there.record_load(owner, f64::NAN);
        assert_eq!(there.load(owner), 0.0);
    }

    proptest! {
        /// Under the load bound a request goes to a live node; to one within the limit when
        /// any live node is; to its unbounded choice when that one is within the limit.
        #[test]
        fn bounded_decisions_go_to_live_nodes_within_the_limit(n in 1usize..10, me in 0usize..10, mask in any::<u16>(), loads in proptest::collection::vec(0.0f64..2.0, 10), r in 1usize..4, pick in any::<u64>(), t in 0u32..1000) {
            let me = me % n;
            let list = nodes(n);
            let title = format!("title-{t}");
            let mut c = Cluster::new(list.clone(), &list[me].name, bounded_config()).unwrap();
            let mut unbounded = Cluster::new(list.clone(), &list[me].name, config()).unwrap();
            for (i, &load) in loads.iter().enumerate().take(n) {
                c.record_load(i, load);
                if mask >> i & 1 == 1 {
                    for v in [&mut c, &mut unbounded] {
                        v.record_probe(i, Probe::Failed);
                        v.record_probe(i, Probe::Failed);
                    }
                }
            }
            let to = match c.decide(&title, r, pick) {
                Decision::Serve => me,
                Decision::Redirect(i) => i,
            };
            prop_assert!(c.live()[to]);
            let limit = c.load_limit();
            prop_assert!(limit >= LOAD_FLOOR);
            let any_under = (0..n).any(|i| c.live()[i] && c.load(i) <= limit);
            if any_under {
                prop_assert!(c.load(to) <= limit);
            }
            let free = match unbounded.decide(&title, r, pick) {
                Decision::Serve => me,
                Decision::Redirect(i) => i,
            };
            if c.load(free) <= limit {
                prop_assert_eq!(to, free);
            }
        }

        /// A reload with the same list changes no decision; one that drops a node moves
        /// only that node's titles (as its death would).
        #[test]
        fn a_reload_moves_only_the_titles_of_removed_nodes(n in 2usize..10, gone in 0usize..10, titles in 1usize..100) {
            let list = nodes(n);
            let gone = gone % n;
            let me = (gone + 1) % n;
            let c = Cluster::new(list.clone(), &list[me].name, config()).unwrap();
            let owners = |c: &Cluster| -> Vec<String> {
                (0..titles).map(|t| c.nodes()[c.serving(&format!("t{t}"), 1)[0]].name.clone()).collect()
            };
            let same = c.reconfigured(list.clone(), &list[me].name, config()).unwrap();
            prop_assert_eq!(owners(&same), owners(&c));
            let mut fewer = list.clone();
            fewer.remove(gone);
            let r = c.reconfigured(fewer, &list[me].name, config()).unwrap();
            let (before, after) = (owners(&c), owners(&r));
            for t in 0..titles {
                if before[t] != list[gone].name {
                    prop_assert_eq!(&after[t], &before[t]);
                }
            }
        }

        /// Whatever the liveness, a redirect goes to a live node other than this one, among
        /// the title's first `r` live nodes; and the node the redirect names serves it.
        #[test]
        fn redirects_go_only_to_live_serving_nodes(n in 1usize..12, me in 0usize..12, mask in any::<u16>(), r in 1usize..5, pick in any::<u64>(), t in 0u32..1000) {
            let me = me % n;
            let title = format!("title-{t}");
            let list = nodes(n);
            let mut views = Vec::new();
            for v in 0..n {
                let mut c = Cluster::new(list.clone(), &list[v].name, config()).unwrap();
                for i in 0..n {
                    if mask >> i & 1 == 1 {
                        c.record_probe(i, Probe::Failed);
                        c.record_probe(i, Probe::Failed);
                    }
                }
                views.push(c);
            }
            let c = &views[me];
            match c.decide(&title, r, pick) {
                Decision::Serve => prop_assert!(c.serving(&title, r).contains(&me)),
                Decision::Redirect(to) => {
                    prop_assert!(to != me);
                    prop_assert!(c.live()[to]);
                    prop_assert!(c.serving(&title, r).contains(&to));
                    // The same liveness seen there (the node is live, so it sees itself so too
                    // and the rest as here, up to itself): it serves.
                    let mut there = views[to].clone();
                    for i in 0..n {
                        if !c.live()[i] && i != to {
                            there.record_probe(i, Probe::Failed);
                            there.record_probe(i, Probe::Failed);
                        }
                    }
                    prop_assert_eq!(there.decide(&title, r, pick), Decision::Serve);
                }
            }
        }

        /// A node that dies moves only its own titles, each to the next live node of its
        /// ranking; its return takes them back.
        #[test]
        fn a_death_moves_only_the_dead_nodes_titles(n in 2usize..10, dead in 0usize..10, titles in 1usize..200) {
            let list = nodes(n);
            let dead = dead % n;
            let me = (dead + 1) % n;
            let mut c = Cluster::new(list.clone(), &list[me].name, config()).unwrap();
            let owners = |c: &Cluster| -> Vec<usize> {
                (0..titles).map(|t| c.serving(&format!("t{t}"), 1)[0]).collect()
            };
            let before = owners(&c);
            c.record_probe(dead, Probe::Failed);
            c.record_probe(dead, Probe::Failed);
            let after = owners(&c);
            for t in 0..titles {
                if before[t] == dead {
                    let next = ranking(&list, &format!("t{t}")).into_iter().find(|&i| i != dead);
                    prop_assert_eq!(Some(after[t]), next);
                } else {
                    prop_assert_eq!(after[t], before[t]);
                }
            }
            c.record_probe(dead, Probe::Answered);
            prop_assert_eq!(owners(&c), before);
        }

        #[test]
        fn the_live_ranking_is_the_ranking_without_the_dead(n in 1usize..10, mask in any::<u16>()) {
            let list = nodes(n);
            let mut c = Cluster::new(list.clone(), "edge-0", config()).unwrap();
            for i in 1..n {
                if mask >> i & 1 == 1 {
                    c.record_probe(i, Probe::Failed);
                    c.record_probe(i, Probe::Failed);
                }
            }
            let want: Vec<usize> = ranking(&list, "x").into_iter().filter(|&i| c.live()[i]).collect();
            prop_assert_eq!(c.live_ranking("x"), want);
        }
    }

    #[test]
    fn a_flood_of_names_does_not_hide_a_hot_title() {
        let mut c = Cluster::new(nodes(3), "edge-0", config()).unwrap();
        // Strangers ask for as many made-up names as the table holds, and more.
        for i in 0..MAX_TRACKED_TITLES + 500 {
            c.record_request(&format!("fake{i}"), 1_000);
        }
        // A title that becomes hot now still gets its rate.
        let mut rate = 0.0;
        for _ in 0..50 {
            rate = c.record_request("hot.ts", 1_000);
        }
        assert!(rate > 1.0, "hot title's rate {rate}");
        // More fake names push each other out, not the hot title.
        for i in 0..2 * MAX_TRACKED_TITLES {
            c.record_request(&format!("more{i}"), 1_001);
        }
        assert!(c.rate("hot.ts", 1_001) > 1.0);
        assert!(c.rates.len() <= MAX_TRACKED_TITLES);
    }
}
