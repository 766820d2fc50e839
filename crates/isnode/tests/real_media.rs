//! Real encoded media end to end (issue 10): H.264 video and AAC audio made by `ffmpeg`,
//! muxed as MPEG-TS and as MP4 (`moov` at the front and at the end), ingested, streamed
//! through loss and corruption, and decoded by `ffmpeg` afterwards.
//!
//! These tests need Debian's `ffmpeg` package (`bash scripts/test` installs it); without
//! it they fail, saying so.

mod serve_support;

use std::time::{Duration, Instant};

use serve_support::media::{self, Container};
use serve_support::*;

/// Every container ingests with its probed bitrate and duration, and `cat` gives back the
/// file byte for byte, which `ffmpeg` still decodes.
#[test]
fn real_media_ingests_and_reads_back_identical() {
    let vol = Vol::create(&[]);
    for container in [
        Container::Ts,
        Container::Mp4MoovFront,
        Container::Mp4MoovEnd,
    ] {
        let file = media::make(vol.dir.path(), container, 20);
        let (duration_s, codecs) = media::probe(file.to_str().unwrap());
        assert_eq!(codecs, ["h264", "aac"], "{container:?}: {codecs:?}");
        let name = file.file_name().unwrap().to_str().unwrap().to_string();
        let bytes = vol.add_file(&name, &file);
        let info = run_ok(&["ls", "--volume", vol.root.to_str().unwrap(), "--json"]);
        let list: serde_json::Value = serde_json::from_str(&info).expect("ls --json");
        let rec = list
            .as_array()
            .and_then(|a| a.iter().find(|o| o["name"] == name.as_str()))
            .unwrap_or_else(|| panic!("{name} not listed: {info}"));
        let listed_s = rec["duration_s"].as_f64().unwrap();
        assert!(
            (listed_s - duration_s).abs() < 0.5,
            "{container:?}: catalog says {listed_s} s, ffprobe {duration_s} s"
        );
        let back = vol.path(&format!("{name}.back"));
        let out = std::fs::File::create(&back).unwrap();
        let status = command()
            .args(["cat", "--volume", vol.root.to_str().unwrap(), &name])
            .stdout(out)
            .status()
            .unwrap();
        assert!(status.success(), "isnode cat {name}: {status}");
        assert!(
            std::fs::read(&back).unwrap() == bytes,
            "{container:?}: cat differs"
        );
        media::decodes_cleanly(back.to_str().unwrap());
    }
}

/// Through 5 % bursty loss and 1 % corruption, `play` delivers the MPEG-TS title byte for
/// byte, and `ffmpeg` decodes every frame of it without an error.
#[test]
fn real_media_plays_through_loss_and_corruption() {
    let vol = Vol::create(&[]);
    let file = media::make(vol.dir.path(), Container::Ts, 20);
    let bytes = vol.add_file("clip.ts", &file);
    let server = Server::start(&vol, &[]);
    let damage = [
        "--loss",
        "0.05",
        "--burst",
        "2",
        "--corrupt",
        "0.01",
        "--seed",
        "7",
    ];
    let flags = [
        "--as-fast-as-possible",
        "--timeout-s",
        "5",
        "--max-seconds",
        "60",
    ];
    let extra: Vec<&str> = damage.iter().chain(&flags).copied().collect();
    let deadline = Instant::now() + Duration::from_secs(90);
    let (s, got) = play_to_end(&server, &vol, "clip.ts", "clip", &extra, deadline);
    let out = vol.path("clip.out");
    assert!(
        s["injected_lost"].as_u64().unwrap_or(0) > 0
            && s["injected_corrupt"].as_u64().unwrap_or(0) > 0,
        "no damage was injected: {s}"
    );
    assert!(got == bytes, "output differs from the source: {s}");
    media::decodes_cleanly(out.to_str().unwrap());
}
