//! Real encoded media for the end-to-end tests, made by Debian's `ffmpeg`: a test-pattern
//! video in H.264 and a tone in AAC, with a key frame every 2 s, muxed as MPEG-TS, as MP4
//! with its `moov` box at the front (`+faststart`) or at the end (ffmpeg's default).
//!
//! A missing `ffmpeg` or `ffprobe` fails the test that needs it (with what to install):
//! a test never passes because a tool is missing.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The containers the tests use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Container {
    /// MPEG-TS (188-byte packets).
    Ts,
    /// MP4 with `moov` before `mdat` (progressive playback can start at once).
    Mp4MoovFront,
    /// MP4 with `moov` after `mdat` (a player must read the end first).
    Mp4MoovEnd,
}

impl Container {
    fn extension(self) -> &'static str {
        match self {
            Container::Ts => "ts",
            Container::Mp4MoovFront | Container::Mp4MoovEnd => "mp4",
        }
    }
}

/// Seconds between key frames (random-access points) in the made media.
pub(crate) const KEYFRAME_EVERY_S: u32 = 2;

/// Makes `seconds` of media in `dir` (named after the container) and returns its path.
#[track_caller]
pub(crate) fn make(dir: &Path, container: Container, seconds: u32) -> PathBuf {
    let name = format!("{container:?}-{seconds}s.{}", container.extension()).to_lowercase();
    let out = dir.join(name);
    let gop = (25 * KEYFRAME_EVERY_S).to_string();
    let secs = seconds.to_string();
    let mut cmd = Command::new(tool("ffmpeg"));
    cmd.args(["-v", "error", "-y", "-f", "lavfi", "-i"])
        .arg("testsrc2=size=320x240:rate=25")
        .args(["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000"])
        .args(["-t", &secs, "-c:v", "libx264", "-preset", "ultrafast"])
        .args(["-g", &gop, "-keyint_min", &gop, "-sc_threshold", "0"])
        .args(["-b:v", "1000k", "-c:a", "aac", "-b:a", "96k"]);
    match container {
        Container::Ts => cmd.args(["-f", "mpegts"]),
        Container::Mp4MoovFront => cmd.args(["-movflags", "+faststart", "-f", "mp4"]),
        Container::Mp4MoovEnd => cmd.args(["-f", "mp4"]),
    };
    cmd.arg(&out);
    run(cmd, "making test media");
    out
}

/// Encodes one rung of a ladder: `seconds` of a test pattern of `size` (`WxH`) at video
/// bitrate `rate` (`400k`) with a tone (AAC, 32 kbit/s), a key frame every 2 s (the rungs'
/// key frames aligned), to `dir/NAME.ts` (MPEG-TS) or, with `cmaf`, `dir/NAME.mp4`
/// (fragmented MP4, `-movflags +cmaf+global_sidx`: its init segment ends with a `sidx` of
/// the whole file, as DASH packagers write it).
#[track_caller]
pub(crate) fn encode_rung(
    dir: &Path,
    name: &str,
    (size, rate): (&str, &str),
    cmaf: bool,
    seconds: &str,
) -> PathBuf {
    let out = dir.join(if cmaf {
        format!("{name}.mp4")
    } else {
        format!("{name}.ts")
    });
    let src = format!("testsrc2=size={size}:rate=25");
    let mut args = vec!["-v", "error", "-y", "-f", "lavfi", "-i", &src];
    args.extend(["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000"]);
    args.extend(["-map", "0:v", "-map", "1:a", "-c:a", "aac", "-b:a", "32k"]);
    args.extend(["-t", seconds, "-c:v", "libx264", "-preset", "ultrafast"]);
    args.extend(["-b:v", rate, "-maxrate", rate, "-bufsize", rate]);
    args.extend([
        "-g",
        "50",
        "-keyint_min",
        "50",
        "-sc_threshold",
        "0",
        "-r",
        "25",
    ]);
    if cmaf {
        args.extend(["-movflags", "+cmaf+global_sidx"]);
    } else {
        args.extend(["-f", "mpegts"]);
    }
    let mut cmd = Command::new(tool("ffmpeg"));
    cmd.args(&args).arg(&out);
    run(cmd, "encoding a rung");
    out
}

/// The top-level boxes of an MP4 byte string: (type, start, end).
pub(crate) fn top_boxes(b: &[u8]) -> Vec<([u8; 4], usize, usize)> {
    let mut at = 0;
    let mut boxes = Vec::new();
    while at + 8 <= b.len() {
        let size = u32::from_be_bytes(b[at..at + 4].try_into().unwrap()) as usize;
        assert!(
            size >= 8 && at + size <= b.len(),
            "box at {at}: size {size}"
        );
        boxes.push((b[at + 4..at + 8].try_into().unwrap(), at, at + size));
        at += size;
    }
    assert_eq!(at, b.len(), "trailing bytes after the last box");
    boxes
}

/// A CMAF output of `runs` rungs played in turn is one track switch per rung: each rung's
/// initialization segment (`ftyp` + `moov`; a `sidx` only in the first, the title's own
/// head) then its fragments, every run decoding cleanly
/// with ffmpeg (a file demuxer applies the first `moov` only, so the runs are decoded one
/// by one, as a player appends them).
#[track_caller]
pub(crate) fn check_cmaf_runs(out: &Path, runs: usize) {
    let bytes = std::fs::read(out).expect("the output");
    let boxes = top_boxes(&bytes);
    let starts: Vec<usize> = boxes
        .iter()
        .filter(|b| &b.0 == b"ftyp")
        .map(|b| b.1)
        .collect();
    assert_eq!(
        starts.len(),
        runs,
        "one initialization segment per rung played"
    );
    assert_eq!(starts[0], 0);
    for (i, &from) in starts.iter().enumerate() {
        let to = starts.get(i + 1).copied().unwrap_or(bytes.len());
        let part = out.with_extension(format!("part{i}.mp4"));
        std::fs::write(&part, &bytes[from..to]).expect("writing a part");
        let kinds: Vec<[u8; 4]> = top_boxes(&bytes[from..to]).iter().map(|b| b.0).collect();
        assert_eq!(&kinds[..2], &[*b"ftyp", *b"moov"], "part {i}: {kinds:?}");
        // The title's own head (from its first byte) has the `sidx` of the whole file; a
        // rung entered later gets its init segment without it (its offsets would be wrong).
        let sidx = kinds.contains(b"sidx");
        assert_eq!(
            sidx,
            i == 0,
            "part {i}: a sidx only in the first: {kinds:?}"
        );
        assert!(kinds.contains(b"moof"), "part {i} has fragments");
        decodes_cleanly(part.to_str().expect("utf-8 path"));
    }
}

/// `ffmpeg -v error -i INPUT -f null -`: decodes every frame; panics with ffmpeg's
/// complaints if there is any.
#[track_caller]
pub(crate) fn decodes_cleanly(input: &str) {
    let mut cmd = Command::new(tool("ffmpeg"));
    cmd.args(["-v", "error", "-i", input, "-f", "null", "-"]);
    run(cmd, "decoding");
}

/// What `ffprobe` says of `input` (a path or URL): duration in seconds and the codec
/// names of its streams, in order.
#[track_caller]
pub(crate) fn probe(input: &str) -> (f64, Vec<String>) {
    let mut cmd = Command::new(tool("ffprobe"));
    cmd.args([
        "-v",
        "error",
        "-of",
        "json",
        "-show_format",
        "-show_streams",
        input,
    ]);
    let out = run(cmd, "probing");
    let v: serde_json::Value = serde_json::from_slice(&out).expect("ffprobe's JSON");
    let duration_s = v["format"]["duration"]
        .as_str()
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("ffprobe of {input}: no duration in {v}"));
    let codecs = v["streams"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s["codec_name"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    (duration_s, codecs)
}

/// The path of a media tool, or a failure that says what to install.
#[track_caller]
pub(crate) fn tool(name: &str) -> &'static str {
    let path: &'static str = match name {
        "ffmpeg" => "ffmpeg",
        "ffprobe" => "ffprobe",
        other => panic!("unknown media tool {other}"),
    };
    let found = Command::new(path).arg("-version").output();
    assert!(
        found.is_ok_and(|o| o.status.success()),
        "`{name}` is needed by this test and is not installed: install Debian's `ffmpeg` \
         package (`bash scripts/test` does)"
    );
    path
}

#[track_caller]
fn run(mut cmd: Command, what: &str) -> Vec<u8> {
    let line = format!("{cmd:?}");
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: running {line}: {e}"));
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{what}: {line} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Validates an MPD against the DASH schema (ISO/IEC 23009-1's `DASH-MPD.xsd`, vendored in
/// `tests/data/dash-schema`) with Debian's `python3-xmlschema`; panics with the schema's
/// complaint if it does not validate, or saying what to install.
#[track_caller]
pub(crate) fn validate_mpd(mpd: &str) {
    const PYTHON: &str = "/usr/bin/python3";
    const SCRIPT: &str = "import sys, xmlschema\n\
        xmlschema.XMLSchema(sys.argv[1]).validate(sys.argv[2])\n";
    let has = Command::new(PYTHON)
        .args(["-c", "import xmlschema"])
        .output();
    assert!(
        has.is_ok_and(|o| o.status.success()),
        "validating an MPD needs Debian's `python3-xmlschema` ({PYTHON}): install it \
         (`bash scripts/test` does)"
    );
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join("manifest.mpd");
    std::fs::write(&file, mpd).expect("writing the MPD");
    let xsd = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/dash-schema/DASH-MPD.xsd");
    let mut cmd = Command::new(PYTHON);
    cmd.arg("-c").arg(SCRIPT).arg(&xsd).arg(&file);
    run(cmd, "validating the MPD against DASH-MPD.xsd");
}

/// One entry of a rung timeline (`rung_timeline` of `isnode play --stats-json`, unicast or
/// broadcast): why, to what bitrate, at what time of the title.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RungStep {
    /// `start`, `loss`, `rate` or `clean`.
    pub reason: String,
    /// The rung played from then on, bit/s.
    pub to_bitrate_bps: u64,
    /// The segment boundary it switched at (seconds of the title).
    pub media_s: f64,
}

/// Prints a play's rung timeline (for docs/benchmarks.md, `-- --nocapture`) and checks it
/// steps down for loss and later back up once clean: it starts (`start`), a step down for
/// `loss` goes below the first rung, a later `clean` step goes above the rung before it,
/// and every switch is at a later boundary than the one before. Its entries.
#[track_caller]
pub(crate) fn check_down_then_up(stats: &serde_json::Value) -> Vec<RungStep> {
    let timeline = stats["rung_timeline"].as_array().expect("a rung timeline");
    for c in timeline {
        eprintln!(
            "rung: decided {:>6.2} s, switched {:>6.2} s, title {:>5.1} s, {:>7} -> {:>7} bit/s, {}",
            c["decided_at_s"].as_f64().unwrap_or(0.0),
            c["at_s"].as_f64().unwrap_or(0.0),
            c["media_s"].as_f64().unwrap_or(0.0),
            c["from_bitrate_bps"].as_u64().unwrap_or(0),
            c["to_bitrate_bps"].as_u64().unwrap_or(0),
            c["reason"].as_str().unwrap_or("?"),
        );
    }
    let line: Vec<RungStep> = timeline
        .iter()
        .map(|c| RungStep {
            reason: c["reason"].as_str().expect("reason").to_string(),
            to_bitrate_bps: c["to_bitrate_bps"].as_u64().expect("to_bitrate_bps"),
            media_s: c["media_s"].as_f64().expect("media_s"),
        })
        .collect();
    let shown = format!("{line:?}\n{}", serde_json::to_string_pretty(stats).unwrap());
    assert_eq!(line[0].reason, "start", "{shown}");
    let top = line[0].to_bitrate_bps;
    let down = line
        .iter()
        .position(|c| c.reason == "loss")
        .unwrap_or_else(|| panic!("no step down for loss: {shown}"));
    assert!(line[down].to_bitrate_bps < top, "{shown}");
    let up = line[down..]
        .iter()
        .position(|c| c.reason == "clean")
        .unwrap_or_else(|| panic!("no step up after the loss: {shown}"));
    let up = down + up;
    assert!(
        line[up].to_bitrate_bps > line[up - 1].to_bitrate_bps,
        "{shown}"
    );
    assert!(
        line.windows(2).all(|w| w[1].media_s > w[0].media_s),
        "switches at increasing boundaries: {shown}"
    );
    line
}
