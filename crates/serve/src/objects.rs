//! The served objects: catalog records with everything a session needs precomputed
//! (layout, FDT packets, block checksums, segment paths).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use isnode_store::{Layout, ObjectRecord, StoreError, Volume, VolumeParams};
use isnode_wire::fdt::{build_fdt_packets, FdtFile, FdtInstance, FecOti};

use crate::cache::{BlockKey, BlockSource};
use crate::session::send_rate_bps;

/// Seconds between the NTP epoch (1900) and the Unix epoch (1970).
const NTP_UNIX_OFFSET: u64 = 2_208_988_800;

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
    /// CRC32C of every block of every member, from the catalog.
    pub block_crcs: Vec<Vec<Option<u32>>>,
    /// The FDT instance (XML) describing the object.
    pub fdt_xml: String,
    /// The FDT instance's ALC packets (TOI 0).
    pub fdt_packets: Vec<Vec<u8>>,
    /// UDP payload rate of a session, bits per second.
    pub send_rate_bps: u64,
}

impl ObjectInfo {
    /// Builds the serving view of a catalog record.
    pub fn new(vol: &Volume, rec: ObjectRecord, now_unix_s: u64) -> Result<ObjectInfo, StoreError> {
        let layout = vol.layout(&rec)?;
        let params = *layout.params();
        let seg_paths = (0..params.members)
            .map(|m| vol.segment_path(m, rec.toi))
            .collect();
        let mut block_crcs = Vec::with_capacity(params.members as usize);
        for m in 0..params.members {
            let blocks = vol.catalog().blocks(rec.toi, m)?;
            let mut crcs = vec![None; layout.member_blocks(m) as usize];
            for b in blocks {
                if let Some(c) = crcs.get_mut(b.block as usize) {
                    *c = Some(b.crc32c);
                }
            }
            block_crcs.push(crcs);
        }
        let oti = FecOti::rs28(
            rec.symbol_len,
            rec.source_symbols,
            rec.source_symbols + rec.repair_symbols,
        )?;
        let now = now_unix_s;
        let fdt = FdtInstance {
            instance_id: rec.toi & isnode_wire::fdt::MAX_FDT_INSTANCE_ID,
            // Valid for the playing time plus a day.
            expires: now + NTP_UNIX_OFFSET + rec.duration_s.ceil() as u64 + 86_400,
            files: vec![FdtFile {
                toi: rec.toi,
                content_location: rec.name.clone(),
                content_length: rec.size_bytes,
                transfer_length: rec.size_bytes,
                content_type: Some(rec.content_type.clone()).filter(|s| !s.is_empty()),
                content_encoding: None,
                fec_oti: Some(oti),
            }],
        };
        let fdt_packets = build_fdt_packets(&fdt, vol.tsi(), rec.symbol_len as usize)?;
        let send_rate_bps = send_rate_bps(&layout, rec.bitrate_bps);
        Ok(ObjectInfo {
            fdt_xml: fdt.to_xml(),
            fdt_packets,
            send_rate_bps,
            tsi: vol.tsi(),
            seg_paths,
            block_crcs,
            layout,
            rec,
        })
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
        }
    }

    /// Nanoseconds of playing time of one full codeword.
    pub fn codeword_ns(&self) -> u64 {
        let bits = u128::from(self.rec.source_symbols) * u128::from(self.rec.symbol_len) * 8;
        let ns = bits * 1_000_000_000 / u128::from(self.rec.bitrate_bps.max(1));
        u64::try_from(ns).unwrap_or(u64::MAX)
    }
}

impl BlockSource for ObjectInfo {
    fn path(&self, key: &BlockKey) -> PathBuf {
        self.seg_paths
            .get(key.member as usize)
            .cloned()
            .unwrap_or_default()
    }

    fn crc(&self, key: &BlockKey) -> Option<u32> {
        self.block_crcs
            .get(key.member as usize)?
            .get(key.block as usize)
            .copied()
            .flatten()
    }
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
    prepared: Mutex<HashMap<u32, Arc<ObjectInfo>>>,
    params: VolumeParams,
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

    /// Runs `f` on the volume, counted in [`Objects::lookups_active`].
    fn with_volume<T>(&self, f: impl FnOnce(&Volume) -> T) -> T {
        self.lookups_active.fetch_add(1, Ordering::Relaxed);
        let vol = self.vol.lock().unwrap_or_else(|e| e.into_inner());
        let r = f(&vol);
        drop(vol);
        self.lookups_active.fetch_sub(1, Ordering::Relaxed);
        r
    }

    fn prepare(&self, vol: &Volume, rec: ObjectRecord) -> Result<Arc<ObjectInfo>, StoreError> {
        if let Some(o) = self.lock_prepared().get(&rec.toi) {
            return Ok(o.clone());
        }
        let o = Arc::new(ObjectInfo::new(vol, rec, (self.clock)())?);
        self.lock_prepared().insert(o.rec.toi, o.clone());
        Ok(o)
    }

    /// The complete object called `name`. Blocks on the catalog.
    pub fn get(&self, name: &str) -> Result<Arc<ObjectInfo>, StoreError> {
        self.with_volume(|vol| {
            let rec = vol.object(name)?;
            self.prepare(vol, rec)
        })
    }

    /// Every complete object, by TOI. Blocks on the catalog.
    pub fn list(&self) -> Result<Vec<Arc<ObjectInfo>>, StoreError> {
        self.with_volume(|vol| {
            vol.objects()?
                .into_iter()
                .map(|rec| self.prepare(vol, rec))
                .collect()
        })
    }

    /// The FDT instance of a new session of `obj`, valid from now.
    pub fn session_fdt(&self, obj: &ObjectInfo) -> Result<SessionFdt, StoreError> {
        Ok(SessionFdt {
            xml: obj.fdt_xml.clone(),
            packets: obj.fdt_packets.clone(),
        })
    }

    /// Holds the volume (tests: a catalog that is slow or locked).
    #[cfg(test)]
    pub(crate) fn lock_volume(&self) -> MutexGuard<'_, Volume> {
        self.vol.lock().unwrap_or_else(|e| e.into_inner())
    }
}
