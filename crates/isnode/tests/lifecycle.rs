//! Issue 17, graceful lifecycle, against the real binary on loopback:
//!
//! 1. SIGTERM with five streaming clients and enough grace: new sessions are refused (503,
//!    `Retry-After`), every client's output is the original, the server exits 0.
//! 2. SIGTERM with a short grace: the clients still streaming end with "server shutting
//!    down" (the goodbye datagram), not with a timeout; the server exits 0.
//! 3. A second SIGTERM stops at once.
//! 4. SIGHUP with a broken file keeps the running configuration; with a good one, the new
//!    values apply and the sessions go on.

mod serve_support;

use std::time::{Duration, Instant};

use serve_support::*;

fn signal(server: &Server, sig: libc::c_int) {
    let pid = libc::pid_t::try_from(server.pid()).unwrap();
    // SAFETY: kill(2) with a child's pid and a signal number has no memory effects.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0, "kill({pid}, {sig})");
}

/// Waits (bounded) until the server has `n` active sessions.
#[track_caller]
fn wait_sessions(server: &Server, n: f64, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let active = server.metrics().get("isnode_sessions_active");
        if active >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{active} sessions active, {n} expected:\n{}",
            server.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Plays `name` with `clients` concurrent clients; their results in order.
fn play_all(
    server: &Server,
    vol: &Vol,
    name: &str,
    clients: usize,
    deadline: Instant,
) -> Vec<Played> {
    std::thread::scope(|s| {
        let runs: Vec<_> = (0..clients)
            .map(|i| s.spawn(move || play_run(server, vol, name, &format!("c{i}"), &[], deadline)))
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    })
}

#[test]
fn sigterm_with_enough_grace_lets_every_client_finish() {
    let vol = Vol::create(&[]);
    let original = vol.add_ts("t.ts", 2_000_000, 5.0, 1);
    let mut server = Server::start(&vol, &["--shutdown-grace-s", "60"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    let played = std::thread::scope(|s| {
        let clients = s.spawn(|| play_all(&server, &vol, "t.ts", 5, deadline));
        wait_sessions(&server, 5.0, Duration::from_secs(20));
        signal(&server, libc::SIGTERM);
        // Draining: a new session is refused, saying why and when to come back.
        let refused_by = Instant::now() + Duration::from_secs(10);
        let r = loop {
            let r = server.post_session("t.ts", 40_000);
            if r.status == 503 || Instant::now() > refused_by {
                break r;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(r.status, 503, "{}", r.body);
        assert!(r.body.contains("shutting down"), "{}", r.body);
        assert_eq!(r.header("retry-after"), Some("5"));
        clients.join().unwrap()
    });
    for (i, p) in played.iter().enumerate() {
        assert!(p.status.success(), "client {i}: {}\n{}", p.status, p.log);
        assert!(p.bytes() == original, "client {i}: output differs");
    }
    let status = server.wait_exit(Instant::now() + Duration::from_secs(30));
    assert!(status.success(), "serve: {status}\n{}", server.log_text());
    assert!(
        server.log_text().contains("draining"),
        "{}",
        server.log_text()
    );
}

#[test]
fn sigterm_with_a_short_grace_tells_the_clients() {
    let vol = Vol::create(&[]);
    vol.add_ts("long.ts", 2_000_000, 30.0, 2);
    let mut server = Server::start(&vol, &["--shutdown-grace-s", "1"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    let started = Instant::now();
    let played = std::thread::scope(|s| {
        let clients = s.spawn(|| play_all(&server, &vol, "long.ts", 3, deadline));
        wait_sessions(&server, 3.0, Duration::from_secs(20));
        signal(&server, libc::SIGTERM);
        clients.join().unwrap()
    });
    for (i, p) in played.iter().enumerate() {
        assert!(
            !p.status.success(),
            "client {i} should have been cut:\n{}",
            p.log
        );
        assert!(
            p.log.contains("server shutting down"),
            "client {i} does not say why it ended:\n{}",
            p.log
        );
        assert!(
            !p.log.contains("the server is gone"),
            "client {i}:\n{}",
            p.log
        );
    }
    // Cut by the grace (1 s), not by the title's 30 s or a client timeout.
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "{:?}",
        started.elapsed()
    );
    let status = server.wait_exit(Instant::now() + Duration::from_secs(30));
    assert!(status.success(), "serve: {status}\n{}", server.log_text());
}

#[test]
fn a_second_sigterm_stops_at_once() {
    let vol = Vol::create(&[]);
    vol.add_ts("long.ts", 2_000_000, 30.0, 3);
    let mut server = Server::start(&vol, &["--shutdown-grace-s", "600"]);
    let sock = udp("127.0.0.1".parse().unwrap(), 0).unwrap();
    server.open_session("long.ts", &sock);
    wait_sessions(&server, 1.0, Duration::from_secs(10));
    signal(&server, libc::SIGTERM);
    // The drain has begun (the log says so) before the second signal.
    let begun_by = Instant::now() + Duration::from_secs(10);
    while !server.log_text().contains("draining") {
        assert!(Instant::now() < begun_by, "{}", server.log_text());
        std::thread::sleep(Duration::from_millis(20));
    }
    signal(&server, libc::SIGTERM);
    let status = server.wait_exit(Instant::now() + Duration::from_secs(10));
    assert!(status.success(), "serve: {status}\n{}", server.log_text());
    assert!(
        server.log_text().contains("Interrupted"),
        "{}",
        server.log_text()
    );
}

#[test]
fn sighup_keeps_the_running_config_when_the_file_is_broken() {
    let vol = Vol::create(&[]);
    // Long enough that the first session still streams after two reloads on a busy
    // machine (the second session's refusal needs it).
    let original = vol.add_ts("t.ts", 2_000_000, 12.0, 4);
    let config = vol.path("isnode.toml");
    std::fs::write(&config, "max_sessions_per_client = 16\n").unwrap();
    let server = Server::start(&vol, &["--config", config.to_str().unwrap()]);
    let deadline = Instant::now() + Duration::from_secs(60);
    std::thread::scope(|s| {
        let client = s.spawn(|| play_all(&server, &vol, "t.ts", 1, deadline));
        wait_sessions(&server, 1.0, Duration::from_secs(20));
        let reloads = |n: usize, what: &str| {
            let by = Instant::now() + Duration::from_secs(10);
            while server.log_text().matches(what).count() < n {
                assert!(Instant::now() < by, "no {what:?}:\n{}", server.log_text());
                std::thread::sleep(Duration::from_millis(20));
            }
        };
        std::fs::write(&config, "max_sessions_per_client = 16\nno_such_key = 1\n").unwrap();
        signal(&server, libc::SIGHUP);
        reloads(1, "reload refused");
        assert!(
            server.log_text().contains("no_such_key"),
            "{}",
            server.log_text()
        );
        // A good file: its values apply; a restart-only change is reported and kept.
        std::fs::write(
            &config,
            "max_sessions_per_client = 1\nengine = \"sendmmsg\"\n",
        )
        .unwrap();
        signal(&server, libc::SIGHUP);
        reloads(1, "configuration reloaded");
        assert!(
            server.log_text().contains("engine"),
            "{}",
            server.log_text()
        );
        // The one session from 127.0.0.1 is now the most allowed: another is refused.
        let r = server.post_session("t.ts", 40_001);
        assert_eq!(r.status, 503, "{}", r.body);
        let played = client.join().unwrap();
        assert!(played[0].status.success(), "{}", played[0].log);
        assert!(
            played[0].bytes() == original,
            "output differs after the reloads"
        );
    });
}

#[test]
fn sighup_with_a_revoked_token_refuses_it_at_once_and_keeps_sessions() {
    let vol = Vol::create(&[]);
    let original = vol.add_ts("t.ts", 2_000_000, 5.0, 6);
    let root = vol.root.to_str().unwrap();
    let token = run_ok(&[
        "token", "add", "--volume", root, "--role", "metrics", "--name", "grafana",
    ]);
    let watcher = run_ok(&[
        "token", "add", "--volume", root, "--role", "metrics", "--name", "watcher",
    ]);
    let watcher = format!("Bearer {}", watcher.trim());
    let token = token.trim().to_string();
    assert_eq!(token.len(), 64, "{token:?}");
    let server = Server::start(&vol, &[]);
    let bearer = format!("Bearer {token}");
    let scrape = || {
        http(
            server.addr,
            None,
            "GET",
            "/metrics",
            None,
            &[("Authorization", &bearer)],
        )
        .status
    };
    assert_eq!(scrape(), 200);
    let deadline = Instant::now() + Duration::from_secs(60);
    std::thread::scope(|s| {
        let client = s.spawn(|| play_all(&server, &vol, "t.ts", 1, deadline));
        // Streaming (read with the other metrics token, which stays).
        let by = Instant::now() + Duration::from_secs(20);
        loop {
            let r = http(
                server.addr,
                None,
                "GET",
                "/metrics",
                None,
                &[("Authorization", &watcher)],
            );
            assert_eq!(r.status, 200, "{}", r.body);
            if r.body.contains("isnode_sessions_active 1") {
                break;
            }
            assert!(
                Instant::now() < by,
                "no session streaming:\n{}",
                server.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        run_ok(&["token", "revoke", "--volume", root, "grafana"]);
        assert_eq!(scrape(), 200, "revoked in the file, not yet reloaded");
        signal(&server, libc::SIGHUP);
        let by = Instant::now() + Duration::from_secs(10);
        while scrape() != 401 {
            assert!(
                Instant::now() < by,
                "still accepted:\n{}",
                server.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let played = client.join().unwrap();
        assert!(played[0].status.success(), "{}", played[0].log);
        assert!(
            played[0].bytes() == original,
            "output differs after the reload"
        );
    });
}
