//! The status page's hls.js player (issues 31 and 32), in a real headless Chromium driven
//! over WebDriver (`serve_support::browser`): hls.js is vendored in the binary
//! (`GET /ui/vendor/hls.min.js`, `nosniff`). A 2-rung MPEG-TS ladder (ffmpeg, H.264 +
//! AAC, 2 s GOPs aligned) plays adaptively from the titles table; the rung picker lists
//! "auto" and both rungs, and picking a rung makes hls.js load that rung's segments
//! (`hls.currentLevel` and the page's resource timings), "auto" gives the choice back.
//! An encrypted (`--encrypt`, AES-128) MPEG-TS title plays with a token holding the viewer
//! role typed into the page (sent in `Authorization`, in no URL), and without a token it
//! does not: the key answers 401 and the page says the key needs the viewer role. An
//! encrypted CMAF (CENC `cbcs`) title plays through dash.js (vendored too, loaded on first
//! use) and EME Clear Key with the token, and without it the licence is refused.
//!
//! A missing `chromium`, `chromedriver` or `ffmpeg` fails the test: `scripts/test` installs
//! them.

mod serve_support;

use std::path::{Path, PathBuf};
use std::process::Command;

use fantoccini::{Client, Locator};
use serde_json::Value;
use serve_support::browser::{browser, require_chromium, wait_js, Driver};
use serve_support::media::{self, tool, Container};
use serve_support::*;

/// What the page's `<video>` and player report.
const NOW: &str = "const v = document.getElementById('player'); \
    const p = window.isnode.state.player; const h = p && p.hls; \
    return {t: v.currentTime, level: h ? h.currentLevel : null, \
    auto: h ? h.autoLevelEnabled : null, err: document.body.dataset.playerError || null, \
    info: document.getElementById('player-info').textContent}";

/// One rung of the ladder (ffmpeg, H.264 + AAC in MPEG-TS, 2 s GOPs, 30 s).
fn rung(dir: &Path, i: usize, size: &str, rate: &str) -> PathBuf {
    let out = dir.join(format!("r{i}.ts"));
    let src = format!("testsrc2=size={size}:rate=25");
    let o = Command::new(tool("ffmpeg"))
        .args(["-v", "error", "-y", "-f", "lavfi", "-i", &src])
        .args(["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000"])
        .args(["-map", "0:v", "-map", "1:a", "-c:a", "aac", "-b:a", "64k"])
        .args([
            "-t",
            "30",
            "-c:v",
            "libx264",
            "-preset",
            "ultrafast",
            "-b:v",
            rate,
        ])
        .args([
            "-g",
            "50",
            "-keyint_min",
            "50",
            "-sc_threshold",
            "0",
            "-r",
            "25",
        ])
        .args(["-f", "mpegts"])
        .arg(&out)
        .output()
        .expect("running ffmpeg");
    assert!(
        o.status.success() && o.stderr.is_empty(),
        "ffmpeg: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// Runs `check` against the page in a fresh headless Chromium; panics with its error.
fn with_browser<F>(vol: &Vol, check: F)
where
    F: for<'a> FnOnce(
        &'a Client,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<(), String>> + 'a>,
    >,
{
    let profile = vol.path("chromium-profile");
    let driver = Driver::start(vol);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    rt.block_on(async {
        let c = browser(&driver.url, &profile).await;
        let result = check(&c).await;
        let _ = c.close().await;
        if let Err(e) = result {
            panic!("{e}");
        }
    });
}

#[test]
fn status_page_plays_a_ladder_with_a_rung_picker() {
    require_chromium();
    let vol = Vol::create(&[]);
    let files = [
        rung(vol.dir.path(), 0, "320x180", "400k"),
        rung(vol.dir.path(), 1, "640x360", "1200k"),
    ];
    let mut args = vec!["ingest", "--name", "lad"];
    args.extend(files.iter().map(|f| f.to_str().unwrap()));
    let out = isnode(&vol, &args);
    assert!(out.status.success(), "{}", text(&out));
    let server = Server::start(&vol, &[]);
    let js = server.req("GET", "/ui/vendor/hls.min.js", None);
    assert_eq!(js.status, 200);
    assert_eq!(js.header("x-content-type-options"), Some("nosniff"));
    assert!(
        js.header("content-type")
            .is_some_and(|t| t.starts_with("text/javascript")),
        "{:?}",
        js.header("content-type")
    );
    let url = server.url();
    with_browser(&vol, |c| Box::pin(ladder_checks(c, url)));
}

async fn ladder_checks(c: &Client, url: String) -> Result<(), String> {
    c.goto(&format!("{url}/"))
        .await
        .map_err(|e| format!("opening the page: {e}"))?;
    click_play(c, "lad").await?;
    advancing(c, "the ladder").await?;
    let options =
        "return Array.from(document.querySelectorAll('#rung option')).map(o => o.textContent)";
    let options = wait_js(c, options, 10, "the rung picker", |v| {
        v.as_array().is_some_and(|a| a.len() == 3)
    })
    .await?;
    let labels: Vec<&str> = options
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if labels[0] != "auto" || !labels[1].starts_with("320x180") || !labels[2].starts_with("640x360")
    {
        return Err(format!("the rung picker lists {labels:?}"));
    }
    for level in [0u64, 1] {
        pick(c, level).await?;
        // hls.js fetches the rung's segments (rendition lad@LEVEL) after the pick.
        let fetched = format!(
            "const t0 = Number(document.body.dataset.picked); \
             return performance.getEntriesByType('resource').filter(e => e.startTime >= t0 && \
             decodeURIComponent(e.name).includes('/lad@{level}/content')).length"
        );
        wait_js(c, &fetched, 20, &format!("segments of rung {level}"), |v| {
            v.as_u64() >= Some(1)
        })
        .await?;
        let now = wait_js(c, NOW, 20, &format!("rung {level} current"), |v| {
            v["level"].as_i64() == Some(level as i64) && v["auto"] == Value::Bool(false)
        })
        .await?;
        let label = "return document.getElementById('rung-now').textContent";
        let want = if level == 0 {
            "manual: playing 180p"
        } else {
            "manual: playing 360p"
        };
        wait_js(c, label, 20, "the rung label", |v| {
            v.as_str().is_some_and(|s| s.starts_with(want))
        })
        .await?;
        let t = now["t"].as_f64().unwrap_or(0.0);
        wait_js(c, NOW, 20, "playing on after the pick", |v| {
            v["t"].as_f64().unwrap_or(0.0) > t + 0.5
        })
        .await?;
    }
    pick(c, u64::MAX).await?;
    wait_js(c, NOW, 10, "automatic again", |v| {
        v["auto"] == Value::Bool(true)
    })
    .await?;
    Ok(())
}

/// Picks rung `level` (`u64::MAX`: "auto") in the picker as a user does (a `change`
/// event), noting the time in `body.dataset.picked`.
async fn pick(c: &Client, level: u64) -> Result<(), String> {
    let value = if level == u64::MAX {
        "-1".to_string()
    } else {
        level.to_string()
    };
    let js = format!(
        "const s = document.getElementById('rung'); document.body.dataset.picked = String(performance.now()); \
         s.value = '{value}'; s.dispatchEvent(new Event('change')); return s.value"
    );
    let got = c
        .execute(&js, vec![])
        .await
        .map_err(|e| format!("picking rung {value}: {e}"))?;
    if got != Value::String(value.clone()) {
        return Err(format!("the picker has no option {value}: {got}"));
    }
    Ok(())
}

/// Clicks the Play button of `title`'s row (waiting for the row).
async fn click_play(c: &Client, title: &str) -> Result<(), String> {
    let row = format!("return !!document.querySelector(\"tr[data-title='{title}'] button[data-action='play']:not([disabled])\")");
    wait_js(c, &row, 20, &format!("the row of {title}"), |v| {
        v == &Value::Bool(true)
    })
    .await?;
    let button = format!("tr[data-title='{title}'] button[data-action='play']");
    c.find(Locator::Css(&button))
        .await
        .map_err(|e| format!("the Play button of {title}: {e}"))?
        .click()
        .await
        .map_err(|e| format!("clicking Play on {title}: {e}"))?;
    Ok(())
}

/// The `<video>` plays: past 1 s, then further on.
async fn advancing(c: &Client, what: &str) -> Result<(), String> {
    let started = wait_js(c, NOW, 30, &format!("{what} playing past 1 s"), |v| {
        v["t"].as_f64().unwrap_or(0.0) > 1.0 || v["err"].is_string()
    })
    .await?;
    if let Some(e) = started["err"].as_str() {
        return Err(format!("{what}: the page reports {e}"));
    }
    let t1 = started["t"].as_f64().unwrap_or(0.0);
    wait_js(c, NOW, 20, &format!("{what} advancing"), |v| {
        v["t"].as_f64().unwrap_or(0.0) > t1 + 0.5
    })
    .await?;
    Ok(())
}

#[test]
fn status_page_plays_an_encrypted_title_with_a_viewer_token_only() {
    require_chromium();
    let vol = Vol::create(&[]);
    let clear = media::make(vol.dir.path(), Container::Ts, 20);
    let token = encrypted_with_page_token(&vol, "enc.ts", &clear);
    let server = Server::start(&vol, &[]);
    let key = server.req("GET", "/v1/objects/enc.ts/key", None);
    assert_eq!(key.status, 401, "the key without a token");
    let url = server.url();
    with_browser(&vol, |c| Box::pin(encrypted_checks(c, url, token)));
}

async fn encrypted_checks(c: &Client, url: String, token: String) -> Result<(), String> {
    c.goto(&format!("{url}/"))
        .await
        .map_err(|e| format!("opening the page: {e}"))?;
    type_token(c, &token).await?;
    click_play(c, "enc.ts").await?;
    advancing(c, "the encrypted title with the token").await?;
    // The token went in headers only: in no URL the page fetched or gave its <video>.
    no_token_in_urls(c, &token, "/v1/objects/enc.ts/key").await?;
    // Without a token: the playlist and segments load (public), the key answers 401, and
    // the page says why; the video never starts.
    forget_token(c).await?;
    c.execute("window.isnode.play('enc.ts'); return true", vec![])
        .await
        .map_err(|e| format!("playing without a token: {e}"))?;
    let failed = wait_js(c, NOW, 30, "the key refused without a token", |v| {
        v["err"].is_string()
    })
    .await?;
    let err = failed["err"].as_str().unwrap_or_default();
    if !(err.contains("viewer role") && err.contains("401")) {
        return Err(format!("without a token the page reports: {failed}"));
    }
    if failed["t"].as_f64().unwrap_or(1.0) > 0.0 {
        return Err(format!(
            "the encrypted title played without a token: {failed}"
        ));
    }
    Ok(())
}

/// A 20 s H.264 CMAF file (2 s GOPs, 1 s fragments), video only (Chromium's EME refuses a
/// video capability naming audio codecs too: protection_dash.rs).
fn make_cmaf(dir: &Path) -> PathBuf {
    let out = dir.join("clear.mp4");
    let o = Command::new(tool("ffmpeg"))
        .args(["-v", "error", "-y", "-f", "lavfi", "-i"])
        .arg("testsrc2=size=640x360:rate=25")
        .args(["-t", "20", "-c:v", "libx264", "-preset", "ultrafast"])
        .args(["-g", "50", "-keyint_min", "50", "-sc_threshold", "0"])
        .args([
            "-pix_fmt",
            "yuv420p",
            "-movflags",
            "+cmaf",
            "-frag_duration",
            "1000000",
        ])
        .arg(&out)
        .output()
        .expect("running ffmpeg");
    assert!(
        o.status.success() && o.stderr.is_empty(),
        "ffmpeg: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

#[test]
fn status_page_plays_an_encrypted_cmaf_title_through_clear_key() {
    require_chromium();
    let vol = Vol::create(&[]);
    let clear = make_cmaf(vol.dir.path());
    let token = encrypted_with_page_token(&vol, "enc.mp4", &clear);
    let server = Server::start(&vol, &[]);
    let js = server.req("GET", "/ui/vendor/dash.all.min.js", None);
    assert_eq!(js.status, 200);
    assert_eq!(js.header("x-content-type-options"), Some("nosniff"));
    let url = server.url();
    with_browser(&vol, |c| Box::pin(cmaf_checks(c, url, token)));
}

async fn cmaf_checks(c: &Client, url: String, token: String) -> Result<(), String> {
    c.goto(&format!("{url}/"))
        .await
        .map_err(|e| format!("opening the page: {e}"))?;
    type_token(c, &token).await?;
    click_play(c, "enc.mp4").await?;
    advancing(c, "the encrypted CMAF title with the token").await?;
    let how = "return document.getElementById('player-info').textContent";
    let how = c
        .execute(how, vec![])
        .await
        .map_err(|e| format!("the player info: {e}"))?;
    if !how.as_str().is_some_and(|s| s.contains("dash.js")) {
        return Err(format!("played without dash.js: {how}"));
    }
    no_token_in_urls(c, &token, "/v1/objects/enc.mp4/license").await?;
    forget_token(c).await?;
    c.execute("window.isnode.play('enc.mp4'); return true", vec![])
        .await
        .map_err(|e| format!("playing without a token: {e}"))?;
    let failed = wait_js(c, NOW, 40, "the licence refused without a token", |v| {
        v["err"].is_string()
    })
    .await?;
    let err = failed["err"].as_str().unwrap_or_default();
    if !err.contains("viewer role") {
        return Err(format!("without a token the page reports: {failed}"));
    }
    if failed["t"].as_f64().unwrap_or(1.0) > 0.5 {
        return Err(format!(
            "the encrypted title played without a token: {failed}"
        ));
    }
    Ok(())
}

/// Types `token` into the page's token field and uses it.
async fn type_token(c: &Client, token: &str) -> Result<(), String> {
    let field = c
        .find(Locator::Id("token"))
        .await
        .map_err(|e| format!("the token field: {e}"))?;
    field
        .send_keys(token)
        .await
        .map_err(|e| format!("typing the token: {e}"))?;
    c.find(Locator::Css("#token-form button[type='submit']"))
        .await
        .map_err(|e| format!("the token button: {e}"))?
        .click()
        .await
        .map_err(|e| format!("using the token: {e}"))?;
    Ok(())
}

/// Clicks the page's Forget button.
async fn forget_token(c: &Client) -> Result<(), String> {
    c.find(Locator::Id("token-clear"))
        .await
        .map_err(|e| format!("the Forget button: {e}"))?
        .click()
        .await
        .map_err(|e| format!("forgetting the token: {e}"))?;
    Ok(())
}

/// The page fetched `protected` (the key or licence), and no URL it fetched or gave its
/// `<video>` holds the token.
async fn no_token_in_urls(c: &Client, token: &str, protected: &str) -> Result<(), String> {
    let urls = "return performance.getEntriesByType('resource').map(e => e.name)\
                .concat([document.getElementById('player').src])";
    let urls = c
        .execute(urls, vec![])
        .await
        .map_err(|e| format!("the page's URLs: {e}"))?;
    let all: Vec<&str> = urls
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if !all.iter().any(|u| u.contains(protected)) {
        return Err(format!("no request of {protected} among {all:?}"));
    }
    match all
        .iter()
        .find(|u| u.contains("token") || u.contains(token))
    {
        Some(u) => Err(format!("a URL with the token: {u}")),
        None => Ok(()),
    }
}

/// Ingests `file` encrypted as `name` and adds the page's token (viewer and metrics roles);
/// the token.
#[track_caller]
fn encrypted_with_page_token(vol: &Vol, name: &str, file: &std::path::Path) -> String {
    ingest_encrypted(vol, name, file);
    let add = [
        "token", "add", "--name", "page", "--role", "viewer", "--role", "metrics",
    ];
    let out = isnode(vol, &add);
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
