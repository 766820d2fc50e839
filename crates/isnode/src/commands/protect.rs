//! `isnode ingest --encrypt FILE` (issue 32): an MPEG-TS title stored as HLS AES-128
//! (a fragmented MP4 / CMAF file goes to `protect_cmaf`: CENC `cbcs`).
//!
//! The clear media is indexed and cut into the segments its playlist will list (the
//! server's own cuts, `isnode_media::segments`); each segment is encrypted on its own
//! (AES-128-CBC, PKCS#7, a random IV) under a new content key, into a spool in the volume;
//! the spool is ingested as the object's bytes (packets, parity and digests over the
//! ciphertext) with the clear media's time index mapped onto the ciphertext and the key
//! wrapped by the node key (docs/format.md, "Protection tables").

use std::fs::File;
use std::io::{BufReader, BufWriter, Seek, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use isnode_keys::content::{new_key_id, ContentKey};
use isnode_keys::node_key::NodeKey;
use isnode_store::protection::{ProtectedSegment, ProtectionRecord};
use isnode_store::{IngestOptions, MediaIndexRecord, Protected, Volume};

use crate::cli::IngestArgs;

/// Largest clear segment encrypted (a segment is held in memory while it is encrypted).
const MAX_SEGMENT_BYTES: u64 = 512 << 20;

/// The node key file: `--node-key-file`, else `node.key` in the volume.
pub(super) fn node_key_path(root: &Path, named: Option<&Path>) -> PathBuf {
    named.map_or_else(|| root.join(isnode_keys::NODE_KEY_FILE), Path::to_path_buf)
}

/// `ingest --encrypt`.
pub(super) fn ingest(root: &Path, args: &IngestArgs) -> anyhow::Result<ExitCode> {
    if args.remote.server.is_some() {
        bail!("--encrypt is not built for uploads yet (--server): ingest on the server's volume");
    }
    let mut vol =
        Volume::open_or_create(root).with_context(|| format!("opening {}", root.display()))?;
    let name = super::ingest::object_name(&args.file, args)?;
    if vol.catalog().title(&name)?.is_some() {
        bail!("{name:?} is a title with renditions: remove it first (`isnode rm {name}`)");
    }
    if vol.catalog().complete_toi(&name)?.is_some() && !args.replace {
        bail!("an object named {name:?} already exists; use --replace to replace it");
    }
    let (file, len) = open_input(&vol, args)?;
    if len == 0 {
        bail!("{} is empty", args.file.display());
    }
    let ix = index_file(&file, len, &args.file.display().to_string())?;
    if ix.container == isnode_media::Container::Mp4 && ix.fragments.is_some() {
        return ingest_cmaf(root, &mut vol, name, (&file, len), args);
    }
    let clear = examine(&file, len, ix, args)?;
    let node_key = node_key(root, args)?;
    let (spool, protected) = encrypt(&vol, &file, &clear, &node_key)?;
    let cipher_len: u64 = protected
        .protection
        .segments
        .iter()
        .map(|s| s.length_bytes)
        .sum();
    let opts = IngestOptions {
        name,
        bitrate_bps: cipher_bitrate(clear.bitrate_bps, len, cipher_len),
        content_type: clear.content_type,
        replace: args.replace,
    };
    let what = format!(
        "HLS AES-128, {} segments",
        protected.protection.segments.len()
    );
    store(&mut vol, &opts, spool, &protected, len, &what, args).map(|_| ExitCode::SUCCESS)
}

/// `ingest --encrypt` of a fragmented MP4 / CMAF file: CENC `cbcs`.
fn ingest_cmaf(
    root: &Path,
    vol: &mut Volume,
    name: String,
    (file, len): (&File, u64),
    args: &IngestArgs,
) -> anyhow::Result<ExitCode> {
    let node_key = node_key(root, args)?;
    ingest_cmaf_with(vol, name, (file, len), args, &node_key, None).map(|_| ExitCode::SUCCESS)
}

/// A rendition of an encrypted title (`title ingest --encrypt`): the CMAF file at `path`
/// encrypted under the title's key, stored as object `name`.
pub(super) fn ingest_rendition(
    vol: &mut Volume,
    name: String,
    args: &IngestArgs,
    node_key: &NodeKey,
    key: &super::protect_cmaf::TitleKey,
) -> anyhow::Result<isnode_store::ObjectRecord> {
    let file =
        File::open(&args.file).with_context(|| format!("opening {}", args.file.display()))?;
    let len = file.metadata().context("reading the input's size")?.len();
    let ix = index_file(&file, len, &args.file.display().to_string())?;
    if ix.container != isnode_media::Container::Mp4 || ix.fragments.is_none() {
        bail!(
            "{}: --encrypt of a title with renditions is built for CMAF (fragmented MP4) \
             renditions only",
            args.file.display()
        );
    }
    ingest_cmaf_with(vol, name, (&file, len), args, node_key, Some(key))
}

/// [`ingest_cmaf`] under `node_key`, with the title's key when it is shared.
fn ingest_cmaf_with(
    vol: &mut Volume,
    name: String,
    (file, len): (&File, u64),
    args: &IngestArgs,
    node_key: &NodeKey,
    key: Option<&super::protect_cmaf::TitleKey>,
) -> anyhow::Result<isnode_store::ObjectRecord> {
    let described =
        isnode_store::spool::describe(file, len, args.bitrate, args.content_type.clone())
            .with_context(|| format!("examining {}", args.file.display()))?;
    let enc = super::protect_cmaf::encrypt(vol, file, len, node_key, key)
        .with_context(|| format!("encrypting {}", args.file.display()))?;
    let opts = IngestOptions {
        name,
        bitrate_bps: cipher_bitrate(described.bitrate_bps, len, enc.len),
        content_type: described.content_type,
        replace: args.replace,
    };
    let what = format!("CENC cbcs, {} fragments", enc.fragments);
    store(vol, &opts, enc.spool, &enc.protected, len, &what, args)
}

/// Ingests the ciphertext `spool` with its record; prints what was stored.
fn store(
    vol: &mut Volume,
    opts: &IngestOptions,
    spool: File,
    protected: &Protected,
    clear_len: u64,
    what: &str,
    args: &IngestArgs,
) -> anyhow::Result<isnode_store::ObjectRecord> {
    let cipher_len = spool.metadata().context("the spool's size")?.len();
    let bar = crate::progress::bytes(cipher_len, "ingest");
    let mut reader = BufReader::with_capacity(1 << 20, spool);
    let rec = isnode_store::ingest_protected(
        vol,
        opts,
        &mut reader,
        cipher_len,
        &mut |done| bar.set_position(done),
        protected,
    )
    .with_context(|| format!("ingesting {}", args.file.display()))?;
    bar.finish_and_clear();
    println!(
        "ingested {:?} encrypted ({what}, key id {}): {} bytes ({} clear), \
         {} bit/s, {:.1} s, {} codewords, TOI {}",
        rec.name,
        isnode_keys::hex(&protected.protection.key_id),
        rec.size_bytes,
        clear_len,
        rec.bitrate_bps,
        rec.duration_s,
        rec.codewords,
        rec.toi
    );
    Ok(rec)
}

/// The input (a file, or stdin spooled into the volume) and its length.
fn open_input(vol: &Volume, args: &IngestArgs) -> anyhow::Result<(File, u64)> {
    let file = match args.file.as_os_str() == "-" {
        true => super::ingest::spool_stdin(vol, args.size, args.max_spool_bytes)?,
        false => {
            File::open(&args.file).with_context(|| format!("opening {}", args.file.display()))?
        }
    };
    let len = file.metadata().context("reading the input's size")?.len();
    if args.size.is_some_and(|s| s != len) {
        bail!(
            "{} is {len} bytes, but --size says {:?}",
            args.file.display(),
            args.size
        );
    }
    Ok((file, len))
}

/// The node key of `--node-key-file` or the volume's `node.key`, made there when missing.
pub(super) fn node_key(root: &Path, args: &IngestArgs) -> anyhow::Result<NodeKey> {
    let key_path = node_key_path(root, args.node_key_file.as_deref());
    let (node_key, made) = NodeKey::load_or_create(&key_path)?;
    if made {
        eprintln!(
            "made the node key {} (id {}): keep a copy; without it no encrypted title plays",
            key_path.display(),
            node_key.id_hex()
        );
    }
    Ok(node_key)
}

/// Encrypts the cuts of `file` under a new content key into a spool in the volume (read
/// back from its start); what the ingest records with it.
fn encrypt(
    vol: &Volume,
    file: &File,
    clear: &Clear,
    node_key: &NodeKey,
) -> anyhow::Result<(File, Protected)> {
    let mut spool = tempfile::tempfile_in(vol.tmp_dir()).context("making the spool")?;
    let key = ContentKey::generate();
    let segments = encrypt_segments(file, &clear.cuts, &key, &mut spool)?;
    spool.rewind().context("reading the spool back")?;
    let protected = Protected {
        index: MediaIndexRecord {
            container: "mpeg-ts".into(),
            moov_at_front: None,
            points: segments
                .iter()
                .map(|s| (s.start_s, s.offset_bytes))
                .collect(),
            detail: Some(clear.detail.clone()),
        },
        protection: ProtectionRecord {
            method: isnode_store::protection::METHOD_AES_128.into(),
            key_id: new_key_id(),
            wrap: isnode_store::protection::WRAP_AES_KW_256.into(),
            wrapped_key: node_key.wrap(&key),
            node_key_id: node_key.id(),
            segments,
        },
    };
    Ok((spool, protected))
}

/// The pacing bitrate of the ciphertext: the clear media's, scaled by what the padding
/// adds, so that the stored object lasts as long as the clear title.
fn cipher_bitrate(clear_bps: u64, clear_len: u64, cipher_len: u64) -> u64 {
    let scaled = u128::from(clear_bps) * u128::from(cipher_len);
    let bps = scaled.div_ceil(u128::from(clear_len.max(1)));
    u64::try_from(bps).unwrap_or(u64::MAX)
}

/// What the clear media says: its bitrate, type, descriptor and segment cuts.
struct Clear {
    bitrate_bps: u64,
    content_type: String,
    detail: isnode_store::MediaDetail,
    cuts: Vec<isnode_media::segments::Segment>,
}

/// The media index of `file` (`len` bytes); `what` names it in errors.
pub(super) fn index_file(
    file: &File,
    len: u64,
    what: &str,
) -> anyhow::Result<isnode_media::MediaIndex> {
    let mut indexer = isnode_media::Indexer::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0u64;
    while at < len {
        let n = file
            .read_at(&mut buf, at)
            .with_context(|| format!("reading {what}"))?;
        if n == 0 {
            bail!("{what} ended at byte {at} of {len}");
        }
        indexer.feed(buf.get(..n).unwrap_or_default());
        at += n as u64;
    }
    Ok(indexer.finish())
}

/// Examines the clear input (`ix`, its index); refuses what `--encrypt` does not support.
fn examine(
    file: &File,
    len: u64,
    ix: isnode_media::MediaIndex,
    args: &IngestArgs,
) -> anyhow::Result<Clear> {
    if ix.container != isnode_media::Container::MpegTs {
        bail!(
            "--encrypt supports MPEG-TS (HLS AES-128) and fragmented MP4 / CMAF (CENC \
             cbcs) titles; {} is {:?} (an MP4 that is not fragmented: remux it with \
             ffmpeg -movflags +cmaf)",
            args.file.display(),
            ix.container
        );
    }
    let described =
        isnode_store::spool::describe(file, len, args.bitrate, args.content_type.clone())
            .with_context(|| format!("examining {}", args.file.display()))?;
    let duration_s = len as f64 * 8.0 / described.bitrate_bps.max(1) as f64;
    let points: Vec<(f64, u64)> = ix
        .points
        .iter()
        .map(|p| (p.time_s, p.offset_bytes))
        .collect();
    let cuts = isnode_media::segments::segments(&points, len, duration_s);
    if let Some(big) = cuts.iter().find(|c| c.len_bytes > MAX_SEGMENT_BYTES) {
        bail!(
            "a segment of {} bytes at byte {} is longer than {MAX_SEGMENT_BYTES}: the title \
             has too few key frames to encrypt segment by segment",
            big.len_bytes,
            big.offset_bytes
        );
    }
    Ok(Clear {
        bitrate_bps: described.bitrate_bps,
        content_type: described.content_type,
        detail: isnode_store::renditions::media_detail(&ix),
        cuts,
    })
}

/// Encrypts each cut of `file` into `out`, in order; the segments' rows.
fn encrypt_segments(
    file: &File,
    cuts: &[isnode_media::segments::Segment],
    key: &ContentKey,
    out: &mut File,
) -> anyhow::Result<Vec<ProtectedSegment>> {
    let mut w = BufWriter::with_capacity(1 << 20, out);
    let mut rows = Vec::with_capacity(cuts.len());
    let mut at = 0u64;
    for c in cuts {
        let len = usize::try_from(c.len_bytes).context("a segment's length")?;
        let mut clear = vec![0u8; len];
        file.read_exact_at(&mut clear, c.offset_bytes)
            .context("reading a segment of the input")?;
        let iv = isnode_keys::segment::random_iv();
        let cipher = isnode_keys::segment::encrypt(key, &iv, &clear);
        w.write_all(&cipher).context("writing the spool")?;
        rows.push(ProtectedSegment {
            offset_bytes: at,
            length_bytes: cipher.len() as u64,
            clear_offset: c.offset_bytes,
            clear_length: c.len_bytes,
            start_s: c.start_s,
            duration_s: c.duration_s,
            iv,
        });
        at += cipher.len() as u64;
    }
    w.flush().context("writing the spool")?;
    Ok(rows)
}
