//! Crash points for crash tests: `ISNODE_CRASH_POINT=NAME[:N]` aborts the
//! process (no destructors, no cleanup, like `kill -9`) the N-th time (default
//! first) execution reaches the point NAME. Unset, a point costs one atomic load.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

static TARGET: OnceLock<Option<(String, u64)>> = OnceLock::new();
static HITS: AtomicU64 = AtomicU64::new(0);

/// Aborts here if the environment asks for a crash at `name`.
pub(crate) fn point(name: &str) {
    let target = TARGET.get_or_init(|| {
        let v = std::env::var("ISNODE_CRASH_POINT").ok()?;
        let (n, count) = match v.split_once(':') {
            Some((n, c)) => (n.to_string(), c.parse().unwrap_or(1)),
            None => (v, 1),
        };
        Some((n, count))
    });
    if let Some((n, count)) = target {
        if n == name && HITS.fetch_add(1, Ordering::SeqCst) + 1 >= *count {
            eprintln!("isnode: crash point {name} reached, aborting (ISNODE_CRASH_POINT)");
            std::process::abort();
        }
    }
}
