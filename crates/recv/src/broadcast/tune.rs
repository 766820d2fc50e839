//! The receiver's schedule of a broadcast (sans-IO): from the plan the server described and
//! the moment of arrival, which channel to listen to from when to when, for which codewords,
//! and when playback starts. Times are seconds after the arrival.

use std::net::SocketAddr;
use std::ops::Range;

use anyhow::{bail, Context};
use isnode_broadcast::{Figures, Plan, PlanRequest, Reception, Scheme, SchemeParams, Title};
use isnode_proto::broadcast::BroadcastInfo;

/// Largest title (codewords) received from a broadcast: the receive window is the title.
pub const MAX_BROADCAST_CODEWORDS: u64 = 1 << 20;

/// One channel as this receiver uses it.
#[derive(Clone, Debug, PartialEq)]
pub struct ChannelListen {
    /// Index in the plan.
    pub channel: usize,
    /// Group and port of its source packets.
    pub source: SocketAddr,
    /// Group and port of its repair packets.
    pub repair: SocketAddr,
    /// When to join, seconds after the arrival (never negative).
    pub join_s: f64,
    /// When to leave at the latest, seconds after the arrival.
    pub leave_s: f64,
    /// The codewords taken from it.
    pub codewords: Vec<Range<u32>>,
}

impl ChannelListen {
    /// Whether codeword `sbn` is taken from this channel.
    pub fn carries(&self, sbn: u32) -> bool {
        self.codewords.iter().any(|r| r.contains(&sbn))
    }

    /// One past the last codeword taken from it.
    pub fn last_end(&self) -> u32 {
        self.codewords.iter().map(|r| r.end).max().unwrap_or(0)
    }
}

/// A receiver's whole schedule.
#[derive(Clone, Debug, PartialEq)]
pub struct TunePlan {
    /// The channels to listen to, by index.
    pub listens: Vec<ChannelListen>,
    /// When playback of codeword 0 starts, seconds after the arrival (the wait).
    pub playback_start_s: f64,
    /// One codeword's playing time, seconds (τ).
    pub codeword_s: f64,
    /// When the last channel is left at the latest.
    pub end_s: f64,
}

impl TunePlan {
    /// The schedule for the codewords from `first` on only (a reception that starts at a
    /// segment boundary inside the title: a rung switched to): the listens of earlier
    /// codewords are dropped, the rest kept with their times (each codeword still comes by
    /// the plan's guarantee for an arrival now: its playing time from the plan's start).
    pub fn from_codeword(mut self, first: u32) -> TunePlan {
        if first == 0 {
            return self;
        }
        for l in &mut self.listens {
            l.codewords.retain(|r| r.end > first);
            for r in &mut l.codewords {
                r.start = r.start.max(first);
            }
        }
        self.listens.retain(|l| !l.codewords.is_empty());
        self.end_s = self.listens.iter().map(|c| c.leave_s).fold(0.0, f64::max);
        self
    }
}

/// Recomputes the server's plan from its description (planning is deterministic) and
/// checks that it is the same plan.
pub fn plan_of(info: &BroadcastInfo) -> anyhow::Result<Plan> {
    if info.plan.codewords > MAX_BROADCAST_CODEWORDS {
        bail!(
            "the title has {} codewords, more than {}",
            info.plan.codewords,
            MAX_BROADCAST_CODEWORDS
        );
    }
    let params = SchemeParams::from_options(info.width, info.m);
    let scheme = Scheme::parse(&info.scheme, params).context("the broadcast's scheme")?;
    let s = &info.plan;
    let title = Title::new(s.codewords, s.codeword_payload_bytes, s.bitrate_bps)
        .context("the broadcast's title")?;
    // The timetable only: the figures are the server's (simulating them takes seconds for
    // a long title, and the wait would grow by as much).
    let req = PlanRequest {
        title,
        max_wait_s: info.max_wait_s,
        scheme,
        client_cap_bps: None,
    };
    let plan = isnode_broadcast::plan_with(&req, Figures::TimetableOnly)
        .context("planning the broadcast")?;
    if plan.channels.len() != info.channels.len()
        || plan.slot_codewords != s.slot_codewords
        || (plan.server_rate_bps - s.server_rate_bps).abs() > 1.0
    {
        bail!(
            "the broadcast's plan ({} channels, slot {}, {:.0} bit/s) is not the one this \
             client computes ({} channels, slot {}, {:.0} bit/s): a different planner version?",
            info.channels.len(),
            s.slot_codewords,
            s.server_rate_bps,
            plan.channels.len(),
            plan.slot_codewords,
            plan.server_rate_bps
        );
    }
    Ok(plan)
}

/// The schedule of a receiver arriving `arrival_s` after the broadcast's start for the
/// codewords from `first` on ([`tune`] and [`TunePlan::from_codeword`]). From the title's
/// start (0), the plan's own reception; from a codeword inside it (a rung switched to at a
/// segment boundary), every codeword's first broadcast after the arrival (the plan's
/// `prefetch-from-arrival` reception: the earliest each comes, so that the output waits the
/// least for the new rung; the plan's times stay the bound).
pub fn tune_from(
    plan: &Plan,
    info: &BroadcastInfo,
    arrival_s: f64,
    margin_s: f64,
    first: u32,
) -> anyhow::Result<TunePlan> {
    if first == 0 {
        return tune(plan, info, arrival_s, margin_s);
    }
    let mut earliest = plan.clone();
    earliest.reception = Reception::PrefetchFromArrival;
    Ok(tune(&earliest, info, arrival_s, margin_s)?.from_codeword(first))
}

/// The schedule of a receiver arriving `arrival_s` after the broadcast's start, joining
/// each channel `margin_s` before its first needed transmission and leaving it `margin_s`
/// after its last.
pub fn tune(
    plan: &Plan,
    info: &BroadcastInfo,
    arrival_s: f64,
    margin_s: f64,
) -> anyhow::Result<TunePlan> {
    let title = plan.title;
    let arrival = title
        .from_seconds("arrival", arrival_s)
        .context("the broadcast's elapsed time")?;
    let tune = plan.tune_in(arrival);
    let tau_s = title.codeword_airtime_s();
    let after = |t: isnode_broadcast::Ratio| (t - arrival).to_f64() * tau_s;
    let mut listens: Vec<ChannelListen> = Vec::new();
    for l in &tune.listens {
        let seg = plan
            .segments
            .get(l.segment)
            .context("a listen of a segment the plan does not have")?;
        let first = u32::try_from(seg.first_codeword)?;
        let range = first..first + u32::try_from(seg.codewords)?;
        let (join_s, leave_s) = ((after(l.from) - margin_s).max(0.0), after(l.to) + margin_s);
        if let Some(c) = listens.iter_mut().find(|c| c.channel == l.channel) {
            c.join_s = c.join_s.min(join_s);
            c.leave_s = c.leave_s.max(leave_s);
            c.codewords.push(range);
            continue;
        }
        let ch = info
            .channels
            .get(l.channel)
            .context("a channel the description does not have")?;
        listens.push(ChannelListen {
            channel: l.channel,
            source: ch.source.parse().context("a channel's source group")?,
            repair: ch.repair.parse().context("a channel's repair group")?,
            join_s,
            leave_s,
            codewords: vec![range],
        });
    }
    listens.sort_by_key(|c| c.channel);
    let end_s = listens.iter().map(|c| c.leave_s).fold(0.0, f64::max);
    Ok(TunePlan {
        listens,
        playback_start_s: after(tune.playback_start),
        codeword_s: tau_s,
        end_s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listen of `channel` for the codeword ranges `spans` (start, end).
    fn listen(channel: usize, spans: &[(u32, u32)], leave_s: f64) -> ChannelListen {
        ChannelListen {
            channel,
            source: "239.1.1.1:5000".parse().unwrap(),
            repair: "239.1.1.2:5000".parse().unwrap(),
            join_s: 0.0,
            leave_s,
            codewords: spans.iter().map(|&(a, b)| a..b).collect(),
        }
    }

    /// A schedule from a codeword keeps the listens of that codeword on, clipped, and
    /// drops the rest.
    #[test]
    fn a_schedule_from_a_codeword_drops_the_earlier_ones() {
        let tp = TunePlan {
            listens: vec![
                listen(0, &[(0, 2)], 1.0),
                listen(1, &[(2, 4), (8, 9)], 3.0),
                listen(2, &[(4, 8)], 2.0),
            ],
            playback_start_s: 0.5,
            codeword_s: 0.25,
            end_s: 3.0,
        };
        assert_eq!(tp.clone().from_codeword(0), tp);
        let from = tp.from_codeword(5);
        assert_eq!(from.listens.len(), 2);
        assert_eq!(
            from.listens[0].codewords,
            listen(0, &[(8, 9)], 0.0).codewords
        );
        assert_eq!(
            from.listens[1].codewords,
            listen(0, &[(5, 8)], 0.0).codewords
        );
        assert_eq!(from.end_s, 3.0);
        assert_eq!(from.playback_start_s, 0.5);
    }

    /// The wait of a rung switched to at codeword `c0` by a receiver tuning in at `arrival`
    /// with the plan's reception `mode`: the least delay D (τ) after the arrival such that
    /// every codeword j from c0 on is complete by D + (j − c0), i.e. playback from the
    /// boundary without a further stall.
    fn switch_wait(plan: &Plan, mode: Reception, arrival: isnode_broadcast::Ratio, c0: u64) -> f64 {
        let mut p = plan.clone();
        p.reception = mode;
        let t = p.tune_in(arrival);
        let mut done = vec![f64::NEG_INFINITY; plan.title.codewords as usize];
        for d in &t.deliveries {
            let end = (d.start + d.hi * d.airtime).to_f64();
            let slot = &mut done[d.codeword as usize];
            *slot = slot.max(end);
        }
        done.iter()
            .enumerate()
            .skip(c0 as usize)
            .map(|(j, &end)| end - arrival.to_f64() - (j as f64 - c0 as f64))
            .fold(0.0, f64::max)
    }

    /// A switch's wait with every codeword's first broadcast after the switch (what
    /// [`tune_from`] asks for) is never longer than with the plan's own reception, over
    /// arrivals spread across the plan's longest cycle and boundaries at 2, 4 and 6 s of a
    /// 10 s title (the `broadcast_rungs` test's top rung: 600 kbit/s, k = 12 codewords of
    /// 1408 B, a 2 s wait). Figures: `-- --nocapture`.
    #[test]
    fn a_switch_waits_least_with_the_first_broadcast_after_it() {
        let title = Title::new(45, 12 * 1408, 608_000).unwrap();
        for scheme in [Scheme::CautiousHarmonic, Scheme::Fast] {
            let req = PlanRequest {
                title,
                max_wait_s: 2.0,
                scheme,
                client_cap_bps: None,
            };
            let plan = isnode_broadcast::plan_with(&req, Figures::TimetableOnly).unwrap();
            let tau_s = title.codeword_airtime_s();
            let cycle = plan.longest_cycle();
            for media_s in [2.0, 4.0, 6.0] {
                let c0 = (media_s / tau_s) as u64;
                let (mut own, mut first) = (Vec::new(), Vec::new());
                for i in 0..200i128 {
                    let arrival = cycle * isnode_broadcast::Ratio::new(i, 200);
                    own.push(switch_wait(&plan, plan.reception, arrival, c0) * tau_s);
                    first.push(
                        switch_wait(&plan, Reception::PrefetchFromArrival, arrival, c0) * tau_s,
                    );
                }
                let stat = |v: &[f64]| {
                    (
                        v.iter().sum::<f64>() / v.len() as f64,
                        v.iter().copied().fold(0.0, f64::max),
                    )
                };
                let ((own_mean, own_max), (first_mean, first_max)) = (stat(&own), stat(&first));
                eprintln!(
                    "{scheme}: switch at {media_s} s: wait mean {own_mean:.2} s, max {own_max:.2} s with the \
                     plan's reception; mean {first_mean:.2} s, max {first_max:.2} s with the first broadcasts"
                );
                for (a, b) in own.iter().zip(&first) {
                    assert!(b <= &(a + 1e-9), "{scheme} at {media_s} s: {b} > {a}");
                }
            }
        }
    }
}
