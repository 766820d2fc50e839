//! Viewers beside background work (issue 18): the same six paced clients on the same volume,
//! alone, during a background scrub (`--scrub-rate-bps`, paced by the viewers) and during a
//! `volume rebuild` of a removed member. Every output must be byte-identical in every phase;
//! the valid streams (no underrun, every full second at 95 % of the bitrate or more) and the
//! server's late bursts of each phase are printed side by side, not asserted (this machine is
//! shared and noisy).

mod serve_support;

use std::time::{Duration, Instant};

use serve_support::*;

/// Small codewords and blocks, so that a few seconds of video fill many blocks.
const SHAPE: &[&str] = serve_support::SMALL_SHAPE;
/// Clients per phase.
const CLIENTS: usize = 6;
/// Bitrate of each title.
const BITRATE_BPS: u64 = 2_000_000;

/// What one phase measured.
struct Phase {
    valid: usize,
    late_bursts: f64,
}

/// Plays every title once (one client each, at once); asserts the outputs; measures.
fn phase(
    server: &Server,
    vol: &Vol,
    titles: &[(String, Vec<u8>)],
    tag: &str,
    during: impl FnOnce(),
) -> Phase {
    let late_before = server.metrics().get("isnode_bursts_late_total");
    let deadline = Instant::now() + Duration::from_secs(90);
    let played = std::thread::scope(|s| {
        let runs: Vec<_> = titles
            .iter()
            .enumerate()
            .map(|(i, (name, _))| {
                let tag = format!("{tag}{i}");
                s.spawn(move || play_run(server, vol, name, &tag, &[], deadline))
            })
            .collect();
        during();
        runs.into_iter()
            .map(|r| r.join().expect("a client thread"))
            .collect::<Vec<_>>()
    });
    let mut valid = 0;
    for (p, (name, bytes)) in played.iter().zip(titles) {
        assert!(p.status.success(), "{tag}: {name}: {}\n{}", p.status, p.log);
        assert!(p.bytes() == *bytes, "{tag}: {name}: output differs");
        valid += usize::from(is_valid(&p.stats));
    }
    let late_bursts = server.metrics().get("isnode_bursts_late_total") - late_before;
    Phase { valid, late_bursts }
}

/// No underrun, and every full second at 95 % of the bitrate or more.
fn is_valid(stats: &serde_json::Value) -> bool {
    let windows: Vec<f64> = stats["per_second_bitrate_bps"]
        .as_array()
        .map(|a| a.iter().filter_map(|x| x.as_f64()).collect())
        .unwrap_or_default();
    let full = windows.split_last().map_or(&[][..], |(_, f)| f);
    stats["underruns"].as_u64() == Some(0)
        && !full.is_empty()
        && full.iter().all(|&w| w >= 0.95 * BITRATE_BPS as f64)
}

#[test]
fn viewers_beside_a_scrub_and_a_rebuild() {
    let vol = Vol::create(SHAPE);
    let titles: Vec<(String, Vec<u8>)> = (0..CLIENTS as u64)
        .map(|i| {
            let name = format!("t{i}.ts");
            let bytes = vol.add_ts(&name, BITRATE_BPS, 8.0, 60 + i);
            (name, bytes)
        })
        .collect();

    let server = Server::start(&vol, &[]);
    let alone = phase(&server, &vol, &titles, "alone", || {});
    drop(server);

    let server = Server::start(&vol, &["--scrub-rate-bps", "4000000000"]);
    let scrubbing = phase(&server, &vol, &titles, "scrub", || {});
    let scrubbed = server.metrics().get("isnode_scrub_read_bytes_total");
    drop(server);

    let server = Server::start(&vol, &[]);
    std::fs::remove_dir_all(vol.root.join("members/2")).expect("removing member 2");
    let root = vol.root.to_str().expect("utf-8 path").to_string();
    let rebuilding = phase(&server, &vol, &titles, "rebuild", || {
        std::thread::sleep(Duration::from_millis(500));
        run_ok(&["volume", "rebuild", "--volume", &root, "--member", "2"]);
    });
    drop(server);

    println!(
        "viewers beside background work ({CLIENTS} clients of {:.0} Mbit/s): valid streams / late bursts: \
         alone {}/{:.0}, during a scrub {}/{:.0} (it read {:.1} MB while they played), during a \
         rebuild {}/{:.0}",
        BITRATE_BPS as f64 / 1e6,
        alone.valid,
        alone.late_bursts,
        scrubbing.valid,
        scrubbing.late_bursts,
        scrubbed / 1e6,
        rebuilding.valid,
        rebuilding.late_bursts
    );
    assert!(scrubbed > 0.0, "the background scrub read nothing");
}
