//! Fragmented MP4 / CMAF as CENC `cbcs` (`isnode_media::cenc`). The file's top-level boxes
//! are walked in order: the `moov` and each `moof` + `mdat` pair are rewritten in memory
//! (bounded) into a spool in the volume; an `mfra`'s `tfra` offsets are moved to the new
//! fragments; `sidx` boxes are dropped (their sizes would be wrong; ffmpeg 5.1 then
//! mismatches CENC sample information unless an `mfra` remains); other boxes are copied.
//! The spool is indexed again (the stored object's fragment index is the ciphertext's own).

use std::fs::File;
use std::io::{BufWriter, Seek, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

use isnode_keys::content::{new_key_id, BlockKey, ContentKey};
use isnode_keys::node_key::NodeKey;
use isnode_media::cenc::{BlockCipher, CencParams, Track};
use isnode_store::protection::{ProtectedSegment, ProtectionRecord};
use isnode_store::{MediaIndexRecord, Protected};

use crate::{io, Encrypted, Hints, Keys, ProtectError};

/// A refusal of the input.
fn refuse<T>(why: String) -> Result<T, ProtectError> {
    Err(ProtectError::Unsupported(why))
}

/// Largest `moov` read, bytes.
const MAX_MOOV_BYTES: u64 = 64 << 20;
/// Largest `mdat` of one fragment read, bytes.
const MAX_MDAT_BYTES: u64 = 512 << 20;

/// The content key as `isnode_media`'s block cipher.
struct Cipher(BlockKey);

impl BlockCipher for Cipher {
    fn encrypt_block(&self, block: &mut [u8; 16]) {
        self.0.encrypt_block(block);
    }
}

/// A top-level box: its type, first byte, header and total length.
struct TopBox {
    kind: [u8; 4],
    at: u64,
    header: u64,
    len: u64,
}

/// The box at `at` of `file` (`len` bytes).
fn top_box(file: &File, at: u64, len: u64) -> Result<TopBox, ProtectError> {
    let mut h = [0u8; 16];
    let n = (len - at).min(16) as usize;
    let h = h.get_mut(..n).unwrap_or_default();
    file.read_exact_at(h, at)
        .map_err(io("reading a box header"))?;
    let (Some(size), Some(kind)) = (h.get(..4), h.get(4..8)) else {
        return refuse(format!("a truncated box at byte {at}"));
    };
    let size32 = u32::from_be_bytes(size.try_into().unwrap_or_default());
    let kind: [u8; 4] = kind.try_into().unwrap_or_default();
    let (header, total) = match size32 {
        0 => (8, len - at),
        1 => match h.get(8..16) {
            Some(b) => (16, u64::from_be_bytes(b.try_into().unwrap_or_default())),
            None => return refuse(format!("a truncated box at byte {at}")),
        },
        n => (8, u64::from(n)),
    };
    if total < header || at.saturating_add(total) > len {
        return refuse(format!(
            "a box of {total} bytes at byte {at} does not fit the file"
        ));
    }
    Ok(TopBox {
        kind,
        at,
        header,
        len: total,
    })
}

/// The bytes of `b`, at most `max`.
fn read_box(file: &File, b: &TopBox, max: u64, what: &str) -> Result<Vec<u8>, ProtectError> {
    if b.len > max {
        return refuse(format!("a {what} of {} bytes (at most {max})", b.len));
    }
    let mut buf = vec![0u8; b.len as usize];
    file.read_exact_at(&mut buf, b.at)
        .map_err(io(format!("reading a {what}")))?;
    Ok(buf)
}

/// Copies `b` from `file` to `w` as it is.
fn copy_box(file: &File, b: &TopBox, w: &mut dyn Write) -> Result<(), ProtectError> {
    let mut buf = vec![0u8; 1 << 20];
    let mut at = b.at;
    let end = b.at + b.len;
    while at < end {
        let n = ((end - at).min(buf.len() as u64)) as usize;
        let chunk = buf.get_mut(..n).unwrap_or_default();
        file.read_exact_at(chunk, at)
            .map_err(io("reading the input"))?;
        w.write_all(chunk).map_err(io("writing the spool"))?;
        at += n as u64;
    }
    Ok(())
}

/// Writes the encrypted file; its fragment count and the bytes of the `sidx` boxes dropped.
fn encrypt_boxes(
    file: &File,
    len: u64,
    p: &CencParams,
    cipher: &Cipher,
    w: &mut dyn Write,
) -> Result<(usize, u64), ProtectError> {
    let mut dropped = 0u64;
    let mut tracks: Option<Vec<Track>> = None;
    let mut fragments = 0usize;
    // Each fragment's first byte in the input and in the output (for `mfra`).
    let mut moved: Vec<(u64, u64)> = Vec::new();
    let mut written = 0u64;
    let mut at = 0u64;
    while at < len {
        let b = top_box(file, at, len)?;
        at += b.len;
        match &b.kind {
            b"moov" => {
                let moov = read_box(file, &b, MAX_MOOV_BYTES, "moov")?;
                let content = moov.get(b.header as usize..).unwrap_or_default();
                let (out, t) = isnode_media::cenc::protect_moov(content, p).map_err(|source| {
                    ProtectError::Cenc {
                        context: "the moov".into(),
                        source,
                    }
                })?;
                w.write_all(&out).map_err(io("writing the spool"))?;
                written += out.len() as u64;
                tracks = Some(t);
            }
            b"moof" => {
                let Some(tracks) = tracks.as_deref() else {
                    return refuse("a moof before the moov: not a CMAF file".into());
                };
                let (moof, mdat, mdat_len) =
                    encrypt_fragment(file, &b, (at, len), tracks, (p, cipher))?;
                at += mdat_len;
                w.write_all(&moof).map_err(io("writing the spool"))?;
                w.write_all(&mdat).map_err(io("writing the spool"))?;
                moved.push((b.at, written));
                written += (moof.len() + mdat.len()) as u64;
                fragments += 1;
            }
            b"mdat" => {
                return refuse(format!(
                    "an mdat at byte {} outside a fragment: not a CMAF file",
                    b.at
                ))
            }
            b"mfra" => {
                let out = remap_mfra(file, &b, &moved)?;
                w.write_all(&out).map_err(io("writing the spool"))?;
                written += out.len() as u64;
            }
            b"sidx" => dropped += b.len,
            _ => {
                copy_box(file, &b, w)?;
                written += b.len;
            }
        }
    }
    if fragments == 0 {
        return refuse("no fragment (moof): not a fragmented MP4".into());
    }
    Ok((fragments, dropped))
}

/// The fragment whose `moof` is `b`, its `mdat` at `at` (of the input's `len` bytes),
/// encrypted: the new `moof`, the encrypted `mdat`, and the `mdat`'s length in the input.
fn encrypt_fragment(
    file: &File,
    b: &TopBox,
    (at, len): (u64, u64),
    tracks: &[Track],
    (p, cipher): (&CencParams, &Cipher),
) -> Result<(Vec<u8>, Vec<u8>, u64), ProtectError> {
    let moof = read_box(file, b, isnode_media::cenc::MAX_MOOF_BYTES as u64, "moof")?;
    if at >= len {
        return refuse(format!("a moof at byte {} with no mdat after it", b.at));
    }
    let m = top_box(file, at, len)?;
    if &m.kind != b"mdat" {
        return refuse(format!("a moof at byte {} not followed by its mdat", b.at));
    }
    let mut mdat = read_box(file, &m, MAX_MDAT_BYTES, "fragment's mdat")?;
    let out = isnode_media::cenc_fragment::protect_fragment(&moof, &mut mdat, tracks, p, cipher)
        .map_err(|source| ProtectError::Cenc {
            context: format!("the fragment at byte {}", b.at),
            source,
        })?;
    Ok((out, mdat, m.len))
}

/// The `mfra` box `b` with its fragments' offsets moved to where they are written
/// (`moved`: each fragment's first byte in the input and in the output, in order).
fn remap_mfra(file: &File, b: &TopBox, moved: &[(u64, u64)]) -> Result<Vec<u8>, ProtectError> {
    let mfra = read_box(file, b, MAX_MOOV_BYTES, "mfra")?;
    let content = mfra.get(b.header as usize..).unwrap_or_default();
    let find = |old: u64| {
        let i = moved.binary_search_by_key(&old, |m| m.0).ok()?;
        moved.get(i).map(|m| m.1)
    };
    isnode_media::cenc_fragment::remap_mfra(content, &find).map_err(|source| ProtectError::Cenc {
        context: "the mfra".into(),
        source,
    })
}

/// A content key with its id and constant IV: one object's, or shared by the renditions of
/// a title (one `ContentProtection` per adaptation set names every rung's key; MPEG-TS
/// renditions take the key and key id, each segment its own IV).
pub struct TitleKey {
    key: ContentKey,
    params: CencParams,
}

impl std::fmt::Debug for TitleKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TitleKey")
            .field("key_id", &isnode_keys::hex(&self.params.key_id))
            .finish_non_exhaustive()
    }
}

impl TitleKey {
    /// The key, key id and IV derived from the cluster key.
    pub fn derived(d: &isnode_keys::cluster::DerivedTitle) -> Self {
        TitleKey {
            key: d.key().clone(),
            params: CencParams {
                key_id: d.key_id(),
                iv: d.iv(),
            },
        }
    }

    /// The content key (MPEG-TS renditions take it with [`TitleKey::key_id`]; their IVs are
    /// per segment).
    pub(crate) fn key(&self) -> &ContentKey {
        &self.key
    }

    /// The key id.
    pub(crate) fn key_id(&self) -> [u8; 16] {
        self.params.key_id
    }

    /// A new random key, key id and IV.
    pub fn generate() -> Self {
        TitleKey {
            key: ContentKey::generate(),
            params: CencParams {
                key_id: new_key_id(),
                iv: isnode_keys::segment::random_iv(),
            },
        }
    }
}

/// Encrypts `file` (`len` bytes, a fragmented MP4) under `keys` into a spool in `tmp_dir`.
pub(crate) fn encrypt(
    tmp_dir: &Path,
    (file, len): (&File, u64),
    hints: &Hints,
    node_key: &NodeKey,
    keys: Keys<'_>,
    what: &str,
) -> Result<Encrypted, ProtectError> {
    let described =
        isnode_store::spool::describe(file, len, hints.bitrate_bps, hints.content_type.clone())?;
    let title_key = match keys {
        Keys::Random => TitleKey::generate(),
        Keys::Shared(k) => TitleKey {
            key: k.key.clone(),
            params: k.params,
        },
        Keys::Derived(d) => TitleKey::derived(d),
    };
    let (key, p) = (&title_key.key, title_key.params);
    let cipher = Cipher(BlockKey::new(key));
    let mut spool = tempfile::tempfile_in(tmp_dir).map_err(io("making the spool"))?;
    let (fragments, dropped) = {
        let mut w = BufWriter::with_capacity(1 << 20, &mut spool);
        let n = encrypt_boxes(file, len, &p, &cipher, &mut w).map_err(|e| in_input(e, what))?;
        w.flush().map_err(io("writing the spool"))?;
        n
    };
    let cipher_len = spool.metadata().map_err(io("the spool's size"))?.len();
    let ix = crate::index_file(&spool, cipher_len, "the encrypted file")?;
    let complete = ix
        .fragments
        .as_ref()
        .is_some_and(|f| f.complete && !f.fragments.is_empty());
    if !complete {
        return refuse(
            "the encrypted file does not index as a fragmented MP4 (a bug: please report it)"
                .into(),
        );
    }
    spool.rewind().map_err(io("reading the spool back"))?;
    Ok(Encrypted {
        ciphertext: crate::Ciphertext::Spool(spool),
        len: cipher_len,
        clear_len: len,
        // The clear length is that of the file a player decrypts it to: the input less the
        // `sidx` boxes dropped.
        protected: record(&ix, (cipher_len, len - dropped), node_key, key, &p),
        bitrate_bps: crate::cipher_bitrate(described.bitrate_bps, len, cipher_len),
        content_type: described.content_type,
        what: format!("CENC cbcs, {fragments} fragments"),
    })
}

/// `e` naming the input `what`.
fn in_input(e: ProtectError, what: &str) -> ProtectError {
    match e {
        ProtectError::Unsupported(why) => ProtectError::Unsupported(format!("{what}: {why}")),
        ProtectError::Cenc { context, source } => ProtectError::Cenc {
            context: format!("{what}: {context}"),
            source,
        },
        e => e,
    }
}

/// What the store records with the ciphertext of index `ix`.
fn record(
    ix: &isnode_media::MediaIndex,
    (cipher_len, clear_len): (u64, u64),
    node_key: &NodeKey,
    key: &ContentKey,
    p: &CencParams,
) -> Protected {
    let duration_s = ix
        .fragments
        .as_ref()
        .and_then(|f| f.duration_s())
        .unwrap_or(0.0)
        .max(0.0);
    Protected {
        index: MediaIndexRecord {
            container: "mp4".into(),
            moov_at_front: ix.moov_at_front,
            points: ix
                .points
                .iter()
                .map(|q| (q.time_s, q.offset_bytes))
                .collect(),
            detail: Some(isnode_store::renditions::media_detail(ix)),
        },
        protection: ProtectionRecord {
            method: isnode_store::protection::METHOD_CENC_CBCS.into(),
            key_id: p.key_id,
            wrap: isnode_store::protection::WRAP_AES_KW_256.into(),
            wrapped_key: node_key.wrap(key),
            node_key_id: node_key.id(),
            segments: vec![ProtectedSegment {
                offset_bytes: 0,
                length_bytes: cipher_len,
                clear_offset: 0,
                clear_length: clear_len,
                start_s: 0.0,
                duration_s,
                iv: p.iv,
            }],
        },
        origin_etag: None,
    }
}
