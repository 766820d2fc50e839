//! Content protection at ingest (issue 32): a clear file encrypted once into a spool in the
//! volume, then stored with its key wrapped by the node key (docs/format.md, "Protection
//! tables"). The same code serves `isnode ingest --encrypt`, an upload asking for
//! encryption (or under the volume's `encrypt = "on"`) and a fill from the origin.
//!
//! - MPEG-TS: HLS AES-128 ([`ts`]): the server's own segment cuts, each AES-128-CBC with
//!   PKCS#7 under its own IV.
//! - Fragmented MP4 / CMAF: CENC `cbcs` ([`cmaf`]).
//!
//! The content key, key id and IVs are random ([`Keys::Random`]), shared by a title's
//! renditions ([`Keys::Shared`]), or derived from the cluster key over the title's name and
//! origin ETag ([`Keys::Derived`]: edges filling the same origin version write the same
//! ciphertext). No error here carries key bytes.

pub mod cmaf;
pub mod parallel;
pub mod ts;

use std::fs::File;
use std::io::{BufReader, Read};
use std::os::unix::fs::FileExt;
use std::path::Path;

use isnode_keys::cluster::DerivedTitle;
use isnode_keys::node_key::NodeKey;
use isnode_store::{IngestOptions, ObjectRecord, Protected, StoreError, Volume};

pub use cmaf::TitleKey;

/// What can go wrong encrypting a title. No variant carries key bytes.
#[derive(Debug, thiserror::Error)]
pub enum ProtectError {
    /// Reading the input or writing the spool.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// An input `--encrypt` does not support, and why.
    #[error("{0}")]
    Unsupported(String),
    /// A fragmented MP4 the CENC rewrite refuses.
    #[error("{context}: {source}")]
    Cenc {
        /// Where.
        context: String,
        /// Why.
        #[source]
        source: isnode_media::cenc::CencError,
    },
    /// The store's answer.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// An [`ProtectError::Io`] maker for `map_err`.
pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> ProtectError {
    let context = context.into();
    move |source| ProtectError::Io { context, source }
}

/// Where a title's content key, key id and IVs come from.
#[derive(Clone, Copy, Debug)]
pub enum Keys<'a> {
    /// New random ones.
    Random,
    /// Those of a title whose renditions share one key (CMAF only).
    Shared(&'a TitleKey),
    /// Derived from the cluster key over the title's name and origin ETag.
    Derived(&'a DerivedTitle),
}

/// What the probe would be told: overrides of the bitrate and content type.
#[derive(Clone, Debug, Default)]
pub struct Hints {
    /// Overrides the probed bitrate (of the clear media).
    pub bitrate_bps: Option<u64>,
    /// Overrides the probed content type.
    pub content_type: Option<String>,
}

/// Where a title's ciphertext comes from when it is stored.
#[derive(Debug)]
pub enum Ciphertext {
    /// Written whole to a spool, read back from its start (CMAF).
    Spool(File),
    /// Encrypted segment by segment, in parallel, as the store reads it (MPEG-TS).
    Segments(parallel::Segments),
}

impl Ciphertext {
    /// Runs `consume` on a reader of the ciphertext from its first byte.
    pub fn read_into<T>(self, consume: impl FnOnce(&mut dyn Read) -> T) -> T {
        match self {
            Ciphertext::Spool(f) => consume(&mut BufReader::with_capacity(1 << 20, f)),
            Ciphertext::Segments(s) => s.read_into(parallel::threads(), consume),
        }
    }
}

/// A title planned for encryption (TS) or encrypted into a spool (CMAF), ready to store.
#[derive(Debug)]
pub struct Encrypted {
    /// The ciphertext.
    pub ciphertext: Ciphertext,
    /// Its length, bytes.
    pub len: u64,
    /// The clear input's length, bytes.
    pub clear_len: u64,
    /// The key row, segments and time index recorded with it.
    pub protected: Protected,
    /// The pacing bitrate of the ciphertext (the clear one scaled by the padding).
    pub bitrate_bps: u64,
    /// The content type.
    pub content_type: String,
    /// What was done ("HLS AES-128, 12 segments").
    pub what: String,
}

/// What to do with an object of the same name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Existing {
    /// Replace it when the new one commits.
    Replace,
    /// Refuse (the store's `NameExists`).
    Refuse,
}

/// The kind of clear input `--encrypt` knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// MPEG-TS: HLS AES-128.
    MpegTs,
    /// Fragmented MP4 / CMAF: CENC `cbcs`.
    Cmaf,
}

/// Encrypts `file` (`len` bytes of clear media) under `keys`, the content key wrapped by
/// `node_key`; `what` names the input in errors. CMAF is encrypted here into a spool in
/// `tmp_dir`; MPEG-TS is planned here (cuts, IVs, rows) and encrypted by [`store`] as the
/// store reads it, segments in parallel (`file` is opened again for that, so the caller
/// may close its own handle).
pub fn encrypt_file(
    tmp_dir: &Path,
    (file, len): (&File, u64),
    hints: &Hints,
    node_key: &NodeKey,
    keys: Keys<'_>,
    what: &str,
) -> Result<Encrypted, ProtectError> {
    if len == 0 {
        return Err(ProtectError::Unsupported(format!("{what} is empty")));
    }
    let ix = index_file(file, len, what)?;
    match kind_of(&ix, what)? {
        Kind::Cmaf => cmaf::encrypt(tmp_dir, (file, len), hints, node_key, keys, what),
        Kind::MpegTs => ts::encrypt((file, len), ix, hints, node_key, keys, what),
    }
}

/// The kind of the clear media of index `ix`, or why it cannot be encrypted.
pub fn kind_of(ix: &isnode_media::MediaIndex, what: &str) -> Result<Kind, ProtectError> {
    match ix.container {
        isnode_media::Container::MpegTs => Ok(Kind::MpegTs),
        isnode_media::Container::Mp4 if ix.fragments.is_some() => Ok(Kind::Cmaf),
        c => Err(ProtectError::Unsupported(format!(
            "encryption supports MPEG-TS (HLS AES-128) and fragmented MP4 / CMAF (CENC \
             cbcs) titles; {what} is {c:?} (an MP4 that is not fragmented: remux it with \
             ffmpeg -movflags +cmaf)"
        ))),
    }
}

/// Stores the ciphertext of `enc` as object `name` (its bitrate and content type
/// those of `enc`); `progress` is told the bytes stored so far.
pub fn store(
    vol: &mut Volume,
    name: &str,
    existing: Existing,
    enc: Encrypted,
    progress: &mut dyn FnMut(u64),
) -> Result<ObjectRecord, ProtectError> {
    let opts = IngestOptions {
        name: name.to_owned(),
        bitrate_bps: enc.bitrate_bps,
        content_type: enc.content_type,
        replace: existing == Existing::Replace,
    };
    let (len, protected) = (enc.len, enc.protected);
    let rec = enc.ciphertext.read_into(|reader| {
        isnode_store::ingest_protected(vol, &opts, reader, len, progress, &protected)
    })?;
    Ok(rec)
}

/// The media index of `file` (`len` bytes); `what` names it in errors.
pub fn index_file(
    file: &File,
    len: u64,
    what: &str,
) -> Result<isnode_media::MediaIndex, ProtectError> {
    let mut indexer = isnode_media::Indexer::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0u64;
    while at < len {
        let n = file
            .read_at(&mut buf, at)
            .map_err(io(format!("reading {what}")))?;
        if n == 0 {
            return Err(ProtectError::Io {
                context: format!("reading {what}"),
                source: std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("it ended at byte {at} of {len}"),
                ),
            });
        }
        indexer.feed(buf.get(..n).unwrap_or_default());
        at += n as u64;
    }
    Ok(indexer.finish())
}

/// The pacing bitrate of the ciphertext: the clear media's, scaled by what the padding
/// adds, so that the stored object lasts as long as the clear title.
pub fn cipher_bitrate(clear_bps: u64, clear_len: u64, cipher_len: u64) -> u64 {
    let scaled = u128::from(clear_bps) * u128::from(cipher_len);
    let bps = scaled.div_ceil(u128::from(clear_len.max(1)));
    u64::try_from(bps).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A generated MPEG-TS title in a file of `dir`.
    fn title(dir: &Path, seed: u64) -> (File, u64) {
        let cfg = isnode_media::TsGenConfig {
            bitrate_bps: 2_000_000,
            duration_s: 6.0,
            seed,
        };
        let mut bytes = Vec::new();
        isnode_media::generate_ts(&cfg, &mut bytes).unwrap();
        let mut f = tempfile::tempfile_in(dir).unwrap();
        f.write_all(&bytes).unwrap();
        (f, bytes.len() as u64)
    }

    fn cipher(enc: Encrypted) -> Vec<u8> {
        let mut out = Vec::new();
        enc.ciphertext
            .read_into(|r| r.read_to_end(&mut out))
            .unwrap();
        assert_eq!(out.len() as u64, enc.len);
        out
    }

    #[test]
    fn derived_keys_give_the_same_ciphertext_and_random_ones_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let (file, len) = title(dir.path(), 4);
        let (a, b) = (NodeKey::generate(), NodeKey::generate());
        let cluster = isnode_keys::cluster::ClusterKey::from_bytes(&[5u8; 32]);
        let derived = cluster.derive("t.ts", "\"etag-1\"");
        let hints = Hints::default();
        let run = |node: &NodeKey, keys: Keys<'_>| {
            encrypt_file(dir.path(), (&file, len), &hints, node, keys, "t.ts").unwrap()
        };
        let (ea, eb) = (
            run(&a, Keys::Derived(&derived)),
            run(&b, Keys::Derived(&derived)),
        );
        assert_eq!(ea.protected.protection.key_id, derived.key_id());
        assert_eq!(
            ea.protected.protection.segments, eb.protected.protection.segments,
            "the same cuts and IVs"
        );
        assert_ne!(
            ea.protected.protection.wrapped_key, eb.protected.protection.wrapped_key,
            "each node wraps under its own key"
        );
        let (ca, cb) = (cipher(ea), cipher(eb));
        assert!(ca == cb, "two nodes' ciphertexts differ");
        let other = cluster.derive("t.ts", "\"etag-2\"");
        assert!(
            cipher(run(&a, Keys::Derived(&other))) != ca,
            "another version"
        );
        let (r1, r2) = (cipher(run(&a, Keys::Random)), cipher(run(&a, Keys::Random)));
        assert!(r1 != r2 && r1 != ca, "random keys");
        // Not media that can be encrypted: refused by name.
        let mut junk = tempfile::tempfile_in(dir.path()).unwrap();
        junk.write_all(&[7u8; 4096]).unwrap();
        let e = encrypt_file(dir.path(), (&junk, 4096), &hints, &a, Keys::Random, "junk")
            .unwrap_err()
            .to_string();
        assert!(e.contains("junk"), "{e}");
    }
}
