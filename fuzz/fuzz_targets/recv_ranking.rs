//! Fuzz the client's reading of a server's `Isnode-Ranking` header (the nodes it fails over
//! to): never a panic, never more than the bound of nodes, no empty URL.
#![no_main]

use isnode_recv::control::{parse_ranking, MAX_RANKING_NODES};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = std::str::from_utf8(data) else {
        return;
    };
    let nodes = parse_ranking(value);
    assert!(nodes.len() <= MAX_RANKING_NODES);
    assert!(nodes.iter().all(|u| u.contains("://")));
});
