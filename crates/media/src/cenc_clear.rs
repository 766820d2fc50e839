//! The inverse of [`crate::cenc`] and [`crate::cenc_fragment`]: a CENC `cbcs` file written
//! by them made clear again, sans-IO (`isnode play` of an encrypted CMAF title). The `moov`
//! loses its `pssh` boxes and each `encv`/`enca` entry its `sinf` (the entry takes back the
//! format its `frma` names); each `moof` loses the `saiz`, `saio` and `senc` of its video
//! `traf`s, its `trun` data offsets move back by what it shrank, and the samples are
//! decrypted in the `mdat` in place. For a clear input of 32-bit boxes without `sidx`
//! (which encryption drops), the result is byte-identical to it.
//!
//! The video subsamples are found again from the sample itself (NAL length fields and
//! headers are clear), as [`crate::cenc::video_subsamples`] found them when encrypting: this
//! decrypts what this crate encrypted, not any packager's `cbcs`.

use crate::boxes::{child, children};
use crate::cenc::{
    bad, boxed, entry_kind, map_children, original_format, rewrite_path, trak_id,
    trex_default_size, video_subsamples, CencError, Track, TrackKind, PATTERN,
};
use crate::cenc_fragment::{moof_payload, read_traf, sample_in_mdat, shift_trun};

/// One AES-128 block decryption under the content key.
pub trait BlockDecipher {
    /// Decrypts `block` in place.
    fn decrypt_block(&self, block: &mut [u8; 16]);
}

/// Decrypts `data` in place: the inverse of [`crate::cenc::cbc_pattern`] (the first
/// `crypt` of every `crypt + skip` full blocks, chained from `iv`; all full blocks when
/// `skip` is 0; a trailing partial block is clear).
pub fn cbc_pattern_decrypt(
    d: &dyn BlockDecipher,
    iv: &[u8; 16],
    data: &mut [u8],
    crypt: u8,
    skip: u8,
) {
    let mut chain = *iv;
    let period = usize::from(crypt) + usize::from(skip);
    for (i, block) in data.chunks_exact_mut(16).enumerate() {
        if skip != 0 && i % period >= usize::from(crypt) {
            continue;
        }
        let mut c = [0u8; 16];
        c.copy_from_slice(block);
        let mut p = c;
        d.decrypt_block(&mut p);
        for ((o, x), k) in block.iter_mut().zip(p.iter()).zip(chain.iter()) {
            *o = x ^ k;
        }
        chain = c;
    }
}

/// A clear `moov` and what decrypting the fragments needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClearMoov {
    /// The `moov` box (whole), clear.
    pub moov: Vec<u8>,
    /// The tracks that were encrypted.
    pub tracks: Vec<Track>,
    /// The constant IV of their `tenc` (one per title).
    pub iv: [u8; 16],
}

/// Where the child boxes of a sample entry of `kind` start in its content.
fn entry_boxes_at(kind: [u8; 4], entry: &[u8]) -> usize {
    match &kind {
        b"encv" => 78,
        _ => match crate::boxes::be16(entry, 8) {
            Some(1) => 44,
            Some(2) => 64,
            _ => 28,
        },
    }
}

/// The constant IV of a `sinf`'s `schi/tenc` (version 1, constant IV of 16 bytes).
fn tenc_iv(sinf: &[u8]) -> Result<[u8; 16], CencError> {
    let tenc = child(sinf, b"schi")
        .and_then(|s| child(s, b"tenc"))
        .ok_or(CencError::Unsupported("a sinf without schi/tenc".into()))?;
    // version(1) flags(3) reserved(1) pattern(1) is_protected(1) iv_size(1) kid(16)
    // const_iv_size(1) const_iv(16)
    match (tenc.get(7), tenc.get(24), tenc.get(25..41)) {
        (Some(0), Some(16), Some(iv)) => {
            let mut out = [0u8; 16];
            out.copy_from_slice(iv);
            Ok(out)
        }
        _ => bad("a tenc without a 16-byte constant IV (not cbcs as isnode writes it)"),
    }
}

/// A protected track's kind and constant IV.
type Protection = (TrackKind, [u8; 16]);

/// The `stsd` content with its protected entries made clear; their kind and IV.
fn clear_stsd(stsd: &[u8]) -> Result<(Vec<u8>, Option<Protection>), CencError> {
    let head = stsd
        .get(..8)
        .ok_or(CencError::Unsupported("a short stsd".into()))?;
    let mut found = None;
    let entries = map_children(stsd.get(8..).unwrap_or(&[]), &mut |kind, entry| {
        if &kind != b"encv" && &kind != b"enca" {
            return Ok(None);
        }
        let format = original_format(kind, entry);
        let at = entry_boxes_at(kind, entry);
        let (fields, boxes) = (
            entry.get(..at).unwrap_or(entry),
            entry.get(at..).unwrap_or(&[]),
        );
        let sinf = child(boxes, b"sinf").ok_or(CencError::Unsupported(
            "a protected sample entry without sinf".into(),
        ))?;
        let iv = tenc_iv(sinf)?;
        let kept = map_children(boxes, &mut |k, _| match &k {
            b"sinf" => Ok(Some(Vec::new())),
            _ => Ok(None),
        })?;
        let content = [fields, &kept[..]].concat();
        let kind_of = entry_kind(format, &content)?.ok_or(CencError::Unsupported(
            "a protected sample entry of a format isnode does not encrypt".into(),
        ))?;
        found = Some((kind_of, iv));
        boxed(&format, &content).map(Some)
    })?;
    let mut out = head.to_vec();
    out.extend_from_slice(&entries);
    Ok((out, found))
}

/// The `moov` box for a protected `moov`'s content made clear ([`ClearMoov`]).
pub fn clear_moov(moov: &[u8]) -> Result<ClearMoov, CencError> {
    let mut tracks = Vec::new();
    let mut iv = None;
    let content = map_children(moov, &mut |kind, c| match &kind {
        b"pssh" => Ok(Some(Vec::new())),
        b"trak" => {
            let mut found = None;
            let path: [&[u8; 4]; 4] = [b"mdia", b"minf", b"stbl", b"stsd"];
            let out = rewrite_path(c, &path, &mut |stsd| {
                let (out, f) = clear_stsd(stsd)?;
                found = f;
                Ok(out)
            })?;
            if let Some((kind, track_iv)) = found {
                if iv.is_some_and(|v| v != track_iv) {
                    return bad("tracks under different constant IVs");
                }
                iv = Some(track_iv);
                let track_id =
                    trak_id(c).ok_or(CencError::Unsupported("a trak without tkhd".into()))?;
                tracks.push(Track {
                    track_id,
                    kind,
                    default_size: trex_default_size(moov, track_id),
                });
            }
            boxed(b"trak", &out).map(Some)
        }
        _ => Ok(None),
    })?;
    let Some(iv) = iv else {
        return bad("no encrypted track (encv or enca) in the moov");
    };
    Ok(ClearMoov {
        moov: boxed(b"moov", &content)?,
        tracks,
        iv,
    })
}

/// Decrypts the samples of a `traf` (`samples`: offsets from the `moof`'s first byte, the
/// `mdat` starting `moof_len` bytes after it) in `mdat`, in place.
fn decrypt_samples(
    samples: &[(u64, u32)],
    track: &Track,
    mdat: &mut [u8],
    moof_len: u64,
    iv: &[u8; 16],
    d: &dyn BlockDecipher,
) -> Result<(), CencError> {
    for &(off, size) in samples {
        let sample = sample_in_mdat(mdat, moof_len, (off, size))?;
        match track.kind {
            TrackKind::Video { length_size, hevc } => {
                let subs = video_subsamples(sample, length_size, hevc)?;
                let mut at = 0usize;
                for (clear, prot) in subs {
                    at += usize::from(clear);
                    let end = at.saturating_add(prot as usize).min(sample.len());
                    if let Some(range) = sample.get_mut(at.min(end)..end) {
                        cbc_pattern_decrypt(d, iv, range, PATTERN.0, PATTERN.1);
                    }
                    at = end;
                }
            }
            TrackKind::Audio => cbc_pattern_decrypt(d, iv, sample, 1, 0),
        }
    }
    Ok(())
}

/// Bytes of the `saiz`, `saio` and `senc` boxes of a `traf`'s content.
fn aux_bytes(traf: &[u8]) -> usize {
    children(traf)
        .filter(|(k, _)| matches!(k, b"saiz" | b"saio" | b"senc"))
        .map(|(_, c)| c.len() + 8)
        .sum()
}

/// A protected fragment made clear: the whole `moof` box and the whole `mdat` box that
/// follows it directly (decrypted in place, `tracks` and `iv` from [`clear_moov`]).
/// Returns the new `moof` box.
pub fn clear_fragment(
    moof_box: &[u8],
    mdat: &mut [u8],
    tracks: &[Track],
    iv: &[u8; 16],
    d: &dyn BlockDecipher,
) -> Result<Vec<u8>, CencError> {
    let moof = moof_payload(moof_box)?;
    let traf_count = children(moof).filter(|(k, _)| k == b"traf").count();
    let size_of = |id: u32| {
        tracks
            .iter()
            .find(|t| t.track_id == id)
            .map_or(0, |t| t.default_size)
    };
    let mut removed = 0usize;
    for (_, traf) in children(moof).filter(|(k, _)| k == b"traf") {
        let t = read_traf(traf, &size_of, traf_count > 1)?;
        if let Some(track) = tracks.iter().find(|tr| tr.track_id == t.track_id) {
            decrypt_samples(&t.samples, track, mdat, moof_box.len() as u64, iv, d)?;
        }
        removed += aux_bytes(traf);
    }
    let delta = -i64::try_from(removed).unwrap_or(i64::MAX);
    let mut out = Vec::with_capacity(moof_box.len());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(b"moof");
    for (kind, content) in children(moof) {
        if &kind != b"traf" {
            out.extend_from_slice(&boxed(&kind, content)?);
            continue;
        }
        let traf = map_children(content, &mut |k, c| match &k {
            b"saiz" | b"saio" | b"senc" => Ok(Some(Vec::new())),
            b"trun" => boxed(b"trun", &shift_trun(c, delta)?).map(Some),
            _ => Ok(None),
        })?;
        out.extend_from_slice(&boxed(b"traf", &traf)?);
    }
    if out.len() + removed != moof_box.len() {
        return bad("a moof whose children do not fill it");
    }
    let len =
        u32::try_from(out.len()).map_err(|_| CencError::Unsupported("a moof over 4 GiB".into()))?;
    if let Some(slot) = out.get_mut(..4) {
        slot.copy_from_slice(&len.to_be_bytes());
    }
    Ok(out)
}
