//! `isnode volume create|check|scrub|rebuild`.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use isnode_store::pace::{RealClock, SignalPace};
use isnode_store::rebuild::RebuildProgress;
use isnode_store::scrub::ScrubProgress;
use isnode_store::viewer_pace::{rebuild_floor_bps, FileSignal};
use isnode_store::{CheckOptions, CheckReport, ScrubReport, Volume, VolumeParams};

use crate::cli::{CheckArgs, CreateArgs, RebuildArgs, ScrubArgs};

/// `volume create`.
pub(super) fn create(root: &Path, args: &CreateArgs) -> anyhow::Result<ExitCode> {
    let params = VolumeParams {
        symbol_len: args.symbol_size,
        source_symbols: args.source_symbols,
        repair_symbols: args.repair_symbols,
        members: args.members,
        block_len: args.block_size,
    };
    let vol = Volume::create(root, params, args.member_dirs.clone())
        .with_context(|| format!("creating a volume at {}", root.display()))?;
    println!(
        "created volume {} ({}): {} members, k={} m={} symbol={} B, {} packets of {} B per {} B block",
        root.display(),
        vol.uuid(),
        params.members,
        params.source_symbols,
        params.repair_symbols,
        params.symbol_len,
        params.packets_per_block(),
        params.packet_len(),
        params.block_len
    );
    for (i, m) in vol.members().iter().enumerate() {
        println!("  member {i}: {}", m.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// `volume check [--repair]`: exit status 0 when clean (or fully repaired), 1 while damage remains.
pub(super) fn check(root: &Path, args: &CheckArgs) -> anyhow::Result<ExitCode> {
    let mut vol = Volume::open(root).with_context(|| format!("opening {}", root.display()))?;
    let report = isnode_store::check(
        &mut vol,
        CheckOptions {
            repair: args.repair,
        },
        &mut |_| {},
    )
    .context("checking the volume")?;
    let after = if args.repair && !report.damage.is_empty() && report.unrecoverable.is_empty() {
        // Verify the repair with a fresh pass.
        Some(
            isnode_store::check(&mut vol, CheckOptions { repair: false }, &mut |_| {})
                .context("re-checking")?,
        )
    } else {
        None
    };
    if args.json {
        let v = serde_json::json!({ "report": report, "after_repair": after });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print_report(&report);
        if let Some(a) = &after {
            println!("after repair:");
            print_report(a);
        }
    }
    let damaged = after.as_ref().unwrap_or(&report).damaged();
    Ok(if damaged {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn print_report(r: &CheckReport) {
    println!(
        "checked {} objects, {} blocks, {} packets",
        r.objects, r.blocks, r.packets
    );
    // Only members not ok are named (a line naming a member means it needs care).
    let mut all_ok = true;
    for (m, state) in r.member_states.iter().enumerate() {
        if *state != isnode_store::MemberState::Ok {
            all_ok = false;
            println!("  member {m}: {state}");
        }
    }
    if all_ok {
        println!("  member states: all ok");
    }
    for p in &r.member_problems {
        println!(
            "  {p}{}",
            if r.members_repaired {
                " (recreated)"
            } else {
                ""
            }
        );
    }
    for d in &r.damage {
        println!(
            "  object {:?} member {}: {}{}",
            d.object,
            d.member,
            d.problem,
            if d.repaired { " (repaired)" } else { "" }
        );
    }
    for u in &r.unrecoverable {
        println!("  DATA LOSS: {u}");
    }
    for f in &r.filling {
        println!(
            "  filling: object {:?} (TOI {}): {} of {} codewords committed, {} blocks verified",
            f.object, f.toi, f.front_codewords, f.codewords, f.blocks
        );
    }
    for b in &r.bad_objects {
        println!(
            "  BAD ROW: object {:?} (TOI {}): {} (never served; `isnode ingest --replace` replaces it)",
            b.object, b.toi, b.problem
        );
    }
    if !r.damaged() {
        println!(
            "  {}",
            if r.damage.is_empty() && r.member_problems.is_empty() {
                "clean"
            } else {
                "all damage repaired"
            }
        );
    }
}

/// The pace of a scrub or rebuild: `--rate-bps` (or no limit), slowed down and held
/// back by the viewers of an `isnode serve` on the same volume
/// (`VOLUME/run/viewer-pace.json`, [`isnode_store::viewer_pace`]).
type ViewerFilePace = SignalPace<FileSignal, RealClock>;

fn pace_of(root: &Path, rate_bps: Option<u64>, floor_bps: u64) -> ViewerFilePace {
    let clock = RealClock {
        stop: Arc::new(AtomicBool::new(false)),
    };
    let signal = FileSignal::new(root, rate_bps.filter(|&r| r > 0)).with_floor_bps(floor_bps);
    SignalPace::new(signal, clock)
}

/// Says on stderr how often the server's viewers held the work back.
fn report_viewer_pace(pace: &ViewerFilePace) {
    let held = pace.signal().held_back;
    if held > 0 {
        eprintln!(
            "yielded to the viewers of the server on this volume for about {:.1} s",
            held as f64 * isnode_store::pace::SAMPLE_MS as f64 / 1000.0
        );
    }
}

/// Puts background work at background priority (nice 19, the lowest best-effort I/O
/// level: [`isnode_sys::priority`]) before it starts a thread: beside a server its CPU and
/// reads lose every contest with the viewers'; alone, nothing competes.
fn lower_priority(what: &str) {
    if let Err(e) = isnode_sys::priority::lower_this_thread() {
        eprintln!("{what}: running at normal priority: {e}");
    }
}

/// `volume scrub`: exit status 0 when clean, 1 when damage was found.
pub(super) fn scrub(root: &Path, args: &ScrubArgs) -> anyhow::Result<ExitCode> {
    lower_priority("scrub");
    let vol = Volume::open(root).with_context(|| format!("opening {}", root.display()))?;
    let bar = crate::progress::bytes(0, "scrub");
    let mut pace = pace_of(root, args.rate_bps, 0);
    let started = Instant::now();
    let report = isnode_store::scrub(&vol, &mut pace, &mut |p: ScrubProgress<'_>| {
        bar.set_length(p.bytes_total);
        bar.set_position(p.bytes_done);
    })
    .context("scrubbing the volume")?;
    bar.finish_and_clear();
    report_viewer_pace(&pace);
    let elapsed_s = started.elapsed().as_secs_f64();
    if args.json {
        let v = serde_json::json!({ "report": report, "elapsed_s": elapsed_s });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print_scrub(&report, elapsed_s);
    }
    Ok(if report.damaged() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn print_scrub(r: &ScrubReport, elapsed_s: f64) {
    println!(
        "scrubbed {} objects, {} codewords, {} bytes in {elapsed_s:.1} s ({:.1} MB/s)",
        r.objects,
        r.codewords,
        r.bytes_read,
        r.bytes_read as f64 / elapsed_s.max(1e-9) / 1e6
    );
    println!(
        "{:>6}  {:<10} {:>8} {:>8} {:>9} {:>8} {:>8} {:>7} {:>7}",
        "member", "state", "blocks", "bad", "packets", "missing", "corrupt", "digest", "parity"
    );
    for m in &r.members {
        let state = m.state.as_ref().map_or("?", |s| s.name());
        println!(
            "{:>6}  {:<10} {:>8} {:>8} {:>9} {:>8} {:>8} {:>7} {:>7}",
            m.member,
            state,
            m.blocks,
            m.bad_blocks,
            m.packets,
            m.missing_packets,
            m.corrupt_packets,
            m.digest_mismatches,
            m.parity_mismatches
        );
    }
    println!(
        "{:<24} {:>6} {:>9} {:>7} {:>10} {:>11} {:>6}",
        "object", "toi", "codewords", "parity", "bad blocks", "bad packets", "lost"
    );
    for o in &r.object_results {
        println!(
            "{:<24} {:>6} {:>9} {:>7} {:>10} {:>11} {:>6}",
            o.object,
            o.toi,
            o.codewords,
            o.parity_checked,
            o.bad_blocks,
            o.bad_packets,
            o.unrecoverable_codewords
        );
        for f in &o.findings {
            let mut at = format!("member {}", f.member);
            if let Some(b) = f.block {
                at.push_str(&format!(" block {b}"));
            }
            if let (Some(sbn), Some(esi)) = (f.sbn, f.esi) {
                at.push_str(&format!(" codeword {sbn} symbol {esi}"));
            }
            println!("  object {:?} {at}: {}", o.object, f.problem);
        }
    }
    for p in &r.member_problems {
        println!("  {p}");
    }
    for b in &r.bad_objects {
        println!(
            "  BAD ROW: object {:?} (TOI {}): {}",
            b.object, b.toi, b.problem
        );
    }
    if r.stopped {
        println!("  stopped before the end");
    }
    println!(
        "  {}",
        if r.damaged() {
            "DAMAGE FOUND (repair: `isnode volume check --repair`, or `isnode volume rebuild --member N` for a replaced member)"
        } else {
            "clean"
        }
    );
}

/// `volume rebuild --member N`.
pub(super) fn rebuild(root: &Path, args: &RebuildArgs) -> anyhow::Result<ExitCode> {
    lower_priority("rebuild");
    let mut vol = Volume::open(root).with_context(|| format!("opening {}", root.display()))?;
    if args.member >= vol.params().members {
        anyhow::bail!(
            "member {}: the volume has members 0..{}",
            args.member,
            vol.params().members - 1
        );
    }
    let state = vol.catalog().member_state(args.member)?;
    let start = isnode_store::rebuild::plan_start(&state);
    if start.done_toi > 0 {
        eprintln!(
            "resuming the rebuild of member {}: objects up to TOI {} done ({} bytes)",
            args.member, start.done_toi, start.done_bytes
        );
    }
    let bar = crate::progress::bytes(0, &format!("rebuild member {}", args.member));
    let cap_bps = args.rate_bps.filter(|&r| r > 0);
    let floor_bps = args
        .min_rate_bps
        .unwrap_or_else(|| rebuild_floor_bps(cap_bps));
    let mut pace = pace_of(root, args.rate_bps, floor_bps);
    let started = Instant::now();
    let report = isnode_store::rebuild_member(
        &mut vol,
        args.member,
        &mut pace,
        &mut |p: RebuildProgress<'_>| {
            bar.set_length(p.bytes_total);
            bar.set_position(p.bytes_done);
        },
    )
    .with_context(|| format!("rebuilding member {}", args.member))?;
    bar.finish_and_clear();
    report_viewer_pace(&pace);
    let elapsed_s = started.elapsed().as_secs_f64();
    if args.json {
        let v = serde_json::json!({ "report": report, "elapsed_s": elapsed_s });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "member {}: {} objects, {} bytes rebuilt in {elapsed_s:.1} s ({:.1} MB/s); state {}",
            report.member,
            report.objects_rebuilt,
            report.bytes_written,
            report.bytes_written as f64 / elapsed_s.max(1e-9) / 1e6,
            report.state
        );
    }
    Ok(ExitCode::SUCCESS)
}
