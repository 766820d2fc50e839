//! `isnode ingest FILE|-`: probe, then run the prefabrication filter.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context};
use isnode_store::spool::{self, SpoolBound};
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

/// The object name of `path`: `--name`, or the file's name (required for stdin).
pub(super) fn object_name(path: &Path, args: &IngestArgs) -> anyhow::Result<String> {
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
    isnode_store::validate::validate_name(&name)?;
    Ok(name)
}

/// Ingests a file or stdin (`-`) into an open volume.
pub(super) fn ingest_path(
    vol: &mut Volume,
    path: &Path,
    args: &IngestArgs,
) -> anyhow::Result<ObjectRecord> {
    let stdin = path.as_os_str() == "-";
    let name = object_name(path, args)?;
    if vol.catalog().title(&name)?.is_some() {
        bail!("{name:?} is a title with renditions: remove it first (`isnode rm {name}`)");
    }
    if let Some(existing_toi) = vol.catalog().complete_toi(&name)? {
        if !args.replace {
            bail!(
                "an object named {name:?} already exists (TOI {existing_toi}); use --replace to replace it"
            );
        }
    }
    let file = if stdin {
        spool_stdin(vol, args.size, args.max_spool_bytes)?
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
    if args.bitrate == Some(0) {
        bail!("--bitrate must be greater than 0");
    }
    let described = spool::describe(&file, len, args.bitrate, args.content_type.clone())
        .with_context(|| format!("examining {}", path.display()))?;
    let opts = IngestOptions {
        name,
        bitrate_bps: described.bitrate_bps,
        content_type: described.content_type,
        replace: args.replace,
    };
    let bar = crate::progress::bytes(len, "ingest");
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let rec = isnode_store::ingest(vol, &opts, &mut reader, len, &mut |done| {
        bar.set_position(done)
    })
    .with_context(|| format!("ingesting {}", path.display()))?;
    bar.finish_and_clear();
    Ok(rec)
}

/// Copies stdin into the volume's spool ([`isnode_store::spool`]: gone on error or if we
/// crash), refusing more than `--size`, `--max-spool-bytes` or half the free space.
pub(super) fn spool_stdin(
    vol: &Volume,
    expected: Option<u64>,
    max_spool_bytes: u64,
) -> anyhow::Result<File> {
    let tmp = vol.tmp_dir();
    let free = isnode_store::io::free_bytes(&tmp)
        .with_context(|| format!("reading the free space of {}", tmp.display()))?;
    let bound = SpoolBound::new(expected, max_spool_bytes, free);
    let mut stdin = std::io::stdin().lock();
    let file =
        spool::spool(&tmp, &mut stdin, expected, bound, &mut |_| {}).map_err(|e| match e {
            isnode_store::StoreError::Truncated { got, expected } => {
                anyhow::anyhow!("stdin upload is truncated: got {got} of {expected} bytes")
            }
            isnode_store::StoreError::BadParams(_) if expected.is_some() => anyhow::anyhow!(
                "stdin upload is longer than --size: got more than {} bytes (stopped reading)",
                expected.unwrap_or(0)
            ),
            e => anyhow::Error::new(e).context("spooling stdin"),
        })?;
    Ok(file)
}
