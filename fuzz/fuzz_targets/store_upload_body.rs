//! Fuzz the upload path that takes a body's bytes before they are stored: the probe copy
//! an upload of known length keeps while its chunks arrive (head and tail in memory, or a
//! spool file for MP4), then the probe of it. It must never panic, and what it finds
//! equals the probe of the whole body at once, however the body was cut into chunks.
#![no_main]

use isnode_store::spool::{describe, ProbeCopy};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&cut, body)) = data.split_first() else {
        return;
    };
    let tmp = std::env::temp_dir();
    let mut copy = ProbeCopy::new(&tmp, body.len() as u64);
    let chunk = usize::from(cut).max(1);
    for part in body.chunks(chunk) {
        copy.write(part).expect("a probe copy takes every chunk");
    }
    // Bytes past the announced length are ignored (the ingest refuses them).
    copy.write(b"past the end").expect("ignored");
    let whole = describe(body, body.len() as u64, None, None).map_err(|e| e.to_string());
    let kept = copy.describe(None, None).map_err(|e| e.to_string());
    assert_eq!(kept, whole);
});
