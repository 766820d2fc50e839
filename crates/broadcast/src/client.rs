//! The receiver's side of a plan: "arriving at time t, which channels do I listen to, from
//! when to when, and when does playback start", and which bytes arrive when.

use serde::Serialize;

use crate::plan::{Lane, Playout, Reception, Run, Segment};
use crate::{Plan, Ratio};

/// Part of one codeword's broadcast that a client keeps: bytes `[lo, hi)` (fractions of the
/// codeword) arrive linearly over `[start + lo·airtime, start + hi·airtime]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Delivery {
    /// The channel it comes on.
    pub channel: usize,
    /// The title's codeword index.
    pub codeword: u64,
    /// When this broadcast of the codeword starts, τ.
    pub start: Ratio,
    /// Its airtime on the channel, τ.
    pub airtime: Ratio,
    /// First fraction of the codeword's bytes kept from it.
    pub lo: Ratio,
    /// End fraction of the codeword's bytes kept from it.
    pub hi: Ratio,
}

impl Delivery {
    /// When the first kept byte arrives.
    pub fn from(&self) -> Ratio {
        self.start + self.lo * self.airtime
    }

    /// When the last kept byte arrives.
    pub fn to(&self) -> Ratio {
        self.start + self.hi * self.airtime
    }
}

/// One channel a client listens to for one segment, from when to when (τ).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Listen {
    /// The channel.
    pub channel: usize,
    /// The segment it is listened to for.
    pub segment: usize,
    /// Start of listening, τ.
    pub from: Ratio,
    /// End of listening, τ.
    pub to: Ratio,
}

/// A client's whole schedule for one arrival.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TuneIn {
    /// When the client arrived, τ.
    pub arrival: Ratio,
    /// When playback of codeword 0 starts, τ (codeword c plays over `[start + c, start + c + 1]`).
    pub playback_start: Ratio,
    /// Channels to listen to, one entry per segment.
    pub listens: Vec<Listen>,
    /// Every kept piece of every codeword.
    pub deliveries: Vec<Delivery>,
}

/// Where a segment's codewords are broadcast: (channel, lane, run).
pub(crate) type Carrier<'a> = (usize, &'a Lane, &'a Run);

/// Every codeword of `seg` from its first broadcast after `from` on `lanes` (channel 0).
pub(crate) fn prefetch(lanes: &[Lane], seg: &Segment, from: Ratio) -> Vec<Delivery> {
    let carriers: Vec<Carrier<'_>> = lanes
        .iter()
        .flat_map(|l| l.runs.iter().map(move |r| (0, l, r)))
        .filter(|(_, _, r)| r.segment == seg.index)
        .collect();
    prefetch_from(&carriers, seg, from)
}

/// Every codeword of `seg` from the carrier that completes it first after `from`; a
/// broadcast in flight at `from` gives its tail now and its head one cycle later.
pub(crate) fn prefetch_from(carriers: &[Carrier<'_>], seg: &Segment, from: Ratio) -> Vec<Delivery> {
    let mut out = Vec::with_capacity(seg.codewords as usize);
    for cw in seg.first_codeword..seg.first_codeword + seg.codewords {
        let best = carriers
            .iter()
            .filter(|(_, _, r)| (r.first_codeword..r.first_codeword + r.codewords).contains(&cw))
            .map(|&(ch, lane, run)| first_after(ch, lane, run, cw, from))
            .min_by(|a, b| done(a).cmp(&done(b)));
        if let Some(pieces) = best {
            out.extend(pieces.into_iter().flatten());
        }
    }
    out
}

fn done(pieces: &[Option<Delivery>; 2]) -> Ratio {
    pieces
        .iter()
        .flatten()
        .map(Delivery::to)
        .max()
        .unwrap_or(Ratio::ZERO)
}

/// The pieces of codeword `cw` of `run` first broadcast after `from`.
fn first_after(ch: usize, lane: &Lane, run: &Run, cw: u64, from: Ratio) -> [Option<Delivery>; 2] {
    let a = run.airtime;
    let u = i128::from(cw - run.first_codeword);
    let base = lane.phase + run.offset + a * Ratio::int(u);
    let k = ((from - base - a) / lane.period).floor() + 1;
    let start = base + lane.period * Ratio::int(k);
    let piece = |start, lo, hi| Delivery {
        channel: ch,
        codeword: cw,
        start,
        airtime: a,
        lo,
        hi,
    };
    if start >= from {
        return [Some(piece(start, Ratio::ZERO, Ratio::ONE)), None];
    }
    let y0 = (from - start) / a;
    [
        Some(piece(start, y0, Ratio::ONE)),
        Some(piece(start + lane.period, Ratio::ZERO, y0)),
    ]
}

/// Bytes (of `codeword_bytes`-byte codewords) that arrive after their playback deadline
/// when codeword c plays over `[playback + c, playback + c + 1]`; partial bytes count whole.
pub(crate) fn late_bytes(deliveries: &[Delivery], playback: Ratio, codeword_bytes: u64) -> u64 {
    deliveries
        .iter()
        .map(|d| {
            let late = late_fraction(d, playback + Ratio::int(i128::from(d.codeword)));
            u64::try_from((late * Ratio::int(i128::from(codeword_bytes))).ceil()).unwrap_or(0)
        })
        .sum()
}

/// The fraction of the codeword's bytes in `d` that arrive after their deadline: byte y
/// arrives at start + y·airtime and plays at `play + y`.
pub(crate) fn late_fraction(d: &Delivery, play: Ratio) -> Ratio {
    let gap = d.start - play; // lateness of byte 0: gap + y·(airtime − 1) > 0 is late
    let slope = d.airtime - Ratio::ONE;
    let (lo, hi) = (d.lo, d.hi);
    if slope == Ratio::ZERO {
        return if gap > Ratio::ZERO {
            hi - lo
        } else {
            Ratio::ZERO
        };
    }
    let y = (Ratio::ZERO - gap) / slope; // the byte that arrives exactly on time
    let late = if slope > Ratio::ZERO {
        hi - y.max(lo)
    } else {
        y.min(hi) - lo
    };
    late.max(Ratio::ZERO).min(hi - lo)
}

impl Plan {
    /// Where each segment's codewords are broadcast, for every segment.
    fn carriers(&self) -> Vec<Vec<Carrier<'_>>> {
        let mut by_segment: Vec<Vec<Carrier<'_>>> = vec![Vec::new(); self.segments.len()];
        for c in &self.channels {
            for lane in &c.lanes {
                for run in &lane.runs {
                    if let Some(v) = by_segment.get_mut(run.segment) {
                        v.push((c.index, lane, run));
                    }
                }
            }
        }
        by_segment
    }

    /// When a client arriving at `arrival` (τ) starts playback.
    pub fn playback_start(&self, arrival: Ratio) -> Ratio {
        match self.playout {
            Playout::FixedDelay(d) => arrival + d,
            Playout::NextFirstSegment => self
                .carriers()
                .first()
                .into_iter()
                .flatten()
                .filter(|(_, _, r)| r.first_codeword == 0)
                .map(|(_, l, r)| arrival.ceil_to_grid(l.phase + r.offset, l.period))
                .min()
                .unwrap_or(arrival),
        }
    }

    /// The schedule of a client arriving at `arrival` (τ): playback start, channels to
    /// listen to and when, and every codeword's arrival.
    pub fn tune_in(&self, arrival: Ratio) -> TuneIn {
        let playback_start = self.playback_start(arrival);
        let carriers = self.carriers();
        let mut listens = Vec::with_capacity(self.segments.len());
        let mut deliveries = Vec::with_capacity(self.title.codewords as usize);
        for (seg, carry) in self.segments.iter().zip(&carriers) {
            let play = playback_start + Ratio::int(i128::from(seg.first_codeword));
            let got = match self.reception {
                Reception::JustInTime => just_in_time(carry, seg, play, arrival)
                    .unwrap_or_else(|| prefetch_from(carry, seg, arrival)),
                Reception::PrefetchFromPlayout => prefetch_from(carry, seg, playback_start),
                Reception::PrefetchFromArrival => prefetch_from(carry, seg, arrival),
            };
            listens.extend(listens_of(seg, &got));
            deliveries.extend(got);
        }
        TuneIn {
            arrival,
            playback_start,
            listens,
            deliveries,
        }
    }
}

/// The listening windows of a segment's deliveries, one per channel.
fn listens_of(seg: &Segment, got: &[Delivery]) -> Vec<Listen> {
    let mut out: Vec<Listen> = Vec::new();
    for d in got {
        match out.iter_mut().find(|l| l.channel == d.channel) {
            Some(l) => {
                l.from = l.from.min(d.from());
                l.to = l.to.max(d.to());
            }
            None => out.push(Listen {
                channel: d.channel,
                segment: seg.index,
                from: d.from(),
                to: d.to(),
            }),
        }
    }
    out
}

/// The latest whole in-order broadcast of `seg` starting in `[arrival, play]`, else the
/// first after the arrival; `None` when no carrier sends the whole segment in order.
fn just_in_time(
    carriers: &[Carrier<'_>],
    seg: &Segment,
    play: Ratio,
    arrival: Ratio,
) -> Option<Vec<Delivery>> {
    let whole = || {
        carriers.iter().filter(|(_, _, r)| {
            r.first_codeword == seg.first_codeword && r.codewords == seg.codewords
        })
    };
    let latest = whole()
        .map(|&(ch, l, r)| (ch, r, play.floor_to_grid(l.phase + r.offset, l.period)))
        .filter(|c| c.2 >= arrival)
        .max_by(|a, b| a.2.cmp(&b.2));
    let earliest = || {
        whole()
            .map(|&(ch, l, r)| (ch, r, arrival.ceil_to_grid(l.phase + r.offset, l.period)))
            .min_by(|a, b| a.2.cmp(&b.2))
    };
    let (ch, run, start) = latest.or_else(earliest)?;
    Some(
        (0..seg.codewords)
            .map(|u| Delivery {
                channel: ch,
                codeword: seg.first_codeword + u,
                start: start + run.airtime * Ratio::int(i128::from(u)),
                airtime: run.airtime,
                lo: Ratio::ZERO,
                hi: Ratio::ONE,
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(start: Ratio, airtime: Ratio) -> Delivery {
        Delivery {
            channel: 0,
            codeword: 0,
            start,
            airtime,
            lo: Ratio::ZERO,
            hi: Ratio::ONE,
        }
    }

    #[test]
    fn late_fraction_cases() {
        // In sync at the playback rate: on time; one τ late: all late.
        assert_eq!(
            late_fraction(&d(Ratio::ZERO, Ratio::ONE), Ratio::ZERO),
            Ratio::ZERO
        );
        assert_eq!(
            late_fraction(&d(Ratio::ONE, Ratio::ONE), Ratio::ZERO),
            Ratio::ONE
        );
        // Half rate starting with playback: bytes after the first arrive late: y > 0.
        assert_eq!(
            late_fraction(&d(Ratio::ZERO, Ratio::int(2)), Ratio::ZERO),
            Ratio::ONE
        );
        // Half rate starting one τ early: on time exactly at the end.
        assert_eq!(
            late_fraction(&d(Ratio::ZERO, Ratio::int(2)), Ratio::ONE),
            Ratio::ZERO
        );
        // Double rate starting half a τ late: byte y late while 1/2 + y/2 > y, i.e. y < 1.
        let fast = d(Ratio::new(1, 2), Ratio::new(1, 2));
        assert_eq!(late_fraction(&fast, Ratio::ZERO), Ratio::ONE);
        // Double rate starting a quarter τ late: late for y < 1/2.
        let fast = d(Ratio::new(1, 4), Ratio::new(1, 2));
        assert_eq!(late_fraction(&fast, Ratio::ZERO), Ratio::new(1, 2));
    }

    #[test]
    fn a_broadcast_in_flight_wraps_to_the_next_cycle() {
        let seg = Segment {
            index: 0,
            first_codeword: 0,
            codewords: 2,
        };
        let run = Run {
            segment: 0,
            first_codeword: 0,
            codewords: 2,
            offset: Ratio::ZERO,
            airtime: Ratio::int(2),
        };
        let lane = Lane::new(Ratio::int(4), Ratio::ZERO, vec![run]);
        let got = prefetch(&[lane], &seg, Ratio::ONE);
        // Codeword 0 is half sent at t = 1: its tail now, its head at 4..5.
        assert_eq!(got.len(), 3);
        assert_eq!((got[0].lo, got[0].from()), (Ratio::new(1, 2), Ratio::ONE));
        assert_eq!((got[1].hi, got[1].to()), (Ratio::new(1, 2), Ratio::int(5)));
        assert_eq!((got[2].from(), got[2].to()), (Ratio::int(2), Ratio::int(4)));
    }
}
