//! A deterministic simulation of a cluster of edges: placement, request routing, edge caches
//! that fill from the origin, and nodes that fail, return and join, under a Zipf workload.
//!
//! It is sans-IO and seeded: the same [`SimConfig`] gives the same [`SimReport`] on every
//! machine. What is real: the placement of [`crate::placement`] (the code the edges run), the
//! replication rule, the routing of a client to one of a title's nodes. What is modelled: a
//! request is one whole view of a title (its bytes count once at the serving node), an edge's
//! volume is an LRU cache of whole titles with a byte capacity, a miss fetches the whole title
//! from the origin once, and a title's request rate is an exponentially decayed count that every
//! router shares (the edges' gossip of their counters in the real system).

use std::collections::{BTreeMap, HashMap};

use crate::placement::{route_bounded, splitmix64, top_live, LoadBound, Node, Replication};

/// What to simulate.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SimConfig {
    /// Edge nodes at the start.
    pub nodes: usize,
    /// Titles in the library.
    pub titles: usize,
    /// Requests (views) simulated.
    pub requests: u64,
    /// Zipf exponent of title popularity (p_i ∝ 1 / i^s; DESIGN.md: 0.729).
    pub zipf_exponent: f64,
    /// Each edge's cache, as a multiple of its fair share of the library's bytes.
    pub cache_share: f64,
    /// Replication of hot titles.
    pub replication: Replication,
    /// The load bound past which requests walk on down a title's ranking.
    pub bound: LoadBound,
    /// Requests over which a title's rate estimate decays by e.
    pub rate_window_requests: f64,
    /// Requests over which a node's load (what its health probe reports) decays by e.
    pub load_window_requests: f64,
    /// Membership events, each at a fraction of the run (0..1).
    pub events: Vec<(f64, Event)>,
    /// Load balance is measured over the requests from this fraction of the run on (0..1),
    /// so that it describes one membership, not the transients between them.
    pub measure_from: f64,
    /// The seed of every random choice.
    pub seed: u64,
}

/// A change of the cluster's membership.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub enum Event {
    /// Node `i` dies: its titles move to the next node of each title's ranking.
    Fail(usize),
    /// Node `i` comes back (with its cache as it was).
    Return(usize),
    /// A new node joins with an empty cache.
    Join,
}

/// What one membership event moved.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Moved {
    /// The event.
    pub event: Event,
    /// Live nodes after it.
    pub live_nodes: usize,
    /// Fraction of the library's titles whose owner changed.
    pub moved_fraction: f64,
    /// The least any placement can move: 1 / live nodes of the larger membership.
    pub ideal_fraction: f64,
    /// Titles moved over the titles the node that left (or joined) owns in the larger
    /// membership: 1.0 when only those moved, as rendezvous hashing promises.
    pub moved_over_necessary: f64,
}

/// The figures of one run.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SimReport {
    /// The configuration that produced it.
    pub config: SimConfig,
    /// Most requests served by one node over the mean of the live nodes (1.0 = perfect),
    /// over the measured part of the run.
    pub max_over_mean_requests: f64,
    /// The same for bytes served.
    pub max_over_mean_bytes: f64,
    /// Bytes fetched from the origin per byte delivered to clients.
    pub origin_bytes_per_delivered_byte: f64,
    /// Replicas the most popular title was served by at the end.
    pub hottest_replicas: usize,
    /// Titles served by more than one node at the end.
    pub replicated_titles: usize,
    /// One entry per membership event.
    pub moved: Vec<Moved>,
}

/// A seeded SplitMix64 stream: the simulation's only source of randomness.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A stream from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        splitmix64(self.0.wrapping_sub(0x9e37_79b9_7f4a_7c15))
    }
    /// A uniform value in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Zipf popularity over `n` titles: title `i` (0-based) has weight 1 / (i+1)^s.
#[derive(Clone, Debug)]
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    /// The distribution over `n` titles with exponent `s`.
    pub fn new(n: usize, s: f64) -> Self {
        let mut acc = 0.0;
        let mut cdf = Vec::with_capacity(n);
        for i in 0..n {
            acc += 1.0 / ((i + 1) as f64).powf(s);
            cdf.push(acc);
        }
        for c in &mut cdf {
            *c /= acc;
        }
        Self { cdf }
    }
    /// The title a uniform `u` in [0, 1) picks.
    pub fn pick(&self, u: f64) -> usize {
        self.cdf
            .partition_point(|&c| c <= u)
            .min(self.cdf.len().saturating_sub(1))
    }
    /// Title `i`'s probability.
    pub fn share(&self, i: usize) -> f64 {
        let hi = self.cdf.get(i).copied().unwrap_or(1.0);
        let lo = if i == 0 {
            0.0
        } else {
            self.cdf.get(i - 1).copied().unwrap_or(1.0)
        };
        hi - lo
    }
}

/// An edge's cache of whole titles, least recently used first out.
#[derive(Debug, Default)]
struct Lru {
    capacity_bytes: u64,
    used_bytes: u64,
    last_use: HashMap<usize, u64>,
    by_use: BTreeMap<u64, usize>,
}

impl Lru {
    /// Touches `title` at `tick`; returns the bytes fetched from the origin (0 on a hit).
    fn get(&mut self, title: usize, bytes: u64, tick: u64) -> u64 {
        if let Some(old) = self.last_use.insert(title, tick) {
            self.by_use.remove(&old);
            self.by_use.insert(tick, title);
            return 0;
        }
        self.by_use.insert(tick, title);
        self.used_bytes += bytes;
        while self.used_bytes > self.capacity_bytes && self.by_use.len() > 1 {
            let Some((_, victim)) = self.by_use.pop_first() else {
                break;
            };
            self.last_use.remove(&victim);
            self.used_bytes = self.used_bytes.saturating_sub(title_bytes_of(victim));
        }
        bytes
    }
}

/// A title's size: deterministic from its index, 100 MB to 400 MB.
pub fn title_bytes_of(title: usize) -> u64 {
    100_000_000 + splitmix64(title as u64 ^ 0x5eed) % 300_000_000
}

/// The name of title `i` (what placement hashes).
pub fn title_name(i: usize) -> String {
    format!("title-{i:06}.mp4")
}

/// Exponentially decayed counters, one per index (a title's requests, a node's bytes served),
/// and their total, on the clock of request numbers.
#[derive(Debug)]
struct Decayed {
    decay_per_request: f64,
    counts: Vec<(f64, u64)>,
    total: (f64, u64),
}

impl Decayed {
    /// Counters that decay by e over `window_requests` requests.
    fn new(window_requests: f64) -> Self {
        Self {
            decay_per_request: (-1.0 / window_requests.max(1.0)).exp(),
            counts: Vec::new(),
            total: (0.0, 0),
        }
    }
    fn at(&self, (c, at): (f64, u64), now: u64) -> f64 {
        c * self.decay_per_request.powf((now - at.min(now)) as f64)
    }
    /// Adds `amount` to counter `i` at request `now`; returns its share of the total.
    fn record(&mut self, i: usize, amount: f64, now: u64) -> f64 {
        if self.counts.len() <= i {
            self.counts.resize(i + 1, (0.0, 0));
        }
        let c = self.at(self.counts[i], now) + amount;
        let t = self.at(self.total, now) + amount;
        self.counts[i] = (c, now);
        self.total = (t, now);
        if t > 0.0 {
            c / t
        } else {
            0.0
        }
    }
    /// Counter `i` at request `now`.
    fn of(&self, i: usize, now: u64) -> f64 {
        self.counts.get(i).map_or(0.0, |&c| self.at(c, now))
    }
    /// The total at request `now` over `n` counters.
    fn mean(&self, now: u64, n: usize) -> f64 {
        self.at(self.total, now) / n.max(1) as f64
    }
}

/// How far past its replicas a request may walk down a title's ranking to find a node under
/// the load bound.
const SPILL_DEPTH: usize = 16;

/// The cluster being simulated.
struct Cluster {
    nodes: Vec<Node>,
    live: Vec<bool>,
    caches: Vec<Lru>,
    requests: Vec<u64>,
    bytes: Vec<u64>,
}

impl Cluster {
    fn new(n: usize, cache_bytes: u64) -> Self {
        let mut c = Self {
            nodes: Vec::new(),
            live: Vec::new(),
            caches: Vec::new(),
            requests: Vec::new(),
            bytes: Vec::new(),
        };
        for _ in 0..n {
            c.join(cache_bytes);
        }
        c
    }
    fn join(&mut self, cache_bytes: u64) {
        let i = self.nodes.len();
        self.nodes.push(Node {
            name: format!("edge-{i}"),
            url: format!("http://edge-{i}.invalid:8080"),
            weight: 1.0,
        });
        self.live.push(true);
        self.caches.push(Lru {
            capacity_bytes: cache_bytes,
            ..Lru::default()
        });
        self.requests.push(0);
        self.bytes.push(0);
    }
    fn live_count(&self) -> usize {
        self.live.iter().filter(|&&l| l).count()
    }
    fn owners(&self, titles: usize) -> Vec<Option<usize>> {
        (0..titles)
            .map(|t| {
                top_live(&self.nodes, &self.live, &title_name(t), 1)
                    .first()
                    .copied()
            })
            .collect()
    }
}

/// Runs one simulation.
pub fn run(config: &SimConfig) -> SimReport {
    let zipf = Zipf::new(config.titles, config.zipf_exponent);
    let library_bytes: u64 = (0..config.titles).map(title_bytes_of).sum();
    let cache_bytes =
        (library_bytes as f64 * config.cache_share / config.nodes.max(1) as f64) as u64;
    let mut cluster = Cluster::new(config.nodes, cache_bytes);
    // Title rates are shared by every router; node loads are what health probes report.
    let mut rates = Decayed::new(config.rate_window_requests);
    let mut rng = Rng::new(config.seed);
    let mut events: Vec<(u64, Event)> = config
        .events
        .iter()
        .map(|&(at, e)| ((at.clamp(0.0, 1.0) * config.requests as f64) as u64, e))
        .collect();
    events.sort_by_key(|&(at, _)| at);
    let mut next_event = 0;
    let mut moved = Vec::new();
    let (mut origin, mut delivered) = (0u64, 0u64);
    let measure_start = (config.measure_from.clamp(0.0, 1.0) * config.requests as f64) as u64;
    let mut replicas_of = vec![1usize; config.titles];
    // The top of each title's live ranking (deep enough for the replicas and a walk past
    // loaded nodes), cached and dropped when membership changes.
    let depth = config.replication.max_replicas.max(1) + SPILL_DEPTH;
    let mut tops: HashMap<usize, Vec<usize>> = HashMap::new();
    let mut loads = Decayed::new(config.load_window_requests);
    for now in 0..config.requests {
        while let Some(&(at, event)) = events.get(next_event) {
            if at > now {
                break;
            }
            moved.push(apply(&mut cluster, event, config.titles, cache_bytes));
            tops.clear();
            next_event += 1;
        }
        let title = zipf.pick(rng.unit());
        let share = rates.record(title, 1.0, now);
        let r = config.replication.replicas(share, cluster.live_count());
        if let Some(slot) = replicas_of.get_mut(title) {
            *slot = r;
        }
        let top = tops
            .entry(title)
            .or_insert_with(|| top_live(&cluster.nodes, &cluster.live, &title_name(title), depth));
        let mean = loads.mean(now, cluster.live_count());
        let Some(node) = route_bounded(
            top,
            r,
            rng.next_u64(),
            |i| loads.of(i, now),
            mean,
            config.bound,
        ) else {
            continue;
        };
        let bytes = title_bytes_of(title);
        loads.record(node, bytes as f64, now);
        origin += cluster.caches[node].get(title, bytes, now);
        delivered += bytes;
        if now >= measure_start {
            cluster.requests[node] += 1;
            cluster.bytes[node] += bytes;
        }
    }
    report(
        config,
        &cluster,
        &zipf,
        &replicas_of,
        origin,
        delivered,
        moved,
    )
}

fn apply(cluster: &mut Cluster, event: Event, titles: usize, cache_bytes: u64) -> Moved {
    let before = cluster.owners(titles);
    let larger_live = match event {
        Event::Fail(i) => {
            let n = cluster.live_count();
            if let Some(l) = cluster.live.get_mut(i) {
                *l = false;
            }
            n
        }
        Event::Return(i) => {
            if let Some(l) = cluster.live.get_mut(i) {
                *l = true;
            }
            cluster.live_count()
        }
        Event::Join => {
            cluster.join(cache_bytes);
            cluster.live_count()
        }
    };
    let after = cluster.owners(titles);
    let changed = before.iter().zip(&after).filter(|(a, b)| a != b).count();
    // The node whose titles had to move: the one that left (its titles before) or the one
    // that came (its titles after).
    let (mover, owners) = match event {
        Event::Fail(i) => (i, &before),
        Event::Return(i) => (i, &after),
        Event::Join => (cluster.nodes.len() - 1, &after),
    };
    let necessary = owners.iter().filter(|&&o| o == Some(mover)).count();
    Moved {
        event,
        live_nodes: cluster.live_count(),
        moved_fraction: changed as f64 / titles.max(1) as f64,
        ideal_fraction: 1.0 / larger_live.max(1) as f64,
        moved_over_necessary: changed as f64 / necessary.max(1) as f64,
    }
}

fn report(
    config: &SimConfig,
    cluster: &Cluster,
    zipf: &Zipf,
    replicas_of: &[usize],
    origin: u64,
    delivered: u64,
    moved: Vec<Moved>,
) -> SimReport {
    let max_over_mean = |xs: &[u64]| {
        let live: Vec<u64> = xs
            .iter()
            .zip(&cluster.live)
            .filter(|(_, &l)| l)
            .map(|(&x, _)| x)
            .collect();
        let mean = live.iter().sum::<u64>() as f64 / live.len().max(1) as f64;
        let max = live.iter().copied().max().unwrap_or(0) as f64;
        if mean > 0.0 {
            max / mean
        } else {
            0.0
        }
    };
    let hottest = (0..config.titles)
        .max_by(|&a, &b| zipf.share(a).total_cmp(&zipf.share(b)))
        .unwrap_or(0);
    SimReport {
        config: config.clone(),
        max_over_mean_requests: max_over_mean(&cluster.requests),
        max_over_mean_bytes: max_over_mean(&cluster.bytes),
        origin_bytes_per_delivered_byte: origin as f64 / delivered.max(1) as f64,
        hottest_replicas: replicas_of.get(hottest).copied().unwrap_or(0),
        replicated_titles: replicas_of.iter().filter(|&&r| r > 1).count(),
        moved,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(nodes: usize, max_replicas: usize) -> SimConfig {
        SimConfig {
            nodes,
            titles: 2_000,
            requests: 200_000,
            zipf_exponent: 0.729,
            cache_share: 2.0,
            replication: Replication {
                hot_share_of_node: 0.25,
                max_replicas,
            },
            bound: LoadBound {
                max_over_mean: f64::INFINITY,
            },
            rate_window_requests: 50_000.0,
            load_window_requests: 1_000.0,
            events: vec![
                (0.3, Event::Fail(1)),
                (0.6, Event::Return(1)),
                (0.8, Event::Join),
            ],
            measure_from: 0.0,
            seed: 7,
        }
    }

    #[test]
    fn a_run_replays_exactly() {
        assert_eq!(run(&config(10, 4)), run(&config(10, 4)));
    }

    #[test]
    fn replicating_hot_titles_evens_the_load() {
        let single = run(&config(20, 1));
        let spread = run(&config(20, 20));
        assert!(
            spread.max_over_mean_requests < single.max_over_mean_requests,
            "{single:?}\n{spread:?}"
        );
        assert!(spread.hottest_replicas > 1 && single.hottest_replicas == 1);
    }

    #[test]
    fn membership_events_move_about_one_nth() {
        let r = run(&config(10, 4));
        assert_eq!(r.moved.len(), 3);
        for m in &r.moved {
            assert!(
                (m.moved_over_necessary - 1.0).abs() < 1e-9,
                "only the mover's titles move: {m:?}"
            );
            // 2000 titles, 1/10 or 1/11 of them expected: binomial noise stays well inside ±40%.
            assert!(
                (m.moved_fraction / m.ideal_fraction - 1.0).abs() < 0.4,
                "{m:?}"
            );
        }
    }

    #[test]
    fn zipf_shares_fall_and_sum_to_one() {
        let z = Zipf::new(100, 0.729);
        let total: f64 = (0..100).map(|i| z.share(i)).sum();
        assert!((total - 1.0).abs() < 1e-9);
        assert!(z.share(0) > z.share(1) && z.share(1) > z.share(99));
        assert_eq!(z.pick(0.0), 0);
        assert_eq!(z.pick(0.999_999_999), 99);
    }
}
