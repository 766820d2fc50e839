//! Per-scheme construction of segments and channels at codeword granularity.
//! Each builder gets the title's codeword count `n` and the slot `s` (codewords of airtime
//! that fit in the maximum wait) and lays every channel out as exact periodic timetables.

use crate::client::{late_bytes, prefetch};
use crate::plan::{Channel, Lane, Playout, Reception, Run, Segment};
use crate::scheme::{pagoda_layout, skyscraper_series};
use crate::{PlanError, Ratio, Scheme, Title};

/// Most channels a plan may have.
pub const MAX_CHANNELS: u64 = 65_536;

/// What a builder returns.
pub(crate) struct Layout {
    pub(crate) slot_codewords: u64,
    pub(crate) segments: Vec<Segment>,
    pub(crate) lanes: Vec<Vec<Lane>>,
    pub(crate) playout: Playout,
    pub(crate) reception: Reception,
    pub(crate) notes: Vec<String>,
}

fn int(n: u64) -> Ratio {
    Ratio::int(i128::from(n))
}

/// Segments of the given sizes, cut from the title in order.
fn segments_of(sizes: &[u64]) -> Vec<Segment> {
    let mut first = 0;
    sizes
        .iter()
        .enumerate()
        .map(|(index, &codewords)| {
            let s = Segment {
                index,
                first_codeword: first,
                codewords,
            };
            first += codewords;
            s
        })
        .collect()
}

/// `n` codewords in segments of `s` (the last one shorter).
fn equal_sizes(n: u64, s: u64) -> Vec<u64> {
    let count = n.div_ceil(s);
    (0..count).map(|i| s.min(n - i * s)).collect()
}

/// Sizes from a series of slot multiples (`units(i)` for segment i from 1), truncated at `n`.
fn series_sizes(n: u64, s: u64, units: impl Fn(u64) -> u64) -> Vec<u64> {
    let mut sizes = Vec::new();
    let mut left = n;
    let mut i = 1;
    while left > 0 {
        let x = units(i).saturating_mul(s).min(left);
        sizes.push(x);
        left -= x;
        i += 1;
    }
    sizes
}

/// One run carrying all of `seg` at `airtime` per codeword, `offset` into the cycle.
fn whole(seg: &Segment, offset: Ratio, airtime: Ratio) -> Run {
    Run {
        segment: seg.index,
        first_codeword: seg.first_codeword,
        codewords: seg.codewords,
        offset,
        airtime,
    }
}

/// A lane that repeats one whole segment every `period` at `airtime`.
fn single(seg: &Segment, period: Ratio, airtime: Ratio) -> Lane {
    Lane::new(period, Ratio::ZERO, vec![whole(seg, Ratio::ZERO, airtime)])
}

fn check_channels(scheme: Scheme, channels: u64) -> Result<(), PlanError> {
    if channels > MAX_CHANNELS {
        return Err(PlanError::TooManyChannels {
            scheme: scheme.name(),
            channels,
            limit: MAX_CHANNELS,
        });
    }
    Ok(())
}

fn layout(s: u64, segments: Vec<Segment>, lanes: Vec<Vec<Lane>>, rule: Reception) -> Layout {
    Layout {
        slot_codewords: s,
        segments,
        lanes,
        playout: Playout::NextFirstSegment,
        reception: rule,
        notes: Vec::new(),
    }
}

/// Builds `scheme`'s layout for `n` codewords with slot `s` (≥ 1).
pub(crate) fn build(scheme: Scheme, n: u64, s: u64) -> Result<Layout, PlanError> {
    let equal = equal_sizes(n, s);
    if !matches!(scheme, Scheme::Pyramid | Scheme::Skyscraper { .. }) {
        check_channels(scheme, n.div_ceil(s))?;
    }
    match scheme {
        Scheme::Staggered => Ok(staggered(n, s)),
        Scheme::Pyramid => pyramid(n, s, None),
        Scheme::Skyscraper { width } => skyscraper(n, s, width),
        Scheme::Fast => Ok(fast(&equal, s)),
        Scheme::Pagoda => Ok(pagoda(&equal, s)),
        Scheme::Harmonic => Ok(harmonic(&equal, s)),
        Scheme::CautiousHarmonic => Ok(cautious(&equal, s)),
        Scheme::QuasiHarmonic { m } => Ok(quasi(&equal, s, m)),
        Scheme::Polyharmonic { m } => poly(n, s, m),
    }
}

/// The whole title on ⌈n/s⌉ channels started s apart.
fn staggered(n: u64, s: u64) -> Layout {
    let segments = segments_of(&[n]);
    let k = n.div_ceil(s);
    let lanes = (0..k)
        .map(|c| {
            let run = whole(&segments[0], Ratio::ZERO, Ratio::ONE);
            vec![Lane::new(int(n), int(c * s), vec![run])]
        })
        .collect();
    layout(s, segments, lanes, Reception::JustInTime)
}

/// Pyramid sizes for ratio α: x_1 = ⌊α·s⌋, x_{i+1} = ⌊α·x_i⌋, truncated at n; `None` when
/// more than `k` channels would be needed.
fn pyramid_sizes(n: u64, s: u64, alpha: Ratio, k: u64) -> Option<Vec<u64>> {
    let mut sizes = Vec::new();
    let mut left = n;
    let mut prev = s;
    while left > 0 {
        if sizes.len() as u64 == k {
            return None;
        }
        let x = u64::try_from((alpha * int(prev)).floor()).ok()?.max(1);
        let x = x.min(left);
        sizes.push(x);
        left -= x;
        prev = x;
    }
    Some(sizes)
}

/// Pyramid lanes: segment i repeats every min(x_{i−1}, x_i) (x_0 = s) at rate x_i/period ≥ b.
fn pyramid_lanes(segments: &[Segment], s: u64) -> Vec<Vec<Lane>> {
    let mut prev = s;
    segments
        .iter()
        .map(|seg| {
            let period = prev.min(seg.codewords);
            prev = seg.codewords;
            let airtime = Ratio::new(i128::from(period), i128::from(seg.codewords));
            vec![single(seg, int(period), airtime)]
        })
        .collect()
}

/// Σ rates of a pyramid layout, in multiples of b.
fn pyramid_cost(sizes: &[u64], s: u64) -> f64 {
    let mut prev = s;
    sizes
        .iter()
        .map(|&x| {
            let r = x as f64 / prev.min(x) as f64;
            prev = x;
            r
        })
        .sum()
}

/// Pyramid: for each channel count K, the smallest α (in 1/64 steps) whose geometric sizes
/// cover the title; the K of least bandwidth wins (at most `max_k` channels when given).
pub(crate) fn pyramid(n: u64, s: u64, max_k: Option<u64>) -> Result<Layout, PlanError> {
    let mut best: Option<(f64, Vec<u64>, Ratio)> = None;
    for k in 1..=max_k.unwrap_or(48).min(48) {
        let (mut lo, mut hi) = (65i128, 64 * (i128::from(n.div_ceil(s)) + 1));
        if pyramid_sizes(n, s, Ratio::new(hi, 64), k).is_none() {
            continue;
        }
        while lo < hi {
            let mid = (lo + hi) / 2;
            if pyramid_sizes(n, s, Ratio::new(mid, 64), k).is_some() {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        let alpha = Ratio::new(hi, 64);
        if let Some(sizes) = pyramid_sizes(n, s, alpha, k) {
            let cost = pyramid_cost(&sizes, s);
            if best.as_ref().is_none_or(|b| cost < b.0) {
                best = Some((cost, sizes, alpha));
            }
        }
    }
    let (_, sizes, alpha) = best.ok_or(PlanError::TooManyChannels {
        scheme: "pyramid",
        channels: 49,
        limit: 48,
    })?;
    let segments = segments_of(&sizes);
    let lanes = pyramid_lanes(&segments, s);
    let mut l = layout(s, segments, lanes, Reception::JustInTime);
    l.notes.push(format!(
        "alpha = {:.3} with {} channels (alpha searched in steps of 1/64; each channel's \
         period is the previous segment's playing time)",
        alpha.to_f64(),
        sizes.len()
    ));
    Ok(l)
}

/// Skyscraper: segment i is min(f(i), W) slots, repeated every min(f(i), W) slots at rate b
/// (a truncated last segment keeps its slot grid and idles for the rest of its cycle).
fn skyscraper(n: u64, s: u64, width: u64) -> Result<Layout, PlanError> {
    let units = |i| skyscraper_series(i).min(width);
    let sizes = series_sizes(n, s, units);
    check_channels(Scheme::Skyscraper { width }, sizes.len() as u64)?;
    let segments = segments_of(&sizes);
    let lanes = segments
        .iter()
        .map(|seg| {
            let period = int(units(seg.index as u64 + 1) * s);
            vec![single(seg, period, Ratio::ONE)]
        })
        .collect();
    Ok(layout(s, segments, lanes, Reception::JustInTime))
}

/// Fast broadcasting: channel i cycles segments 2^i..2^{i+1}−1 (1-based) at rate b.
fn fast(sizes: &[u64], s: u64) -> Layout {
    let segments = segments_of(sizes);
    let mut lanes = Vec::new();
    let mut first = 0usize;
    let mut width = 1usize;
    while first < segments.len() {
        let group = &segments[first..(first + width).min(segments.len())];
        lanes.push(vec![slot_cycle(group, 1, s)]);
        first += width;
        width *= 2;
    }
    layout(s, segments, lanes, Reception::JustInTime)
}

/// A lane that cycles `group` at rate b, one segment per slot, its slots `stride` apart.
fn slot_cycle(group: &[Segment], stride: u64, s: u64) -> Lane {
    let runs = group
        .iter()
        .enumerate()
        .map(|(u, seg)| whole(seg, int(u as u64 * stride * s), Ratio::ONE))
        .collect();
    Lane::new(int(group.len() as u64 * stride * s), Ratio::ZERO, runs)
}

/// Pagoda-style: each stream interleaves q sub-channels; sub-channel r cycles c_r segments.
fn pagoda(sizes: &[u64], s: u64) -> Layout {
    let segments = segments_of(sizes);
    let mut lanes = Vec::new();
    for (first, q, carried) in pagoda_layout(segments.len() as u64) {
        let mut y = first;
        let end = first + carried;
        let mut stream = Vec::new();
        for r in 0..q {
            let c = (y / q).min(end.saturating_sub(y));
            if c == 0 {
                break;
            }
            let group = &segments[(y - 1) as usize..(y - 1 + c) as usize];
            let mut lane = slot_cycle(group, q, s);
            lane.phase = int(r * s);
            stream.push(lane);
            y += c;
        }
        lanes.push(stream);
    }
    layout(s, segments, lanes, Reception::JustInTime)
}

/// Harmonic (Juhn & Tseng): segment i (from 1) on channel i at b/i.
fn harmonic(sizes: &[u64], s: u64) -> Layout {
    let segments = segments_of(sizes);
    let lanes = segments
        .iter()
        .map(|seg| {
            let i = seg.index as u64 + 1;
            vec![single(seg, int(i * seg.codewords), int(i))]
        })
        .collect();
    layout(s, segments, lanes, Reception::PrefetchFromPlayout)
}

/// Cautious harmonic: S1 at b; S2 and S3 alternating at b; S_i (i ≥ 4) at b/(i−1).
fn cautious(sizes: &[u64], s: u64) -> Layout {
    let segments = segments_of(sizes);
    let mut lanes = vec![vec![single(
        &segments[0],
        int(segments[0].codewords),
        Ratio::ONE,
    )]];
    if segments.len() >= 2 {
        let pair = &segments[1..segments.len().min(3)];
        lanes.push(vec![slot_cycle(pair, 1, s)]);
    }
    for seg in segments.iter().skip(3) {
        let i = seg.index as u64 + 1;
        lanes.push(vec![single(seg, int((i - 1) * seg.codewords), int(i - 1))]);
    }
    layout(s, segments, lanes, Reception::PrefetchFromPlayout)
}

/// Quasi-harmonic: segment i (from 2) in F = i·m'−1 fragments of whole codewords, m' ≤ m
/// the largest that fits and is verified on time; m' = 1 is cautious harmonic's b/(i−1).
fn quasi(sizes: &[u64], s: u64, m: u32) -> Layout {
    let segments = segments_of(sizes);
    let mut lanes = vec![vec![single(
        &segments[0],
        int(segments[0].codewords),
        Ratio::ONE,
    )]];
    let mut reduced = 0usize;
    for seg in segments.iter().skip(1) {
        let i = seg.index as u64 + 1;
        let fitted = (2..=u64::from(m))
            .rev()
            .filter(|&mm| i * mm - 1 <= seg.codewords)
            .find_map(|mm| quasi_lanes(seg, i, mm, s).filter(|l| quasi_on_time(seg, l, i, s)));
        if fitted.is_none() && m > 1 {
            reduced += 1;
        }
        let fallback = || vec![single(seg, int((i - 1) * seg.codewords), int(i - 1))];
        lanes.push(fitted.unwrap_or_else(fallback));
    }
    let mut l = layout(s, segments, lanes, Reception::PrefetchFromPlayout);
    if reduced > 0 {
        l.notes.push(format!(
            "{reduced} segment(s) too short (in codewords) for i*m-1 fragments use the \
             cautious rate b/(i-1)"
        ));
    }
    l
}

/// The lanes of quasi-harmonic segment `i` with m' = `mm`: fragment f covers codewords
/// ⌊f·x/F⌋..⌊(f+1)·x/F⌋; each slot has mm sub-slots; sub-slot r < mm−1 of slot t sends
/// late fragment (r+1)·i−1+(t mod i); the last sub-slot sends early fragment t mod (i−1).
fn quasi_lanes(seg: &Segment, i: u64, mm: u64, s: u64) -> Option<Vec<Lane>> {
    let x = seg.codewords;
    let f_count = i * mm - 1;
    let bound = |f: u64| f * x / f_count;
    let size = |f: u64| bound(f + 1) - bound(f);
    let z = (0..f_count).map(size).max()?;
    let sub = Ratio::new(i128::from(s), i128::from(mm));
    let airtime = sub / int(z);
    let frag = |f: u64, offset: Ratio| Run {
        segment: seg.index,
        first_codeword: seg.first_codeword + bound(f),
        codewords: size(f),
        offset,
        airtime,
    };
    let mut lanes: Vec<Lane> = (0..mm - 1)
        .map(|r| {
            let runs = (0..i)
                .map(|t| frag((r + 1) * i - 1 + t, int(t * s) + sub * int(r)))
                .collect();
            Lane::new(int(i * s), Ratio::ZERO, runs)
        })
        .collect();
    let early = (0..i - 1)
        .map(|t| frag(t, int(t * s) + sub * int(mm - 1)))
        .collect();
    lanes.push(Lane::new(int((i - 1) * s), Ratio::ZERO, early));
    Some(lanes)
}

/// Whether quasi-harmonic lanes of segment `i` deliver on time for every slot phase.
fn quasi_on_time(seg: &Segment, lanes: &[Lane], i: u64, s: u64) -> bool {
    (0..i * (i - 1)).all(|k| {
        let p = int(k * s);
        late_bytes(&prefetch(lanes, seg, p), p, 1) == 0
    })
}

/// Polyharmonic: slots of ⌊s/m⌋ codewords; wait m slots; segment i (from 1) at b/(m+i−1).
fn poly(n: u64, s: u64, m: u32) -> Result<Layout, PlanError> {
    let seg = s / u64::from(m);
    if seg == 0 {
        return Err(PlanError::Parameter {
            scheme: "polyharmonic",
            name: "m",
            value: u64::from(m),
            range: "m <= the wait in codeword airtimes",
        });
    }
    check_channels(Scheme::Polyharmonic { m }, n.div_ceil(seg))?;
    // The whole wait is used: m' = ⌊s/seg⌋ ≥ m slots (lower rates, same wait bound).
    let mm = s / seg;
    let segments = segments_of(&equal_sizes(n, seg));
    let lanes = segments
        .iter()
        .map(|sg| {
            let d = mm + sg.index as u64;
            vec![single(sg, int(d * sg.codewords), int(d))]
        })
        .collect();
    let mut l = layout(seg, segments, lanes, Reception::PrefetchFromArrival);
    l.playout = Playout::FixedDelay(int(mm * seg));
    if mm != u64::from(m) {
        l.notes.push(format!(
            "slots of {seg} codeword(s): the wait holds m' = {mm} slots, so channel i runs \
             at b/(m'+i-1)"
        ));
    }
    Ok(l)
}

/// The channels of a layout.
pub(crate) fn channels(lanes: Vec<Vec<Lane>>, title: &Title) -> Vec<Channel> {
    lanes
        .into_iter()
        .enumerate()
        .map(|(i, l)| Channel::new(i, l, title))
        .collect()
}
