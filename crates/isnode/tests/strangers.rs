//! What an anonymous client can no longer do to a node (issue 30's medium and low
//! findings, each a test that failed before its fix): unvalidated sessions do not make the
//! node report load; a playlist carrying a token is private to its viewer; an object's
//! bytes are never sniffed nor run as the status page's origin; an upload's `Location` is
//! a valid URL whatever the name.

mod serve_support;

use serve_support::*;

/// Sessions whose destination never echoes its token (anyone can ask for them) take no
/// budget, so they must not raise the load `GET /v1/health` reports (the cluster's
/// placement moves titles off a loaded node, and `--broadcast auto` starts broadcasts).
#[test]
fn sessions_awaiting_their_echo_do_not_count_in_the_reported_load() {
    let vol = Vol::create(&[]);
    vol.add_ts("t.ts", 8_000_000, 6.0, 1);
    let server = Server::start(
        &vol,
        &[
            "--max-bitrate-bps",
            "20000000",
            "--validate-timeout-ms",
            "20000",
        ],
    );
    for i in 0..2 {
        let r = server.post_session("t.ts", 41_000 + i);
        assert_eq!(r.status, 201, "{}", r.body);
    }
    let health = server.req("GET", "/v1/health", None);
    assert_eq!(health.status, 200, "{}", health.body);
    let load = health.json()["load"].as_f64().unwrap();
    assert_eq!(
        load, 0.0,
        "load with two unvalidated sessions: {}",
        health.body
    );
}

/// A playlist that carries a viewer's token onto its segment URIs is that viewer's:
/// `Cache-Control: private, no-store`. One without a token is not marked.
#[test]
fn a_playlist_carrying_a_token_is_not_cached() {
    let vol = Vol::create(&[]);
    vol.add_ts("t.ts", 2_000_000, 4.0, 2);
    let server = Server::start(&vol, &[]);
    let token = "ab".repeat(16);
    let r = server.req(
        "GET",
        &format!("/v1/objects/t.ts/index.m3u8?token={token}"),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains(&token), "{}", r.body);
    assert_eq!(r.header("cache-control"), Some("private, no-store"));
    let r = server.req("GET", "/v1/objects/t.ts/index.m3u8", None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("cache-control"), None);
}

/// An object's bytes go out with the type its operator chose, on the status page's
/// origin: never sniffed, and sandboxed (a script in them cannot act as the page).
#[test]
fn an_object_s_bytes_are_neither_sniffed_nor_run_as_the_page() {
    let vol = Vol::create(&[]);
    vol.add_ts("t.ts", 2_000_000, 2.0, 3);
    let server = Server::start(&vol, &[]);
    for path in ["/o/t.ts", "/v1/objects/t.ts/content"] {
        let r = http(
            server.addr,
            None,
            "GET",
            path,
            None,
            &[("Range", "bytes=0-187")],
        );
        assert_eq!(r.status, 206, "{path}: {}", r.body);
        assert_eq!(
            r.header("x-content-type-options"),
            Some("nosniff"),
            "{path}"
        );
        assert_eq!(
            r.header("content-security-policy"),
            Some("sandbox"),
            "{path}"
        );
    }
}

/// An upload's `Location` is a valid URL path whatever its name holds (a space, `%`,
/// non-ASCII): the name percent-encoded.
#[test]
fn an_upload_s_location_is_percent_encoded() {
    let vol = Vol::create(SMALL_SHAPE);
    let server = Server::start(&vol, &[]);
    let file = vol.path("in.ts");
    gen_ts(&file, 2_000_000, 1.0, 4);
    let out = std::process::Command::new("curl")
        .args([
            "-sS",
            "-D",
            "-",
            "-o",
            "/dev/null",
            "--max-time",
            "30",
            "-T",
        ])
        .arg(&file)
        .arg(format!("{}/v1/objects/a%20b%25%C3%A9.ts", server.url()))
        .output()
        .expect("curl (scripts/test installs it)");
    let head = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    assert!(head.contains("http/1.1 201"), "{head}");
    assert!(
        head.contains("location: /v1/objects/a%20b%25%c3%a9.ts\r\n"),
        "{head}"
    );
}

/// A viewer is not told what the origin said (its endpoint, its bucket): `502` with a
/// plain message; the operator's log has the rest.
#[test]
fn a_viewer_is_not_told_the_origin_s_details() {
    let vol = Vol::create(SMALL_SHAPE);
    let dead = free_port();
    let endpoint = format!("http://127.0.0.1:{dead}");
    let server = Server::start_env(
        &vol,
        &[
            "--origin",
            "s3://films-bucket",
            "--origin-endpoint",
            &endpoint,
        ],
        &[
            ("AWS_ACCESS_KEY_ID", "GKfake"),
            ("AWS_SECRET_ACCESS_KEY", "fake-secret"),
        ],
    );
    let r = server.req("GET", "/o/film.ts", None);
    assert_eq!(r.status, 502, "{}", r.body);
    for secret in [dead.to_string().as_str(), "films-bucket", "GKfake"] {
        assert!(!r.body.contains(secret), "{secret:?} in {}", r.body);
    }
}

/// A draining server starts no fill: a title only at the origin is `503` with
/// `Retry-After` while sessions finish.
#[test]
fn a_draining_edge_starts_no_fill() {
    let vol = Vol::create(SMALL_SHAPE);
    vol.add_ts("held.ts", 2_000_000, 20.0, 8);
    let dir = vol.path("origin");
    std::fs::create_dir_all(&dir).unwrap();
    gen_ts(&dir.join("new.ts"), 2_000_000, 2.0, 9);
    let url = format!("file://{}", dir.display());
    let server = Server::start(&vol, &["--origin", &url]);
    let sock = udp("127.0.0.1".parse().unwrap(), 0).unwrap();
    server.open_session("held.ts", &sock);
    let pid = libc::pid_t::try_from(server.pid()).unwrap();
    // SAFETY: kill(2) with a child's pid and a signal number has no memory effects.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !server.log_text().contains("draining") {
        assert!(
            std::time::Instant::now() < deadline,
            "{}",
            server.log_text()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let r = server.req("GET", "/o/new.ts", None);
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.body.contains("draining"), "{}", r.body);
    assert_eq!(r.header("retry-after"), Some("5"));
}

/// On an edge closed to anonymous viewers, a request without a token is refused (`401`)
/// before any placement: a stranger learns neither where a title lives (no redirect) nor
/// its ranking (`Isnode-Ranking` goes with what is served only).
#[test]
fn strangers_get_no_redirect_nor_ranking_before_authentication() {
    let vol = Vol::create(SMALL_SHAPE);
    let titles: Vec<String> = (0..12)
        .map(|i| {
            let name = format!("t{i}.ts");
            vol.add_ts(&name, 1_000_000, 0.5, 60 + i);
            name
        })
        .collect();
    let root = vol.root.to_str().unwrap();
    let token = run_ok(&[
        "token", "add", "--volume", root, "--role", "viewer", "--name", "v",
    ])
    .trim()
    .to_string();
    let me = free_port();
    let config = vol.path("edge.toml");
    let mut text = String::from(
        "node_name = \"edge-0\"\nprobe_interval_ms = 60000\nprobe_failures_to_dead = 1000\n",
    );
    for (i, port) in [me, free_port(), free_port()].iter().enumerate() {
        text.push_str(&format!(
            "[[nodes]]\nname = \"edge-{i}\"\nurl = \"http://127.0.0.1:{port}\"\nweight = 1.0\n"
        ));
    }
    std::fs::write(&config, text).unwrap();
    let server = Server::start_on(
        &vol,
        me,
        &[
            "--config",
            config.to_str().unwrap(),
            "--anonymous-viewers",
            "false",
        ],
        &[],
    );
    let (mut redirected, mut served) = (0, 0);
    for t in &titles {
        let r = http(server.addr, None, "GET", &format!("/o/{t}"), None, &[]);
        // 401, or 429 once this address has failed too often: refused either way.
        assert!(
            [401, 429].contains(&r.status),
            "{t} without a token: {} {}",
            r.status,
            r.body
        );
        assert_eq!(
            r.header("isnode-ranking"),
            None,
            "{t}: a ranking with a 401"
        );
        let auth = format!("Bearer {token}");
        let r = http(
            server.addr,
            None,
            "GET",
            &format!("/o/{t}"),
            None,
            &[("Authorization", &auth), ("Range", "bytes=0-187")],
        );
        match r.status {
            307 => redirected += 1,
            206 => served += 1,
            s => panic!("{t} with a token: {s} {}", r.body),
        }
    }
    assert!(
        redirected > 0 && served > 0,
        "{redirected} redirected, {served} served"
    );
}
