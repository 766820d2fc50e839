//! ISO base media file format (MP4) probing: box walking and `moov/mvhd`.

use crate::{read_region, BitrateUnknown, Container, MediaError, MediaInfo, ReadAt};

/// Box types accepted as the first box of an MP4 by [`crate::detect`].
const TOP_LEVEL_TYPES: [&[u8; 4]; 9] = [
    b"ftyp", b"moov", b"mdat", b"free", b"skip", b"styp", b"wide", b"pdin", b"uuid",
];

/// Upper bound on top-level boxes walked, so a file of millions of tiny boxes is refused
/// instead of costing millions of reads.
const MAX_TOP_LEVEL_BOXES: u64 = 1 << 22;
/// Upper bound on children of `moov` / `mvex` examined.
const MAX_CHILD_BOXES: u64 = 1 << 16;

pub(crate) fn looks_like_mp4(head: &[u8]) -> bool {
    let Some(hdr) = head.get(..8) else {
        return false;
    };
    let size = u32::from_be_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
    (size == 0 || size == 1 || size >= 8) && TOP_LEVEL_TYPES.iter().any(|t| hdr[4..8] == t[..])
}

/// A box header: its type, where it starts, where its content starts and where it ends.
#[derive(Debug, Clone, Copy)]
struct BoxHeader {
    kind: [u8; 4],
    start: u64,
    content: u64,
    end: u64,
}

fn show(kind: [u8; 4]) -> String {
    kind.escape_ascii().to_string()
}

fn malformed(reason: String) -> MediaError {
    MediaError::Malformed {
        container: Container::Mp4,
        reason,
    }
}

fn truncated(reason: String) -> MediaError {
    MediaError::Truncated {
        container: Container::Mp4,
        reason,
    }
}

/// Reads the box header at `pos`, which must lie before `limit` (the end of the parent, or of
/// the file at top level). `top_level` selects truncation (top level) vs malformation (nested)
/// errors for a box that overruns `limit`.
fn read_box_header<R: ReadAt + ?Sized>(
    src: &R,
    pos: u64,
    limit: u64,
    total_len: u64,
    top_level: bool,
) -> Result<BoxHeader, MediaError> {
    let overrun = |msg: String| {
        if top_level {
            truncated(msg)
        } else {
            malformed(msg)
        }
    };
    let avail = limit - pos;
    if avail < 8 {
        return Err(overrun(format!(
            "box header at byte {pos} has only {avail} of 8 bytes"
        )));
    }
    let mut hdr = [0u8; 16];
    let want = if avail >= 16 { 16 } else { 8 };
    read_region(src, Container::Mp4, pos, &mut hdr[..want], total_len)?;
    let size32 = u32::from_be_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
    let kind = [hdr[4], hdr[5], hdr[6], hdr[7]];
    let (size, header_len) = match size32 {
        0 => (avail, 8),
        1 => {
            if want < 16 {
                return Err(overrun(format!(
                    "box '{}' at byte {pos} has a 64-bit size but only {avail} bytes remain",
                    show(kind)
                )));
            }
            let large = u64::from_be_bytes([
                hdr[8], hdr[9], hdr[10], hdr[11], hdr[12], hdr[13], hdr[14], hdr[15],
            ]);
            if large < 16 {
                return Err(malformed(format!(
                    "box '{}' at byte {pos} has an invalid 64-bit size {large}",
                    show(kind)
                )));
            }
            (large, 16)
        }
        2..=7 => {
            return Err(malformed(format!(
                "box '{}' at byte {pos} has an invalid size {size32}",
                show(kind)
            )))
        }
        n => (u64::from(n), 8),
    };
    if size > avail {
        let what = if top_level {
            format!("the file is {total_len} bytes")
        } else {
            format!("its parent ends at byte {limit}")
        };
        return Err(overrun(format!(
            "box '{}' at byte {pos} declares {size} bytes but only {avail} remain ({what})",
            show(kind)
        )));
    }
    Ok(BoxHeader {
        kind,
        start: pos,
        content: pos + header_len,
        end: pos + size,
    })
}

/// Finds the first child of type `kind` in the content range `[start, end)`.
fn find_child<R: ReadAt + ?Sized>(
    src: &R,
    start: u64,
    end: u64,
    kind: &[u8; 4],
    total_len: u64,
) -> Result<Option<BoxHeader>, MediaError> {
    let mut pos = start;
    let mut count = 0u64;
    while pos < end {
        count += 1;
        if count > MAX_CHILD_BOXES {
            return Err(malformed(format!(
                "more than {MAX_CHILD_BOXES} boxes inside the box ending at byte {end}"
            )));
        }
        let b = read_box_header(src, pos, end, total_len, false)?;
        if &b.kind == kind {
            return Ok(Some(b));
        }
        pos = b.end;
    }
    Ok(None)
}

/// Reads up to `N` bytes of a box's content (fewer if the box is shorter).
fn read_content<R: ReadAt + ?Sized, const N: usize>(
    src: &R,
    b: &BoxHeader,
    total_len: u64,
) -> Result<([u8; N], usize), MediaError> {
    let mut buf = [0u8; N];
    let n = usize::try_from((b.end - b.content).min(N as u64)).unwrap_or(N);
    read_region(src, Container::Mp4, b.content, &mut buf[..n], total_len)?;
    Ok((buf, n))
}

fn be32(b: &[u8]) -> u64 {
    u64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

fn be64(b: &[u8]) -> u64 {
    u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
}

/// Parses `mvhd` into (timescale, duration); duration `None` when it is all ones ("unknown").
fn parse_mvhd<R: ReadAt + ?Sized>(
    src: &R,
    b: &BoxHeader,
    total_len: u64,
) -> Result<(u64, Option<u64>), MediaError> {
    let (c, n) = read_content::<R, 32>(src, b, total_len)?;
    let too_short = |need: usize| {
        malformed(format!(
            "mvhd box at byte {} has {n} content bytes, version {} needs {need}",
            b.start, c[0]
        ))
    };
    match c[0] {
        0 => {
            if n < 20 {
                return Err(too_short(20));
            }
            let d = be32(&c[16..20]);
            Ok((be32(&c[12..16]), (d != u64::from(u32::MAX)).then_some(d)))
        }
        1 => {
            if n < 32 {
                return Err(too_short(32));
            }
            let d = be64(&c[24..32]);
            Ok((be32(&c[20..24]), (d != u64::MAX).then_some(d)))
        }
        v => Err(malformed(format!(
            "mvhd box at byte {} has unsupported version {v}",
            b.start
        ))),
    }
}

/// The fragment duration from `moov/mvex/mehd`, if present.
fn mehd_duration<R: ReadAt + ?Sized>(
    src: &R,
    moov: &BoxHeader,
    total_len: u64,
) -> Result<Option<u64>, MediaError> {
    let Some(mvex) = find_child(src, moov.content, moov.end, b"mvex", total_len)? else {
        return Ok(None);
    };
    let Some(mehd) = find_child(src, mvex.content, mvex.end, b"mehd", total_len)? else {
        return Ok(None);
    };
    let (c, n) = read_content::<R, 12>(src, &mehd, total_len)?;
    Ok(match (c[0], n) {
        (0, 8..) => Some(be32(&c[4..8])),
        (1, 12..) => Some(be64(&c[4..12])),
        _ => None,
    })
}

/// The duration of a fragmented MP4 from its fragments: `(timescale, ticks)` of the
/// reference track (see [`crate::fmp4`]), from the first fragment's decode start to the
/// last one's end; `None` for an unfragmented MP4, one without fragments, or a `moov` over
/// [`crate::index::MAX_MOOV_BYTES`]. Reads the `moov` and each `moof` (at most
/// [`crate::fmp4::MAX_MOOF_BYTES`] each), not the media.
fn fragments_duration<R: ReadAt + ?Sized>(
    src: &R,
    moov: &BoxHeader,
    total_len: u64,
) -> Result<Option<(u64, u64)>, MediaError> {
    let moov_len = moov.end - moov.content;
    if moov_len > crate::index::MAX_MOOV_BYTES {
        return Ok(None);
    }
    let mut content = vec![0u8; usize::try_from(moov_len).unwrap_or(0)];
    read_region(src, Container::Mp4, moov.content, &mut content, total_len)?;
    let mut frags = crate::fmp4::FragmentBuilder::default();
    frags.moov(&content);
    let mut pos = 0u64;
    let mut count = 0u64;
    while pos < total_len && count < MAX_TOP_LEVEL_BOXES {
        count += 1;
        let b = read_box_header(src, pos, total_len, total_len, true)?;
        if frags.box_start(b.kind, b.start, b.end) {
            // `box_start` keeps only boxes of at most MAX_MOOF_BYTES.
            let mut c = vec![0u8; usize::try_from(b.end - b.content).unwrap_or(0)];
            read_region(src, Container::Mp4, b.content, &mut c, total_len)?;
            match &b.kind {
                b"moof" => frags.moof(&c, b.start, b.end),
                b"sidx" => frags.sidx(&c, b.end),
                _ => {}
            }
        }
        pos = b.end;
    }
    let Some(index) = frags.finish(total_len) else {
        return Ok(None);
    };
    let (Some(first), Some(last)) = (index.fragments.first(), index.fragments.last()) else {
        return Ok(None);
    };
    let end = last.decode_start.saturating_add(last.duration);
    let ticks = end.saturating_sub(first.decode_start);
    Ok((ticks > 0 && index.timescale > 0).then_some((u64::from(index.timescale), ticks)))
}

/// Probes an MP4 (ISO-BMFF) object of `total_len` bytes through positioned reads.
///
/// Walks every top-level box header (a box whose declared size runs past `total_len`, or a
/// partial header, is [`MediaError::Truncated`]; sizes 2..7 are [`MediaError::Malformed`];
/// 64-bit `largesize` and size 0 = "to the end" are supported). Then reads `mvhd` (version 0
/// or 1) from the first `moov`, wherever it is in the file: duration = duration / timescale; for a
/// fragmented MP4 whose `mvhd` duration is 0 or unknown, `moov/mvex/mehd` is used instead,
/// and without one (ffmpeg's `empty_moov` and `cmaf` output) the fragments' total duration
/// (each `moof` read: the reference track's `tfdt` and `trun` sample durations).
/// Bitrate = `total_len` × 8 / duration, rounded to whole bits per second.
pub fn probe_mp4<R: ReadAt + ?Sized>(src: &R, total_len: u64) -> Result<MediaInfo, MediaError> {
    let mut pos = 0u64;
    let mut count = 0u64;
    let mut moov = None;
    while pos < total_len {
        count += 1;
        if count > MAX_TOP_LEVEL_BOXES {
            return Err(malformed(format!(
                "more than {MAX_TOP_LEVEL_BOXES} top-level boxes"
            )));
        }
        let b = read_box_header(src, pos, total_len, total_len, true)?;
        if moov.is_none() && &b.kind == b"moov" {
            moov = Some(b);
        }
        pos = b.end;
    }
    if total_len == 0 {
        return Err(truncated("the object is empty".into()));
    }
    let Some(moov) = moov else {
        return Ok(MediaInfo::without_bitrate(
            Container::Mp4,
            BitrateUnknown::Mp4NoMoov,
        ));
    };
    let Some(mvhd) = find_child(src, moov.content, moov.end, b"mvhd", total_len)? else {
        return Ok(MediaInfo::without_bitrate(
            Container::Mp4,
            BitrateUnknown::Mp4NoMvhd,
        ));
    };
    let (timescale, duration) = parse_mvhd(src, &mvhd, total_len)?;
    let duration = match duration {
        Some(d) if d > 0 => Some(d),
        _ => mehd_duration(src, &moov, total_len)?.filter(|&d| d > 0 && d != u64::MAX),
    };
    // ffmpeg's fragmented MP4 (`empty_moov`, `cmaf`) says neither: add up its fragments.
    let (timescale, duration) = match (duration, timescale > 0) {
        (Some(d), true) => (timescale, Some(d)),
        _ => match fragments_duration(src, &moov, total_len)? {
            Some((ts, d)) => (ts, Some(d)),
            None => (timescale, None),
        },
    };
    let (Some(duration), true) = (duration, timescale > 0) else {
        return Ok(MediaInfo::without_bitrate(
            Container::Mp4,
            BitrateUnknown::Mp4NoDuration,
        ));
    };
    let num = u128::from(total_len) * 8 * u128::from(timescale);
    let bitrate = (num + u128::from(duration) / 2) / u128::from(duration);
    let bitrate = u64::try_from(bitrate).unwrap_or(u64::MAX).max(1);
    Ok(MediaInfo {
        container: Container::Mp4,
        bitrate_bps: Some(bitrate),
        duration_s: Some(duration as f64 / timescale as f64),
        content_type: Container::Mp4.content_type(),
        bitrate_unknown: None,
    })
}
