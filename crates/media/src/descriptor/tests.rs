//! Hand-built sample descriptions: `hvcC` codec strings, `esds` object types, `stts` frame
//! rates, and no panic on any bytes.

use super::*;
use proptest::prelude::*;

fn bx(kind: &[u8; 4], content: &[u8]) -> Vec<u8> {
    let mut b = (8 + content.len() as u32).to_be_bytes().to_vec();
    b.extend_from_slice(kind);
    b.extend_from_slice(content);
    b
}

/// A `trak` (handler, mdhd timescale, one sample entry, one stts entry of `delta`).
fn trak(handler: &[u8; 4], timescale: u32, entry: Vec<u8>, delta: u32) -> Vec<u8> {
    let w = |v: &[u32]| v.iter().flat_map(|x| x.to_be_bytes()).collect::<Vec<u8>>();
    let tkhd = bx(b"tkhd", &w(&[0, 0, 0, 1, 0, 0]));
    let mdhd = bx(b"mdhd", &w(&[0, 0, 0, timescale, 0, 0]));
    let hdlr = bx(b"hdlr", &[&w(&[0, 0])[..], handler, &[0; 13]].concat());
    let stsd = bx(b"stsd", &[w(&[0, 1]), entry].concat());
    let stts = bx(b"stts", &w(&[0, 1, 100, delta]));
    let stbl = bx(b"stbl", &[stsd, stts].concat());
    let minf = bx(b"minf", &stbl);
    bx(
        b"trak",
        &[tkhd, bx(b"mdia", &[mdhd, hdlr, minf].concat())].concat(),
    )
}

fn hvc1_entry() -> Vec<u8> {
    let mut c = vec![0u8; 78];
    c[24..28].copy_from_slice(&[0x07, 0x80, 0x04, 0x38]); // 1920x1080
    let mut hvcc = vec![1, 0x01, 0x60, 0, 0, 0, 0x90, 0, 0, 0, 0, 0, 120];
    hvcc.extend([0; 10]);
    c.extend(bx(b"hvcC", &hvcc));
    bx(b"hvc1", &c)
}

fn mp4a_entry(oti: u8, asc: &[u8]) -> Vec<u8> {
    let mut c = vec![0u8; 28];
    c[17] = 2; // channels
    c[24..26].copy_from_slice(&44_100u16.to_be_bytes());
    let mut dcd = vec![oti, 0x15, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    dcd.extend([0x05, asc.len() as u8]);
    dcd.extend(asc);
    let mut es = vec![0, 1, 0, 0x04, dcd.len() as u8];
    es.extend(dcd);
    let mut esds = vec![0, 0, 0, 0, 0x03, 0x80, 0x80, 0x80, es.len() as u8];
    esds.extend(es);
    c.extend(bx(b"esds", &esds));
    bx(b"mp4a", &c)
}

#[test]
fn hevc_and_he_aac_from_the_sample_descriptions() {
    // HE-AAC (AOT 5) at 24 kHz (index 6), 2 channels: 00101 0110 0010 ...
    let asc = [0x2B, 0x10];
    let moov = [
        trak(b"vide", 30_000, hvc1_entry(), 1001),
        trak(b"soun", 44_100, mp4a_entry(0x40, &asc), 1024),
        trak(b"soun", 44_100, mp4a_entry(0x6B, &[]), 1152),
    ]
    .concat();
    let d = describe_moov(&moov);
    let v = d.video.as_ref().unwrap();
    assert_eq!(v.codec, "hvc1.1.6.L120.90");
    assert_eq!((v.width, v.height), (Some(1920), Some(1080)));
    assert_eq!(
        v.frame_rate,
        Some(FrameRate {
            num: 30_000,
            den: 1001
        })
    );
    assert_eq!(v.frame_rate_source, Some(FrameRateSource::SampleDurations));
    assert_eq!(d.audio[0].codec, "mp4a.40.5");
    assert_eq!(d.audio[0].sample_rate, Some(24_000));
    assert_eq!(d.audio[0].channels, Some(2));
    assert_eq!(d.audio[1].codec, "mp4a.6B");
    assert_eq!(d.audio[1].sample_rate, Some(44_100));
    assert_eq!(d.codecs(), "hvc1.1.6.L120.90,mp4a.40.5,mp4a.6B");
}

proptest! {
    #[test]
    fn never_panics(moov in proptest::collection::vec(any::<u8>(), 0..600),
                    flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6)) {
        let _ = describe_moov(&moov);
        let mut good = [
            trak(b"vide", 30_000, hvc1_entry(), 1001),
            trak(b"soun", 44_100, mp4a_entry(0x40, &[0x12, 0x10]), 1024),
        ]
        .concat();
        for (at, v) in flips {
            let n = good.len();
            good[at % n] ^= v;
        }
        let _ = describe_moov(&good);
        let _ = crate::describe_ts(&moov);
    }
}
