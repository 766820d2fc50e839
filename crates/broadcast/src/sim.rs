//! The proof by simulation: a virtual clock runs a client's tune-in schedule for many
//! arrivals and checks every byte against its playback deadline, measuring the wait,
//! the channels and rate received at once, and the buffer.

use serde::Serialize;

use crate::client::{late_fraction, TuneIn};
use crate::plan::Playout;
use crate::{Plan, Ratio};

/// Which arrivals to simulate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrivals {
    /// Every slot boundary over the longest channel cycle, each also just after the
    /// boundary (the worst wait), plus `random` arrivals at random instants of the cycle.
    WholePeriod {
        /// Random arrivals.
        random: usize,
        /// Seed of the random arrivals.
        seed: u64,
    },
    /// At most `boundaries` slot boundaries spread evenly over the longest cycle (each
    /// also just after), plus `random` random arrivals.
    Sample {
        /// Slot boundaries.
        boundaries: usize,
        /// Random arrivals.
        random: usize,
        /// Seed of the random arrivals.
        seed: u64,
    },
}

/// What one arrival saw.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct ArrivalReport {
    /// The arrival, τ.
    pub arrival: Ratio,
    /// Wait until playback, seconds.
    pub wait_s: f64,
    /// Bytes that arrived after their playback deadline.
    pub late_bytes: u64,
    /// Codewords with at least one late byte.
    pub late_codewords: u64,
    /// Most channels listened to at once.
    pub max_channels: usize,
    /// Highest receive rate, bit/s.
    pub peak_receive_bps: f64,
    /// Most bytes held received but not yet played.
    pub peak_buffer_bytes: u64,
}

/// The simulation of many arrivals.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SimReport {
    /// Each arrival.
    pub arrivals: Vec<ArrivalReport>,
    /// Longest wait seen, seconds.
    pub max_wait_s: f64,
    /// Arrivals with late bytes.
    pub late_arrivals: usize,
    /// Most late bytes of one arrival.
    pub max_late_bytes: u64,
    /// Most channels at once.
    pub max_channels: usize,
    /// Highest receive rate, bit/s.
    pub peak_receive_bps: f64,
    /// Largest buffer, bytes.
    pub peak_buffer_bytes: u64,
}

/// A deterministic pseudo-random sequence (splitmix64).
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// The arrival instants of `spec` for `plan`, τ.
pub fn arrivals(plan: &Plan, spec: Arrivals) -> Vec<Ratio> {
    let slot = Ratio::int(i128::from(plan.slot_codewords.max(1)));
    let cycle = plan.longest_cycle();
    let slots = (cycle / slot).ceil().max(1);
    let (boundaries, random, seed) = match spec {
        Arrivals::WholePeriod { random, seed } => (slots, random, seed),
        Arrivals::Sample {
            boundaries,
            random,
            seed,
        } => (slots.min(boundaries.max(1) as i128), random, seed),
    };
    let eps = Ratio::new(1, 1 << 12);
    let mut out = Vec::new();
    for b in 0..boundaries {
        let k = b * slots / boundaries;
        let t = slot * Ratio::int(k);
        out.push(t);
        out.push(t + eps);
    }
    let mut rng = SplitMix(seed);
    let scale = 1u64 << 20;
    for _ in 0..random {
        let frac = Ratio::new(i128::from(rng.next() % scale), i128::from(scale));
        out.push(cycle * frac);
    }
    out
}

/// Runs one arrival.
pub fn run_arrival(plan: &Plan, arrival: Ratio) -> ArrivalReport {
    let tune = plan.tune_in(arrival);
    let bytes = plan.title.codeword_payload_bytes;
    let (late_bytes, late_codewords) = lateness(plan, &tune, bytes);
    let (max_channels, peak_receive_bps) = listening(plan, &tune);
    ArrivalReport {
        arrival,
        wait_s: plan.title.seconds(tune.playback_start - arrival),
        late_bytes,
        late_codewords,
        max_channels,
        peak_receive_bps,
        peak_buffer_bytes: peak_buffer(plan, &tune),
    }
}

/// Runs every arrival of `spec`.
pub fn simulate(plan: &Plan, spec: Arrivals) -> SimReport {
    let reports: Vec<ArrivalReport> = arrivals(plan, spec)
        .into_iter()
        .map(|a| run_arrival(plan, a))
        .collect();
    let max_f = |f: fn(&ArrivalReport) -> f64| reports.iter().map(f).fold(0.0, f64::max);
    SimReport {
        max_wait_s: max_f(|r| r.wait_s),
        late_arrivals: reports.iter().filter(|r| r.late_bytes > 0).count(),
        max_late_bytes: reports.iter().map(|r| r.late_bytes).max().unwrap_or(0),
        max_channels: reports.iter().map(|r| r.max_channels).max().unwrap_or(0),
        peak_receive_bps: max_f(|r| r.peak_receive_bps),
        peak_buffer_bytes: reports
            .iter()
            .map(|r| r.peak_buffer_bytes)
            .max()
            .unwrap_or(0),
        arrivals: reports,
    }
}

/// Late bytes and late codewords of a tune-in; codewords never received count whole.
fn lateness(plan: &Plan, tune: &TuneIn, bytes: u64) -> (u64, u64) {
    let n = plan.title.codewords as usize;
    let mut covered = vec![Ratio::ZERO; n];
    let mut late = vec![Ratio::ZERO; n];
    for d in &tune.deliveries {
        let Some(i) = usize::try_from(d.codeword).ok().filter(|&i| i < n) else {
            continue;
        };
        covered[i] = covered[i] + (d.hi - d.lo);
        let play = tune.playback_start + Ratio::int(i128::from(d.codeword));
        late[i] = late[i] + late_fraction(d, play);
    }
    let mut late_bytes = 0u64;
    let mut late_codewords = 0u64;
    for (c, l) in covered.iter().zip(&late) {
        let missing = (Ratio::ONE - *c).max(Ratio::ZERO);
        let frac = *l + missing;
        if frac > Ratio::ZERO {
            late_codewords += 1;
            let b = (frac * Ratio::int(i128::from(bytes))).ceil();
            late_bytes += u64::try_from(b).unwrap_or(u64::MAX);
        }
    }
    (late_bytes, late_codewords)
}

/// Most channels listened to at once and the highest sum of their rates.
fn listening(plan: &Plan, tune: &TuneIn) -> (usize, f64) {
    let mut spans: Vec<(usize, Ratio, Ratio)> = tune
        .listens
        .iter()
        .map(|l| (l.channel, l.from, l.to))
        .collect();
    spans.sort_by_key(|a| (a.0, a.1));
    let mut merged: Vec<(usize, Ratio, Ratio)> = Vec::new();
    for s in spans {
        match merged.last_mut() {
            Some(m) if m.0 == s.0 && s.1 <= m.2 => m.2 = m.2.max(s.2),
            _ => merged.push(s),
        }
    }
    // Ends sort before starts at the same instant: back-to-back windows do not overlap.
    let mut events: Vec<(Ratio, i32, usize)> = Vec::with_capacity(merged.len() * 2);
    for (ch, from, to) in merged.into_iter().filter(|m| m.2 > m.1) {
        events.push((from, 1, ch));
        events.push((to, -1, ch));
    }
    events.sort_by_key(|a| (a.0, a.1));
    let (mut count, mut rate, mut max_count, mut max_rate) = (0i64, 0.0f64, 0usize, 0.0f64);
    for (_, delta, ch) in events {
        let r = plan.channels.get(ch).map_or(0.0, |c| c.rate_bps);
        count += i64::from(delta);
        rate += f64::from(delta) * r;
        max_count = max_count.max(usize::try_from(count).unwrap_or(0));
        max_rate = max_rate.max(rate);
    }
    (max_count, max_rate)
}

/// The largest amount of received-but-unplayed bytes (a sweep over slope changes).
fn peak_buffer(plan: &Plan, tune: &TuneIn) -> u64 {
    let bytes = plan.title.codeword_payload_bytes as f64;
    let mut events: Vec<(Ratio, f64)> = Vec::with_capacity(tune.deliveries.len() * 2 + 2);
    for d in &tune.deliveries {
        if d.hi > d.lo {
            let slope = bytes / d.airtime.to_f64();
            events.push((d.from(), slope));
            events.push((d.to(), -slope));
        }
    }
    let end = tune.playback_start + Ratio::int(i128::from(plan.title.codewords));
    events.push((tune.playback_start, -bytes));
    events.push((end, bytes));
    events.sort_by_key(|a| a.0);
    let (mut level, mut slope, mut peak) = (0.0f64, 0.0f64, 0.0f64);
    let mut now = events.first().map_or(Ratio::ZERO, |e| e.0);
    for (t, ds) in events {
        level += slope * (t - now).to_f64();
        now = t;
        slope += ds;
        peak = peak.max(level);
    }
    peak.round() as u64
}

/// The supremum of the wait over all arrivals: for playback at the next start of the first
/// segment, the longest gap between its consecutive starts; else the fixed delay.
pub fn worst_wait(plan: &Plan) -> Ratio {
    if let Playout::FixedDelay(d) = plan.playout {
        return d;
    }
    let firsts = || {
        plan.channels
            .iter()
            .flat_map(|c| c.lanes.iter())
            .flat_map(|l| {
                l.runs
                    .iter()
                    .filter(|r| r.first_codeword == 0)
                    .map(move |r| (l, r))
            })
    };
    let horizon = firsts().map(|(l, _)| l.period).max().unwrap_or(Ratio::ONE);
    let mut starts: Vec<Ratio> = Vec::new();
    for (l, r) in firsts() {
        {
            {
                let mut t = Ratio::ZERO.ceil_to_grid(l.phase + r.offset, l.period);
                while t < horizon {
                    starts.push(t);
                    t = t + l.period;
                }
            }
        }
    }
    starts.sort();
    starts.dedup();
    let Some(&first) = starts.first() else {
        return Ratio::ZERO;
    };
    let mut gap = first + horizon - starts[starts.len() - 1];
    for w in starts.windows(2) {
        gap = gap.max(w[1] - w[0]);
    }
    gap
}
