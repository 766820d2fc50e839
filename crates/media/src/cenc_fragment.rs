//! CENC `cbcs` of one fragment ([`crate::cenc`]): a `moof` and the `mdat` right after it.
//! The samples of the encrypted tracks are encrypted in the `mdat` in place; the `moof` is
//! rebuilt with `saiz`/`saio`/`senc` in each video `traf` and every `trun` data offset
//! moved by what the `moof` grew.

use crate::boxes::{be32, children};
use crate::cenc::{
    bad, boxed, cbc_pattern, encrypt_video_sample, video_subsamples, BlockCipher, CencError,
    CencParams, Subsample, Track, TrackKind, MAX_MOOF_BYTES,
};

/// `tfhd` flags.
const BASE_DATA_OFFSET: u32 = 0x01;
const SAMPLE_DESCRIPTION_INDEX: u32 = 0x02;
const DEFAULT_DURATION: u32 = 0x08;
const DEFAULT_SIZE: u32 = 0x10;
const DEFAULT_BASE_IS_MOOF: u32 = 0x02_0000;
/// `trun` flags.
const DATA_OFFSET: u32 = 0x01;
const FIRST_SAMPLE_FLAGS: u32 = 0x04;
const SAMPLE_DURATION: u32 = 0x100;
const SAMPLE_SIZE: u32 = 0x200;
const SAMPLE_FLAGS: u32 = 0x400;
const SAMPLE_CTO: u32 = 0x800;

/// A `traf` read: its track, and its samples as (offset from the `moof`'s first byte, size).
pub(crate) struct Traf {
    pub(crate) track_id: u32,
    pub(crate) samples: Vec<(u64, u32)>,
}

/// The version/flags word of a full box.
pub(crate) fn flags(b: &[u8]) -> Option<u32> {
    be32(b, 0).map(|v| v & 0x00ff_ffff)
}

/// Reads a `traf`'s `tfhd` and `trun`s.
pub(crate) fn read_traf(
    traf: &[u8],
    default_size: &dyn Fn(u32) -> u32,
    many: bool,
) -> Result<Traf, CencError> {
    let tfhd = crate::boxes::child(traf, b"tfhd")
        .ok_or(CencError::Unsupported("a traf without tfhd".into()))?;
    let tf = flags(tfhd).unwrap_or(0);
    let track_id = be32(tfhd, 4).ok_or(CencError::Unsupported("a short tfhd".into()))?;
    if tf & BASE_DATA_OFFSET != 0 {
        return bad("a tfhd with an absolute base_data_offset (write the file with default-base-is-moof, e.g. ffmpeg -movflags +cmaf)");
    }
    if many && tf & DEFAULT_BASE_IS_MOOF == 0 {
        return bad("several trafs without default-base-is-moof");
    }
    let mut at = 8;
    at += if tf & SAMPLE_DESCRIPTION_INDEX != 0 {
        4
    } else {
        0
    };
    at += if tf & DEFAULT_DURATION != 0 { 4 } else { 0 };
    let size_default = match tf & DEFAULT_SIZE != 0 {
        true => be32(tfhd, at).ok_or(CencError::Unsupported("a short tfhd".into()))?,
        false => default_size(track_id),
    };
    let mut samples = Vec::new();
    let mut next: Option<u64> = None;
    for (_, trun) in children(traf).filter(|(k, _)| k == b"trun") {
        let (offset, sizes) = read_trun(trun, size_default)?;
        let mut pos = match offset.or(next) {
            Some(o) => o,
            None => return bad("a trun without a data offset"),
        };
        for s in sizes {
            samples.push((pos, s));
            pos += u64::from(s);
        }
        next = Some(pos);
    }
    Ok(Traf { track_id, samples })
}

/// A `trun`'s data offset (from the `moof`'s first byte; `None`: not given) and sample sizes.
fn read_trun(trun: &[u8], size_default: u32) -> Result<(Option<u64>, Vec<u32>), CencError> {
    let short = || CencError::Unsupported("a short trun".into());
    let f = flags(trun).ok_or_else(short)?;
    let count = be32(trun, 4).ok_or_else(short)? as usize;
    let mut at = 8;
    let offset = match f & DATA_OFFSET != 0 {
        true => {
            let o = be32(trun, at).ok_or_else(short)? as i32;
            at += 4;
            Some(
                u64::try_from(o)
                    .map_err(|_| CencError::Unsupported("a negative trun data offset".into()))?,
            )
        }
        false => None,
    };
    at += if f & FIRST_SAMPLE_FLAGS != 0 { 4 } else { 0 };
    let fields = [SAMPLE_DURATION, SAMPLE_SIZE, SAMPLE_FLAGS, SAMPLE_CTO];
    let per = fields.iter().filter(|&&b| f & b != 0).count() * 4;
    let size_at = if f & SAMPLE_DURATION != 0 { 4 } else { 0 };
    // The entries are in the box: the count is bounded by its bytes before it sizes anything.
    if count.saturating_mul(per.max(1)) > trun.len().saturating_sub(at) && per > 0 {
        return Err(short());
    }
    if per == 0 && count > MAX_MOOF_BYTES {
        return Err(short());
    }
    let mut sizes = Vec::with_capacity(count);
    for i in 0..count {
        let s = match f & SAMPLE_SIZE != 0 {
            true => be32(trun, at + i * per + size_at).ok_or_else(short)?,
            false => size_default,
        };
        sizes.push(s);
    }
    Ok((offset, sizes))
}

/// A `trun` content with its data offset moved by `delta` (bytes, either way).
pub(crate) fn shift_trun(trun: &[u8], delta: i64) -> Result<Vec<u8>, CencError> {
    let mut out = trun.to_vec();
    if flags(trun).unwrap_or(0) & DATA_OFFSET == 0 {
        return bad("a trun without a data offset");
    }
    let o = be32(trun, 8).ok_or(CencError::Unsupported("a short trun".into()))? as i32;
    let moved = i64::from(o).saturating_add(delta);
    let moved = i32::try_from(moved)
        .map_err(|_| CencError::Unsupported("a trun data offset past 2 GiB".into()))?;
    if let Some(slot) = out.get_mut(8..12) {
        slot.copy_from_slice(&moved.to_be_bytes());
    }
    Ok(out)
}

/// Encrypts the samples of `traf` in `mdat` (the whole box, starting `moof_len` bytes after
/// the `moof`'s first byte); the video subsamples of each sample (`None`: an audio track).
fn encrypt_samples(
    traf: &Traf,
    track: &Track,
    mdat: &mut [u8],
    moof_len: u64,
    p: &CencParams,
    cipher: &dyn BlockCipher,
) -> Result<Option<Vec<Vec<Subsample>>>, CencError> {
    let mut subs = Vec::with_capacity(traf.samples.len());
    for &(off, size) in &traf.samples {
        let sample = sample_in_mdat(mdat, moof_len, (off, size))?;
        match track.kind {
            TrackKind::Video { length_size, hevc } => {
                let s = video_subsamples(sample, length_size, hevc)?;
                encrypt_video_sample(cipher, &p.iv, sample, &s);
                subs.push(s);
            }
            TrackKind::Audio => cbc_pattern(cipher, &p.iv, sample, 1, 0),
        }
    }
    Ok(match track.kind {
        TrackKind::Video { .. } => Some(subs),
        TrackKind::Audio => None,
    })
}

/// `saiz` and `senc` of a video `traf` (the `saio` is written once its place is known).
fn aux_boxes(subs: &[Vec<Subsample>]) -> Result<(Vec<u8>, Vec<u8>), CencError> {
    let count =
        u32::try_from(subs.len()).map_err(|_| CencError::Unsupported("too many samples".into()))?;
    let sizes: Vec<u8> = subs.iter().map(|s| (2 + 6 * s.len()) as u8).collect();
    let mut saiz = vec![0, 0, 0, 0];
    match sizes.first() {
        Some(&first) if sizes.iter().all(|&s| s == first) => {
            saiz.push(first);
            saiz.extend_from_slice(&count.to_be_bytes());
        }
        _ => {
            saiz.push(0);
            saiz.extend_from_slice(&count.to_be_bytes());
            saiz.extend_from_slice(&sizes);
        }
    }
    let mut senc = vec![0, 0, 0, 2];
    senc.extend_from_slice(&count.to_be_bytes());
    for s in subs {
        senc.extend_from_slice(&(s.len() as u16).to_be_bytes());
        for &(c, p) in s {
            senc.extend_from_slice(&c.to_be_bytes());
            senc.extend_from_slice(&p.to_be_bytes());
        }
    }
    Ok((boxed(b"saiz", &saiz)?, boxed(b"senc", &senc)?))
}

/// Appends `saiz`, a `saio` pointing at the `senc`'s first entry (from the `moof`'s first
/// byte, which `out` starts with), and `senc`.
fn write_aux(out: &mut Vec<u8>, saiz: &[u8], senc: &[u8]) -> Result<(), CencError> {
    out.extend_from_slice(saiz);
    let senc_data = u32::try_from(out.len() + SAIO_LEN + 16)
        .map_err(|_| CencError::Unsupported("a moof over 4 GiB".into()))?;
    let mut saio = vec![0, 0, 0, 0];
    saio.extend_from_slice(&1u32.to_be_bytes());
    saio.extend_from_slice(&senc_data.to_be_bytes());
    out.extend_from_slice(&boxed(b"saio", &saio)?);
    out.extend_from_slice(senc);
    Ok(())
}

/// Bytes of a `saio` with one 32-bit offset.
const SAIO_LEN: usize = 8 + 4 + 4 + 4;

/// A fragment protected: the whole `moof` box and the whole `mdat` box that follows it
/// directly (encrypted in place). Returns the new `moof` box.
pub fn protect_fragment(
    moof_box: &[u8],
    mdat: &mut [u8],
    tracks: &[Track],
    p: &CencParams,
    cipher: &dyn BlockCipher,
) -> Result<Vec<u8>, CencError> {
    let moof = moof_payload(moof_box)?;
    let traf_count = children(moof).filter(|(k, _)| k == b"traf").count();
    let size_of = |id: u32| {
        tracks
            .iter()
            .find(|t| t.track_id == id)
            .map_or(0, |t| t.default_size)
    };
    // Pass 1: encrypt the samples; each traf's auxiliary boxes.
    let mut aux = Vec::with_capacity(traf_count);
    for (_, traf) in children(moof).filter(|(k, _)| k == b"traf") {
        let t = read_traf(traf, &size_of, traf_count > 1)?;
        let subs = match tracks.iter().find(|tr| tr.track_id == t.track_id) {
            Some(track) => encrypt_samples(&t, track, mdat, moof_box.len() as u64, p, cipher)?,
            None => None,
        };
        aux.push(subs.map(|s| aux_boxes(&s)).transpose()?);
    }
    let delta: usize = aux
        .iter()
        .flatten()
        .map(|(saiz, senc)| saiz.len() + SAIO_LEN + senc.len())
        .sum();
    // Pass 2: the moof rebuilt, trun offsets moved by `delta`, each saio at its senc.
    let mut out = Vec::with_capacity(moof_box.len() + delta);
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(b"moof");
    let mut aux = aux.into_iter();
    for (kind, content) in children(moof) {
        if &kind != b"traf" {
            out.extend_from_slice(&boxed(&kind, content)?);
            continue;
        }
        rebuild_traf(&mut out, content, aux.next().flatten(), delta as u64)?;
    }
    if out.len() != moof_box.len() + delta {
        return bad("a moof whose children do not fill it");
    }
    let len =
        u32::try_from(out.len()).map_err(|_| CencError::Unsupported("a moof over 4 GiB".into()))?;
    if let Some(slot) = out.get_mut(..4) {
        slot.copy_from_slice(&len.to_be_bytes());
    }
    Ok(out)
}

/// Appends the `traf` of `content` to `out` with its `trun` data offsets moved by `delta`
/// and the auxiliary boxes `aux` (`saiz`, `senc`; a `saio` at the `senc`) before its first
/// `trun` (ffmpeg's reader matches them to the samples of the runs that follow).
fn rebuild_traf(
    out: &mut Vec<u8>,
    content: &[u8],
    aux: Option<(Vec<u8>, Vec<u8>)>,
    delta: u64,
) -> Result<(), CencError> {
    let traf_at = out.len();
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(b"traf");
    let mut pending = aux;
    for (k, c) in children(content) {
        match &k {
            b"trun" => {
                if let Some((saiz, senc)) = pending.take() {
                    write_aux(out, &saiz, &senc)?;
                }
                out.extend_from_slice(&boxed(
                    b"trun",
                    &shift_trun(c, i64::try_from(delta).unwrap_or(i64::MAX))?,
                )?)
            }
            b"saiz" | b"saio" | b"senc" => {
                return bad("the file has sample auxiliary information already")
            }
            _ => out.extend_from_slice(&boxed(&k, c)?),
        }
    }
    if let Some((saiz, senc)) = pending {
        write_aux(out, &saiz, &senc)?;
    }
    let traf_len = u32::try_from(out.len() - traf_at)
        .map_err(|_| CencError::Unsupported("a traf over 4 GiB".into()))?;
    if let Some(slot) = out.get_mut(traf_at..traf_at + 4) {
        slot.copy_from_slice(&traf_len.to_be_bytes());
    }
    Ok(())
}

/// The `mfra` box (whole) for `mfra`'s content with each `tfra` entry's `moof_offset`
/// mapped by `moved` (a fragment's old first byte to its new one); `mfro` is kept (the box
/// keeps its size). `Err` for an offset `moved` does not know.
pub fn remap_mfra(mfra: &[u8], moved: &dyn Fn(u64) -> Option<u64>) -> Result<Vec<u8>, CencError> {
    let short = || CencError::Unsupported("a short tfra".into());
    let mut out = Vec::with_capacity(mfra.len() + 8);
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(b"mfra");
    for (kind, content) in children(mfra) {
        if &kind != b"tfra" {
            out.extend_from_slice(&boxed(&kind, content)?);
            continue;
        }
        let mut c = content.to_vec();
        let wide = content.first() == Some(&1);
        let sizes = be32(content, 8).ok_or_else(short)?;
        let count = be32(content, 12).ok_or_else(short)? as usize;
        let field = if wide { 8 } else { 4 };
        let tail = ((sizes >> 4) & 3) + ((sizes >> 2) & 3) + (sizes & 3) + 3;
        let entry = 2 * field + tail as usize;
        if count.saturating_mul(entry) > content.len().saturating_sub(16) {
            return Err(short());
        }
        for i in 0..count {
            let at = 16 + i * entry + field;
            let old = match wide {
                true => crate::boxes::be64(content, at),
                false => be32(content, at).map(u64::from),
            }
            .ok_or_else(short)?;
            let new = moved(old).ok_or(CencError::Unsupported(format!(
                "a tfra entry names byte {old}, where no fragment starts"
            )))?;
            let bytes = match wide {
                true => new.to_be_bytes().to_vec(),
                false => u32::try_from(new)
                    .map_err(|_| {
                        CencError::Unsupported("a moof past 4 GiB in a 32-bit tfra".into())
                    })?
                    .to_be_bytes()
                    .to_vec(),
            };
            if let Some(slot) = c.get_mut(at..at + field) {
                slot.copy_from_slice(&bytes);
            }
        }
        out.extend_from_slice(&boxed(b"tfra", &c)?);
    }
    let len = u32::try_from(out.len())
        .map_err(|_| CencError::Unsupported("an mfra over 4 GiB".into()))?;
    if let Some(slot) = out.get_mut(..4) {
        slot.copy_from_slice(&len.to_be_bytes());
    }
    Ok(out)
}

/// The bytes of the sample at file offset `off` (`size` bytes) in `mdat`, the box that
/// follows a `moof` of `moof_len` bytes (the sample's data past the `mdat` header).
pub(crate) fn sample_in_mdat(
    mdat: &mut [u8],
    moof_len: u64,
    (off, size): (u64, u32),
) -> Result<&mut [u8], CencError> {
    let start = off
        .checked_sub(moof_len)
        .and_then(|s| usize::try_from(s).ok())
        .filter(|&s| s >= 8)
        .ok_or(CencError::Unsupported(
            "a sample outside the mdat after its moof".into(),
        ))?;
    start
        .checked_add(size as usize)
        .and_then(|end| mdat.get_mut(start..end))
        .ok_or(CencError::Unsupported(
            "a sample past the mdat's end".into(),
        ))
}

/// The children of the whole `moof` box `moof_box` (its bytes past the header), once its
/// 32-bit size is its length and it is at most [`MAX_MOOF_BYTES`].
pub(crate) fn moof_payload(moof_box: &[u8]) -> Result<&[u8], CencError> {
    if moof_box.len() > MAX_MOOF_BYTES
        || be32(moof_box, 0).map(|s| s as usize) != Some(moof_box.len())
        || moof_box.get(4..8) != Some(b"moof")
    {
        return bad("a moof with a 64-bit size, or over 16 MiB");
    }
    Ok(moof_box.get(8..).unwrap_or(&[]))
}
