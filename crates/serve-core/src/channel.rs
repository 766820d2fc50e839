//! The sans-IO pacing core of one broadcast channel.
//!
//! A plan's channel is a periodic timetable of codewords ([`Plan::next_transmission`]):
//! codeword c starts at τ-time `start` and takes `airtime` τ on this channel (τ: one
//! codeword's airtime at the title's bitrate). A [`ChannelPacer`] walks that timetable on
//! the caller's clock from the broadcast's epoch: each transmission is one codeword paced
//! by a [`Pacer`] whose bitrate makes the codeword last its airtime (its n stored packets
//! spread evenly over it, in the same member-run bursts as a unicast session), anchored at
//! the transmission's exact start, so rounding never accumulates. The FDT goes out before a
//! codeword at most every [`FDT_INTERVAL_NS`]. A channel never ends: its broadcast is
//! stopped from outside.

use std::sync::Arc;

use isnode_broadcast::{Plan, Ratio, Transmission};
use isnode_layout::Layout;

use crate::pacer::{Pacer, PacerConfig, PacerError, Step};

/// The FDT is sent on a channel at most this often (before a codeword).
pub const FDT_INTERVAL_NS: u64 = 1_000_000_000;

/// Pacing of one channel of a broadcast plan.
#[derive(Clone, Debug)]
pub struct ChannelPacer {
    plan: Arc<Plan>,
    channel: usize,
    layout: Layout,
    max_burst: u32,
    /// The broadcast's time origin (τ = 0), ns on the caller's clock: negative for a
    /// broadcast restored after a restart whose epoch is before the clock's zero.
    epoch_ns: i64,
    /// The codeword being sent, and its pacer.
    current: Option<(Transmission, Pacer)>,
    /// When the FDT last went out (`None`: never).
    fdt_sent_ns: Option<u64>,
}

impl ChannelPacer {
    /// Channel `channel` of `plan` over an object of `layout`, its timetable starting at
    /// `epoch_ns`. Fails when the plan does not fit the object or has no such channel.
    pub fn new(
        plan: Arc<Plan>,
        channel: usize,
        layout: Layout,
        max_burst: u32,
        epoch_ns: u64,
    ) -> Result<ChannelPacer, PacerError> {
        if plan.title.codewords != u64::from(layout.codewords()) {
            return Err(PacerError::BadParam("the plan's title is not the object"));
        }
        if channel >= plan.channels.len() {
            return Err(PacerError::BadParam("no such channel in the plan"));
        }
        let mut c = ChannelPacer {
            plan,
            channel,
            layout,
            max_burst,
            epoch_ns: i64::try_from(epoch_ns).unwrap_or(i64::MAX),
            current: None,
            fdt_sent_ns: None,
        };
        c.load(Ratio::ZERO)?;
        Ok(c)
    }

    /// Channel `channel` of `plan` whose timetable started `elapsed_ns` before `now_ns` (a
    /// broadcast restored at its phase after a restart): it goes on with the first
    /// transmission starting at or after now, at the time the timetable gives it.
    pub fn resumed(
        plan: Arc<Plan>,
        channel: usize,
        layout: Layout,
        max_burst: u32,
        (now_ns, elapsed_ns): (u64, u64),
    ) -> Result<ChannelPacer, PacerError> {
        let mut c = ChannelPacer::new(plan, channel, layout, max_burst, now_ns)?;
        let title = &c.plan.title;
        // elapsed · b / (k·E·8) τ, exactly.
        let den = i128::from(title.codeword_payload_bytes) * 8 * 1_000_000_000;
        let now = Ratio::new(
            i128::from(elapsed_ns) * i128::from(title.bitrate_bps.max(1)),
            den.max(1),
        );
        let (now_ns, elapsed_ns) = (i128::from(now_ns), i128::from(elapsed_ns));
        c.epoch_ns = i64::try_from(now_ns - elapsed_ns).unwrap_or(i64::MIN);
        c.load(now)?;
        Ok(c)
    }

    /// The time on the caller's clock of τ-time `t`.
    fn ns_at(&self, t: Ratio) -> u64 {
        let title = &self.plan.title;
        // t · (k·E·8 / b) seconds.
        let num =
            t.numer().max(0) as u128 * u128::from(title.codeword_payload_bytes) * 8 * 1_000_000_000;
        let den = t.denom().max(1) as u128 * u128::from(title.bitrate_bps.max(1));
        let since_epoch = i128::try_from(num / den).unwrap_or(i128::MAX);
        let at = i128::from(self.epoch_ns).saturating_add(since_epoch);
        u64::try_from(at.max(0)).unwrap_or(u64::MAX)
    }

    /// Makes the first transmission starting at or after `t` the current one.
    fn load(&mut self, t: Ratio) -> Result<(), PacerError> {
        let Some(tx) = self.plan.next_transmission(self.channel, t) else {
            self.current = None;
            return Ok(());
        };
        let codeword = u32::try_from(tx.codeword)
            .map_err(|_| PacerError::BadParam("codeword beyond the object"))?;
        // The codeword lasts `airtime` τ: the title's bitrate divided by it (rounded up:
        // never later than the plan).
        let (p, q) = (tx.airtime.numer(), tx.airtime.denom());
        if p <= 0 || q <= 0 {
            return Err(PacerError::BadParam("a transmission without airtime"));
        }
        let rate = (u128::from(self.plan.title.bitrate_bps) * q as u128).div_ceil(p as u128);
        let cfg = PacerConfig {
            layout: self.layout.clone(),
            bitrate_bps: u64::try_from(rate).unwrap_or(u64::MAX).max(1),
            start_codeword: codeword,
            max_burst: self.max_burst,
            fdt_every: u32::MAX,
        };
        let pacer = Pacer::new(cfg, self.ns_at(tx.start))?;
        self.current = Some((tx, pacer));
        Ok(())
    }

    /// Moves past a finished codeword, and past an FDT that is not due yet.
    fn settle(&mut self) {
        for _ in 0..2 {
            let Some((tx, pacer)) = &mut self.current else {
                return;
            };
            if u64::from(pacer.codeword()) != tx.codeword || pacer.is_done() {
                let next = tx.start + tx.airtime;
                if self.load(next).is_err() {
                    self.current = None;
                    return;
                }
                continue;
            }
            let fdt_first = matches!(pacer.peek(u64::MAX), Some(Step::Fdt { .. }));
            let at_ns = pacer.next_due().unwrap_or(0);
            let due = self
                .fdt_sent_ns
                .is_none_or(|s| at_ns.saturating_sub(s) >= FDT_INTERVAL_NS);
            if fdt_first && !due {
                pacer.advance();
            }
            return;
        }
    }

    /// The next step if it is due at `now_ns` (it stays the next step until
    /// [`ChannelPacer::advance`]).
    pub fn peek(&mut self, now_ns: u64) -> Option<Step> {
        self.settle();
        self.current.as_ref()?.1.peek(now_ns)
    }

    /// Marks the current step as sent and moves on.
    pub fn advance(&mut self, now_ns: u64) {
        self.settle();
        if let Some((_, pacer)) = &mut self.current {
            if matches!(pacer.peek(u64::MAX), Some(Step::Fdt { .. })) {
                self.fdt_sent_ns = Some(now_ns);
            }
            pacer.advance();
        }
        self.settle();
    }

    /// When the next step is due, ns (`None`: the plan sends nothing on this channel).
    pub fn next_due(&self) -> Option<u64> {
        self.current.as_ref()?.1.next_due()
    }

    /// The codeword being sent (for read-ahead and eviction).
    pub fn codeword(&self) -> u32 {
        self.current
            .as_ref()
            .map_or(0, |(tx, _)| u32::try_from(tx.codeword).unwrap_or(u32::MAX))
    }

    /// The channel's index in its plan.
    pub fn channel(&self) -> usize {
        self.channel
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use isnode_broadcast::{plan, PlanRequest, Scheme, Title};

    /// k·E of the test parameters (20 symbols of 1024 bytes).
    const CODEWORD_BYTES: u64 = 20 * 1024;
    /// Packets per codeword (k + m).
    const N: usize = 24;

    fn layout(codewords: u64) -> Layout {
        Layout::new(
            isnode_layout::VolumeParams::SMALL,
            codewords * CODEWORD_BYTES,
        )
        .expect("layout")
    }

    fn plan_of(scheme: Scheme, codewords: u64, wait_codewords: u64) -> Arc<Plan> {
        let bitrate_bps = CODEWORD_BYTES * 8; // one codeword per second: τ = 1 s
        let req = PlanRequest {
            title: Title::new(codewords, CODEWORD_BYTES, bitrate_bps).expect("title"),
            max_wait_s: wait_codewords as f64,
            scheme,
            client_cap_bps: None,
        };
        Arc::new(plan(&req).expect("plan"))
    }

    /// Runs `ch` over `[0, until_ns)`; the packets sent per codeword and the FDTs.
    fn run(ch: &mut ChannelPacer, until_ns: u64) -> (Vec<(u32, u32, u64)>, usize) {
        let mut sent = Vec::new();
        let mut fdts = 0;
        for _ in 0..1_000_000 {
            let Some(due) = ch.next_due() else { break };
            if due >= until_ns {
                break;
            }
            match ch.peek(due) {
                Some(Step::Burst(b)) => {
                    for esi in b.esis.clone() {
                        sent.push((b.sbn, esi, due));
                    }
                }
                Some(Step::Fdt { .. }) => fdts += 1,
                None => {}
            }
            ch.advance(due);
        }
        (sent, fdts)
    }

    /// A channel restored after a restart at its phase sends what the uninterrupted channel
    /// sends from the first transmission starting after the restart on, at the same times
    /// (shifted to the restarted clock).
    #[test]
    fn a_restored_channel_keeps_the_phase_of_its_timetable() {
        let plan = plan_of(Scheme::CautiousHarmonic, 12, 3);
        for c in 0..plan.channels.len() {
            let horizon_ns = 30_000_000_000;
            let mut whole = ChannelPacer::new(plan.clone(), c, layout(12), 8, 0).expect("ch");
            let (sent, _) = run(&mut whole, horizon_ns);
            // Restarted 7.3 s into the broadcast, its clock at 1 s then.
            let (elapsed_ns, now_ns) = (7_300_000_000u64, 1_000_000_000u64);
            let mut again =
                ChannelPacer::resumed(plan.clone(), c, layout(12), 8, (now_ns, elapsed_ns))
                    .expect("resumed");
            let (resent, _) = run(&mut again, horizon_ns - elapsed_ns + now_ns);
            let first = plan
                .next_transmission(c, Ratio::new(73, 10))
                .expect("a later transmission");
            let from_ns = (first.start.to_f64() * 1e9).round() as u64;
            let expected: Vec<_> = sent
                .iter()
                .filter(|(_, _, at)| *at + 1 >= from_ns)
                .map(|&(sbn, esi, at)| (sbn, esi, at - elapsed_ns + now_ns))
                .collect();
            assert!(!expected.is_empty(), "channel {c}");
            assert_eq!(resent.len(), expected.len(), "channel {c}");
            for (r, e) in resent.iter().zip(&expected) {
                assert_eq!((r.0, r.1), (e.0, e.1), "channel {c}");
                assert!(r.2.abs_diff(e.2) <= 1, "channel {c}: {r:?} vs {e:?}");
            }
        }
    }

    #[test]
    fn every_transmission_of_the_timetable_goes_out_whole_and_on_time() {
        for scheme in [
            Scheme::Fast,
            Scheme::CautiousHarmonic,
            Scheme::Polyharmonic { m: 2 },
            Scheme::Skyscraper { width: 52 },
        ] {
            timetable_sent_whole(scheme, 12, 3);
        }
    }

    fn timetable_sent_whole(scheme: Scheme, codewords: u64, wait: u64) {
        let plan = plan_of(scheme, codewords, wait);
        let horizon_tau = 40;
        for c in 0..plan.channels.len() {
            let mut ch = ChannelPacer::new(plan.clone(), c, layout(codewords), 8, 0).expect("ch");
            let (sent, fdts) = run(&mut ch, horizon_tau * 1_000_000_000);
            // The timetable's transmissions that end within the horizon, each sent whole.
            let mut t = Ratio::ZERO;
            let mut expected = 0;
            while let Some(tx) = plan.next_transmission(c, t) {
                if tx.start + tx.airtime > Ratio::int(horizon_tau as i128) {
                    break;
                }
                let start_ns = (tx.start.to_f64() * 1e9) as u64;
                let end_ns = ((tx.start + tx.airtime).to_f64() * 1e9) as u64;
                let pkts: Vec<_> = sent
                    .iter()
                    .filter(|(sbn, _, at)| {
                        u64::from(*sbn) == tx.codeword && *at + 1 >= start_ns && *at < end_ns
                    })
                    .collect();
                assert_eq!(
                    pkts.len(),
                    N,
                    "{scheme}: channel {c}, {tx:?}: all {N} packets"
                );
                expected += N;
                t = tx.start + tx.airtime;
            }
            assert!(
                sent.len() >= expected,
                "channel {c}: {} < {expected}",
                sent.len()
            );
            // One FDT per second at most, and at least one.
            assert!(fdts >= 1 && fdts as u64 <= horizon_tau + 1, "{fdts} FDTs");
        }
    }

    #[test]
    fn a_plan_of_another_title_is_refused() {
        let plan = plan_of(Scheme::Fast, 12, 2);
        assert!(ChannelPacer::new(plan.clone(), 0, layout(13), 8, 0).is_err());
        assert!(ChannelPacer::new(plan, 99, layout(12), 8, 0).is_err());
    }
}
