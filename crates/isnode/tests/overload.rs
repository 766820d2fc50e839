//! Twice the admissible load (issue 21): ten `isnode play` clients start at once against a
//! server whose bitrate budget holds five of them. The server admits no more than its budget
//! holds, refuses the rest with `503` naming the limit, and every admitted client's output is
//! byte-identical to the title. The per-second bitrate each admitted client measured is
//! printed (a figure for the notes; no timing is asserted on this shared machine).

mod serve_support;

use std::process::Stdio;
use std::time::{Duration, Instant};

use serve_support::*;

/// The title's bitrate.
const BITRATE_BPS: u64 = 4_000_000;
/// Clients started at once.
const CLIENTS: usize = 10;
/// One session's admitted wire rate at this bitrate (parity and headers included), as the
/// server's refusal reports it: `4675644 more needed`.
const SESSION_WIRE_BPS: u64 = 4_675_644;
/// The budget: room for five sessions, not six.
const MAX_BITRATE_BPS: u64 = 5 * SESSION_WIRE_BPS + SESSION_WIRE_BPS / 2;

#[test]
fn twice_the_admissible_load_is_refused_by_name_and_the_admitted_keep_their_bytes() {
    let vol = Vol::create(&[]);
    let title = vol.add_ts("t.ts", BITRATE_BPS, 8.0, 3);
    let server = Server::start(&vol, &["--max-bitrate", &MAX_BITRATE_BPS.to_string()]);
    let url = server.url();
    let mut clients = Vec::new();
    for i in 0..CLIENTS {
        let out = vol.path(&format!("out-{i}"));
        let stats = vol.path(&format!("stats-{i}.json"));
        let child = command()
            .args(["play", "t.ts", "--server", &url, "--timeout-s", "20"])
            .arg("--out")
            .arg(&out)
            .arg("--stats-json")
            .arg(&stats)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting isnode play");
        clients.push((ChildGuard(Some(child)), out, stats));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut admitted, mut refused) = (0, 0);
    let mut worst_window = f64::INFINITY;
    for (mut guard, out, stats) in clients {
        let child = guard.0.take().expect("a child");
        let waited = wait_output(child, deadline);
        let stderr = String::from_utf8_lossy(&waited.stderr).into_owned();
        if waited.status.success() {
            admitted += 1;
            let got = std::fs::read(&out).expect("the output of an admitted client");
            assert!(
                got == title,
                "an admitted client's output differs from the title"
            );
            worst_window = worst_window.min(worst_full_window(&stats));
        } else {
            refused += 1;
            assert!(
                stderr.contains("503") && stderr.contains("limit max_bitrate_bps"),
                "a client that was not admitted must be refused with 503 naming the limit: {stderr}"
            );
        }
    }
    println!(
        "overload: {admitted} admitted, {refused} refused of {CLIENTS}; the admitted clients' \
         worst full 1 s window: {:.3} of the title's bitrate",
        worst_window / BITRATE_BPS as f64
    );
    assert!(
        (1..=5).contains(&admitted),
        "{admitted} admitted: the budget holds 5"
    );
    assert_eq!(admitted + refused, CLIENTS);
}

/// Waits for `child` (killing it at `deadline`) and returns its output.
fn wait_output(mut child: std::process::Child, deadline: Instant) -> std::process::Output {
    while Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    child.wait_with_output().expect("collecting a client")
}

/// The lowest per-second bitrate of a client's full windows (the last, partial one left out).
fn worst_full_window(stats: &std::path::Path) -> f64 {
    let text = std::fs::read_to_string(stats).expect("the stats of an admitted client");
    let v: serde_json::Value = serde_json::from_str(&text).expect("stats JSON");
    let windows: Vec<f64> = v["per_second_bitrate_bps"]
        .as_array()
        .expect("per_second_bitrate_bps")
        .iter()
        .filter_map(|x| x.as_f64())
        .collect();
    windows.split_last().map_or(0.0, |(_, full)| {
        full.iter().copied().fold(f64::INFINITY, f64::min)
    })
}
