//! IPv6 end to end (issue 30, item 4). On loopback: a server listening on `[::1]` streams a
//! title to `isnode play` over UDP/IPv6 and serves its bytes and its HLS playlist over
//! HTTP; a broadcast on IPv6 multicast groups (`ff15::/64`, in a network namespace of the
//! test's own) reaches `isnode play --broadcast`; a cluster of three edges named by
//! `http://[::1]:PORT` URLs probes, redirects and plays; the per-client limits count an IPv6
//! client by its /64 (many addresses of one /64 are one client, for sessions and for the
//! fills it may start); and all of unicast, HTTP
//! and broadcast in a namespace whose loopback has no IPv4 address at all. Between
//! namespaces with no IPv4 at all, joined by a bridge ([`Bridge`]): unicast, HTTP and a
//! broadcast to two receivers on other ports of the bridge; and the cluster, each edge in a
//! namespace of its own and the viewer in a fourth.
//!
//! Addresses of two /64s are added to `lo` (`ip -6 addr add`, root) and removed at the end.

mod serve_support;

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::process::Command;
use std::time::{Duration, Instant};

use serve_support::netns::{Bridge, Netns};
use serve_support::*;

/// A server on a bridge's address (not loopback) refuses plain HTTP and open operator
/// routes unless told: the bridge is the test's own, no one else is on the path.
const OPEN_ON_THE_BRIDGE: [&str; 2] = ["--plain-http", "--insecure-open-operator-routes"];

/// `isnode play` over UDP/IPv6 from `[::1]` writes the title byte for byte; `/o/NAME` and
/// the playlist's segments over HTTP/IPv6 are its bytes.
#[test]
fn unicast_and_http_over_ipv6() {
    let vol = Vol::create(&[]);
    let original = vol.add_ts("t.ts", 2_000_000, 4.0, 61);
    let server = Server::start_at(&vol, IpAddr::V6(Ipv6Addr::LOCALHOST), &[]);
    assert!(
        server.url().starts_with("http://[::1]:"),
        "{}",
        server.url()
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let played = play_run(&server, &vol, "t.ts", "v6", &[], deadline);
    assert!(played.status.success(), "isnode play: {}", played.log);
    assert!(played.bytes() == original, "the played output differs");

    let got = vol.path("curl.ts");
    let curl = Command::new("curl")
        .args(["-sS", "-g", "-o"])
        .arg(&got)
        .arg(format!("{}/o/t.ts", server.url()))
        .status()
        .expect("curl is needed by this test: run scripts/test");
    assert!(curl.success());
    assert!(std::fs::read(&got).unwrap() == original, "/o/t.ts differs");
    let playlist = server.req("GET", "/v1/objects/t.ts/index.m3u8", None);
    assert_eq!(playlist.status, 200, "{}", playlist.body);
    assert!(
        playlist.body.contains("#EXT-X-BYTERANGE:"),
        "{}",
        playlist.body
    );
}

/// Addresses on `lo` for the test's life.
struct LoAddrs(Vec<String>);

impl LoAddrs {
    fn add(addrs: &[&str]) -> LoAddrs {
        let added = LoAddrs(addrs.iter().map(|a| a.to_string()).collect());
        for a in addrs {
            let _ = Command::new("ip")
                .args(["-6", "addr", "del", a, "dev", "lo"])
                .output();
            let out = Command::new("ip")
                .args(["-6", "addr", "add", a, "dev", "lo", "nodad"])
                .output()
                .expect("ip (iproute2) is needed by this test: run scripts/test");
            assert!(
                out.status.success(),
                "ip -6 addr add {a}: {out:?} (root needed)"
            );
        }
        added
    }
}

impl Drop for LoAddrs {
    fn drop(&mut self) {
        for a in &self.0 {
            let _ = Command::new("ip")
                .args(["-6", "addr", "del", a, "dev", "lo"])
                .output();
        }
    }
}

/// `max_unvalidated_per_client` 2: sessions from three addresses of one /64 are one
/// client's (the third refused `503` naming the limit); an address of another /64 is
/// another client.
#[test]
fn one_slash_64_is_one_client() {
    let _addrs = LoAddrs::add(&[
        "fd00:6464::1/64",
        "fd00:6464::2/64",
        "fd00:6464::3/64",
        "fd00:6465::1/64",
    ]);
    let vol = Vol::create(&[]);
    vol.add_ts("t.ts", 2_000_000, 4.0, 62);
    let server = Server::start_at(
        &vol,
        IpAddr::V6(Ipv6Addr::LOCALHOST),
        &[
            "--max-unvalidated-per-client",
            "2",
            "--validate-timeout-ms",
            "20000",
        ],
    );
    let ask = |from: &str, port: u16| {
        let from: IpAddr = from.parse().unwrap();
        let body = serde_json::json!({ "object": "t.ts", "port": port }).to_string();
        http(
            server.addr,
            Some(from),
            "POST",
            "/v1/sessions",
            Some(&body),
            &[],
        )
    };
    assert_eq!(ask("fd00:6464::1", 42_001).status, 201);
    assert_eq!(ask("fd00:6464::2", 42_002).status, 201);
    let third = ask("fd00:6464::3", 42_003);
    assert_eq!(third.status, 503, "{}", third.body);
    assert!(
        third.body.contains("max_unvalidated_per_client"),
        "{}",
        third.body
    );
    let other = ask("fd00:6465::1", 42_004);
    assert_eq!(other.status, 201, "another /64: {}", other.body);
}

/// Fills started by one client are capped (`fill_max_per_client`, 4) per IPv6 /64: ten
/// addresses of one /64, each asking an edge whose origin never answers for a title it
/// lacks, start four fills between them; an address of another /64 starts a fifth.
#[test]
fn one_slash_64_starts_at_most_its_share_of_fills() {
    use serve_support::stalling_origin::{Answers, StallingOrigin};
    let one: Vec<String> = (1..=10).map(|i| format!("fd00:6466::{i}/64")).collect();
    let mut all: Vec<&str> = one.iter().map(String::as_str).collect();
    all.push("fd00:6467::1/64");
    let _addrs = LoAddrs::add(&all);
    let vol = Vol::create(SMALL_SHAPE);
    let origin = StallingOrigin::start(Answers::Nothing);
    let endpoint = format!("http://{}", origin.addr);
    let server = Server::start_at_env(
        &vol,
        IpAddr::V6(Ipv6Addr::LOCALHOST),
        &["--origin", "s3://films", "--origin-endpoint", &endpoint],
        &[
            ("AWS_ACCESS_KEY_ID", "GKfake"),
            ("AWS_SECRET_ACCESS_KEY", "fake-secret"),
        ],
    );
    let from = |a: &str| -> IpAddr { a.trim_end_matches("/64").parse().unwrap() };
    let conns: Vec<std::net::TcpStream> = one
        .iter()
        .enumerate()
        .map(|(i, a)| send_get(server.addr, from(a), &format!("/o/m{i}.ts")))
        .collect();
    let fills = || server.metrics().get("isnode_fills_active");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut most = 0.0_f64;
    while Instant::now() < deadline && most < 4.0 {
        most = most.max(fills());
        std::thread::sleep(Duration::from_millis(100));
    }
    // Give the other six requests time to be refused rather than started.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        most.max(fills()),
        4.0,
        "fills one /64 started (fill_max_per_client 4)"
    );
    let other = send_get(server.addr, from("fd00:6467::1/64"), "/o/other.ts");
    let deadline = Instant::now() + Duration::from_secs(10);
    while fills() < 5.0 {
        assert!(
            Instant::now() < deadline,
            "another /64 could not start a fill"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    drop((conns, other));
}

/// A broadcast on IPv6 multicast groups (the server's default `ff15::/64`, `ip_version` 6)
/// in a namespace of the test's own: `isnode play --broadcast` from `[::1]` writes the
/// title byte for byte with no codeword lost.
#[test]
fn a_broadcast_on_ipv6_multicast_groups() {
    let ns = Netns::with_loopback_multicast();
    ns.run(|| {
        let vol = Vol::create(&[]);
        let original = vol.add_ts("t.ts", 2_000_000, 4.0, 63);
        let server = Server::start_at(&vol, IpAddr::V6(Ipv6Addr::LOCALHOST), &[]);
        let r = broadcast_v6(&server);
        let groups = r.json()["channels"].to_string();
        assert!(groups.contains("ff15:"), "groups of the channels: {groups}");
        let deadline = Instant::now() + Duration::from_secs(60);
        let played = play_run(&server, &vol, "t.ts", "b6", &["--broadcast"], deadline);
        assert_whole_broadcast(&played, &original);
    });
}

/// Starts a broadcast of `t.ts` on `server`'s IPv6 groups (cautious harmonic, 2 s wait):
/// its `201` answer.
fn broadcast_v6(server: &Server) -> Resp {
    let body = serde_json::json!({
        "object": "t.ts", "scheme": "cautious-harmonic", "max_wait_s": 2.0, "ip_version": 6
    })
    .to_string();
    let r = server.req("POST", "/v1/broadcasts", Some(&body));
    assert_eq!(r.status, 201, "{}", r.body);
    r
}

/// `play --broadcast` wrote `original` whole with no codeword lost (lateness on a loaded
/// machine fails the exit status, not the bytes: the bytes and the lost codewords are what
/// these tests are about).
#[track_caller]
fn assert_whole_broadcast(played: &Played, original: &[u8]) {
    assert!(
        played.bytes() == original,
        "broadcast output differs: {}",
        played.log
    );
    assert!(played.log.contains(", 0 lost,"), "{}", played.log);
}

/// Three edges on `[::1]`, each named in the node list by its `http://[::1]:PORT` URL: every
/// node sees the others live (probes over IPv6), edge-0 redirects a title edge-1 owns to
/// edge-1's IPv6 URL, whose content is the title's bytes, and `isnode play` asking edge-0
/// plays the title from edge-1.
#[test]
fn a_cluster_over_ipv6_probes_redirects_and_plays() {
    let local = |_: usize| IpAddr::V6(Ipv6Addr::LOCALHOST);
    Cluster::start(local, &[]).check();
}

/// The same cluster across namespaces with no IPv4 at all: each edge in a namespace of its
/// own on one bridge (`fd00:6272::1..3`), the viewer (curl, `isnode play`) in a fourth.
#[test]
fn a_cluster_across_ipv6_only_namespaces() {
    let bridge = Bridge::ipv6_only(4);
    let cluster = Cluster::start(Bridge::addr, &bridge.members[..3]);
    bridge.members[3].run(|| cluster.check());
}

/// Three edges, each holding the same eight titles, named in one node list.
struct Cluster {
    vols: Vec<Vol>,
    titles: Vec<String>,
    originals: Vec<Vec<u8>>,
    nodes: Vec<isnode_edge::placement::Node>,
    edges: Vec<Server>,
}

impl Cluster {
    /// Edge `i` listens on `ip(i)`, in namespace `within[i]` if there is one (else in the
    /// test's own).
    fn start(ip: impl Fn(usize) -> IpAddr, within: &[Netns]) -> Cluster {
        use isnode_edge::placement::Node;
        let vols: Vec<Vol> = (0..3).map(|_| Vol::create(&[])).collect();
        let titles: Vec<String> = (0..8).map(|i| format!("t{i}.ts")).collect();
        let mut originals = Vec::new();
        for (i, t) in titles.iter().enumerate() {
            for v in &vols {
                // The same seed: the same bytes on every edge.
                let bytes = v.add_ts(t, 1_000_000, 1.0, 80 + i as u64);
                if originals.len() == i {
                    originals.push(bytes);
                }
            }
        }
        let addrs: Vec<SocketAddr> = (0..3)
            .map(|i| {
                let at = ip(i);
                SocketAddr::new(at, in_ns(within.get(i), || free_port_on(at)))
            })
            .collect();
        let nodes: Vec<Node> = (0..3)
            .map(|i| Node {
                name: format!("edge-{i}"),
                url: format!("http://{}", addrs[i]),
                weight: 1.0,
            })
            .collect();
        let edges = (0..3)
            .map(|i| {
                let config = node_list(&vols[i], i, &nodes);
                in_ns(within.get(i), || {
                    let mut args = vec!["--config", config.as_str()];
                    if within.get(i).is_some() {
                        args.extend(OPEN_ON_THE_BRIDGE);
                    }
                    Server::start_on_addr(&vols[i], addrs[i], &args)
                })
            })
            .collect();
        Cluster {
            vols,
            titles,
            originals,
            nodes,
            edges,
        }
    }

    /// Every node sees the others live; edge-0 redirects a title edge-1 owns to edge-1's
    /// URL; curl following it gets the title's bytes; `isnode play` asking edge-0 plays it
    /// from edge-1.
    fn check(&self) {
        use isnode_edge::placement::owner;
        for e in &self.edges {
            wait_all_live(e);
        }
        let live = [true; 3];
        let (i, title) = self
            .titles
            .iter()
            .enumerate()
            .find(|(_, t)| owner(&self.nodes, &live, t) == Some(1))
            .expect("edge-1 owns one of 8 titles");
        let r = self.edges[0].req("GET", &format!("/o/{title}"), None);
        assert_eq!(r.status, 307, "{}", r.body);
        let location = r.header("location").unwrap_or_default().to_string();
        assert_eq!(location, format!("{}/o/{title}", self.nodes[1].url));
        let got = self.vols[0].path("fetched.ts");
        let curl = Command::new("curl")
            .args(["-sS", "-g", "-L", "-o"])
            .arg(&got)
            .arg(format!("{}/o/{title}", self.nodes[0].url))
            .status()
            .expect("curl is needed by this test: run scripts/test");
        assert!(curl.success());
        assert!(
            std::fs::read(&got).unwrap() == self.originals[i],
            "the content differs"
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        let played = play_run(&self.edges[0], &self.vols[0], title, "c6", &[], deadline);
        assert!(played.status.success(), "isnode play: {}", played.log);
        assert!(
            played.bytes() == self.originals[i],
            "the played output differs"
        );
        let started = |e: &Server| e.metrics().get("isnode_sessions_started_total");
        assert_eq!(started(&self.edges[1]), 1.0, "the session was edge-1's");
        assert_eq!(started(&self.edges[0]), 0.0);
    }
}

/// `f`, run in `ns` if given, else on this thread.
fn in_ns<T: Send>(ns: Option<&Netns>, f: impl FnOnce() -> T + Send) -> T {
    match ns {
        Some(ns) => ns.run(f),
        None => f(),
    }
}

/// Writes edge `i`'s config (its name, fast probes, the node list) into its volume; the
/// file's path.
fn node_list(vol: &Vol, i: usize, nodes: &[isnode_edge::placement::Node]) -> String {
    let mut t =
        format!("node_name = \"edge-{i}\"\nprobe_interval_ms = 100\nprobe_failures_to_dead = 2\n");
    for n in nodes {
        t.push_str(&format!(
            "[[nodes]]\nname = \"{}\"\nurl = \"{}\"\nweight = 1.0\n",
            n.name, n.url
        ));
    }
    let path = vol.path("edge.toml");
    std::fs::write(&path, t).unwrap();
    path.to_str().expect("a UTF-8 path").to_string()
}

/// Waits (bounded) until `e` sees all three nodes live.
fn wait_all_live(e: &Server) {
    let by = Instant::now() + Duration::from_secs(30);
    loop {
        let v = e.req("GET", "/v1/cluster", None);
        let live = v.json()["nodes"]
            .as_array()
            .map_or(0, |n| n.iter().filter(|n| n["live"] == true).count());
        if live == 3 {
            return;
        }
        assert!(Instant::now() < by, "not every node live: {}", v.body);
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// IPv6 only: in a namespace of the test's own whose loopback has no IPv4 address at all
/// (`127.0.0.1/8` removed), a server on `[::1]` streams a title to `isnode play` over UDP,
/// serves its bytes over HTTP, and broadcasts it on `ff15::` groups to `play --broadcast`:
/// nothing in the server or the client needs IPv4.
#[test]
fn everything_in_a_namespace_without_ipv4() {
    let ns = Netns::with_loopback_multicast();
    ns.run(|| {
        let out = Command::new("ip")
            .args(["addr", "del", "127.0.0.1/8", "dev", "lo"])
            .output()
            .expect("ip (iproute2) is needed by this test: run scripts/test");
        assert!(out.status.success(), "removing 127.0.0.1 from lo: {out:?}");
        let v4 = std::net::UdpSocket::bind("127.0.0.1:0");
        assert!(v4.is_err(), "the namespace still has IPv4 on its loopback");
        let vol = Vol::create(&[]);
        let original = vol.add_ts("t.ts", 2_000_000, 4.0, 64);
        let server = Server::start_at(&vol, IpAddr::V6(Ipv6Addr::LOCALHOST), &[]);
        let deadline = Instant::now() + Duration::from_secs(60);
        let played = play_run(&server, &vol, "t.ts", "v6only", &[], deadline);
        assert!(played.status.success(), "isnode play: {}", played.log);
        assert!(played.bytes() == original, "the played output differs");
        let content = server.req("GET", "/v1/objects/t.ts/index.m3u8", None);
        assert_eq!(content.status, 200, "{}", content.body);
        broadcast_v6(&server);
        let deadline = Instant::now() + Duration::from_secs(60);
        let played = play_run(&server, &vol, "t.ts", "b6only", &["--broadcast"], deadline);
        assert_whole_broadcast(&played, &original);
    });
}

/// Across namespaces with no IPv4 at all, on one bridge: a server at `fd00:6272::1` sends a
/// title to `isnode play` in another namespace over UDP, serves its bytes over HTTP (curl),
/// and broadcasts it on `ff15::` groups out of its `eth0` to `play --broadcast` in two other
/// namespaces at once (the bridge floods the groups to both ports).
#[test]
fn a_broadcast_crosses_a_bridge_of_ipv6_only_namespaces() {
    let bridge = Bridge::ipv6_only(3);
    let vol = Vol::create(&[]);
    let original = vol.add_ts("t.ts", 2_000_000, 4.0, 65);
    let server = bridge.members[0].run(|| {
        Server::start_at(
            &vol,
            Bridge::addr(0),
            &[
                "--multicast-if",
                "eth0",
                OPEN_ON_THE_BRIDGE[0],
                OPEN_ON_THE_BRIDGE[1],
            ],
        )
    });
    bridge.members[1].run(|| {
        let deadline = Instant::now() + Duration::from_secs(60);
        let played = play_run(&server, &vol, "t.ts", "u6", &[], deadline);
        assert!(played.status.success(), "isnode play: {}", played.log);
        assert!(played.bytes() == original, "the played output differs");
        let got = vol.path("fetched.ts");
        let curl = Command::new("curl")
            .args(["-sS", "-g", "-f", "-o"])
            .arg(&got)
            .arg(format!("{}/o/t.ts", server.url()))
            .status()
            .expect("curl is needed by this test: run scripts/test");
        assert!(curl.success());
        assert!(
            std::fs::read(&got).unwrap() == original,
            "the content differs"
        );
        broadcast_v6(&server);
    });
    let played: Vec<Played> = std::thread::scope(|scope| {
        let runs: Vec<_> = [1, 2]
            .map(|k| {
                let (ns, server, vol) = (&bridge.members[k], &server, &vol);
                scope.spawn(move || {
                    let deadline = Instant::now() + Duration::from_secs(60);
                    let tag = format!("b6-{k}");
                    ns.run(|| play_run(server, vol, "t.ts", &tag, &["--broadcast"], deadline))
                })
            })
            .into_iter()
            .collect();
        runs.into_iter()
            .map(|r| r.join().expect("a receiver's thread"))
            .collect()
    });
    for p in &played {
        assert_whole_broadcast(p, &original);
    }
}
