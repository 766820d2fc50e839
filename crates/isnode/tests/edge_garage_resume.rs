//! Issue 19 against the real origin: an edge filling a title from a 3-node Garage cluster is
//! killed (`kill -9`) mid-fill and started again on the same volume; the fill resumes from
//! its durable front (the bytes fetched after the restart are about what was missing, not
//! the whole title) and the title then reads back byte-identical. The same with a `file://`
//! origin is in `edge_fill.rs`.

mod serve_support;

use std::time::{Duration, Instant};

use serve_support::fills::{fill_of, kill_fill_past, Front};
use serve_support::garage::{Garage, BUCKET, REGION};
use serve_support::*;

/// An edge on `vol` filling from Garage node 0.
fn edge(g: &Garage, vol: &Vol) -> Server {
    let creds: Vec<(&str, String)> = g
        .env(0)
        .into_iter()
        .filter(|(k, _)| k.starts_with("AWS_ACCESS") || k.starts_with("AWS_SECRET"))
        .collect();
    let env: Vec<(&str, &str)> = creds.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let endpoint = g.endpoint(0);
    Server::start_env(
        vol,
        &[
            "--origin",
            &format!("s3://{BUCKET}"),
            "--origin-endpoint",
            &endpoint,
            "--origin-region",
            REGION,
        ],
        &env,
    )
}

#[test]
fn an_edge_killed_mid_fill_from_garage_resumes_its_fill_after_a_restart() {
    let g = Garage::start();
    let vol = Vol::create(&[]);
    let file = vol.path("long.ts");
    gen_ts(&file, 4_000_000, 10.0, 41); // 5 MB
    let src = std::fs::read(&file).unwrap();
    let size = src.len() as f64;
    g.publish(1, &file, "long.ts", &[]);

    let mut server = edge(&g, &vol);
    // A pre-fill capped at 3 Mbit/s: slow enough to be killed half-way.
    let body = r#"{"titles": ["long.ts"], "rate_bps": 3000000}"#;
    let r = server.req("POST", "/v1/fills", Some(body));
    assert_eq!(r.status, 202, "POST /v1/fills: {}", r.body);
    let fetched_before = kill_fill_past(&mut server, "long.ts", 3 << 19, Front::Any);

    let server = edge(&g, &vol);
    let deadline = Instant::now() + Duration::from_secs(90);
    let done = loop {
        if let Some(f) = fill_of(&server, "long.ts") {
            if f["phase"] == "done" {
                break f;
            }
            assert!(
                f["phase"] != "failed",
                "the resumed fill failed: {f}\n{}",
                server.log_text()
            );
        }
        assert!(
            Instant::now() < deadline,
            "the fill did not resume to its end: {:?}\n{}",
            fill_of(&server, "long.ts"),
            server.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let fetched_after = server.metrics().get("isnode_fill_bytes_total");
    eprintln!(
        "Garage origin: fetched {fetched_before} bytes before the kill, {fetched_after} after the restart, of {size}"
    );
    assert!(
        fetched_after < size - 1_000_000.0,
        "resumed, not restarted: {fetched_after} of {size} fetched again: {done}"
    );
    assert!(fetched_before + fetched_after < 2.0 * size);
    // The stored title, read back through its codewords.
    let cat = isnode(&vol, &["cat", "long.ts"]);
    assert!(cat.status.success(), "isnode cat: {}", text(&cat));
    assert!(
        cat.stdout == src,
        "the resumed fill's bytes differ from the published title"
    );
    assert!(
        !server.log_text().contains(&g.secret),
        "the secret is in a log"
    );
}
