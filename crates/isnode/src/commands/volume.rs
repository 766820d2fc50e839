//! `isnode volume create|check`.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use isnode_store::{CheckOptions, CheckReport, Volume, VolumeParams};

use crate::cli::{CheckArgs, CreateArgs};

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
