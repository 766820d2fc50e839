//! Fuzz the HTTP `Range` header parser (every content request and `play --http` request
//! reaches it): it must never panic, and every range it accepts is non-empty and lies
//! within the representation, at most `MAX_RANGES` of them.
#![no_main]

use isnode_proto::range::{if_none_match, if_range_matches, parse_range, RangeRequest, MAX_RANGES};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (len, header) = match data.split_first_chunk::<4>() {
        Some((l, rest)) => (u64::from(u32::from_le_bytes(*l)), rest),
        None => (0, data),
    };
    if let RangeRequest::Partial(ranges) = parse_range(Some(header), len) {
        assert!(!ranges.is_empty() && ranges.len() <= MAX_RANGES);
        for r in ranges {
            assert!(r.start < r.end && r.end <= len, "{r:?} of {len}");
        }
    }
    let _ = if_none_match(header, "\"t1-00000000\"");
    let _ = if_range_matches(header, "\"t1-00000000\"");
});
