//! Fuzz every probe entry point of isnode-media: none may panic, and a successful probe must be
//! self-consistent.
#![no_main]

use isnode_media::{detect, probe, probe_mp4, probe_ts, MediaInfo};
use libfuzzer_sys::fuzz_target;

fn check(result: Result<MediaInfo, isnode_media::MediaError>) {
    match result {
        Ok(info) => {
            assert_eq!(info.content_type, info.container.content_type());
            assert_eq!(info.bitrate_bps.is_none(), info.bitrate_unknown.is_some());
            assert_ne!(info.bitrate_bps, Some(0));
            // The "pass --bitrate" message must render.
            let _ = info.require_bitrate().map_err(|e| e.to_string());
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
}

fuzz_target!(|data: &[u8]| {
    let len = data.len() as u64;
    let _ = detect(data);
    check(probe(data, len));
    // A declared length longer than the data: must be reported, not trusted.
    check(probe(data, len + 188));
    check(probe_mp4(data, len));
    // Head/tail windows split at a data-dependent point.
    let split = data
        .first()
        .map_or(0, |&b| usize::from(b) * 188)
        .min(data.len());
    check(probe_ts(&data[..split], &data[split..], len));
    check(probe_ts(data, data, len));
});
