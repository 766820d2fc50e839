//! Issue 18, restarts that clients ride through, against the real binary on loopback: the
//! server is killed (`kill -9`) and started again on the same address under unicast
//! clients; each client notices, re-opens its session at the first codeword it has not
//! delivered, and writes exactly the original bytes. The gap is reported.

mod serve_support;

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serve_support::*;

/// `isnode serve` on `addr` (fixed: a restart must come back where the clients look);
/// returns once it answers.
fn serve_on(vol: &Vol, addr: SocketAddr, tag: &str) -> ChildGuard {
    let log = vol.path(&format!("serve-{tag}.log"));
    let child = ChildGuard(Some(
        command()
            .args(["serve", "--volume", vol.root.to_str().unwrap()])
            .args(["--listen", &addr.to_string()])
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
