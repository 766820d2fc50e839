//! The packets of a block that cannot be read (a failed member, a block failing its
//! checksum): rebuilt from the other members through the store's one codeword read path
//! ([`isnode_store::codeword`]), from blocks in the shared pool. Nothing here waits: a
//! block not in memory yet starts its read and the burst is retried on a later turn.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use isnode_pool::demand::LazyDemand;
use isnode_pool::objects::ObjectInfo;
use isnode_serve_config::Degraded;
use isnode_serve_core::pacer::Burst;
use isnode_store::codeword::{read_codeword, Readiness, Target, Want};
use isnode_wire::{build_data_packet, DataPacketId};

use crate::active::{Active, Sent};
use crate::rebuild::{Hedge, PoolBlocks};
use crate::worker::Worker;

impl Worker {
    /// Sends (or skips, by `--degraded` or when the code cannot rebuild them) the packets
    /// of a burst whose block cannot be read.
    pub(crate) fn degraded(
        &mut self,
        a: &Active,
        obj: &Arc<ObjectInfo>,
        b: &Burst,
        hedge: Hedge,
    ) -> Sent {
        if self.deps.config.load().degraded == Degraded::SendAvailable {
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
        self.deps
            .counters
            .symbols_rebuilt
            .fetch_add(u64::from(b.len()), Ordering::Relaxed);
        if hedge != Hedge::No {
            let hedged = &self.deps.members.health.hedged;
            hedged.fetch_add(1, Ordering::Relaxed);
        }
        self.send_built(a, b, len, p);
        Sent::Yes
    }

    fn skipped(&self, packets: u32) {
        self.deps
            .counters
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
        let demand = LazyDemand::new(&self.deps.positions);
        let mut blocks = PoolBlocks {
            reader: &mut self.reader,
            obj,
            demand: &demand,
            pins: (0..obj.layout.params().members).map(|_| None).collect(),
            health: &self.deps.members.health,
            cache: &self.deps.cache,
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
