//! dash.js in a real headless Chromium plays a CENC `cbcs` CMAF title through EME's W3C
//! Clear Key (issue 32): the MPD's `ContentProtection` names the key id and the licence URL
//! (the viewer's token carried on it), Chromium's Clear Key CDM asks the node's licence
//! route, and the video plays past 8 s with no player error. The same title's MPD asked
//! without a token names a licence URL without one: the licence is refused (`401`), the
//! player reports a protection error and the video never gets past its start (the
//! segments alone do not play).
//!
//! The player is the npm package `dashjs` that `scripts/test` installs with
//! `scripts/install-players`; a missing player, `chromium`, `chromedriver` or `ffmpeg`
//! fails the test, naming `scripts/test`.

mod serve_support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use serve_support::browser::{browser, require_chromium, wait_js, Driver};
use serve_support::front::Front;
use serve_support::media::tool;
use serve_support::*;

/// The players' directory (`scripts/install-players`).
fn players_dir() -> PathBuf {
    match std::env::var_os("ISNODE_PLAYERS_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/isnode-players"),
    }
}

/// dash.js, which must be installed.
fn dash_js() -> Vec<u8> {
    let p = players_dir().join("node_modules/dashjs/dist/modern/umd/dash.all.min.js");
    std::fs::read(&p).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: dash.js is missing: run scripts/test (scripts/install-players installs \
             it from npm)",
            p.display()
        )
    })
}

/// The page: dash.js on `?src=`, errors and the licence requests kept in `window.t`.
const PAGE: &str =
    "<!doctype html><html><head><meta charset=utf-8><title>cenc</title></head><body>\
    <video id=v muted autoplay playsinline width=640 height=360></video>\
    <script src=\"/player/dash.js\"></script><script>\
    window.t = {errors: [], licences: 0, asked: []};\
    /* What dash.js asks of EME, kept for the failure messages. */\
    const rmksa = navigator.requestMediaKeySystemAccess.bind(navigator);\
    navigator.requestMediaKeySystemAccess = (k, c) => { t.asked.push([k, c]); return rmksa(k, c); };\
    const SRC = new URLSearchParams(location.search).get('src');\
    const v = document.getElementById('v');\
    v.addEventListener('error', () => t.errors.push('video: ' + (v.error && v.error.message)));\
    try {\
      const p = dashjs.MediaPlayer().create(); window.p = p;\
      const E = dashjs.MediaPlayer.events;\
      p.on(E.ERROR, e => t.errors.push('error: ' + JSON.stringify(e.error || e)));\
      p.on(E.PLAYBACK_ERROR, e => t.errors.push('playback: ' + JSON.stringify(e.error || e)));\
      const PE = (dashjs.Protection && dashjs.Protection.events) || {};\
      p.on(PE.LICENSE_REQUEST_COMPLETE || 'public_licenseRequestComplete', e => { t.licences += 1; \
        if (e.error) t.errors.push('licence: ' + JSON.stringify(e.error)); });\
      p.initialize(v, SRC, true);\
    } catch (e) { t.errors.push('setup: ' + e); }\
    </script></body></html>";

/// What the page reports.
const STATE: &str = "const v = document.getElementById('v'); \
    let audio = null; try { audio = window.p.getRepresentationsByType('audio').length; } catch (e) {} \
    return {t: v ? v.currentTime : null, audio: audio, state: window.t || null}";

/// A 20 s H.264 CMAF file (2 s GOPs, 1 s fragments), video only: Chromium's EME refuses
/// a video capability whose codecs name audio too, which is what dash.js asks for a
/// representation muxing both (audio as its own rendition is not encrypted yet).
fn make_cmaf(dir: &Path) -> PathBuf {
    let out = dir.join("clear.mp4");
    let status = Command::new(tool("ffmpeg"))
        .args(["-v", "error", "-y", "-f", "lavfi", "-i"])
        .arg("testsrc2=size=640x360:rate=25")
        .args([
            "-t",
            "20",
            "-c:v",
            "libx264",
            "-g",
            "50",
            "-keyint_min",
            "50",
        ])
        .args(["-sc_threshold", "0", "-pix_fmt", "yuv420p"])
        .args(["-movflags", "+cmaf", "-frag_duration", "1000000"])
        .arg(&out)
        .status()
        .expect("running ffmpeg");
    assert!(status.success(), "ffmpeg making the CMAF file");
    out
}

/// A 20 s AAC CMAF file: the audio rendition of a title.
fn make_audio(dir: &Path) -> PathBuf {
    let out = dir.join("audio.mp4");
    let status = Command::new(tool("ffmpeg"))
        .args(["-v", "error", "-y", "-f", "lavfi", "-i"])
        .arg("sine=frequency=440:sample_rate=48000")
        .args([
            "-t",
            "20",
            "-c:a",
            "aac",
            "-b:a",
            "64k",
            "-movflags",
            "+cmaf",
        ])
        .args(["-frag_duration", "2000000"])
        .arg(&out)
        .status()
        .expect("running ffmpeg");
    assert!(status.success(), "ffmpeg making the audio file");
    out
}

/// `src` percent-encoded as one query value.
fn query_value(src: &str) -> String {
    src.bytes()
        .map(|b| match b {
            b'?' => "%3F".to_string(),
            b'=' => "%3D".to_string(),
            b'&' => "%26".to_string(),
            _ => char::from(b).to_string(),
        })
        .collect()
}

#[test]
fn dash_js_plays_a_cbcs_title_through_clear_key_and_not_without_a_token() {
    require_chromium();
    let files = HashMap::from([
        (
            "dash.js".to_string(),
            (dash_js(), "text/javascript".to_string()),
        ),
        (
            "cenc.html".to_string(),
            (
                PAGE.as_bytes().to_vec(),
                "text/html; charset=utf-8".to_string(),
            ),
        ),
    ]);
    let vol = Vol::create(&[]);
    let clear = make_cmaf(vol.dir.path());
    let args = [
        "ingest",
        "--encrypt",
        "--name",
        "enc.mp4",
        clear.to_str().unwrap(),
    ];
    let out = isnode(&vol, &args);
    assert!(out.status.success(), "{}", text(&out));
    // A title: the video and an AAC rendition of its own, one key for both.
    let audio = make_audio(vol.dir.path());
    let args = ["ingest", "--encrypt", "--name", "show"];
    let out = isnode(
        &vol,
        &[
            &args[..],
            &[clear.to_str().unwrap(), audio.to_str().unwrap()],
        ]
        .concat(),
    );
    assert!(out.status.success(), "{}", text(&out));
    let out = isnode(&vol, &["token", "add", "--name", "v", "--role", "viewer"]);
    assert!(out.status.success(), "{}", text(&out));
    let viewer = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let server = Server::start(&vol, &[]);
    let front = Front::start(server.addr, files);
    let driver = Driver::start(&vol);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let with_token = format!("/v1/objects/enc.mp4/manifest.mpd?token={viewer}");
    let title = format!("/v1/objects/show/manifest.mpd?token={viewer}");
    let runs: [(&str, &str); 3] = [
        ("token", &with_token),
        ("none", "/v1/objects/enc.mp4/manifest.mpd"),
        ("title", &title),
    ];
    let mut results: Vec<Value> = Vec::new();
    for (label, src) in runs {
        let profile = vol.path(&format!("chromium-{label}"));
        let url = format!("{}/player/cenc.html?src={}", front.url(), query_value(src));
        let r = rt.block_on(async {
            let c = browser(&driver.url, &profile).await;
            let r = match c.goto(&url).await {
                Ok(()) => {
                    wait_js(&c, STATE, 60, label, |v| {
                        v["t"].as_f64().unwrap_or(0.0) > 8.0
                            || v["state"]["errors"]
                                .as_array()
                                .is_some_and(|e| !e.is_empty())
                    })
                    .await
                }
                Err(e) => Err(format!("opening {url}: {e}")),
            };
            let _ = c.close().await;
            r
        });
        eprintln!("{label}: {r:?}");
        results.push(r.unwrap_or_else(|e| panic!("{label}: {e}")));
    }
    let played = &results[0];
    assert!(
        played["state"]["errors"]
            .as_array()
            .is_some_and(|e| e.is_empty()),
        "with the token: player errors: {played}"
    );
    assert!(played["t"].as_f64().unwrap_or(0.0) > 8.0, "{played}");
    assert!(played["state"]["licences"].as_u64() >= Some(1), "{played}");
    let show = &results[2];
    assert!(
        show["state"]["errors"]
            .as_array()
            .is_some_and(|e| e.is_empty()),
        "the title with its audio: player errors: {show}"
    );
    assert!(show["t"].as_f64().unwrap_or(0.0) > 8.0, "{show}");
    assert_eq!(show["audio"], 1, "{show}");
    let refused = &results[1];
    let errors = refused["state"]["errors"].to_string();
    assert!(
        refused["t"].as_f64().unwrap_or(0.0) < 1.0,
        "without a token the title played: {refused}"
    );
    assert!(
        errors.contains("401") || errors.contains("icense"),
        "{refused}"
    );
}
