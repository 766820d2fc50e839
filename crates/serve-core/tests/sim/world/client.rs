//! The simulated network and the clients: per tick, each session's packets go through
//! loss, corruption, duplication, strays and reordering (within the fault budget) into
//! the session's real receive core, whose output is checked against the object.

use std::time::Duration;

use isnode_recv::receiver::Output;

use super::{Close, Phase, SimMutation, World, BITRATE_BPS, UNVALIDATED};
use isnode_serve_core::admission::client_key;

/// The client's start-up buffer: the playout of a range begins this long after it starts.
const PLAYOUT_DELAY_NS: u64 = 500_000_000;

impl World {
    /// Whether the network may take one more symbol of codeword `sbn` from session `i`:
    /// the server rebuilds what the disk lost (the degraded path), so the client's code
    /// covers the network's losses alone.
    fn budget_left(&self, i: usize, sbn: u32) -> bool {
        let s = &self.sessions[i];
        let repair = self.repair_budget(i);
        let net = s.net_lost.get(&sbn).copied().unwrap_or(0);
        let cap = match self.cfg.mutation {
            SimMutation::NetworkOverBudget => repair + 1,
            _ => repair,
        };
        net < cap
    }

    /// Whether the network takes this packet (lost or corrupted), within the budget.
    fn network_takes(&mut self, i: usize, sbn: u32) -> bool {
        if !self.budget_left(i, sbn) {
            return false;
        }
        let forced = self.cfg.mutation == SimMutation::NetworkOverBudget
            && self.sessions[i].pacer.is_some()
            && sbn
                == self.sessions[i]
                    .rx
                    .as_ref()
                    .map_or(0, |r| r.params().start_codeword);
        forced || self.rng.one_in(self.sessions[i].loss_one_in)
    }

    /// The packets session `i` sent this tick, through the network, into its client.
    pub(super) fn deliver(&mut self, i: usize) -> Result<(), String> {
        let batch = std::mem::take(&mut self.sessions[i].batch);
        let mut wire: Vec<(u64, Vec<u8>)> = Vec::with_capacity(batch.len() + 2);
        for (n, p) in batch.into_iter().enumerate() {
            let sbn = isnode_wire::parse_data_packet(&p)
                .map_err(|e| format!("a stored packet does not parse: {e}"))?
                .id
                .sbn;
            let order = n as u64 * 2 + self.rng.below(7);
            self.sessions[i].loss.sent += 1;
            if self.burst_takes(i, sbn) {
                // Beyond the code: unicast repair completes the codeword.
                self.sessions[i].loss.taken += 1;
                continue;
            }
            if self.network_takes(i, sbn) {
                self.sessions[i].loss.taken += 1;
                *self.sessions[i].net_lost.entry(sbn).or_default() += 1;
                if self.rng.one_in(2) {
                    self.report.net_lost += 1;
                    continue;
                }
                self.report.net_corrupt += 1;
                let mut bad = p;
                let at = self.rng.below(bad.len() as u64) as usize;
                bad[at] ^= 1 << self.rng.below(8);
                wire.push((order, bad));
                continue;
            }
            if self.rng.one_in(50) {
                self.report.duplicated += 1;
                wire.push((order + self.rng.below(5), p.clone()));
            }
            wire.push((order, p));
        }
        if !wire.is_empty() && self.rng.one_in(20) {
            self.report.strays += 1;
            let stray = self.stray(i);
            wire.push((self.rng.below(wire.len() as u64 * 2), stray));
        }
        let first = wire.first().filter(|_| self.rng.one_in(10));
        if let Some((order, forged)) = first.and_then(|(o, p)| Some((*o, self.forgery(p)?))) {
            // Ahead of the packet it forges: first in, it would be taken if not caught.
            self.report.forgeries += 1;
            wire.push((order.saturating_sub(1), forged));
        }
        wire.sort_by_key(|(order, _)| *order);
        let now = Duration::from_nanos(self.now_ns);
        // As the client does, the output is taken as packets come (its window of
        // codewords moves on with it), not once a tick.
        for (_, p) in &wire {
            if let Some(rx) = self.sessions[i].rx.as_mut() {
                rx.push(p, now);
            }
            self.drain(i)?;
        }
        Ok(())
    }

    /// A packet the session's client must ignore: a stored packet of another object (a
    /// stray of another session), or one of its own whose CRC no longer holds (a forgery).
    fn stray(&mut self, i: usize) -> Vec<u8> {
        let own = self.sessions[i].obj;
        let pick = self.rng.below(self.objs.len() as u64) as usize;
        let obj = &self.objs[pick];
        let sbn = self.rng.below(obj.packets.len() as u64) as usize;
        let cw = &obj.packets[sbn];
        let mut p = cw[self.rng.below(cw.len() as u64) as usize].clone();
        if pick == own {
            let at = isnode_wire::DATA_HEADER_LEN + self.rng.below(4) as usize;
            if let Some(b) = p.get_mut(at) {
                *b ^= 0x5A;
            }
        }
        p
    }

    /// A forgery of packet `p`: same identifiers, other symbol bytes, its CRC32C valid (what
    /// anyone who can reach the client's port can make; only its digest tells it apart).
    /// `None` for a packet the network has already damaged.
    fn forgery(&mut self, p: &[u8]) -> Option<Vec<u8>> {
        let genuine = isnode_wire::parse_data_packet(p).ok()?;
        let mut symbol = genuine.symbol.to_vec();
        let at = self.rng.below(symbol.len() as u64) as usize;
        if let Some(b) = symbol.get_mut(at) {
            *b ^= 0xA5;
        }
        let mut out = vec![0u8; p.len()];
        isnode_wire::build_data_packet(&mut out, &genuine.id, &symbol).ok()?;
        Some(out)
    }

    /// Takes the client's output, checking order and bytes.
    pub(super) fn drain(&mut self, i: usize) -> Result<(), String> {
        loop {
            if self.repair_holds(i) {
                return Ok(());
            }
            let s = &mut self.sessions[i];
            let obj = &self.objs[s.obj];
            let Some(rx) = s.rx.as_mut() else {
                return Ok(());
            };
            let Some(o) = rx.poll_output() else {
                return Ok(());
            };
            if o.offset() != s.out_next {
                return Err(format!(
                    "session {i}: output at {} after {}",
                    o.offset(),
                    s.out_next
                ));
            }
            match &o {
                Output::Data { offset, bytes, .. } => {
                    let at = *offset as usize;
                    if obj.bytes.get(at..at + bytes.len()) != Some(bytes.as_slice()) {
                        return Err(format!(
                            "session {i}: client output at {at} differs from the object"
                        ));
                    }
                }
                Output::Lost { sbn, .. } => {
                    return Err(format!(
                        "session {i}: client lost codeword {sbn} (toi {}) though its faults \
                         were within m",
                        obj.toi
                    ));
                }
            }
            s.out_next += o.len();
            self.report.bytes_played += o.len();
        }
    }

    /// Ends the played range of session `i`, checking that the client has all of it.
    pub(super) fn close_range(&mut self, i: usize, close: Close) -> Result<(), String> {
        if close == Close::Done {
            if let Some(rx) = self.sessions[i].rx.as_mut() {
                rx.finish();
            }
        }
        self.drain(i)?;
        let s = &mut self.sessions[i];
        let layout = &self.objs[s.obj].layout;
        let need = match (&s.pacer, close) {
            (Some(p), Close::Cut) if p.codeword() < layout.codewords() => {
                layout.codeword_offset(p.codeword())
            }
            _ => layout.transfer_len(),
        };
        // Cut while a codeword is held for its repair: the output ends before it.
        let need = match close {
            Close::Cut => need.min(self.held_from(i).unwrap_or(u64::MAX)),
            Close::Done => need,
        };
        let s = &mut self.sessions[i];
        if s.out_next < need {
            return Err(format!(
                "session {i}: client output ends at {} but the server sent through {need} \
                 ({close:?})",
                s.out_next
            ));
        }
        if let Some(u) = s.unicast.take() {
            self.report.repaired_codewords += u64::from(u.rl.stats().codewords_repaired);
        }
        s.rx = None;
        Ok(())
    }

    /// Checks after every step: the budget, the pool, the pins.
    pub(super) fn check_global(&self) -> Result<(), String> {
        let used: u64 = self
            .sessions
            .iter()
            .filter(|s| matches!(s.phase, Phase::Playing | Phase::Paused { .. }))
            .map(|s| s.send_rate_bps)
            .sum();
        if used > self.limits.max_bitrate_bps {
            return Err(format!(
                "admitted sessions send {used} bit/s, above the budget of {}",
                self.limits.max_bitrate_bps
            ));
        }
        self.check_unvalidated()?;
        if self.core.ready_slots() > self.core.slots() {
            return Err("more ready blocks than the pool holds".into());
        }
        for (slot, key) in self.pins.values() {
            match &self.memory[*slot as usize] {
                Some((held, _)) if held == key => {}
                other => {
                    return Err(format!(
                    "a pinned block was overwritten: slot {slot} pinned for {key:?} now holds {:?}",
                    other.as_ref().map(|(k, _)| k)
                ))
                }
            }
        }
        Ok(())
    }

    /// The playout deadline: a playing client has every byte its playout (started
    /// [`PLAYOUT_DELAY_NS`] after the range, at the media bitrate, stopped while paused)
    /// has reached.
    pub(super) fn check_playout(&self, i: usize) -> Result<(), String> {
        let s = &self.sessions[i];
        let (Phase::Playing, Some(rx)) = (s.phase, s.rx.as_ref()) else {
            return Ok(());
        };
        let start = rx.output_start();
        let len = self.objs[s.obj].layout.transfer_len() - start;
        let playing_ns =
            (self.now_ns - s.seg_start_ns - s.paused_ns).saturating_sub(PLAYOUT_DELAY_NS);
        let due = u128::from(playing_ns) * u128::from(BITRATE_BPS) / 8_000_000_000;
        let due = u64::try_from(due).unwrap_or(u64::MAX).min(len);
        if s.out_next - start < due {
            return Err(format!(
                "session {i}: playout deadline missed: the client has {} bytes of its range, \
                 {due} are due",
                s.out_next - start
            ));
        }
        Ok(())
    }

    /// Sessions awaiting their echo stay within their own limits.
    fn check_unvalidated(&self) -> Result<(), String> {
        let waiting: Vec<_> = self
            .sessions
            .iter()
            .filter(|s| matches!(s.phase, Phase::Awaiting { .. }))
            .map(|s| client_key(s.peer_ip))
            .collect();
        if waiting.len() > UNVALIDATED.max_sessions as usize {
            return Err(format!("{} sessions await their echo", waiting.len()));
        }
        for key in &waiting {
            let n = waiting.iter().filter(|k| *k == key).count();
            if n > UNVALIDATED.max_per_client as usize {
                return Err(format!("{n} sessions of {key} await their echo"));
            }
        }
        Ok(())
    }

    /// At the end: every pin released in the core too.
    pub(super) fn final_checks(&self) -> Result<(), String> {
        for slot in 0..self.core.slots() {
            let (_, _, pins) = self.core.slot(slot);
            if pins != 0 {
                return Err(format!("slot {slot} still pinned {pins} times at the end"));
            }
        }
        Ok(())
    }
}
