//! `isnode ls`, `cat`, `gen-ts`.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use isnode_store::{CatalogEntry, ObjectReader, ReadOrder, Volume};

use crate::cli::{CatArgs, GenTsArgs, LsArgs, RmArgs};

/// `ls`.
pub(super) fn ls(root: &Path, args: &LsArgs) -> anyhow::Result<ExitCode> {
    let vol =
        Volume::open_or_create(root).with_context(|| format!("opening {}", root.display()))?;
    let entries = vol.entries()?;
    let filling = vol.filling_objects()?;
    if args.json {
        let mut v: Vec<serde_json::Value> =
            entries.iter().map(entry_json).collect::<Result<_, _>>()?;
        for f in &filling {
            v.push(filling_json(f)?);
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    print_header();
    for e in &entries {
        let (o, status) = match e {
            CatalogEntry::Valid(o) => (o, "ok".to_string()),
            CatalogEntry::Bad(bad) => (&bad.record, format!("bad: {}", bad.problem)),
        };
        print_row(o, &status);
    }
    for f in &filling {
        let status = format!(
            "filling: {} of {} codewords",
            f.front_codewords, f.record.codewords
        );
        print_row(&f.record, &status);
    }
    super::title::print_titles(&vol)?;
    Ok(ExitCode::SUCCESS)
}

/// One `ls --json` entry of a filling object: its record (`"state": "filling"`) with
/// `"status": "filling"`, its `"front_codewords"` and `"origin_etag"`.
fn filling_json(f: &isnode_store::FillingObject) -> serde_json::Result<serde_json::Value> {
    let mut v = serde_json::to_value(&f.record)?;
    if let Some(map) = v.as_object_mut() {
        map.insert("status".into(), "filling".into());
        map.insert("front_codewords".into(), f.front_codewords.into());
        map.insert("origin_etag".into(), f.origin_etag.clone().into());
    }
    Ok(v)
}

/// One `ls --json` entry: the record, with `"status": "ok"`, or `"bad"` and its `"problem"`.
fn entry_json(e: &CatalogEntry) -> serde_json::Result<serde_json::Value> {
    let (rec, status, problem) = match e {
        CatalogEntry::Valid(rec) => (rec, "ok", None),
        CatalogEntry::Bad(bad) => (&bad.record, "bad", Some(bad.problem.clone())),
    };
    let mut v = serde_json::to_value(rec)?;
    if let Some(map) = v.as_object_mut() {
        map.insert("status".into(), status.into());
        if let Some(p) = problem {
            map.insert("problem".into(), p.into());
        }
    }
    Ok(v)
}

/// The header line of `ls`.
pub(super) fn print_header() {
    println!(
        "{:<32} {:>14} {:>12} {:>10} {:>9} {:>12} {:>6} STATUS",
        "NAME", "SIZE_BYTES", "BITRATE_BPS", "DURATION_S", "CODEWORDS", "FEC(k,m,E)", "TOI"
    );
}

/// One object's line of `ls`.
fn print_row(o: &isnode_store::ObjectRecord, status: &str) {
    print_line(
        &RowFields {
            name: &o.name,
            size_bytes: o.size_bytes,
            bitrate_bps: o.bitrate_bps,
            duration_s: o.duration_s,
            codewords: o.codewords,
            fec: (o.source_symbols, o.repair_symbols, o.symbol_len),
            toi: o.toi,
        },
        status,
    );
}

/// What a line of `ls` shows of an object, from the local catalog or a server's list.
pub(super) struct RowFields<'a> {
    /// The object's name.
    pub name: &'a str,
    /// Its size.
    pub size_bytes: u64,
    /// Its bitrate.
    pub bitrate_bps: u64,
    /// Its duration.
    pub duration_s: f64,
    /// Its codewords.
    pub codewords: u32,
    /// Source symbols, repair symbols, symbol length.
    pub fec: (u32, u32, u32),
    /// Its TOI.
    pub toi: u32,
}

/// Prints one line of `ls` under [`print_header`].
pub(super) fn print_line(r: &RowFields<'_>, status: &str) {
    let (k, m, e) = r.fec;
    println!(
        "{:<32} {:>14} {:>12} {:>10.1} {:>9} {:>12} {:>6} {status}",
        r.name,
        r.size_bytes,
        r.bitrate_bps,
        r.duration_s,
        r.codewords,
        format!("{k},{m},{e}"),
        r.toi
    );
}

/// `rm NAME` on the local volume.
pub(super) fn rm(root: &Path, args: &RmArgs) -> anyhow::Result<ExitCode> {
    let mut vol = Volume::open(root).with_context(|| format!("opening {}", root.display()))?;
    let toi = vol
        .delete(&args.name)
        .with_context(|| format!("deleting {:?}", args.name))?;
    println!("deleted {:?} (TOI {toi})", args.name);
    Ok(ExitCode::SUCCESS)
}

/// `cat NAME`: the original bytes to stdout; damage is repaired on the fly and reported on stderr.
pub(super) fn cat(root: &Path, args: &CatArgs) -> anyhow::Result<ExitCode> {
    let vol = Volume::open(root).with_context(|| format!("opening {}", root.display()))?;
    let rec = vol
        .object(&args.name)
        .with_context(|| format!("finding {:?}", args.name))?;
    let mut reader = ObjectReader::for_record(&vol, rec, ReadOrder::Sequential)?;
    let stdout = std::io::stdout();
    // Whole codewords (about 300 KiB each) go to stdout as they are: a buffer in between
    // would only copy them once more.
    let mut out = stdout.lock();
    let stats = reader
        .copy_to(&mut out, &mut |_| {})
        .with_context(|| format!("reading {:?}", args.name))?;
    for e in &stats.member_errors {
        eprintln!("isnode: {e}");
    }
    if stats.symbols_missing + stats.symbols_corrupt > 0 {
        eprintln!(
            "isnode: {} symbols missing and {} corrupt; rebuilt {} source symbols in {} codewords",
            stats.symbols_missing,
            stats.symbols_corrupt,
            stats.symbols_rebuilt,
            stats.codewords_decoded
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `gen-ts`.
pub(super) fn gen_ts(args: &GenTsArgs) -> anyhow::Result<ExitCode> {
    let cfg = isnode_media::TsGenConfig {
        bitrate_bps: args.bitrate,
        duration_s: args.duration,
        seed: args.seed,
    };
    let written = if args.out.as_os_str() == "-" {
        let mut out = BufWriter::new(std::io::stdout().lock());
        let n = isnode_media::generate_ts(&cfg, &mut out)?;
        out.flush()?;
        n
    } else {
        let file =
            File::create(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
        let mut out = BufWriter::new(file);
        let n = isnode_media::generate_ts(&cfg, &mut out)?;
        out.flush()
            .with_context(|| format!("writing {}", args.out.display()))?;
        n
    };
    if args.out.as_os_str() != "-" {
        eprintln!(
            "wrote {} ({written} bytes, {} bit/s, {} s)",
            args.out.display(),
            args.bitrate,
            args.duration
        );
    }
    Ok(ExitCode::SUCCESS)
}
