//! `isnode broadcast plan`: the real binary, for the seed's clip, a stored title, and bad input.

mod common;

use common::{Vol, SMALL_CODEWORD};
use serde_json::Value;

fn rows(out: &common::Out) -> Vec<Value> {
    match serde_json::from_slice::<Value>(&out.stdout) {
        Ok(Value::Array(a)) => a,
        other => panic!("plan --json printed {other:?}: {}", out.text()),
    }
}

#[test]
fn every_scheme_for_the_seeds_clip_and_only_harmonic_is_late() {
    let v = Vol::empty();
    let args = [
        "broadcast",
        "plan",
        "--duration",
        "180",
        "--bitrate",
        "3500000",
        "--max-wait",
        "5",
        "--json",
    ];
    let out = v.run(&args).ok();
    let rows = rows(&out);
    assert_eq!(rows.len(), 9);
    for r in &rows {
        let scheme = r["scheme"].as_str().unwrap_or_default();
        let late = r["late_bytes"].as_u64().unwrap_or(0);
        assert_eq!(
            late > 0,
            scheme == "harmonic",
            "{scheme}: {late} late bytes"
        );
        assert!(
            r["worst_wait_s"].as_f64().unwrap_or(99.0) <= 5.0,
            "{scheme}"
        );
    }
    let table = v
        .run(&[
            "broadcast",
            "plan",
            "--duration",
            "180",
            "--bitrate",
            "3500000",
        ])
        .ok()
        .text();
    assert!(
        table.contains("cautious-harmonic") && table.contains("LATE"),
        "{table}"
    );
}

#[test]
fn cautious_harmonic_with_fine_codewords_is_the_seeds_16_26_mbps() {
    let v = Vol::empty();
    let out = v
        .run(&[
            "broadcast",
            "plan",
            "--duration",
            "180",
            "--bitrate",
            "3500000",
            "--max-wait",
            "5",
            "--codeword-bytes",
            "4375",
            "--scheme",
            "cautious-harmonic",
        ])
        .ok();
    assert!(out.text().contains("16.26"), "{}", out.text());
}

#[test]
fn a_stored_title_is_planned_from_the_catalog() {
    let v = Vol::small();
    // 200 codewords of 1280 bytes at 1 Mbit/s: 2.048 s of playing time.
    v.ingest("clip", &common::random_bytes(9, 200 * SMALL_CODEWORD));
    let out = v
        .run(&[
            "broadcast",
            "plan",
            "clip",
            "--max-wait",
            "0.1",
            "--scheme",
            "fast",
            "--json",
        ])
        .ok();
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    assert_eq!(plan["title"]["codewords"], 200);
    assert_eq!(plan["title"]["codeword_payload_bytes"], 1280);
    assert_eq!(plan["slot_codewords"], 9); // 0.1 s / 10.24 ms
    assert_eq!(plan["client"]["late_bytes"], 0);
}

#[test]
fn bad_requests_fail_with_a_reason() {
    let v = Vol::empty();
    let base = [
        "broadcast",
        "plan",
        "--duration",
        "180",
        "--bitrate",
        "3500000",
    ];
    let run = |extra: &[&str]| {
        let mut a = base.to_vec();
        a.extend_from_slice(extra);
        v.run(&a)
    };
    run(&["--max-wait", "0.2"]).fails_with(&["shorter than", "codeword airtime"]);
    run(&["--scheme", "ladder"]).fails_with(&["unknown broadcast scheme", "pagoda"]);
    run(&["--scheme", "harmonic", "--client-cap", "4000000"]).fails_with(&["above the cap"]);
    v.run(&["broadcast", "plan"])
        .fails_with(&["--duration and --bitrate"]);
    Vol::small()
        .run(&["broadcast", "plan", "nosuch"])
        .fails_with(&["nosuch"]);
}
