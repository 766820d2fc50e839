//! A server closed to anonymous viewers (`--anonymous-viewers false`) with the real client:
//! `isnode play` without a token is refused with 401 saying what is missing; with
//! `--token T` or `ISNODE_TOKEN=T` (a viewer token from `isnode token add`) it plays the
//! title byte-identical, its digests and repairs included.

mod serve_support;

use std::process::Stdio;
use std::time::{Duration, Instant};

use serve_support::*;

#[test]
fn play_needs_its_token_on_a_server_closed_to_anonymous_viewers() {
    let vol = Vol::create(&[]);
    let title = vol.add_ts("t.ts", 2_000_000, 3.0, 5);
    let root = vol.root.to_str().expect("utf-8 path");
    let token = run_ok(&[
        "token", "add", "--volume", root, "--role", "viewer", "--name", "tv",
    ])
    .trim()
    .to_string();
    assert_eq!(token.len(), 64, "{token}");
    let server = Server::start(&vol, &["--anonymous-viewers", "false"]);
    let deadline = Instant::now() + Duration::from_secs(60);

    let refused = command()
        .args([
            "play",
            "t.ts",
            "--server",
            &server.url(),
            "--timeout-s",
            "5",
        ])
        .env_remove("ISNODE_TOKEN")
        .stdin(Stdio::null())
        .output()
        .expect("running isnode play");
    let log = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "played without a token:\n{log}");
    assert!(log.contains("401") && log.contains("viewer"), "{log}");

    let with_flag = play_run(
        &server,
        &vol,
        "t.ts",
        "flag",
        &["--token", &token],
        deadline,
    );
    assert!(with_flag.status.success(), "{}", with_flag.log);
    assert!(with_flag.bytes() == title, "--token: output differs");

    let out = vol.path("env.out");
    let played = command()
        .args(["play", "t.ts", "--server", &server.url()])
        .arg("--out")
        .arg(&out)
        .env("ISNODE_TOKEN", &token)
        .stdin(Stdio::null())
        .output()
        .expect("running isnode play");
    assert!(
        played.status.success(),
        "{}",
        String::from_utf8_lossy(&played.stderr)
    );
    assert!(
        std::fs::read(&out).expect("the output") == title,
        "ISNODE_TOKEN: output differs"
    );
}
