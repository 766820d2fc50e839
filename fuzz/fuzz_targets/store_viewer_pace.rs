//! Fuzz the reading of `VOLUME/run/viewer-pace.json`, the viewers' load a running server
//! leaves for `volume rebuild` and `volume scrub`: any bytes parse or are refused without a
//! panic, and a parsed file gives a load (or none when stale) at any time.
#![no_main]

use std::time::{Duration, SystemTime};

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(file) = isnode_store::viewer_pace::parse(data) {
        for secs in [0, 1_700_000_000, u32::MAX as u64] {
            let _ = file.load_at(SystemTime::UNIX_EPOCH + Duration::from_secs(secs));
        }
        let _ = file.load_at(SystemTime::now());
    }
});
