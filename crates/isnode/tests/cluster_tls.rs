//! Clusters over HTTPS (issue 30, item 3): edges named `https://` probe each other over TLS
//! trusting `cluster_ca_file` (one self-signed certificate, `isnode cert`) and redirect a
//! viewer, token and all, to a title's node, whose content and stream it plays; a redirect
//! to a plain-HTTP node never carries the viewer's `?token=`.

mod serve_support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use isnode_edge::placement::{owner, Node};
use serve_support::*;

/// A viewer token (with the metrics role too, for `/v1/cluster`) added to `vol`'s token
/// file, which is returned with the token.
fn viewer_token(vol: &Vol) -> (PathBuf, String) {
    let out = run_ok(&[
        "token",
        "add",
        "--volume",
        vol.root.to_str().unwrap(),
        "--role",
        "viewer",
        "--role",
        "metrics",
        "--name",
        "tv",
    ]);
    (vol.root.join("tokens.json"), out.trim().to_string())
}

/// The configuration of node `me` of `nodes`: a closed server (tokens from `tokens`),
/// over HTTPS when `tls` (certificate, key) is given, probing every 100 ms.
fn write_config(
    path: &Path,
    me: usize,
    nodes: &[Node],
    tokens: &Path,
    tls: Option<(&Path, &Path)>,
) {
    let mut t = format!(
        "node_name = \"edge-{me}\"\nprobe_interval_ms = 100\nprobe_timeout_ms = 2000\n\
         probe_failures_to_dead = 2\nanonymous_viewers = false\ntokens_file = {:?}\n",
        tokens.to_str().unwrap()
    );
    if let Some((cert, key)) = tls {
        t.push_str(&format!(
            "tls_cert = {:?}\ntls_key = {:?}\ncluster_ca_file = {:?}\n",
            cert.to_str().unwrap(),
            key.to_str().unwrap(),
            cert.to_str().unwrap()
        ));
    }
    for n in nodes {
        t.push_str(&format!(
            "[[nodes]]\nname = \"{}\"\nurl = \"{}\"\nweight = 1.0\n",
            n.name, n.url
        ));
    }
    std::fs::write(path, t).unwrap();
}

/// An HTTPS client trusting `ca` that follows no redirect.
fn agent(ca: &Path) -> ureq::Agent {
    let pem = std::fs::read(ca).unwrap();
    let certs: Vec<_> = ureq::tls::parse_pem(&pem)
        .filter_map(|i| match i.unwrap() {
            ureq::tls::PemItem::Certificate(c) => Some(c),
            _ => None,
        })
        .collect();
    let tls = ureq::tls::TlsConfig::builder()
        .root_certs(ureq::tls::RootCerts::Specific(std::sync::Arc::new(certs)))
        .build();
    ureq::Agent::config_builder()
        .tls_config(tls)
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .new_agent()
}

/// `GET /v1/cluster` of the node at `url`: each node's (name, live, failed probes in a row).
fn cluster_view(agent: &ureq::Agent, url: &str, token: &str) -> Vec<(String, bool, u64)> {
    let mut r = agent
        .get(format!("{url}/v1/cluster"))
        .header("Authorization", format!("Bearer {token}"))
        .call()
        .unwrap();
    let body = r.body_mut().read_to_string().unwrap();
    assert_eq!(r.status().as_u16(), 200, "{url}/v1/cluster: {body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["name"].as_str().unwrap().to_string(),
                n["live"].as_bool().unwrap(),
                n["failed_probes"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Waits (bounded) until `ok` holds of the node's view of the cluster.
fn wait_view(
    agent: &ureq::Agent,
    url: &str,
    token: &str,
    what: &str,
    ok: impl Fn(&[(String, bool, u64)]) -> bool,
) {
    let by = Instant::now() + Duration::from_secs(30);
    loop {
        let view = cluster_view(agent, url, token);
        if ok(&view) {
            return;
        }
        assert!(Instant::now() < by, "{url}: {what}: {view:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `isnode play` of `name` from `url` over HTTPS with `ca` and `token`; (success, log,
/// output).
fn play(dir: &Vol, url: &str, name: &str, ca: &Path, token: &str) -> (bool, String, Vec<u8>) {
    let out = dir.path("played.ts");
    let stderr = dir.path("play.stderr");
    let mut child = ChildGuard(Some(
        command()
            .args(["play", name, "--server", url, "--out"])
            .arg(&out)
            .args(["--ca-cert", ca.to_str().unwrap(), "--token", token])
            .args([
                "--as-fast-as-possible",
                "--timeout-s",
                "5",
                "--max-seconds",
                "30",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("spawning isnode play"),
    ));
    let status = child.wait_until(Instant::now() + Duration::from_secs(60), "isnode play");
    let log = std::fs::read_to_string(&stderr).unwrap_or_default();
    (
        status.success(),
        log,
        std::fs::read(&out).unwrap_or_default(),
    )
}

/// Three edges over HTTPS, one self-signed certificate as the cluster's CA: edge-0's probes
/// of peers not yet started fail (they go dead), then succeed over TLS (live again); a
/// viewer asking edge-0 for a title edge-1 owns is redirected there, its token carried to
/// the https:// node, and plays the title byte-identical (HTTP content and `isnode play`).
#[test]
fn a_cluster_over_https_probes_and_redirects_to_the_titles_node() {
    let vols: Vec<Vol> = (0..3).map(|_| Vol::create(SMALL_SHAPE)).collect();
    let titles: Vec<String> = (0..8).map(|i| format!("t{i}.ts")).collect();
    let mut originals = Vec::new();
    for (i, t) in titles.iter().enumerate() {
        for v in &vols {
            // The same seed: the same bytes on every edge.
            let bytes = v.add_ts(t, 1_000_000, 1.0, 70 + i as u64);
            if originals.len() == i {
                originals.push(bytes);
            }
        }
    }
    run_ok(&["cert", "--out", vols[0].path("pair").to_str().unwrap()]);
    let (cert, key) = (vols[0].path("pair/cert.pem"), vols[0].path("pair/key.pem"));
    let (tokens, token) = viewer_token(&vols[0]);
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let nodes: Vec<Node> = (0..3)
        .map(|i| Node {
            name: format!("edge-{i}"),
            url: format!("https://127.0.0.1:{}", ports[i]),
            weight: 1.0,
        })
        .collect();
    let urls: Vec<String> = nodes.iter().map(|n| n.url.clone()).collect();
    let config = |i: usize| {
        let path = vols[i].path("edge.toml");
        write_config(&path, i, &nodes, &tokens, Some((&cert, &key)));
        path
    };
    let ok = config(0);
    let check = run_ok(&["config", "check", ok.to_str().unwrap()]);
    assert!(check.contains("cluster_ca_file"), "{check}");
    let agent = agent(&cert);

    let start = |i: usize| {
        Server::start_on(
            &vols[i],
            ports[i],
            &["--config", config(i).to_str().unwrap()],
            &[],
        )
    };
    let _edge0 = start(0);
    // Its peers are not there yet: edge-0's probes fail and count them dead.
    wait_view(&agent, &urls[0], &token, "peers not dead", |v| {
        v.iter().filter(|n| n.0 != "edge-0").all(|n| !n.1)
    });
    let _edge1 = start(1);
    let _edge2 = start(2);
    // Live again only at a probe answered over TLS.
    for url in &urls {
        wait_view(&agent, url, &token, "every node live", |v| {
            v.len() == 3 && v.iter().all(|n| n.1 && n.2 == 0)
        });
    }

    let live = [true; 3];
    let (i, title) = titles
        .iter()
        .enumerate()
        .find(|(_, t)| owner(&nodes, &live, t) == Some(1))
        .expect("edge-1 owns one of 8 titles");
    // HTTP content: 307 to edge-1 with the token (an https:// node), then the bytes.
    let asked = format!("{}/o/{title}?token={token}", urls[0]);
    let r = agent.get(&asked).call().unwrap();
    assert_eq!(r.status().as_u16(), 307, "{asked}");
    let location = r.headers()["location"].to_str().unwrap().to_string();
    assert_eq!(location, format!("{}/o/{title}?token={token}", urls[1]));
    let mut r = agent.get(&location).call().unwrap();
    assert_eq!(r.status().as_u16(), 200, "{location}");
    let ranking = r.headers()["isnode-ranking"].to_str().unwrap().to_string();
    assert!(ranking.starts_with(&urls[1]), "{ranking}");
    let bytes = r
        .body_mut()
        .with_config()
        .limit(64 << 20)
        .read_to_vec()
        .unwrap();
    assert!(bytes == originals[i], "the content from edge-1 differs");

    // `isnode play` asking edge-0: the session opens on edge-1 (its token carried there).
    let (ok, log, played) = play(&vols[0], &urls[0], title, &cert, &token);
    assert!(ok, "play through the HTTPS cluster failed:\n{log}");
    assert!(played == originals[i], "the played output differs:\n{log}");
    // The session was edge-1's (a closed server: the token reached it), none edge-0's.
    assert_eq!(sessions_started(&agent, &urls[1], &token), 1, "{log}");
    assert_eq!(sessions_started(&agent, &urls[0], &token), 0, "{log}");
}

/// `isnode_sessions_started_total` of the node at `url`.
fn sessions_started(agent: &ureq::Agent, url: &str, token: &str) -> u64 {
    let mut r = agent
        .get(format!("{url}/metrics"))
        .header("Authorization", format!("Bearer {token}"))
        .call()
        .unwrap();
    let text = r.body_mut().read_to_string().unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("isnode_sessions_started_total "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
        .unwrap_or_else(|| panic!("{url}/metrics: no sessions_started:\n{text}"))
}

/// Two plain-HTTP edges (edge-1 need not run: a request is redirected, never forwarded):
/// a viewer's `?token=` stays out of the `Location` to the http:// node, whatever the route
/// (content, HLS playlist); the rest of the query goes on.
#[test]
fn a_redirect_to_a_plain_http_node_carries_no_token() {
    let vol = Vol::create(SMALL_SHAPE);
    let titles: Vec<String> = (0..8)
        .map(|i| {
            let name = format!("t{i}.ts");
            vol.add_ts(&name, 1_000_000, 0.5, 90 + i);
            name
        })
        .collect();
    let (tokens, token) = viewer_token(&vol);
    let ports = [free_port(), free_port()];
    let nodes: Vec<Node> = (0..2)
        .map(|i| Node {
            name: format!("edge-{i}"),
            url: format!("http://127.0.0.1:{}", ports[i]),
            weight: 1.0,
        })
        .collect();
    let config = vol.path("edge.toml");
    write_config(&config, 0, &nodes, &tokens, None);
    // edge-1 never answers; it must stay live for the redirect (probes every minute).
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "probe_failures_to_dead = 2",
        "probe_failures_to_dead = 1000",
    );
    std::fs::write(&config, text).unwrap();
    let server = Server::start_on(&vol, ports[0], &["--config", config.to_str().unwrap()], &[]);
    let title = titles
        .iter()
        .find(|t| owner(&nodes, &[true; 2], t) == Some(1))
        .expect("edge-1 owns one of 8 titles");
    for path in [
        format!("/o/{title}?token={token}"),
        format!("/v1/objects/{title}/index.m3u8?a=1&token={token}"),
    ] {
        let r = http(server.addr, None, "GET", &path, None, &[]);
        assert_eq!(r.status, 307, "{path}: {}", r.body);
        let location = r
            .headers
            .iter()
            .find(|(k, _)| k == "location")
            .map(|(_, v)| v.clone())
            .unwrap();
        assert!(location.starts_with(&nodes[1].url), "{location}");
        assert!(
            !location.contains(&token),
            "the token went to plain HTTP: {location}"
        );
        assert!(!location.contains("token="), "{location}");
        if path.contains("a=1") {
            assert!(location.ends_with("index.m3u8?a=1"), "{location}");
        }
    }
    // With the token in Authorization the redirect is the same (and carries nothing).
    let auth = format!("Bearer {token}");
    let r = http(
        server.addr,
        None,
        "GET",
        &format!("/o/{title}"),
        None,
        &[("authorization", &auth)],
    );
    assert_eq!(r.status, 307);
}
