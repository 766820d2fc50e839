//! Disk faults from a real kernel (issue 18): the fault file system (`crates/faultfs`, FUSE)
//! mounted under ONE member of a real volume, the real `isnode serve`, real `isnode play`
//! clients. Each test switches a fault on and checks that every client's output is the
//! ingested file, byte for byte, and what the server says about the member.
//!
//! - EIO mid-stream: the member is marked failed (status API, metrics, log).
//! - Every read of the member delayed by 200 ms: no stream becomes invalid; the late
//!   bursts and client underruns with hedged reads (the default) and without
//!   (`--hedge-after-ms 0`) are printed (no timing assertion).
//! - Flipped bits in the member's reads: the checksum turns them into erasures.
//! - A member failed by EIO is read again: after a successful probe once the fault is
//!   cleared, or after `volume rebuild` sets it ok in the catalog; clients stay identical.
//!
//! Mounting needs /dev/fuse (and root, or Debian's `fuse3`, which `scripts/test`
//! installs); a machine that cannot mount fails these tests saying so.

mod serve_support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use isnode_faultfs::fault::{FaultKind, Plan, Target};
use isnode_faultfs::FaultMount;
use serde_json::Value;
use serve_support::*;

/// The member the faults are injected under.
const FAULTY: u32 = 2;

/// `kind` on every read of the segment files (not the member's identity file).
fn on_segments(kind: FaultKind) -> Plan {
    Plan {
        kind,
        target: Target::Range {
            file: ".seg".into(),
            bytes: 0..u64::MAX,
        },
    }
}

/// Moves member `member`'s directory of `vol` aside (the backing directory) and mounts the
/// fault file system, passing through to it, where the member was. No fault is in force.
fn mount_under_member(vol: &Vol, member: u32, seed: u64) -> FaultMount {
    let dir = vol.root.join("members").join(member.to_string());
    let backing: PathBuf = vol.path(&format!("backing-{member}"));
    std::fs::rename(&dir, &backing).expect("moving the member aside");
    std::fs::create_dir(&dir).expect("making the mount point");
    FaultMount::mount(&backing, &dir, seed)
        .unwrap_or_else(|e| panic!("cannot mount the fault file system under member {member}: {e}"))
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("stats lack {k:?}: {v}"))
}

/// Runs one `isnode play` per `(title, tag)` at once, to their end (bounded); asserts every
/// output is `sources[title]` byte for byte, complete, with no codeword lost; returns each
/// client's statistics.
fn play_all(
    server: &Server,
    vol: &Vol,
    clients: &[(&str, String)],
    sources: &[(&str, Vec<u8>)],
    extra: &[&str],
) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let played: Vec<Played> = std::thread::scope(|s| {
        let handles: Vec<_> = clients
            .iter()
            .map(|(title, tag)| s.spawn(move || play_run(server, vol, title, tag, extra, deadline)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("client thread"))
            .collect()
    });
    for ((title, tag), p) in clients.iter().zip(&played) {
        assert!(p.status.success(), "client {tag}: {}\n{}", p.status, p.log);
        let source = &sources
            .iter()
            .find(|(t, _)| t == title)
            .expect("a source per title")
            .1;
        assert!(
            p.bytes() == *source,
            "client {tag}: output differs from the ingested {title}:\n{}",
            p.log
        );
        assert_eq!(
            p.stats["end_reason"], "complete",
            "client {tag}: {}",
            p.stats
        );
        assert_eq!(u(&p.stats, "codewords_unrecoverable"), 0, "client {tag}");
    }
    played.into_iter().map(|p| p.stats).collect()
}

/// The member's health in `GET /v1/status`.
fn status_health(server: &Server, member: u32) -> String {
    let r = server.req("GET", "/v1/status", None);
    assert_eq!(r.status, 200, "GET /v1/status: {}", r.body);
    let v = r.json();
    let m = v["members"]
        .as_array()
        .and_then(|ms| ms.iter().find(|m| m["member"] == member))
        .unwrap_or_else(|| panic!("no member {member} in the status: {v}"));
    m["health"].as_str().unwrap_or_default().to_string()
}

/// EIO on every read of one member, switched on mid-stream: every client's output is
/// identical, and the server marks the member failed (status API, metrics, one warning).
#[test]
fn eio_mid_stream_marks_the_member_failed_and_no_byte_is_wrong() {
    let vol = Vol::create(&["--block-size", "65536"]);
    let a = vol.add_ts("a.ts", 4_000_000, 8.0, 181);
    let mount = mount_under_member(&vol, FAULTY, 18);
    let server = Server::start(
        &vol,
        &["--cache-size", "33554432", "--member-fail-errors", "3"],
    );
    let clients: Vec<(&str, String)> = (0..3).map(|i| ("a.ts", format!("eio-{i}"))).collect();
    let stats = std::thread::scope(|s| {
        let play = s.spawn(|| {
            play_all(
                &server,
                &vol,
                &clients,
                &[("a.ts", a.clone())],
                &["--as-fast-as-possible"],
            )
        });
        std::thread::sleep(Duration::from_millis(1500));
        mount.set(on_segments(FaultKind::Eio));
        println!("EIO on member {FAULTY} from 1.5 s");
        play.join().expect("clients")
    });
    let f = mount.stats();
    println!("fault file system: {f:?}");
    assert!(f.eio > 0, "no read of member {FAULTY} failed: {f:?}");
    for (i, s) in stats.iter().enumerate() {
        println!(
            "client {i}: lost {}, repaired {}",
            u(s, "packets_lost"),
            u(s, "symbols_repaired")
        );
    }
    let m = server.metrics();
    let errors = m.get(&format!(
        "isnode_member_errors_total{{member=\"{FAULTY}\"}}"
    ));
    let rebuilt = m.get("isnode_symbols_rebuilt_total");
    println!("server: member {FAULTY} read errors {errors}, symbols rebuilt {rebuilt}");
    assert!(errors >= 3.0, "{}", m.0);
    assert!(rebuilt > 0.0, "{}", m.0);
    assert_eq!(
        m.get(&format!("isnode_member_healthy{{member=\"{FAULTY}\"}}")),
        0.0,
        "the metrics should say member {FAULTY} failed:\n{}",
        m.0
    );
    assert_eq!(status_health(&server, FAULTY), "failed");
    for other in (0..8).filter(|&x| x != FAULTY) {
        assert_eq!(status_health(&server, other), "ok", "member {other}");
    }
    let log = server.log_text();
    let said = format!("member {FAULTY} marked failed");
    assert_eq!(log.matches(&said).count(), 1, "said once:\n{log}");
    drop(server);
}

/// Every read of one member delayed by 200 ms (a slow disk): no stream becomes invalid,
/// with hedged reads (the default) and without. Prints the late bursts (server) and the
/// underruns (paced clients) of both runs.
#[test]
fn a_slow_member_makes_no_stream_invalid() {
    let vol = Vol::create(&["--block-size", "65536"]);
    let titles = ["a.ts", "b.ts", "c.ts"];
    let sources: Vec<(&str, Vec<u8>)> = titles
        .iter()
        .enumerate()
        .map(|(i, t)| (*t, vol.add_ts(t, 3_000_000, 5.0, 190 + i as u64)))
        .collect();
    let mount = mount_under_member(&vol, FAULTY, 19);
    let slow = Plan::all(FaultKind::Delay { delay_ms: 200 });
    for (label, plan, flags) in [
        ("no fault", Plan::pass(), &[][..]),
        (
            "slow, without hedging",
            slow.clone(),
            &["--hedge-after-ms", "0"][..],
        ),
        ("slow, with hedging", slow, &[][..]),
    ] {
        mount.set(plan);
        let mut args = vec!["--cache-size", "33554432"];
        args.extend_from_slice(flags);
        let server = Server::start(&vol, &args);
        let clients: Vec<(&str, String)> = titles
            .iter()
            .map(|t| (*t, format!("slow-{}-{t}", label.len())))
            .collect();
        let stats = play_all(&server, &vol, &clients, &sources, &[]);
        let m = server.metrics();
        let underruns: u64 = stats.iter().map(|s| u(s, "underruns")).sum();
        let stall: u64 = stats.iter().map(|s| u(s, "stall_ms")).sum();
        println!(
            "{label}: late bursts {}, hedged {}, symbols rebuilt {}, client underruns {underruns} \
             ({stall} ms stalled), member {FAULTY} status {}",
            m.get("isnode_bursts_late_total"),
            m.get("isnode_reads_hedged_total"),
            m.get("isnode_symbols_rebuilt_total"),
            status_health(&server, FAULTY),
        );
        assert_eq!(
            m.get(&format!("isnode_member_healthy{{member=\"{FAULTY}\"}}")),
            1.0,
            "a slow member is not a failed one"
        );
    }
    println!("fault file system: {:?}", mount.stats());
    assert!(mount.stats().delayed > 0, "no read was delayed");
}

/// Flipped bits in every read of one member: the blocks fail their checksum and are
/// rebuilt; every client's output is identical.
#[test]
fn flipped_bits_become_erasures() {
    let vol = Vol::create(&["--block-size", "65536"]);
    let a = vol.add_ts("a.ts", 4_000_000, 5.0, 200);
    let mount = mount_under_member(&vol, FAULTY, 20);
    mount.set(on_segments(FaultKind::Flip { per_read: 3 }));
    let server = Server::start(&vol, &["--cache-size", "33554432"]);
    let clients: Vec<(&str, String)> = (0..3).map(|i| ("a.ts", format!("flip-{i}"))).collect();
    play_all(
        &server,
        &vol,
        &clients,
        &[("a.ts", a)],
        &["--as-fast-as-possible"],
    );
    let f = mount.stats();
    let m = server.metrics();
    let errors = m.get(&format!(
        "isnode_member_errors_total{{member=\"{FAULTY}\"}}"
    ));
    println!(
        "fault file system: {f:?}; server: member {FAULTY} read errors {errors}, symbols rebuilt {}",
        m.get("isnode_symbols_rebuilt_total")
    );
    assert!(f.flipped > 0, "no read was damaged: {f:?}");
    assert!(errors > 0.0, "no checksum mismatch counted:\n{}", m.0);
    drop(server);
}

/// Short reads from one member (every read answers fewer bytes than asked): the server
/// reads the rest, every client's output is identical, and a short read is no error.
#[test]
fn short_reads_are_completed() {
    let vol = Vol::create(&["--block-size", "65536"]);
    let a = vol.add_ts("a.ts", 4_000_000, 4.0, 210);
    let mount = mount_under_member(&vol, FAULTY, 21);
    mount.set(on_segments(FaultKind::Short));
    let server = Server::start(&vol, &["--cache-size", "33554432"]);
    let clients: Vec<(&str, String)> = (0..2).map(|i| ("a.ts", format!("short-{i}"))).collect();
    play_all(
        &server,
        &vol,
        &clients,
        &[("a.ts", a)],
        &["--as-fast-as-possible"],
    );
    let f = mount.stats();
    let m = server.metrics();
    println!("fault file system: {f:?}");
    assert!(f.short > 0, "no read was short: {f:?}");
    assert_eq!(
        m.get(&format!(
            "isnode_member_errors_total{{member=\"{FAULTY}\"}}"
        )),
        0.0,
        "a short read is not an error:\n{}",
        m.0
    );
    assert_eq!(status_health(&server, FAULTY), "ok");
    drop(server);
}

/// Fails member [`FAULTY`] with EIO under three clients (as fast as possible), then clears
/// the fault; returns the server (member failed) and the title's bytes.
fn fail_member_by_eio(vol: &Vol, mount: &FaultMount, server_flags: &[&str]) -> (Server, Vec<u8>) {
    let a = vol.add_ts("a.ts", 4_000_000, 6.0, 221);
    let mut args = vec!["--cache-size", "33554432", "--member-fail-errors", "3"];
    args.extend_from_slice(server_flags);
    let server = Server::start(vol, &args);
    mount.set(on_segments(FaultKind::Eio));
    let clients: Vec<(&str, String)> = (0..3).map(|i| ("a.ts", format!("fail-{i}"))).collect();
    play_all(
        &server,
        vol,
        &clients,
        &[("a.ts", a.clone())],
        &["--as-fast-as-possible"],
    );
    assert_eq!(status_health(&server, FAULTY), "failed");
    mount.set(Plan::pass());
    (server, a)
}

/// Waits (bounded) until the server reads member [`FAULTY`] again.
fn wait_member_back(server: &Server, within: Duration) {
    let deadline = Instant::now() + within;
    while status_health(server, FAULTY) != "ok" {
        assert!(
            Instant::now() < deadline,
            "member {FAULTY} not read again within {within:?}:\n{}",
            server.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Plays three clients again and checks the member serves: no new read error, the
/// member healthy, every output identical.
fn member_serves_again(server: &Server, vol: &Vol, a: &[u8]) {
    let errors = |m: &Metrics| {
        m.get(&format!(
            "isnode_member_errors_total{{member=\"{FAULTY}\"}}"
        ))
    };
    let before = errors(&server.metrics());
    let clients: Vec<(&str, String)> = (0..3).map(|i| ("a.ts", format!("back-{i}"))).collect();
    play_all(
        server,
        vol,
        &clients,
        &[("a.ts", a.to_vec())],
        &["--as-fast-as-possible"],
    );
    let m = server.metrics();
    assert_eq!(errors(&m), before, "no new read error of member {FAULTY}");
    assert_eq!(m.get("isnode_members_revived_total"), 1.0, "{}", m.0);
    assert_eq!(
        m.get(&format!("isnode_member_healthy{{member=\"{FAULTY}\"}}")),
        1.0
    );
    assert_eq!(status_health(server, FAULTY), "ok");
}

/// The catalog's state of member [`FAULTY`].
fn catalog_state(vol: &Vol) -> String {
    let out = isnode(vol, &["volume", "check", "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("check --json ({e}):\n{}", text(&out)));
    v["report"]["member_states"][FAULTY as usize]["state"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// A member failed by EIO, the fault cleared: the periodic probe (every second here)
/// reads one of its blocks back good, the server reads it again (logged, counted, ok in
/// the catalog), and clients are served identical bytes with no new read error.
#[test]
fn a_member_failed_by_read_errors_is_read_again_after_a_good_probe() {
    let vol = Vol::create(&["--block-size", "65536"]);
    let mount = mount_under_member(&vol, FAULTY, 22);
    let (server, a) = fail_member_by_eio(&vol, &mount, &["--member-probe-interval-ms", "1000"]);
    wait_member_back(&server, Duration::from_secs(20));
    let log = server.log_text();
    assert!(log.contains(&format!("member {FAULTY} probed")), "{log}");
    assert_eq!(catalog_state(&vol), "ok");
    member_serves_again(&server, &vol, &a);
    drop(server);
}

/// A member failed by EIO and never probed (`--member-probe-interval-ms 0`): it stays
/// failed until `volume rebuild` beside the server sets it ok in the catalog; then the
/// server reads it again and clients are served identical bytes.
#[test]
fn a_failed_member_is_read_again_after_a_rebuild() {
    let vol = Vol::create(&["--block-size", "65536"]);
    let mount = mount_under_member(&vol, FAULTY, 23);
    let (server, a) = fail_member_by_eio(&vol, &mount, &["--member-probe-interval-ms", "0"]);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(status_health(&server, FAULTY), "failed", "not probed");
    assert_eq!(catalog_state(&vol), "failed");
    let m = FAULTY.to_string();
    let out = isnode(&vol, &["volume", "rebuild", "--member", &m]);
    assert!(out.status.success(), "rebuild:\n{}", text(&out));
    wait_member_back(&server, Duration::from_secs(20));
    let log = server.log_text();
    assert!(
        log.contains(&format!("member {FAULTY} is ok in the catalog again")),
        "{log}"
    );
    member_serves_again(&server, &vol, &a);
    drop(server);
}
