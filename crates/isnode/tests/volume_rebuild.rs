//! `isnode volume rebuild --member N` through the real binary: a removed member is rebuilt
//! onto a fresh directory (scrub clean, objects byte-identical); a rebuild killed with
//! SIGKILL midway resumes from its recorded progress; a rebuild runs while `serve` streams
//! the same volume to clients whose outputs stay byte-identical.

mod serve_support;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;
use serve_support::{command, isnode, text, ChildGuard, Server, Vol};

/// Small codewords and blocks, so that a few seconds of video fill many blocks.
const SHAPE: &[&str] = serve_support::SMALL_SHAPE;

#[track_caller]
fn assert_scrub_clean(vol: &Vol) {
    let out = isnode(vol, &["volume", "scrub"]);
    assert!(out.status.success(), "scrub not clean:\n{}", text(&out));
}

#[track_caller]
fn assert_cat(vol: &Vol, name: &str, want: &[u8]) {
    let out = isnode(vol, &["cat", name]);
    assert!(out.status.success(), "cat {name}: {}", text(&out));
    assert!(out.stdout == want, "cat {name}: bytes differ");
}

/// The catalog's state of `member` as `volume check --json` reports it.
fn member_state(vol: &Vol, member: usize) -> Value {
    let out = isnode(vol, &["volume", "check", "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("check --json ({e}):\n{}", text(&out)));
    v["report"]["member_states"][member].clone()
}

/// Runs `volume rebuild --member N --json EXTRA`; its report, after a success.
#[track_caller]
fn rebuild(vol: &Vol, member: usize, extra: &[&str]) -> (Value, String) {
    let m = member.to_string();
    let mut args = vec!["volume", "rebuild", "--member", m.as_str(), "--json"];
    args.extend_from_slice(extra);
    let out = isnode(vol, &args);
    assert!(out.status.success(), "rebuild failed:\n{}", text(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    (v, String::from_utf8_lossy(&out.stderr).into_owned())
}

fn rate_mb_s(report: &Value) -> f64 {
    let bytes = report["report"]["bytes_written"].as_f64().unwrap_or(0.0);
    bytes / report["elapsed_s"].as_f64().unwrap_or(1.0).max(1e-9) / 1e6
}

#[test]
fn a_removed_member_is_rebuilt_onto_a_fresh_directory() {
    let vol = Vol::create(SHAPE);
    let a = vol.add_ts("a.ts", 2_000_000, 6.0, 11);
    std::fs::remove_dir_all(vol.root.join("members/1")).unwrap();
    // Degraded write: the missing member is left out, and recorded as failed.
    let b = vol.add_ts("b.ts", 1_000_000, 3.0, 12);
    assert_eq!(member_state(&vol, 1)["state"], "failed");
    let (report, _) = rebuild(&vol, 1, &[]);
    eprintln!(
        "rebuild rate alone: {:.1} MB/s ({} bytes)",
        rate_mb_s(&report),
        report["report"]["bytes_written"]
    );
    assert_eq!(report["report"]["objects_rebuilt"], 2, "{report:#}");
    assert_eq!(member_state(&vol, 1)["state"], "ok");
    assert!(vol.root.join("members/1/MEMBER").is_file());
    assert_scrub_clean(&vol);
    // With another member gone, the rebuilt one carries its share: still identical.
    std::fs::remove_dir_all(vol.root.join("members/3")).unwrap();
    assert_cat(&vol, "a.ts", &a);
    assert_cat(&vol, "b.ts", &b);
}

#[test]
fn a_rebuild_killed_midway_resumes() {
    let vol = Vol::create(SHAPE);
    let objects: Vec<(String, Vec<u8>)> = (0..6)
        .map(|i| {
            let name = format!("t{i}.ts");
            let bytes = vol.add_ts(&name, 1_000_000, 6.0, 20 + i);
            (name, bytes)
        })
        .collect();
    std::fs::remove_dir_all(vol.root.join("members/0")).unwrap();
    // About 4.5 MB to read at 1 MB/s: several seconds, one object at a time.
    let mut child = ChildGuard(Some(
        command()
            .arg("--volume")
            .arg(&vol.root)
            .args([
                "volume",
                "rebuild",
                "--member",
                "0",
                "--rate-bps",
                "8000000",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting the rebuild"),
    ));
    let deadline = Instant::now() + Duration::from_secs(60);
    let done_toi = loop {
        let state = member_state(&vol, 0);
        if state["state"] == "rebuilding" && state["done_toi"].as_u64().unwrap_or(0) >= 1 {
            break state["done_toi"].as_u64().unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "the rebuild recorded no progress: {state}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    // SIGKILL: no cleanup of any kind.
    // SAFETY: kill(2) on the pid of our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGKILL) }, 0);
    let status = child.wait_until(Instant::now() + Duration::from_secs(20), "killed rebuild");
    assert!(!status.success());
    let state = member_state(&vol, 0);
    assert_eq!(state["state"], "rebuilding", "{state}");
    let at_restart = state["done_toi"].as_u64().unwrap();
    assert!(at_restart >= done_toi && at_restart < 6, "{state}");
    let (report, stderr) = rebuild(&vol, 0, &[]);
    assert!(
        stderr.contains("resuming the rebuild of member 0"),
        "no resume said: {stderr}"
    );
    assert_eq!(report["report"]["start"]["done_toi"], at_restart);
    assert_eq!(
        report["report"]["objects_rebuilt"].as_u64().unwrap(),
        6 - at_restart,
        "{report:#}"
    );
    assert_eq!(member_state(&vol, 0)["state"], "ok");
    assert_scrub_clean(&vol);
    for (name, bytes) in &objects {
        assert_cat(&vol, name, bytes);
    }
}

/// Starts `isnode play NAME` against `server` (paced in real time), writing to `out`.
fn play(vol: &Vol, server: &Server, name: &str, tag: &str) -> (ChildGuard, PathBuf) {
    let out = vol.path(&format!("{tag}.out"));
    let child = command()
        .args([
            "play",
            name,
            "--server",
            &server.url(),
            "--max-seconds",
            "60",
        ])
        .arg("--out")
        .arg(&out)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(vol.path(&format!("{tag}.stderr"))).unwrap())
        .spawn()
        .expect("starting isnode play");
    (ChildGuard(Some(child)), out)
}

#[test]
fn a_rebuild_runs_while_serve_streams_the_volume() {
    let vol = Vol::create(SHAPE);
    let titles: Vec<(String, Vec<u8>)> = (0..3)
        .map(|i| {
            let name = format!("s{i}.ts");
            let bytes = vol.add_ts(&name, 2_000_000, 8.0, 40 + i);
            (name, bytes)
        })
        .collect();
    let server = Server::start(&vol, &[]);
    std::fs::remove_dir_all(vol.root.join("members/2")).unwrap();
    let clients: Vec<_> = titles
        .iter()
        .enumerate()
        .map(|(i, (name, _))| play(&vol, &server, name, &format!("c{i}")))
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    let (report, _) = rebuild(&vol, 2, &[]);
    eprintln!(
        "rebuild rate while serving {} streams: {:.1} MB/s ({} bytes)",
        clients.len(),
        rate_mb_s(&report),
        report["report"]["bytes_written"]
    );
    for (i, (mut child, out)) in clients.into_iter().enumerate() {
        let status = child.wait_until(Instant::now() + Duration::from_secs(60), "isnode play");
        let stderr = std::fs::read_to_string(vol.path(&format!("c{i}.stderr"))).unwrap();
        assert!(status.success(), "client {i}: {status}: {stderr}");
        assert!(
            std::fs::read(&out).unwrap() == titles[i].1,
            "client {i}: output differs: {stderr}"
        );
    }
    assert_eq!(member_state(&vol, 2)["state"], "ok");
    assert_scrub_clean(&vol);
    // The same rebuild with no viewers, for comparison.
    drop(server);
    std::fs::remove_dir_all(vol.root.join("members/2")).unwrap();
    let (alone, _) = rebuild(&vol, 2, &[]);
    eprintln!(
        "rebuild rate alone: {:.1} MB/s ({} bytes)",
        rate_mb_s(&alone),
        alone["report"]["bytes_written"]
    );
    assert_scrub_clean(&vol);
}
