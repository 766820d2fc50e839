//! Unicast repair in the simulation (FEC + ARQ, docs/protocol.md "Unicast repair"): half
//! the clients repair over HTTP, with the client's real sans-IO repair loop
//! (`isnode_recv::repair::RepairLoop`: which codeword to hold back, which ESIs to ask for,
//! a second request, giving up) and its real answer check (`split_verified`: each packet's
//! CRC32C and identifiers). The server's side answers
//! `GET /v1/objects/{name}/codewords/{sbn}/packets?esi=...` as `PoolRead::packets` does: the
//! stored packets when their blocks read back good, else the codeword read through the
//! code (`read_codeword`) from every member's block, each packet framed with its 2-byte
//! length. Requests and answers take a random back-off (0-20 ms) and a round trip (1-10 ms).
//!
//! The network of a repairing lossy client sometimes takes more than the code can give
//! back (a burst of m + 1 or m + 2 symbols of one codeword, at most one codeword in 8):
//! that codeword must come out whole through the repair, within the playout deadline.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use isnode_recv::repair::{split_verified, Answer, RepairLoop, Request, Step};
use isnode_serve_core::pacer::blocks_of;

use super::super::store::Obj;
use super::{rebuild_packets, SimMutation, World, BITRATE_BPS};

/// A burst beyond the code starts on one new codeword in this many of a repairing lossy
/// client.
const BURST_ONE_IN: u64 = 40;
/// At least this many codewords between two bursts.
const BURST_SPACING: u32 = 8;

/// A session's unicast repair: its loop, the request out, the network's bursts.
pub(super) struct Unicast {
    pub(super) rl: RepairLoop,
    /// The request out and when its answer arrives.
    pub(super) out: Option<(u64, Request)>,
    /// The codeword the network takes a burst of, and how many more symbols it takes.
    pub(super) burst: Option<(u32, u32)>,
    /// The last codeword seen on the wire, and the last burst's.
    pub(super) last_sbn: Option<u32>,
    pub(super) last_burst: Option<u32>,
}

impl Unicast {
    /// The repair of a range whose codewords play `codeword_time` each.
    pub(super) fn new(codeword_time: Duration) -> Unicast {
        Unicast {
            rl: RepairLoop::new(codeword_time),
            out: None,
            burst: None,
            last_sbn: None,
            last_burst: None,
        }
    }

    /// Whether a repair is under way (a request out, or a codeword held for it).
    pub(super) fn busy(&self) -> bool {
        self.out.is_some() || self.rl.waiting()
    }
}

/// The playing time of one full codeword of `obj`.
pub(super) fn codeword_time(obj: &Obj) -> Duration {
    let p = obj.layout.params();
    let bits = u64::from(p.symbol_len * p.source_symbols) * 8;
    Duration::from_nanos(bits * 1_000_000_000 / BITRATE_BPS)
}

impl World {
    /// The virtual clock as the repair loop's `Instant`.
    fn instant(&self) -> Instant {
        self.epoch + Duration::from_nanos(self.now_ns)
    }

    /// Whether the network takes this packet of codeword `sbn` of session `i` in a burst
    /// beyond the code (for a repairing lossy client only).
    pub(super) fn burst_takes(&mut self, i: usize, sbn: u32) -> bool {
        let lossy = self.sessions[i].loss_one_in < 100;
        let m = self.objs[self.sessions[i].obj]
            .layout
            .params()
            .repair_symbols;
        let Some(u) = self.sessions[i].unicast.as_mut() else {
            return false;
        };
        if u.last_sbn != Some(sbn) {
            u.last_sbn = Some(sbn);
            let spaced = u
                .last_burst
                .is_none_or(|b| sbn >= b + BURST_SPACING || sbn < b);
            if lossy && spaced && self.rng.one_in(BURST_ONE_IN) {
                u.burst = Some((sbn, m + 1 + self.rng.below(2) as u32));
                u.last_burst = Some(sbn);
                self.report.burst_codewords += 1;
            }
        }
        match u.burst.as_mut() {
            Some((b, left)) if *b == sbn && *left > 0 => {
                *left -= 1;
                true
            }
            _ => false,
        }
    }

    /// Before each release of session `i`'s client: whether its repair holds the head
    /// codeword back (sending a request for it if need be).
    pub(super) fn repair_holds(&mut self, i: usize) -> bool {
        let now = self.instant();
        let s = &mut self.sessions[i];
        let (Some(u), Some(rx)) = (s.unicast.as_mut(), s.rx.as_ref()) else {
            return false;
        };
        let r = match u.rl.step(rx, now) {
            Step::Release => return false,
            Step::Hold => return true,
            Step::Ask(r) => r,
        };
        self.report.repair_requests += 1;
        let due = self.now_ns + self.rng.below(20_000_000) + self.rng.range(1_000_000, 10_000_000);
        if let Some(u) = self.sessions[i].unicast.as_mut() {
            u.out = Some((due, r));
        }
        true
    }

    /// The answer to session `i`'s request, if it is due: served, checked, fed to the
    /// client (a second request if it still lacks symbols).
    pub(super) fn repair_answers(&mut self, i: usize) -> Result<(), String> {
        let now = self.now_ns;
        let Some(u) = self.sessions[i].unicast.as_mut() else {
            return Ok(());
        };
        let Some((_, req)) = u.out.take_if(|(due, _)| *due <= now) else {
            return Ok(());
        };
        let body = self.serve_repair(self.sessions[i].obj, &req)?;
        let answer = Answer {
            sbn: req.sbn,
            packets: split_verified(&body, &req),
            bytes: body.len() as u64,
        };
        let delay = self.rng.below(20_000_000) + self.rng.range(1_000_000, 10_000_000);
        let at = Duration::from_nanos(now);
        let s = &mut self.sessions[i];
        let (Some(u), Some(rx)) = (s.unicast.as_mut(), s.rx.as_mut()) else {
            return Ok(());
        };
        if let Some(again) = u.rl.answer(rx, answer, at) {
            self.report.repair_requests += 1;
            u.out = Some((now + delay, again));
        }
        self.drain(i)
    }

    /// The server's answer to `req` for object `obj_i`: the stored packets if their
    /// blocks read back good, else the codeword through the code; each framed by its
    /// 2-byte length.
    fn serve_repair(&mut self, obj_i: usize, req: &Request) -> Result<Vec<u8>, String> {
        let obj = &self.objs[obj_i];
        let layout = &obj.layout;
        let plen = layout.params().packet_len() as usize;
        let mut blocks: HashMap<(u32, u64), Result<Vec<u8>, String>> = HashMap::new();
        for (member, block) in blocks_of(layout, req.sbn..req.sbn + 1) {
            let crc = obj.block_crc[member as usize].get(block as usize).copied();
            let got = obj
                .read_block(member, block, &mut self.rng)
                .and_then(|b| isnode_store::codeword::verify_block(&b, crc).map(|()| b));
            blocks.insert((member, block), got);
        }
        let stored: Option<Vec<Vec<u8>>> = req
            .esis
            .iter()
            .map(|&esi| {
                let at = layout.symbol_location(req.sbn, esi);
                let block = blocks.get(&(at.member, at.block))?.as_ref().ok()?;
                block.get(at.offset..at.offset + plen).map(<[u8]>::to_vec)
            })
            .collect();
        let packets = match stored {
            Some(p) => p,
            None if self.cfg.mutation == SimMutation::RepairSkipsUnreadable => {
                self.readable_only(obj_i, req, &blocks)
            }
            None => {
                let held = blocks
                    .iter()
                    .map(|(at, b)| (*at, b.as_deref().map_err(String::clone)))
                    .collect();
                self.report.repair_rebuilt += 1;
                rebuild_packets(obj, req.sbn, req.esis.iter().copied(), held)?
            }
        };
        let mut body = Vec::new();
        for p in packets {
            let len = u16::try_from(p.len()).map_err(|_| "a packet over 64 KiB")?;
            body.extend_from_slice(&len.to_be_bytes());
            body.extend_from_slice(&p);
        }
        Ok(body)
    }

    /// The planted bug's answer: the requested packets whose blocks read back good, the
    /// others left out.
    fn readable_only(
        &self,
        obj_i: usize,
        req: &Request,
        blocks: &HashMap<(u32, u64), Result<Vec<u8>, String>>,
    ) -> Vec<Vec<u8>> {
        let layout = &self.objs[obj_i].layout;
        let plen = layout.params().packet_len() as usize;
        req.esis
            .iter()
            .filter_map(|&esi| {
                let at = layout.symbol_location(req.sbn, esi);
                let block = blocks.get(&(at.member, at.block))?.as_ref().ok()?;
                block.get(at.offset..at.offset + plen).map(<[u8]>::to_vec)
            })
            .collect()
    }

    /// Where session `i`'s client output may end when its range is cut: before its next
    /// codeword to release if a repair is under way or the network took a burst of it or
    /// of a later one (not given up yet, its repair not even asked for).
    pub(super) fn held_from(&self, i: usize) -> Option<u64> {
        let s = &self.sessions[i];
        let (u, rx) = (s.unicast.as_ref()?, s.rx.as_ref()?);
        let burst_ahead = u.last_burst.is_some_and(|b| b >= rx.next_release());
        if !u.busy() && !burst_ahead {
            return None;
        }
        let sbn = rx.next_release();
        Some(self.objs[s.obj].layout.codeword_offset(sbn))
    }
}
