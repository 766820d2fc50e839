//! Helpers of the origin-fill tests (`edge_fill.rs`, `edge_garage_resume.rs`): a fill as
//! `GET /v1/fills` lists it, and a `kill -9` once a fill is past a given point.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::Server;

/// The fill of `name` in `GET /v1/fills`, if listed.
#[track_caller]
pub(crate) fn fill_of(server: &Server, name: &str) -> Option<Value> {
    let r = server.req("GET", "/v1/fills", None);
    assert_eq!(r.status, 200, "GET /v1/fills: {}", r.body);
    r.json()["fills"]
        .as_array()?
        .iter()
        .find(|f| f["name"] == name)
        .cloned()
}

/// What a fill must have before [`kill_fill_past`] kills its server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Front {
    /// Bytes pushed, whether or not a codeword is readable yet.
    Any,
    /// Bytes pushed and at least one codeword readable (the served front moved).
    Readable,
}

/// Waits (60 s at most) until the fill of `name` has pushed more than `bytes` (and, with
/// [`Front::Readable`], made a codeword readable), then kills the server (`kill -9`); the
/// bytes it had fetched from the origin by then (`isnode_fill_bytes_total`).
#[track_caller]
pub(crate) fn kill_fill_past(server: &mut Server, name: &str, bytes: u64, front: Front) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    let fetched = loop {
        let f = fill_of(server, name).expect("the fill is listed");
        let readable = f["front_codewords"].as_u64().unwrap_or(0) > 0;
        if (readable || front == Front::Any) && f["filled_bytes"].as_u64().unwrap_or(0) > bytes {
            break server.metrics().get("isnode_fill_bytes_total");
        }
        assert!(Instant::now() < deadline, "no progress: {f}");
        std::thread::sleep(Duration::from_millis(50));
    };
    server.kill9();
    fetched
}
