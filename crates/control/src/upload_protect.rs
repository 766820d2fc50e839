//! An upload stored encrypted (issue 32; `?encrypt=on`, or the configuration's `encrypt =
//! "on"`): the body spooled whole, encrypted into a second spool under a new content key
//! (`isnode_protect`: MPEG-TS as HLS AES-128, CMAF as CENC `cbcs`), and that ingested with
//! the key wrapped by the node key. The clear spool has no name and goes when the upload
//! ends; nothing clear is ever stored as an object.

use std::io::Read;
use std::path::PathBuf;

use isnode_keys::node_key::NodeKey;
use isnode_protect::{Existing as Replace, Hints, Keys, ProtectError};
use isnode_store::spool::{self, SpoolNeed};
use isnode_store::{ObjectRecord, StoreError, Volume};

use crate::handles::Control;
use crate::upload_ingest::{spool_body, Existing, Upload};
use crate::uploads::Reservation;

/// Spools the body, encrypts it and ingests the ciphertext with its wrapped key.
pub(crate) fn spool_then_encrypt<R: Read>(
    sh: &Control,
    vol: &mut Volume,
    up: &Upload,
    src: R,
    room: &Reservation,
) -> Result<ObjectRecord, StoreError> {
    let (clear, len) = spool_body(sh, vol, up, src, room)?;
    let node_key = node_key(sh)?;
    let hints = Hints {
        bitrate_bps: up.bitrate_bps,
        content_type: up.content_type.clone(),
    };
    let what = format!("the upload of {:?}", up.name);
    let enc = isnode_protect::encrypt_file(
        &vol.tmp_dir(),
        (&clear, len),
        &hints,
        &node_key,
        Keys::Random,
        &what,
    )
    .map_err(store_error)?;
    drop(clear);
    let max = sh.config().max_volume_bytes;
    room.resize(vol, spool::stored_bytes(*vol.params(), enc.len)?, max)?;
    spool::check_room(vol, enc.len, SpoolNeed::None, None)?;
    let existing = match up.existing {
        Existing::Replace => Replace::Replace,
        Existing::Refuse => Replace::Refuse,
    };
    let rec =
        isnode_protect::store(vol, &up.name, existing, enc, &mut |_| {}).map_err(store_error)?;
    tracing::info!(name = %rec.name, toi = rec.toi, "upload stored encrypted");
    Ok(rec)
}

/// The node key file the server reads: `node_key_file`, else `node.key` in the volume.
pub(crate) fn node_key_path(sh: &Control) -> PathBuf {
    let named = sh.config().node_key_file.clone();
    named.unwrap_or_else(|| sh.objects.root().join(isnode_keys::NODE_KEY_FILE))
}

/// The node key, made in the volume on first use when the configuration names none.
pub(crate) fn node_key(sh: &Control) -> Result<NodeKey, StoreError> {
    let path = node_key_path(sh);
    let named = sh.config().node_key_file.is_some();
    let loaded = match named {
        true => NodeKey::load(&path).map(|k| (k, false)),
        false => NodeKey::load_or_create(&path),
    };
    let (key, made) = loaded.map_err(|e| StoreError::BadParams(format!("the node key: {e}")))?;
    if made {
        tracing::warn!(path = %path.display(), id = %key.id_hex(), "made the node key: keep a copy; without it no encrypted title plays");
    }
    Ok(key)
}

/// An encryption error as the store's (the API maps those to statuses): an input that
/// cannot be encrypted is a bad request.
pub(crate) fn store_error(e: ProtectError) -> StoreError {
    match e {
        ProtectError::Store(e) => e,
        ProtectError::Io { context, source } => StoreError::Io { context, source },
        e @ (ProtectError::Unsupported(_) | ProtectError::Cenc { .. }) => {
            StoreError::BadParams(format!("cannot encrypt it: {e}"))
        }
    }
}
