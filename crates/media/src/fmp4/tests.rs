//! Hand-built fragmented MP4s: the fragment index from `moof`/`tfdt`/`trun`, defaults from
//! `tfhd`/`trex`, sync flags, `sidx` use and refusal, and no panic on any bytes.

use crate::{AccessPoint, Container, Indexer, MediaIndex};

use super::*;
use proptest::prelude::*;

fn bx(kind: &[u8; 4], content: &[u8]) -> Vec<u8> {
    let mut b = (8 + content.len() as u32).to_be_bytes().to_vec();
    b.extend_from_slice(kind);
    b.extend_from_slice(content);
    b
}

fn full(kind: &[u8; 4], version: u8, flags: u32, rest: &[u8]) -> Vec<u8> {
    let mut c = ((u32::from(version) << 24) | flags).to_be_bytes().to_vec();
    c.extend_from_slice(rest);
    bx(kind, &c)
}

fn words(w: &[u32]) -> Vec<u8> {
    w.iter().flat_map(|v| v.to_be_bytes()).collect()
}

/// A `trak` with `handler` for track `id` with media `timescale`.
fn trak(id: u32, handler: &[u8; 4], timescale: u32) -> Vec<u8> {
    let tkhd = full(b"tkhd", 0, 3, &words(&[0, 0, id, 0, 0]));
    let mdhd = full(b"mdhd", 0, 0, &words(&[0, 0, timescale, 0, 0]));
    let hdlr = full(
        b"hdlr",
        0,
        0,
        &[&words(&[0])[..], handler, &[0; 13]].concat(),
    );
    let mdia = bx(b"mdia", &[mdhd, hdlr].concat());
    bx(b"trak", &[tkhd, mdia].concat())
}

const SYNC: u32 = 0x0200_0000;
const NON_SYNC_FLAGS: u32 = 0x0101_0000;

/// ftyp + moov (an audio track 2 first, video track 1 at 12800 Hz), trex defaults of
/// 512-tick non-sync samples for the video track.
fn init() -> Vec<u8> {
    let ftyp = bx(b"ftyp", b"iso6\0\0\0\0iso6cmfc");
    let trex_v = full(b"trex", 0, 0, &words(&[1, 1, 512, 0, NON_SYNC_FLAGS]));
    let trex_a = full(b"trex", 0, 0, &words(&[2, 1, 1024, 0, 0]));
    let mvex = bx(b"mvex", &[trex_a, trex_v].concat());
    let moov = bx(
        b"moov",
        &[trak(2, b"soun", 48_000), trak(1, b"vide", 12_800), mvex].concat(),
    );
    [ftyp, moov].concat()
}

/// A `moof`: a video `traf` (tfdt `dts`, `n` samples: per-sample durations `dur` when
/// `Some`, else defaults; first-sample-flags `first`) and an audio `traf`.
fn moof(seq: u32, dts: Option<u64>, n: u32, dur: Option<u32>, first: Option<u32>) -> Vec<u8> {
    let tfhd = full(b"tfhd", 0, 0x02_0000, &words(&[1]));
    let tfdt = dts.map_or(Vec::new(), |d| full(b"tfdt", 1, 0, &d.to_be_bytes()));
    let mut flags = 0x001 | 0x200;
    let mut rest = words(&[n, 0]);
    if let Some(f) = first {
        flags |= 0x004;
        rest.extend(words(&[f]));
    }
    if dur.is_some() {
        flags |= 0x100;
    }
    for _ in 0..n {
        if let Some(d) = dur {
            rest.extend(words(&[d]));
        }
        rest.extend(words(&[100]));
    }
    let trun = full(b"trun", 0, flags, &rest);
    let vtraf = bx(b"traf", &[tfhd, tfdt, trun].concat());
    let atfhd = full(b"tfhd", 0, 0x02_0000, &words(&[2]));
    let atrun = full(b"trun", 0, 0, &words(&[3]));
    let atraf = bx(b"traf", &[atfhd, atrun].concat());
    let mfhd = full(b"mfhd", 0, 0, &words(&[seq]));
    bx(b"moof", &[mfhd, vtraf, atraf].concat())
}

fn mdat(len: usize) -> Vec<u8> {
    bx(b"mdat", &vec![0xAA; len])
}

fn index(data: &[u8], chunk: usize) -> MediaIndex {
    let mut ix = Indexer::new();
    for c in data.chunks(chunk.max(1)) {
        ix.feed(c);
    }
    ix.finish()
}

/// Three 50-frame fragments (2 s at 25 frame/s), the middle one without a key frame.
fn three_fragments() -> (Vec<u8>, Vec<u64>) {
    let mut f = init();
    let mut starts = Vec::new();
    let parts = [
        moof(1, Some(0), 50, None, Some(SYNC)),
        moof(2, Some(25_600), 50, Some(512), None),
        moof(3, None, 50, None, Some(SYNC)),
    ];
    for (i, m) in parts.into_iter().enumerate() {
        starts.push(f.len() as u64);
        f.extend(m);
        f.extend(mdat(1000 + i));
    }
    (f, starts)
}

#[test]
fn fragments_from_moofs_with_defaults_and_flags() {
    let (f, starts) = three_fragments();
    let init_len = init().len() as u64;
    for chunk in [1, 5, 8, 17, 4096, 1 << 20] {
        let ix = index(&f, chunk);
        assert_eq!(ix.container, Container::Mp4);
        assert_eq!(ix.moov_at_front, Some(true));
        let fx = ix.fragments.expect("fragmented");
        assert_eq!((fx.track_id, fx.timescale), (1, 12_800));
        assert_eq!(
            fx.init,
            ByteRange {
                offset: 0,
                length: init_len
            }
        );
        assert_eq!(fx.sidx, SidxUse::Absent);
        assert!(fx.complete);
        let got: Vec<_> = fx
            .fragments
            .iter()
            .map(|g| {
                (
                    g.bytes.offset,
                    g.decode_start,
                    g.duration,
                    g.samples,
                    g.starts_with_sync,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (starts[0], 0, 25_600, 50, true),
                (starts[1], 25_600, 25_600, 50, false),
                (starts[2], 51_200, 25_600, 50, true),
            ],
            "chunk {chunk}"
        );
        assert_eq!(fx.fragments[2].bytes.end(), f.len() as u64);
        assert_eq!(fx.fragments[0].bytes.end(), starts[1]);
        assert_eq!(
            ix.points,
            vec![
                AccessPoint {
                    time_s: 0.0,
                    offset_bytes: starts[0]
                },
                AccessPoint {
                    time_s: 4.0,
                    offset_bytes: starts[2]
                },
            ]
        );
    }
}

fn sidx(first_offset: u32, refs: &[(u32, u32)]) -> Vec<u8> {
    let mut rest = words(&[1, 12_800, 0, first_offset]);
    rest.extend([0, 0]);
    rest.extend((refs.len() as u16).to_be_bytes());
    for &(size, dur) in refs {
        rest.extend(words(&[size, dur, 0x9000_0000]));
    }
    full(b"sidx", 0, 0, &rest)
}

fn with_sidx(refs_from: impl Fn(&[u64], u64) -> Vec<(u32, u32)>) -> (Vec<u8>, u64) {
    let (body, starts) = three_fragments();
    let init_len = init().len();
    let frags = &body[init_len..];
    let rel: Vec<u64> = starts.iter().map(|s| s - init_len as u64).collect();
    let s = sidx(0, &refs_from(&rel, frags.len() as u64));
    let sidx_len = s.len() as u64;
    ([&body[..init_len], &s, frags].concat(), sidx_len)
}

#[test]
fn consistent_sidx_is_used_and_recorded() {
    let (f, sidx_len) = with_sidx(|s, total| {
        vec![
            ((s[1] - s[0]) as u32, 25_000),
            ((s[2] - s[1]) as u32, 25_600),
            ((total - s[2]) as u32, 25_600),
        ]
    });
    let fx = index(&f, 999).fragments.unwrap();
    let init_len = init().len() as u64;
    assert_eq!(fx.sidx, SidxUse::Used);
    assert_eq!(fx.init.length, init_len);
    assert_eq!(
        fx.index_range,
        Some(ByteRange {
            offset: init_len,
            length: sidx_len
        })
    );
    let pts: Vec<i64> = fx.fragments.iter().map(|g| g.presentation_start).collect();
    assert_eq!(pts, vec![0, 25_000, 50_600]);
    // One subsegment for the first two fragments is consistent too.
    let (f, _) = with_sidx(|s, total| {
        vec![
            ((s[2] - s[0]) as u32, 51_200),
            ((total - s[2]) as u32, 25_600),
        ]
    });
    assert_eq!(index(&f, 999).fragments.unwrap().sidx, SidxUse::Used);
}

#[test]
fn inconsistent_sidx_falls_back_to_the_moofs() {
    let (f, _) = with_sidx(|s, total| {
        vec![
            ((s[1] - s[0] + 4) as u32, 25_000),
            ((total - s[1] - 4) as u32, 51_200),
        ]
    });
    let fx = index(&f, 999).fragments.unwrap();
    assert_eq!(fx.sidx, SidxUse::Inconsistent);
    let pts: Vec<i64> = fx.fragments.iter().map(|g| g.presentation_start).collect();
    assert_eq!(pts, vec![0, 25_600, 51_200]);
    // A sidx that misses the last fragment is not used either.
    let (f, _) = with_sidx(|s, _| vec![((s[1] - s[0]) as u32, 25_600)]);
    assert_eq!(
        index(&f, 999).fragments.unwrap().sidx,
        SidxUse::Inconsistent
    );
}

#[test]
fn progressive_mp4_has_no_fragment_index() {
    let moov = bx(b"moov", &trak(1, b"vide", 12_800));
    let f = [bx(b"ftyp", b"isom\0\0\0\0"), moov, mdat(10)].concat();
    let ix = index(&f, 7);
    assert_eq!(ix.fragments, None);
    assert!(ix.points.is_empty());
}

#[test]
fn a_moof_too_large_stops_the_listing() {
    let (mut f, _) = three_fragments();
    let big = MAX_MOOF_BYTES as u32 + 8;
    f.extend(big.to_be_bytes());
    f.extend(b"moof");
    let fx = index(&f, 1 << 16).fragments.unwrap();
    assert!(!fx.complete);
    assert_eq!(fx.fragments.len(), 3);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any bytes after a fragmented init, any mutation of a good file: no panic, points
    /// increasing, fragments within the bytes fed.
    #[test]
    fn never_panics(tail in proptest::collection::vec(any::<u8>(), 0..2000),
                    flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..8),
                    chunk in 1usize..300) {
        let (mut f, _) = three_fragments();
        for (at, v) in flips {
            let n = f.len();
            f[at % n] ^= v;
        }
        f.extend(tail);
        let ix = index(&f, chunk);
        for w in ix.points.windows(2) {
            prop_assert!(w[0].time_s < w[1].time_s && w[0].offset_bytes < w[1].offset_bytes);
        }
        if let Some(fx) = ix.fragments {
            for g in &fx.fragments {
                prop_assert!(g.bytes.end() <= f.len() as u64);
            }
        }
    }
}

/// ffmpeg's `empty_moov` output: `mvhd` duration 0 and no `mehd`; the probe adds up the
/// fragments instead of giving up (`Mp4NoDuration`).
#[test]
fn probe_takes_a_fragmented_mp4s_duration_from_its_fragments() {
    let ftyp = bx(b"ftyp", b"iso6\0\0\0\0iso6cmfc");
    let mvhd = full(b"mvhd", 0, 0, &words(&[0, 0, 1000, 0, 0x0001_0000]));
    let trex_v = full(b"trex", 0, 0, &words(&[1, 1, 512, 0, NON_SYNC_FLAGS]));
    let mvex = bx(b"mvex", &trex_v);
    let moov = bx(b"moov", &[mvhd, trak(1, b"vide", 12_800), mvex].concat());
    let mut f = [ftyp, moov].concat();
    for (i, dts) in [0u64, 25_600, 51_200].into_iter().enumerate() {
        f.extend(moof(i as u32 + 1, Some(dts), 50, None, Some(SYNC)));
        f.extend(mdat(1000));
    }
    let len = f.len() as u64;
    let info = crate::probe(&f, len).expect("probe");
    assert_eq!(info.container, Container::Mp4);
    assert_eq!(info.duration_s, Some(6.0));
    let expect = (len as f64 * 8.0 / 6.0).round() as u64;
    assert_eq!(info.bitrate_bps, Some(expect));
    // Without fragments it is still unknown.
    let bare = f[..f.len() - 3 * (moof(1, Some(0), 50, None, Some(SYNC)).len() + 1008)].to_vec();
    let info = crate::probe(&bare, bare.len() as u64).expect("probe");
    assert_eq!(
        info.bitrate_unknown,
        Some(crate::BitrateUnknown::Mp4NoDuration)
    );
}
