//! MPEG-TS as HLS AES-128: the clear media is indexed and cut into the segments its
//! playlist will list (the server's own cuts, `isnode_media::segments`); each segment is
//! encrypted on its own (AES-128-CBC, PKCS#7, its own IV), several at once, as the store
//! reads them ([`crate::parallel`]), with the clear media's time index mapped onto the
//! ciphertext.

use std::fs::File;

use isnode_keys::content::{new_key_id, ContentKey};
use isnode_keys::node_key::NodeKey;
use isnode_keys::IV_LEN;
use isnode_store::protection::{ProtectedSegment, ProtectionRecord};
use isnode_store::{MediaIndexRecord, Protected};

use crate::parallel::{Cut, Segments};
use crate::{io, Ciphertext, Encrypted, Hints, Keys, ProtectError};

/// Largest clear segment encrypted (a segment is held in memory while it is encrypted).
pub const MAX_SEGMENT_BYTES: u64 = 512 << 20;

/// Plans the encryption of the MPEG-TS `file` (`len` bytes, index `ix`): its segments, their
/// IVs and rows; the ciphertext is made as it is stored.
pub(crate) fn encrypt(
    (file, len): (&File, u64),
    ix: isnode_media::MediaIndex,
    hints: &Hints,
    node_key: &NodeKey,
    keys: Keys<'_>,
    what: &str,
) -> Result<Encrypted, ProtectError> {
    let clear = examine(file, len, ix, hints, what)?;
    let (key, key_id) = match keys {
        Keys::Random => (ContentKey::generate(), new_key_id()),
        Keys::Derived(d) => (d.key().clone(), d.key_id()),
        Keys::Shared(k) => (k.key().clone(), k.key_id()),
    };
    let iv_of = |i: u32| match keys {
        Keys::Derived(d) => d.segment_iv(i),
        _ => isnode_keys::segment::random_iv(),
    };
    let (plan, segments) = plan_segments(file, &clear.cuts, &key, &iv_of)?;
    let cipher_len: u64 = segments.iter().map(|s| s.length_bytes).sum();
    let what = format!("HLS AES-128, {} segments", segments.len());
    let protected = Protected {
        index: MediaIndexRecord {
            container: "mpeg-ts".into(),
            moov_at_front: None,
            points: segments
                .iter()
                .map(|s| (s.start_s, s.offset_bytes))
                .collect(),
            // No key frames: their extents are the clear file's, and an I-frame of a
            // title encrypted segment by segment cannot be deciphered alone.
            detail: Some(isnode_store::MediaDetail {
                key_frames: None,
                ..clear.detail
            }),
        },
        protection: ProtectionRecord {
            method: isnode_store::protection::METHOD_AES_128.into(),
            key_id,
            wrap: isnode_store::protection::WRAP_AES_KW_256.into(),
            wrapped_key: node_key.wrap(&key),
            node_key_id: node_key.id(),
            segments,
        },
        origin_etag: None,
    };
    Ok(Encrypted {
        ciphertext: Ciphertext::Segments(plan),
        len: cipher_len,
        clear_len: len,
        protected,
        bitrate_bps: crate::cipher_bitrate(clear.bitrate_bps, len, cipher_len),
        content_type: clear.content_type,
        what,
    })
}

/// What the clear media says: its bitrate, type, descriptor and segment cuts.
struct Clear {
    bitrate_bps: u64,
    content_type: String,
    detail: isnode_store::MediaDetail,
    cuts: Vec<isnode_media::segments::Segment>,
}

/// Examines the clear MPEG-TS input (`ix`, its index).
fn examine(
    file: &File,
    len: u64,
    ix: isnode_media::MediaIndex,
    hints: &Hints,
    what: &str,
) -> Result<Clear, ProtectError> {
    let described =
        isnode_store::spool::describe(file, len, hints.bitrate_bps, hints.content_type.clone())?;
    let duration_s = len as f64 * 8.0 / described.bitrate_bps.max(1) as f64;
    let points: Vec<(f64, u64)> = ix
        .points
        .iter()
        .map(|p| (p.time_s, p.offset_bytes))
        .collect();
    let cuts = isnode_media::segments::segments(&points, len, duration_s);
    if let Some(big) = cuts.iter().find(|c| c.len_bytes > MAX_SEGMENT_BYTES) {
        return Err(ProtectError::Unsupported(format!(
            "{what}: a segment of {} bytes at byte {} is longer than {MAX_SEGMENT_BYTES}: \
             the title has too few key frames to encrypt segment by segment",
            big.len_bytes, big.offset_bytes
        )));
    }
    Ok(Clear {
        bitrate_bps: described.bitrate_bps,
        content_type: described.content_type,
        detail: isnode_store::renditions::media_detail(&ix),
        cuts,
    })
}

/// The plan of each cut of `file`, segment `i` under `iv_of(i)`, and the segments' rows
/// (their ciphertext lengths known from the clear ones: PKCS#7 pads to the next block).
fn plan_segments(
    file: &File,
    cuts: &[isnode_media::segments::Segment],
    key: &ContentKey,
    iv_of: &dyn Fn(u32) -> [u8; IV_LEN],
) -> Result<(Segments, Vec<ProtectedSegment>), ProtectError> {
    let mut rows = Vec::with_capacity(cuts.len());
    let mut plan = Vec::with_capacity(cuts.len());
    let mut at = 0u64;
    for (i, c) in cuts.iter().enumerate() {
        let index =
            u32::try_from(i).map_err(|_| ProtectError::Unsupported("over 2^32 segments".into()))?;
        let iv = iv_of(index);
        let cipher_len = isnode_keys::segment::cipher_len(c.len_bytes);
        plan.push(Cut {
            clear_offset: c.offset_bytes,
            clear_len: c.len_bytes,
            iv,
        });
        rows.push(ProtectedSegment {
            offset_bytes: at,
            length_bytes: cipher_len,
            clear_offset: c.offset_bytes,
            clear_length: c.len_bytes,
            start_s: c.start_s,
            duration_s: c.duration_s,
            iv,
        });
        at += cipher_len;
    }
    let file = file.try_clone().map_err(io("opening the input again"))?;
    let segments = Segments {
        file,
        cuts: plan,
        key: key.clone(),
    };
    Ok((segments, rows))
}
