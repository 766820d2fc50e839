//! Filling an object from an origin while it is served: incremental prefabrication with a
//! durable fill front.
//!
//! A fill records the object at once in state `filling` (with the origin's ETag) and
//! writes its segment files where a complete object's are (`MEMBER/objects/TOI.seg`), so
//! that readers find them. Bytes are pushed in order ([`Fill::push`]); each full codeword
//! is encoded, framed and written exactly as [`crate::ingest()`] writes it (same packets,
//! same places). [`Fill::commit`] makes what was pushed durable: the segment files are
//! synced, then one catalog transaction records the new codewords' block checksums and
//! packet digests and advances the **fill front** (codewords committed). Only codewords
//! before the front are valid; a reader is never sent past it.
//!
//! The block that straddles the front: packets are packed back to back into blocks, so the
//! last block a commit touches on a member is usually partial and is written again, whole,
//! as the fill goes on. Its catalog row holds the number of committed packets `p` and the
//! CRC32C of its first `p × packet_len` bytes only ([`verify_fill_block`]); a rewrite puts
//! the same bytes back in that prefix (the packets are a pure function of the data), so a
//! read racing a rewrite sees a prefix that verifies, and a block read under an older row
//! still verifies against that row. A block read under a newer row than its bytes (a cache
//! of blocks) fails the CRC: its packets are erasures, never wrong bytes. Every packet is
//! also verified on its own (CRC32C and identifiers) by the read path. `docs/format.md`,
//! "Filling objects", has the rules at row and byte level.
//!
//! Crash safety: a `filling` object is kept by recovery with its durable front (unlike a
//! dead ingest's `writing` object); bytes past the front are ignored and overwritten when
//! [`Fill::begin_or_resume`] continues the fill. Dropping a [`Fill`] without
//! [`Fill::finish`] or [`Fill::abandon`] is the same as a crash: the object stays at its
//! durable front for a later resume.

use std::collections::HashMap;

use isnode_fec::Code;
use isnode_wire::digest::DIGEST_LEN;
use isnode_wire::DataPacketId;
use serde::Serialize;

use crate::codeword::Want;
use crate::fill_rows::FillRow;
use crate::io::{AlignedBuf, BlockFile};
use crate::lock::{FileLock, LockWait};
use crate::records::{BlockRecord, ObjectRecord, ObjectState};
use crate::rows::CatalogEntry;
use crate::segment::SegmentWriter;
use crate::{crash, Layout, ObjectReader, ReadOrder, StoreError, Volume, VolumeParams};

/// What to fill: the object as the origin describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FillSpec {
    /// Object name (the key at the origin; FLUTE Content-Location).
    pub name: String,
    /// The object's length at the origin, bytes.
    pub size_bytes: u64,
    /// Nominal bitrate in bits per second (> 0).
    pub bitrate_bps: u64,
    /// MIME type.
    pub content_type: String,
    /// The origin's ETag of the version being filled (at most [`MAX_ETAG_LEN`] bytes; an
    /// empty one never matches, so such a fill never resumes).
    pub origin_etag: String,
}

/// Longest origin ETag accepted, bytes.
pub const MAX_ETAG_LEN: usize = 1024;

/// A `filling` object as the catalog holds it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FillingObject {
    /// The object's record (state [`ObjectState::Filling`]; its `content_crc32c` is the
    /// CRC32C of the data of the committed codewords, `created_unix` when the fill began).
    pub record: ObjectRecord,
    /// The durable fill front: codewords `0..front_codewords` are committed and valid.
    pub front_codewords: u32,
    /// The origin's ETag of the version being filled.
    pub origin_etag: String,
}

impl FillingObject {
    /// Bytes of the object's content in the committed codewords (the content a reader may
    /// be given: bytes `0..front_bytes`).
    pub fn front_bytes(&self, layout: &Layout) -> u64 {
        committed_bytes(layout, self.front_codewords)
    }
}

/// Bytes of content in codewords `0..front` of `layout`.
fn committed_bytes(layout: &Layout, front: u32) -> u64 {
    if front >= layout.codewords() {
        layout.transfer_len()
    } else {
        layout.codeword_offset(front)
    }
}

/// Bytes of a block of a `filling` object that its catalog CRC32C covers: the whole block
/// when it holds [`VolumeParams::packets_per_block`] packets, else its first
/// `packets × packet_len` bytes (the rest is rewritten as the fill advances).
pub fn fill_block_checked_len(params: &VolumeParams, packets: u32) -> usize {
    if packets >= params.packets_per_block() {
        params.block_len as usize
    } else {
        packets as usize * params.packet_len() as usize
    }
}

/// Verifies a block of a `filling` object (`bytes`: the whole block as read) against its
/// catalog row ([`Volume::fill_blocks`]); on failure every packet of the block is an
/// erasure. (A complete object's blocks are verified whole: [`crate::codeword::verify_block`].)
pub fn verify_fill_block(
    params: &VolumeParams,
    row: &BlockRecord,
    bytes: &[u8],
) -> Result<(), String> {
    let len = fill_block_checked_len(params, row.packets);
    let covered = bytes
        .get(..len)
        .ok_or_else(|| format!("block of {} bytes, {len} expected", bytes.len()))?;
    crate::codeword::verify_block(covered, Some(row.crc32c))
}

/// Whether [`Fill::begin_or_resume`] may continue a filling object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Resume {
    /// When its ETag and size match.
    IfSame,
    /// Never: a resume failed, start anew.
    Never,
}

/// Whether a fill can go on after an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Health {
    Ok,
    /// A write or commit failed midway: only dropping or abandoning is left.
    Broken,
}

/// One fill in progress: holds the object's ingest lock (one fill per filling object, in
/// every process), the segment writers, and the codewords pushed since the last commit.
pub struct Fill {
    rec: ObjectRecord,
    origin_etag: String,
    /// The member a degraded fill does not write (failed or missing at its start).
    skipped: Option<u32>,
    layout: Layout,
    lock: FileLock,
    tsi: u32,
    uuid: String,
    /// Durable front (codewords committed).
    front: u32,
    /// Codewords encoded and written (not all durable).
    encoded: u32,
    /// Source bytes of codeword `encoded` received so far, in `source[..filled]`.
    source: Vec<u8>,
    filled: usize,
    repair: Vec<u8>,
    codes: HashMap<u32, Code>,
    writers: Vec<SegmentWriter>,
    /// Digest rows of codewords `front..encoded`.
    digests: Vec<(u32, Vec<u8>)>,
    /// CRC32C of the data of codewords `0..encoded`.
    crc: u32,
    indexer: isnode_media::Indexer,
    health: Health,
}

impl std::fmt::Debug for Fill {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fill")
            .field("name", &self.rec.name)
            .field("toi", &self.rec.toi)
            .field("front", &self.front)
            .field("encoded", &self.encoded)
            .finish()
    }
}

impl Fill {
    /// Starts a fill, or resumes this name's filling object when its ETag and size match
    /// (otherwise drops it and starts anew). The front of a resumed fill is the durable
    /// one; the bytes to push next start at [`Fill::next_byte_offset`].
    ///
    /// [`StoreError::FillBusy`] if another fill (in this or another process) holds the
    /// name's filling object. On a volume with one failed or missing member the fill writes
    /// the others (degraded, as an ingest: that member's segment is recorded missing at
    /// [`Fill::finish`], for `volume rebuild`); two or more: [`StoreError::BadParams`]. A
    /// complete object of the same name is left alone until [`Fill::finish`] replaces it.
    ///
    /// Blocking I/O: a resume reads the committed codewords back once (they give the
    /// content CRC32C and the time index), so its cost grows with the front.
    pub fn begin_or_resume(vol: &mut Volume, spec: &FillSpec) -> Result<Fill, StoreError> {
        match Self::begin(vol, spec, Resume::IfSame)? {
            Begun::Fill(fill) => Ok(*fill),
            Begun::ResumeFailed(e) => {
                tracing::warn!(name = %spec.name, error = %e, "cannot resume the fill: starting anew");
                match Self::begin(vol, spec, Resume::Never)? {
                    Begun::Fill(fill) => Ok(*fill),
                    Begun::ResumeFailed(e) => Err(e),
                }
            }
        }
    }

    fn begin(vol: &mut Volume, spec: &FillSpec, resume: Resume) -> Result<Begun, StoreError> {
        check_spec(spec)?;
        let volume_lock = FileLock::exclusive(&vol.volume_lock_path(), LockWait::Block)?
            .ok_or_else(|| StoreError::Corrupt("volume lock busy".into()))?;
        let skipped = crate::ingest::skipped_member(vol)?;
        if let Some(row) = vol.catalog().fill_by_name(&spec.name)? {
            let toi = row.entry.record().toi;
            let lock = FileLock::exclusive(&vol.ingest_lock_path(toi), LockWait::Try)?
                .ok_or_else(|| StoreError::FillBusy(spec.name.clone()))?;
            if resume == Resume::IfSame && same_version(&row, spec) {
                drop(volume_lock);
                return Ok(match Self::resume(vol, row, lock, skipped) {
                    Ok(fill) => Begun::Fill(Box::new(fill)),
                    Err(e) => Begun::ResumeFailed(e),
                });
            }
            tracing::info!(name = %spec.name, toi, "dropping a filling object of another version");
            vol.catalog_mut().delete_fill(toi)?;
            vol.remove_object_files(toi);
            lock.remove();
        }
        Self::start(vol, spec, volume_lock, skipped).map(|f| Begun::Fill(Box::new(f)))
    }

    /// Records a new filling object and creates its segment files.
    fn start(
        vol: &mut Volume,
        spec: &FillSpec,
        volume_lock: FileLock,
        skipped: Option<u32>,
    ) -> Result<Fill, StoreError> {
        let layout = Layout::new(*vol.params(), spec.size_bytes)?;
        let p = *layout.params();
        let now = now_unix();
        let mut rec = ObjectRecord {
            toi: 0,
            name: spec.name.clone(),
            state: ObjectState::Filling,
            size_bytes: spec.size_bytes,
            bitrate_bps: spec.bitrate_bps,
            duration_s: spec.size_bytes as f64 * 8.0 / spec.bitrate_bps as f64,
            content_type: spec.content_type.clone(),
            symbol_len: p.symbol_len,
            source_symbols: p.source_symbols,
            repair_symbols: p.repair_symbols,
            codewords: layout.codewords(),
            content_crc32c: 0,
            created_unix: now,
            replaces: None,
        };
        crate::rows::check_record(&rec, &p).map_err(StoreError::BadParams)?;
        rec.toi = vol.catalog_mut().begin_fill(&rec, &spec.origin_etag, now)?;
        crash::point("fill-after-begin");
        let lock = FileLock::exclusive(&vol.ingest_lock_path(rec.toi), LockWait::Block)?
            .ok_or_else(|| StoreError::Corrupt("ingest lock busy".into()))?;
        drop(volume_lock);
        let created = (0..p.members)
            .map(|m| {
                let path = vol.segment_path(m, rec.toi);
                match skipped == Some(m) {
                    true => Ok(SegmentWriter::phantom(&path, m, &layout)),
                    false => SegmentWriter::create(&path, m, &layout),
                }
            })
            .collect::<Result<Vec<_>, _>>()
            .and_then(|writers| sync_object_dirs(vol, skipped).map(|()| writers));
        match created {
            Ok(writers) => {
                let mut fill = Self::new(vol, rec, layout, lock, writers, 0);
                fill.origin_etag = spec.origin_etag.clone();
                fill.skipped = skipped;
                Ok(fill)
            }
            Err(e) => {
                let _ = vol.catalog_mut().delete_fill(rec.toi);
                vol.remove_object_files(rec.toi);
                lock.remove();
                Err(e)
            }
        }
    }

    /// Continues a filling object from its durable front: reopens its segment files at
    /// the front (the block straddling it read back and checked against its row), and
    /// reads the committed codewords back (the content CRC32C and the time index go on
    /// from them).
    fn resume(
        vol: &mut Volume,
        row: FillRow,
        lock: FileLock,
        skipped: Option<u32>,
    ) -> Result<Fill, StoreError> {
        let CatalogEntry::Valid(rec) = row.entry else {
            return Err(StoreError::Corrupt(
                "the filling object's row is bad".into(),
            ));
        };
        let layout = vol.layout(&rec)?;
        let front = u32::try_from(row.front_codewords)
            .ok()
            .filter(|f| *f <= layout.codewords())
            .ok_or_else(|| {
                StoreError::Corrupt(format!("fill front {} out of range", row.front_codewords))
            })?;
        let writers = (0..layout.params().members)
            .map(|m| {
                let member = (m, skipped == Some(m));
                resume_writer(vol, &rec, &layout, member, front)
            })
            .collect::<Result<Vec<_>, _>>()?;
        sync_object_dirs(vol, skipped)?;
        let mut fill = Self::new(vol, rec, layout, lock, writers, front);
        fill.origin_etag = row.etag;
        fill.skipped = skipped;
        fill.reread_committed(vol)?;
        tracing::info!(name = %fill.rec.name, toi = fill.rec.toi, front, "resuming a fill");
        Ok(fill)
    }

    fn new(
        vol: &Volume,
        rec: ObjectRecord,
        layout: Layout,
        lock: FileLock,
        writers: Vec<SegmentWriter>,
        front: u32,
    ) -> Fill {
        let p = *layout.params();
        let e = p.symbol_len as usize;
        Fill {
            crc: rec.content_crc32c,
            rec,
            origin_etag: String::new(),
            skipped: None,
            lock,
            tsi: vol.tsi(),
            uuid: vol.uuid().to_string(),
            front,
            encoded: front,
            source: vec![0; p.source_symbols as usize * e],
            filled: 0,
            repair: vec![0; p.repair_symbols as usize * e],
            codes: HashMap::new(),
            writers,
            digests: Vec::new(),
            indexer: isnode_media::Indexer::new(),
            health: Health::Ok,
            layout,
        }
    }

    /// Reads codewords `0..front` back through the read path: feeds the time index and
    /// checks the CRC32C recorded at the last commit.
    fn reread_committed(&mut self, vol: &Volume) -> Result<(), StoreError> {
        let mut reader = ObjectReader::for_record(vol, self.rec.clone(), ReadOrder::Any)?;
        let mut crc = 0u32;
        for sbn in 0..self.front {
            reader.read_codeword(sbn, Want::Source)?;
            let data = reader.source(sbn);
            crc = crc32c::crc32c_append(crc, data);
            self.indexer.feed(data);
        }
        if crc != self.rec.content_crc32c {
            return Err(StoreError::Corrupt(format!(
                "the committed codewords read back with CRC32C {crc:08x}, the catalog says {:08x}",
                self.rec.content_crc32c
            )));
        }
        self.crc = crc;
        Ok(())
    }

    /// The object's TOI.
    pub fn toi(&self) -> u32 {
        self.rec.toi
    }

    /// The object's record (state [`ObjectState::Filling`]; `content_crc32c` as of the
    /// last commit).
    pub fn record(&self) -> &ObjectRecord {
        &self.rec
    }

    /// The object's layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The origin's ETag of the version being filled.
    pub fn origin_etag(&self) -> &str {
        &self.origin_etag
    }

    /// The durable front: codewords committed.
    pub fn front_codewords(&self) -> u32 {
        self.front
    }

    /// Codewords pushed whole (encoded and written), committed or not: the front the next
    /// [`Fill::commit`] makes durable.
    pub fn pushed_codewords(&self) -> u32 {
        self.encoded
    }

    /// Bytes of content in the committed codewords (readers may be given `0..front_bytes`).
    pub fn front_bytes(&self) -> u64 {
        committed_bytes(&self.layout, self.front)
    }

    /// Where the bytes [`Fill::push`] expects next start (the object's offset): after the
    /// last byte pushed; after a resume, the start of the first uncommitted codeword.
    pub fn next_byte_offset(&self) -> u64 {
        committed_bytes(&self.layout, self.encoded) + self.filled as u64
    }

    /// The random-access points of an MPEG-TS object found in the bytes pushed so far
    /// (`None` for another container): what a playlist of the filled part is cut at.
    pub fn ts_points(&self) -> Option<&[isnode_media::AccessPoint]> {
        self.indexer.ts_points()
    }

    /// Whether every byte of the object was pushed (then [`Fill::finish`]).
    pub fn all_pushed(&self) -> bool {
        self.encoded == self.layout.codewords()
    }

    /// The object's bytes from [`Fill::next_byte_offset`] on (any length); each full
    /// codeword is encoded and written (not yet durable: [`Fill::commit`]). More bytes than
    /// the object has left is [`StoreError::BadParams`] (nothing is taken). After a write
    /// error the fill is broken: every later call fails; drop or abandon it.
    pub fn push(&mut self, vol: &mut Volume, bytes: &[u8]) -> Result<(), StoreError> {
        self.usable(vol)?;
        let left = self.layout.transfer_len() - self.next_byte_offset();
        if bytes.len() as u64 > left {
            return Err(StoreError::BadParams(format!(
                "{} bytes pushed at offset {}, but the object has {left} left",
                bytes.len(),
                self.next_byte_offset()
            )));
        }
        let mut rest = bytes;
        while !rest.is_empty() {
            let need = self.layout.codeword_data_len(self.encoded) as usize - self.filled;
            let take = need.min(rest.len());
            self.source[self.filled..self.filled + take].copy_from_slice(&rest[..take]);
            self.filled += take;
            rest = &rest[take..];
            if take == need {
                if let Err(e) = self.encode_codeword() {
                    self.health = Health::Broken;
                    return Err(e);
                }
            }
        }
        crash::point("fill-push");
        Ok(())
    }

    /// Encodes codeword `encoded` (its data in `source[..filled]`) and writes its packets.
    fn encode_codeword(&mut self) -> Result<(), StoreError> {
        let sbn = self.encoded;
        let e = self.layout.params().symbol_len as usize;
        let k = self.layout.source_symbols(sbn) as usize;
        let m = self.layout.params().repair_symbols as usize;
        let data = &mut self.source[..k * e];
        data[self.filled..].fill(0);
        self.crc = crc32c::crc32c_append(self.crc, &data[..self.filled]);
        self.indexer.feed(&data[..self.filled]);
        let code = match self.codes.entry(k as u32) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => v.insert(Code::new(k, k + m)?),
        };
        let src_refs: Vec<&[u8]> = data.chunks_exact(e).collect();
        let mut rep_refs: Vec<&mut [u8]> = self.repair.chunks_exact_mut(e).collect();
        code.encode(&src_refs, &mut rep_refs)?;
        let mut row = vec![0u8; (k + m) * DIGEST_LEN];
        for (member, writer) in self.writers.iter_mut().enumerate() {
            for esi in self.layout.member_run(sbn, member as u32).esis {
                let id = DataPacketId {
                    tsi: self.tsi,
                    toi: self.rec.toi,
                    sbn,
                    esi: esi as u8,
                };
                let esi = esi as usize;
                let symbol = if esi < k {
                    &self.source[esi * e..(esi + 1) * e]
                } else {
                    &self.repair[(esi - k) * e..(esi - k + 1) * e]
                };
                let digest = writer.push(&id, symbol)?;
                row[esi * DIGEST_LEN..(esi + 1) * DIGEST_LEN].copy_from_slice(&digest);
            }
        }
        self.digests.push((sbn, row));
        self.encoded += 1;
        self.filled = 0;
        Ok(())
    }

    /// Makes everything pushed so far durable: syncs the segment files (the block
    /// straddling the front written whole), then one catalog transaction with the block
    /// checksums and packet digests of the new codewords and the new front. Returns the new
    /// front. Bytes of a codeword not yet complete stay in memory (not durable).
    ///
    /// Cost: each member's partial block is written whole (up to members × block_len bytes)
    /// and every segment and the catalog are synced; commit every few MiB or fraction of a
    /// second rather than after every small push.
    pub fn commit(&mut self, vol: &mut Volume) -> Result<u32, StoreError> {
        self.usable(vol)?;
        if self.encoded == self.front {
            return Ok(self.front);
        }
        match self.commit_inner(vol) {
            Ok(()) => Ok(self.front),
            Err(e) => {
                self.health = Health::Broken;
                Err(e)
            }
        }
    }

    fn commit_inner(&mut self, vol: &mut Volume) -> Result<(), StoreError> {
        let mut blocks = Vec::new();
        for w in &mut self.writers {
            blocks.extend(w.checkpoint()?);
            crash::point("fill-commit-member");
        }
        crash::point("fill-before-commit");
        vol.catalog_mut().commit_fill(
            self.rec.toi,
            self.encoded,
            self.crc,
            &blocks,
            &self.digests,
        )?;
        self.digests.clear();
        self.front = self.encoded;
        self.rec.content_crc32c = self.crc;
        crash::point("fill-after-commit");
        Ok(())
    }

    /// After the last byte: commits and makes the object an ordinary complete object (its
    /// last blocks' rows cover the whole block, its time index is recorded), replacing a
    /// complete object of the same name filled from the origin; [`StoreError::NameExists`]
    /// if one of that name was ingested or uploaded here meanwhile (it is kept; the filling
    /// object stays, for [`Volume::delete_filling`]). Before the last byte: [`StoreError::Truncated`]
    /// (the filling object stays at its durable front).
    pub fn finish(mut self, vol: &mut Volume) -> Result<ObjectRecord, StoreError> {
        self.usable(vol)?;
        if !self.all_pushed() {
            return Err(StoreError::Truncated {
                got: self.next_byte_offset(),
                expected: self.layout.transfer_len(),
            });
        }
        let mut blocks = Vec::new();
        for w in std::mem::take(&mut self.writers) {
            blocks.extend(w.finish()?);
        }
        crash::point("fill-before-finish");
        let index = crate::ingest::media_index_record(self.indexer.finish());
        let old = vol.catalog_mut().finish_fill(
            self.rec.toi,
            self.crc,
            &blocks,
            &self.digests,
            Some(&index),
            (self.skipped, now_unix()),
        )?;
        crash::point("fill-after-finish");
        if let Some(old_toi) = old {
            vol.remove_object_files(old_toi);
        }
        self.lock.remove();
        let mut rec = self.rec;
        rec.state = ObjectState::Complete;
        rec.content_crc32c = self.crc;
        Ok(rec)
    }

    /// Removes the filling object and its files.
    pub fn abandon(self, vol: &mut Volume) -> Result<(), StoreError> {
        vol.catalog_mut().delete_fill(self.rec.toi)?;
        vol.remove_object_files(self.rec.toi);
        self.lock.remove();
        Ok(())
    }

    fn usable(&self, vol: &Volume) -> Result<(), StoreError> {
        if vol.uuid() != self.uuid {
            return Err(StoreError::BadParams(
                "the fill belongs to another volume".into(),
            ));
        }
        match self.health {
            Health::Ok => Ok(()),
            Health::Broken => Err(StoreError::Corrupt(format!(
                "the fill of {:?} failed earlier: abandon it or begin it again",
                self.rec.name
            ))),
        }
    }
}

/// What a start found: a fill, or a filling object that could not be resumed (then the
/// next try starts anew).
enum Begun {
    Fill(Box<Fill>),
    ResumeFailed(StoreError),
}

fn check_spec(spec: &FillSpec) -> Result<(), StoreError> {
    crate::validate::validate_name(&spec.name)?;
    crate::validate::check_bitrate(spec.bitrate_bps).map_err(StoreError::BadParams)?;
    crate::validate::check_content_type(&spec.content_type).map_err(StoreError::BadParams)?;
    if spec.origin_etag.len() > MAX_ETAG_LEN {
        return Err(StoreError::BadParams(format!(
            "an origin ETag of {} bytes (at most {MAX_ETAG_LEN})",
            spec.origin_etag.len()
        )));
    }
    Ok(())
}

/// Whether a filling object is the version `spec` describes (same ETag and size).
fn same_version(row: &FillRow, spec: &FillSpec) -> bool {
    matches!(&row.entry, CatalogEntry::Valid(rec) if rec.size_bytes == spec.size_bytes)
        && !row.etag.is_empty()
        && row.etag == spec.origin_etag
}

/// A writer of `member`'s segment of `rec` going on at codeword `front`; `(member, true)`:
/// a member the fill does not write (its straddling block is framed anew from the code).
fn resume_writer(
    vol: &Volume,
    rec: &ObjectRecord,
    layout: &Layout,
    (member, phantom): (u32, bool),
    front: u32,
) -> Result<SegmentWriter, StoreError> {
    let next_packet = if front < layout.codewords() {
        layout.member_run(front, member).first_packet
    } else {
        layout.member_packets(member)
    };
    let params = layout.params();
    let per = u64::from(params.packets_per_block());
    let path = vol.segment_path(member, rec.toi);
    let slot = (next_packet % per) as u32;
    let block = next_packet / per;
    let partial = match (slot, phantom) {
        (0, _) => None,
        (_, true) => Some(reframe_block(
            vol,
            rec,
            layout,
            member,
            (front, next_packet),
        )?),
        (_, false) => Some(read_block(&path, layout, block)?),
    };
    if let Some(bytes) = &partial {
        let row = vol
            .catalog()
            .block_row(rec.toi, member, block)?
            .ok_or_else(|| StoreError::Corrupt(format!("member {member} block {block}: no row")))?;
        if row.packets != slot {
            return Err(StoreError::Corrupt(format!(
                "member {member} block {block}: {} packets recorded, the front needs {slot}",
                row.packets
            )));
        }
        verify_fill_block(params, &row, bytes)
            .map_err(|e| StoreError::Corrupt(format!("member {member} block {block}: {e}")))?;
    }
    match phantom {
        true => {
            SegmentWriter::resume_phantom(&path, member, layout, next_packet, partial.as_deref())
        }
        false => SegmentWriter::resume(&path, member, layout, next_packet, partial.as_deref()),
    }
}

/// Block `block` of the segment file at `path`, as stored.
fn read_block(path: &std::path::Path, layout: &Layout, block: u64) -> Result<Vec<u8>, StoreError> {
    let mut buf = AlignedBuf::new(layout.params().block_len as usize);
    BlockFile::open_read(path)
        .and_then(|f| f.read_block(&mut buf, layout.block_offset(block)))
        .map_err(StoreError::io(format!(
            "reading block {block} of {}",
            path.display()
        )))?;
    Ok(buf.as_slice().to_vec())
}

/// The block of `member`'s segment of `rec` that holds packet `next_packet`, with its
/// packets before `next_packet` framed anew from codewords `..front` read back through the
/// code (for a member a degraded fill does not write), the rest zero.
pub(crate) fn reframe_block(
    vol: &Volume,
    rec: &ObjectRecord,
    layout: &Layout,
    member: u32,
    (front, next_packet): (u32, u64),
) -> Result<Vec<u8>, StoreError> {
    let params = layout.params();
    let packet_len = params.packet_len() as usize;
    let first = next_packet - next_packet % u64::from(params.packets_per_block());
    let mut buf = vec![0u8; params.block_len as usize];
    let mut reader = ObjectReader::for_record(vol, rec.clone(), ReadOrder::Any)?;
    for sbn in (0..front).rev() {
        let run = layout.member_run(sbn, member);
        if run.first_packet + run.esis.len() as u64 <= first {
            break;
        }
        reader.read_codeword(sbn, Want::All)?;
        for (q, esi) in (run.first_packet..).zip(run.esis) {
            if q < first || q >= next_packet {
                continue;
            }
            let at = (q - first) as usize * packet_len;
            let id = DataPacketId {
                tsi: vol.tsi(),
                toi: rec.toi,
                sbn,
                esi: esi as u8,
            };
            let packet = buf
                .get_mut(at..at + packet_len)
                .ok_or_else(|| StoreError::Corrupt(format!("packet {q} past its block")))?;
            isnode_wire::build_data_packet(packet, &id, reader.symbol(esi))?;
        }
    }
    Ok(buf)
}

/// Syncs the `objects` directory of every member but `skipped` (new segment files' entries).
fn sync_object_dirs(vol: &Volume, skipped: Option<u32>) -> Result<(), StoreError> {
    let written = (0u32..)
        .zip(vol.members())
        .filter(|(m, _)| skipped != Some(*m));
    for (_, member) in written {
        let d = member.join("objects");
        crate::io::sync_dir(&d).map_err(StoreError::io(format!("syncing {}", d.display())))?;
    }
    Ok(())
}

pub(crate) fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

impl Volume {
    /// The filling object called `name`, `None` if there is none;
    /// [`StoreError::BadObject`] if its rows are impossible.
    pub fn filling(&self, name: &str) -> Result<Option<FillingObject>, StoreError> {
        self.catalog()
            .fill_by_name(name)?
            .map(filling_object)
            .transpose()
    }

    /// Deletes the filling object called `name` that no fill writes now (one that failed,
    /// or one not resumed): its catalog rows, then its segment files. Its TOI;
    /// [`StoreError::NotFound`] without one, [`StoreError::FillBusy`] while a fill holds it.
    pub fn delete_filling(&mut self, name: &str) -> Result<u32, StoreError> {
        let toi = self
            .filling(name)?
            .ok_or_else(|| StoreError::NotFound(name.to_string()))?
            .record
            .toi;
        let lock = FileLock::exclusive(&self.ingest_lock_path(toi), LockWait::Try)?
            .ok_or_else(|| StoreError::FillBusy(name.to_string()))?;
        self.catalog_mut().delete_fill(toi)?;
        self.remove_object_files(toi);
        lock.remove();
        Ok(toi)
    }

    /// Every filling object, by TOI (those whose rows are impossible left out).
    pub fn filling_objects(&self) -> Result<Vec<FillingObject>, StoreError> {
        Ok(self
            .catalog()
            .fills()?
            .into_iter()
            .filter_map(|row| filling_object(row).ok())
            .collect())
    }

    /// The catalog rows of every block of `fill` that holds committed packets, by member
    /// and block index (verify a block read with [`verify_fill_block`]). A row may count
    /// more packets than `fill`'s front needs (a commit since it was read): it is the
    /// newer row, and the block on disk holds at least those packets.
    /// [`StoreError::BadObject`] if a row is missing or impossible.
    pub fn fill_blocks(&self, fill: &FillingObject) -> Result<Vec<Vec<BlockRecord>>, StoreError> {
        let rec = &fill.record;
        let layout = self.layout(rec)?;
        let params = *layout.params();
        let per = u64::from(params.packets_per_block());
        let limit = crate::rows::expected_block_rows(&layout).saturating_add(1);
        let rows = self.catalog().all_block_rows(rec.toi, limit)?;
        let mut out: Vec<Vec<BlockRecord>> = vec![Vec::new(); params.members as usize];
        let bad = |problem: String| StoreError::BadObject {
            name: rec.name.clone(),
            problem,
        };
        let committed: Vec<u64> = (0..params.members)
            .map(|m| match fill.front_codewords < layout.codewords() {
                true => layout.member_run(fill.front_codewords, m).first_packet,
                false => layout.member_packets(m),
            })
            .collect();
        for row in &rows {
            let b = crate::rows::block_record(row).map_err(bad)?;
            let Some(&packets) = committed.get(b.member as usize) else {
                return Err(bad(format!("a block row names member {}", b.member)));
            };
            let need = packets.saturating_sub(b.block * per).min(per) as u32;
            if need == 0 {
                continue;
            }
            if b.packets < need || b.packets > layout.packets_in_block(b.member, b.block) {
                return Err(bad(format!(
                    "member {} block {}: {} packets recorded, {need} committed",
                    b.member, b.block, b.packets
                )));
            }
            out[b.member as usize].push(b);
        }
        for (m, blocks) in out.iter().enumerate() {
            let expected = committed[m].div_ceil(per);
            let in_order = blocks.iter().zip(0u64..).all(|(b, i)| b.block == i);
            if blocks.len() as u64 != expected || !in_order {
                return Err(bad(format!(
                    "member {m}: {} block rows for {expected} blocks of committed packets",
                    blocks.len()
                )));
            }
        }
        Ok(out)
    }
}

/// The filling object of `row`, checked.
fn filling_object(row: FillRow) -> Result<FillingObject, StoreError> {
    let rec = match row.entry {
        CatalogEntry::Valid(rec) => rec,
        CatalogEntry::Bad(bad) => {
            return Err(StoreError::BadObject {
                name: bad.record.name,
                problem: bad.problem,
            })
        }
    };
    let front = u32::try_from(row.front_codewords)
        .ok()
        .filter(|f| *f <= rec.codewords)
        .ok_or_else(|| StoreError::BadObject {
            name: rec.name.clone(),
            problem: format!(
                "fill front {} is not in 0..={}",
                row.front_codewords, rec.codewords
            ),
        })?;
    Ok(FillingObject {
        record: rec,
        front_codewords: front,
        origin_etag: row.etag,
    })
}
