//! The packets of a block that cannot be read (a failed member, a block failing its
//! checksum): rebuilt from the other members through the store's one codeword read path
//! ([`isnode_store::codeword`]), from blocks in the shared pool. Nothing here waits: a
//! block not in memory yet starts its read and the burst is retried on a later turn.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use isnode_store::codeword::{read_codeword, Assembler, Readiness, Target, Want};
use isnode_store::{BlockError, BlockSource};
use isnode_wire::{build_data_packet, DataPacketId};

use super::demand::LazyDemand;
use super::{Active, Sent, Worker};
use crate::cache::{BlockKey, Cache, FetchError, Pinned};
use crate::member_health::MemberHealth;
use crate::objects::ObjectInfo;
use crate::reader::Reader;
use crate::Degraded;
use isnode_serve_core::pacer::Burst;

/// Per-thread state of rebuilds: the codeword decoder and which codeword it holds.
pub(super) struct Rebuild {
    asm: Assembler,
    /// The codeword complete in `asm`: (TOI, SBN).
    done: Option<(u32, u32)>,
}

impl Rebuild {
    /// Room for codewords of up to `max_symbols` symbols of `symbol_len` bytes.
    pub(super) fn new(symbol_len: usize, max_symbols: usize) -> Rebuild {
        Rebuild {
            asm: Assembler::new(symbol_len, max_symbols),
            done: None,
        }
    }
}

/// Whether a rebuild is a hedge: the member whose block is not waited for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Hedge {
    /// Not a hedge: a block could not be read.
    No,
    /// This member is slow: its blocks not in memory count as missing.
    Member(u32),
}

/// The blocks of one object, from the pool through this thread's reader (one pin per
/// member kept for the codeword being read). Blocks of a failed member, and of the hedged
/// member, that are not in memory count as missing (never read, never waited for).
struct PoolBlocks<'a> {
    reader: &'a mut Reader,
    obj: &'a ObjectInfo,
    demand: &'a LazyDemand<'a>,
    pins: Vec<Option<(u64, Pinned)>>,
    health: &'a MemberHealth,
    cache: &'a Cache,
    hedge: Hedge,
}

impl BlockSource for PoolBlocks<'_> {
    fn block(&mut self, member: u32, block: u64) -> Result<&[u8], BlockError> {
        let m = member as usize;
        let Some(held) = self.pins.get_mut(m) else {
            return Err(BlockError::Unreadable(format!("no member {member}")));
        };
        if held.as_ref().is_none_or(|(b, _)| *b != block) {
            *held = None;
            let key = BlockKey {
                toi: self.obj.rec.toi,
                member,
                block,
            };
            let skip = self.hedge == Hedge::Member(member) || self.health.is_failed(member);
            if skip && !self.cache.contains(&key) {
                return Err(BlockError::Unreadable(format!(
                    "member {member} not read (failed or slow)"
                )));
            }
            match self.reader.fetch(key, self.obj, self.demand) {
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

impl Worker {
    /// Sends (or skips, by `--degraded` or when the code cannot rebuild them) the packets
    /// of a burst whose block cannot be read.
    pub(super) fn degraded(
        &mut self,
        a: &Active,
        obj: &Arc<ObjectInfo>,
        b: &Burst,
        hedge: Hedge,
    ) -> Sent {
        if self.sh.config().degraded == Degraded::SendAvailable {
            self.skipped(b.len());
            return Sent::Yes;
        }
        match self.rebuild_codeword(obj, b.sbn, hedge) {
            Ok(Readiness::Pending) => return Sent::Later,
            Ok(Readiness::Ready) => {}
            // A hedge that cannot rebuild waits for the slow read instead.
            Err(_) if hedge != Hedge::No => return Sent::Later,
            Err(why) => {
                tracing::warn!(
                    toi = obj.rec.toi,
                    sbn = b.sbn,
                    "codeword cannot be rebuilt: {why}"
                );
                self.skipped(b.len());
                return Sent::Yes;
            }
        }
        let p = obj.layout.params().packet_len() as usize;
        let mut len = 0;
        for esi in b.esis.clone() {
            let id = DataPacketId {
                tsi: obj.tsi,
                toi: obj.rec.toi,
                sbn: b.sbn,
                esi: esi as u8,
            };
            let symbol = self.rebuild.asm.symbol(esi);
            match build_data_packet(&mut self.out[len..len + p], &id, symbol) {
                Ok(n) => len += n,
                Err(err) => {
                    tracing::error!("framing a rebuilt packet: {err}");
                    self.skipped(b.len());
                    return Sent::Yes;
                }
            }
        }
        self.sh
            .metrics
            .symbols_rebuilt
            .fetch_add(u64::from(b.len()), Ordering::Relaxed);
        if hedge != Hedge::No {
            let hedged = &self.sh.metrics.health.hedged;
            hedged.fetch_add(1, Ordering::Relaxed);
        }
        self.send_built(a, b, len, p);
        Sent::Yes
    }

    fn skipped(&self, packets: u32) {
        self.sh
            .metrics
            .packets_skipped
            .fetch_add(u64::from(packets), Ordering::Relaxed);
    }

    /// Brings codeword `sbn` of `obj`, every symbol, into the rebuild decoder.
    fn rebuild_codeword(
        &mut self,
        obj: &Arc<ObjectInfo>,
        sbn: u32,
        hedge: Hedge,
    ) -> Result<Readiness, isnode_store::StoreError> {
        if self.rebuild.done == Some((obj.rec.toi, sbn)) {
            return Ok(Readiness::Ready);
        }
        self.rebuild.done = None;
        let demand = LazyDemand::new(&self.sh.positions);
        let mut blocks = PoolBlocks {
            reader: &mut self.reader,
            obj,
            demand: &demand,
            pins: (0..obj.layout.params().members).map(|_| None).collect(),
            health: &self.sh.metrics.health,
            cache: &self.sh.cache,
            hedge,
        };
        let target = Target {
            layout: &obj.layout,
            rec: &obj.rec,
            tsi: obj.tsi,
        };
        let (ready, _) = read_codeword(&mut self.rebuild.asm, target, sbn, Want::All, &mut blocks)?;
        if ready == Readiness::Ready {
            self.rebuild.done = Some((obj.rec.toi, sbn));
        }
        Ok(ready)
    }
}
