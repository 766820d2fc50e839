//! `isnode play TITLE --broadcast` of a title with renditions broadcast per rung
//! (docs/protocol.md, "Broadcasting a title with renditions"): the server runs one
//! broadcast per rendition, each on its own channels and groups, described with its `rung`.
//!
//! The receiver orders the rungs as unicast play does ([`ladder_order`]: the video
//! renditions, lowest bitrate first), reads each one's random-access points, and starts on
//! the rung the decision picks ([`crate::abr::Abr`]: the highest not above
//! `--max-bitrate`), or on the one `--rung N` pins. It receives that rung's broadcast as any broadcast (its channels'
//! groups joined and left as its plan says), with the rung decision fed the reception's
//! loss every 100 ms: the source packets missing between those heard on each channel
//! (a channel joined in the middle of a codeword has lost nothing: the receive core's
//! missed symbols would count its first packets, and a rung just switched to, joining all
//! its channels at once, would look lossy and be left again). Not its receive rate: a
//! broadcast's channels run at the plan's rates, and a receiver holding what comes next
//! listens to none. The decision steps up after a clean period as unicast play's does. When the decision switches, the
//! reception's output ends at the first segment boundary at or after what it has written,
//! its groups are left, and the new rung's broadcast is tuned into for the codewords from
//! that boundary on: the output goes on with the new rung's key frame, marked as unicast
//! play marks it (MPEG-TS `discontinuity_indicator`s; a CMAF rung's initialization segment
//! first: [`rung_output`]).
//!
//! A rung switched to comes by its own timetable: the codewords from the boundary on arrive
//! by the times its plan guarantees an arrival now (codeword j by the plan's wait plus j
//! codeword airtimes), so the output waits (a stall) until the first of them is complete;
//! the plans' periodic schedules favour arrivals at the title's start, not at a boundary
//! inside it.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::{check_request, receive, write_stats, BroadcastStats, Part};
use crate::config::PlayConfig;
use crate::impair::ImpairStats;
use crate::play::ladder::{
    change_of, ladder_order, pinned, rung_of, rung_output, start_ladder, start_offset, Entry,
    RateSignal, RungMedia, RungSteer,
};
use crate::play::RungChange;
use isnode_proto::broadcast::BroadcastInfo;

/// The bitrate a rung's broadcast announces for it (the rendition's, as `GET /v1/titles`).
fn bitrate_of(b: &BroadcastInfo) -> u64 {
    b.rung
        .as_ref()
        .map_or(b.object.bitrate_bps, |r| r.bitrate_bps)
}

/// Receives the title `args.name` from its rungs' broadcasts `rungs` (see the module
/// documentation); writes `--out` and `--stats-json`.
pub fn play_title(args: &PlayConfig, rungs: Vec<BroadcastInfo>) -> anyhow::Result<BroadcastStats> {
    if args.http.is_some() {
        bail!("--http is not available with a broadcast yet: use --out FILE or --out -");
    }
    let control = args.control(Duration::from_secs(10))?;
    let chosen = ladder_order(rungs, bitrate_of, |b| b.rung.as_ref().and_then(|r| r.width));
    let chosen = pinned(chosen, args.rung, &args.name)?;
    let ladder: Vec<RungMedia> = chosen
        .iter()
        .map(|b| rung_of(&control, &b.object.name, bitrate_of(b)))
        .collect::<anyhow::Result<_>>()
        .with_context(|| format!("reading the renditions of {}", args.name))?;
    let ids: Vec<String> = chosen.into_iter().map(|b| b.id).collect();
    let clock = Instant::now();
    // No first estimate: probing the server over unicast would add the per-receiver
    // egress a broadcast exists to avoid (docs/protocol.md, "Switching rungs").
    let (mut abr, out) = start_ladder(args, &ladder, &args.name, None)?;
    let first = &ladder[abr.current()];
    let mut timeline = vec![RungChange::start(
        &first.object,
        first.rung.bitrate_bps,
        0.0,
    )];
    let mut receptions: Vec<BroadcastStats> = Vec::new();
    let mut media_s = 0.0;
    loop {
        let i = abr.current();
        let (rung, entry) = (&ladder[i], entry_of(&receptions));
        let from_byte = match entry {
            Entry::First => 0,
            // The point at or before the time is the boundary itself (1 ms: rounding).
            Entry::Switched => start_offset(&rung.points, Some(media_s + 0.001)),
        };
        let a = rung_args(args, rung, clock)?;
        let asked = Instant::now();
        let info = control.broadcast(&ids[i])?;
        let rtt = asked.elapsed();
        check_request(&a, &info)?;
        let out_rung = rung_output(&control, rung, &out, media_s, entry)?;
        // A switch is at a boundary after the rung's first one played (its first point: the
        // title's first key frame, not the bytes before it), even when decided during the
        // plan's wait, before anything was written.
        let first_point = rung.points.first().map_or(0, |p| p.1);
        let mut steer = RungSteer::new(
            &mut abr,
            clock,
            &rung.points,
            from_byte.max(first_point),
            RateSignal::Ignored,
        );
        let part = Part {
            from_byte,
            steer: Some(&mut steer),
        };
        let (stats, cut) = receive(&a, &info, (asked, rtt), out_rung, part)?;
        let decided = steer.decided;
        receptions.push(stats);
        match (cut, decided) {
            (Some(_), Some(d)) => {
                timeline.push(change_of(&ladder, d, clock.elapsed()));
                media_s = d.media_s;
            }
            _ => break,
        }
    }
    let mut end = out.clone();
    end.flush().context("writing the output")?;
    let merged = merge(&args.name, receptions, timeline)?;
    write_stats(args, &merged)?;
    Ok(merged)
}

/// How the next reception's output begins: the title's first, or a rung switched to.
fn entry_of(receptions: &[BroadcastStats]) -> Entry {
    match receptions.is_empty() {
        true => Entry::First,
        false => Entry::Switched,
    }
}

/// The arguments of the reception of `rung`: its object, the output and statistics the
/// caller's, `--max-seconds` counting from `clock`.
fn rung_args(args: &PlayConfig, rung: &RungMedia, clock: Instant) -> anyhow::Result<PlayConfig> {
    let mut a = args.clone();
    a.name = rung.object.clone();
    a.stats_json = None;
    a.out = None;
    let left = args.max_seconds - clock.elapsed().as_secs_f64();
    if left <= 0.0 {
        bail!("--max-seconds ran out between two rungs of the title");
    }
    a.max_seconds = left;
    // Every rung's injected loss follows one schedule, from play's start.
    a.play_started = Some(args.play_started.unwrap_or(clock));
    Ok(a)
}

/// The statistics of the title's play: the last reception's, with the counters summed over
/// every reception, the title, its timeline and each reception.
fn merge(
    title: &str,
    receptions: Vec<BroadcastStats>,
    timeline: Vec<RungChange>,
) -> anyhow::Result<BroadcastStats> {
    let Some(last) = receptions.last() else {
        bail!("{title}: no rung was received");
    };
    let mut m = last.clone();
    let sum = |f: fn(&BroadcastStats) -> u64| receptions.iter().map(f).sum::<u64>();
    m.late_codewords = receptions.iter().map(|r| r.late_codewords).sum();
    m.codewords_lost = receptions.iter().map(|r| r.codewords_lost).sum();
    m.max_late_s = receptions.iter().map(|r| r.max_late_s).fold(0.0, f64::max);
    m.symbols_repaired = sum(|r| r.symbols_repaired);
    m.packets_forged = sum(|r| r.packets_forged);
    m.packets_unverified = sum(|r| r.packets_unverified);
    m.bytes_out = sum(|r| r.bytes_out);
    m.cpu_s = receptions.iter().map(|r| r.cpu_s).sum();
    m.impair = receptions
        .iter()
        .fold(ImpairStats::default(), |a, r| a.plus(r.impair));
    m.authenticated = receptions.iter().all(|r| r.authenticated);
    if let Some(first) = receptions.first() {
        m.wait_s = first.wait_s;
        m.first_byte_s = first.first_byte_s;
        m.arrival_s = first.arrival_s;
    }
    m.title = Some(title.to_string());
    m.rung_timeline = timeline;
    m.rung_receptions = receptions;
    Ok(m)
}
