//! Operating a cluster of edges (issue 19): a node list reloaded on SIGHUP moves the titles
//! at once, without a restart; an owner over the load bound (its load carried by its health
//! answer) sends new sessions to the next node of the title's ranking. The reload test runs
//! one edge (the others are names and URLs: a request is redirected, never forwarded, so
//! they need not run; never found dead: `probe_failures_to_dead` high).

mod serve_support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use isnode_edge::placement::{owner, Node};
use serve_support::*;

fn signal(server: &Server, sig: libc::c_int) {
    let pid = libc::pid_t::try_from(server.pid()).unwrap();
    // SAFETY: kill(2) with a child's pid and a signal number has no memory effects.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0, "kill({pid}, {sig})");
}

/// The configuration of node `edge-0` with `nodes`.
fn write_config(path: &Path, nodes: &[Node]) {
    let mut t = String::from(
        "node_name = \"edge-0\"\nprobe_interval_ms = 60000\nprobe_failures_to_dead = 1000\n",
    );
    for n in nodes {
        t.push_str(&format!(
            "[[nodes]]\nname = \"{}\"\nurl = \"{}\"\nweight = {:.1}\n",
            n.name, n.url, n.weight
        ));
    }
    std::fs::write(path, t).unwrap();
}

fn node(i: usize, port: u16) -> Node {
    Node {
        name: format!("edge-{i}"),
        url: format!("http://127.0.0.1:{port}"),
        weight: 1.0,
    }
}

/// SIGHUP, then waits (bounded) for one more "configuration reloaded" in the log; the
/// reload must keep no running value (nothing of the node list needs a restart).
fn reload(server: &Server) {
    let count = || server.log_text().matches("configuration reloaded").count();
    let n = count();
    signal(server, libc::SIGHUP);
    let by = Instant::now() + Duration::from_secs(10);
    while count() <= n {
        assert!(Instant::now() < by, "no reload:\n{}", server.log_text());
        std::thread::sleep(Duration::from_millis(20));
    }
    // Both lines of the reload (the log's and stderr's) are written by now or soon.
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        !server.log_text().contains("needs a restart"),
        "{}",
        server.log_text()
    );
}

/// Each title's answer at the edge: `None` when served here (200), else where it is sent.
fn placed(server: &Server, titles: &[String]) -> Vec<Option<String>> {
    titles
        .iter()
        .map(|t| {
            let r = http(server.addr, None, "GET", &format!("/o/{t}"), None, &[]);
            match r.status {
                200 => None,
                307 => r
                    .headers
                    .iter()
                    .find(|(k, _)| k == "location")
                    .map(|(_, v)| v.clone()),
                s => panic!("{t}: status {s}: {}", r.body),
            }
        })
        .collect()
}

/// What the placement says for `nodes` (all live): `None` for titles edge-0 owns.
fn expected(nodes: &[Node], titles: &[String]) -> Vec<Option<String>> {
    let live = vec![true; nodes.len()];
    titles
        .iter()
        .map(|t| {
            let own = owner(nodes, &live, t).unwrap();
            (nodes[own].name != "edge-0").then(|| format!("{}/o/{t}", nodes[own].url))
        })
        .collect()
}

#[test]
fn a_node_list_reloaded_on_sighup_moves_the_titles_at_once() {
    let vol = Vol::create(SMALL_SHAPE);
    let titles: Vec<String> = (0..8)
        .map(|i| {
            let name = format!("t{i}.ts");
            vol.add_ts(&name, 1_000_000, 0.5, 50 + i);
            name
        })
        .collect();
    let me = free_port();
    let peers = [free_port(), free_port()];
    let config = vol.path("edge.toml");
    let two = vec![node(0, me), node(1, peers[0])];
    write_config(&config, &two);
    let server = Server::start_on(&vol, me, &["--config", config.to_str().unwrap()], &[]);
    let before = placed(&server, &titles);
    assert_eq!(before, expected(&two, &titles));
    assert!(
        before.iter().any(Option::is_some),
        "edge-1 owns some: {before:?}"
    );
    // A third node joins: its titles go to it, the others stay.
    let three = vec![node(0, me), node(1, peers[0]), node(2, peers[1])];
    write_config(&config, &three);
    reload(&server);
    let after = placed(&server, &titles);
    assert_eq!(after, expected(&three, &titles));
    let cluster = server.req("GET", "/v1/cluster", None);
    assert_eq!(cluster.json()["nodes"].as_array().map(Vec::len), Some(3));
    // edge-1 leaves: its titles go to the next of their ranking.
    let without_1 = vec![node(0, me), node(2, peers[1])];
    write_config(&config, &without_1);
    reload(&server);
    let now = placed(&server, &titles);
    assert_eq!(now, expected(&without_1, &titles));
    assert!(
        now.iter()
            .flatten()
            .all(|l| !l.contains(&peers[0].to_string())),
        "{now:?}"
    );
    assert_ne!(now, after);
    // No list: a single node serving every title.
    std::fs::write(&config, "").unwrap();
    reload(&server);
    assert!(placed(&server, &titles).iter().all(Option::is_none));
    assert_eq!(server.req("GET", "/v1/cluster", None).status, 404);
}

/// Waits (bounded) until `what` of `server`'s `GET path` JSON holds.
fn wait_json(server: &Server, path: &str, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let by = Instant::now() + Duration::from_secs(20);
    loop {
        let r = server.req("GET", path, None);
        if r.status == 200 && ok(&r.json()) {
            return r.json();
        }
        assert!(Instant::now() < by, "{what}: {}", r.body);
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn location(r: &Resp) -> Option<&str> {
    r.headers
        .iter()
        .find(|(k, _)| k == "location")
        .map(|(_, v)| v.as_str())
}

#[test]
fn an_overloaded_owners_new_sessions_go_to_the_next_node_of_the_ranking() {
    let ports = [free_port(), free_port()];
    let nodes = vec![node(0, ports[0]), node(1, ports[1])];
    let title = (0..100)
        .map(|i| format!("t{i}.ts"))
        .find(|t| owner(&nodes, &[true, true], t) == Some(0))
        .unwrap();
    let flag = format!("edge-0={},edge-1={}", nodes[0].url, nodes[1].url);
    let vols = [Vol::create(SMALL_SHAPE), Vol::create(SMALL_SHAPE)];
    for v in &vols {
        v.add_ts(&title, 2_000_000, 30.0, 7);
    }
    let start = |i: usize, extra: &[&str]| {
        let name = format!("edge-{i}");
        let mut args = vec!["--node-name", &name, "--nodes", &flag];
        args.extend_from_slice(&["--probe-interval-ms", "100"]);
        args.extend_from_slice(extra);
        Server::start_on(&vols[i], ports[i], &args, &[])
    };
    // edge-0's budget holds one session of the title (about 2.4 Mbit/s with its repair
    // symbols and headers): one session loads it over half its capacity.
    let a = start(0, &["--max-bitrate-bps", "4000000"]);
    let b = start(1, &[]);
    let body = serde_json::json!({ "object": title, "port": 40_100 }).to_string();
    let sock = udp("127.0.0.1".parse().unwrap(), 0).unwrap();
    let first = a.open_session(&title, &sock);
    let health = wait_json(&a, "/v1/health", "edge-0 loaded", |h| {
        h["load"].as_f64().unwrap_or(0.0) > 0.5
    });
    assert!(health["load"].as_f64().unwrap() <= 1.0, "{health}");
    // edge-0 probed edge-1 before it started: wait until it sees it live.
    wait_json(&a, "/v1/cluster", "edge-0 sees edge-1 live", |c| {
        c["nodes"][1]["live"] == true
    });
    // The owner sends the next session to edge-1, marked as sent for load.
    let r = http(a.addr, None, "POST", "/v1/sessions", Some(&body), &[]);
    assert_eq!(r.status, 307, "{}", r.body);
    let want = format!("{}/v1/sessions?isnode_spill=1", nodes[1].url);
    assert_eq!(location(&r), Some(want.as_str()));
    // Asked to serve here anyway, the owner's admission refuses: the bound spared that.
    let here = [("Isnode-Serve-Here", "failover")];
    let r = http(a.addr, None, "POST", "/v1/sessions", Some(&body), &here);
    assert_eq!(r.status, 503, "{}", r.body);
    // edge-1 serves what it is sent, and, once its probes carry edge-0's load, the title's
    // requests asked of it as well.
    let r = http(
        b.addr,
        None,
        "POST",
        "/v1/sessions?isnode_spill=1",
        Some(&body),
        &[],
    );
    assert_eq!(r.status, 201, "{}", r.body);
    wait_json(&b, "/v1/cluster", "edge-1 sees edge-0's load", |c| {
        c["nodes"][0]["load"].as_f64().unwrap_or(0.0) > 0.5
    });
    let r = http(b.addr, None, "POST", "/v1/sessions", Some(&body), &[]);
    assert_eq!(r.status, 201, "{}", r.body);
    // The owner's session ends: its load falls and the title goes back to it.
    let id = first["id"].as_str().unwrap();
    let r = a.session_req("DELETE", id, "", None);
    assert!(r.status == 204 || r.status == 200, "{}", r.body);
    wait_json(&b, "/v1/cluster", "edge-0's load falls", |c| {
        c["nodes"][0]["load"].as_f64().unwrap_or(1.0) < 0.5
    });
    let r = http(b.addr, None, "POST", "/v1/sessions", Some(&body), &[]);
    assert_eq!(r.status, 307, "{}", r.body);
    let want = format!("{}/v1/sessions", nodes[0].url);
    assert_eq!(location(&r), Some(want.as_str()));
}
