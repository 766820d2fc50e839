//! IPv6 end to end on loopback (issue 30, item 4, the part done so far): a server listening
//! on `[::1]` streams a title to `isnode play` over UDP/IPv6 and serves its bytes and its
//! HLS playlist over HTTP; a broadcast on IPv6 multicast groups (`ff15::/64`, in a network
//! namespace of the test's own) reaches `isnode play --broadcast`; a cluster of three edges
//! named by `http://[::1]:PORT` URLs probes, redirects and plays; the per-client limits
//! count an IPv6 client by its /64 (many addresses of one /64 are one client); and all of
//! unicast, HTTP and broadcast in a namespace whose loopback has no IPv4 address at all.
//!
//! Addresses of two /64s are added to `lo` (`ip -6 addr add`, root) and removed at the end.

mod serve_support;

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::process::Command;
use std::time::{Duration, Instant};

use serve_support::netns::Netns;
use serve_support::*;

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
        let body = serde_json::json!({
            "object": "t.ts", "scheme": "cautious-harmonic", "max_wait_s": 2.0, "ip_version": 6
        })
        .to_string();
        let r = server.req("POST", "/v1/broadcasts", Some(&body));
        assert_eq!(r.status, 201, "{}", r.body);
        let groups = r.json()["channels"].to_string();
        assert!(groups.contains("ff15:"), "groups of the channels: {groups}");
        let deadline = Instant::now() + Duration::from_secs(60);
        let played = play_run(&server, &vol, "t.ts", "b6", &["--broadcast"], deadline);
        // Lateness on a loaded machine fails the exit status, not the bytes: the bytes and
        // the lost codewords are what this test is about.
        assert!(
            played.bytes() == original,
            "broadcast output differs: {}",
            played.log
        );
        assert!(played.log.contains(", 0 lost,"), "{}", played.log);
    });
}

/// Three edges on `[::1]`, each named in the node list by its `http://[::1]:PORT` URL: every
/// node sees the others live (probes over IPv6), edge-0 redirects a title edge-1 owns to
/// edge-1's IPv6 URL, whose content is the title's bytes, and `isnode play` asking edge-0
/// plays the title from edge-1.
#[test]
fn a_cluster_over_ipv6_probes_redirects_and_plays() {
    use isnode_edge::placement::{owner, Node};
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
        .map(|_| SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), free_port()))
        .collect();
    let nodes: Vec<Node> = (0..3)
        .map(|i| Node {
            name: format!("edge-{i}"),
            url: format!("http://{}", addrs[i]),
            weight: 1.0,
        })
        .collect();
    let edges: Vec<Server> = (0..3)
        .map(|i| {
            let mut t = format!(
                "node_name = \"edge-{i}\"\nprobe_interval_ms = 100\nprobe_failures_to_dead = 2\n"
            );
            for n in &nodes {
                t.push_str(&format!(
                    "[[nodes]]\nname = \"{}\"\nurl = \"{}\"\nweight = 1.0\n",
                    n.name, n.url
                ));
            }
            let path = vols[i].path("edge.toml");
            std::fs::write(&path, t).unwrap();
            Server::start_on_addr(&vols[i], addrs[i], &["--config", path.to_str().unwrap()])
        })
        .collect();
    for e in &edges {
        let by = Instant::now() + Duration::from_secs(30);
        loop {
            let v = e.req("GET", "/v1/cluster", None);
            let live = v.json()["nodes"]
                .as_array()
                .map_or(0, |n| n.iter().filter(|n| n["live"] == true).count());
            if live == 3 {
                break;
            }
            assert!(Instant::now() < by, "not every node live: {}", v.body);
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let live = [true; 3];
    let (i, title) = titles
        .iter()
        .enumerate()
        .find(|(_, t)| owner(&nodes, &live, t) == Some(1))
        .expect("edge-1 owns one of 8 titles");
    let r = edges[0].req("GET", &format!("/o/{title}"), None);
    assert_eq!(r.status, 307, "{}", r.body);
    let location = r.header("location").unwrap_or_default().to_string();
    assert_eq!(location, format!("{}/o/{title}", nodes[1].url));
    let got = vols[0].path("fetched.ts");
    let curl = Command::new("curl")
        .args(["-sS", "-g", "-L", "-o"])
        .arg(&got)
        .arg(format!("{}/o/{title}", nodes[0].url))
        .status()
        .expect("curl is needed by this test: run scripts/test");
    assert!(curl.success());
    assert!(
        std::fs::read(&got).unwrap() == originals[i],
        "the content differs"
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let played = play_run(&edges[0], &vols[0], title, "c6", &[], deadline);
    assert!(played.status.success(), "isnode play: {}", played.log);
    assert!(played.bytes() == originals[i], "the played output differs");
    let started = |e: &Server| e.metrics().get("isnode_sessions_started_total");
    assert_eq!(started(&edges[1]), 1.0, "the session was edge-1's");
    assert_eq!(started(&edges[0]), 0.0);
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
        let body = serde_json::json!({
            "object": "t.ts", "scheme": "cautious-harmonic", "max_wait_s": 2.0, "ip_version": 6
        })
        .to_string();
        let r = server.req("POST", "/v1/broadcasts", Some(&body));
        assert_eq!(r.status, 201, "{}", r.body);
        let deadline = Instant::now() + Duration::from_secs(60);
        let played = play_run(&server, &vol, "t.ts", "b6only", &["--broadcast"], deadline);
        assert!(
            played.bytes() == original,
            "broadcast output differs: {}",
            played.log
        );
        assert!(played.log.contains(", 0 lost,"), "{}", played.log);
    });
}
