//! `isnode demo`: the prefabrication path end to end on the default volume.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{ensure, Context};
use isnode_store::{CheckOptions, IngestOptions, ObjectReader, Volume};

use crate::cli::DemoArgs;

const DEMO_OBJECT: &str = "demo.ts";

/// Runs the demo.
pub fn run(root: &Path, args: &DemoArgs) -> anyhow::Result<ExitCode> {
    let mut vol =
        Volume::open_or_create(root).with_context(|| format!("opening {}", root.display()))?;
    let p = *vol.params();
    println!(
        "== volume {} : {} members, RS(k={}, m={}), {}-byte symbols",
        root.display(),
        p.members,
        p.source_symbols,
        p.repair_symbols,
        p.symbol_len
    );

    // 1. A test stream.
    let cfg = isnode_media::TsGenConfig {
        bitrate_bps: args.bitrate,
        duration_s: args.duration,
        seed: 7,
    };
    let mut original = Vec::new();
    isnode_media::generate_ts(&cfg, &mut original)?;
    let info = isnode_media::probe(&original, original.len() as u64)?;
    println!(
        "== generated {} s of {} at {} bit/s: {} bytes; detected {} at {} bit/s",
        args.duration,
        info.container,
        args.bitrate,
        original.len(),
        info.container,
        info.bitrate_bps.map_or("?".to_string(), |b| b.to_string())
    );

    // 2. Ingest: cut, encode, frame, checksum, write.
    let opts = IngestOptions {
        name: DEMO_OBJECT.into(),
        bitrate_bps: info.require_bitrate()?,
        content_type: info.content_type.into(),
        replace: true,
    };
    let t = Instant::now();
    let rec = isnode_store::ingest(
        &mut vol,
        &opts,
        &mut original.as_slice(),
        original.len() as u64,
        &mut |_| {},
    )?;
    let secs = t.elapsed().as_secs_f64();
    println!(
        "== ingested {:?} in {:.2} s ({:.0} MB/s): {} codewords, {} packets on disk",
        rec.name,
        secs,
        original.len() as f64 / secs / 1e6,
        rec.codewords,
        (0..p.members)
            .map(|m| isnode_store::Layout::new(p, rec.size_bytes)
                .map(|l| l.member_packets(m))
                .unwrap_or(0))
            .sum::<u64>()
    );
    println!("== catalog:");
    super::objects::ls(root, &crate::cli::LsArgs { json: false })?;

    // 3. Lose a member and read back through the code.
    let member = p.members / 2;
    let member_dir = vol.members()[member as usize].clone();
    let aside = PathBuf::from(format!("{}.failed-demo", member_dir.display()));
    let _ = std::fs::remove_dir_all(&aside);
    std::fs::rename(&member_dir, &aside).with_context(|| format!("taking member {member} away"))?;
    println!(
        "== member {member} failed ({} moved away)",
        member_dir.display()
    );
    let result = read_back(&vol, &original);
    let report = isnode_store::check(&mut vol, CheckOptions { repair: false }, &mut |_| {})?;
    println!(
        "== volume check: {} damaged segment(s), data lost: {}",
        report.damage.len(),
        !report.unrecoverable.is_empty()
    );
    for d in report.damage.iter().take(3) {
        println!("   member {}: {}", d.member, d.problem);
    }

    // 4. Rebuild the member from the others.
    let t = Instant::now();
    let repaired = isnode_store::check(&mut vol, CheckOptions { repair: true }, &mut |_| {})?;
    let verify = isnode_store::check(&mut vol, CheckOptions { repair: false }, &mut |_| {})?;
    println!(
        "== repair rebuilt {} segment(s) in {:.2} s; re-check: {}",
        repaired.damage.iter().filter(|d| d.repaired).count(),
        t.elapsed().as_secs_f64(),
        if verify.damaged() { "DAMAGED" } else { "clean" }
    );
    std::fs::remove_dir_all(&aside).with_context(|| format!("removing {}", aside.display()))?;
    result?;
    ensure!(
        !verify.damaged(),
        "the volume is still damaged after repair"
    );
    println!("== demo passed: bytes identical with a member lost, and the member rebuilt");
    Ok(ExitCode::SUCCESS)
}

fn read_back(vol: &Volume, original: &[u8]) -> anyhow::Result<()> {
    let mut reader = ObjectReader::open(vol, DEMO_OBJECT)?;
    let mut out = Vec::with_capacity(original.len());
    let t = Instant::now();
    let stats = reader.copy_to(&mut out, &mut |_| {})?;
    let secs = t.elapsed().as_secs_f64();
    println!(
        "== read back {} bytes in {:.2} s: {} symbols missing, {} rebuilt in {} codewords; identical: {}",
        out.len(),
        secs,
        stats.symbols_missing,
        stats.symbols_rebuilt,
        stats.codewords_decoded,
        if out == original { "yes" } else { "NO" }
    );
    ensure!(out == original, "read-back differs from the original");
    Ok(())
}
