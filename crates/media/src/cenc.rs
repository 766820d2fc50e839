//! CENC `cbcs` encryption of a fragmented MP4 (ISO/IEC 23001-7, the CMAF `cbcs` profile),
//! sans-IO: the init segment's `moov` and each `moof` + `mdat` pair are rewritten in memory.
//!
//! - **Video** (AVC `avc1`/`avc3`, HEVC `hvc1`/`hev1`): subsample encryption. In each
//!   sample, every NAL unit's length field and header stay clear, and so do whole non-VCL
//!   NAL units (parameter sets, SEI, delimiters) and VCL units too short to hold a block;
//!   the rest of each VCL unit is protected with the 1:9 pattern (one 16-byte block
//!   encrypted with AES-128-CBC, nine left clear, repeated; a last partial block clear).
//! - **Audio**: whole-sample encryption, every full 16-byte block of the sample from its
//!   start (pattern 0:0 in `tenc`), the partial block at the end clear.
//! - **IVs**: one constant IV per title, in `tenc` (`default_constant_IV`); the CBC chain
//!   starts again from it at every subsample (and at every audio sample), as 23001-7 §10.4
//!   prescribes for `cbcs`. No per-sample IV is stored.
//! - Each video `traf` gains `saiz`, `saio` and `senc` (subsample maps, no IVs); audio
//!   `traf`s gain nothing (a constant IV and no subsamples leave no auxiliary information).
//!   Every `trun` data offset grows by what the `moof` grew. The `tfhd` must not carry an
//!   absolute `base_data_offset` (`default-base-is-moof`, as CMAF and ffmpeg's `+cmaf`
//!   write, or a single `traf` without either).
//! - The init segment's sample entries become `encv`/`enca` with a `sinf` (`frma` with the
//!   original format, `schm` `cbcs` 1.0, `schi/tenc` version 1 with the key id), and the
//!   `moov` gains a version-1 `pssh` of the W3C common system (`1077efec-…`, what
//!   browsers' Clear Key reads from `cenc` init data) naming the key id. (The DASH-IF
//!   Clear Key system `e2719d58-…` is named in the MPD, not by a `pssh`: dash.js hands
//!   Chromium such a box alone, which Chromium refuses.)
//!
//! The cipher is the caller's ([`BlockCipher`]: one AES-128 block); this module chains it.

use crate::boxes::{be32, child, children};

/// The DASH-IF Clear Key system id (`e2719d58-a985-b3c9-781a-b030af78d30e`).
pub const CLEAR_KEY_SYSTEM_ID: [u8; 16] = [
    0xe2, 0x71, 0x9d, 0x58, 0xa9, 0x85, 0xb3, 0xc9, 0x78, 0x1a, 0xb0, 0x30, 0xaf, 0x78, 0xd3, 0x0e,
];
/// The W3C common PSSH system id (`1077efec-c0b2-4d02-ace3-3c1e52e2fb4b`).
pub const COMMON_SYSTEM_ID: [u8; 16] = [
    0x10, 0x77, 0xef, 0xec, 0xc0, 0xb2, 0x4d, 0x02, 0xac, 0xe3, 0x3c, 0x1e, 0x52, 0xe2, 0xfb, 0x4b,
];
/// Blocks encrypted then skipped in a video subsample's protected range.
pub const PATTERN: (u8, u8) = (1, 9);
/// Most subsamples of one video sample (its `senc` entry must fit `saiz`'s one byte).
pub const MAX_SUBSAMPLES: usize = 42;
/// Largest `moof` this rewrites, bytes.
pub const MAX_MOOF_BYTES: usize = 16 << 20;

/// One AES-128 block encryption under the content key.
pub trait BlockCipher {
    /// Encrypts `block` in place.
    fn encrypt_block(&self, block: &mut [u8; 16]);
}

/// The key id and the constant IV of a title.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CencParams {
    /// The content key's id (`tenc` `default_KID`, `pssh` KID).
    pub key_id: [u8; 16],
    /// The constant IV (`tenc` `default_constant_IV`).
    pub iv: [u8; 16],
}

/// How a track's samples are encrypted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrackKind {
    /// NAL-structured video: the NAL length field's size, and whether it is HEVC.
    Video {
        /// Bytes of each NAL unit's length field (1, 2 or 4).
        length_size: u8,
        /// HEVC (two-byte NAL headers) rather than AVC.
        hevc: bool,
    },
    /// Audio: whole-sample encryption.
    Audio,
}

/// An encrypted track of the init segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Track {
    /// Its `tkhd` track id.
    pub track_id: u32,
    /// How its samples are encrypted.
    pub kind: TrackKind,
    /// Its `trex` default sample size (0: none).
    pub default_size: u32,
}

/// Why a file cannot be encrypted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CencError {
    /// A box or field that does not parse, or one this does not support.
    #[error("cannot encrypt this fragmented MP4: {0}")]
    Unsupported(String),
}

pub(crate) fn bad<T>(why: impl Into<String>) -> Result<T, CencError> {
    Err(CencError::Unsupported(why.into()))
}

/// A box of `kind` around `content` (a 32-bit size).
pub(crate) fn boxed(kind: &[u8; 4], content: &[u8]) -> Result<Vec<u8>, CencError> {
    let size = u32::try_from(content.len() + 8)
        .map_err(|_| CencError::Unsupported("a box over 4 GiB".into()))?;
    let mut out = Vec::with_capacity(content.len() + 8);
    out.extend_from_slice(&size.to_be_bytes());
    out.extend_from_slice(kind);
    out.extend_from_slice(content);
    Ok(out)
}

/// What decides a child box's new bytes (`None`: keep it).
pub(crate) type ChildMap<'a> = dyn FnMut([u8; 4], &[u8]) -> Result<Option<Vec<u8>>, CencError> + 'a;
/// What rewrites a box's content.
pub(crate) type ContentMap<'a> = dyn FnMut(&[u8]) -> Result<Vec<u8>, CencError> + 'a;

/// The content of `data`'s children rebuilt: `f` decides each child's new bytes (the whole
/// box); `None` keeps it.
pub(crate) fn map_children(data: &[u8], f: &mut ChildMap<'_>) -> Result<Vec<u8>, CencError> {
    let mut out = Vec::with_capacity(data.len() + 256);
    let mut consumed = 0usize;
    for (kind, content) in children(data) {
        match f(kind, content)? {
            Some(b) => out.extend_from_slice(&b),
            None => out.extend_from_slice(&boxed(&kind, content)?),
        }
        consumed += content.len() + 8;
    }
    if consumed != data.len() {
        return bad("a box whose children do not fill it (or a 64-bit size)");
    }
    Ok(out)
}

/// The track id of a `trak`.
pub(crate) fn trak_id(trak: &[u8]) -> Option<u32> {
    let tkhd = child(trak, b"tkhd")?;
    match tkhd.first()? {
        1 => be32(tkhd, 20),
        _ => be32(tkhd, 12),
    }
}

/// The `trex` default sample size of `track_id` in a `moov`'s content.
pub(crate) fn trex_default_size(moov: &[u8], track_id: u32) -> u32 {
    child(moov, b"mvex")
        .into_iter()
        .flat_map(|m| children(m).filter(|(k, _)| k == b"trex").map(|(_, c)| c))
        .find(|t| be32(t, 4) == Some(track_id))
        .and_then(|t| be32(t, 16))
        .unwrap_or(0)
}

/// The kind of a sample entry (`None`: a track left clear).
pub(crate) fn entry_kind(kind: [u8; 4], entry: &[u8]) -> Result<Option<TrackKind>, CencError> {
    let boxes = || entry.get(78..).unwrap_or(&[]);
    match &kind {
        b"avc1" | b"avc3" => {
            let avcc = child(boxes(), b"avcC").ok_or(CencError::Unsupported(
                "an AVC sample entry without avcC".into(),
            ))?;
            let n = avcc.get(4).map_or(4, |b| (b & 3) + 1);
            Ok(Some(TrackKind::Video {
                length_size: n,
                hevc: false,
            }))
        }
        b"hvc1" | b"hev1" => {
            let hvcc = child(boxes(), b"hvcC").ok_or(CencError::Unsupported(
                "an HEVC sample entry without hvcC".into(),
            ))?;
            let n = hvcc.get(21).map_or(4, |b| (b & 3) + 1);
            Ok(Some(TrackKind::Video {
                length_size: n,
                hevc: true,
            }))
        }
        b"mp4a" | b"ac-3" | b"ec-3" | b"Opus" | b"fLaC" => Ok(Some(TrackKind::Audio)),
        b"encv" | b"enca" => bad("the file is encrypted already"),
        _ => Ok(None),
    }
}

/// `tenc` version 1 for `kind`.
fn tenc(kind: TrackKind, p: &CencParams) -> Result<Vec<u8>, CencError> {
    let pattern = match kind {
        TrackKind::Video { .. } => (PATTERN.0 << 4) | PATTERN.1,
        TrackKind::Audio => 0,
    };
    let mut c = vec![1, 0, 0, 0, 0, pattern, 1, 0];
    c.extend_from_slice(&p.key_id);
    c.push(16);
    c.extend_from_slice(&p.iv);
    boxed(b"tenc", &c)
}

/// The `sinf` of an entry of format `format`.
fn sinf(format: [u8; 4], kind: TrackKind, p: &CencParams) -> Result<Vec<u8>, CencError> {
    let mut c = boxed(b"frma", &format)?;
    c.extend_from_slice(&boxed(
        b"schm",
        &[0, 0, 0, 0, b'c', b'b', b'c', b's', 0, 1, 0, 0],
    )?);
    c.extend_from_slice(&boxed(b"schi", &tenc(kind, p)?)?);
    boxed(b"sinf", &c)
}

/// A version-1 `pssh` of `system` naming `key_id`, with no data.
pub fn pssh(system: &[u8; 16], key_id: &[u8; 16]) -> Vec<u8> {
    let mut c = vec![1, 0, 0, 0];
    c.extend_from_slice(system);
    c.extend_from_slice(&1u32.to_be_bytes());
    c.extend_from_slice(key_id);
    c.extend_from_slice(&0u32.to_be_bytes());
    // 52 bytes of content: within a 32-bit size.
    let mut out = Vec::with_capacity(c.len() + 8);
    out.extend_from_slice(&((c.len() + 8) as u32).to_be_bytes());
    out.extend_from_slice(b"pssh");
    out.extend_from_slice(&c);
    out
}

/// The `stsd` content with its entries protected; the kind of the track (`None`: clear).
fn protect_stsd(stsd: &[u8], p: &CencParams) -> Result<(Vec<u8>, Option<TrackKind>), CencError> {
    let head = stsd
        .get(..8)
        .ok_or(CencError::Unsupported("a short stsd".into()))?;
    let mut found = None;
    let entries = map_children(stsd.get(8..).unwrap_or(&[]), &mut |kind, entry| {
        let Some(k) = entry_kind(kind, entry)? else {
            return Ok(None);
        };
        if found.is_some_and(|f| f != k) {
            return bad("sample entries of different kinds in one track");
        }
        found = Some(k);
        let enc = match k {
            TrackKind::Video { .. } => b"encv",
            TrackKind::Audio => b"enca",
        };
        let mut c = entry.to_vec();
        c.extend_from_slice(&sinf(kind, k, p)?);
        boxed(enc, &c).map(Some)
    })?;
    let mut out = head.to_vec();
    out.extend_from_slice(&entries);
    Ok((out, found))
}

/// A `trak` rebuilt with its sample entries protected, and its track (`None`: clear).
fn protect_trak(
    trak: &[u8],
    moov: &[u8],
    p: &CencParams,
) -> Result<(Vec<u8>, Option<Track>), CencError> {
    let mut kind = None;
    let path: [&[u8; 4]; 4] = [b"mdia", b"minf", b"stbl", b"stsd"];
    let content = rewrite_path(trak, &path, &mut |stsd| {
        let (out, k) = protect_stsd(stsd, p)?;
        kind = k;
        Ok(out)
    })?;
    let track = match kind {
        Some(kind) => {
            let track_id =
                trak_id(trak).ok_or(CencError::Unsupported("a trak without tkhd".into()))?;
            Some(Track {
                track_id,
                kind,
                default_size: trex_default_size(moov, track_id),
            })
        }
        None => None,
    };
    Ok((boxed(b"trak", &content)?, track))
}

/// `data` (a box's content) with the box at `path` below it replaced by `f` of its content.
pub(crate) fn rewrite_path(
    data: &[u8],
    path: &[&[u8; 4]],
    f: &mut ContentMap<'_>,
) -> Result<Vec<u8>, CencError> {
    let Some((first, rest)) = path.split_first() else {
        return f(data);
    };
    map_children(data, &mut |kind, content| {
        if &kind != *first {
            return Ok(None);
        }
        boxed(&kind, &rewrite_path(content, rest, f)?).map(Some)
    })
}

/// The `moov` box (whole) for `moov`'s content: sample entries protected, `pssh` boxes
/// added; the encrypted tracks.
pub fn protect_moov(moov: &[u8], p: &CencParams) -> Result<(Vec<u8>, Vec<Track>), CencError> {
    let mut tracks = Vec::new();
    let mut content = map_children(moov, &mut |kind, c| match &kind {
        b"trak" => {
            let (b, t) = protect_trak(c, moov, p)?;
            tracks.extend(t);
            Ok(Some(b))
        }
        b"pssh" => bad("the file has a pssh already"),
        _ => Ok(None),
    })?;
    if tracks.is_empty() {
        return bad("no video or audio track to encrypt");
    }
    if child(moov, b"mvex").is_none() {
        return bad("not a fragmented MP4 (no mvex): make it CMAF first (ffmpeg -movflags +cmaf)");
    }
    // The W3C common system only: what browsers' Clear Key reads from `cenc` init data. A
    // `pssh` of the DASH-IF Clear Key system (`e2719d58-…`) makes dash.js hand Chromium
    // that box alone, which it refuses (`generateRequest` TypeError); the MPD names that
    // system with its licence URL instead.
    content.extend_from_slice(&pssh(&COMMON_SYSTEM_ID, &p.key_id));
    Ok((boxed(b"moov", &content)?, tracks))
}

/// Encrypts `data` with AES-128-CBC from `iv`: the first `crypt` of every `crypt + skip`
/// full blocks (all full blocks when `skip` is 0); a trailing partial block stays clear.
pub fn cbc_pattern(cipher: &dyn BlockCipher, iv: &[u8; 16], data: &mut [u8], crypt: u8, skip: u8) {
    let mut chain = *iv;
    let period = usize::from(crypt) + usize::from(skip);
    for (i, block) in data.chunks_exact_mut(16).enumerate() {
        if skip != 0 && i % period >= usize::from(crypt) {
            continue;
        }
        let mut b = [0u8; 16];
        for ((o, x), c) in b.iter_mut().zip(block.iter()).zip(chain.iter()) {
            *o = x ^ c;
        }
        cipher.encrypt_block(&mut b);
        block.copy_from_slice(&b);
        chain = b;
    }
}

/// One subsample: clear bytes, then protected bytes.
pub type Subsample = (u16, u32);

/// The subsamples of a video sample (NAL units with `length_size`-byte lengths); `Err` when
/// its NAL units do not tile it.
pub fn video_subsamples(
    sample: &[u8],
    length_size: u8,
    hevc: bool,
) -> Result<Vec<Subsample>, CencError> {
    let ls = usize::from(length_size);
    let hdr = if hevc { 2 } else { 1 };
    let mut out = Vec::new();
    let mut clear = 0usize;
    let mut at = 0usize;
    while at < sample.len() {
        let len_bytes = sample.get(at..at + ls).ok_or(CencError::Unsupported(
            "a NAL length past the sample's end".into(),
        ))?;
        let n = len_bytes
            .iter()
            .fold(0usize, |a, &b| (a << 8) | usize::from(b));
        let nal = sample
            .get(at + ls..)
            .and_then(|s| s.get(..n))
            .ok_or(CencError::Unsupported(
                "a NAL unit past the sample's end".into(),
            ))?;
        let vcl = match (hevc, nal.first()) {
            (false, Some(b)) => (1..=5).contains(&(b & 0x1f)),
            (true, Some(b)) => (b >> 1) & 0x3f < 32,
            (_, None) => false,
        };
        if vcl && n >= hdr + 16 {
            clear += ls + hdr;
            while clear > usize::from(u16::MAX) {
                out.push((u16::MAX, 0));
                clear -= usize::from(u16::MAX);
            }
            let prot = u32::try_from(n - hdr)
                .map_err(|_| CencError::Unsupported("a NAL unit over 4 GiB".into()))?;
            out.push((clear as u16, prot));
            clear = 0;
        } else {
            clear += ls + n;
        }
        at += ls + n;
    }
    while clear > 0 {
        let c = clear.min(usize::from(u16::MAX));
        out.push((c as u16, 0));
        clear -= c;
    }
    if out.len() > MAX_SUBSAMPLES {
        return bad(format!(
            "a sample of {} subsamples (at most {MAX_SUBSAMPLES}: too many slices)",
            out.len()
        ));
    }
    Ok(out)
}

/// Encrypts a video sample in place along `subs` (the IV restarts at each subsample).
pub fn encrypt_video_sample(
    cipher: &dyn BlockCipher,
    iv: &[u8; 16],
    sample: &mut [u8],
    subs: &[Subsample],
) {
    let mut at = 0usize;
    for &(clear, prot) in subs {
        at += usize::from(clear);
        let end = at.saturating_add(prot as usize).min(sample.len());
        if let Some(range) = sample.get_mut(at.min(end)..end) {
            cbc_pattern(cipher, iv, range, PATTERN.0, PATTERN.1);
        }
        at = end;
    }
}

/// The original format of a protected sample entry (`encv`/`enca`) from its `sinf/frma`;
/// `kind` itself for any other entry.
pub(crate) fn original_format(kind: [u8; 4], entry: &[u8]) -> [u8; 4] {
    let boxes_at = match &kind {
        b"encv" => 78,
        b"enca" => match crate::boxes::be16(entry, 8) {
            Some(1) => 44,
            Some(2) => 64,
            _ => 28,
        },
        _ => return kind,
    };
    entry
        .get(boxes_at..)
        .and_then(|b| child(b, b"sinf"))
        .and_then(|s| child(s, b"frma"))
        .and_then(|f| f.get(..4))
        .and_then(|f| f.try_into().ok())
        .unwrap_or(kind)
}

#[cfg(test)]
mod tests;
