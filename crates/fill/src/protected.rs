//! An encrypted fill (issue 32; `encrypt = "on"` with an origin): the origin's version is
//! fetched whole into a spool without a name in the volume (ranged `If-Match` GETs, its MD5
//! ETag checked), encrypted under the content key, key id and IVs derived from the cluster
//! key over the title's name and origin ETag (`isnode_keys::cluster`), and ingested with
//! the key wrapped by this node's key. Edges holding the same cluster key thus store
//! byte-identical ciphertext for the same origin version, and a client fails over from one
//! edge's fill to another's as it does for clear titles.
//!
//! The fetch keeps to the job's rate cap (a pre-fill's, raised once a viewer asks) as a
//! clear fill's does. The origin row (its ETag) is written with the key row and commits
//! with the object, so an encrypted fill never looks locally ingested.
//!
//! Unlike a clear fill, nothing is served before the whole title is encrypted and stored:
//! the ciphertext's length (each segment padded by 1 to 16 bytes) and its segment table
//! need the segment cuts, and the cuts need the whole clear file's index, while a filling
//! object's length is fixed when it begins. Requests wait for it as for a fill's first
//! codewords. Clear bytes are never an object; the clear spool goes when the fill ends.
//! docs/protocol.md ("Serving an encrypted fill before it completes") designs the way past
//! this: a plan of the cuts beside the origin object, checked against its ETag.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use isnode_keys::cluster::ClusterKey;
use isnode_keys::node_key::NodeKey;
use isnode_protect::{Existing, Hints, Keys, ProtectError};
use isnode_store::{StoreError, Volume};

use crate::content_check::ContentCheck;
use crate::fills::Fills;
use crate::job::{FillJob, JobFailure};
use crate::origin::{Origin, OriginError, OriginMeta};
use crate::status::FillStatus;

/// Tries of one range after retryable origin errors.
const RANGE_TRIES: u32 = 4;
/// The first backoff after an origin error (doubled each time).
const FIRST_BACKOFF: Duration = Duration::from_millis(250);

/// Runs the encrypted fill of `job` to its end.
pub(super) fn run(
    fills: &Arc<Fills>,
    job: &Arc<FillJob>,
    (origin, rt): (&Arc<Origin>, &tokio::runtime::Handle),
) {
    match fill(fills, job, (origin, rt)) {
        Ok(()) => {
            fills.mark_checked(&job.name);
            job.done();
            fills.counters.fills_done.fetch_add(1, Ordering::Relaxed);
            tracing::info!(title = %job.name, "encrypted fill complete");
        }
        Err(f) => {
            tracing::warn!(title = %job.name, "encrypted fill failed: {}", f.answer().1);
            job.fail(f);
        }
    }
}

/// A failure of `status` saying `msg`.
fn failure(status: FillStatus, msg: String) -> JobFailure {
    JobFailure::Other { status, msg }
}

/// A store error as the fill's failure.
fn store_failure(e: StoreError) -> JobFailure {
    let status = match e {
        _ if e.is_no_room() => FillStatus::InsufficientStorage,
        StoreError::NameExists(_) => FillStatus::Conflict,
        _ => FillStatus::Internal,
    };
    failure(status, format!("filling from the origin: {e}"))
}

/// Fetches, encrypts and stores the title; publishes the stored object.
fn fill(
    fills: &Arc<Fills>,
    job: &Arc<FillJob>,
    (origin, rt): (&Arc<Origin>, &tokio::runtime::Handle),
) -> Result<(), JobFailure> {
    let cfg = fills.env.config.load();
    let Some(cluster_path) = cfg.cluster_key_file.clone() else {
        return Err(failure(
            FillStatus::Internal,
            "encrypt = \"on\" fills need cluster_key_file".into(),
        ));
    };
    let meta = super::run::counted(fills, job, rt.block_on(origin.head(&job.name)), |_| 0)
        .map_err(JobFailure::Origin)?;
    if meta.size_bytes == 0 {
        let e = OriginError::Garbled(format!("{:?} is empty at the origin", job.name));
        return Err(JobFailure::Origin(e));
    }
    job.begin_attempt(meta.size_bytes, true);
    let mut vol = Volume::open(fills.env.objects.root()).map_err(store_failure)?;
    // A clear fill left from before `encrypt = "on"` (resumed at start) is dropped: its
    // clear bytes are never completed.
    if vol.filling(&job.name).map_err(store_failure)?.is_some() {
        vol.delete_filling(&job.name).map_err(store_failure)?;
    }
    crate::evict::make_room(fills, &mut vol, &job.name, meta.size_bytes).map_err(store_failure)?;
    let cluster = ClusterKey::load(&cluster_path)
        .map_err(|e| failure(FillStatus::Internal, format!("the cluster key: {e}")))?;
    let node_key = node_key(fills, &vol)?;
    let clear = fetch(fills, job, (origin, rt), &vol, &meta)?;
    let derived = cluster.derive(&job.name, &meta.etag);
    let what = format!("{:?} from the origin", job.name);
    let mut enc = isnode_protect::encrypt_file(
        &vol.tmp_dir(),
        (&clear, meta.size_bytes),
        &Hints::default(),
        &node_key,
        Keys::Derived(&derived),
        &what,
    )
    .map_err(protect_failure)?;
    drop(clear);
    // The origin row commits with the object: never a title that looks ingested here.
    enc.protected.origin_etag = Some(meta.etag.clone());
    // A version filled before is replaced; an object uploaded here is kept (409).
    let existing = match vol.origin_etag(&job.name).map_err(store_failure)? {
        Some(_) => Existing::Replace,
        None => Existing::Refuse,
    };
    let rec = isnode_protect::store(&mut vol, &job.name, existing, enc, &mut |_| {})
        .map_err(protect_failure)?;
    let info = fills.env.objects.get(&rec.name).map_err(store_failure)?;
    job.publish(info);
    job.progress(meta.size_bytes, rec.codewords);
    Ok(())
}

/// An encryption error as the fill's failure (media that cannot be encrypted: `502`).
fn protect_failure(e: ProtectError) -> JobFailure {
    match e {
        ProtectError::Store(e) => store_failure(e),
        e @ ProtectError::Io { .. } => failure(FillStatus::Internal, e.to_string()),
        e => failure(
            FillStatus::BadGateway,
            format!("the origin's title cannot be encrypted: {e}"),
        ),
    }
}

/// The node key (`node_key_file`, else `node.key` in the volume, made on first use).
fn node_key(fills: &Fills, vol: &Volume) -> Result<NodeKey, JobFailure> {
    let named = fills.env.config.load().node_key_file.clone();
    let loaded = match &named {
        Some(p) => NodeKey::load(p).map(|k| (k, false)),
        None => NodeKey::load_or_create(&vol.root().join(isnode_keys::NODE_KEY_FILE)),
    };
    let (key, made) =
        loaded.map_err(|e| failure(FillStatus::Internal, format!("the node key: {e}")))?;
    if made {
        let path: PathBuf = vol.root().join(isnode_keys::NODE_KEY_FILE);
        tracing::warn!(path = %path.display(), id = %key.id_hex(), "made the node key: keep a copy; without it no encrypted title plays");
    }
    Ok(key)
}

/// The origin's version `meta` fetched whole into a spool in the volume, its MD5 ETag
/// checked (when it is one).
fn fetch(
    fills: &Arc<Fills>,
    job: &Arc<FillJob>,
    (origin, rt): (&Arc<Origin>, &tokio::runtime::Handle),
    vol: &Volume,
    meta: &OriginMeta,
) -> Result<std::fs::File, JobFailure> {
    let io = |what: &'static str| {
        move |e: std::io::Error| failure(FillStatus::Internal, format!("{what}: {e}"))
    };
    let spool = tempfile::tempfile_in(vol.tmp_dir()).map_err(io("making the fill's spool"))?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, &spool);
    let mut check = ContentCheck::for_etag(&meta.etag);
    let step = fills.env.config.load().fill_range_bytes.max(1);
    let mut at = 0u64;
    let started = Instant::now();
    while at < meta.size_bytes {
        if fills.env.stop.is_stopped() || !wait_for_cap(fills, job, started, at) {
            return Err(failure(
                FillStatus::Unavailable,
                "the server is stopping".into(),
            ));
        }
        let end = (at + step).min(meta.size_bytes);
        let bytes = range(fills, job, (origin, rt), at..end, &meta.etag)?;
        w.write_all(&bytes)
            .map_err(io("writing the fill's spool"))?;
        if let Some(c) = check.as_mut() {
            c.update(&bytes);
        }
        at = end;
        job.progress(at, 0);
    }
    w.flush().map_err(io("writing the fill's spool"))?;
    drop(w);
    if let Some(Err(why)) = check.as_ref().map(ContentCheck::verdict) {
        fills.counters.error(crate::origin::ErrorClass::Garbled);
        let e = OriginError::Garbled(format!("{:?}: {why}", job.name));
        return Err(JobFailure::Origin(e));
    }
    Ok(spool)
}

/// Waits until the job's rate cap (a pre-fill's, raised when a viewer asks; none for a
/// viewer's fill) lets the range from byte `at` start, `started` being when the fetch
/// began; false if the server stops meanwhile. The cap is read again at every step, so a
/// viewer's demand (or a pre-fill without a cap) lifts it at once.
fn wait_for_cap(fills: &Fills, job: &FillJob, started: Instant, at: u64) -> bool {
    loop {
        let cap = job.rate_cap_bps();
        if cap == 0 {
            return true;
        }
        let due_s = at as f64 * 8.0 / cap as f64;
        if started.elapsed().as_secs_f64() >= due_s {
            return true;
        }
        if super::run::sleep_unless_shutdown(fills, super::run::THROTTLE_STEP) {
            return false;
        }
    }
}

/// Bytes `r` of the version `etag`, retried after retryable origin errors.
fn range(
    fills: &Arc<Fills>,
    job: &Arc<FillJob>,
    (origin, rt): (&Arc<Origin>, &tokio::runtime::Handle),
    r: std::ops::Range<u64>,
    etag: &str,
) -> Result<bytes::Bytes, JobFailure> {
    let mut backoff = FIRST_BACKOFF;
    let mut tries = 0u32;
    loop {
        tries += 1;
        let got = rt.block_on(origin.get_range(&job.name, r.clone(), etag));
        match super::run::counted(fills, job, got, |b| b.len() as u64) {
            Ok(b) => return Ok(b),
            Err(e) if e.is_retryable() && tries < RANGE_TRIES => {
                tracing::warn!(title = %job.name, "encrypted fill: {e}; retrying in {} ms", backoff.as_millis());
                std::thread::sleep(backoff);
                backoff *= 2;
            }
            Err(e) => return Err(JobFailure::Origin(e)),
        }
    }
}
