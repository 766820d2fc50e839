//! Stock web players in a real headless Chromium (issue 31): hls.js plays a title's
//! `master.m3u8` and dash.js its `manifest.mpd`, both over the same stored CMAF files (a
//! 4-rung H.264 ladder, 2 s GOPs aligned, and an audio-only AAC rendition: the HLS audio
//! group and the DASH audio adaptation set). Each must play on (`currentTime` past several
//! segments), raise no error event, and report every rung and the audio (and hls.js an
//! I-frame variant per rung).
//!
//! Side by side with a reference (the same encodes segmented by ffmpeg's own HLS and DASH
//! muxers, served as static files through the same shaping front), each player plays
//! isnode's title and then the reference on one schedule (8 Mbit/s, 1 Mbit/s from 12 s or
//! once isnode's run is on the top rung, 8 Mbit/s again 16 s later): isnode's run must be on
//! the top rung before the drop, step down to 360p or lower after it, stall and fall
//! behind no more than the reference's, and step up after the link recovers (12 s of it)
//! at least as well: no lower a rung, and the reference's highest no later (tolerances
//! justified at their constants). Both rung
//! timelines are printed, and written for `isnode bench timelines` when
//! `ISNODE_TIMELINES_DIR` is set. The front stops charging an aborted answer (tested).
//!
//! The players are npm packages (hls.js, dashjs) that `scripts/test` installs with
//! `scripts/install-players` into `~/.cache/isnode-players` (or `$ISNODE_PLAYERS_DIR`);
//! the test serves them and its pages from a front of its own on the node's origin
//! (`serve_support::front`). A missing player, `chromium` or `chromedriver` fails the
//! test, naming `scripts/test`.

mod serve_support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use fantoccini::Client;
use serde_json::Value;
use serve_support::browser::{browser, require_chromium, wait_js, Driver};
use serve_support::front::Front;
use serve_support::media::tool;
use serve_support::*;

/// The ladder (the issue's): size, video bitrate.
const LADDER: [(&str, &str); 4] = [
    ("416x234", "400k"),
    ("640x360", "1200k"),
    ("1280x720", "2500k"),
    ("1920x1080", "5000k"),
];

/// Seconds of the title.
const SECONDS: &str = "24";
/// Seconds of the title the shaped run plays.
const SHAPED_SECONDS: &str = "60";

/// The players' directory (`scripts/install-players`).
fn players_dir() -> PathBuf {
    match std::env::var_os("ISNODE_PLAYERS_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/isnode-players"),
    }
}

/// A player's dist file, which must be installed.
#[track_caller]
fn player_file(rel: &str) -> Vec<u8> {
    let p = players_dir().join("node_modules").join(rel);
    std::fs::read(&p).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: the stock players are missing: run scripts/test (scripts/install-players \
             installs hls.js and dashjs from npm)",
            p.display()
        )
    })
}

/// Runs ffmpeg, which must succeed quietly.
#[track_caller]
fn ffmpeg(args: &[&str]) {
    let out = Command::new(tool("ffmpeg"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running ffmpeg: {e}"));
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "ffmpeg {args:?} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The video rungs (CMAF, video only) and the audio rendition (CMAF, 2 s fragments).
fn ladder(dir: &Path, seconds: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for (i, (size, rate)) in LADDER.iter().enumerate() {
        let out = dir.join(format!("v{i}.mp4"));
        let src = format!("testsrc2=size={size}:rate=25");
        ffmpeg(&[
            "-v",
            "error",
            "-y",
            "-f",
            "lavfi",
            "-i",
            &src,
            "-t",
            seconds,
            "-c:v",
            "libx264",
            "-preset",
            "ultrafast",
            "-b:v",
            rate,
            "-maxrate",
            rate,
            "-bufsize",
            rate,
            "-g",
            "50",
            "-keyint_min",
            "50",
            "-sc_threshold",
            "0",
            "-r",
            "25",
            "-movflags",
            "+cmaf",
            out.to_str().unwrap(),
        ]);
        files.push(out);
    }
    let audio = dir.join("audio.mp4");
    ffmpeg(&[
        "-v",
        "error",
        "-y",
        "-f",
        "lavfi",
        "-i",
        "sine=frequency=440:sample_rate=48000",
        "-t",
        seconds,
        "-c:a",
        "aac",
        "-b:a",
        "64k",
        "-movflags",
        "+cmaf",
        "-frag_duration",
        "2000000",
        audio.to_str().unwrap(),
    ]);
    files.push(audio);
    files
}

/// The page of one player: `setup` makes the player on `<video id=v>` from `SRC` and
/// keeps `window.t` (`errors`, `rungs`, `audio`, `switches`) up to date.
fn page(script: &str, setup: &str) -> Vec<u8> {
    format!(
        "<!doctype html><html><head><meta charset=utf-8><title>player</title></head><body>\
         <video id=v muted autoplay playsinline width=640 height=360></video>\
         <script src=\"/player/{script}\"></script><script>\
         window.t = {{errors: [], rungs: 0, audio: 0, iframes: 0, stalls: 0, stall_s: 0, switches: []}};\
         const SRC = new URLSearchParams(location.search).get('src');\
         const v = document.getElementById('v'); let since = null;\
         v.addEventListener('waiting', () => {{ if (v.currentTime > 0) {{ t.stalls += 1;\
             if (since === null) since = performance.now(); }} }});\
         v.addEventListener('playing', () => {{ if (since !== null) {{\
             t.stall_s += (performance.now() - since) / 1000; since = null; }} }});\
         window.stalled_s = () => t.stall_s + (since === null ? 0 : (performance.now() - since) / 1000);\
         v.addEventListener('error', () => t.errors.push('video: ' + (v.error && v.error.message)));\
         try {{ {setup} }} catch (e) {{ t.errors.push('setup: ' + e); }}\
         </script></body></html>"
    )
    .into_bytes()
}

/// hls.js on the title's master playlist.
const HLS_SETUP: &str = "const cfg = JSON.parse(new URLSearchParams(location.search).get('cfg') || '{}');\
    const h = new Hls(cfg); window.h = h;\
    h.on(Hls.Events.ERROR, (e, d) => t.errors.push((d.fatal ? 'fatal ' : '') + d.type + ': ' + d.details \
        + (d.error ? ' (' + d.error.message + ')' : '')));\
    h.on(Hls.Events.MANIFEST_PARSED, (e, d) => { t.rungs = d.levels.length; \
        t.iframes = (h.iframeVariants || []).length; });\
    h.on(Hls.Events.AUDIO_TRACKS_UPDATED, (e, d) => { t.audio = d.audioTracks.length; });\
    h.on(Hls.Events.LEVEL_SWITCHED, (e, d) => t.switches.push([performance.now() / 1000, v.currentTime, h.levels[d.level].height]));\
    h.loadSource(SRC); h.attachMedia(v); v.play().catch(e => t.errors.push('play: ' + e));";

/// dash.js on the title's MPD.
const DASH_SETUP: &str = "const p = dashjs.MediaPlayer().create(); window.p = p;\
    const buf = Number(new URLSearchParams(location.search).get('buf') || 0);\
    if (buf > 0) p.updateSettings({streaming: {buffer: {stableBufferTime: buf, bufferTimeAtTopQuality: buf, \
        bufferTimeAtTopQualityLongForm: buf}}});\
    const E = dashjs.MediaPlayer.events;\
    p.on(E.ERROR, e => t.errors.push('error: ' + JSON.stringify(e.error || e)));\
    p.on(E.PLAYBACK_ERROR, e => t.errors.push('playback: ' + JSON.stringify(e.error || e)));\
    p.on(E.STREAM_INITIALIZED, () => { t.rungs = p.getRepresentationsByType('video').length;\
        t.audio = p.getRepresentationsByType('audio').length; });\
    p.on(E.QUALITY_CHANGE_RENDERED, e => { if (e.mediaType === 'video') \
        t.switches.push([performance.now() / 1000, v.currentTime, e.newRepresentation ? e.newRepresentation.height : null]); });\
    p.initialize(v, SRC, true);";

/// What the page reports: the player's state and the video's.
const STATE: &str = "const v = document.getElementById('v'); \
    return {t: v ? v.currentTime : null, paused: v ? v.paused : null, state: window.t || null, \
    now: performance.now() / 1000, stall_s: window.stalled_s ? window.stalled_s() : 0}";

/// The front's files: the two pages and the two players.
fn files() -> HashMap<String, (Vec<u8>, String)> {
    let js = "text/javascript".to_string();
    let html = "text/html; charset=utf-8".to_string();
    HashMap::from([
        (
            "hls.js".into(),
            (player_file("hls.js/dist/hls.min.js"), js.clone()),
        ),
        (
            "dash.js".into(),
            (player_file("dashjs/dist/modern/umd/dash.all.min.js"), js),
        ),
        ("hls.html".into(), (page("hls.js", HLS_SETUP), html.clone())),
        ("dash.html".into(), (page("dash.js", DASH_SETUP), html)),
    ])
}

/// Opens `page` on `src` and waits until the video plays past 8 s (four segments); it
/// must have raised no error and listed the four rungs and the audio.
async fn plays(c: &Client, front: &Front, page: &str, src: &str) -> Result<Value, String> {
    c.goto(&format!("{}/player/{page}?src={src}", front.url()))
        .await
        .map_err(|e| format!("opening {page}: {e}"))?;
    let what = format!("{page} playing {src} past 8 s");
    let last = wait_js(c, STATE, 60, &what, |v| {
        v["t"].as_f64().unwrap_or(0.0) > 8.0
            || v["state"]["errors"]
                .as_array()
                .is_some_and(|e| !e.is_empty())
    })
    .await?;
    let s = &last["state"];
    if s["errors"].as_array().is_none_or(|e| !e.is_empty()) {
        return Err(format!("{page}: player errors: {last}"));
    }
    if s["rungs"] != 4 || s["audio"].as_u64() < Some(1) {
        return Err(format!("{page}: not 4 rungs and the audio: {last}"));
    }
    if page == "hls.html" && s["iframes"] != 4 {
        return Err(format!("{page}: not an I-frame variant per rung: {last}"));
    }
    Ok(last)
}

#[test]
fn hls_js_and_dash_js_play_a_cmaf_ladder_with_its_audio() {
    require_chromium();
    let files = files();
    let vol = Vol::create(&[]);
    let title = ladder(vol.dir.path(), SECONDS);
    let mut args = vec!["ingest", "--name", "ladder"];
    args.extend(title.iter().map(|f| f.to_str().unwrap()));
    let out = isnode(&vol, &args);
    assert!(out.status.success(), "{}", text(&out));
    let server = Server::start(&vol, &[]);
    let front = Front::start(server.addr, files);
    let driver = Driver::start(&vol);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    // Each player in a browser of its own: a fresh profile and connection pool (the front
    // passes a connection to the node for good once it carried a request for the node).
    let runs = [
        ("hls.html", "/v1/objects/ladder/master.m3u8"),
        ("dash.html", "/v1/objects/ladder/manifest.mpd"),
    ];
    for (page, src) in runs {
        let profile = vol.path(&format!("chromium-{page}"));
        let r = rt.block_on(async {
            let c = browser(&driver.url, &profile).await;
            let r = plays(&c, &front, page, src).await;
            let _ = c.close().await;
            r
        });
        match r {
            Ok(v) => eprintln!("{page} played: {v}"),
            Err(e) => panic!("{e}"),
        }
    }
}

/// The height of the last rung `state` switched to.
fn last_height(v: &Value) -> Option<u64> {
    v["state"]["switches"].as_array()?.last()?.get(2)?.as_u64()
}

/// Seconds at 8 Mbit/s before the drop, at least (the issue's "1 Mbit/s from 12 s").
const FAST_S: f64 = 12.0;
/// Seconds at 8 Mbit/s at most, waiting for the top rung.
const FAST_MAX_S: u64 = 60;
/// Seconds at 1 Mbit/s after the drop.
const SLOW_S: u64 = 16;
/// Seconds back at 8 Mbit/s after the slow phase. dash.js steps up within it (234p ->
/// 720p 3.4-3.7 s after the recovery, isnode's run and the reference's alike); hls.js does
/// not, on either side: in runs with 28 s of recovery it stepped up 234p -> 360p 22.3 s
/// (isnode) and 20.1 s (reference) after it. hls.js weighs its bandwidth samples by their
/// download time (a 9 s half-life for the slow estimate), and a 234p segment takes 0.1 s at
/// 8 Mbit/s: the slow phase's samples are forgotten only after tens of segments. Waiting
/// for it would more than double the phase (and each test's two runs); the step-up
/// assertion ([`steps_up_as_well`]) holds hls.js's run to the reference's over the 12 s all
/// the same (a reference that stepped up would need isnode's run to follow it).
const RECOVER_S: u64 = 12;
/// isnode's run may reach the reference's highest rung after the recovery this much later
/// than the reference did: the players decide once per 2 s segment fetched, so the same
/// decision can come a segment or two later in a run whose fetches are phased otherwise,
/// or whose cores were busier (the runs are one after the other on 2 shared cores; in a
/// full workspace run dash.js on isnode made the reference's steps, 360p then 720p, 1.9 s
/// later each, 2.06 s after it in all). A player that did not step up would miss by the
/// rest of the phase (8 s and more).
const UP_TOLERANCE_S: f64 = 4.0;

/// What one shaped run of a player showed.
#[derive(Debug)]
struct Run {
    /// Rung timeline: `[wall s, playback s, height]` (wall seconds of the page's clock).
    timeline: Value,
    /// Page seconds when the page was opened and when the link dropped and recovered.
    open_s: f64,
    drop_s: f64,
    recover_s: f64,
    /// Page seconds at the end of the run.
    end_s: f64,
    /// Playback position at the drop.
    drop_t: f64,
    /// On the top rung (1080p) when the link dropped.
    top_before: bool,
    /// Wall seconds from the drop to the first switch to 360p or lower, if any.
    down_after_s: Option<f64>,
    /// Stall seconds at the drop, and at the end of the slow phase.
    stall_drop_s: f64,
    stall_slow_s: f64,
    /// Seconds the position fell behind the wall clock over the slow phase.
    behind_s: f64,
    /// Height at the end of the recovery phase.
    end_height: Option<u64>,
    /// Height played when the link recovered, and the highest the player switched to
    /// after it (at least the former).
    recover_height: Option<u64>,
    best_after_recover: Option<u64>,
}

impl Run {
    /// Wall seconds from the link's recovery to the first switch to `height` or higher, if
    /// the run made one.
    fn reached_after_recover_s(&self, height: u64) -> Option<f64> {
        self.timeline.as_array().and_then(|sw| {
            sw.iter()
                .filter_map(|x| Some((x.get(0)?.as_f64()?, x.get(2)?.as_u64()?)))
                .find(|&(w, h)| w > self.recover_s && h >= height)
                .map(|(w, _)| w - self.recover_s)
        })
    }
}

/// Whether `v` shows a fatal (hls.js) or playback (dash.js) error.
fn failed(v: &Value) -> bool {
    v["state"]["errors"].as_array().is_some_and(|e| {
        e.iter().any(|x| {
            x.as_str()
                .is_some_and(|x| x.starts_with("fatal") || x.starts_with("playback"))
        })
    })
}

/// When the link drops to 1 Mbit/s, page seconds after the page opened.
#[derive(Clone, Copy, Debug)]
enum DropAt {
    /// At [`FAST_S`] or, if later, once on the top rung (at most [`FAST_MAX_S`]).
    TopRungOrFastS,
    /// At this many seconds (another run's drop, for the same schedule).
    Seconds(f64),
}

/// The player of `page` (an 8 s buffer) on `src` through the front on the issue's
/// schedule: 8 Mbit/s until `drop_at`, then 1 Mbit/s for [`SLOW_S`], then 8 Mbit/s for
/// [`RECOVER_S`]. No time is asserted here; what it showed is returned (an error only if
/// the player failed).
async fn shaped_run(
    c: &Client,
    front: &Front,
    page: &str,
    src: &str,
    drop_at: DropAt,
) -> Result<Run, String> {
    front.shaper.set_rate(8_000_000);
    let cfg = "%7B%22maxBufferLength%22%3A8%2C%22maxMaxBufferLength%22%3A8%7D";
    c.goto(&format!(
        "{}/player/{page}?src={src}&cfg={cfg}&buf=8",
        front.url()
    ))
    .await
    .map_err(|e| format!("opening {page}: {e}"))?;
    let first = wait_js(c, STATE, 10, "the page's clock", |v| v["now"].is_f64()).await?;
    let open_s = first["now"].as_f64().unwrap_or(0.0);
    let what = format!("{page} ({src}) at 8 Mbit/s");
    let fast = wait_js(c, STATE, FAST_MAX_S, &what, |v| {
        let since = v["now"].as_f64().unwrap_or(0.0) - open_s;
        let due = match drop_at {
            DropAt::TopRungOrFastS => since >= FAST_S && last_height(v) == Some(1080),
            DropAt::Seconds(s) => since >= s,
        };
        due || failed(v)
    })
    .await;
    // A run that never reaches the top rung drops at FAST_MAX_S all the same.
    let fast = match fast {
        Ok(v) => v,
        Err(_) => c.execute(STATE, vec![]).await.map_err(|e| e.to_string())?,
    };
    if failed(&fast) {
        return Err(format!("{page} ({src}) failed at 8 Mbit/s: {fast}"));
    }
    front.shaper.set_rate(1_000_000);
    let drop = c.execute(STATE, vec![]).await.map_err(|e| e.to_string())?;
    tokio::time::sleep(std::time::Duration::from_secs(SLOW_S)).await;
    let slow = c.execute(STATE, vec![]).await.map_err(|e| e.to_string())?;
    front.shaper.set_rate(8_000_000);
    tokio::time::sleep(std::time::Duration::from_secs(RECOVER_S)).await;
    let end = c.execute(STATE, vec![]).await.map_err(|e| e.to_string())?;
    if failed(&end) {
        return Err(format!("{page} ({src}) failed: {end}"));
    }
    Ok(run_of(open_s, &fast, &drop, &slow, &end))
}

/// The [`Run`] of the states sampled at the drop, at the end of the slow phase and at the
/// end.
fn run_of(open_s: f64, fast: &Value, drop: &Value, slow: &Value, end: &Value) -> Run {
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or(0.0);
    let drop_s = f(drop, "now");
    let recover_s = f(slow, "now");
    let recover_height = last_height(slow);
    let best_after_recover = end["state"]["switches"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|x| Some((x.get(0)?.as_f64()?, x.get(2)?.as_u64()?)))
        .filter(|&(w, _)| w > recover_s)
        .map(|(_, h)| h)
        .chain(recover_height)
        .max();
    let down_after_s = end["state"]["switches"].as_array().and_then(|sw| {
        sw.iter()
            .filter_map(|x| Some((x.get(0)?.as_f64()?, x.get(2)?.as_u64()?)))
            .find(|&(w, h)| w > drop_s && h <= 360)
            .map(|(w, _)| w - drop_s)
    });
    Run {
        timeline: end["state"]["switches"].clone(),
        open_s,
        drop_s,
        recover_s,
        end_s: f(end, "now"),
        drop_t: f(drop, "t"),
        top_before: last_height(fast) == Some(1080),
        down_after_s,
        stall_drop_s: f(drop, "stall_s"),
        stall_slow_s: f(slow, "stall_s"),
        behind_s: (f(slow, "now") - drop_s) - (f(slow, "t") - f(drop, "t")),
        end_height: last_height(end),
        recover_height,
        best_after_recover,
    }
}

/// With `ISNODE_TIMELINES_DIR` set, writes run `r` of `page` there as
/// `{player}-{isnode|reference}.json` for `isnode bench timelines` (docs/benchmarks.md):
/// heights against seconds from the page's opening, the link's drop and recovery.
fn record(page: &str, name: &str, r: &Run) {
    let Some(dir) = std::env::var_os("ISNODE_TIMELINES_DIR") else {
        return;
    };
    let player = page.trim_end_matches(".html");
    let points: Vec<(f64, f64)> = r
        .timeline
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|x| Some((x.get(0)?.as_f64()? - r.open_s, x.get(2)?.as_f64()?)))
        .collect();
    let t = serde_json::json!({
        "name": format!("{player}.js, {}", if name == "isnode" { "isnode" } else { "reference" }),
        "points": points,
        "end_s": r.end_s - r.open_s,
        "events": [[r.drop_s - r.open_s, "8 -> 1 Mbit/s"], [r.recover_s - r.open_s, "1 -> 8 Mbit/s"]],
    });
    let file = match name {
        "isnode" => format!("{player}-isnode.json"),
        _ => format!("{player}-reference.json"),
    };
    std::fs::write(Path::new(&dir).join(file), t.to_string()).expect("writing the timeline");
}

/// One line of a run for the log.
fn describe(name: &str, r: &Run) -> String {
    format!(
        "{name}: rung timeline [page s, playback s, height] {} | opened at {:.2} s, 8 -> 1 \
         Mbit/s at {:.2} s (playback {:.2} s, top rung before: {}), 1 -> 8 Mbit/s at {:.2} s | \
         down to <= 360p {} after the drop | stalled {:.2} s before the drop, {:.2} s by the \
         end of the slow phase | position fell {:.2} s behind over the slow phase | on {:?} \
         at the recovery, up to {:?} after it ({}), on {:?} at the end",
        r.timeline,
        r.open_s,
        r.drop_s,
        r.drop_t,
        r.top_before,
        r.recover_s,
        r.down_after_s
            .map_or("never".to_string(), |s| format!("{s:.2} s")),
        r.stall_drop_s,
        r.stall_slow_s,
        r.behind_s,
        r.recover_height,
        r.best_after_recover,
        r.best_after_recover
            .filter(|&h| Some(h) > r.recover_height)
            .and_then(|h| r.reached_after_recover_s(h))
            .map_or("no step up".to_string(), |s| format!("{s:.2} s after it")),
        r.end_height
    )
}

/// `-i FILE` for each encode, then `-c copy`, with `maps` between.
fn ffmpeg_copy(encodes: &[PathBuf], maps: &[String]) -> Vec<String> {
    let mut args: Vec<String> = ["-v", "error", "-y"].map(String::from).to_vec();
    for e in encodes {
        args.extend(["-i".to_string(), e.display().to_string()]);
    }
    for m in maps {
        args.extend(["-map".to_string(), m.clone()]);
    }
    args.extend(["-c", "copy"].map(String::from));
    args
}

/// The reference: the same encodes segmented by ffmpeg's own muxers. HLS under `dir/hls`:
/// fMP4 segments of 2 s, each rung with the audio muxed in (ffmpeg 5.1's HLS muxer writes
/// no `CODECS` for H.264 copied from MP4, and without it hls.js 1.7 cannot set up the audio
/// buffer of a separate audio group: "Attempting to append to the audio SourceBuffer, but
/// it does not exist"). DASH under `dir/dash`: a live-profile `SegmentTemplate`, the video
/// rungs and the audio as two adaptation sets.
fn reference(dir: &Path, encodes: &[PathBuf]) {
    let rungs = LADDER.len();
    let maps: Vec<String> = (0..rungs)
        .flat_map(|i| [format!("{i}:v"), format!("{rungs}:a")])
        .collect();
    let mut hls = ffmpeg_copy(encodes, &maps);
    let map = (0..rungs)
        .map(|i| format!("v:{i},a:{i}"))
        .collect::<Vec<_>>()
        .join(" ");
    let hls_dir = dir.join("hls");
    std::fs::create_dir_all(&hls_dir).expect("the reference's HLS directory");
    hls.extend(
        [
            "-f",
            "hls",
            "-hls_time",
            "2",
            "-hls_playlist_type",
            "vod",
            "-hls_segment_type",
            "fmp4",
            "-master_pl_name",
            "master.m3u8",
            "-var_stream_map",
            &map,
            "-hls_fmp4_init_filename",
            "init.mp4",
            "-hls_segment_filename",
        ]
        .map(String::from),
    );
    hls.push(hls_dir.join("r%v/s%d.m4s").display().to_string());
    hls.push(hls_dir.join("r%v/index.m3u8").display().to_string());
    ffmpeg(&hls.iter().map(String::as_str).collect::<Vec<_>>());
    let all: Vec<String> = (0..encodes.len()).map(|i| i.to_string()).collect();
    let mut dash = ffmpeg_copy(encodes, &all);
    let dash_dir = dir.join("dash");
    std::fs::create_dir_all(&dash_dir).expect("the reference's DASH directory");
    dash.extend(
        [
            "-f",
            "dash",
            "-seg_duration",
            "2",
            "-use_timeline",
            "0",
            "-use_template",
            "1",
            "-adaptation_sets",
            "id=0,streams=v id=1,streams=a",
        ]
        .map(String::from),
    );
    dash.push(dash_dir.join("manifest.mpd").display().to_string());
    ffmpeg(&dash.iter().map(String::as_str).collect::<Vec<_>>());
}

/// Stalls may exceed the reference's by this much: the players decide per 2 s segment and
/// the two runs do not share the same moments of noise on the shared cores; at 1 Mbit/s a
/// 234p segment (0.4 Mbit/s video + 64 kbit/s audio for 2 s) takes about 0.9 s, so one
/// segment fetched late is worth about a second. A player that failed to adapt would stall
/// far longer: a 1080p segment takes 10 s at 1 Mbit/s.
const STALL_TOLERANCE_S: f64 = 1.0;
/// The position may fall this much further behind than the reference's. It falls behind
/// without any stall when the renderer is starved of CPU (runs on the 2 shared cores fell
/// 0.02-1.52 s behind over the 24 s slow phase with no stall, isnode's and the reference's
/// alike), and the two runs are not loaded alike; a failure to adapt costs 8 s a segment.
const BEHIND_TOLERANCE_S: f64 = 2.0;

/// A shaped-link run of `page` on isnode's `ours` and then on the reference's `theirs`
/// (made from the same encodes as the title), one after the other, each in a browser of
/// its own, on the same schedule: the reference's link drops when isnode's did (seconds
/// after its page opened; `ours_drop` says when that is).
fn side_by_side(page: &str, ours: &str, theirs: &str, ours_drop: DropAt) -> (Run, Run) {
    require_chromium();
    let files = files();
    let vol = Vol::create(&[]);
    let title = ladder(vol.dir.path(), SHAPED_SECONDS);
    let mut args = vec!["ingest", "--name", "ladder"];
    args.extend(title.iter().map(|f| f.to_str().unwrap()));
    let out = isnode(&vol, &args);
    assert!(out.status.success(), "{}", text(&out));
    let refdir = vol.path("reference");
    reference(&refdir, &title);
    let server = Server::start(&vol, &[]);
    let front = Front::start_with_static(server.addr, files, Some(refdir));
    let driver = Driver::start(&vol);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let run = |name: &str, src: &str, drop_at: DropAt, n: usize| {
        let profile = vol.path(&format!("chromium-{n}"));
        let r = rt.block_on(async {
            let c = browser(&driver.url, &profile).await;
            let r = shaped_run(&c, &front, page, src, drop_at).await;
            let _ = c.close().await;
            r
        });
        let r = r.unwrap_or_else(|e| panic!("{page}, {name}: {e}"));
        eprintln!("{page}, {}", describe(name, &r));
        record(page, name, &r);
        r
    };
    let o = run("isnode", ours, ours_drop, 0);
    let at = DropAt::Seconds(o.drop_s - o.open_s);
    let t = run("ffmpeg reference", theirs, at, 1);
    (o, t)
}

/// hls.js through the shaped front (8 Mbit/s, then 1 Mbit/s once on the top rung and at
/// least 12 s in, then 8 Mbit/s again) on isnode's title and on the ffmpeg reference: isnode's
/// run is on the top rung before the drop, steps down to 360p or lower after it, stalls
/// and falls behind no more than the reference's (within the tolerances above) and steps
/// up after the recovery as well ([`steps_up_as_well`]). Both timelines are printed.
#[test]
fn hls_js_adapts_as_well_as_an_ffmpeg_reference_when_the_link_slows() {
    let (ours, theirs) = side_by_side(
        "hls.html",
        "/v1/objects/ladder/master.m3u8",
        "/ref/hls/master.m3u8",
        DropAt::TopRungOrFastS,
    );
    adapts_as_well("hls.js", &ours, &theirs);
}

/// isnode's run was on the top rung before the drop, stepped down to 360p or lower after
/// it, stalled and fell behind no more than the reference's (within the tolerances), and
/// stepped up after the recovery as well ([`steps_up_as_well`]).
#[track_caller]
fn adapts_as_well(player: &str, ours: &Run, theirs: &Run) {
    assert!(
        ours.top_before,
        "{player} on isnode: not on the top rung before the drop: {ours:?}"
    );
    assert!(
        ours.down_after_s.is_some(),
        "{player} on isnode: no step down to 360p or lower: {ours:?}"
    );
    assert!(
        ours.stall_slow_s <= theirs.stall_slow_s + STALL_TOLERANCE_S,
        "{player}: isnode stalled {:.2} s, the reference {:.2} s (+{STALL_TOLERANCE_S} s allowed)",
        ours.stall_slow_s,
        theirs.stall_slow_s
    );
    assert!(
        ours.behind_s <= theirs.behind_s + BEHIND_TOLERANCE_S,
        "{player}: isnode fell {:.2} s behind, the reference {:.2} s (+{BEHIND_TOLERANCE_S} s allowed)",
        ours.behind_s,
        theirs.behind_s
    );
    steps_up_as_well(player, ours, theirs);
}

/// isnode's run steps up after the link recovers at least as well as the reference's: if
/// the reference stepped up (above the rung it played at the recovery), isnode's run was on
/// the reference's highest rung or higher at the recovery, or reached it no later than
/// [`UP_TOLERANCE_S`] after the reference did. A reference that did not step up holds
/// isnode's run to nothing here: the rungs the two played at the recovery and after it
/// depend on how far each had stepped down by then (one segment's decision apart, the
/// reference was still on 360p at the recovery of one run and stepped down to 234p after it
/// where isnode's was on 234p), which the step-down assertions judge.
#[track_caller]
fn steps_up_as_well(player: &str, ours: &Run, theirs: &Run) {
    let Some(best) = theirs
        .best_after_recover
        .filter(|&h| Some(h) > theirs.recover_height)
    else {
        return;
    };
    let theirs_s = theirs
        .reached_after_recover_s(best)
        .expect("the reference switched to its highest rung after the recovery");
    let ours_s = match ours.recover_height >= Some(best) {
        true => Some(0.0),
        false => ours.reached_after_recover_s(best),
    };
    assert!(
        ours_s.is_some_and(|s| s <= theirs_s + UP_TOLERANCE_S),
        "{player}: the reference stepped up to {best}p {theirs_s:.2} s after the recovery, \
         isnode's run {ours_s:?} (+{UP_TOLERANCE_S} s allowed): {ours:?} {theirs:?}"
    );
}

/// dash.js, as hls.js above, on isnode's `manifest.mpd` and on ffmpeg's DASH muxer's MPD
/// (a `SegmentTemplate` of its own files) of the same encodes.
#[test]
fn dash_js_adapts_as_well_as_an_ffmpeg_reference_when_the_link_slows() {
    let (ours, theirs) = side_by_side(
        "dash.html",
        "/v1/objects/ladder/manifest.mpd",
        "/ref/dash/manifest.mpd",
        DropAt::TopRungOrFastS,
    );
    adapts_as_well("dash.js", &ours, &theirs);
}

/// The front stops charging an answer its reader abandons (the issue: a shaping proxy must
/// stop charging an aborted request, or a player's abandon-and-switch logic is starved): a
/// reader takes 32 KiB of an 8 MiB static file at 1 Mbit/s (67 s of it) and closes; the
/// front's copy ends (waited for up to 20 s) having charged at most two more chunks than
/// were read (the one in flight and the one charged just before the close).
#[test]
fn the_front_stops_charging_an_aborted_answer() {
    use std::io::{Read, Write};
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(dir.path().join("big.bin"), vec![7u8; 8 << 20]).expect("writing the file");
    // No node behind it: only /ref/ is asked for.
    let node = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
    let front = Front::start_with_static(node, HashMap::new(), Some(dir.path().to_path_buf()));
    front.shaper.set_rate(1_000_000);
    let mut s = std::net::TcpStream::connect(front.addr).expect("connecting to the front");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("a read timeout");
    s.write_all(b"GET /ref/big.bin HTTP/1.1\r\nHost: front\r\n\r\n")
        .expect("the request");
    let mut read = 0usize;
    let mut buf = [0u8; 4096];
    while read < 32 << 10 {
        match s.read(&mut buf) {
            Ok(0) => panic!("the front closed after {read} bytes"),
            Ok(n) => read += n,
            Err(e) => panic!("reading the answer after {read} bytes: {e}"),
        }
    }
    drop(s);
    let deadline = Instant::now() + Duration::from_secs(20);
    while front.shaper.sending() > 0 {
        assert!(
            Instant::now() < deadline,
            "the front still sends the abandoned answer 20 s after the close ({} bytes \
             charged, {read} read)",
            front.shaper.charged_bytes()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let charged = front.shaper.charged_bytes();
    let most = read as u64 + 2 * serve_support::front::CHUNK as u64;
    assert!(
        charged <= most,
        "{charged} bytes charged for an answer abandoned after {read} bytes (at most {most})"
    );
    eprintln!("abandoned after {read} bytes: {charged} charged");
}

/// `s` percent-encoded for a query value (every byte but unreserved ones).
fn query_value(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// hls.js with EME (W3C Clear Key) plays an encrypted CMAF title (`ingest --encrypt`: CENC
/// `cbcs`, H.264 + AAC in one file) from its master playlist: the media playlist carries
/// `#EXT-X-KEY:METHOD=SAMPLE-AES` with `KEYFORMAT="org.w3.clearkey"` and the key id (never
/// the key), and hls.js asks the licence route, configured as its Clear Key licence URL with
/// a viewer token. With a licence URL without the token the licence is refused (401): hls.js
/// reports an error and the video never starts.
#[test]
fn hls_js_plays_an_encrypted_cmaf_title_through_clear_key() {
    require_chromium();
    let files = files();
    let vol = Vol::create(&[]);
    let clear = vol.path("clear.mp4");
    ffmpeg(&[
        "-v",
        "error",
        "-y",
        "-f",
        "lavfi",
        "-i",
        "testsrc2=size=640x360:rate=25",
        "-f",
        "lavfi",
        "-i",
        "sine=frequency=440:sample_rate=48000",
        "-t",
        "20",
        "-c:v",
        "libx264",
        "-preset",
        "ultrafast",
        "-g",
        "50",
        "-keyint_min",
        "50",
        "-sc_threshold",
        "0",
        "-pix_fmt",
        "yuv420p",
        "-c:a",
        "aac",
        "-b:a",
        "64k",
        "-movflags",
        "+cmaf",
        "-frag_duration",
        "2000000",
        clear.to_str().unwrap(),
    ]);
    let out = isnode(
        &vol,
        &[
            "ingest",
            "--encrypt",
            "--name",
            "enc.mp4",
            clear.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("CENC cbcs"), "{}", text(&out));
    let out = isnode(&vol, &["token", "add", "--name", "v", "--role", "viewer"]);
    assert!(out.status.success(), "{}", text(&out));
    let viewer = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let server = Server::start(&vol, &[]);

    // The media playlist: SAMPLE-AES with Clear Key and the key id, before the init segment.
    let r = server.req("GET", "/v1/objects/enc.mp4/index.m3u8", None);
    assert_eq!(r.status, 200, "{}", r.body);
    let key_line = r
        .body
        .lines()
        .find(|l| l.starts_with("#EXT-X-KEY:"))
        .unwrap_or_else(|| panic!("no key line: {}", r.body))
        .to_string();
    assert!(key_line.starts_with("#EXT-X-KEY:METHOD=SAMPLE-AES,URI=\"data:text/plain;base64,"));
    assert!(
        key_line.contains("KEYFORMAT=\"org.w3.clearkey\""),
        "{key_line}"
    );
    assert!(
        r.body.find("#EXT-X-KEY:") < r.body.find("#EXT-X-MAP:"),
        "{}",
        r.body
    );
    let r = server.req("GET", "/v1/objects/enc.mp4/iframes.m3u8", None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains(&key_line), "{}", r.body);

    let front = Front::start(server.addr, files);
    let driver = Driver::start(&vol);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let src = "/v1/objects/enc.mp4/master.m3u8";
    let cfg = |licence: &str| {
        query_value(&format!(
            "{{\"emeEnabled\":true,\"drmSystems\":{{\"org.w3.clearkey\":{{\"licenseUrl\":\"{licence}\"}}}}}}"
        ))
    };
    // With the viewer's token in the licence URL: plays past 8 s without an error.
    let with = cfg(&format!("/v1/objects/enc.mp4/license?token={viewer}"));
    let profile = vol.path("chromium-enc");
    let r = rt.block_on(async {
        let c = browser(&driver.url, &profile).await;
        let url = format!("{}/player/hls.html?src={src}&cfg={with}", front.url());
        let r = match c.goto(&url).await {
            Ok(()) => {
                wait_js(
                    &c,
                    STATE,
                    60,
                    "hls.js playing the encrypted title past 8 s",
                    |v| {
                        v["t"].as_f64().unwrap_or(0.0) > 8.0
                            || v["state"]["errors"]
                                .as_array()
                                .is_some_and(|e| !e.is_empty())
                    },
                )
                .await
            }
            Err(e) => Err(format!("opening the page: {e}")),
        };
        let _ = c.close().await;
        r
    });
    let last = r.unwrap_or_else(|e| panic!("{e}"));
    eprintln!("hls.js with the token: {last}");
    assert!(
        last["state"]["errors"]
            .as_array()
            .is_some_and(|e| e.is_empty()),
        "hls.js errors: {last}"
    );
    assert!(last["t"].as_f64().unwrap_or(0.0) > 8.0, "{last}");

    // Without the token: the licence is refused, hls.js reports it, nothing plays.
    let without = cfg("/v1/objects/enc.mp4/license");
    let profile = vol.path("chromium-enc-refused");
    let r = rt.block_on(async {
        let c = browser(&driver.url, &profile).await;
        let url = format!("{}/player/hls.html?src={src}&cfg={without}", front.url());
        let r = match c.goto(&url).await {
            Ok(()) => {
                wait_js(&c, STATE, 60, "hls.js reporting the refused licence", |v| {
                    v["state"]["errors"]
                        .as_array()
                        .is_some_and(|e| !e.is_empty())
                })
                .await
            }
            Err(e) => Err(format!("opening the page: {e}")),
        };
        let _ = c.close().await;
        r
    });
    let last = r.unwrap_or_else(|e| panic!("{e}"));
    eprintln!("hls.js without the token: {last}");
    assert_eq!(
        last["t"].as_f64(),
        Some(0.0),
        "played without a licence: {last}"
    );
}
