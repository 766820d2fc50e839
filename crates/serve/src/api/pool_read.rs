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
        if held.as_ref().is_none_or(|(b, _)| *b != block) {
            *held = None;
            let key = BlockKey {
                toi: self.obj.rec.toi,
                member,
                block,
            };
            let demand = LazyDemand::new(&self.sh.positions);
            match self.reader.fetch(key, self.obj, &demand) {
                Ok(pin) => *held = Some((block, pin)),
                Err(FetchError::Busy) | Err(FetchError::Full) => return Err(BlockError::Pending),
                Err(FetchError::Failed(why)) | Err(FetchError::Unavailable(why)) => {
                    return Err(BlockError::Unreadable(why))
                }
            }
        }
        match held {
            Some((_, pin)) => Ok(pin.bytes()),
            None => Err(BlockError::Pending),
        }
    }
}

impl PoolRead {
    /// A reader of `obj`'s codewords.
    pub(crate) fn new(sh: &Arc<ApiState>, obj: &Arc<ObjectInfo>) -> PoolRead {
        let failures = sh.members.clone();
        let reader = Reader::new(
            &sh.control.cache,
            ReadIo::Sync,
            Box::new(move |key, why| failures.read_failed(key.member, why)),
        );
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
