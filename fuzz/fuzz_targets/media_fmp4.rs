//! Fuzz the fragmented-MP4 index and the rendition descriptors of isnode-media: fed any
//! bytes in any pieces (behind a valid fragmented init segment half the time) the indexer
//! must not panic, its fragments must lie inside the bytes fed and its points be increasing;
//! the descriptor parsers (`describe_moov`, `describe_ts`) must not panic either.
#![no_main]

use isnode_media::{describe_moov, describe_ts, Indexer};
use libfuzzer_sys::fuzz_target;

/// ftyp + a moov with one video track (ID 1, 12800 Hz) and `mvex/trex`: what follows is
/// read as fragments.
fn init() -> Vec<u8> {
    fn bx(kind: &[u8; 4], content: &[u8]) -> Vec<u8> {
        let mut b = (8 + content.len() as u32).to_be_bytes().to_vec();
        b.extend_from_slice(kind);
        b.extend_from_slice(content);
        b
    }
    let w = |v: &[u32]| v.iter().flat_map(|x| x.to_be_bytes()).collect::<Vec<u8>>();
    let tkhd = bx(b"tkhd", &w(&[0, 0, 0, 1, 0]));
    let mdhd = bx(b"mdhd", &w(&[0, 0, 0, 12_800, 0]));
    let hdlr = bx(b"hdlr", &[&w(&[0, 0])[..], b"vide", &[0; 13]].concat());
    let trak = bx(
        b"trak",
        &[tkhd, bx(b"mdia", &[mdhd, hdlr].concat())].concat(),
    );
    let mvex = bx(b"mvex", &bx(b"trex", &w(&[0, 1, 1, 512, 0, 0x0101_0000])));
    [
        bx(b"ftyp", b"iso6\0\0\0\0"),
        bx(b"moov", &[trak, mvex].concat()),
    ]
    .concat()
}

fuzz_target!(|data: &[u8]| {
    // The first byte picks the piece size and whether a fragmented init is put in front.
    let Some((&piece, rest)) = data.split_first() else {
        return;
    };
    let input = if piece & 1 == 1 {
        [init(), rest.to_vec()].concat()
    } else {
        rest.to_vec()
    };
    let mut ix = Indexer::new();
    for c in input.chunks(usize::from(piece >> 1).max(1) * 7) {
        ix.feed(c);
    }
    let index = ix.finish();
    for w in index.points.windows(2) {
        assert!(w[0].time_s < w[1].time_s);
        assert!(w[0].offset_bytes < w[1].offset_bytes);
    }
    if let Some(f) = &index.fragments {
        assert!(f.init.end() <= input.len() as u64);
        for g in &f.fragments {
            assert!(g.bytes.end() <= input.len() as u64);
        }
    }
    if let Some(d) = &index.rendition {
        let _ = d.codecs();
    }
    let _ = describe_moov(rest).codecs();
    let _ = describe_ts(rest).codecs();
});
