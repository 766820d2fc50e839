//! Fuzz the control API's paths and queries: an upload's path, query and headers
//! (`PUT /v1/objects/NAME?bitrate_bps=..&content_type=..`, `If-None-Match`,
//! `Content-Length`) and a repair request's query (`?esi=1,5,9`). They must never panic;
//! an accepted upload has a name the store accepts and a bitrate of at least 1, and the
//! ESIs of an accepted repair query are distinct and at most the limit.
#![no_main]

use isnode_serve::fuzzing::{repair_query, upload};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // Fields split by NUL: path and query, If-None-Match, Content-Length.
    let mut parts = text.split('\0');
    let path = parts.next().unwrap_or("");
    let inm = parts.next().map(str::as_bytes);
    let len = parts.next().map(str::as_bytes);
    if let Ok(up) = upload(path, inm, len) {
        assert!(
            isnode_store::validate::validate_name(&up.name).is_ok(),
            "{:?}",
            up.name
        );
        assert_ne!(up.bitrate_bps, Some(0));
        if let (Some(n), Some(raw)) = (up.len, len) {
            assert_eq!(
                std::str::from_utf8(raw).ok().and_then(|s| s.parse().ok()),
                Some(n)
            );
        }
    }
    if let Ok(esis) = repair_query(text) {
        let mut sorted = esis.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), esis.len(), "an ESI asked twice");
        assert!(!esis.is_empty() && esis.len() <= 255, "{} ESIs", esis.len());
    }
});
