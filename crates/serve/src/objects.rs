//! The served objects: catalog records with everything a session needs precomputed
//! (layout, FDT packets, block checksums, segment paths).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use isnode_store::{Layout, ObjectRecord, StoreError, Volume, VolumeParams};
use isnode_wire::fdt::{build_fdt_packets, FdtFile, FdtInstance, FecOti};
use serde::Serialize;

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

/// The JSON description of an object (protocol.md, "Objects").
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ObjectJson {
    /// Object name.
    pub name: String,
    /// Length in bytes.
    pub size_bytes: u64,
    /// Media bitrate.
    pub bitrate_bps: u64,
    /// Playing time.
    pub duration_s: f64,
    /// MIME type.
    pub content_type: String,
    /// E.
    pub symbol_size: u32,
    /// B (k of full codewords).
    pub source_symbols: u32,
    /// m.
    pub repair_symbols: u32,
    /// Number of codewords.
    pub codewords: u32,
    /// FLUTE TSI.
    pub tsi: u32,
    /// FLUTE TOI.
    pub toi: u32,
}

impl ObjectInfo {
    /// Builds the serving view of a catalog record.
    pub fn new(vol: &Volume, rec: ObjectRecord) -> Result<ObjectInfo, StoreError> {
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
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
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

    /// The JSON description.
    pub fn json(&self) -> ObjectJson {
        ObjectJson {
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

/// The objects of the volume, looked up in the catalog on demand (so objects ingested
/// while the server runs can be served) and kept once prepared.
pub struct Objects {
    vol: Mutex<Volume>,
    prepared: Mutex<HashMap<u32, Arc<ObjectInfo>>>,
    params: VolumeParams,
}

impl Objects {
    /// Wraps an open volume.
    pub fn new(vol: Volume) -> Objects {
        Objects {
            params: *vol.params(),
            vol: Mutex::new(vol),
            prepared: Mutex::new(HashMap::new()),
        }
    }

    /// The volume's parameters.
    pub fn params(&self) -> &VolumeParams {
        &self.params
    }

    fn prepare(&self, vol: &Volume, rec: ObjectRecord) -> Result<Arc<ObjectInfo>, StoreError> {
        let mut prepared = self.prepared.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(o) = prepared.get(&rec.toi) {
            return Ok(o.clone());
        }
        let o = Arc::new(ObjectInfo::new(vol, rec)?);
        prepared.insert(o.rec.toi, o.clone());
        Ok(o)
    }

    /// The complete object called `name`.
    pub fn get(&self, name: &str) -> Result<Arc<ObjectInfo>, StoreError> {
        let vol = self.vol.lock().unwrap_or_else(|e| e.into_inner());
        let rec = vol.object(name)?;
        self.prepare(&vol, rec)
    }

    /// Every complete object, by TOI.
    pub fn list(&self) -> Result<Vec<Arc<ObjectInfo>>, StoreError> {
        let vol = self.vol.lock().unwrap_or_else(|e| e.into_inner());
        vol.objects()?
            .into_iter()
            .map(|rec| self.prepare(&vol, rec))
            .collect()
    }
}
