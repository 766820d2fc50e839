//! A restart of the broadcasting server, and the receivers' unicast repair over HTTP.
//!
//! Once per seed the server restarts (without a gap): each channel is restored at its phase
//! by the real [`ChannelPacer::resumed`] from the broadcast's durable epoch, as `serve` does
//! from `broadcasts.json`; the transmission in flight on each channel is cut. A receiver
//! completes what the broadcast did not (a cut codeword) as `play --broadcast` does: the
//! shell's rule gives a codeword up one playing time after its own has ended, and the real
//! repair loop (`RepairLoop`) asks the server for its missing symbols (answered with the
//! stored packets after 1-30 ms, checked by the real `split_verified`).

use std::time::{Duration, Instant};

use isnode_recv::repair::{split_verified, Answer, RepairLoop, Request, Step};
use isnode_serve_core::channel::ChannelPacer;

use super::{BroadcastWorld, MAX_BURST};
use crate::SimMutation;

/// A receiver's unicast repair: its loop and the request out (answered at its time).
pub(super) struct Unicast {
    pub(super) rl: RepairLoop,
    pub(super) out: Option<(u64, Request)>,
}

impl Unicast {
    /// The repair of a title whose codewords play `tau` each.
    pub(super) fn new(tau: Duration) -> Unicast {
        Unicast {
            rl: RepairLoop::new(tau),
            out: None,
        }
    }
}

impl BroadcastWorld {
    /// The virtual clock as the repair loop's `Instant`.
    fn instant(&self) -> Instant {
        self.epoch + Duration::from_nanos(self.now_ns)
    }

    /// The server restarts now if it is time: every channel restored at its phase (the
    /// planted bug: its timetable started afresh), the codewords in flight cut.
    pub(super) fn restart(&mut self) -> Result<(), String> {
        if self.restarted || self.now_ns < self.restart_ns {
            return Ok(());
        }
        self.restarted = true;
        let now = self.now_ns;
        for c in 0..self.channels.len() {
            self.cut.insert(self.channels[c].codeword());
            let (plan, layout) = (self.plan.clone(), self.obj.layout.clone());
            let ch = match self.mutation {
                SimMutation::ResumeLosesPhase => ChannelPacer::new(plan, c, layout, MAX_BURST, now),
                _ => ChannelPacer::resumed(plan, c, layout, MAX_BURST, (now, now)),
            };
            self.channels[c] = ch.map_err(|e| format!("restoring channel {c}: {e}"))?;
        }
        self.report.cut_codewords = self.cut.len() as u64;
        Ok(())
    }

    /// The shell's rule (`Run::write`): a codeword is given up one playing time after its
    /// own has ended; then whether the repair holds the head codeword back (asking for it).
    pub(super) fn repair_holds(&mut self, i: usize) -> bool {
        let (now_ns, tau_ns, now) = (self.now_ns, self.tau_ns(), self.instant());
        let r = &mut self.rcvs[i];
        let (Some(tp), Some(rx), Some(u)) = (&r.tp, r.rx.as_mut(), r.unicast.as_mut()) else {
            return false;
        };
        let start_ns = r.arrival_ns as f64 + tp.playback_start_s * 1e9;
        let playing = (now_ns as f64 - start_ns) / tau_ns;
        if playing >= 2.0 {
            rx.give_up_before(playing as u32 - 1);
        }
        let req = match u.rl.step(rx, now) {
            Step::Release => return false,
            Step::Hold => return true,
            Step::Ask(req) => req,
        };
        self.report.repair_requests += 1;
        let due = now_ns + self.rng.range(1_000_000, 30_000_000);
        if let Some(u) = self.rcvs[i].unicast.as_mut() {
            u.out = Some((due, req));
        }
        true
    }

    /// The answer to receiver `i`'s request, if it is due: the stored packets, framed,
    /// checked and fed to its receive core.
    pub(super) fn repair_answers(&mut self, i: usize) -> Result<(), String> {
        let now = self.now_ns;
        let Some(u) = self.rcvs[i].unicast.as_mut() else {
            return Ok(());
        };
        let Some((_, req)) = u.out.take_if(|(due, _)| *due <= now) else {
            return Ok(());
        };
        let mut body = Vec::new();
        for &esi in &req.esis {
            let p = self
                .obj
                .packets
                .get(req.sbn as usize)
                .and_then(|cw| cw.get(esi as usize))
                .ok_or("a repair request of a symbol the title lacks")?;
            let len = u16::try_from(p.len()).map_err(|_| "a packet over 64 KiB")?;
            body.extend_from_slice(&len.to_be_bytes());
            body.extend_from_slice(p);
        }
        let answer = Answer {
            sbn: req.sbn,
            packets: split_verified(&body, &req),
            bytes: body.len() as u64,
        };
        let again_ns = now + self.rng.range(1_000_000, 30_000_000);
        let r = &mut self.rcvs[i];
        let (Some(rx), Some(u)) = (r.rx.as_mut(), r.unicast.as_mut()) else {
            return Ok(());
        };
        if let Some(again) = u.rl.answer(rx, answer, Duration::from_nanos(now)) {
            self.report.repair_requests += 1;
            u.out = Some((again_ns, again));
        }
        self.drain(i)
    }
}
