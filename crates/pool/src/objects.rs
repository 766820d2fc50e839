//! The served objects: catalog records with everything a session needs precomputed
//! (layout, block checksums, segment paths), and each session's FDT instance, built when
//! the session starts so that its `Expires` lies after the session's end however long
//! the server has been up.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use isnode_store::io::BlockFile;
use isnode_store::{
    BadObject, CatalogEntry, Layout, ObjectRecord, StoreError, Volume, VolumeParams,
};
use isnode_wire::fdt::{build_fdt_packets, FdtFile, FdtInstance, FecOti};

use crate::front::FillFront;
use isnode_serve_core::pacer::send_rate_bps;

/// Seconds between the NTP epoch (1900) and the Unix epoch (1970).
const NTP_UNIX_OFFSET: u64 = 2_208_988_800;
/// An FDT stays valid this long after the end of the session's playing time (a day).
const FDT_VALIDITY_MARGIN_S: u64 = 86_400;

/// One object as the server sends it.
#[derive(Debug)]
pub struct ObjectInfo {
    /// The catalog record.
    pub rec: ObjectRecord,
    /// Where its packets are.
    pub layout: Layout,
    /// FLUTE TSI of the volume.
    pub tsi: u32,
    /// Segment file of each member.
    pub seg_paths: Vec<PathBuf>,
    /// Segment file of each member, opened (O_DIRECT where allowed) once when the object
    /// is prepared and kept while it is served: block reads never open a file, so a
    /// control plane that has used up the descriptors cannot fail them. `Err`: why the
    /// file could not be opened (its blocks are unreadable, rebuilt from the others).
    /// Opened again when the member returns ([`ObjectInfo::reopen`]): a rebuild writes a
    /// new file in its place.
    pub seg_files: Vec<RwLock<Result<Arc<BlockFile>, String>>>,
    /// CRC32C of every block of every member, from the catalog.
    pub block_crcs: Vec<Vec<Option<u32>>>,
    /// FEC Object Transmission Information of the object (for its FDT).
    pub fec_oti: FecOti,
    /// UDP payload rate of a session, bits per second.
    pub send_rate_bps: u64,
    /// The time index made at ingest (`None` for an object ingested before indexes).
    pub media: Option<isnode_store::MediaIndexRecord>,
    /// Whether the catalog has its packets' digests (not for objects ingested before).
    pub has_digests: bool,
    /// The fill front of an object still filling from the origin (`None`: complete):
    /// nothing at or past it is read (the fill from the origin).
    pub fill: Option<Arc<FillFront>>,
    /// The origin's ETag of the version this copy holds (filled from the origin; `None`:
    /// ingested locally): the identity a session answer carries
    /// (`SessionInfo::origin_etag`).
    pub origin_etag: Option<String>,
}

impl ObjectInfo {
    /// Builds the serving view of a catalog record.
    pub fn new(vol: &Volume, rec: ObjectRecord) -> Result<ObjectInfo, StoreError> {
        let layout = vol.layout(&rec)?;
        let block_crcs = vol
            .blocks(&rec, &layout)?
            .into_iter()
            .map(|blocks| blocks.into_iter().map(|b| Some(b.crc32c)).collect())
            .collect();
        let parts = Parts {
            fill: None,
            origin_etag: vol.origin_etag(&rec.name)?.filter(|e| !e.is_empty()),
            media: vol.media_index(&rec)?,
            has_digests: vol.catalog().has_digests(rec.toi)?,
            block_crcs,
        };
        ObjectInfo::assemble(vol, rec, layout, parts)
    }

    /// The serving view of an object still filling (`rec`, the catalog's record of it):
    /// its blocks are read without catalog checksums (they are being written; each packet
    /// carries its own checksum and digest), never at or past `front`.
    pub fn filling(
        vol: &Volume,
        rec: ObjectRecord,
        front: Arc<FillFront>,
    ) -> Result<ObjectInfo, StoreError> {
        let layout = vol.layout(&rec)?;
        let block_crcs = (0..layout.params().members)
            .map(|m| vec![None; usize::try_from(layout.member_blocks(m)).unwrap_or(0)])
            .collect();
        let origin_etag = vol
            .filling(&rec.name)?
            .filter(|f| f.record.toi == rec.toi && !f.origin_etag.is_empty())
            .map(|f| f.origin_etag);
        let parts = Parts {
            fill: Some(front),
            origin_etag,
            media: None,
            has_digests: true,
            block_crcs,
        };
        ObjectInfo::assemble(vol, rec, layout, parts)
    }

    /// The serving view from what a complete and a filling object share: the segment
    /// files of every member, the FEC parameters and the sending rate.
    fn assemble(
        vol: &Volume,
        rec: ObjectRecord,
        layout: Layout,
        parts: Parts,
    ) -> Result<ObjectInfo, StoreError> {
        let seg_paths: Vec<PathBuf> = (0..layout.params().members)
            .map(|m| vol.segment_path(m, rec.toi))
            .collect();
        let seg_files = seg_paths
            .iter()
            .map(|p| RwLock::new(open_segment(p)))
            .collect();
        let fec_oti = FecOti::rs28(
            rec.symbol_len,
            rec.source_symbols,
            rec.source_symbols + rec.repair_symbols,
        )?;
        Ok(ObjectInfo {
            fill: parts.fill,
            origin_etag: parts.origin_etag,
            media: parts.media,
            has_digests: parts.has_digests,
            fec_oti,
            send_rate_bps: send_rate_bps(&layout, rec.bitrate_bps),
            tsi: vol.tsi(),
            seg_paths,
            seg_files,
            block_crcs: parts.block_crcs,
            layout,
            rec,
        })
    }

    /// Whether codeword `sbn` may be read (always, unless the object is still filling and
    /// `sbn` is at or past its front).
    #[inline]
    pub fn readable(&self, sbn: u32) -> bool {
        self.fill.as_ref().is_none_or(|f| f.has(sbn))
    }

    /// The largest burst of the object's packets one send carries.
    pub fn max_burst(&self) -> u32 {
        let packet_len = self.layout.params().packet_len() as usize;
        (isnode_sys::net::MAX_SEND_BYTES / packet_len).clamp(1, isnode_sys::net::MAX_GSO_SEGMENTS)
            as u32
    }

    /// The JSON description (`docs/protocol.md`, "Objects").
    pub fn json(&self) -> isnode_proto::ObjectInfo {
        isnode_proto::ObjectInfo {
            name: self.rec.name.clone(),
            size_bytes: self.rec.size_bytes,
            bitrate_bps: self.rec.bitrate_bps,
            duration_s: self.rec.duration_s,
            content_type: self.rec.content_type.clone(),
            symbol_size: self.rec.symbol_len,
            source_symbols: self.rec.source_symbols,
            repair_symbols: self.rec.repair_symbols,
            codewords: self.rec.codewords,
            tsi: self.tsi,
            toi: self.rec.toi,
            moov_at_front: self.media.as_ref().and_then(|m| m.moov_at_front),
            packet_digests: self
                .has_digests
                .then(|| isnode_wire::digest::DIGEST_ALGORITHM.to_string()),
            status: match &self.fill {
                Some(_) => isnode_proto::ObjectStatus::Filling,
                None => isnode_proto::ObjectStatus::Ok,
            },
            problem: None,
            front_codewords: self.fill.as_ref().map(|f| f.readable()),
        }
    }

    /// The FDT instance describing the object to a session starting at `now_unix_s`:
    /// valid for the playing time plus a day from then.
    pub fn fdt_instance(&self, now_unix_s: u64) -> FdtInstance {
        let rec = &self.rec;
        let playing_s = rec.duration_s.max(0.0).ceil().min(u32::MAX as f64) as u64;
        FdtInstance {
            instance_id: rec.toi & isnode_wire::fdt::MAX_FDT_INSTANCE_ID,
            expires: now_unix_s
                .saturating_add(NTP_UNIX_OFFSET)
                .saturating_add(playing_s)
                .saturating_add(FDT_VALIDITY_MARGIN_S),
            files: vec![FdtFile {
                toi: rec.toi,
                content_location: rec.name.clone(),
                content_length: rec.size_bytes,
                transfer_length: rec.size_bytes,
                content_type: Some(rec.content_type.clone()).filter(|s| !s.is_empty()),
                content_encoding: None,
                fec_oti: Some(self.fec_oti),
            }],
        }
    }

    /// Nanoseconds of playing time of one full codeword.
    pub fn codeword_ns(&self) -> u64 {
        let bits = u128::from(self.rec.source_symbols) * u128::from(self.rec.symbol_len) * 8;
        let ns = bits * 1_000_000_000 / u128::from(self.rec.bitrate_bps.max(1));
        u64::try_from(ns).unwrap_or(u64::MAX)
    }
}

/// One entry of the object listing.
#[derive(Debug)]
pub enum Listed {
    /// A valid object, prepared for serving.
    Ok(Arc<ObjectInfo>),
    /// An object whose catalog rows are impossible: listed, never served.
    Bad(BadObject),
}

impl Listed {
    /// The JSON description (`docs/protocol.md`, "Objects"), with its status.
    pub fn json(&self, tsi: u32) -> isnode_proto::ObjectInfo {
        match self {
            Listed::Ok(o) => o.json(),
            Listed::Bad(bad) => {
                let mut info = record_json(&bad.record, tsi, isnode_proto::ObjectStatus::Bad);
                info.problem = Some(bad.problem.clone());
                info
            }
        }
    }
}

/// The JSON description of an object being filled (`status` `filling`): its record and
/// its durable fill front (`GET /v1/objects`, the status page).
pub fn filling_json(f: &isnode_store::FillingObject, tsi: u32) -> isnode_proto::ObjectInfo {
    let mut info = record_json(&f.record, tsi, isnode_proto::ObjectStatus::Filling);
    info.packet_digests = Some(isnode_wire::digest::DIGEST_ALGORITHM.to_string());
    info.front_codewords = Some(f.front_codewords);
    info
}

/// What the catalog row `r` says of an object that is not served as it stands (bad, or
/// filling), with `status`; no problem, digests or front named yet.
fn record_json(
    r: &isnode_store::ObjectRecord,
    tsi: u32,
    status: isnode_proto::ObjectStatus,
) -> isnode_proto::ObjectInfo {
    isnode_proto::ObjectInfo {
        name: r.name.clone(),
        size_bytes: r.size_bytes,
        bitrate_bps: r.bitrate_bps,
        duration_s: r.duration_s,
        content_type: r.content_type.clone(),
        symbol_size: r.symbol_len,
        source_symbols: r.source_symbols,
        repair_symbols: r.repair_symbols,
        codewords: r.codewords,
        tsi,
        toi: r.toi,
        moov_at_front: None,
        packet_digests: None,
        status,
        problem: None,
        front_codewords: None,
    }
}

impl ObjectInfo {
    /// Opens member `member`'s segment file again (a rebuild replaced it, or the member
    /// came back): the next block reads use the new file.
    pub fn reopen(&self, member: u32) {
        let (Some(path), Some(slot)) = (
            self.seg_paths.get(member as usize),
            self.seg_files.get(member as usize),
        ) else {
            return;
        };
        let file = open_segment(path);
        *slot.write().unwrap_or_else(|e| e.into_inner()) = file;
    }
}

/// Opens a segment file for block reads, kept as long as its object is served.
/// What a complete and a filling object's serving views differ in.
struct Parts {
    fill: Option<Arc<FillFront>>,
    origin_etag: Option<String>,
    media: Option<isnode_store::MediaIndexRecord>,
    has_digests: bool,
    block_crcs: Vec<Vec<Option<u32>>>,
}

fn open_segment(path: &Path) -> Result<Arc<BlockFile>, String> {
    BlockFile::open_read(path)
        .map(Arc::new)
        .map_err(|e| format!("opening: {e}"))
}

/// Seconds since the Unix epoch now (0 if the clock is before 1970).
pub fn system_clock_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The wall clock FDT `Expires` is computed from: seconds since the Unix epoch.
pub type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// The FDT instance of one session.
#[derive(Clone, Debug)]
pub struct SessionFdt {
    /// The FDT instance (XML).
    pub xml: String,
    /// Its ALC packets (TOI 0).
    pub packets: Vec<Vec<u8>>,
}

/// The objects of the volume, looked up in the catalog on demand (so objects ingested
/// or replaced while the server runs are served as they are now), kept once prepared
/// while the catalog still has them.
///
/// Every method but [`Objects::params`] and [`Objects::session_fdt`] reads the catalog
/// (SQLite) and may block: call them off the async runtime.
pub struct Objects {
    vol: Mutex<Volume>,
    root: PathBuf,
    prepared: Mutex<HashMap<u32, Arc<ObjectInfo>>>,
    params: VolumeParams,
    tsi: u32,
    clock: Clock,
    lookups_active: AtomicU64,
}

impl Objects {
    /// Wraps an open volume; FDTs expire relative to the system clock.
    pub fn new(vol: Volume) -> Objects {
        Objects::with_clock(vol, Arc::new(system_clock_s))
    }

    /// Wraps an open volume; FDTs expire relative to `clock`.
    pub fn with_clock(vol: Volume, clock: Clock) -> Objects {
        Objects {
            params: *vol.params(),
            tsi: vol.tsi(),
            root: vol.root().to_path_buf(),
            vol: Mutex::new(vol),
            prepared: Mutex::new(HashMap::new()),
            clock,
            lookups_active: AtomicU64::new(0),
        }
    }

    /// The volume's parameters.
    pub fn params(&self) -> &VolumeParams {
        &self.params
    }

    /// The volume's FLUTE TSI.
    pub fn tsi(&self) -> u32 {
        self.tsi
    }

    /// Catalog lookups in progress (waiting for the volume or reading the catalog).
    pub fn lookups_active(&self) -> u64 {
        self.lookups_active.load(Ordering::Relaxed)
    }

    /// Objects prepared and kept.
    pub fn prepared_count(&self) -> usize {
        self.lock_prepared().len()
    }

    fn lock_prepared(&self) -> MutexGuard<'_, HashMap<u32, Arc<ObjectInfo>>> {
        self.prepared.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Opens member `member`'s segment files again in every object served (it came back:
    /// rebuilt, or probed good): the files held were the failed ones, or the ones a rebuild
    /// replaced.
    pub fn reopen_member(&self, member: u32) {
        let served: Vec<Arc<ObjectInfo>> = self.lock_prepared().values().cloned().collect();
        for info in served {
            info.reopen(member);
        }
    }

    /// The volume's directory (an upload opens the volume there for itself).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Deletes the complete object `name` from the volume (rows, digests, segment files)
    /// and forgets it; its TOI. Blocks on the catalog.
    pub fn delete(&self, name: &str) -> Result<u32, StoreError> {
        self.lookups_active.fetch_add(1, Ordering::Relaxed);
        let r = self
            .vol
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .delete(name);
        self.lookups_active.fetch_sub(1, Ordering::Relaxed);
        let toi = r?;
        self.lock_prepared().retain(|t, _| *t != toi);
        Ok(toi)
    }

    /// Runs `f` on the volume, counted in [`Objects::lookups_active`].
    pub fn with_volume<T>(&self, f: impl FnOnce(&Volume) -> T) -> T {
        self.lookups_active.fetch_add(1, Ordering::Relaxed);
        let vol = self.vol.lock().unwrap_or_else(|e| e.into_inner());
        let r = f(&vol);
        drop(vol);
        self.lookups_active.fetch_sub(1, Ordering::Relaxed);
        r
    }

    /// Runs `f` on the volume for a write (a use, a pin), counted in
    /// [`Objects::lookups_active`].
    pub fn with_volume_mut<T>(&self, f: impl FnOnce(&mut Volume) -> T) -> T {
        self.lookups_active.fetch_add(1, Ordering::Relaxed);
        let mut vol = self.vol.lock().unwrap_or_else(|e| e.into_inner());
        let r = f(&mut vol);
        drop(vol);
        self.lookups_active.fetch_sub(1, Ordering::Relaxed);
        r
    }

    fn prepare(&self, vol: &Volume, rec: ObjectRecord) -> Result<Arc<ObjectInfo>, StoreError> {
        if let Some(o) = self.lock_prepared().get(&rec.toi) {
            return Ok(o.clone());
        }
        let o = Arc::new(ObjectInfo::new(vol, rec)?);
        self.lock_prepared().insert(o.rec.toi, o.clone());
        Ok(o)
    }

    /// The complete object called `name`. Blocks on the catalog. A prepared object of
    /// that name the catalog no longer has (replaced: another TOI; or deleted) is dropped.
    pub fn get(&self, name: &str) -> Result<Arc<ObjectInfo>, StoreError> {
        self.with_volume(|vol| match vol.object(name) {
            Ok(rec) => {
                let toi = rec.toi;
                self.lock_prepared()
                    .retain(|t, o| *t == toi || o.rec.name != name);
                self.prepare(vol, rec)
            }
            Err(e) => {
                if matches!(e, StoreError::NotFound(_)) {
                    self.lock_prepared().retain(|_, o| o.rec.name != name);
                }
                Err(e)
            }
        })
    }

    /// Every complete object, by TOI, bad ones with their problem. Blocks on the catalog.
    /// Prepared objects the catalog no longer has are dropped. An object whose rows are
    /// impossible (row or block rows) is listed bad and does not affect the others.
    pub fn list(&self) -> Result<Vec<Listed>, StoreError> {
        self.with_volume(|vol| {
            let entries = vol.entries()?;
            let live: HashSet<u32> = entries
                .iter()
                .filter_map(|e| match e {
                    CatalogEntry::Valid(r) => Some(r.toi),
                    CatalogEntry::Bad(_) => None,
                })
                .collect();
            self.lock_prepared().retain(|t, _| live.contains(t));
            entries
                .into_iter()
                .map(|e| match e {
                    CatalogEntry::Valid(rec) => match self.prepare(vol, rec.clone()) {
                        Ok(o) => Ok(Listed::Ok(o)),
                        Err(StoreError::BadObject { problem, .. }) => Ok(Listed::Bad(BadObject {
                            record: rec,
                            problem,
                        })),
                        Err(e) => Err(e),
                    },
                    CatalogEntry::Bad(bad) => Ok(Listed::Bad(bad)),
                })
                .collect()
        })
    }

    /// Every object being filled from the origin, with its durable front. Blocks on the
    /// catalog.
    pub fn filling(&self) -> Result<Vec<isnode_store::FillingObject>, StoreError> {
        self.with_volume(|vol| vol.filling_objects())
    }

    /// The packet digests of codewords `from..from + count` of `obj` (catalog rows, SBN
    /// order). Blocks on the catalog.
    pub fn digests(
        &self,
        obj: &ObjectInfo,
        from: u32,
        count: u32,
    ) -> Result<Vec<(u32, Vec<u8>)>, StoreError> {
        self.with_volume(|vol| vol.catalog().digests(obj.rec.toi, from, count))
    }

    /// The FDT instance of a new session of `obj`, valid from now (the clock) for the
    /// object's playing time plus a day.
    pub fn session_fdt(&self, obj: &ObjectInfo) -> Result<SessionFdt, StoreError> {
        let fdt = obj.fdt_instance((self.clock)());
        let packets = build_fdt_packets(&fdt, obj.tsi, obj.rec.symbol_len as usize)?;
        Ok(SessionFdt {
            xml: fdt.to_xml(),
            packets,
        })
    }

    /// Holds the volume (tests: a catalog that is slow or locked).
    pub fn lock_volume(&self) -> MutexGuard<'_, Volume> {
        self.vol.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use isnode_store::{ingest, IngestOptions};
    use isnode_wire::fdt::FdtInstance;
    use std::path::Path;

    const DAY_S: u64 = 86_400;

    fn params() -> VolumeParams {
        isnode_store::VolumeParams::SMALL
    }

    fn put(dir: &Path, name: &str, fill: u8, len: usize, replace: bool) {
        let mut vol = Volume::open(dir).unwrap();
        let bytes = vec![fill; len];
        let opts = IngestOptions {
            name: name.into(),
            bitrate_bps: 1_000_000,
            content_type: "video/mp2t".into(),
            replace,
        };
        ingest(&mut vol, &opts, &mut &bytes[..], len as u64, &mut |_| {}).unwrap();
    }

    fn volume() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        Volume::create(dir.path(), params(), None).unwrap();
        put(dir.path(), "a.ts", 1, 100_000, false);
        dir
    }

    fn expires(fdt: &SessionFdt) -> u64 {
        FdtInstance::from_xml(fdt.xml.as_bytes()).unwrap().expires
    }

    /// Defect 5: a session started long after its object was prepared still gets an FDT
    /// that expires after its playing time (standard receivers drop an expired FDT).
    #[test]
    fn fdt_expires_from_the_session_start_not_the_first_lookup() {
        let dir = volume();
        let now = Arc::new(AtomicU64::new(1_700_000_000));
        let clock = now.clone();
        let objects = Objects::with_clock(
            Volume::open(dir.path()).unwrap(),
            Arc::new(move || clock.load(Ordering::Relaxed)),
        );
        let first = objects.get("a.ts").unwrap();
        let t0 = expires(&objects.session_fdt(&first).unwrap());
        assert!(t0 >= 1_700_000_000 + NTP_UNIX_OFFSET + DAY_S);
        // Thirty days of uptime later.
        now.fetch_add(30 * DAY_S, Ordering::Relaxed);
        let later = objects.get("a.ts").unwrap();
        let fdt = objects.session_fdt(&later).unwrap();
        let t1 = now.load(Ordering::Relaxed) + NTP_UNIX_OFFSET;
        assert!(
            expires(&fdt) > t1 + later.rec.duration_s as u64,
            "Expires {} is before the end of a session starting at {t1}",
            expires(&fdt)
        );
        // The in-band packets carry the same instance as the XML.
        let instance = later.fdt_instance(now.load(Ordering::Relaxed));
        assert_eq!(fdt.xml, instance.to_xml());
        let packets = build_fdt_packets(&instance, later.tsi, later.rec.symbol_len as usize);
        assert_eq!(fdt.packets, packets.unwrap());
    }

    /// Defect 5: an object replaced while the server runs is served with its new content,
    /// and the prepared entry of the old one is dropped (it leaked before).
    #[test]
    fn a_replaced_object_is_served_new_and_the_old_one_dropped() {
        let dir = volume();
        let objects = Objects::new(Volume::open(dir.path()).unwrap());
        let old = objects.get("a.ts").unwrap();
        put(dir.path(), "a.ts", 2, 150_000, true);
        let new = objects.get("a.ts").unwrap();
        assert_ne!(new.rec.toi, old.rec.toi);
        assert_eq!(new.rec.size_bytes, 150_000);
        assert_eq!(objects.prepared_count(), 1);
        for _ in 0..3 {
            put(dir.path(), "a.ts", 3, 120_000, true);
            assert_eq!(objects.list().unwrap().len(), 1);
            assert_eq!(objects.prepared_count(), 1);
        }
        assert_eq!(objects.get("a.ts").unwrap().rec.size_bytes, 120_000);
    }

    /// Defect 5: an object gone from the catalog is dropped on the next lookup or listing.
    #[test]
    fn a_deleted_object_is_dropped() {
        let dir = volume();
        put(dir.path(), "b.ts", 4, 50_000, false);
        let objects = Objects::new(Volume::open(dir.path()).unwrap());
        assert_eq!(objects.list().unwrap().len(), 2);
        let b = objects.get("b.ts").unwrap();
        // Delete it as a recovery would: the catalog row goes.
        let mut cat =
            isnode_store::catalog::Catalog::open(&dir.path().join("catalog.sqlite")).unwrap();
        cat.delete_object(b.rec.toi).unwrap();
        assert!(matches!(objects.get("b.ts"), Err(StoreError::NotFound(_))));
        assert_eq!(objects.prepared_count(), 1);
        objects.get("b.ts").unwrap_err();
        let _b = objects.get("a.ts").unwrap();
        assert_eq!(objects.list().unwrap().len(), 1);
        assert_eq!(objects.prepared_count(), 1);
    }
}
