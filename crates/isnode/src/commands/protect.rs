//! `isnode ingest --encrypt FILE` (issue 32): an MPEG-TS title stored as HLS AES-128, a
//! fragmented MP4 / CMAF one as CENC `cbcs` (`isnode_protect`): encrypted under a new
//! content key into a spool in the volume, then ingested as the object's bytes (packets,
//! parity and digests over the ciphertext) with the key wrapped by the node key
//! (docs/format.md, "Protection tables"). With `--server`, the upload asks the server to
//! encrypt (`PUT /v1/objects/NAME?encrypt=on`).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use isnode_keys::node_key::NodeKey;
use isnode_protect::{Encrypted, Existing, Hints, Keys, TitleKey};
use isnode_store::Volume;

use crate::cli::IngestArgs;

/// The node key file: `--node-key-file`, else `node.key` in the volume.
pub(super) fn node_key_path(root: &Path, named: Option<&Path>) -> PathBuf {
    named.map_or_else(|| root.join(isnode_keys::NODE_KEY_FILE), Path::to_path_buf)
}

/// `ingest --encrypt`.
pub(super) fn ingest(root: &Path, args: &IngestArgs) -> anyhow::Result<ExitCode> {
    if let Some(server) = &args.remote.server {
        return super::remote::upload(server, args);
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
    let node_key = node_key(root, args)?;
    let enc = encrypt(&vol, (&file, len), args, &node_key, Keys::Random)?;
    store(&mut vol, name, enc, args).map(|_| ExitCode::SUCCESS)
}

/// A rendition of an encrypted title (`title ingest --encrypt`): the CMAF file at `path`
/// encrypted under the title's key, stored as object `name`.
pub(super) fn ingest_rendition(
    vol: &mut Volume,
    name: String,
    args: &IngestArgs,
    node_key: &NodeKey,
    key: &TitleKey,
) -> anyhow::Result<isnode_store::ObjectRecord> {
    let file =
        File::open(&args.file).with_context(|| format!("opening {}", args.file.display()))?;
    let len = file.metadata().context("reading the input's size")?.len();
    let enc = encrypt(vol, (&file, len), args, node_key, Keys::Shared(key))?;
    store(vol, name, enc, args)
}

/// Encrypts the input under `keys` into a spool in the volume.
fn encrypt(
    vol: &Volume,
    input: (&File, u64),
    args: &IngestArgs,
    node_key: &NodeKey,
    keys: Keys<'_>,
) -> anyhow::Result<Encrypted> {
    let hints = Hints {
        bitrate_bps: args.bitrate,
        content_type: args.content_type.clone(),
    };
    let what = args.file.display().to_string();
    isnode_protect::encrypt_file(&vol.tmp_dir(), input, &hints, node_key, keys, &what)
        .with_context(|| format!("encrypting {what}"))
}

/// Ingests the ciphertext of `enc` as `name`; prints what was stored.
fn store(
    vol: &mut Volume,
    name: String,
    enc: Encrypted,
    args: &IngestArgs,
) -> anyhow::Result<isnode_store::ObjectRecord> {
    let bar = crate::progress::bytes(enc.len, "ingest");
    let (key_id, clear_len) = (enc.protected.protection.key_id, enc.clear_len);
    let what = enc.what.clone();
    let existing = match args.replace {
        true => Existing::Replace,
        false => Existing::Refuse,
    };
    let rec = isnode_protect::store(vol, &name, existing, enc, &mut |done| {
        bar.set_position(done)
    })
    .with_context(|| format!("ingesting {}", args.file.display()))?;
    bar.finish_and_clear();
    println!(
        "ingested {:?} encrypted ({what}, key id {}): {} bytes ({} clear), \
         {} bit/s, {:.1} s, {} codewords, TOI {}",
        rec.name,
        isnode_keys::hex(&key_id),
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
