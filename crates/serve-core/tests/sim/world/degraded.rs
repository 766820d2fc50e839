//! The degraded path: the packets of a block that cannot be read, rebuilt from the other
//! members' blocks in the pool through the store's real codeword read path
//! (`isnode_store::codeword::read_codeword`), as `plane::degraded` does. Nothing waits: a
//! block not in memory starts its read and the burst is retried on a later tick.

use std::collections::HashMap;

use isnode_store::codeword::{read_codeword, Assembler, Readiness, Target, Want};
use isnode_store::{BlockError, BlockSource, ObjectRecord, ObjectState};
use isnode_wire::{build_data_packet, DataPacketId};

use super::super::store::Obj;
use super::{positions, World};
use isnode_serve_core::block::{BlockKey, FetchError};
use isnode_serve_core::cache_core::CoreLookup;
use isnode_serve_core::pacer::{blocks_of, Burst};

/// The blocks of one codeword, pinned in the pool (or unreadable).
struct Held<'a>(HashMap<(u32, u64), Result<&'a [u8], String>>);

impl BlockSource for Held<'_> {
    fn block(&mut self, member: u32, block: u64) -> Result<&[u8], BlockError> {
        match self.0.get(&(member, block)) {
            Some(Ok(bytes)) => Ok(bytes),
            Some(Err(why)) => Err(BlockError::Unreadable(why.clone())),
            None => Err(BlockError::Pending),
        }
    }
}

impl World {
    /// Sends burst `b` of session `i` rebuilt from the other members (true), or starts
    /// the reads it needs (false: retried later).
    pub(super) fn send_rebuilt(&mut self, i: usize, b: &Burst) -> Result<bool, String> {
        let obj_i = self.sessions[i].obj;
        let toi = self.objs[obj_i].toi;
        let mut pinned = Vec::new();
        let mut unreadable = HashMap::new();
        let mut pending = false;
        for (member, block) in blocks_of(&self.objs[obj_i].layout, b.sbn..b.sbn + 1) {
            let key = BlockKey { toi, member, block };
            let positions = positions(&self.objs, &self.sessions);
            match self.core.begin(key, self.now_ns, &positions) {
                Ok(CoreLookup::Ready(slot)) => pinned.push((slot, key)),
                Ok(CoreLookup::Load { slot, .. }) => {
                    self.start_read(slot, key, obj_i);
                    pending = true;
                }
                Ok(CoreLookup::Loading) | Err(FetchError::Busy) | Err(FetchError::Full) => {
                    pending = true
                }
                Err(FetchError::Unavailable(why)) | Err(FetchError::Failed(why)) => {
                    unreadable.insert((member, block), why);
                }
            }
        }
        let outcome = if pending {
            Ok(None)
        } else {
            self.rebuild(obj_i, b, &pinned, unreadable).map(Some)
        };
        for (slot, _) in pinned {
            self.core.unpin(slot);
        }
        let Some(packets) = outcome? else {
            return Ok(false);
        };
        self.report.rebuilt_bursts += 1;
        self.send_packets(i, b, packets)?;
        Ok(true)
    }

    /// The packets of `b`, rebuilt by the store's codeword read from the `pinned` blocks.
    fn rebuild(
        &self,
        obj_i: usize,
        b: &Burst,
        pinned: &[(u32, BlockKey)],
        unreadable: HashMap<(u32, u64), String>,
    ) -> Result<Vec<Vec<u8>>, String> {
        let mut blocks: HashMap<(u32, u64), Result<&[u8], String>> = unreadable
            .into_iter()
            .map(|(at, why)| (at, Err(why)))
            .collect();
        for (slot, key) in pinned {
            match &self.memory[*slot as usize] {
                Some((held, bytes)) if held == key => {
                    blocks.insert((key.member, key.block), Ok(bytes.as_slice()));
                }
                _ => return Err(format!("slot {slot} pinned for {key:?} holds other bytes")),
            }
        }
        rebuild_burst(&self.objs[obj_i], b, blocks)
    }
}

/// The packets of burst `b` of `obj`, rebuilt by the store's codeword read
/// (`read_codeword`, every packet's CRC checked) from `blocks` (each block of the
/// codeword: its bytes, or why it cannot be read) and framed again, as `plane::degraded`
/// does.
pub(crate) fn rebuild_burst(
    obj: &Obj,
    b: &Burst,
    blocks: HashMap<(u32, u64), Result<&[u8], String>>,
) -> Result<Vec<Vec<u8>>, String> {
    rebuild_packets(obj, b.sbn, b.esis.clone(), blocks)
}

/// The packets `esis` of codeword `sbn` of `obj`, rebuilt as [`rebuild_burst`] does.
pub(crate) fn rebuild_packets(
    obj: &Obj,
    sbn: u32,
    esis: impl Iterator<Item = u32>,
    blocks: HashMap<(u32, u64), Result<&[u8], String>>,
) -> Result<Vec<Vec<u8>>, String> {
    let p = obj.layout.params();
    let mut asm = Assembler::new(
        p.symbol_len as usize,
        (p.source_symbols + p.repair_symbols) as usize,
    );
    let rec = record(obj.toi, &obj.layout);
    let target = Target {
        layout: &obj.layout,
        rec: &rec,
        tsi: obj.tsi,
    };
    let (ready, _) = read_codeword(&mut asm, target, sbn, Want::All, &mut Held(blocks))
        .map_err(|e| format!("a codeword within m could not be rebuilt: {e}"))?;
    if ready != Readiness::Ready {
        return Err("a rebuild with every block at hand is pending".into());
    }
    let plen = p.packet_len() as usize;
    esis.map(|esi| {
        let id = DataPacketId {
            tsi: obj.tsi,
            toi: obj.toi,
            sbn,
            esi: esi as u8,
        };
        let mut out = vec![0u8; plen];
        build_data_packet(&mut out, &id, asm.symbol(esi))
            .map_err(|e| format!("framing a rebuilt packet: {e}"))?;
        Ok(out)
    })
    .collect()
}

/// The catalog record the codeword read names in its errors.
fn record(toi: u32, layout: &isnode_store::Layout) -> ObjectRecord {
    let p = layout.params();
    ObjectRecord {
        toi,
        name: format!("sim-{toi}"),
        state: ObjectState::Complete,
        size_bytes: layout.transfer_len(),
        bitrate_bps: super::BITRATE_BPS,
        duration_s: 0.0,
        content_type: "application/octet-stream".into(),
        symbol_len: p.symbol_len,
        source_symbols: p.source_symbols,
        repair_symbols: p.repair_symbols,
        codewords: layout.codewords(),
        content_crc32c: 0,
        created_unix: 0,
        replaces: None,
    }
}
