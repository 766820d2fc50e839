//! Handcrafted ISO-BMFF files: box walking, mvhd v0/v1, mehd, truncation.

use isnode_media::{probe, probe_mp4, BitrateUnknown, Container, MediaError, ReadAt};

fn bx(kind: &[u8; 4], content: &[u8]) -> Vec<u8> {
    let mut v = ((content.len() + 8) as u32).to_be_bytes().to_vec();
    v.extend_from_slice(kind);
    v.extend_from_slice(content);
    v
}

/// A box with a 64-bit largesize.
fn bx64(kind: &[u8; 4], content: &[u8]) -> Vec<u8> {
    let mut v = 1u32.to_be_bytes().to_vec();
    v.extend_from_slice(kind);
    v.extend_from_slice(&((content.len() + 16) as u64).to_be_bytes());
    v.extend_from_slice(content);
    v
}

fn ftyp() -> Vec<u8> {
    bx(b"ftyp", b"isom\0\0\x02\0isomiso2mp41")
}

fn mvhd_v0(timescale: u32, duration: u32) -> Vec<u8> {
    let mut c = vec![0, 0, 0, 0]; // version 0, flags
    c.extend_from_slice(&1u32.to_be_bytes()); // creation_time
    c.extend_from_slice(&2u32.to_be_bytes()); // modification_time
    c.extend_from_slice(&timescale.to_be_bytes());
    c.extend_from_slice(&duration.to_be_bytes());
    c.extend_from_slice(&[0u8; 80]); // rate, volume, matrix, ..., next_track_ID
    bx(b"mvhd", &c)
}

fn mvhd_v1(timescale: u32, duration: u64) -> Vec<u8> {
    let mut c = vec![1, 0, 0, 0];
    c.extend_from_slice(&1u64.to_be_bytes());
    c.extend_from_slice(&2u64.to_be_bytes());
    c.extend_from_slice(&timescale.to_be_bytes());
    c.extend_from_slice(&duration.to_be_bytes());
    c.extend_from_slice(&[0u8; 80]);
    bx(b"mvhd", &c)
}

fn moov(children: &[Vec<u8>]) -> Vec<u8> {
    bx(b"moov", &children.concat())
}

fn mdat(len: usize) -> Vec<u8> {
    bx(
        b"mdat",
        &(0..len).map(|i| (i * 31 % 251) as u8).collect::<Vec<_>>(),
    )
}

fn expect_timing(file: &[u8], duration_s: f64) {
    let info = probe(file, file.len() as u64).unwrap();
    assert_eq!(info.container, Container::Mp4);
    assert_eq!(info.content_type, "video/mp4");
    let d = info.duration_s.unwrap();
    assert!(
        (d - duration_s).abs() < 1e-9,
        "duration {d} vs {duration_s}"
    );
    let want = (file.len() as f64 * 8.0 / duration_s).round() as u64;
    assert_eq!(info.bitrate_bps, Some(want));
}

#[test]
fn mvhd_v0_moov_first() {
    let file = [ftyp(), moov(&[mvhd_v0(1000, 12_500)]), mdat(50_000)].concat();
    expect_timing(&file, 12.5);
}

#[test]
fn mvhd_v1_moov_after_mdat() {
    let file = [ftyp(), mdat(80_000), moov(&[mvhd_v1(90_000, 90_000 * 30)])].concat();
    expect_timing(&file, 30.0);
}

#[test]
fn mvhd_after_other_moov_children() {
    let trak = bx(b"trak", &bx(b"tkhd", &[0u8; 84]));
    let file = [
        ftyp(),
        bx(b"free", &[0; 10]),
        moov(&[trak, mvhd_v0(600, 1800)]),
        mdat(1000),
    ]
    .concat();
    expect_timing(&file, 3.0);
}

#[test]
fn largesize_and_size_zero_boxes() {
    let big_mdat = bx64(b"mdat", &[7u8; 4000]);
    let file = [ftyp(), big_mdat, moov(&[mvhd_v0(1000, 2000)])].concat();
    expect_timing(&file, 2.0);

    // size 0: the last box extends to the end of the file.
    let mut open_mdat = 0u32.to_be_bytes().to_vec();
    open_mdat.extend_from_slice(b"mdat");
    open_mdat.extend_from_slice(&[9u8; 3000]);
    let file = [ftyp(), moov(&[mvhd_v1(1000, 1500)]), open_mdat].concat();
    expect_timing(&file, 1.5);
}

#[test]
fn fragmented_mp4_uses_mehd() {
    let mehd = bx(
        b"mehd",
        &[&[0u8, 0, 0, 0][..], &48_000u32.to_be_bytes()].concat(),
    );
    let mvex = bx(b"mvex", &mehd);
    let moof = bx(b"moof", &[0u8; 40]);
    let file = [ftyp(), moov(&[mvhd_v0(12_000, 0), mvex]), moof, mdat(5000)].concat();
    expect_timing(&file, 4.0);
}

#[test]
fn missing_timing_is_reported_not_guessed() {
    let file = [ftyp(), mdat(100)].concat();
    let info = probe(&file[..], file.len() as u64).unwrap();
    assert_eq!(info.container, Container::Mp4);
    assert_eq!(info.bitrate_unknown, Some(BitrateUnknown::Mp4NoMoov));
    assert_eq!(
        info.require_bitrate().unwrap_err().to_string(),
        "the MP4 has no moov box: pass --bitrate"
    );

    let file = [ftyp(), moov(&[bx(b"trak", &[])]), mdat(100)].concat();
    let info = probe(&file[..], file.len() as u64).unwrap();
    assert_eq!(info.bitrate_unknown, Some(BitrateUnknown::Mp4NoMvhd));

    for mvhd in [
        mvhd_v0(1000, 0),
        mvhd_v0(0, 1000),
        mvhd_v0(1000, u32::MAX),
        mvhd_v1(1000, u64::MAX),
    ] {
        let file = [ftyp(), moov(&[mvhd]), mdat(100)].concat();
        let info = probe(&file[..], file.len() as u64).unwrap();
        assert_eq!(info.bitrate_unknown, Some(BitrateUnknown::Mp4NoDuration));
        assert_eq!(info.bitrate_bps, None);
    }
}

#[test]
fn truncated_mp4_is_refused() {
    let file = [ftyp(), moov(&[mvhd_v0(1000, 10_000)]), mdat(10_000)].concat();
    for cut in [
        file.len() - 1,
        file.len() - 5000,
        ftyp().len() + 3,
        ftyp().len() + 20,
    ] {
        let part = &file[..cut];
        let err = probe(part, cut as u64).unwrap_err();
        assert!(
            matches!(
                err,
                MediaError::Truncated {
                    container: Container::Mp4,
                    ..
                }
            ),
            "cut at {cut}: {err}"
        );
        assert!(err.to_string().starts_with("MP4 is truncated: "), "{err}");
    }
    let err = probe(&file[..file.len() - 1], file.len() as u64 - 1).unwrap_err();
    assert!(err.to_string().contains("box 'mdat' at byte"), "{err}");
    // A source shorter than the declared length is truncated too.
    let err = probe(&file[..100], file.len() as u64).unwrap_err();
    assert!(matches!(err, MediaError::Truncated { .. }), "{err}");
}

#[test]
fn malformed_boxes_are_errors() {
    let mut bad_size = ftyp();
    bad_size.extend_from_slice(&[0, 0, 0, 4, b'f', b'r', b'e', b'e']);
    let err = probe(&bad_size[..], bad_size.len() as u64).unwrap_err();
    assert!(matches!(err, MediaError::Malformed { .. }), "{err}");

    // A child that overruns moov.
    let mut m = moov(&[mvhd_v0(1000, 1000)]);
    m[8..12].copy_from_slice(&1000u32.to_be_bytes());
    let file = [ftyp(), m].concat();
    let err = probe(&file[..], file.len() as u64).unwrap_err();
    assert!(matches!(err, MediaError::Malformed { .. }), "{err}");

    // Unsupported mvhd version, and a too-short mvhd.
    let mut v2 = mvhd_v0(1000, 1000);
    v2[8] = 2;
    for mvhd in [v2, bx(b"mvhd", &[0u8; 12])] {
        let file = [ftyp(), moov(&[mvhd])].concat();
        let err = probe(&file[..], file.len() as u64).unwrap_err();
        assert!(matches!(err, MediaError::Malformed { .. }), "{err}");
    }
}

/// A source that counts how many bytes are read, to show probing does not read the media data.
struct Counting<'a>(&'a [u8], std::cell::Cell<u64>);

impl ReadAt for Counting<'_> {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.0.read_at(offset, buf)?;
        self.1.set(self.1.get() + n as u64);
        Ok(n)
    }
}

#[test]
fn probe_mp4_reads_only_headers() {
    let file = [ftyp(), mdat(2_000_000), moov(&[mvhd_v0(1000, 10_000)])].concat();
    let src = Counting(&file, Default::default());
    let info = probe_mp4(&src, file.len() as u64).unwrap();
    assert_eq!(info.duration_s, Some(10.0));
    assert!(src.1.get() < 200, "read {} bytes", src.1.get());
    // probe() reads its small detection window, then the same headers.
    let src = Counting(&file, Default::default());
    probe(&src, file.len() as u64).unwrap();
    assert!(src.1.get() < 5000, "read {} bytes", src.1.get());
}
