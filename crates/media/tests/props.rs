//! Property tests: parsing never panics, and generated streams always probe to their bitrate.

use std::sync::OnceLock;

use isnode_media::{
    detect, generate_ts, probe, probe_mp4, probe_ts, Container, MediaError, TsGenConfig,
};
use proptest::prelude::*;

fn small_ts() -> &'static [u8] {
    static TS: OnceLock<Vec<u8>> = OnceLock::new();
    TS.get_or_init(|| {
        let cfg = TsGenConfig {
            bitrate_bps: 300_000,
            duration_s: 0.5,
            seed: 3,
        };
        let mut v = Vec::new();
        generate_ts(&cfg, &mut v).unwrap();
        v
    })
}

fn small_mp4() -> &'static [u8] {
    static MP4: OnceLock<Vec<u8>> = OnceLock::new();
    MP4.get_or_init(|| {
        let bx = |kind: &[u8; 4], content: &[u8]| {
            let mut v = ((content.len() + 8) as u32).to_be_bytes().to_vec();
            v.extend_from_slice(kind);
            v.extend_from_slice(content);
            v
        };
        let mut mvhd = vec![0u8; 4];
        mvhd.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 2]);
        mvhd.extend_from_slice(&1000u32.to_be_bytes());
        mvhd.extend_from_slice(&5000u32.to_be_bytes());
        mvhd.extend_from_slice(&[0u8; 80]);
        let mehd = bx(b"mehd", &[0, 0, 0, 0, 0, 0, 0x13, 0x88]);
        let moov = bx(b"moov", &[bx(b"mvhd", &mvhd), bx(b"mvex", &mehd)].concat());
        [
            bx(b"ftyp", b"isom\0\0\0\0"),
            moov,
            bx(b"mdat", &[0x55; 300]),
        ]
        .concat()
    })
}

/// Every probe entry point on `data`, with a few declared lengths; none may panic.
fn probe_everything(data: &[u8], claimed_extra: u64) {
    let len = data.len() as u64;
    let outcomes = [
        probe(data, len),
        probe(data, len + claimed_extra),
        probe(data, len.saturating_sub(claimed_extra)),
        probe_mp4(data, len),
        probe_ts(data, data, len),
        probe_ts(&data[..data.len() / 2], &data[data.len() / 2..], len),
    ];
    for info in outcomes.into_iter().flatten() {
        assert_eq!(info.content_type, info.container.content_type());
        assert_eq!(info.bitrate_bps.is_none(), info.bitrate_unknown.is_some());
        if let Some(b) = info.bitrate_bps {
            assert!(b > 0);
        }
    }
    let _ = detect(data);
}

fn mutate(base: &[u8], edits: &[(usize, u8)], cut: usize) -> Vec<u8> {
    let mut v = base.to_vec();
    for &(i, b) in edits {
        let i = i % v.len();
        v[i] = b;
    }
    v.truncate(v.len() - cut % v.len().max(1));
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..3000), extra in 0u64..100_000) {
        probe_everything(&data, extra);
        // Random bytes are almost never media; if they are not detected, probe says Unknown.
        if detect(&data) == Container::Unknown {
            let info = probe(&data[..], data.len() as u64).unwrap();
            prop_assert_eq!(info.container, Container::Unknown);
        }
    }

    #[test]
    fn packet_shaped_random_bytes_never_panic(
        packets in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 187), 1..20),
        extra in 0u64..1000,
    ) {
        let data: Vec<u8> = packets.iter().flat_map(|p| std::iter::once(0x47).chain(p.iter().copied())).collect();
        prop_assert_eq!(detect(&data), Container::MpegTs);
        probe_everything(&data, extra);
    }

    #[test]
    fn box_shaped_random_bytes_never_panic(
        boxes in proptest::collection::vec((0u32..64, 0usize..6, proptest::collection::vec(any::<u8>(), 0..40)), 1..10),
    ) {
        let kinds: [&[u8; 4]; 6] = [b"ftyp", b"moov", b"mvhd", b"mvex", b"mehd", b"mdat"];
        let mut data = Vec::new();
        for (size, kind, body) in &boxes {
            data.extend_from_slice(&size.to_be_bytes());
            data.extend_from_slice(kinds[*kind]);
            data.extend_from_slice(body);
        }
        probe_everything(&data, 7);
    }

    #[test]
    fn mutated_ts_never_panics(edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..40), cut in 0usize..2000) {
        let data = mutate(small_ts(), &edits, cut);
        probe_everything(&data, 188);
    }

    #[test]
    fn mutated_mp4_never_panics(edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..20), cut in 0usize..500) {
        let data = mutate(small_mp4(), &edits, cut);
        probe_everything(&data, 1 << 40);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn generated_ts_probes_to_its_bitrate(bitrate in 100_000u64..8_000_000, tenths in 2u32..15, seed in any::<u64>()) {
        let duration_s = f64::from(tenths) / 10.0;
        let cfg = TsGenConfig { bitrate_bps: bitrate, duration_s, seed };
        let mut ts = Vec::new();
        let n = generate_ts(&cfg, &mut ts).unwrap();
        let info = probe(&ts[..], n).unwrap();
        prop_assert_eq!(info.container, Container::MpegTs);
        let got = info.bitrate_bps.unwrap() as f64;
        let within = (got - bitrate as f64).abs() <= bitrate as f64 * 0.005;
        prop_assert!(within, "{} vs {}", got, bitrate);
        // Dropping any partial packet's worth of bytes is caught.
        let cut = (seed % 187 + 1) as usize;
        let truncated = probe(&ts[..ts.len() - cut], n - cut as u64);
        let is_truncated = matches!(truncated, Err(MediaError::Truncated { .. }));
        prop_assert!(is_truncated, "{:?}", truncated);
    }
}

#[test]
fn sanity_of_fixtures() {
    assert_eq!(detect(small_ts()), Container::MpegTs);
    let info = probe(small_mp4(), small_mp4().len() as u64).unwrap();
    assert_eq!(info.container, Container::Mp4);
    assert_eq!(info.duration_s, Some(5.0));
}
