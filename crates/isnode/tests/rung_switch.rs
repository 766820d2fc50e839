//! `isnode play TITLE` switches rungs (issue 31, item 4): a 3-rung ffmpeg ladder (H.264 +
//! AAC, 2 s GOPs aligned, 30 s, low bitrates) played through an `isnode relay` whose loss
//! rises past what the top rung's FEC repairs (k = 12, m = 4: 25 %; the relay loses 40 %
//! from 5 s to 12 s after its first datagram) and then ends. The stats JSON's rung
//! timeline must step down for loss and back up once clean; ffmpeg must decode the whole
//! output without a complaint (`ffmpeg -v error -i out -f null -`: empty stderr). Once in
//! MPEG-TS (each switch marked with a `discontinuity_indicator`), once in CMAF (the new
//! rung's initialization segment before its fragments; each
//! rung's run decoded on its own: ffmpeg's file demuxer reads one `moov`).
//!
//! `--rung N` pins a rung: the output is that rendition's file. Play starts under a first
//! estimate of the path's rate, probed over HTTP: the top rung on loopback, the middle one
//! through an HTTP front shaped to 1 Mbit/s.
//!
//! These tests need Debian's `ffmpeg` package (`bash scripts/test` installs it); without
//! it they fail, saying so.

mod serve_support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;
use serve_support::media::{decodes_cleanly, probe};
use serve_support::*;

/// The ladder: size, video bitrate.
const LADDER: [(&str, &str); 3] = [
    ("256x144", "200k"),
    ("320x180", "400k"),
    ("480x270", "800k"),
];
/// Seconds of media.
const SECONDS: &str = "30";

/// Encodes the rung `(size, rate)` of a 30 s test pattern with a tone, a key frame every
/// 2 s, to MPEG-TS or (`cmaf`) fragmented MP4.
#[track_caller]
fn encode(dir: &Path, name: &str, rung: (&str, &str), cmaf: bool) -> PathBuf {
    serve_support::media::encode_rung(dir, name, rung, cmaf, SECONDS)
}

/// The ladder ingested as title `name` in a volume of small codewords (k = 12, m = 4).
fn title(cmaf: bool) -> (Vol, Server) {
    let vol = Vol::create(SMALL_SHAPE);
    let files: Vec<PathBuf> = LADDER
        .iter()
        .enumerate()
        .map(|(i, &r)| encode(vol.dir.path(), &format!("r{i}"), r, cmaf))
        .collect();
    let mut args = vec!["ingest", "--name", "show"];
    args.extend(files.iter().map(|f| f.to_str().expect("utf-8 path")));
    let out = isnode(&vol, &args);
    assert!(out.status.success(), "{}", text(&out));
    let server = Server::start(&vol, &[]);
    (vol, server)
}

/// What happens to the server while the title plays.
#[derive(Clone, Copy, PartialEq)]
enum During {
    /// Nothing.
    Nothing,
    /// `kill -9` this long after play starts, and a new server on the same address 300 ms
    /// later (the client resumes its rung's session there).
    KillAndRestartAfter(Duration),
}

/// `isnode play show` from `server` (at most 70 s) with `extra` flags, its output, stats
/// JSON and log at `files` (`(out, stats, log)`).
fn spawn_play(server: &str, extra: &[&str], files: (&Path, &Path, &Path)) -> ChildGuard {
    let (out, stats, log) = files;
    ChildGuard(Some(
        command()
            .args(["play", "show", "--server", server])
            .args(extra)
            .args(["--max-seconds", "70", "--timeout-s", "10"])
            .arg("--out")
            .arg(out)
            .arg("--stats-json")
            .arg(stats)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).expect("the play log"))
            .spawn()
            .expect("running isnode play"),
    ))
}

/// Plays the title through a relay whose loss rises from 5 s to 12 s, `during` happening to
/// the server meanwhile; the stats JSON and the output's path.
fn play_through_relay(
    vol: &Vol,
    server: &mut Server,
    ext: &str,
    during: During,
) -> (Value, PathBuf) {
    let relay_port = free_port().to_string();
    let client_port = free_port().to_string();
    let deadline = Instant::now() + Duration::from_secs(80);
    let mut relay = ChildGuard(Some(
        command()
            .args(["relay", "--listen"])
            .arg(format!("127.0.0.1:{relay_port}"))
            .arg("--to")
            .arg(format!("127.0.0.1:{client_port}"))
            .args(["--seed", "7", "--loss-step", "5:0.4", "--loss-step", "12:0"])
            .args(["--max-seconds", "75", "--idle-exit-s", "10"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting isnode relay"),
    ));
    let out = vol.path(&format!("out.{ext}"));
    let stats = vol.path("stats.json");
    let log = vol.path("play.log");
    let ports = ["--port", &client_port, "--session-port", &relay_port];
    let mut play = spawn_play(&server.url(), &ports, (&out, &stats, &log));
    if let During::KillAndRestartAfter(after) = during {
        std::thread::sleep(after);
        server.kill9();
        std::thread::sleep(Duration::from_millis(300));
        *server = Server::start_on(vol, server.addr.port(), &[], &[]);
    }
    let status = play.wait_until(deadline, "isnode play");
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(status.success(), "play failed:\n{log}");
    drop(relay.0.take().map(|mut c| c.kill()));
    let json: Value = serde_json::from_slice(&std::fs::read(&stats).expect("the stats JSON"))
        .expect("stats JSON");
    (json, out)
}

/// The timeline stepped down for loss, then back up when clean
/// ([`serve_support::media::check_down_then_up`]), from the top rung a first estimate
/// allowed, and nothing was lost (its entries).
fn check_timeline(json: &Value) -> usize {
    let line = serve_support::media::check_down_then_up(json);
    // The first estimate, probed over HTTP on loopback, allows the top rung.
    let estimate = json["first_estimate_bps"].as_u64();
    eprintln!("first estimate: {estimate:?} bit/s");
    assert!(
        estimate.is_some_and(|e| e >= line[0].to_bitrate_bps),
        "a first estimate that allows the top rung: {json}"
    );
    eprintln!(
        "play: {} underruns, {} ms stalled, {} codewords repaired over HTTP, {:.1} s",
        json["underruns"],
        json["stall_ms"],
        json["repair"]["codewords_repaired"],
        json["duration_s"].as_f64().unwrap_or(0.0)
    );
    assert_eq!(json["codewords_unrecoverable"], 0, "{json}");
    assert_eq!(json["bytes_written"], json["bytes_expected"], "{json}");
    line.len()
}

/// The timeline, and the MPEG-TS output decodes whole and lasts the title.
fn check_ts(json: &Value, out: &Path) {
    let entries = check_timeline(json);
    let path = out.to_str().expect("utf-8 path");
    decodes_cleanly(path);
    // Each switch marks the first packet of each PID that has an adaptation field (its
    // discontinuity_indicator): the video key frame's always, the audio's when its first
    // packet starts a PES; the ingested rungs have none.
    let bytes = std::fs::read(out).expect("the output");
    assert_eq!(bytes.len() % 188, 0);
    let marked = bytes
        .chunks_exact(188)
        .filter(|p| p[0] == 0x47 && (p[3] >> 4) & 2 != 0 && p[4] > 0 && p[5] & 0x80 != 0)
        .count();
    let switches = entries - 1;
    assert!(
        (switches..=2 * switches).contains(&marked),
        "{marked} marked packets for {switches} switches"
    );
    let (duration_s, codecs) = probe(path);
    assert!(
        (duration_s - 30.0).abs() < 0.5,
        "the output plays the whole title: {duration_s} s"
    );
    assert!(codecs.iter().any(|c| c == "h264"), "{codecs:?}");
}

/// The timeline, and the CMAF output is one track switch per rung played
/// ([`serve_support::media::check_cmaf_runs`]).
fn check_cmaf(json: &Value, out: &Path) {
    let entries = check_timeline(json);
    serve_support::media::check_cmaf_runs(out, entries);
}

/// With `ISNODE_TIMELINES_DIR` set, writes the run's rung timeline there as
/// `isnode-play-{kind}.json` for `isnode bench timelines` (docs/benchmarks.md): each switch
/// at the wall second its session was asked for, in kbit/s, held to the end of play.
fn record_timeline(json: &Value, kind: &str) {
    let Some(dir) = std::env::var_os("ISNODE_TIMELINES_DIR") else {
        return;
    };
    let points: Vec<(f64, f64)> = json["rung_timeline"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let at = c["at_s"].as_f64().unwrap_or(0.0);
            (at, c["to_bitrate_bps"].as_f64().unwrap_or(0.0) / 1000.0)
        })
        .collect();
    let t = serde_json::json!({
        "name": format!("isnode play ({kind})"),
        "points": points,
        "end_s": json["duration_s"].as_f64().unwrap_or(0.0),
        "events": [[5.0, "40 % loss"], [12.0, "no loss"]],
    });
    let path = std::path::Path::new(&dir).join(format!("isnode-play-{kind}.json"));
    std::fs::write(&path, t.to_string()).expect("writing the timeline");
}

#[test]
fn ts_play_steps_down_under_loss_and_back_up() {
    let (vol, mut server) = title(false);
    let (json, out) = play_through_relay(&vol, &mut server, "ts", During::Nothing);
    check_ts(&json, &out);
    record_timeline(&json, "ts");
}

#[test]
fn cmaf_play_steps_down_under_loss_and_back_up() {
    let (vol, mut server) = title(true);
    let (json, out) = play_through_relay(&vol, &mut server, "mp4", During::Nothing);
    check_cmaf(&json, &out);
    record_timeline(&json, "cmaf");
}

/// The server is killed (`kill -9`) 14 s into play, after the steps down (loss from 5 s to
/// 12 s; the bottom rung from about 11 s until the first step up at about 19 s), and
/// restarted on its address: the client resumes the session of the rung it was on and goes
/// on switching (back up after the loss); its MPEG-TS output decodes whole and lasts the
/// title.
#[test]
fn play_resumes_across_a_server_restart_and_keeps_switching() {
    let (vol, mut server) = title(false);
    let kill = During::KillAndRestartAfter(Duration::from_secs(14));
    let (json, out) = play_through_relay(&vol, &mut server, "ts", kill);
    assert!(
        json["resumes"].as_u64().unwrap_or(0) >= 1,
        "no resume: {json}"
    );
    check_ts(&json, &out);
}

/// `--rung N` plays rung N of the ladder (0: the lowest bitrate) only: the output is that
/// rendition's file, the timeline its start alone; a rung past the ladder is refused.
#[test]
fn a_pinned_rung_plays_that_rendition_only() {
    let (vol, server) = title(false);
    let (out, stats) = (vol.path("pinned.ts"), vol.path("pinned.json"));
    let played = command()
        .args(["play", "show", "--server", &server.url(), "--rung", "0"])
        .args(["--as-fast-as-possible", "--max-seconds", "60"])
        .arg("--out")
        .arg(&out)
        .arg("--stats-json")
        .arg(&stats)
        .stdin(Stdio::null())
        .output()
        .expect("running isnode play");
    assert!(played.status.success(), "play failed:\n{}", text(&played));
    let want = std::fs::read(vol.dir.path().join("r0.ts")).expect("the rung's file");
    assert!(
        std::fs::read(&out).expect("the output") == want,
        "not rung 0's file"
    );
    let json: Value =
        serde_json::from_slice(&std::fs::read(&stats).expect("stats")).expect("stats JSON");
    let timeline = json["rung_timeline"].as_array().expect("a timeline");
    assert_eq!(timeline.len(), 1, "{json}");
    assert_eq!(timeline[0]["to"], "show@0", "{json}");
    assert!(
        json.get("first_estimate_bps").is_none(),
        "a pinned rung is not probed: {json}"
    );
    let refused = command()
        .args(["play", "show", "--server", &server.url(), "--rung", "3"])
        .arg("--out")
        .arg(vol.path("none.ts"))
        .stdin(Stdio::null())
        .output()
        .expect("running isnode play");
    assert!(!refused.status.success());
    assert!(text(&refused).contains("has 3 rungs"), "{}", text(&refused));
}

/// A first estimate from a slow HTTP path: the server's HTTP answers pass through a front
/// shaped to 1 Mbit/s (`serve_support::front`), the UDP stream does not. The client's probe
/// of the top rung's start measures about 1 Mbit/s, 0.7 of it is the first estimate, and
/// play starts on the highest rung under it, not the top; the stream itself is clean, so
/// the decision steps up to the top after its clean period (the estimate is a start, not a
/// cap), and the MPEG-TS output decodes whole.
#[test]
fn a_slow_http_path_starts_play_below_the_top_rung() {
    let (vol, server) = title(false);
    let front = serve_support::front::Front::start(server.addr, Default::default());
    front.shaper.set_rate(1_000_000);
    let (out, stats, log) = (
        vol.path("slow.ts"),
        vol.path("slow.json"),
        vol.path("slow.log"),
    );
    let mut play = spawn_play(&front.url(), &[], (&out, &stats, &log));
    let status = play.wait_until(Instant::now() + Duration::from_secs(80), "isnode play");
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(status.success(), "play failed:\n{log}");
    let json: Value = serde_json::from_slice(&std::fs::read(&stats).expect("the stats JSON"))
        .expect("stats JSON");
    let timeline = json["rung_timeline"].as_array().expect("a rung timeline");
    let estimate = json["first_estimate_bps"]
        .as_u64()
        .unwrap_or_else(|| panic!("no first estimate: {json}"));
    let first = timeline[0]["to_bitrate_bps"].as_u64().expect("a bitrate");
    let top = timeline
        .iter()
        .filter_map(|c| c["to_bitrate_bps"].as_u64())
        .max()
        .expect("bitrates");
    eprintln!(
        "first estimate {estimate} bit/s through a 1 Mbit/s front: started at {first} bit/s, \
         up to {top} bit/s: {timeline:?}"
    );
    // 0.7 of the front's 1 Mbit/s, within what a 300 ms sample of 16 KiB charges allows.
    assert!(
        (350_000..=1_000_000).contains(&estimate),
        "the estimate {estimate} bit/s: {json}"
    );
    assert_eq!(timeline[0]["reason"], "start", "{json}");
    assert_eq!(
        timeline[0]["to"], "show@1",
        "under the estimate, not the top: {json}"
    );
    assert!(first <= estimate, "{json}");
    assert!(
        timeline[1..]
            .iter()
            .any(|c| c["reason"] == "clean" && c["to"] == "show@2"),
        "the clean stream steps up to the top: {json}"
    );
    assert_eq!(json["codewords_unrecoverable"], 0, "{json}");
    decodes_cleanly(out.to_str().expect("utf-8 path"));
}
