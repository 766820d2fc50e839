//! Codewords and stored packets for the HTTP routes, from the shared block pool (the
//! same buffers the streaming engines send from: no second cache), on a blocking thread.
//!
//! A block missing from the pool is read with `pread` into a pool slot (a synchronous
//! [`Reader`] of this thread); a block another thread is reading is waited for (bounded).
//! A member that cannot be read, or a block failing its checksum, makes its packets
//! erasures, rebuilt through the Reed-Solomon code by the store's one codeword read path
//! ([`read_codeword`]), as the data plane's degraded path does.

use std::sync::Arc;
use std::time::{Duration, Instant};

use isnode_store::codeword::{
    read_codeword, verify_packet, Assembler, Readiness, SymbolCheck, Target, Want,
};
use isnode_store::{BlockError, BlockSource};
use isnode_wire::{build_data_packet, DataPacketId};

use crate::api::state::ApiState;
use isnode_pool::cache::{BlockKey, FetchError, Pinned};
use isnode_pool::demand::LazyDemand;
use isnode_pool::objects::ObjectInfo;
use isnode_pool::reader::Reader;
use isnode_serve_config::ReadIo;

/// Longest wait for blocks that other threads are reading (or for a free pool slot).
const BLOCK_WAIT: Duration = Duration::from_secs(10);
/// Pause between two tries of a codeword whose blocks are not ready yet.
const RETRY_PAUSE: Duration = Duration::from_millis(2);

/// Reads the codewords of one object for one HTTP request: one codeword decoder (the
/// request's only codeword-sized buffer) and a synchronous pool reader.
pub(crate) struct PoolRead {
    sh: Arc<ApiState>,
    obj: Arc<ObjectInfo>,
    reader: Reader,
    asm: Assembler,
    /// The codeword whose source symbols are complete in `asm`.
    ready: Option<u32>,
}

/// The blocks of one object from the pool, one pin per member held for one codeword.
struct Blocks<'a> {
    sh: &'a ApiState,
    reader: &'a mut Reader,
    obj: &'a ObjectInfo,
    pins: Vec<Option<(u64, Pinned)>>,
}

impl<'a> Blocks<'a> {
    fn new(sh: &'a ApiState, reader: &'a mut Reader, obj: &'a ObjectInfo) -> Blocks<'a> {
        let pins = (0..obj.layout.params().members).map(|_| None).collect();
        Blocks {
            sh,
            reader,
            obj,
            pins,
        }
    }
}

impl BlockSource for Blocks<'_> {
    fn block(&mut self, member: u32, block: u64) -> Result<&[u8], BlockError> {
        let Some(held) = self.pins.get_mut(member as usize) else {
            return Err(BlockError::Unreadable(format!("no member {member}")));
        };
        let key = BlockKey {
            toi: self.obj.rec.toi,
            member,
            block,
        };
        let demand = LazyDemand::new(&self.sh.positions);
        self.reader.pinned_block(held, key, self.obj, &demand)
    }
}

impl PoolRead {
    /// A reader of `obj`'s codewords.
    pub(crate) fn new(sh: &Arc<ApiState>, obj: &Arc<ObjectInfo>) -> PoolRead {
        let (failures, successes) = (sh.members.clone(), sh.members.clone());
        let reader = Reader::new(
            &sh.control.cache,
            ReadIo::Sync,
            Box::new(move |key, why| failures.read_failed(key, why)),
        )
        .on_ok(Box::new(move |key: &BlockKey, latency| {
            successes.read_ok(key.member, latency)
        }));
        let p = obj.layout.params();
        let max_symbols = (p.source_symbols + p.repair_symbols) as usize;
        PoolRead {
            sh: sh.clone(),
            obj: obj.clone(),
            reader,
            asm: Assembler::new(p.symbol_len as usize, max_symbols),
            ready: None,
        }
    }

    /// Brings codeword `sbn` into the decoder (`want`), waiting (bounded) for blocks being
    /// read elsewhere; rebuilds what cannot be read. Returns the symbol checks.
    fn load(&mut self, sbn: u32, want: Want) -> Result<Vec<SymbolCheck>, String> {
        self.ready = None;
        let deadline = Instant::now() + BLOCK_WAIT;
        let obj = self.obj.clone();
        let target = Target {
            layout: &obj.layout,
            rec: &obj.rec,
            tsi: obj.tsi,
        };
        loop {
            let mut blocks = Blocks::new(&self.sh, &mut self.reader, &obj);
            let r = read_codeword(&mut self.asm, target, sbn, want, &mut blocks);
            drop(blocks);
            match r {
                Ok((Readiness::Ready, _)) => {
                    self.ready = Some(sbn);
                    return Ok(self.asm.checks().to_vec());
                }
                Ok((Readiness::Pending, _)) if Instant::now() < deadline => {
                    std::thread::sleep(RETRY_PAUSE)
                }
                Ok((Readiness::Pending, _)) => {
                    return Err(format!(
                        "codeword {sbn}: blocks still busy after {BLOCK_WAIT:?}"
                    ))
                }
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    /// The original bytes of codeword `sbn` (its data length: no padding), read or rebuilt.
    pub(crate) fn source(&mut self, sbn: u32) -> Result<&[u8], String> {
        if self.ready != Some(sbn) {
            self.load(sbn, Want::Source)?;
        }
        Ok(self.asm.source(self.obj.layout.codeword_data_len(sbn)))
    }

    /// Appends the original bytes `from..to` of codeword `sbn` (offsets in its data) to
    /// `out`: gathered from the stored packets once their blocks are in the pool (read
    /// here if missing, waiting, bounded, for reads elsewhere), or read through the code
    /// ([`PoolRead::source`]) when a block cannot be read or a packet fails its checks.
    pub(crate) fn source_range(
        &mut self,
        sbn: u32,
        from: usize,
        to: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), String> {
        let obj = self.obj.clone();
        let deadline = Instant::now() + BLOCK_WAIT;
        if gather_source(&obj, sbn, from, to, &mut |key| self.pin(key, deadline), out) {
            return Ok(());
        }
        let data = self.source(sbn)?;
        let piece = data
            .get(from..to)
            .ok_or_else(|| format!("codeword {sbn} does not hold bytes {from}..{to}"))?;
        out.extend_from_slice(piece);
        Ok(())
    }

    /// `key` pinned, read into the pool if it is not there, waiting until `deadline` for
    /// a read in flight elsewhere; `None` if it cannot be read.
    fn pin(&mut self, key: BlockKey, deadline: Instant) -> Option<Pinned> {
        loop {
            let demand = LazyDemand::new(&self.sh.positions);
            match self.reader.fetch(key, &*self.obj, &demand) {
                Ok(pin) => return Some(pin),
                Err(FetchError::Busy) | Err(FetchError::Full) if Instant::now() < deadline => {
                    std::thread::sleep(RETRY_PAUSE)
                }
                Err(_) => return None,
            }
        }
    }

    /// The stored packets of symbols `esis` of codeword `sbn`, each prefixed by its length
    /// (2 bytes, big-endian), appended to `out`: as stored, or rebuilt through the code
    /// (byte for byte what was stored) when its block cannot be read or fails its checks.
    /// Returns how many were rebuilt.
    pub(crate) fn packets(
        &mut self,
        sbn: u32,
        esis: &[u32],
        out: &mut Vec<u8>,
    ) -> Result<u32, String> {
        let start = out.len();
        if self.stored_packets(sbn, esis, out)? {
            return Ok(0);
        }
        out.truncate(start);
        let checks = self.load(sbn, Want::All)?;
        let p = self.obj.layout.params().packet_len() as usize;
        let mut rebuilt = 0;
        let mut packet = vec![0u8; p];
        for &esi in esis {
            let n = build_data_packet(
                &mut packet,
                &self.packet_id(sbn, esi)?,
                self.asm.symbol(esi),
            )
            .map_err(|e| format!("framing packet {esi} of codeword {sbn}: {e}"))?;
            push_framed(out, &packet[..n])?;
            rebuilt += u32::from(checks.get(esi as usize) != Some(&SymbolCheck::Good));
        }
        Ok(rebuilt)
    }

    /// Appends the requested packets straight from their blocks if every one of them is
    /// readable and verifies (waiting, bounded, for blocks being read); false otherwise.
    fn stored_packets(
        &mut self,
        sbn: u32,
        esis: &[u32],
        out: &mut Vec<u8>,
    ) -> Result<bool, String> {
        let deadline = Instant::now() + BLOCK_WAIT;
        let obj = self.obj.clone();
        let p = obj.layout.params().packet_len() as usize;
        let symbol_len = obj.layout.params().symbol_len as usize;
        let mut ids = Vec::with_capacity(esis.len());
        for &esi in esis {
            ids.push(self.packet_id(sbn, esi)?);
        }
        let mut blocks = Blocks::new(&self.sh, &mut self.reader, &obj);
        for (&esi, id) in esis.iter().zip(&ids) {
            let at = obj.layout.symbol_location(sbn, esi);
            loop {
                match blocks.block(at.member, at.block) {
                    Ok(_) => break,
                    Err(BlockError::Pending) if Instant::now() < deadline => {
                        std::thread::sleep(RETRY_PAUSE)
                    }
                    Err(_) => return Ok(false),
                }
            }
            let Ok(bytes) = blocks.block(at.member, at.block) else {
                return Ok(false);
            };
            let Some(packet) = bytes.get(at.offset..at.offset + p) else {
                return Ok(false);
            };
            if verify_packet(packet, id, symbol_len).is_none() {
                return Ok(false);
            }
            push_framed(out, packet)?;
        }
        Ok(true)
    }

    fn packet_id(&self, sbn: u32, esi: u32) -> Result<DataPacketId, String> {
        Ok(DataPacketId {
            tsi: self.obj.tsi,
            toi: self.obj.rec.toi,
            sbn,
            esi: u8::try_from(esi).map_err(|_| format!("ESI {esi} > 255"))?,
        })
    }
}

/// Appends `packet` with its 2-byte big-endian length.
fn push_framed(out: &mut Vec<u8>, packet: &[u8]) -> Result<(), String> {
    let len = u16::try_from(packet.len()).map_err(|_| {
        format!(
            "a packet of {} bytes does not fit the framing",
            packet.len()
        )
    })?;
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(packet);
    Ok(())
}

/// Where [`gather_source`] gets a block: pinned, or `None` when it cannot be had now.
pub(crate) type PinBlock<'a> = dyn FnMut(BlockKey) -> Option<Pinned> + 'a;

/// Appends the original bytes `from..to` of codeword `sbn` (offsets in the codeword's data)
/// to `out`, copied once straight out of the stored packets in the pool (each packet's
/// header skipped). A block with a catalog checksum was verified whole when it entered the
/// pool ([`isnode_pool::cache::Cache::finish`]): its packets' own CRC32Cs are not run again,
/// only their identifiers checked. A block without one (an object still filling) has each
/// packet's CRC32C verified here. False (and `out` as it was) when a block cannot be had
/// through `pin` or a packet fails its checks: the caller reads the codeword through
/// [`PoolRead::source`], which rebuilds what is wrong.
pub(crate) fn gather_source(
    obj: &ObjectInfo,
    sbn: u32,
    from: usize,
    to: usize,
    pin: &mut PinBlock<'_>,
    out: &mut Vec<u8>,
) -> bool {
    let start = out.len();
    let ok = gather_into(obj, sbn, from, to, pin, out);
    if !ok {
        out.truncate(start);
    }
    ok
}

fn gather_into(
    obj: &ObjectInfo,
    sbn: u32,
    from: usize,
    to: usize,
    pin: &mut PinBlock<'_>,
    out: &mut Vec<u8>,
) -> bool {
    let layout = &obj.layout;
    let e = layout.params().symbol_len as usize;
    let p = layout.params().packet_len() as usize;
    if e == 0 || from >= to {
        return from == to;
    }
    // The block of the packet just read: a member's run of a codeword is in one block.
    let mut held: Option<(u32, u64, Pinned)> = None;
    for esi in from / e..to.div_ceil(e) {
        let Ok(esi8) = u8::try_from(esi) else {
            return false;
        };
        let at = layout.symbol_location(sbn, u32::from(esi8));
        if held
            .as_ref()
            .is_none_or(|(m, b, _)| (*m, *b) != (at.member, at.block))
        {
            // The pin of the last block goes before the next is pinned.
            drop(held.take());
            let key = BlockKey {
                toi: obj.rec.toi,
                member: at.member,
                block: at.block,
            };
            let Some(pinned) = pin(key) else {
                return false;
            };
            held = Some((at.member, at.block, pinned));
        }
        let Some((_, _, pinned)) = &held else {
            return false;
        };
        let Some(packet) = pinned.bytes().get(at.offset..at.offset + p) else {
            return false;
        };
        let id = DataPacketId {
            tsi: obj.tsi,
            toi: obj.rec.toi,
            sbn,
            esi: esi8,
        };
        let verified = block_verified(obj, at.member, at.block);
        let Some(symbol) = stored_symbol(packet, &id, e, verified) else {
            return false;
        };
        let lo = from.saturating_sub(esi * e);
        let hi = (to - esi * e).min(e);
        let Some(piece) = symbol.get(lo..hi) else {
            return false;
        };
        out.extend_from_slice(piece);
    }
    true
}

/// Whether block `block` of `member` entered the pool checked against a catalog CRC32C.
fn block_verified(obj: &ObjectInfo, member: u32, block: u64) -> bool {
    obj.fill.is_none()
        && obj
            .block_crcs
            .get(member as usize)
            .and_then(|m| m.get(usize::try_from(block).ok()?))
            .is_some_and(|c| c.is_some())
}

/// The symbol of a stored packet carrying `id`: its identifiers and length checked, and its
/// CRC32C too unless its block was verified whole.
fn stored_symbol<'a>(
    packet: &'a [u8],
    id: &DataPacketId,
    symbol_len: usize,
    block_verified: bool,
) -> Option<&'a [u8]> {
    if !block_verified {
        return verify_packet(packet, id, symbol_len);
    }
    let (p, _) = isnode_wire::parse_data_packet_unverified(packet).ok()?;
    (p.id == *id && p.symbol.len() == symbol_len).then_some(p.symbol)
}
