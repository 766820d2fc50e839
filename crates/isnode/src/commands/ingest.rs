//! `isnode ingest FILE|-`: probe, then run the prefabrication filter.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
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
    isnode_store::validate::validate_name(&name)?;
    if let Some(existing_toi) = vol.catalog().complete_toi(&name)? {
        if !args.replace {
            bail!(
                "an object named {name:?} already exists (TOI {existing_toi}); use --replace to replace it"
            );
        }
    }
    let mut file = if stdin {
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

/// The most bytes stdin may bring, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SpoolBound {
    bytes: u64,
    reason: SpoolLimit,
}

/// What bounds the spool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SpoolLimit {
    /// `--size`.
    Size,
    /// `--max-spool-bytes`.
    Flag,
    /// Half the free space of the volume's file system (the object's segments need the rest).
    FreeSpace,
}

/// The spool bound from `--size`, `--max-spool-bytes` and the free bytes (pure).
fn spool_bound(size: Option<u64>, max_spool_bytes: u64, free_bytes: u64) -> SpoolBound {
    let by_free = SpoolBound {
        bytes: free_bytes / 2,
        reason: SpoolLimit::FreeSpace,
    };
    let asked = match size {
        Some(bytes) => SpoolBound {
            bytes,
            reason: SpoolLimit::Size,
        },
        None => SpoolBound {
            bytes: max_spool_bytes,
            reason: SpoolLimit::Flag,
        },
    };
    if asked.bytes.min(max_spool_bytes) <= by_free.bytes {
        SpoolBound {
            bytes: asked.bytes.min(max_spool_bytes),
            reason: if asked.bytes <= max_spool_bytes {
                asked.reason
            } else {
                SpoolLimit::Flag
            },
        }
    } else {
        by_free
    }
}

/// Free bytes (for an unprivileged user) of the file system holding `dir`.
fn free_bytes(dir: &Path) -> anyhow::Result<u64> {
    isnode_store::io::free_bytes(dir)
        .with_context(|| format!("reading the free space of {}", dir.display()))
}

/// Copies stdin into an anonymous file in the volume (gone on error or if we crash),
/// refusing more than `--size`, `--max-spool-bytes` or half the free space.
fn spool_stdin(vol: &Volume, expected: Option<u64>, max_spool_bytes: u64) -> anyhow::Result<File> {
    let bound = spool_bound(expected, max_spool_bytes, free_bytes(&vol.tmp_dir())?);
    if expected.is_some_and(|e| e > bound.bytes) {
        bail!(
            "--size {} is more than the spool may hold ({}): {}",
            expected.unwrap_or(0),
            bound.bytes,
            explain(bound.reason)
        );
    }
    let mut file =
        tempfile::tempfile_in(vol.tmp_dir()).context("creating a spool file for stdin")?;
    let stdin = std::io::stdin().lock();
    let copied = std::io::copy(&mut stdin.take(bound.bytes.saturating_add(1)), &mut file)
        .context("reading stdin")?;
    if let Some(expected) = expected {
        if copied < expected {
            bail!("stdin upload is truncated: got {copied} of {expected} bytes");
        }
        if copied > expected {
            bail!(
                "stdin upload is longer than --size: got more than {expected} bytes (stopped reading)"
            );
        }
    }
    if copied > bound.bytes {
        bail!(
            "stdin brought more than {} bytes: {} (nothing was stored)",
            bound.bytes,
            explain(bound.reason)
        );
    }
    Ok(file)
}

fn explain(reason: SpoolLimit) -> &'static str {
    match reason {
        SpoolLimit::Size => "the --size given",
        SpoolLimit::Flag => "the --max-spool-bytes limit; raise it, or give --size",
        SpoolLimit::FreeSpace => {
            "half the free space of the volume's file system (the object's segments need the rest)"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spool_takes_the_smallest_bound() {
        let b = spool_bound(None, 1000, 10_000);
        assert_eq!((b.bytes, b.reason), (1000, SpoolLimit::Flag));
        let b = spool_bound(None, 1000, 1000);
        assert_eq!((b.bytes, b.reason), (500, SpoolLimit::FreeSpace));
        let b = spool_bound(Some(300), 1000, 10_000);
        assert_eq!((b.bytes, b.reason), (300, SpoolLimit::Size));
        let b = spool_bound(Some(3000), 1000, 10_000);
        assert_eq!((b.bytes, b.reason), (1000, SpoolLimit::Flag));
        let b = spool_bound(Some(3000), 10_000, 4000);
        assert_eq!((b.bytes, b.reason), (2000, SpoolLimit::FreeSpace));
    }
}
