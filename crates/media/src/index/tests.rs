use super::*;
use proptest::prelude::*;

const VIDEO_PID: u16 = 0x100;
const AUDIO_PID: u16 = 0x101;

/// A TS packet on `pid` starting a PES of `stream_id` with PTS `pts`; `rai` sets the
/// random_access_indicator (in a 2-byte adaptation field); `es` is the start of its payload.
fn pes_packet(pid: u16, stream_id: u8, pts: u64, rai: bool, es: &[u8]) -> Vec<u8> {
    let mut p = vec![0x47, 0x40 | (pid >> 8) as u8, pid as u8, 0x30, 1, 0];
    if rai {
        p[5] = 0x40;
    }
    p.extend_from_slice(&[0, 0, 1, stream_id, 0, 0, 0x80, 0x80, 5]);
    p.extend_from_slice(&[
        0x21 | ((pts >> 29) & 0x0E) as u8,
        (pts >> 22) as u8,
        0x01 | ((pts >> 14) & 0xFE) as u8,
        (pts >> 7) as u8,
        0x01 | ((pts << 1) & 0xFE) as u8,
    ]);
    p.extend_from_slice(es);
    p.resize(188, 0xFF);
    p
}

/// A continuation packet (no PUSI) on `pid`.
fn continuation(pid: u16) -> Vec<u8> {
    let mut p = vec![0x47, (pid >> 8) as u8, pid as u8, 0x10];
    p.resize(188, 0xAB);
    p
}

/// A synthetic stream: a key frame every `gop` frames at 25 frame/s from PTS `first_pts`,
/// each frame one PES packet and two continuations, audio with RAI between the frames.
fn synthetic(frames: u64, gop: u64, first_pts: u64) -> (Vec<u8>, Vec<AccessPoint>) {
    let mut out = Vec::new();
    let mut expect = Vec::new();
    for f in 0..frames {
        let pts = (first_pts + f * 3600) % (1 << 33);
        let key = f % gop == 0;
        if key {
            expect.push(AccessPoint {
                time_s: (f * 3600) as f64 / 90_000.0,
                offset_bytes: out.len() as u64,
            });
        }
        out.extend(pes_packet(VIDEO_PID, 0xE0, pts, key, &[0, 0, 0, 1, 0x09]));
        out.extend(continuation(VIDEO_PID));
        out.extend(pes_packet(AUDIO_PID, 0xC0, pts, true, &[]));
        out.extend(continuation(VIDEO_PID));
    }
    (out, expect)
}

fn index(data: &[u8], chunk: usize) -> MediaIndex {
    let mut ix = Indexer::new();
    for c in data.chunks(chunk.max(1)) {
        ix.feed(c);
    }
    ix.finish()
}

#[test]
fn ts_random_access_indicator_on_the_video_pid_only() {
    let (ts, expect) = synthetic(250, 50, 126_000);
    let got = index(&ts, 64 * 1024);
    assert_eq!(got.container, Container::MpegTs);
    assert_eq!(got.points, expect);
    assert_eq!(got.points.len(), 5);
    assert_eq!(got.points[1].time_s, 2.0);
    assert_eq!(got.moov_at_front, None);
    // Fed in odd pieces, the index is the same.
    for chunk in [1, 7, 187, 188, 189, 4095, 4097] {
        assert_eq!(index(&ts, chunk).points, expect, "chunk {chunk}");
    }
}

#[test]
fn ts_points_so_far_are_those_before_the_bytes_fed() {
    let (ts, expect) = synthetic(250, 50, 126_000);
    let mut ix = Indexer::new();
    assert_eq!(ix.ts_points(), None, "the container is not known yet");
    let mut fed = 0usize;
    for c in ts.chunks(1000) {
        ix.feed(c);
        fed += c.len();
        if let Some(so_far) = ix.ts_points() {
            let before: Vec<AccessPoint> = expect
                .iter()
                .copied()
                .filter(|p| p.offset_bytes + 188 <= fed as u64)
                .collect();
            assert!(so_far.len() >= before.len(), "at {fed}: {so_far:?}");
            assert_eq!(so_far, &expect[..so_far.len()], "at {fed}");
            assert!(so_far.iter().all(|p| p.offset_bytes < fed as u64));
        }
    }
    assert_eq!(ix.ts_points(), Some(&expect[..]));
    let mut mp4 = Indexer::new();
    mp4.feed(&mp4_box(b"ftyp", b"isom\0\0\0\0isom"));
    mp4.feed(&[0; 64]);
    assert_eq!(mp4.ts_points(), None);
}

#[test]
fn ts_pts_wrap_and_point_lookup() {
    let (ts, expect) = synthetic(200, 50, (1 << 33) - 90_000);
    let got = index(&ts, 1000);
    assert_eq!(got.points, expect);
    assert_eq!(got.point_at(5.0).map(|p| p.time_s), Some(4.0));
    assert_eq!(got.point_at(4.0).map(|p| p.time_s), Some(4.0));
    assert_eq!(got.point_at(-1.0).map(|p| p.time_s), Some(0.0));
    assert_eq!(got.point_at(1e9).map(|p| p.time_s), Some(6.0));
}

#[test]
fn ts_h264_idr_without_rai() {
    // No RAI anywhere; a PMT says the video is H.264, the key frames carry an IDR NAL.
    let mut ts = Vec::new();
    ts.extend(psi_packet(0, &pat()));
    ts.extend(psi_packet(0x1000, &pmt()));
    let mut expect = Vec::new();
    for f in 0..100u64 {
        let key = f % 25 == 0;
        if key {
            expect.push(AccessPoint {
                time_s: f as f64 * 0.04,
                offset_bytes: ts.len() as u64,
            });
        }
        let nal = if key { 0x65 } else { 0x41 };
        ts.extend(pes_packet(
            VIDEO_PID,
            0xE0,
            9000 + f * 3600,
            false,
            &[0, 0, 1, nal],
        ));
    }
    let got = index(&ts, 500);
    assert_eq!(got.points.len(), 4);
    for (g, e) in got.points.iter().zip(&expect) {
        assert_eq!(g.offset_bytes, e.offset_bytes);
        assert!((g.time_s - e.time_s).abs() < 1e-9);
    }
}

fn pat() -> Vec<u8> {
    let mut s = vec![0x00, 0xB0, 13, 0, 1, 0xC1, 0, 0, 0, 1, 0xF0, 0x00];
    let crc = crate::crc32_mpeg2(&s);
    s.extend_from_slice(&crc.to_be_bytes());
    s
}

fn pmt() -> Vec<u8> {
    let mut s = vec![0x02, 0xB0, 18, 0, 1, 0xC1, 0, 0, 0xE1, 0x00, 0xF0, 0x00];
    s.extend_from_slice(&[0x1B, 0xE1, 0x00, 0xF0, 0x00]);
    let crc = crate::crc32_mpeg2(&s);
    s.extend_from_slice(&crc.to_be_bytes());
    s
}

fn psi_packet(pid: u16, section: &[u8]) -> Vec<u8> {
    let mut p = vec![0x47, 0x40 | (pid >> 8) as u8, pid as u8, 0x10, 0];
    p.extend_from_slice(section);
    p.resize(188, 0xFF);
    p
}

#[test]
fn ts_lost_sync_stops_indexing() {
    let (mut ts, expect) = synthetic(150, 50, 0);
    let cut = expect[1].offset_bytes as usize;
    ts[cut] = 0;
    let got = index(&ts, 4096);
    assert_eq!(got.points, expect[..1]);
}

#[test]
fn short_and_unknown_inputs() {
    assert_eq!(index(&[], 1).container, Container::Unknown);
    assert!(index(b"hello", 1).points.is_empty());
    let got = index(&[0x47; 188], 10);
    assert_eq!(got.container, Container::MpegTs);
    assert!(got.points.is_empty());
}

/// An MP4 box.
fn mp4_box(kind: &[u8; 4], content: &[u8]) -> Vec<u8> {
    let mut b = ((content.len() + 8) as u32).to_be_bytes().to_vec();
    b.extend_from_slice(kind);
    b.extend_from_slice(content);
    b
}

fn full(kind: &[u8; 4], words: &[u32]) -> Vec<u8> {
    let mut c = vec![0u8; 4];
    for w in words {
        c.extend_from_slice(&w.to_be_bytes());
    }
    mp4_box(kind, &c)
}

/// A moov of one video track: 10 samples of 100 bytes in 2 chunks of 5, timescale 1000,
/// 500 ticks each, sync samples 1, 5 and 9, chunks at `base` and `base + 2000`.
fn moov(base: u32) -> Vec<u8> {
    let mut hdlr = vec![0u8; 8];
    hdlr.extend_from_slice(b"vide");
    hdlr.extend_from_slice(&[0; 12]);
    let mdhd = full(b"mdhd", &[0, 0, 1000, 5000, 0]);
    let stbl = [
        full(b"stts", &[1, 10, 500]),
        full(b"stss", &[3, 1, 5, 9]),
        full(b"stsc", &[1, 1, 5, 1]),
        full(
            b"stsz",
            &[0, 10, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100],
        ),
        full(b"stco", &[2, base, base + 2000]),
    ]
    .concat();
    let minf = mp4_box(b"minf", &mp4_box(b"stbl", &stbl));
    let mdia = mp4_box(b"mdia", &[mdhd, mp4_box(b"hdlr", &hdlr), minf].concat());
    mp4_box(b"moov", &mp4_box(b"trak", &mdia))
}

#[test]
fn mp4_sync_samples_from_the_tables() {
    let ftyp = mp4_box(b"ftyp", b"isom\0\0\0\0");
    let mdat = mp4_box(b"mdat", &[0u8; 5000]);
    let front = [ftyp.clone(), moov(1000), mdat.clone()].concat();
    let got = index(&front, 333);
    assert_eq!(got.container, Container::Mp4);
    assert_eq!(got.moov_at_front, Some(true));
    let want = [(0.0, 1000), (2.0, 1400), (4.0, 3300)];
    let got_pairs: Vec<(f64, u64)> = got
        .points
        .iter()
        .map(|p| (p.time_s, p.offset_bytes))
        .collect();
    assert_eq!(got_pairs, want);
    let end = [ftyp, mdat, moov(1000)].concat();
    let got = index(&end, 4096);
    assert_eq!(got.moov_at_front, Some(false));
    assert_eq!(got.points.len(), 3);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    #[test]
    fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..20_000),
                    prefix in 0u8..3, chunk in 1usize..5000) {
        let mut input = match prefix {
            0 => Vec::new(),
            1 => synthetic(3, 1, 0).0,
            _ => [mp4_box(b"ftyp", b"isom"), moov(0)].concat(),
        };
        input.extend_from_slice(&data);
        let got = index(&input, chunk);
        for w in got.points.windows(2) {
            prop_assert!(w[0].time_s < w[1].time_s && w[0].offset_bytes < w[1].offset_bytes);
        }
    }

    #[test]
    fn corrupted_moov_never_panics(flips in proptest::collection::vec((0usize..400, any::<u8>()), 1..8)) {
        let mut m = [mp4_box(b"ftyp", b"isom"), moov(0)].concat();
        for (at, v) in flips {
            let at = at % m.len();
            m[at] = v;
        }
        let _ = index(&m, 100);
    }
}

#[test]
fn ts_key_frames_span_their_video_packets_and_the_init_is_the_pat_and_pmt() {
    let mut ts = Vec::new();
    ts.extend(psi_packet(0, &pat()));
    ts.extend(psi_packet(0x1000, &pmt()));
    let (frames, expect) = synthetic(100, 25, 0);
    ts.extend(frames);
    let got = index(&ts, 333);
    let k = got.ts_key_frames.expect("a TS's key frames");
    assert_eq!(
        k.init,
        Some(ByteRange {
            offset: 0,
            length: 376
        })
    );
    assert_eq!(k.frames.len(), expect.len());
    for (f, e) in k.frames.iter().zip(&expect) {
        // Its PES packet, a video continuation, an audio packet, a video continuation.
        assert_eq!(f.bytes.offset, e.offset_bytes + 376);
        assert_eq!(f.bytes.length, 4 * 188);
        assert!((f.time_s - e.time_s).abs() < 1e-9);
    }
    // Without a PAT and PMT: the key frames, no init range.
    let (frames, _) = synthetic(30, 25, 0);
    let k = index(&frames, 1000).ts_key_frames.expect("key frames");
    assert_eq!((k.init, k.frames.len()), (None, 2));
    // A key frame ends where the next frame's PES starts (frame 26 here), not later.
    assert_eq!(
        k.frames[1].bytes.offset + k.frames[1].bytes.length,
        26 * 4 * 188
    );
    // A key frame that is the last frame ends at the last video packet, audio after it not
    // included.
    let (mut frames, _) = synthetic(26, 25, 0);
    frames.extend(pes_packet(AUDIO_PID, 0xC0, 0, true, &[]));
    let k = index(&frames, 1000).ts_key_frames.expect("key frames");
    assert_eq!(
        k.frames[1].bytes.offset + k.frames[1].bytes.length,
        26 * 4 * 188
    );
}
