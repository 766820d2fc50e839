//! Fuzz the reading of `VOLUME/run/viewer-pace.json`, the viewers' load a running server
//! leaves for `volume rebuild` and `volume scrub`: any bytes parse or are refused without a
//! panic, and a parsed file gives a load (or none when of another version).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(file) = isnode_store::viewer_pace::parse(data) {
        let _ = file.load();
    }
});
