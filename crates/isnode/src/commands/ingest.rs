//! `isnode ingest FILE|-`: probe, then run the prefabrication filter.

use std::fs::File;
use std::io::{BufReader, Seek, SeekFrom};
use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context};
use isnode_store::{IngestOptions, ObjectRecord, Volume};

use crate::cli::IngestArgs;

/// `ingest`.
pub(super) fn run(root: &Path, args: &IngestArgs) -> anyhow::Result<ExitCode> {
    let mut vol =
        Volume::open_or_create(root).with_context(|| format!("opening {}", root.display()))?;
    let rec = ingest_path(&mut vol, &args.file, args)?;
    println!(
        "ingested {:?}: {} bytes, {} bit/s, {:.1} s, {} codewords (k={}, m={}, E={}), TOI {}",
        rec.name,
        rec.size_bytes,
        rec.bitrate_bps,
        rec.duration_s,
        rec.codewords,
        rec.source_symbols,
        rec.repair_symbols,
        rec.symbol_len,
        rec.toi
    );
    Ok(ExitCode::SUCCESS)
}

/// Ingests a file or stdin (`-`) into an open volume.
pub(super) fn ingest_path(
    vol: &mut Volume,
    path: &Path,
    args: &IngestArgs,
) -> anyhow::Result<ObjectRecord> {
    let stdin = path.as_os_str() == "-";
    let name = match (&args.name, stdin) {
        (Some(n), _) => n.clone(),
        (None, true) => bail!("--name is required when ingesting stdin"),
        (None, false) => path
            .file_name()
            .and_then(|n| n.to_str())
            .with_context(|| format!("{} has no usable file name: pass --name", path.display()))?
            .to_string(),
    };
    isnode_store::ingest::validate_name(&name)?;
    if let Some(existing) = vol.catalog().object_by_name(&name)? {
        if !args.replace {
            bail!(
                "an object named {:?} already exists (TOI {}); use --replace to replace it",
                name,
                existing.toi
            );
        }
    }
    let mut file = if stdin {
        spool_stdin(vol, args.size)?
    } else {
        File::open(path).with_context(|| format!("opening {}", path.display()))?
    };
    let len = file
        .metadata()
        .with_context(|| format!("reading the size of {}", path.display()))?
        .len();
    if let Some(expected) = args.size {
        if expected != len {
            bail!(
                "{} is {len} bytes, but --size says {expected}",
                path.display()
            );
        }
    }
    let info =
        isnode_media::probe(&file, len).with_context(|| format!("examining {}", path.display()))?;
    let bitrate_bps = match args.bitrate {
        Some(0) => bail!("--bitrate must be greater than 0"),
        Some(b) => b,
        None => info
            .require_bitrate()
            .with_context(|| format!("cannot tell the bitrate of {}", path.display()))?,
    };
    let opts = IngestOptions {
        name,
        bitrate_bps,
        content_type: args
            .content_type
            .clone()
            .unwrap_or_else(|| info.content_type.to_string()),
        replace: args.replace,
    };
    file.seek(SeekFrom::Start(0))?;
    let bar = crate::progress::bytes(len, "ingest");
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let rec = isnode_store::ingest(vol, &opts, &mut reader, len, &mut |done| {
        bar.set_position(done)
    })
    .with_context(|| format!("ingesting {}", path.display()))?;
    bar.finish_and_clear();
    Ok(rec)
}

/// Copies stdin into an anonymous file in the volume (gone if we crash).
fn spool_stdin(vol: &Volume, expected: Option<u64>) -> anyhow::Result<File> {
    let mut file =
        tempfile::tempfile_in(vol.tmp_dir()).context("creating a spool file for stdin")?;
    let mut stdin = std::io::stdin().lock();
    let copied = std::io::copy(&mut stdin, &mut file).context("reading stdin")?;
    if let Some(expected) = expected {
        if copied < expected {
            bail!("stdin upload is truncated: got {copied} of {expected} bytes");
        }
        if copied > expected {
            bail!("stdin upload is longer than --size: got {copied} bytes, expected {expected}");
        }
    }
    Ok(file)
}
