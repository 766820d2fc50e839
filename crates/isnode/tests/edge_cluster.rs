//! Issue 19, a cluster of edges on loopback: three `isnode serve` nodes share a node list;
//! a request for a title at a node that does not serve it is answered `307` to the title's
//! owner (rendezvous hashing, `isnode_edge::placement`); `isnode play` follows the redirect;
//! a dead edge (`kill -9`) is found by the others' probes and its titles move to the next
//! node of each ranking, and back when it returns; a client whose edge dies mid-stream
//! finishes on the next node of the title's ranking with the original bytes.
//!
//! The edges here hold copies of one volume (same TSI and TOI: `cp -a`), so that a failover
//! carries the same stream; the origin-filled cluster (Garage) is in the tests below them,
//! with the failover between edges that filled a title independently (each its own TSI and
//! TOI, the same origin ETag: the client re-binds to the new copy) and the refusal of a
//! version replaced at the origin.

mod serve_support;

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use isnode_edge::placement::{owner, ranking, Node};
use serde_json::Value;
use serve_support::*;

/// Edges of the test cluster.
const EDGES: usize = 3;

struct Cluster {
    vol: Vol,
    /// Each edge's copy of the volume (and its log).
    edge_vols: Vec<Vol>,
    nodes: Vec<Node>,
    ports: Vec<u16>,
    servers: Vec<Option<Server>>,
    titles: Vec<(String, Vec<u8>)>,
}

/// `--nodes` of the cluster.
fn nodes_flag(nodes: &[Node]) -> String {
    nodes
        .iter()
        .map(|n| format!("{}={}", n.name, n.url))
        .collect::<Vec<_>>()
        .join(",")
}

impl Cluster {
    /// Three edges over copies of a volume holding `titles` TS titles of `seconds` each.
    fn start(titles: usize, seconds: f64) -> Cluster {
        let vol = Vol::create(&[]);
        let titles: Vec<(String, Vec<u8>)> = (0..titles)
            .map(|i| {
                let name = format!("title-{i:02}.ts");
                let bytes = vol.add_ts(&name, 2_000_000, seconds, 100 + i as u64);
                (name, bytes)
            })
            .collect();
        let ports: Vec<u16> = (0..EDGES).map(|_| free_port()).collect();
        let nodes: Vec<Node> = (0..EDGES)
            .map(|i| Node {
                name: format!("edge-{i}"),
                url: format!("http://127.0.0.1:{}", ports[i]),
                weight: 1.0,
            })
            .collect();
        let edge_vols = (0..EDGES)
            .map(|_| {
                let dir = tempfile::tempdir().unwrap();
                let root = dir.path().join("vol");
                copy_volume(&vol.root, &root);
                Vol { dir, root }
            })
            .collect();
        let mut c = Cluster {
            vol,
            edge_vols,
            nodes,
            ports,
            servers: Vec::new(),
            titles,
        };
        c.servers = (0..EDGES).map(|i| Some(c.start_edge(i))).collect();
        // An edge started before its peers counted them dead until their first probe.
        for at in 0..EDGES {
            for who in 0..EDGES {
                c.wait_liveness(at, who, true);
            }
        }
        c
    }

    fn start_edge(&self, i: usize) -> Server {
        let nodes = nodes_flag(&self.nodes);
        let name = format!("edge-{i}");
        Server::start_on(
            &self.edge_vols[i],
            self.ports[i],
            &[
                "--node-name",
                &name,
                "--nodes",
                &nodes,
                "--probe-interval-ms",
                "200",
                // Generous: a loaded test machine must not make a live edge look dead; a
                // killed one refuses connections at once.
                "--probe-timeout-ms",
                "3000",
                "--probe-failures-to-dead",
                "2",
                "--replicate-above-rps",
                "0",
            ],
            &[],
        )
    }

    fn server(&self, i: usize) -> &Server {
        self.servers[i].as_ref().expect("edge running")
    }

    fn addr(&self, i: usize) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.ports[i]))
    }

    /// Waits (bounded) until edge `at` sees edge `who` as `live`.
    fn wait_liveness(&self, at: usize, who: usize, live: bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let r = http(self.addr(at), None, "GET", "/v1/cluster", None, &[]);
            let v: Value = serde_json::from_str(&r.body).unwrap_or(Value::Null);
            if v["nodes"][who]["live"].as_bool() == Some(live) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "edge {at} does not see edge {who} live={live} within 20 s: {}",
                r.body
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Copies the volume directory `from` to `to` (a replica: same TSI, TOI and packets).
fn copy_volume(from: &Path, to: &Path) {
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .expect("running cp");
    assert!(st.success(), "cp -a {} {}", from.display(), to.display());
}

fn header<'a>(r: &'a Resp, name: &str) -> Option<&'a str> {
    r.headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// Every node answers a title's content, playlist and session requests: the owner serves
/// them (with the title's ranking), the others redirect to it with the same path and query.
#[test]
fn every_edge_sends_a_title_to_its_owner() {
    let c = Cluster::start(6, 1.0);
    let live = vec![true; EDGES];
    for (title, bytes) in &c.titles {
        let own = owner(&c.nodes, &live, title).unwrap();
        for at in 0..EDGES {
            let path = format!("/o/{title}?v=1");
            let r = http(c.addr(at), None, "GET", &path, None, &[]);
            if at == own {
                assert_eq!(r.status, 200, "{title} at its owner edge-{at}");
                let len = bytes.len().to_string();
                assert_eq!(header(&r, "content-length"), Some(len.as_str()));
                let want: Vec<String> = ranking(&c.nodes, title)
                    .into_iter()
                    .map(|i| c.nodes[i].url.clone())
                    .collect();
                assert_eq!(header(&r, "isnode-ranking"), Some(want.join(", ").as_str()));
            } else {
                assert_eq!(r.status, 307, "{title} at edge-{at}, owner edge-{own}");
                let want = format!("{}{path}", c.nodes[own].url);
                assert_eq!(header(&r, "location"), Some(want.as_str()));
                let body = format!(r#"{{"object":"{title}","port":40000}}"#);
                let r = http(c.addr(at), None, "POST", "/v1/sessions", Some(&body), &[]);
                assert_eq!(r.status, 307);
                let want = format!("{}/v1/sessions", c.nodes[own].url);
                assert_eq!(header(&r, "location"), Some(want.as_str()));
                // The object's description and index too: no edge but the owner fills it.
                for route in ["", "/index"] {
                    let path = format!("/v1/objects/{title}{route}");
                    let r = http(c.addr(at), None, "GET", &path, None, &[]);
                    assert_eq!(r.status, 307, "{path} at edge-{at}, owner edge-{own}");
                }
            }
        }
    }
    let redirects: f64 = (0..EDGES)
        .map(|i| {
            let r = http(c.addr(i), None, "GET", "/metrics", None, &[]);
            Metrics(r.body).get("isnode_cluster_redirects_total")
        })
        .sum();
    // Each title: 2 non-owners × (content + session + description + index).
    assert_eq!(redirects, (c.titles.len() * (EDGES - 1) * 4) as f64);
    // `isnode play` at a node that does not own the title follows the redirect.
    let (title, bytes) = &c.titles[0];
    let own = owner(&c.nodes, &live, title).unwrap();
    let other = (own + 1) % EDGES;
    let deadline = Instant::now() + Duration::from_secs(60);
    let p = play_run(c.server(other), &c.vol, title, "followed", &[], deadline);
    assert!(p.status.success(), "{}", p.log);
    assert!(p.bytes() == *bytes, "output differs");
}

/// A dead edge's titles go to the next live node of each ranking and nowhere else; back
/// when it returns.
#[test]
fn a_dead_edges_titles_move_to_the_next_of_their_ranking_and_come_back() {
    let mut c = Cluster::start(8, 0.5);
    let dead = 1;
    let all = vec![true; EDGES];
    let mut less = all.clone();
    less[dead] = false;
    c.servers[dead].as_mut().unwrap().kill9();
    let served_at = |c: &Cluster, title: &str, at: usize| -> Option<String> {
        let r = http(c.addr(at), None, "GET", &format!("/o/{title}"), None, &[]);
        match r.status {
            200 => Some(c.nodes[at].url.clone()),
            307 => header(&r, "location")
                .map(|l| l.trim_end_matches(&format!("/o/{title}")).to_string()),
            s => panic!("{title} at edge-{at}: {s}"),
        }
    };
    for at in [0, 2] {
        c.wait_liveness(at, dead, false);
    }
    for (title, _) in &c.titles {
        let want = owner(&c.nodes, &less, title).unwrap();
        let before = owner(&c.nodes, &all, title).unwrap();
        if before != dead {
            assert_eq!(want, before, "{title} moved though its owner lives");
        }
        for at in [0, 2] {
            assert_eq!(
                served_at(&c, title, at),
                Some(c.nodes[want].url.clone()),
                "{title} at edge-{at}"
            );
        }
    }
    c.servers[dead] = Some(c.start_edge(dead));
    for at in [0, 2] {
        c.wait_liveness(at, dead, true);
    }
    for (title, _) in &c.titles {
        let want = owner(&c.nodes, &all, title).unwrap();
        for at in 0..EDGES {
            assert_eq!(
                served_at(&c, title, at),
                Some(c.nodes[want].url.clone()),
                "{title} at edge-{at} after the return"
            );
        }
    }
}

/// `kill -9` of the edge that streams: its clients resume on the next node of the title's
/// ranking (the server sent it) at the first codeword not delivered; identical bytes.
#[test]
fn clients_of_a_killed_edge_finish_on_the_next_of_the_ranking() {
    const CLIENTS: usize = 3;
    let c = Cluster::start(1, 8.0);
    let (title, bytes) = c.titles[0].clone();
    let own = owner(&c.nodes, &[true; EDGES], &title).unwrap();
    let asked = (own + 1) % EDGES;
    let deadline = Instant::now() + Duration::from_secs(90);
    let started = Instant::now();
    let played = std::thread::scope(|s| {
        let runs: Vec<_> = (0..CLIENTS)
            .map(|i| {
                let (c, title) = (&c, &title);
                s.spawn(move || {
                    play_run(
                        c.server(asked),
                        &c.vol,
                        title,
                        &format!("f{i}"),
                        &[],
                        deadline,
                    )
                })
            })
            .collect();
        wait_active(c.addr(own), CLIENTS as f64, Duration::from_secs(20));
        std::thread::sleep(Duration::from_secs(2));
        let killed_at = started.elapsed();
        let pid = c.server(own).pid() as libc::pid_t;
        // SAFETY: kill(2) on our own child's pid has no memory effects.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
        let out: Vec<Played> = runs.into_iter().map(|r| r.join().unwrap()).collect();
        (killed_at, out)
    });
    let (killed_at, played) = played;
    let mut gaps = Vec::new();
    for (i, p) in played.iter().enumerate() {
        assert!(p.status.success(), "client {i}: {}\n{}", p.status, p.log);
        assert!(p.bytes() == bytes, "client {i}: output differs");
        assert!(p.stats["resumes"].as_u64().unwrap_or(0) >= 1, "{}", p.log);
        gaps.push(p.stats["longest_resume_gap_ms"].as_u64().unwrap_or(0));
    }
    println!(
        "edge failover: owner edge-{own} killed at {:.1} s; {CLIENTS} clients finished byte-identical on the next node of the ranking; longest gap per client (ms): {gaps:?}",
        killed_at.as_secs_f64()
    );
}

fn wait_active(addr: SocketAddr, n: f64, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let active = try_http(addr, None, "GET", "/metrics", None, &[])
            .map(|r| Metrics(r.body).get("isnode_sessions_active"))
            .unwrap_or(0.0);
        if active >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{active} sessions active, {n} expected"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

// ---- Edges filling from a 3-node Garage cluster (the origin) ----

use serve_support::garage::{Garage, BUCKET, REGION};

/// Three edges with empty volumes filling from `g` (edge i through Garage node
/// `endpoint_of(i)`), sharing a node list.
struct OriginEdges {
    nodes: Vec<Node>,
    edges: Vec<(Vol, Server)>,
}

impl OriginEdges {
    fn start(
        g: &Garage,
        endpoint_of: impl Fn(usize) -> usize,
        env: &[(&str, &str)],
    ) -> OriginEdges {
        let ports: Vec<u16> = (0..EDGES).map(|_| free_port()).collect();
        let nodes: Vec<Node> = (0..EDGES)
            .map(|i| Node {
                name: format!("edge-{i}"),
                url: format!("http://127.0.0.1:{}", ports[i]),
                weight: 1.0,
            })
            .collect();
        let list = nodes_flag(&nodes);
        let edges = (0..EDGES)
            .map(|i| {
                let vol = Vol::create(&[]);
                let name = format!("edge-{i}");
                let endpoint = g.endpoint(endpoint_of(i));
                let origin = format!("s3://{BUCKET}");
                let s = Server::start_on(
                    &vol,
                    ports[i],
                    &[
                        "--node-name",
                        &name,
                        "--nodes",
                        &list,
                        "--probe-interval-ms",
                        "200",
                        "--replicate-above-rps",
                        "0",
                        "--origin",
                        &origin,
                        "--origin-endpoint",
                        &endpoint,
                        "--origin-region",
                        REGION,
                        // Every client of the test is 127.0.0.1.
                        "--max-sessions-per-client",
                        "64",
                    ],
                    env,
                );
                (vol, s)
            })
            .collect();
        let o = OriginEdges { nodes, edges };
        // An edge started before its peers counted them dead until their first probe.
        for (_, s) in &o.edges {
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                let v: Value = serde_json::from_str(&s.req("GET", "/v1/cluster", None).body)
                    .unwrap_or(Value::Null);
                let live = v["nodes"]
                    .as_array()
                    .map_or(0, |n| n.iter().filter(|x| x["live"] == true).count());
                if live == EDGES {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "the edges do not see each other live: {v}"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        o
    }

    fn metric_sum(&self, series: &str) -> f64 {
        self.edges
            .iter()
            .map(|(_, s)| Metrics(s.req("GET", "/metrics", None).body).get(series))
            .sum()
    }

    fn logs(&self) -> String {
        self.edges.iter().map(|(_, s)| s.log_text()).collect()
    }
}

/// Garage's credentials for the edges' environment.
fn creds(g: &Garage) -> Vec<(&'static str, String)> {
    g.env(0)
        .into_iter()
        .filter(|(k, _)| k.starts_with("AWS_ACCESS") || k.starts_with("AWS_SECRET"))
        .collect()
}

fn env_refs<'a>(v: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    v.iter().map(|(k, s)| (*k, s.as_str())).collect()
}

/// Generates `n` TS titles of `seconds` at `bitrate` and publishes them; their bytes.
fn publish_titles(
    g: &Garage,
    dir: &Path,
    n: usize,
    bitrate: u64,
    seconds: f64,
) -> Vec<(String, Vec<u8>)> {
    (0..n)
        .map(|i| {
            let name = format!("movie-{i:02}.ts");
            let file = dir.join(&name);
            gen_ts(&file, bitrate, seconds, 500 + i as u64);
            g.publish(i % 3, &file, &name, &[]);
            (name, std::fs::read(&file).unwrap())
        })
        .collect()
}

/// Zipf(0.729) over `n` titles: the title index for a uniform `u` in [0, 1).
fn zipf_pick(n: usize, u: f64) -> usize {
    let w: Vec<f64> = (1..=n).map(|r| 1.0 / (r as f64).powf(0.729)).collect();
    let total: f64 = w.iter().sum();
    let mut acc = 0.0;
    for (i, x) in w.iter().enumerate() {
        acc += x / total;
        if u < acc {
            return i;
        }
    }
    n - 1
}

/// 30 clients ask for Zipf-chosen titles at random edges: every output is the title; each
/// title requested is filled once, at its owner (origin bytes = the titles' bytes).
#[test]
fn zipf_clients_at_random_edges_and_one_fill_per_title_and_owner() {
    const CLIENTS: usize = 30;
    const BATCH: usize = 10;
    let g = Garage::start();
    let inputs = tempfile::tempdir().unwrap();
    let titles = publish_titles(&g, inputs.path(), 8, 2_000_000, 3.0);
    let c = creds(&g);
    let cluster = OriginEdges::start(&g, |i| i, &env_refs(&c));
    let mut rng = 0x1234_5678_u64;
    let mut next = || {
        rng = isnode_edge::placement::splitmix64(rng);
        rng
    };
    let asks: Vec<(usize, usize)> = (0..CLIENTS)
        .map(|_| {
            let t = zipf_pick(titles.len(), (next() >> 11) as f64 / (1u64 << 53) as f64);
            (t, (next() % EDGES as u64) as usize)
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut played = Vec::new();
    for batch in asks.chunks(BATCH) {
        let out: Vec<Played> = std::thread::scope(|s| {
            let runs: Vec<_> = batch
                .iter()
                .enumerate()
                .map(|(j, &(t, e))| {
                    let (cluster, titles) = (&cluster, &titles);
                    let tag = format!("z{}-{j}", played.len());
                    s.spawn(move || {
                        let (vol, server) = &cluster.edges[e];
                        play_run(
                            server,
                            vol,
                            &titles[t].0,
                            &tag,
                            &["--timeout-s", "20"],
                            deadline,
                        )
                    })
                })
                .collect();
            runs.into_iter().map(|r| r.join().unwrap()).collect()
        });
        played.extend(out);
    }
    for (i, (p, &(t, e))) in played.iter().zip(&asks).enumerate() {
        assert!(
            p.status.success(),
            "client {i} ({} at edge-{e}): {}\n{}",
            titles[t].0,
            p.log,
            cluster.logs()
        );
        assert!(p.bytes() == titles[t].1, "client {i}: output differs");
    }
    let mut asked: Vec<usize> = asks.iter().map(|&(t, _)| t).collect();
    asked.sort_unstable();
    asked.dedup();
    let title_bytes: u64 = asked.iter().map(|&t| titles[t].1.len() as u64).sum();
    let origin_bytes = cluster.metric_sum("isnode_fill_bytes_total");
    let fills = cluster.metric_sum("isnode_fills_started_total");
    let redirects = cluster.metric_sum("isnode_cluster_redirects_total");
    println!(
        "origin traffic: {CLIENTS} clients, {} distinct titles of {title_bytes} bytes; origin GET bytes {origin_bytes} \
         ({:.3} of the titles' bytes), {fills} fills, {redirects} redirects",
        asked.len(),
        origin_bytes / title_bytes as f64
    );
    assert_eq!(
        fills,
        asked.len() as f64,
        "one fill per title (at its owner)"
    );
    assert_eq!(origin_bytes, title_bytes as f64, "each title fetched once");
}

/// 20 clients ask at once for a title no edge holds: one fill; the first byte comes long
/// before the fill completes (figures printed, not asserted).
#[test]
fn twenty_clients_for_one_missing_title_cause_one_fill() {
    const CLIENTS: usize = 20;
    let g = Garage::start();
    let inputs = tempfile::tempdir().unwrap();
    let titles = publish_titles(&g, inputs.path(), 1, 8_000_000, 12.0);
    let (title, bytes) = &titles[0];
    let c = creds(&g);
    let cluster = OriginEdges::start(&g, |i| i, &env_refs(&c));
    let own = owner(&cluster.nodes, &[true; EDGES], title).unwrap();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(180);
    let fill_done = std::sync::Mutex::new(None);
    let played: Vec<Played> = std::thread::scope(|s| {
        let runs: Vec<_> = (0..CLIENTS)
            .map(|i| {
                let cluster = &cluster;
                s.spawn(move || {
                    let (vol, server) = &cluster.edges[i % EDGES];
                    play_run(
                        server,
                        vol,
                        title,
                        &format!("m{i}"),
                        &["--timeout-s", "20"],
                        deadline,
                    )
                })
            })
            .collect();
        let owner_server = &cluster.edges[own].1;
        while Instant::now() < deadline {
            let m = Metrics(owner_server.req("GET", "/metrics", None).body);
            if m.get("isnode_fills_done_total") >= 1.0 {
                *fill_done.lock().unwrap() = Some(started.elapsed());
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    let mut ttfb = Vec::new();
    for (i, p) in played.iter().enumerate() {
        assert!(
            p.status.success(),
            "client {i}: {}\n{}",
            p.log,
            cluster.logs()
        );
        assert!(p.bytes() == *bytes, "client {i}: output differs");
        ttfb.push(p.stats["first_packet_ms"].as_u64().unwrap_or(0));
    }
    ttfb.sort_unstable();
    let fills = cluster.metric_sum("isnode_fills_started_total");
    println!(
        "miss: {CLIENTS} clients for one missing title of {} bytes: {fills} fill(s); time to first packet \
         min {} ms, median {} ms; fill complete after {:?}",
        bytes.len(),
        ttfb[0],
        ttfb[ttfb.len() / 2],
        fill_done.lock().unwrap()
    );
    assert_eq!(fills, 1.0, "one fill however many clients");
}

/// `kill -9` of one Garage node (not the one the edges talk to) between fills: fills go on.
#[test]
fn fills_keep_working_with_a_garage_node_killed() {
    let mut g = Garage::start();
    let inputs = tempfile::tempdir().unwrap();
    let titles = publish_titles(&g, inputs.path(), 4, 2_000_000, 2.0);
    let c = creds(&g);
    let cluster = OriginEdges::start(&g, |i| i % 2, &env_refs(&c));
    g.kill(2);
    let deadline = Instant::now() + Duration::from_secs(120);
    for (i, (title, bytes)) in titles.iter().enumerate() {
        let (vol, server) = &cluster.edges[i % EDGES];
        let p = play_run(
            server,
            vol,
            title,
            &format!("k{i}"),
            &["--timeout-s", "20"],
            deadline,
        );
        assert!(
            p.status.success(),
            "{title}: {}\n{}\n{}",
            p.log,
            cluster.logs(),
            g.logs()
        );
        assert!(p.bytes() == *bytes, "{title}: output differs");
    }
}

/// Wrong credentials and an unreachable origin: clear errors to the client (`502`), a
/// missing object `404`; the secret in no log line.
#[test]
fn origin_errors_are_clear_and_the_secret_is_never_logged() {
    let g = Garage::start();
    let inputs = tempfile::tempdir().unwrap();
    let titles = publish_titles(&g, inputs.path(), 1, 2_000_000, 1.0);
    let wrong_secret = "f00dfeedf00dfeedf00dfeedf00dfeedf00dfeedf00dfeedf00dfeedf00dfeed";
    let bad = vec![
        ("AWS_ACCESS_KEY_ID", g.key_id.clone()),
        ("AWS_SECRET_ACCESS_KEY", wrong_secret.to_string()),
    ];
    let cluster = OriginEdges::start(&g, |i| i, &env_refs(&bad));
    let title = &titles[0].0;
    let own = owner(&cluster.nodes, &[true; EDGES], title).unwrap();
    let server = &cluster.edges[own].1;
    let r = server.req("GET", &format!("/o/{title}"), None);
    assert_eq!(r.status, 502, "wrong credentials: {}", r.body);
    let missing = "no-such-title.ts";
    let own_missing = owner(&cluster.nodes, &[true; EDGES], missing).unwrap();
    let r = cluster.edges[own_missing]
        .1
        .req("GET", &format!("/o/{missing}"), None);
    assert!(
        r.status == 404 || r.status == 502,
        "missing: {} {}",
        r.status,
        r.body
    );
    for (_, s) in &cluster.edges {
        assert!(
            !s.log_text().contains(wrong_secret),
            "the secret is in a log"
        );
    }
    // An origin nobody listens on.
    let dead = format!("http://127.0.0.1:{}", free_port());
    let vol = Vol::create(&[]);
    let lone = Server::start_env(
        &vol,
        &[
            "--origin",
            &format!("s3://{BUCKET}"),
            "--origin-endpoint",
            &dead,
            "--origin-region",
            REGION,
        ],
        &env_refs(&creds(&g)),
    );
    let r = lone.req("GET", &format!("/o/{title}"), None);
    assert_eq!(r.status, 502, "unreachable origin: {}", r.body);
    assert!(
        !lone.log_text().contains(&g.secret),
        "the secret is in a log"
    );
}

// ---- Failover between edges that filled a title from the origin independently ----

/// Waits (bounded) until `series` on `server` reaches `at_least`.
fn wait_metric(server: &Server, series: &str, at_least: f64, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let v = Metrics(server.req("GET", "/metrics", None).body).get(series);
        if v >= at_least {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{series} is {v}, {at_least} expected within {within:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `kill -9` (SIGKILL) of a server whose handle other threads share.
fn kill9_shared(s: &Server) {
    let pid = s.pid() as libc::pid_t;
    // SAFETY: kill(2) on our own child's pid has no memory effects.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
}

/// Each edge fills the title from the origin into its own volume (its own TSI, and a TOI
/// of its own): `kill -9` of the edge streaming it to clients; they resume on the next node
/// of the title's ranking, which fills the title itself, take its stream (the same origin
/// ETag and layout: the receive core re-binds to its TSI, TOI and digests at the first
/// codeword not delivered) and finish with the original bytes. The gaps are printed.
#[test]
fn clients_of_a_killed_edge_finish_on_another_edges_own_fill() {
    const CLIENTS: usize = 3;
    let g = Garage::start();
    let inputs = tempfile::tempdir().unwrap();
    let titles = publish_titles(&g, inputs.path(), 1, 2_000_000, 8.0);
    let (title, bytes) = &titles[0];
    let c = creds(&g);
    let cluster = OriginEdges::start(&g, |i| i, &env_refs(&c));
    let rank = ranking(&cluster.nodes, title);
    let (own, next) = (rank[0], rank[1]);
    let asked = rank[2];
    let deadline = Instant::now() + Duration::from_secs(120);
    let started = Instant::now();
    let (killed_at, played) = std::thread::scope(|s| {
        let runs: Vec<_> = (0..CLIENTS)
            .map(|i| {
                let cluster = &cluster;
                s.spawn(move || {
                    let (vol, server) = &cluster.edges[asked];
                    let extra = ["--timeout-s", "20"];
                    play_run(server, vol, title, &format!("o{i}"), &extra, deadline)
                })
            })
            .collect();
        let owner_edge = &cluster.edges[own].1;
        wait_active(owner_edge.addr, CLIENTS as f64, Duration::from_secs(30));
        std::thread::sleep(Duration::from_secs(2));
        let killed_at = started.elapsed();
        kill9_shared(owner_edge);
        let out: Vec<Played> = runs.into_iter().map(|r| r.join().unwrap()).collect();
        (killed_at, out)
    });
    let mut gaps = Vec::new();
    for (i, p) in played.iter().enumerate() {
        assert!(
            p.status.success(),
            "client {i}: {}\n{}\n{}",
            p.status,
            p.log,
            cluster.logs()
        );
        assert!(p.bytes() == *bytes, "client {i}: output differs");
        assert!(p.stats["resumes"].as_u64().unwrap_or(0) >= 1, "{}", p.log);
        assert!(
            p.stats["resumes_on_other_copy"].as_u64().unwrap_or(0) >= 1,
            "client {i} did not re-bind to another copy:\n{}",
            p.log
        );
        assert_eq!(p.stats["packets_forged"], 0, "{}", p.log);
        gaps.push(p.stats["longest_resume_gap_ms"].as_u64().unwrap_or(0));
    }
    let next_edge = &cluster.edges[next].1;
    let fills = Metrics(next_edge.req("GET", "/metrics", None).body);
    assert!(
        fills.get("isnode_fills_started_total") >= 1.0,
        "edge-{next} did not fill the title itself"
    );
    // The two live edges' copies (the third fills its own now): another TSI, one ETag.
    let answers: Vec<Value> = [next, asked]
        .into_iter()
        .map(|i| {
            let body = format!(r#"{{"object":"{title}","port":40000}}"#);
            let serve_here = [("isnode-serve-here", "failover")];
            let r = http(
                cluster.edges[i].1.addr,
                None,
                "POST",
                "/v1/sessions",
                Some(&body),
                &serve_here,
            );
            assert_eq!(r.status, 201, "edge-{i}: {}", r.body);
            serde_json::from_str(&r.body).unwrap()
        })
        .collect();
    let etag = answers[0]["origin_etag"].as_str().unwrap_or("");
    assert!(!etag.is_empty(), "no origin_etag: {}", answers[0]);
    assert_eq!(answers[1]["origin_etag"], answers[0]["origin_etag"]);
    assert_ne!(answers[1]["object"]["tsi"], answers[0]["object"]["tsi"]);
    println!(
        "origin-edge failover: owner edge-{own} killed at {:.1} s; {CLIENTS} clients resumed on \
         edge-{next}'s own fill (another TSI/TOI, same origin ETag) and finished byte-identical; \
         longest gap per client (ms): {gaps:?}",
        killed_at.as_secs_f64()
    );
}

/// The title replaced at the origin (same length, another ETag) after the edge streaming
/// it filled it, then that edge killed: the other edges fill the new version; the client
/// refuses their streams (another version), says why, and fails (`--timeout-s`): its
/// output is a prefix of the version it played, then zeros, never a byte of the other.
#[test]
fn a_client_never_mixes_two_versions_of_a_title() {
    let g = Garage::start();
    let inputs = tempfile::tempdir().unwrap();
    let titles = publish_titles(&g, inputs.path(), 1, 2_000_000, 8.0);
    let (title, v1) = &titles[0];
    // Another stream of the same length: only the ETag tells the versions apart (a
    // different length or layout is refused by the layout check alone).
    let v2_file = inputs.path().join("v2.ts");
    gen_ts(&v2_file, 2_000_000, 8.0, 9_999);
    let v2 = std::fs::read(&v2_file).unwrap();
    assert_eq!(v2.len(), v1.len(), "the two versions' lengths");
    assert!(v2 != *v1);
    let c = creds(&g);
    let cluster = OriginEdges::start(&g, |i| i, &env_refs(&c));
    let own = ranking(&cluster.nodes, title)[0];
    let deadline = Instant::now() + Duration::from_secs(120);
    let p = std::thread::scope(|s| {
        let run = s.spawn(|| {
            let (vol, server) = &cluster.edges[own];
            let extra = ["--timeout-s", "5"];
            play_run(server, vol, title, "v", &extra, deadline)
        });
        let owner_edge = &cluster.edges[own].1;
        wait_active(owner_edge.addr, 1.0, Duration::from_secs(30));
        // Its fill done (a change during a fill is the fill's matter, not this test's).
        wait_metric(
            owner_edge,
            "isnode_fills_done_total",
            1.0,
            Duration::from_secs(30),
        );
        g.publish(1, &v2_file, title, &[]);
        std::thread::sleep(Duration::from_secs(1));
        kill9_shared(owner_edge);
        run.join().unwrap()
    });
    assert!(
        !p.status.success(),
        "the client should not finish:\n{}",
        p.log
    );
    // It says why: not only that the server went quiet.
    let error = p.log.lines().find(|l| l.starts_with("isnode: error"));
    assert!(
        error.is_some_and(|l| l.contains("another version") && l.contains("server is gone")),
        "{}",
        p.log
    );
    assert_eq!(p.stats["resumes"], 0, "it resumed:\n{}", p.log);
    let out = p.bytes();
    assert!(
        !out.is_empty() && out.len() < v1.len(),
        "{} bytes of {}",
        out.len(),
        v1.len()
    );
    let wrong = out.iter().zip(v1).filter(|(o, t)| o != t && **o != 0);
    assert_eq!(
        wrong.count(),
        0,
        "bytes neither of the version played nor zeros"
    );
    let fills: f64 = (0..EDGES)
        .filter(|&i| i != own)
        .map(|i| {
            let r = cluster.edges[i].1.req("GET", "/metrics", None);
            Metrics(r.body).get("isnode_fills_started_total")
        })
        .sum();
    println!(
        "version change: the client refused the new version's streams ({fills} fills in the \
         cluster) and ended with {} bytes of the version it played",
        out.len()
    );
}
