//! The prefabrication filter: cut, encode, frame, checksum, write.
//!
//! The caller's thread reads the input and keeps the catalog; the codewords are encoded
//! and framed in parallel and written in order by the pipeline of [`crate::prefab`].
//!
//! Crash safety: the object is first recorded as `writing` and its ingest
//! holds an flock; segment files are written under `MEMBER/tmp`, synced,
//! renamed into `MEMBER/objects`, and only then does one catalog transaction
//! make the object complete (and drop the object it replaces). A crash at any
//! point leaves either the whole object or, after the next open, no trace.

use std::fs;
use std::io::{ErrorKind, Read};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::lock::{FileLock, LockWait};
use crate::prefab::{Crcs, Job, Pipeline, Shape, Stopped};
use crate::records::{BlockRecord, MediaIndexRecord, ObjectRecord, ObjectState, OnNameTaken};
use crate::segment::{BlockWrites, SegmentWriter};
use crate::spool::Described;
pub use crate::validate::validate_name;
use crate::write_behind::WriteBehind;
use crate::{crash, Layout, StoreError, Volume};

/// What to ingest under which name.
#[derive(Clone, Debug)]
pub struct IngestOptions {
    /// Object name (FLUTE Content-Location).
    pub name: String,
    /// Nominal bitrate in bits per second (> 0).
    pub bitrate_bps: u64,
    /// MIME type.
    pub content_type: String,
    /// Replace an existing object of the same name.
    pub replace: bool,
}

/// Ingests exactly `len` bytes from `src` as a new object.
///
/// `progress` is called with the number of bytes consumed so far. On any
/// error nothing of the object remains.
pub fn ingest(
    vol: &mut Volume,
    opts: &IngestOptions,
    src: &mut dyn Read,
    len: u64,
    progress: &mut dyn FnMut(u64),
) -> Result<ObjectRecord, StoreError> {
    ingest_then_describe(vol, opts, src, len, progress, &mut || Ok(None))
}

/// What an encrypted ingest (issue 32) records with its object: the time index of the
/// clear media mapped onto the ciphertext (the stored bytes cannot be indexed), and the
/// wrapped key with its segments.
#[derive(Clone, Debug)]
pub struct Protected {
    /// The time index recorded instead of one made from the stored bytes.
    pub index: MediaIndexRecord,
    /// The key row and the segments.
    pub protection: crate::protection::ProtectionRecord,
    /// The origin's ETag of the version this object was encrypted from (an encrypted
    /// fill): its origin row is written with the key row, before the object commits, so
    /// the object never appears as locally ingested (at most [`crate::fill::MAX_ETAG_LEN`]
    /// bytes). `None`: ingested here.
    pub origin_etag: Option<String>,
}

/// [`ingest`] of ciphertext `src` (`len` bytes) with its key and index ([`Protected`]):
/// they are recorded before the object commits, so it never appears without them.
pub fn ingest_protected(
    vol: &mut Volume,
    opts: &IngestOptions,
    src: &mut dyn Read,
    len: u64,
    progress: &mut dyn FnMut(u64),
    protected: &Protected,
) -> Result<ObjectRecord, StoreError> {
    crate::protection::check_protection(&protected.protection, len)
        .map_err(|why| StoreError::BadParams(format!("the encrypted segments: {why}")))?;
    if let Some(etag) = &protected.origin_etag {
        if etag.len() > crate::fill::MAX_ETAG_LEN {
            return Err(StoreError::BadParams(format!(
                "an origin ETag of {} bytes",
                etag.len()
            )));
        }
    }
    ingest_with(
        vol,
        opts,
        src,
        len,
        progress,
        &mut || Ok(None),
        Some(protected),
    )
}

/// [`ingest`], with the bitrate and content type decided once the last byte is read:
/// `describe` (e.g. a probe of a spool the input was copied to meanwhile) gives them,
/// replacing those of `opts`, before the object commits. `None`: keep those of `opts`.
pub fn ingest_then_describe(
    vol: &mut Volume,
    opts: &IngestOptions,
    src: &mut dyn Read,
    len: u64,
    progress: &mut dyn FnMut(u64),
    describe: &mut dyn FnMut() -> Result<Option<Described>, StoreError>,
) -> Result<ObjectRecord, StoreError> {
    ingest_with(vol, opts, src, len, progress, describe, None)
}

/// [`ingest_then_describe`], the object encrypted when `protected` says so.
fn ingest_with(
    vol: &mut Volume,
    opts: &IngestOptions,
    src: &mut dyn Read,
    len: u64,
    progress: &mut dyn FnMut(u64),
    describe: &mut dyn FnMut() -> Result<Option<Described>, StoreError>,
    protected: Option<&Protected>,
) -> Result<ObjectRecord, StoreError> {
    validate_name(&opts.name)?;
    crate::validate::check_bitrate(opts.bitrate_bps).map_err(StoreError::BadParams)?;
    crate::validate::check_content_type(&opts.content_type).map_err(StoreError::BadParams)?;
    let params = *vol.params();
    let layout = Layout::new(params, len)?;
    let existing = vol.catalog().complete_toi(&opts.name)?;
    if existing.is_some() && !opts.replace {
        return Err(StoreError::NameExists(opts.name.clone()));
    }
    let mut rec = ObjectRecord {
        toi: 0,
        name: opts.name.clone(),
        state: ObjectState::Writing,
        size_bytes: len,
        bitrate_bps: opts.bitrate_bps,
        duration_s: len as f64 * 8.0 / opts.bitrate_bps as f64,
        content_type: opts.content_type.clone(),
        symbol_len: params.symbol_len,
        source_symbols: params.source_symbols,
        repair_symbols: params.repair_symbols,
        codewords: layout.codewords(),
        content_crc32c: 0,
        created_unix: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0),
        replaces: existing.and_then(|t| u32::try_from(t).ok()),
    };

    // Never write a row that would read back as bad.
    crate::rows::check_record(&rec, &params).map_err(StoreError::BadParams)?;
    // Record the object and take its ingest lock under the volume lock, so that
    // recovery in another process never mistakes this ingest for a dead one.
    let volume_lock = FileLock::exclusive(&vol.volume_lock_path(), LockWait::Block)?;
    rec.toi = vol.catalog_mut().begin_object(&rec)?;
    crash::point("after-begin");
    let ingest_lock = FileLock::exclusive(&vol.ingest_lock_path(rec.toi), LockWait::Block)?
        .ok_or_else(|| StoreError::Corrupt("ingest lock busy".into()))?;
    drop(volume_lock);

    let taken = match opts.replace {
        true => OnNameTaken::Replace,
        false => OnNameTaken::Fail,
    };
    let io = ObjectInput {
        src,
        progress,
        describe,
        protected,
    };
    match write_object(vol, &layout, &mut rec, taken, io) {
        Ok(old) => {
            if let Some(old_toi) = old {
                vol.remove_object_files(old_toi);
            }
            ingest_lock.remove();
            rec.state = ObjectState::Complete;
            rec.replaces = None;
            Ok(rec)
        }
        Err(e) => {
            vol.remove_object_files(rec.toi);
            let _ = vol.catalog_mut().delete_object(rec.toi);
            ingest_lock.remove();
            Err(e)
        }
    }
}

/// Where an object's bytes come from, who hears of the progress, and what tells its
/// bitrate and type at the end.
struct ObjectInput<'a> {
    src: &'a mut dyn Read,
    progress: &'a mut dyn FnMut(u64),
    describe: &'a mut dyn FnMut() -> Result<Option<Described>, StoreError>,
    protected: Option<&'a Protected>,
}

/// Writes, publishes and commits; returns the TOI of a replaced object.
fn write_object(
    vol: &mut Volume,
    layout: &Layout,
    rec: &mut ObjectRecord,
    taken: OnNameTaken,
    io: ObjectInput<'_>,
) -> Result<Option<u32>, StoreError> {
    let ObjectInput {
        src,
        progress,
        describe,
        protected,
    } = io;
    let p = *layout.params();
    let skipped = skipped_member(vol)?;
    let behind = WriteBehind::start(WRITE_THREADS, WRITE_SPARE_BLOCKS, p.block_len as usize)?;
    let writers = segment_writers(vol, layout, rec.toi, skipped, &behind)?;
    let shape = Shape {
        layout: layout.clone(),
        tsi: vol.tsi(),
        toi: rec.toi,
        crcs: Crcs::new(p.symbol_len as usize),
    };
    let (read, blocks) = encode_and_write(vol, &shape, writers, src, progress)?;
    drop(behind);
    if let Some(d) = describe()? {
        set_description(vol, rec, d)?;
    }
    crash::point("before-rename");
    publish_segments(vol, rec.toi, p.members, skipped)?;
    match protected {
        Some(p) => {
            vol.catalog_mut().set_media_index(rec.toi, &p.index)?;
            vol.catalog_mut().set_protection(rec.toi, &p.protection)?;
            if let Some(etag) = &p.origin_etag {
                let now = crate::fill::now_unix();
                vol.catalog_mut().set_origin_row(rec.toi, etag, now)?;
            }
        }
        None => {
            let index = media_index_record(read.indexer.finish());
            vol.catalog_mut().set_media_index(rec.toi, &index)?;
        }
    }
    crash::point("before-commit");
    rec.content_crc32c = read.crc;
    let old =
        vol.catalog_mut()
            .commit_object(rec.toi, read.crc, &blocks, taken, skipped.as_slice())?;
    crash::point("after-commit");
    Ok(old)
}

/// The temporary segment writers of object `toi`, one per member (a phantom one for the
/// `skipped` member), writing their blocks through `behind`.
fn segment_writers(
    vol: &Volume,
    layout: &Layout,
    toi: u32,
    skipped: Option<u32>,
    behind: &Arc<WriteBehind>,
) -> Result<Vec<SegmentWriter>, StoreError> {
    (0..layout.params().members)
        .map(|member| {
            let path = vol.tmp_segment_path(member, toi);
            match skipped == Some(member) {
                true => Ok(SegmentWriter::phantom(&path, member, layout)),
                false => SegmentWriter::create_with(
                    &path,
                    member,
                    layout,
                    BlockWrites::Behind(Arc::clone(behind)),
                ),
            }
        })
        .collect()
}

/// Reads the input into the encoding pipeline, whose writer writes every block through
/// `writers`; what the reader computed and the records of the blocks written.
fn encode_and_write(
    vol: &mut Volume,
    shape: &Shape,
    writers: Vec<SegmentWriter>,
    src: &mut dyn Read,
    progress: &mut dyn FnMut(u64),
) -> Result<(ReadSummary, Vec<BlockRecord>), StoreError> {
    std::thread::scope(|scope| {
        let (mut pipeline, writer) = Pipeline::start(scope, shape, writers)?;
        let fed = feed(vol, shape, &mut pipeline, src, progress);
        // Closing the queue ends the encoders once they are done; the writer then ends.
        drop(pipeline);
        let written = writer
            .join()
            .unwrap_or_else(|_| Err(StoreError::Corrupt("the ingest writer panicked".into())));
        match (fed, written) {
            (Ok(read), Ok(blocks)) => Ok((read, blocks)),
            (Err(FeedError::Stopped(s)), w) => Err(s.into_error(w.err())),
            (Err(FeedError::Store(e)), _) | (Ok(_), Err(e)) => Err(e),
        }
    })
}

/// Moves the segments of object `toi` from `tmp/` to `objects/` on every member but the
/// `skipped` one, and syncs both directories of each.
fn publish_segments(
    vol: &Volume,
    toi: u32,
    members: u32,
    skipped: Option<u32>,
) -> Result<(), StoreError> {
    for member in (0..members).filter(|m| skipped != Some(*m)) {
        let from = vol.tmp_segment_path(member, toi);
        let to = vol.segment_path(member, toi);
        fs::rename(&from, &to).map_err(StoreError::io(format!("publishing {}", to.display())))?;
        crash::point("rename");
    }
    let written = vol
        .members()
        .iter()
        .enumerate()
        .filter(|(m, _)| skipped != Some(*m as u32));
    for (_, member) in written {
        for dir in ["objects", "tmp"] {
            let d = member.join(dir);
            crate::io::sync_dir(&d).map_err(StoreError::io(format!("syncing {}", d.display())))?;
        }
    }
    Ok(())
}

/// Block write threads of one ingest (writes in flight at once).
const WRITE_THREADS: usize = 4;
/// Block buffers besides each member's current one: blocks written behind the writer.
const WRITE_SPARE_BLOCKS: usize = 8;

/// What the reader computed over the input, in order.
struct ReadSummary {
    crc: u32,
    indexer: isnode_media::Indexer,
}

/// Why feeding the pipeline stopped.
enum FeedError {
    /// The pipeline stopped (the writer's result says why).
    Stopped(Stopped),
    /// Reading the input or recording digests failed.
    Store(StoreError),
}

impl From<StoreError> for FeedError {
    fn from(e: StoreError) -> Self {
        FeedError::Store(e)
    }
}

impl From<Stopped> for FeedError {
    fn from(s: Stopped) -> Self {
        FeedError::Stopped(s)
    }
}

/// The reader: reads the input codeword by codeword into free buffers and hands them to
/// the encoders; records the digest rows of the codewords written, in batches.
fn feed(
    vol: &mut Volume,
    shape: &Shape,
    pipeline: &mut Pipeline,
    src: &mut dyn Read,
    progress: &mut dyn FnMut(u64),
) -> Result<ReadSummary, FeedError> {
    let layout = &shape.layout;
    let e = layout.params().symbol_len as usize;
    let mut read = ReadSummary {
        crc: 0,
        indexer: isnode_media::Indexer::new(),
    };
    let mut done = 0u64;
    let mut digests = DigestBatch::default();
    // Codewords handed to the encoders and not back from the writer yet.
    let mut in_flight = 0usize;
    for sbn in 0..layout.codewords() {
        let (mut job, written) = pipeline.free_job()?;
        if written.is_some() {
            in_flight -= 1;
            done_with(vol, shape, &job, &mut digests, &mut read)?;
        }
        let k = layout.source_symbols(sbn) as usize;
        let data_len = layout.codeword_data_len(sbn) as usize;
        let data = job.source_mut(k, e);
        read_full(src, &mut data[..data_len], done, layout.transfer_len())?;
        data[data_len..].fill(0);
        read.indexer.feed(&data[..data_len]);
        done += data_len as u64;
        job.sbn = sbn;
        if pipeline.to_encode.send(job).is_err() {
            return Err(Stopped::WriterGone.into());
        }
        in_flight += 1;
        progress(done);
        crash::point("codeword");
    }
    // A source that keeps going past the announced length was misdescribed.
    let mut probe = [0u8; 1];
    if matches!(src.read(&mut probe), Ok(n) if n > 0) {
        return Err(StoreError::BadParams(format!(
            "input is longer than the announced {} bytes",
            layout.transfer_len()
        ))
        .into());
    }
    for _ in 0..in_flight {
        let job = pipeline.next_written()?;
        done_with(vol, shape, &job, &mut digests, &mut read)?;
    }
    digests.flush(vol, shape.toi)?;
    Ok(read)
}

/// A codeword written (they come back in order): its digest row to the catalog, its data
/// into the content CRC32C (made of the symbols' CRC32Cs the encoder computed).
fn done_with(
    vol: &mut Volume,
    shape: &Shape,
    job: &Job,
    digests: &mut DigestBatch,
    read: &mut ReadSummary,
) -> Result<(), StoreError> {
    let layout = &shape.layout;
    let n = layout.encoding_symbols(job.sbn) as usize;
    digests.add(vol, shape.toi, job.sbn, job.digest_row(n))?;
    let data_len = layout.codeword_data_len(job.sbn) as usize;
    read.crc = job.append_data_crc(read.crc, data_len, &shape.crcs);
    Ok(())
}

/// The member a degraded ingest leaves out: the one failed in the catalog or whose
/// directory is gone (its identity file missing), if any. More than one such member is
/// refused: the code rebuilds the loss of one member only.
pub(crate) fn skipped_member(vol: &Volume) -> Result<Option<u32>, StoreError> {
    let states = vol.member_states()?;
    let out: Vec<u32> = (0..vol.params().members)
        .filter(|m| {
            let failed = matches!(
                states.get(*m as usize),
                Some(crate::MemberState::Failed { .. })
            );
            failed || !vol.member_identity_present(*m)
        })
        .collect();
    match out.as_slice() {
        [] => Ok(None),
        [one] => {
            tracing::warn!(
                member = one,
                "member failed or missing: writing the others, the member's segment is left for `isnode volume rebuild`"
            );
            Ok(Some(*one))
        }
        many => Err(StoreError::BadParams(format!(
            "members {many:?} are failed or missing: the code survives the loss of one member \
             only, so nothing is written (rebuild them with `isnode volume rebuild --member N`)"
        ))),
    }
}

/// Gives the `writing` row of `rec` the bitrate and type found at the end.
fn set_description(
    vol: &mut Volume,
    rec: &mut ObjectRecord,
    d: Described,
) -> Result<(), StoreError> {
    crate::validate::check_bitrate(d.bitrate_bps).map_err(StoreError::BadParams)?;
    crate::validate::check_content_type(&d.content_type).map_err(StoreError::BadParams)?;
    rec.bitrate_bps = d.bitrate_bps;
    rec.duration_s = rec.size_bytes as f64 * 8.0 / d.bitrate_bps as f64;
    rec.content_type = d.content_type;
    crate::rows::check_record(rec, vol.params()).map_err(StoreError::BadParams)?;
    vol.catalog_mut()
        .set_description(rec.toi, rec.bitrate_bps, rec.duration_s, &rec.content_type)
}

/// Packet digests of the codewords written, recorded in the catalog a batch at a time
/// (bounded memory whatever the object's length).
#[derive(Default)]
struct DigestBatch {
    rows: Vec<(u32, Vec<u8>)>,
}

impl DigestBatch {
    /// Codewords per catalog transaction (about 1 MiB of digests at 255 symbols).
    const CODEWORDS: usize = 256;

    fn add(
        &mut self,
        vol: &mut Volume,
        toi: u32,
        sbn: u32,
        row: Vec<u8>,
    ) -> Result<(), StoreError> {
        self.rows.push((sbn, row));
        if self.rows.len() >= Self::CODEWORDS {
            self.flush(vol, toi)?;
        }
        Ok(())
    }

    fn flush(&mut self, vol: &mut Volume, toi: u32) -> Result<(), StoreError> {
        if !self.rows.is_empty() {
            vol.catalog_mut().put_digests(toi, &self.rows)?;
            self.rows.clear();
        }
        Ok(())
    }
}

/// The catalog's form of an object's time index.
pub(crate) fn media_index_record(ix: isnode_media::MediaIndex) -> MediaIndexRecord {
    let detail = Some(crate::renditions::media_detail(&ix));
    let container = match ix.container {
        isnode_media::Container::MpegTs => "mpeg-ts",
        isnode_media::Container::Mp4 => "mp4",
        isnode_media::Container::Unknown => "unknown",
    };
    MediaIndexRecord {
        container: container.into(),
        moov_at_front: ix.moov_at_front,
        points: ix
            .points
            .iter()
            .map(|p| (p.time_s, p.offset_bytes))
            .collect(),
        detail,
    }
}

fn read_full(
    src: &mut dyn Read,
    buf: &mut [u8],
    done: u64,
    expected: u64,
) -> Result<(), StoreError> {
    let mut filled = 0;
    while filled < buf.len() {
        match src.read(&mut buf[filled..]) {
            Ok(0) => {
                return Err(StoreError::Truncated {
                    got: done + filled as u64,
                    expected,
                })
            }
            Ok(n) => filled += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(StoreError::Io {
                    context: "reading the input".into(),
                    source: e,
                })
            }
        }
    }
    Ok(())
}
