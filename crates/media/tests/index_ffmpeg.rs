//! The time index of real ffmpeg output (H.264 + AAC, a key frame every 2 s) matches what
//! `ffprobe` says of the key frames: the same byte positions, 2 s apart. Fails (never skips)
//! when ffmpeg or ffprobe is missing.

use std::path::Path;
use std::process::Command;

use isnode_media::{Container, Indexer};

fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e} (install Debian's ffmpeg package)"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn make(dir: &Path, name: &str, extra: &[&str]) -> Vec<u8> {
    let out = dir.join(name);
    run(Command::new("ffmpeg")
        .args([
            "-v",
            "error",
            "-y",
            "-f",
            "lavfi",
            "-i",
            "testsrc2=size=160x120:rate=25",
        ])
        .args([
            "-f",
            "lavfi",
            "-i",
            "sine=frequency=440:sample_rate=48000",
            "-t",
            "10",
        ])
        .args([
            "-c:v",
            "libx264",
            "-preset",
            "ultrafast",
            "-g",
            "50",
            "-keyint_min",
            "50",
        ])
        .args(["-sc_threshold", "0", "-c:a", "aac"])
        .args(extra)
        .arg(&out));
    std::fs::read(&out).unwrap()
}

/// Byte positions of the video key frames, from ffprobe.
fn key_positions(dir: &Path, name: &str) -> Vec<u64> {
    let csv = run(Command::new("ffprobe")
        .args(["-v", "error", "-select_streams", "v", "-of", "csv"])
        .args(["-show_entries", "packet=pos,flags"])
        .arg(dir.join(name)));
    csv.lines()
        .filter(|l| l.contains(",K"))
        .filter_map(|l| l.split(',').nth(1)?.parse().ok())
        .collect()
}

fn check(dir: &Path, name: &str, extra: &[&str], container: Container, front: Option<bool>) {
    let data = make(dir, name, extra);
    let mut ix = Indexer::new();
    for c in data.chunks(65_536) {
        ix.feed(c);
    }
    let index = ix.finish();
    assert_eq!(index.container, container);
    assert_eq!(index.moov_at_front, front);
    let offsets: Vec<u64> = index.points.iter().map(|p| p.offset_bytes).collect();
    assert_eq!(offsets, key_positions(dir, name), "{name}");
    assert_eq!(index.points.len(), 5, "{name}");
    for (i, p) in index.points.iter().enumerate() {
        assert!((p.time_s - 2.0 * i as f64).abs() < 0.05, "{name}: {p:?}");
    }
}

#[test]
fn ffmpeg_ts_and_mp4_key_frames() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    check(d, "a.ts", &["-f", "mpegts"], Container::MpegTs, None);
    check(
        d,
        "front.mp4",
        &["-movflags", "+faststart", "-f", "mp4"],
        Container::Mp4,
        Some(true),
    );
    check(d, "end.mp4", &["-f", "mp4"], Container::Mp4, Some(false));
}
