//! Fuzz the incremental time indexer of isnode-media: fed any bytes in any pieces it must
//! not panic, and its points must be increasing in time and offset, their times finite and not negative.
#![no_main]

use isnode_media::Indexer;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first byte picks the piece size, so that carry-over across feeds is exercised.
    let Some((&piece, rest)) = data.split_first() else {
        return;
    };
    let mut ix = Indexer::new();
    for c in rest.chunks(usize::from(piece).max(1) * 7) {
        ix.feed(c);
    }
    let index = ix.finish();
    for w in index.points.windows(2) {
        assert!(w[0].time_s < w[1].time_s);
        assert!(w[0].offset_bytes < w[1].offset_bytes);
    }
    for p in &index.points {
        assert!(p.time_s.is_finite() && p.time_s >= 0.0);
    }
});
