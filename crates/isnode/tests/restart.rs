//! Issue 18, restarts that clients ride through, against the real binary on loopback: the
//! server is killed (`kill -9`) or stopped (SIGTERM) and started again on the same address
//! under unicast clients and broadcast receivers; each unicast client notices, re-opens
//! its session at the first codeword it has not delivered, and writes exactly the original
//! bytes; the broadcast comes back at the same phase of its timetable (its epoch is kept in
//! the volume) and its receivers repair what the gap lost. The gaps are reported. A client
//! given `--server A,B` fails over to a replica of the volume, and refuses a server whose
//! stream differs (another ingest of the same file) rather than mix bytes.

mod serve_support;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::json;
use serve_support::netns::Netns;
use serve_support::*;

/// `isnode serve` on `addr` (fixed: a restart must come back where the clients look);
/// returns once it answers.
fn serve_on(vol: &Vol, addr: SocketAddr, tag: &str) -> ChildGuard {
    serve_dir_on(&vol.root, vol, addr, tag, &[])
}

/// `isnode serve --volume DIR EXTRA...` on `addr`, its log in `vol`'s directory; returns
/// once it answers.
fn serve_dir_on(dir: &Path, vol: &Vol, addr: SocketAddr, tag: &str, extra: &[&str]) -> ChildGuard {
    let log = vol.path(&format!("serve-{tag}.log"));
    let child = ChildGuard(Some(
        command()
            .args(["serve", "--volume", dir.to_str().unwrap()])
            .args(["--listen", &addr.to_string()])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawning isnode serve"),
    ));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(r) = try_http(addr, None, "GET", "/v1/objects", None, &[]) {
            if r.status == 200 {
                return child;
            }
        }
        assert!(
            Instant::now() < deadline,
            "serve ({tag}) did not answer:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn clients_ride_through_a_kill_9_and_restart() {
    const CLIENTS: usize = 6;
    let vol = Vol::create(&[]);
    let original = vol.add_ts("t.ts", 2_000_000, 10.0, 5);
    // Started once through the helper (it finds a free port), then killed and started
    // again by hand on the same address.
    let first = Server::start(&vol, &[]);
    let addr = first.addr;
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut second = None;
    let played = std::thread::scope(|s| {
        let runs: Vec<_> = (0..CLIENTS)
            .map(|i| {
                let (first, vol) = (&first, &vol);
                s.spawn(move || play_run(first, vol, "t.ts", &format!("r{i}"), &[], deadline))
            })
            .collect();
        // Mid-title: every client streaming.
        let by = Instant::now() + Duration::from_secs(20);
        while first.metrics().get("isnode_sessions_active") < CLIENTS as f64 {
            assert!(Instant::now() < by, "{}", first.log_text());
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_secs(2));
        let pid = libc::pid_t::try_from(first.pid()).unwrap();
        // SAFETY: kill(2) on our child's pid has no memory effects.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
        std::thread::sleep(Duration::from_millis(300));
        second = Some(serve_on(&vol, addr, "restarted"));
        runs.into_iter()
            .map(|r| r.join().unwrap())
            .collect::<Vec<_>>()
    });
    drop(second);
    let mut gaps_ms = Vec::new();
    for (i, p) in played.iter().enumerate() {
        assert!(p.status.success(), "client {i}: {}\n{}", p.status, p.log);
        assert!(p.bytes() == original, "client {i}: output differs");
        let resumes = p.stats["resumes"].as_u64().unwrap();
        assert!(resumes >= 1, "client {i} did not resume:\n{}", p.log);
        gaps_ms.push(p.stats["longest_resume_gap_ms"].as_u64().unwrap());
    }
    gaps_ms.sort_unstable();
    let p50 = gaps_ms[gaps_ms.len() / 2];
    let p99 = gaps_ms[gaps_ms.len() - 1];
    eprintln!("restart gap over {CLIENTS} clients: p50 {p50} ms, max {p99} ms ({gaps_ms:?})");
}

/// Sends `sig` to process `pid` (a child of the test).
fn signal(pid: u32, sig: libc::c_int) {
    let pid = libc::pid_t::try_from(pid).unwrap();
    // SAFETY: kill(2) on our child's pid has no memory effects.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0, "kill({pid}, {sig})");
}

/// Waits (bounded) until the server at `addr` has `n` active sessions.
#[track_caller]
fn wait_sessions(addr: SocketAddr, n: f64, within: Duration) {
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

/// The value at quantile `q` of sorted `v` (nearest rank).
fn quantile(v: &[u64], q: f64) -> u64 {
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// Issue 18's test: 10 unicast clients and 5 broadcast receivers; the server is killed
/// (`kill -9`) and restarted, then stopped with SIGTERM (1 s grace) and restarted; every
/// output is the title byte for byte, and the restart gaps are reported.
#[test]
fn ten_viewers_and_five_broadcast_receivers_ride_through_kill_9_and_sigterm() {
    const UNICAST: usize = 10;
    const BROADCAST: usize = 5;
    let ns = Netns::with_loopback_multicast();
    ns.run(|| {
        let vol = Vol::create(&[]);
        let original = vol.add_ts("t.ts", 2_000_000, 16.0, 11);
        let extra = ["--shutdown-grace-s", "1"];
        let first = Server::start(&vol, &extra);
        let addr = first.addr;
        let body = json!({"object": "t.ts", "scheme": "fast", "max_wait_s": 2.0,
                          "duration_s": 300.0})
        .to_string();
        let r = first.req("POST", "/v1/broadcasts", Some(&body));
        assert_eq!(r.status, 201, "{}", r.body);
        let id = r.json()["id"].as_str().expect("id").to_string();
        let elapsed_s = |tag: &str| {
            let r = try_http(
                addr,
                None,
                "GET",
                &format!("/v1/broadcasts/{id}"),
                None,
                &[],
            );
            let r = r.unwrap_or_else(|e| panic!("{tag}: {e}"));
            assert_eq!(
                r.status, 200,
                "{tag}: the broadcast is not running: {}",
                r.body
            );
            r.json()["elapsed_s"].as_f64().expect("elapsed_s")
        };
        let deadline = Instant::now() + Duration::from_secs(100);
        let mut restarted = None;
        let (unicast, broadcast) = std::thread::scope(|s| {
            let (first, vol) = (&first, &vol);
            let u: Vec<_> = (0..UNICAST)
                .map(|i| {
                    s.spawn(move || play_run(first, vol, "t.ts", &format!("u{i}"), &[], deadline))
                })
                .collect();
            let b: Vec<_> = (0..BROADCAST)
                .map(|i| {
                    std::thread::sleep(Duration::from_millis(300));
                    let tag = format!("b{i}");
                    s.spawn(move || play_run(first, vol, "t.ts", &tag, &["--broadcast"], deadline))
                })
                .collect();
            wait_sessions(addr, UNICAST as f64, Duration::from_secs(20));
            std::thread::sleep(Duration::from_secs(2));
            let before_s = elapsed_s("before the kill");
            signal(first.pid(), libc::SIGKILL);
            std::thread::sleep(Duration::from_millis(200));
            let mut second = serve_dir_on(&vol.root, vol, addr, "after-kill", &extra);
            // The same broadcast, its timetable's clock run on through the gap.
            let after_s = elapsed_s("after the restart");
            assert!(
                after_s > before_s + 0.2,
                "elapsed {before_s} s, then {after_s} s"
            );
            // Every client back on the restarted server before it is stopped.
            wait_sessions(addr, UNICAST as f64, Duration::from_secs(20));
            std::thread::sleep(Duration::from_secs(2));
            signal(second.id(), libc::SIGTERM);
            let status = second.wait_until(Instant::now() + Duration::from_secs(20), "serve");
            assert!(status.success(), "serve after SIGTERM: {status}");
            restarted = Some(serve_dir_on(&vol.root, vol, addr, "after-term", &extra));
            assert!(elapsed_s("after SIGTERM and restart") > after_s + 2.0);
            let join = |h: Vec<std::thread::ScopedJoinHandle<'_, Played>>| {
                h.into_iter().map(|r| r.join().unwrap()).collect::<Vec<_>>()
            };
            (join(u), join(b))
        });
        drop(restarted);
        let mut gaps_ms = Vec::new();
        for (i, p) in unicast.iter().enumerate() {
            assert!(p.status.success(), "client {i}: {}\n{}", p.status, p.log);
            assert!(p.bytes() == original, "client {i}: output differs");
            let resumes = p.stats["resumes"].as_u64().unwrap();
            assert!(
                resumes >= 2,
                "client {i} resumed {resumes} times:\n{}",
                p.log
            );
            let gaps = p.stats["resume_gaps_ms"].as_array().unwrap();
            gaps_ms.extend(gaps.iter().map(|g| g.as_u64().unwrap()));
        }
        let (mut repaired, mut late) = (0, Vec::new());
        for (i, p) in broadcast.iter().enumerate() {
            // Codewords the gap delayed are late (exit 1 says so); none may be lost.
            assert!(
                p.status.success() || p.status.code() == Some(1),
                "receiver {i}: {}\n{}",
                p.status,
                p.log
            );
            late.push(p.stats["max_late_s"].as_f64().unwrap());
            assert!(
                p.bytes() == original,
                "receiver {i}: output differs: {}",
                p.stats
            );
            assert_eq!(p.stats["codewords_lost"], 0, "receiver {i}: {}", p.stats);
            repaired += p.stats["repair"]["codewords_repaired"].as_u64().unwrap();
        }
        gaps_ms.sort_unstable();
        eprintln!(
            "restart gap over {UNICAST} clients, 2 restarts (kill -9, SIGTERM): p50 {} ms, \
             p99 {} ms, max {} ms ({gaps_ms:?}); broadcast receivers: {repaired} codewords \
             repaired over HTTP, latest codeword per receiver {late:?} s, every output \
             identical",
            quantile(&gaps_ms, 0.5),
            quantile(&gaps_ms, 0.99),
            gaps_ms.last().unwrap()
        );
    });
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

/// `--server A,B`: A is killed and stays down; the clients go on from B, a copy of A's
/// volume, with the original bytes.
#[test]
fn a_lost_server_fails_over_to_a_replica_of_its_volume() {
    const CLIENTS: usize = 3;
    let vol = Vol::create(&[]);
    let original = vol.add_ts("t.ts", 2_000_000, 8.0, 3);
    let replica = vol.path("replica");
    copy_volume(&vol.root, &replica);
    let a = Server::start(&vol, &[]);
    let b_addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let b = serve_dir_on(&replica, &vol, b_addr, "replica", &[]);
    let b_url = format!("http://{b_addr}");
    let deadline = Instant::now() + Duration::from_secs(60);
    let played = std::thread::scope(|s| {
        let runs: Vec<_> = (0..CLIENTS)
            .map(|i| {
                let (a, vol, b_url) = (&a, &vol, &b_url);
                s.spawn(move || {
                    let extra = ["--server", b_url.as_str()];
                    play_run(a, vol, "t.ts", &format!("f{i}"), &extra, deadline)
                })
            })
            .collect();
        wait_sessions(a.addr, CLIENTS as f64, Duration::from_secs(20));
        std::thread::sleep(Duration::from_secs(2));
        signal(a.pid(), libc::SIGKILL);
        runs.into_iter()
            .map(|r| r.join().unwrap())
            .collect::<Vec<_>>()
    });
    drop(b);
    for (i, p) in played.iter().enumerate() {
        assert!(p.status.success(), "client {i}: {}\n{}", p.status, p.log);
        assert!(p.bytes() == original, "client {i}: output differs");
        assert!(p.stats["resumes"].as_u64().unwrap() >= 1, "{}", p.log);
    }
}

/// `--server A,C` where C holds another ingest of the same file (another TSI): once A is
/// gone the client refuses C's stream, says why, and ends with a prefix of the title,
/// never bytes of two streams.
#[test]
fn a_server_with_another_stream_of_the_title_is_refused() {
    let vol = Vol::create(&[]);
    let original = vol.add_ts("t.ts", 2_000_000, 8.0, 3);
    let other = Vol::create(&[]);
    let file = vol.dir.path().join("in").join("t.ts");
    assert!(other.add_file("t.ts", &file) == original);
    let a = Server::start(&vol, &[]);
    let c = Server::start(&other, &[]);
    let deadline = Instant::now() + Duration::from_secs(60);
    let p = std::thread::scope(|s| {
        let run = s.spawn(|| {
            let extra = ["--server", &c.url(), "--timeout-s", "3"];
            play_run(&a, &vol, "t.ts", "refuse", &extra, deadline)
        });
        wait_sessions(a.addr, 1.0, Duration::from_secs(20));
        std::thread::sleep(Duration::from_secs(2));
        signal(a.pid(), libc::SIGKILL);
        run.join().unwrap()
    });
    assert!(
        !p.status.success(),
        "the client should not finish:\n{}",
        p.log
    );
    assert!(p.log.contains("another stream"), "{}", p.log);
    assert_eq!(p.stats["resumes"], 0, "it resumed on C:\n{}", p.log);
    // What came before the loss, then zeros for the codewords it cut short.
    let out = p.bytes();
    assert!(
        !out.is_empty() && out.len() < original.len(),
        "{} bytes",
        out.len()
    );
    let wrong = out
        .iter()
        .zip(&original)
        .filter(|(o, t)| o != t && **o != 0);
    assert_eq!(
        wrong.count(),
        0,
        "bytes that are neither the title's nor zeros"
    );
}
