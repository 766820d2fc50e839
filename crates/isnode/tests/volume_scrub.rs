//! `isnode volume scrub` through the real binary: a clean volume scrubs clean (exit 0); a
//! flipped byte in a segment file is named by member, object and block (exit 1);
//! `volume check --repair` fixes it and a second scrub is clean; a missing member is
//! named; the member states of the catalog show in `volume check`.

mod serve_support;

use std::time::Instant;

use serde_json::Value;
use serve_support::{isnode, run_ok, text, Vol};

/// Small codewords and blocks, so that a few seconds of video fill many blocks.
const SHAPE: &[&str] = serve_support::SMALL_SHAPE;

/// Runs `volume scrub --json`; its exit code and report.
fn scrub(vol: &Vol, extra: &[&str]) -> (Option<i32>, Value) {
    let mut args = vec!["volume", "scrub", "--json"];
    args.extend_from_slice(extra);
    let out = isnode(vol, &args);
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("scrub --json is not JSON ({e}):\n{}", text(&out)));
    (out.status.code(), v)
}

/// Flips one byte of a file at `offset`.
fn flip(path: &std::path::Path, offset: usize) {
    let mut bytes = std::fs::read(path).unwrap();
    assert!(offset < bytes.len(), "{} is too short", path.display());
    bytes[offset] ^= 0x5a;
    std::fs::write(path, bytes).unwrap();
}

fn cat(vol: &Vol, name: &str) -> Vec<u8> {
    let out = isnode(vol, &["cat", name]);
    assert!(out.status.success(), "cat {name}: {}", text(&out));
    out.stdout
}

#[test]
fn a_flipped_byte_is_named_then_repaired() {
    let vol = Vol::create(SHAPE);
    let a = vol.add_ts("a.ts", 2_000_000, 8.0, 1);
    let b = vol.add_ts("b.ts", 1_000_000, 3.0, 2);
    let started = Instant::now();
    let (code, clean) = scrub(&vol, &[]);
    let elapsed_s = started.elapsed().as_secs_f64();
    assert_eq!(code, Some(0), "a fresh volume scrubs clean: {clean:#}");
    let r = &clean["report"];
    assert_eq!(r["objects"], 2);
    let bytes_read = r["bytes_read"].as_u64().unwrap();
    eprintln!(
        "scrub rate: {bytes_read} bytes in {elapsed_s:.2} s = {:.1} MB/s (test build)",
        bytes_read as f64 / elapsed_s / 1e6
    );
    // Every codeword's parity was re-encoded and compared.
    for o in r["object_results"].as_array().unwrap() {
        assert_eq!(o["parity_checked"], o["codewords"], "{o:#}");
    }

    // One byte inside block 1 of member 1's segment of "a.ts" (TOI 1).
    let seg = vol.root.join("members/1/objects/1.seg");
    flip(&seg, 65_536 + 5_000);
    let (code, found) = scrub(&vol, &[]);
    assert_eq!(code, Some(1), "damage makes scrub exit 1: {found:#}");
    let objects = found["report"]["object_results"].as_array().unwrap();
    let hit = objects.iter().find(|o| o["object"] == "a.ts").unwrap();
    let findings = hit["findings"].as_array().unwrap();
    assert!(
        findings
            .iter()
            .any(|f| f["member"] == 1 && f["block"] == 1 && f["esi"].is_u64()),
        "scrub does not name member 1 block 1 and the packet: {hit:#}"
    );
    assert_eq!(hit["bad_blocks"], 1, "{hit:#}");
    let other = objects.iter().find(|o| o["object"] == "b.ts").unwrap();
    assert_eq!(other["bad_packets"], 0, "{other:#}");
    let member1 = &found["report"]["members"][1];
    assert_eq!(member1["bad_blocks"], 1, "{member1:#}");
    // The table says the same in words.
    let table = text(&isnode(&vol, &["volume", "scrub"]));
    assert!(
        table.contains("object \"a.ts\" member 1 block 1"),
        "the table does not name the damage:\n{table}"
    );

    let repair = isnode(&vol, &["volume", "check", "--repair"]);
    assert!(repair.status.success(), "{}", text(&repair));
    let (code, after) = scrub(&vol, &["--rate-bps", "400000000"]);
    assert_eq!(code, Some(0), "after repair the scrub is clean: {after:#}");
    assert_eq!(cat(&vol, "a.ts"), a);
    assert_eq!(cat(&vol, "b.ts"), b);
}

#[test]
fn a_missing_member_is_named_and_its_state_shows_in_check() {
    let vol = Vol::create(SHAPE);
    let a = vol.add_ts("a.ts", 1_000_000, 4.0, 3);
    std::fs::remove_dir_all(vol.root.join("members/2")).unwrap();
    let (code, v) = scrub(&vol, &[]);
    assert_eq!(code, Some(1), "{v:#}");
    let r = &v["report"];
    assert!(
        r["member_problems"][0]
            .as_str()
            .is_some_and(|p| p.starts_with("member 2")),
        "{r:#}"
    );
    assert!(r["members"][2]["missing_packets"].as_u64().unwrap() > 0);
    assert_eq!(r["members"][0]["missing_packets"], 0);
    assert_eq!(r["object_results"][0]["unrecoverable_codewords"], 0);
    // An ingest now writes the other members and marks member 2 failed.
    let b = vol.add_ts("b.ts", 1_000_000, 2.0, 4);
    let check = text(&isnode(&vol, &["volume", "check"]));
    assert!(
        check.contains("member 2: failed (object \"b.ts\""),
        "volume check does not show the failed member:\n{check}"
    );
    assert_eq!(cat(&vol, "a.ts"), a);
    assert_eq!(cat(&vol, "b.ts"), b);
    // The repair recreates the member, rebuilds both objects and sets it ok.
    let repair = isnode(&vol, &["volume", "check", "--repair"]);
    assert!(repair.status.success(), "{}", text(&repair));
    let check = run_ok(&["volume", "check", "--volume", vol.root.to_str().unwrap()]);
    assert!(check.contains("member states: all ok"), "{check}");
    assert_eq!(scrub(&vol, &[]).0, Some(0));
}

#[test]
fn serve_scrubs_in_the_background_and_reports_it() {
    let vol = Vol::create(SHAPE);
    let a = vol.add_ts("a.ts", 1_000_000, 4.0, 5);
    flip(&vol.root.join("members/0/objects/1.seg"), 100);
    let server = serve_support::Server::start(&vol, &["--scrub-rate-bps", "200000000"]);
    let deadline = Instant::now() + std::time::Duration::from_secs(60);
    let scrub = loop {
        let status = server.req("GET", "/v1/status", None).json();
        let scrub = status["scrub"].clone();
        if scrub["passes"].as_u64().unwrap_or(0) >= 1 {
            assert_eq!(status["members"][0]["state"], "ok", "{status:#}");
            break scrub;
        }
        assert!(
            Instant::now() < deadline,
            "no background scrub pass finished: {scrub}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(scrub["enabled"], true, "{scrub}");
    assert!(scrub["bad_blocks"].as_u64().unwrap() >= 1, "{scrub}");
    assert_eq!(scrub["damaged_objects"], 1, "{scrub}");
    let m = server.metrics();
    assert!(m.get("isnode_scrub_passes_total") >= 1.0);
    assert!(m.get("isnode_scrub_bad_blocks_total") >= 1.0);
    assert!(m.get("isnode_scrub_read_bytes_total") > 0.0);
    assert!(
        server.log_text().contains("scrub found damage"),
        "{}",
        server.log_text()
    );
    drop(server);
    assert_eq!(cat(&vol, "a.ts"), a);
}
