//! Crash points for crash tests: `ISNODE_CRASH_POINT=NAME[:N]` aborts the
//! process (no destructors, no cleanup, like `kill -9`) the N-th time (default
//! first) execution reaches the point NAME. Unset, a point costs one atomic load.
//!
//! Crash points exist only in debug builds (`debug_assertions`, as `cargo test`
//! builds the binary the end-to-end tests run); in release builds [`point`] is
//! an empty function and the environment variable is ignored. The crate's unit
//! tests can also register an in-process hook that runs at every point, to
//! stop one thread at a chosen place while another one proceeds.

/// Aborts here if the environment asks for a crash at `name` (debug builds only).
#[cfg(debug_assertions)]
pub(crate) fn point(name: &str) {
    #[cfg(test)]
    hook::run(name);
    env::point(name);
}

/// Crash points are compiled out of release builds.
#[cfg(not(debug_assertions))]
#[inline(always)]
pub(crate) fn point(_name: &str) {}

#[cfg(debug_assertions)]
mod env {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;

    static TARGET: OnceLock<Option<(String, u64)>> = OnceLock::new();
    static HITS: AtomicU64 = AtomicU64::new(0);

    pub(super) fn point(name: &str) {
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
}

/// In-process hooks for the crate's unit tests. They run only where crash points
/// exist (debug builds); tests that need them are ignored in release builds.
#[cfg(test)]
pub(crate) mod hook {
    use std::sync::{Arc, Mutex};

    type Hook = Arc<dyn Fn(&str) + Send + Sync>;

    static HOOK: Mutex<Option<Hook>> = Mutex::new(None);

    /// Runs `f(name)` at every crash point reached (by any thread) until the guard drops.
    pub(crate) fn set(f: impl Fn(&str) + Send + Sync + 'static) -> Guard {
        *HOOK.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(f));
        Guard
    }

    /// Removes the hook on drop.
    pub(crate) struct Guard;

    impl Drop for Guard {
        fn drop(&mut self) {
            *HOOK.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
    }

    #[cfg_attr(not(debug_assertions), allow(dead_code))]
    pub(super) fn run(name: &str) {
        let hook = HOOK.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(f) = hook {
            f(name);
        }
    }
}
