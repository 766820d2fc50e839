//! The `traditional` engine's sends, the seed papers' baseline: per packet, header built,
//! payload copied, one `sendto` (its per-session state is in `baseline.rs`).

use std::sync::atomic::Ordering;

use isnode_serve_config::EngineKind;
use isnode_serve_core::pacer::Burst;
use isnode_sys::net;
use isnode_wire::{build_data_packet, DataPacketId};

use crate::active::Active;
use crate::worker::Worker;

impl Worker {
    /// Sends a burst the baseline way: per packet, header built, payload copied, one `sendto`.
    pub(crate) fn send_baseline(&mut self, a: &mut Active, b: &Burst) {
        let obj = a.s.object.clone();
        let Some(mut t) = a.baseline.take() else {
            return;
        };
        if t.loaded.is_none_or(|(sbn, _)| sbn != b.sbn) {
            let ok = t.load(&obj, b.sbn, &mut self.codes, &self.deps);
            t.loaded = Some((b.sbn, ok));
        }
        let ready = t.loaded.is_some_and(|(_, ok)| ok);
        for esi in b.esis.clone() {
            if !ready {
                self.deps
                    .counters
                    .packets_skipped
                    .fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let id = DataPacketId {
                tsi: obj.tsi,
                toi: obj.rec.toi,
                sbn: b.sbn,
                esi: esi as u8,
            };
            let n = match build_data_packet(&mut t.pkt, &id, t.asm.symbol(esi)) {
                Ok(n) => n,
                Err(err) => {
                    tracing::error!("framing a packet: {err}");
                    continue;
                }
            };
            let dest = a.dest_for(b);
            let r = self
                .socket(&dest.addr)
                .and_then(|s| net::send_to(s, &dest.raw, &t.pkt[..n]));
            match r {
                Ok(()) => self.count(a, EngineKind::Traditional, 1, n as u64),
                Err(err) => self.send_error(&err),
            }
        }
        a.baseline = Some(t);
    }
}
