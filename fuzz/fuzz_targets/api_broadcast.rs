//! Fuzz the control API's broadcast body (`POST /v1/broadcasts`, parsed and checked as the
//! handler does): it must never panic, and a request it accepts names a non-empty object,
//! a non-zero port, a positive finite wait, a duration within the server's maximum, and
//! (if any) as many source as repair groups, distinct, of one family, all in the
//! configured ranges.
#![no_main]

use std::collections::HashSet;

use isnode_serve::fuzzing::{broadcast, in_group_ranges, MAX_DURATION_S};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(b) = broadcast(data) else {
        return;
    };
    assert!(!b.object.is_empty());
    assert_ne!(b.port, 0);
    assert!(
        b.max_wait_s.is_finite() && b.max_wait_s > 0.0,
        "{}",
        b.max_wait_s
    );
    if let Some(d) = b.duration_s {
        assert!(
            d.is_finite() && d > 0.0 && d <= MAX_DURATION_S,
            "duration {d}"
        );
    }
    if let Some((source, repair)) = &b.groups {
        assert_eq!(source.len(), repair.len());
        let all: HashSet<_> = source.iter().chain(repair).collect();
        assert_eq!(
            all.len(),
            source.len() + repair.len(),
            "a group named twice"
        );
        assert!(all.iter().all(|ip| in_group_ranges(**ip)));
        assert!(all.iter().all(|ip| ip.is_ipv4()) || all.iter().all(|ip| ip.is_ipv6()));
    }
});
