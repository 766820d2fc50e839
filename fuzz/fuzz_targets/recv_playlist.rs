//! Fuzz the client's reading of an encrypted title's HLS playlist (`isnode play` of an
//! AES-128 title, issue 32): never a panic; what it takes is bounded, contiguous from byte
//! 0, each segment a positive multiple of 16 bytes. And of a CMAF playlist's `EXT-X-MAP`
//! (the init segment a start past byte 0 fetches): at byte 0, at most 64 MiB, never empty.
//! And of the init segment it fetches (a clear title's, written less its `sidx`): whole
//! boxes kept in order, none of them a `sidx`, never longer than what came.
#![no_main]

use isnode_recv::cmaf_init::without_sidx;
use isnode_recv::decrypt::{parse_map, parse_playlist};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(kept) = without_sidx(data) {
        assert!(kept.len() <= data.len());
        assert_eq!(without_sidx(&kept).as_deref(), Some(&kept[..]), "no sidx left");
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(segments) = parse_playlist(text) {
        let mut at = 0u64;
        for s in &segments {
            assert_eq!(s.offset, at);
            assert!(s.len > 0 && s.len % 16 == 0);
            at += s.len;
        }
        assert!(!segments.is_empty() && segments.len() <= 100_000);
    }
    if let Ok((_, (offset, len))) = parse_map(text) {
        assert_eq!(offset, 0);
        assert!(len > 0 && len <= 64 << 20);
    }
});
