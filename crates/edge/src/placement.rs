//! Rendezvous (highest-random-weight) placement of titles over the edge nodes of a cluster.
//!
//! Every node of a cluster holds the same node list (name, control URL, weight). For a title,
//! each node gets a score computed from the two names alone; the title's **ranking** is the
//! nodes in falling score order, its **owner** the first live node of that ranking. Because a
//! score depends only on (node, title), removing a node moves exactly the titles it owned, each
//! to the next node of its own ranking, and a node that returns takes them back: about 1/N of
//! the titles move per join or leave, the least any placement can move.
//!
//! Weighted scores follow Schindelhauer and Schomaker's weighted distributed hash tables:
//! `score = -weight / ln(u)` with `u` in (0, 1) uniform from the hash, so a node of weight 2
//! owns twice the titles of a node of weight 1, and changing one weight moves titles only to
//! or from that node.
//!
//! The hash is specified byte for byte in docs/scale-out.md so that any implementation of an
//! edge (or a router in front of them) agrees on every owner: FNV-1a 64 over the UTF-8 bytes
//! of the node name, one 0x00 byte, and the title, then the SplitMix64 finaliser.

/// One edge node of a cluster, as every node's configuration lists it.
#[derive(Clone, Debug, PartialEq, serde::Deserialize, serde::Serialize)]
pub struct Node {
    /// The node's name: unique in the cluster, and the only input of its scores.
    pub name: String,
    /// The base URL of its control API (`http://host:port`), where redirects point.
    pub url: String,
    /// Its share of titles relative to the others (a node of weight 2 owns twice as many).
    #[serde(default = "default_weight")]
    pub weight: f64,
}

fn default_weight() -> f64 {
    1.0
}

/// The 64-bit hash of a (node, title) pair: FNV-1a over `node`, 0x00, `title`, then SplitMix64's
/// finaliser (FNV alone mixes its last bytes poorly).
pub fn pair_hash(node: &str, title: &str) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    for &b in node.as_bytes().iter().chain(&[0u8]).chain(title.as_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(PRIME);
    }
    splitmix64(h)
}

/// SplitMix64's finaliser: a bijection on u64 with full avalanche.
pub fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The score of `node` (of `weight`) for `title`: higher ranks first.
pub fn score(node: &str, weight: f64, title: &str) -> f64 {
    // The top 53 bits give a uniform u in (0, 1): never 0 (ln 0) and never 1 (ln 1 = 0).
    let bits = pair_hash(node, title) >> 11;
    let u = (bits as f64 + 0.5) / (1u64 << 53) as f64;
    -weight / u.ln()
}

/// The nodes of `nodes` in falling score order for `title` (ties, which a 53-bit hash makes
/// vanishingly rare, go to the smaller index). Returns indices into `nodes`.
pub fn ranking(nodes: &[Node], title: &str) -> Vec<usize> {
    let mut scored: Vec<(f64, usize)> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (score(&n.name, n.weight, title), i))
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    scored.into_iter().map(|(_, i)| i).collect()
}

/// The first `r` live nodes of `title`'s ranking (fewer when fewer are live): the owner first,
/// then the replicas that serve a hot title. Costs one score per live node and a partial sort.
pub fn top_live(nodes: &[Node], live: &[bool], title: &str, r: usize) -> Vec<usize> {
    let mut scored: Vec<(f64, usize)> = nodes
        .iter()
        .enumerate()
        .filter(|&(i, _)| live.get(i).copied().unwrap_or(false))
        .map(|(i, n)| (score(&n.name, n.weight, title), i))
        .collect();
    let order = |a: &(f64, usize), b: &(f64, usize)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
    if r < scored.len() {
        if r == 0 {
            return Vec::new();
        }
        scored.select_nth_unstable_by(r - 1, order);
        scored.truncate(r);
    }
    scored.sort_by(order);
    scored.into_iter().map(|(_, i)| i).collect()
}

/// The owner of `title`: the first live node of its ranking, or `None` when no node is live.
pub fn owner(nodes: &[Node], live: &[bool], title: &str) -> Option<usize> {
    top_live(nodes, live, title, 1).first().copied()
}

/// How many nodes serve a title (its replication), from its share of the cluster's requests.
///
/// A title is **hot** once its request rate passes `hot_share_of_node` times a node's fair
/// share of the requests (`1 / live_nodes`); it is then served by as many nodes as it needs for
/// each of them to carry at most that share, capped at `max_replicas` and at the live nodes.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Replication {
    /// A title carrying more than this fraction of one node's fair share is hot (0 < x).
    pub hot_share_of_node: f64,
    /// Most nodes one title is spread over (1 = no replication).
    pub max_replicas: usize,
}

impl Replication {
    /// Nodes that should serve a title with `title_share` of all requests (0..=1) over
    /// `live_nodes` live nodes.
    pub fn replicas(&self, title_share: f64, live_nodes: usize) -> usize {
        if live_nodes == 0 {
            return 0;
        }
        let per_node = self.hot_share_of_node / live_nodes as f64;
        let wanted = if per_node > 0.0 {
            (title_share / per_node).ceil().max(1.0)
        } else {
            1.0
        };
        // `wanted` is finite and >= 1 here; the cast saturates for huge values.
        (wanted as usize).clamp(1, self.max_replicas.max(1).min(live_nodes))
    }
}

/// The node a client's request for `title` goes to: among the title's `replicas` first live
/// nodes, the one `client_key` picks (a hash of the client, so one client stays on one node).
pub fn route(
    nodes: &[Node],
    live: &[bool],
    title: &str,
    replicas: usize,
    client_key: u64,
) -> Option<usize> {
    let top = top_live(nodes, live, title, replicas.max(1));
    if top.is_empty() {
        return None;
    }
    let pick = (splitmix64(client_key) % top.len() as u64) as usize;
    top.get(pick).copied()
}

/// Consistent hashing with bounded loads (Mirrokni, Thorup and Zadimoghaddam, SODA 2018) over
/// rendezvous rankings: the node for a request is the client's pick among the title's first
/// `replicas` live nodes unless that node's load is above `bound` times the mean load of the
/// live nodes; the request then walks on down the title's ranking to the first node under the
/// bound (the least loaded of the ranking when none is). Each node's load is what its health
/// probe reports (the simulation: a decayed count of bytes served).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LoadBound {
    /// Most load a node takes, as a multiple of the live nodes' mean (1.1: 10% above).
    /// `f64::INFINITY` switches the bound off.
    pub max_over_mean: f64,
}

/// The node a request goes to: `ranked_live` is the title's ranking restricted to live nodes
/// (the owner first), `load(i)` node `i`'s load and `mean_load` the live nodes' mean.
pub fn route_bounded(
    ranked_live: &[usize],
    replicas: usize,
    client_key: u64,
    load: impl Fn(usize) -> f64,
    mean_load: f64,
    bound: LoadBound,
) -> Option<usize> {
    let spread = replicas.clamp(1, ranked_live.len().max(1));
    let first = *ranked_live.get((splitmix64(client_key) % spread as u64) as usize)?;
    let limit = bound.max_over_mean * mean_load;
    if load(first) <= limit {
        return Some(first);
    }
    ranked_live
        .iter()
        .copied()
        .find(|&i| load(i) <= limit)
        .or_else(|| {
            ranked_live
                .iter()
                .copied()
                .min_by(|&a, &b| load(a).total_cmp(&load(b)))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cluster(n: usize) -> Vec<Node> {
        (0..n)
            .map(|i| Node {
                name: format!("edge-{i}"),
                url: format!("http://10.0.0.{i}:8080"),
                weight: 1.0,
            })
            .collect()
    }

    #[test]
    fn hash_is_the_documented_one() {
        // docs/scale-out.md gives these values; an implementation elsewhere checks against them.
        assert_eq!(pair_hash("", ""), splitmix64(0xaf63_bd4c_8601_b7df));
        assert_eq!(pair_hash("", ""), 0x71b8_262b_b6e2_e086);
        assert_eq!(
            pair_hash("edge-0", "title-000001.mp4"),
            0x5e7f_d7d8_5ff1_cdf8
        );
        assert_eq!(
            pair_hash("edge-1", "title-000001.mp4"),
            0x5b33_ecfd_5866_e9c9
        );
        assert!((score("edge-0", 1.0, "title-000001.mp4") - 1.003_427_614_669_737).abs() < 1e-12);
        assert_ne!(
            pair_hash("a", "bc"),
            pair_hash("ab", "c"),
            "the 0x00 separator keeps pairs apart"
        );
    }

    #[test]
    fn owners_are_spread_evenly() {
        let nodes = cluster(10);
        let live = vec![true; 10];
        let mut owned = [0usize; 10];
        for t in 0..20_000 {
            owned[owner(&nodes, &live, &format!("title-{t}")).expect("live")] += 1;
        }
        for &c in &owned {
            assert!((1_700..2_300).contains(&c), "{owned:?}");
        }
    }

    #[test]
    fn weights_scale_ownership() {
        let mut nodes = cluster(4);
        nodes[0].weight = 3.0;
        let live = vec![true; 4];
        let mut owned = [0usize; 4];
        for t in 0..30_000 {
            owned[owner(&nodes, &live, &format!("t{t}")).expect("live")] += 1;
        }
        // Weight 3 of a total of 6: half of the titles.
        assert!((13_500..16_500).contains(&owned[0]), "{owned:?}");
    }

    proptest! {
        /// A node leaving moves exactly its own titles, each to the next live node of its ranking;
        /// its return moves them back.
        #[test]
        fn a_leave_moves_only_the_leavers_titles(n in 2usize..40, gone in 0usize..40, titles in 1usize..300) {
            let gone = gone % n;
            let nodes = cluster(n);
            let all = vec![true; n];
            let mut less = all.clone();
            less[gone] = false;
            for t in 0..titles {
                let title = format!("x{t}");
                let before = owner(&nodes, &all, &title).expect("live");
                let after = owner(&nodes, &less, &title).expect("live");
                if before == gone {
                    prop_assert_eq!(Some(after), ranking(&nodes, &title).into_iter().find(|&i| i != gone));
                } else {
                    prop_assert_eq!(after, before);
                }
            }
        }

        #[test]
        fn replicas_stay_in_bounds(share in 0.0f64..1.0, live in 0usize..2000, max in 0usize..64, hot in 0.01f64..4.0) {
            let r = Replication { hot_share_of_node: hot, max_replicas: max }.replicas(share, live);
            if live == 0 {
                prop_assert_eq!(r, 0);
            } else {
                prop_assert!(r >= 1 && r <= max.max(1).min(live));
            }
        }

        #[test]
        fn top_live_is_the_ranking_filtered(n in 1usize..40, r in 0usize..45, mask in any::<u64>()) {
            let nodes = cluster(n);
            let live: Vec<bool> = (0..n).map(|i| mask >> (i % 64) & 1 == 1).collect();
            let want: Vec<usize> = ranking(&nodes, "t").into_iter().filter(|&i| live[i]).take(r).collect();
            prop_assert_eq!(top_live(&nodes, &live, "t", r), want);
        }

        #[test]
        fn a_bounded_route_avoids_nodes_over_the_bound(loads in proptest::collection::vec(0.0f64..10.0, 1..20), key in any::<u64>(), r in 1usize..5) {
            let ranked: Vec<usize> = (0..loads.len()).rev().collect();
            let mean = loads.iter().sum::<f64>() / loads.len() as f64;
            let bound = LoadBound { max_over_mean: 1.1 };
            let picked = route_bounded(&ranked, r, key, |i| loads[i], mean, bound).expect("a node");
            let under = loads.iter().any(|&l| l <= 1.1 * mean);
            prop_assert!(ranked.contains(&picked));
            if under {
                prop_assert!(loads[picked] <= 1.1 * mean);
            }
        }

        #[test]
        fn a_route_is_one_of_the_top_live(n in 1usize..30, r in 1usize..8, key in any::<u64>()) {
            let nodes = cluster(n);
            let live: Vec<bool> = (0..n).map(|i| i % 3 != 1).collect();
            let picked = route(&nodes, &live, "t", r, key);
            let top = top_live(&nodes, &live, "t", r);
            match picked {
                Some(i) => prop_assert!(top.contains(&i)),
                None => prop_assert!(top.is_empty()),
            }
        }
    }
}
