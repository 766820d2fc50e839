//! Titles with renditions (issue 31): `isnode ingest --name NAME FILE1 FILE2 ...` checks
//! that the files are renditions of one title (same container, key frames and duration
//! aligned), ingests each as the object `NAME@i`, then records the title; `ls` lists the
//! titles, `rm NAME` deletes a title with its renditions.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use isnode_media::{check_aligned, AlignmentError, Container, MediaIndex, RenditionTiming};
use isnode_store::{rendition_name, TitleRecord, TitleRendition, Volume};

use crate::cli::{IngestArgs, RmArgs};

/// What a first read of one file found: its index (with its descriptor) and duration.
struct Scan {
    path: PathBuf,
    index: MediaIndex,
    duration_s: f64,
}

/// `ingest --name NAME FILE1 FILE2 ...`.
pub(super) fn ingest(root: &Path, args: &IngestArgs) -> anyhow::Result<ExitCode> {
    let Some(name) = args.name.clone() else {
        bail!("--name is required to ingest several files as one title with renditions");
    };
    isnode_store::validate::validate_name(&name)?;
    if args.bitrate.is_some() || args.size.is_some() || args.content_type.is_some() {
        bail!("--bitrate, --size and --content-type describe one file: a title's renditions are probed each");
    }
    let files: Vec<PathBuf> = std::iter::once(&args.file)
        .chain(&args.renditions)
        .cloned()
        .collect();
    if files.len() > isnode_store::renditions::MAX_TITLE_RENDITIONS {
        bail!(
            "a title has at most {} renditions",
            isnode_store::renditions::MAX_TITLE_RENDITIONS
        );
    }
    if let Some(server) = &args.remote.server {
        if args.encrypt {
            bail!(
                "--encrypt is not built for uploads yet (--server): ingest on the server's volume"
            );
        }
        return upload_title(server, &name, &files, args);
    }
    let mut vol =
        Volume::open_or_create(root).with_context(|| format!("opening {}", root.display()))?;
    if vol.catalog().complete_toi(&name)?.is_some() {
        bail!("an object named {name:?} exists: a title cannot take its name");
    }
    if vol.catalog().title(&name)?.is_some() && !args.replace {
        bail!("a title named {name:?} already exists; use --replace to replace it");
    }
    let scans = files
        .iter()
        .map(|f| scan(f))
        .collect::<anyhow::Result<Vec<_>>>()?;
    check_renditions(&scans)?;
    let title = store_renditions(&mut vol, &name, &scans, args)?;
    vol.put_title(&title, args.replace)?;
    println!(
        "ingested title {name:?}: {} renditions ({})",
        title.renditions.len(),
        title
            .renditions
            .iter()
            .map(|r| r.object.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(ExitCode::SUCCESS)
}

/// `ingest --server URL --name NAME FILE0 FILE1 ...`: the files are checked here as for
/// a local title (nothing is sent when they are not renditions of one title), uploaded one
/// by one as `NAME@i`, then grouped by `PUT /v1/titles/NAME` (which checks them again).
fn upload_title(
    server: &str,
    name: &str,
    files: &[PathBuf],
    args: &IngestArgs,
) -> anyhow::Result<ExitCode> {
    let scans = files
        .iter()
        .map(|f| scan(f))
        .collect::<anyhow::Result<Vec<_>>>()?;
    check_renditions(&scans)?;
    let mut objects = Vec::with_capacity(files.len());
    for (i, f) in files.iter().enumerate() {
        let one = IngestArgs {
            file: f.clone(),
            renditions: Vec::new(),
            name: Some(rendition_name(name, i)),
            bitrate: None,
            content_type: None,
            replace: args.replace,
            size: None,
            max_spool_bytes: args.max_spool_bytes,
            remote: args.remote.clone(),
            encrypt: false,
            node_key_file: None,
        };
        super::remote::upload(server, &one)?;
        objects.push(rendition_name(name, i));
    }
    super::remote::put_title(server, &args.remote, name, &objects, args.replace)?;
    println!(
        "uploaded title {name:?}: {} renditions ({})",
        objects.len(),
        objects.join(", ")
    );
    Ok(ExitCode::SUCCESS)
}

/// Reads `path` once through the indexer and probes its duration.
fn scan(path: &Path) -> anyhow::Result<Scan> {
    if path.as_os_str() == "-" {
        bail!("a title's renditions are files: stdin (-) cannot be one");
    }
    let open = || File::open(path).with_context(|| format!("opening {}", path.display()));
    let file = open()?;
    let len = file
        .metadata()
        .with_context(|| format!("reading the size of {}", path.display()))?
        .len();
    let info =
        isnode_media::probe(&file, len).with_context(|| format!("probing {}", path.display()))?;
    let Some(duration_s) = info.duration_s.filter(|d| d.is_finite() && *d > 0.0) else {
        bail!(
            "{}: its duration is unknown ({}), so it cannot be a rendition",
            path.display(),
            info.require_bitrate()
                .err()
                .map_or(String::new(), |e| e.to_string())
        );
    };
    let mut indexer = isnode_media::Indexer::new();
    let mut reader = BufReader::with_capacity(1 << 20, open()?);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = reader
            .read(&mut buf)
            .with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            break;
        }
        indexer.feed(&buf[..n]);
    }
    Ok(Scan {
        path: path.to_path_buf(),
        index: indexer.finish(),
        duration_s,
    })
}

/// Refuses files that are not renditions of one title: not all MPEG-TS or all fragmented
/// MP4, or key frames or durations that do not match the first file's.
fn check_renditions(scans: &[Scan]) -> anyhow::Result<()> {
    let kind = |s: &Scan| {
        match (s.index.container, &s.index.fragments) {
        (Container::MpegTs, _) => Ok("MPEG-TS"),
        (Container::Mp4, Some(f)) if !f.fragments.is_empty() => Ok("fragmented MP4"),
        _ => Err(anyhow::anyhow!(
            "{} is neither MPEG-TS nor a fragmented MP4 (CMAF): a rendition is served by byte ranges of one of those",
            s.path.display()
        )),
    }
    };
    let first = kind(&scans[0])?;
    for s in &scans[1..] {
        if kind(s)? != first {
            bail!(
                "{} is not {first} like {}: a title's renditions are all MPEG-TS or all fragmented MP4",
                s.path.display(),
                scans[0].path.display()
            );
        }
    }
    let (audio, video): (Vec<&Scan>, Vec<&Scan>) = scans.iter().partition(|s| audio_only(s));
    let Some(reference) = video.first() else {
        bail!("a title needs a rendition with video: every file given is audio-only");
    };
    for a in &audio {
        if a.index.container != Container::Mp4 {
            bail!(
                "{} is audio-only MPEG-TS: a title's audio rendition must be a fragmented MP4 (CMAF)",
                a.path.display()
            );
        }
        if (a.duration_s - reference.duration_s).abs() > AUDIO_DURATION_TOLERANCE_S {
            bail!(
                "{} (audio) lasts {:.3} s but {} lasts {:.3} s: not renditions of one title",
                a.path.display(),
                a.duration_s,
                reference.path.display(),
                reference.duration_s
            );
        }
    }
    let keys: Vec<Vec<f64>> = video
        .iter()
        .map(|s| s.index.points.iter().map(|p| p.time_s).collect())
        .collect();
    let timing: Vec<RenditionTiming<'_>> = keys
        .iter()
        .zip(&video)
        .map(|(k, s)| RenditionTiming {
            key_times_s: k,
            duration_s: s.duration_s,
        })
        .collect();
    let fps = video
        .iter()
        .filter_map(|s| s.index.rendition.as_ref()?.video.as_ref()?.frame_rate)
        .map(|f| f.fps())
        .fold(0.0f64, f64::max);
    let tol = isnode_media::Tolerance::for_frame_rate(fps);
    check_aligned(&timing, tol).map_err(|e| alignment_error(&video, e))?;
    Ok(())
}

/// How far an audio-only rendition's duration may be from the video's: its last AAC
/// frame (at most 1024 samples) and its priming (2048 samples at 48 kHz) cut it off the
/// video frame grid, so a frame and 100 ms is too tight; 200 ms is well under a segment.
const AUDIO_DURATION_TOLERANCE_S: f64 = 0.2;

/// Whether a scanned file is audio-only (no video stream, at least one audio stream): a
/// title's audio rendition, whose key frames need not fall at the video's.
fn audio_only(s: &Scan) -> bool {
    s.index
        .rendition
        .as_ref()
        .is_some_and(|d| d.video.is_none() && !d.audio.is_empty())
}

/// An alignment error naming the files and the time.
fn alignment_error(scans: &[&Scan], e: AlignmentError) -> anyhow::Error {
    let file = |i: usize| {
        scans
            .get(i)
            .map_or(String::new(), |s| s.path.display().to_string())
    };
    match e {
        AlignmentError::Misaligned {
            rendition,
            time_s,
            tolerance_s,
        } => anyhow::anyhow!(
            "{} is not aligned with {}: its key frames differ from the first file's at {time_s:.3} s \
             (tolerance {tolerance_s:.3} s); encode every rendition with the same GOP \
             (e.g. ffmpeg -g 50 -keyint_min 50 -sc_threshold 0)",
            file(rendition),
            file(0)
        ),
        AlignmentError::Duration {
            rendition,
            duration_s,
            expected_s,
        } => anyhow::anyhow!(
            "{} lasts {duration_s:.3} s but {} lasts {expected_s:.3} s: not renditions of one title",
            file(rendition),
            file(0)
        ),
        AlignmentError::NoKeyFrames { rendition } => {
            anyhow::anyhow!("{} has no key frame", file(rendition))
        }
        AlignmentError::NoRenditions => anyhow::anyhow!("no files given"),
    }
}

/// Ingests each scanned file as `NAME@i`; the title that groups them.
fn store_renditions(
    vol: &mut Volume,
    name: &str,
    scans: &[Scan],
    args: &IngestArgs,
) -> anyhow::Result<TitleRecord> {
    let mut renditions = Vec::with_capacity(scans.len());
    // `--encrypt`: one key for the whole title (CMAF: CENC cbcs; MPEG-TS: AES-128 per segment).
    let protect = match args.encrypt {
        true => Some((
            super::protect::node_key(vol.root(), args)?,
            isnode_protect::TitleKey::generate(),
        )),
        false => None,
    };
    for (i, s) in scans.iter().enumerate() {
        let one = IngestArgs {
            file: s.path.clone(),
            renditions: Vec::new(),
            name: Some(rendition_name(name, i)),
            bitrate: None,
            content_type: None,
            replace: args.replace,
            size: None,
            max_spool_bytes: args.max_spool_bytes,
            encrypt: false,
            node_key_file: None,
            remote: Default::default(),
        };
        let rec = match &protect {
            Some((node_key, key)) => {
                super::protect::ingest_rendition(vol, rendition_name(name, i), &one, node_key, key)?
            }
            None => super::ingest::ingest_path(vol, &s.path, &one)?,
        };
        let d = s.index.rendition.as_ref();
        let v = d.and_then(|d| d.video.as_ref());
        renditions.push(TitleRendition {
            object: rec.name,
            bitrate_bps: rec.bitrate_bps,
            width: v.and_then(|v| v.width),
            height: v.and_then(|v| v.height),
            codecs: d.map(|d| d.codecs()).unwrap_or_default(),
        });
    }
    Ok(TitleRecord {
        name: name.to_string(),
        created_unix: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64),
        renditions,
    })
}

/// The titles under `ls`'s objects.
pub(super) fn print_titles(vol: &Volume) -> anyhow::Result<()> {
    print_title_rows(&vol.catalog().titles()?);
    Ok(())
}

/// `titles` as `ls` prints them under its objects (nothing without any).
pub(super) fn print_title_rows(titles: &[isnode_store::TitleRecord]) {
    if titles.is_empty() {
        return;
    }
    println!();
    println!(
        "{:<32} RENDITIONS (object bitrate_bps resolution codecs)",
        "TITLE"
    );
    for t in titles {
        let list: Vec<String> = t
            .renditions
            .iter()
            .map(|r| {
                let res = match (r.width, r.height) {
                    (Some(w), Some(h)) => format!("{w}x{h}"),
                    _ => "-".into(),
                };
                format!("{} {} {res} {}", r.object, r.bitrate_bps, r.codecs)
            })
            .collect();
        println!("{:<32} {}", t.name, list.join("; "));
    }
}

/// `rm NAME` on the local volume: a title with its renditions, else one object.
pub(super) fn rm(root: &Path, args: &RmArgs) -> anyhow::Result<ExitCode> {
    {
        let mut vol = Volume::open(root).with_context(|| format!("opening {}", root.display()))?;
        if vol.catalog().title(&args.name)?.is_some() {
            let t = vol
                .delete_title(&args.name)
                .with_context(|| format!("deleting title {:?}", args.name))?;
            println!(
                "deleted title {:?} and its {} renditions",
                t.name,
                t.renditions.len()
            );
            return Ok(ExitCode::SUCCESS);
        }
    }
    super::objects::rm(root, args)
}
