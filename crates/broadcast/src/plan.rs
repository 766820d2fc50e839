//! A plan: segments on codeword boundaries, channels as periodic timetables of codewords,
//! and the sender's question "at virtual time t, which codeword does channel c send next".
//!
//! Time is in τ, the airtime of one codeword at the title's bitrate (exact [`Ratio`]s).

use serde::Serialize;

use crate::{Nominal, Ratio, Scheme, Title};

/// A segment: a run of whole codewords of the title.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Segment {
    /// Index (0-based; the papers' S_{index+1}).
    pub index: usize,
    /// The title's codeword index of its first codeword.
    pub first_codeword: u64,
    /// Number of codewords.
    pub codewords: u64,
}

/// Consecutive codewords of one segment sent back to back in a lane's cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Run {
    /// The segment they belong to.
    pub segment: usize,
    /// The title's codeword index of the first.
    pub first_codeword: u64,
    /// How many.
    pub codewords: u64,
    /// Start of the first, from the start of the lane's cycle, τ.
    pub offset: Ratio,
    /// Airtime of each codeword on this channel, τ (1 = the title's bitrate; i = b/i).
    pub airtime: Ratio,
}

/// A periodic timetable: its runs repeat every `period`, cycle k starting at
/// `phase + k·period`. A channel's lanes never send at the same time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Lane {
    /// Length of one cycle, τ.
    pub period: Ratio,
    /// Start of cycle 0, τ.
    pub phase: Ratio,
    /// The runs of a cycle, by offset.
    pub runs: Vec<Run>,
}

/// One channel (multicast group): the union of its lanes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Channel {
    /// Index (0-based).
    pub index: usize,
    /// Its timetables.
    pub lanes: Vec<Lane>,
    /// The rate it is paced at (its fastest run), bits per second of source payload.
    pub rate_bps: f64,
    /// Its rate averaged over a cycle (below `rate_bps` where a cycle has idle time).
    pub mean_rate_bps: f64,
}

/// One codeword on a channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Transmission {
    /// The channel.
    pub channel: usize,
    /// The segment.
    pub segment: usize,
    /// The title's codeword index.
    pub codeword: u64,
    /// When its first byte goes out, τ.
    pub start: Ratio,
    /// Its airtime, τ (its last byte goes out at `start + airtime`).
    pub airtime: Ratio,
}

/// When a client starts playback.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Playout {
    /// At the first start of the first segment at or after the arrival.
    NextFirstSegment,
    /// A fixed number of τ after the arrival.
    FixedDelay(Ratio),
}

/// How a client receives each segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reception {
    /// The latest whole in-order broadcast of the segment that starts between the arrival
    /// and the segment's playback start (rate-b-or-faster channels).
    JustInTime,
    /// Every codeword's first broadcast after the playback start (harmonic family).
    PrefetchFromPlayout,
    /// Every codeword's first broadcast after the arrival, from mid-codeword (polyharmonic).
    PrefetchFromArrival,
}

/// The client's figures of a plan, the worst over the evaluated arrivals.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct ClientFigures {
    /// Longest wait from arrival to playback, seconds (supremum over all arrivals).
    pub worst_wait_s: f64,
    /// Highest receive rate, bits per second of source payload.
    pub peak_receive_bps: f64,
    /// Most channels listened to at once.
    pub max_channels: usize,
    /// Most bytes held received but not yet played.
    pub peak_buffer_bytes: u64,
    /// Bytes that arrived after their playback deadline, the most for one arrival.
    pub late_bytes: u64,
    /// Arrivals evaluated.
    pub arrivals: usize,
}

/// A broadcast plan of one title.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Plan {
    /// The scheme.
    pub scheme: Scheme,
    /// The title.
    pub title: Title,
    /// The maximum wait asked for, seconds.
    pub max_wait_s: f64,
    /// The scheme's slot (its unit segment), codewords.
    pub slot_codewords: u64,
    /// Segments, in playback order.
    pub segments: Vec<Segment>,
    /// Channels.
    pub channels: Vec<Channel>,
    /// The client's playback start rule.
    pub playout: Playout,
    /// The client's reception rule.
    pub reception: Reception,
    /// Server bandwidth: the channels' paced rates summed, bits per second.
    pub server_rate_bps: f64,
    /// The client's figures.
    pub client: ClientFigures,
    /// The scheme's closed form at the requested wait, for comparison.
    pub nominal: Nominal,
    /// Notes on how codeword granularity shaped the plan.
    pub notes: Vec<String>,
}

impl Lane {
    /// A lane of one run per `(segment, first_codeword, codewords, offset, airtime)`.
    pub(crate) fn new(period: Ratio, phase: Ratio, runs: Vec<Run>) -> Lane {
        Lane {
            period,
            phase,
            runs,
        }
    }

    /// The earliest transmission of this lane starting at or after `t`.
    fn next_at_or_after(&self, t: Ratio) -> Option<(Run, u64, Ratio)> {
        let mut best: Option<(Run, u64, Ratio)> = None;
        for run in &self.runs {
            let base = self.phase + run.offset;
            let k = ((t - base) / self.period).floor();
            for cycle in [k, k + 1] {
                let start0 = base + self.period * Ratio::int(cycle);
                let u = if t <= start0 {
                    0
                } else {
                    ((t - start0) / run.airtime).ceil()
                };
                if u < i128::from(run.codewords) {
                    let start = start0 + run.airtime * Ratio::int(u);
                    if best.is_none_or(|b| start < b.2) {
                        best = Some((*run, u as u64, start));
                    }
                    break;
                }
            }
        }
        best
    }

    /// Codewords sent per cycle.
    pub fn codewords_per_cycle(&self) -> u64 {
        self.runs.iter().map(|r| r.codewords).sum()
    }
}

impl Channel {
    /// A channel of `lanes`; its rates follow from them and the title's bitrate.
    pub(crate) fn new(index: usize, lanes: Vec<Lane>, title: &Title) -> Channel {
        let peak = lanes
            .iter()
            .flat_map(|l| l.runs.iter())
            .map(|r| 1.0 / r.airtime.to_f64())
            .fold(0.0, f64::max);
        let mean: f64 = lanes
            .iter()
            .map(|l| l.codewords_per_cycle() as f64 / l.period.to_f64())
            .sum();
        Channel {
            index,
            lanes,
            rate_bps: title.rate_bps(peak),
            mean_rate_bps: title.rate_bps(mean),
        }
    }

    /// The first codeword this channel starts sending at or after `t` (τ).
    pub fn next_transmission(&self, t: Ratio) -> Option<Transmission> {
        let (run, u, start) = self
            .lanes
            .iter()
            .filter_map(|l| l.next_at_or_after(t))
            .min_by(|a, b| a.2.cmp(&b.2))?;
        Some(Transmission {
            channel: self.index,
            segment: run.segment,
            codeword: run.first_codeword + u,
            start,
            airtime: run.airtime,
        })
    }
}

impl Plan {
    /// The first codeword channel `channel` starts sending at or after `t` (τ); `None` for
    /// an unknown channel. A sender walks a channel by asking again at `start + airtime`.
    pub fn next_transmission(&self, channel: usize, t: Ratio) -> Option<Transmission> {
        self.channels.get(channel)?.next_transmission(t)
    }

    /// Server bandwidth in multiples of the title's bitrate.
    pub fn server_multiple(&self) -> f64 {
        self.server_rate_bps / self.title.bitrate_bps as f64
    }

    /// The schedule's hyperperiod bound used for arrivals: the longest lane cycle, τ.
    pub fn longest_cycle(&self) -> Ratio {
        self.channels
            .iter()
            .flat_map(|c| c.lanes.iter())
            .map(|l| l.period)
            .max()
            .unwrap_or(Ratio::ONE)
    }
}
