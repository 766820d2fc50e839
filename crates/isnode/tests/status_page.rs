//! The status page (`GET /`) in a real headless Chromium (Debian's `chromium`), driven
//! over WebDriver (`chromedriver`, Debian's `chromium-driver`) with `fantoccini`: while
//! three `isnode play` clients stream, the page lists the three sessions and the titles;
//! a clicked H.264 MP4 plays in its `<video>` (its `currentTime` advances), and so does an
//! MPEG-TS title through HLS and Media Source Extensions; a screenshot is kept in
//! `target/artifacts/status-page.png`.
//!
//! A missing `chromium` or `chromedriver` fails the test: `scripts/test` installs them.

mod serve_support;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use fantoccini::{Client, Locator};
use serde_json::{json, Value};
use serve_support::browser::{browser, require_chromium, wait_js, Driver};
use serve_support::media::{self, Container};
use serve_support::{command, ChildGuard, Server, Vol};

#[test]
fn status_page_shows_live_sessions_and_plays_titles() {
    require_chromium();
    let vol = Vol::create(&[]);
    let mp4 = media::make(vol.dir.path(), Container::Mp4MoovFront, 20);
    vol.add_file("clip.mp4", &mp4);
    let ts = media::make(vol.dir.path(), Container::Ts, 20);
    vol.add_file("clip.ts", &ts);
    vol.add_ts("long.ts", 2_000_000, 90.0, 3);
    // A file to drop on the page: a real MPEG-TS (the upload probes its bitrate).
    let dropped = vol.path("dropped.ts");
    let out = command()
        .args([
            "gen-ts",
            "--bitrate",
            "2000000",
            "--duration",
            "1",
            "--seed",
            "9",
        ])
        .arg(&dropped)
        .output()
        .expect("running isnode gen-ts");
    assert!(out.status.success(), "gen-ts: {out:?}");
    let dropped = std::fs::read(&dropped).expect("reading the file to drop");
    let server = Server::start(&vol, &[]);
    let _players: Vec<ChildGuard> = (0..3).map(|i| play(&server, &vol, i)).collect();
    wait_streaming(&server, 3);
    // The page runs its own scripts only: what follows plays under that policy.
    let csp = server.req("GET", "/", None);
    let policy = csp.header("content-security-policy").unwrap_or_default();
    assert!(
        policy.contains("script-src 'self';") && policy.contains("object-src 'none'"),
        "the page's policy: {policy:?}"
    );

    let profile = vol.path("chromium-profile");
    let driver = Driver::start(&vol);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    rt.block_on(async {
        let c = browser(&driver.url, &profile).await;
        let result = check_page(&c, &server, &dropped).await;
        let _ = c.close().await;
        if let Err(e) = result {
            panic!("{e}");
        }
    });
}

/// `isnode play long.ts` in the background, killed when dropped.
fn play(server: &Server, vol: &Vol, i: usize) -> ChildGuard {
    let out = vol.path(&format!("play-{i}.out"));
    let log = vol.path(&format!("play-{i}.log"));
    ChildGuard(Some(
        command()
            .args(["play", "long.ts", "--server", &server.url()])
            .arg("--out")
            .arg(&out)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("play log"))
            .spawn()
            .expect("spawning isnode play"),
    ))
}

/// Waits (bounded) until `GET /v1/status` lists `n` streaming sessions.
fn wait_streaming(server: &Server, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = server.req("GET", "/v1/status", None);
        let v: Value = serde_json::from_str(&r.body).unwrap_or(Value::Null);
        let streaming = v["sessions"].as_array().map_or(0, |s| {
            s.iter().filter(|x| x["state"] == "streaming").count()
        });
        if streaming >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{n} sessions did not start within 60 s: {}",
            r.body
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

async fn check_page(c: &Client, server: &Server, dropped: &[u8]) -> Result<(), String> {
    c.goto(&format!("{}/", server.url()))
        .await
        .map_err(|e| format!("opening the page: {e}"))?;
    let rows =
        "return Array.from(document.querySelectorAll('#sessions tbody tr[data-session-id]'))\
                .map(r => r.textContent)";
    let sessions = wait_js(c, rows, 30, "three sessions in the DOM", |v| {
        v.as_array().is_some_and(|a| a.len() == 3)
    })
    .await?;
    for row in sessions.as_array().into_iter().flatten() {
        let text = row.as_str().unwrap_or_default();
        if !(text.contains("long.ts") && text.contains("streaming")) {
            return Err(format!("a session row without its title or state: {text}"));
        }
    }
    let titles = "return Array.from(document.querySelectorAll('#titles tbody tr[data-title]'))\
                  .map(r => r.dataset.title)";
    let titles = wait_js(c, titles, 10, "the titles", |v| {
        v.as_array().is_some_and(|a| a.len() == 3)
    })
    .await?;
    if titles != json!(["clip.mp4", "clip.ts", "long.ts"]) {
        return Err(format!("titles: {titles}"));
    }
    let count = "return document.getElementById('k-sessions').textContent";
    wait_js(c, count, 10, "the session count", |v| v == "3").await?;

    play_and_advance(c, "clip.mp4").await?;
    // The egress chart has drawn its samples by now.
    let paths = "return document.querySelectorAll('#chart path').length";
    wait_js(c, paths, 10, "the egress chart", |v| v.as_u64() >= Some(1)).await?;
    screenshot(c).await?;
    play_and_advance(c, "clip.ts").await?;
    upload_by_drop(c, server, dropped).await?;
    // With the operator's token typed in, a title still plays, and the token is in no URL
    // the page gives its <video> (URLs end in logs and history).
    play_and_advance(c, "clip.mp4").await?;
    let src = c
        .execute("return document.getElementById('player').src", vec![])
        .await
        .map_err(|e| format!("the player's src: {e}"))?;
    match src.as_str() {
        Some(s) if s.contains("/o/clip.mp4") && !s.contains("token") => Ok(()),
        _ => Err(format!("the player's URL with a token typed in: {src}")),
    }
}

/// Types the operator token into the page, drops a file on the drop zone (a real `drop`
/// event carrying a `File`, as a browser makes one), waits for the page to report the
/// upload, and checks the stored object byte for byte through `/o/NAME`.
async fn upload_by_drop(c: &Client, server: &Server, bytes: &[u8]) -> Result<(), String> {
    let token = std::env::var("ISNODE_TEST_OPERATOR_TOKEN").unwrap_or_else(|_| "t".into());
    let field = c
        .find(Locator::Id("token"))
        .await
        .map_err(|e| format!("the token field: {e}"))?;
    field
        .send_keys(&token)
        .await
        .map_err(|e| format!("typing the token: {e}"))?;
    c.find(Locator::Css("#token-form button[type='submit']"))
        .await
        .map_err(|e| format!("the token button: {e}"))?
        .click()
        .await
        .map_err(|e| format!("using the token: {e}"))?;
    let drop = "const bytes = Uint8Array.from(arguments[0]); \
                const dt = new DataTransfer(); \
                dt.items.add(new File([bytes], 'dropped.ts', {type: 'video/mp2t'})); \
                const zone = document.getElementById('drop'); \
                zone.dispatchEvent(new DragEvent('dragenter', {dataTransfer: dt, bubbles: true, cancelable: true})); \
                zone.dispatchEvent(new DragEvent('drop', {dataTransfer: dt, bubbles: true, cancelable: true})); \
                return true";
    c.execute(drop, vec![json!(bytes)])
        .await
        .map_err(|e| format!("dropping a file: {e}"))?;
    let done = "return document.body.dataset.lastUpload || null";
    let last = wait_js(c, done, 60, "the upload's answer", |v| v.is_string()).await?;
    if last != json!("dropped.ts:201") {
        return Err(format!("the dropped upload answered {last}"));
    }
    let got = get_bytes(server.addr, "/o/dropped.ts")?;
    if got != bytes {
        return Err(format!(
            "/o/dropped.ts: {} bytes, not the {} dropped (or different bytes)",
            got.len(),
            bytes.len()
        ));
    }
    Ok(())
}

/// The body of `GET path` (HTTP/1.1, `Connection: close`), which must answer 200.
fn get_bytes(addr: SocketAddr, path: &str) -> Result<Vec<u8>, String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).map_err(|e| format!("connecting: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .map_err(|e| e.to_string())?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("sending: {e}"))?;
    let mut all = Vec::new();
    s.read_to_end(&mut all)
        .map_err(|e| format!("reading: {e}"))?;
    let head_end = all
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no end of the answer's head")?;
    let head = String::from_utf8_lossy(&all[..head_end]);
    if !head.starts_with("HTTP/1.1 200") {
        return Err(format!("GET {path}: {head}"));
    }
    Ok(all[head_end + 4..].to_vec())
}

/// Clicks the title's Play button; its `<video>` must play: `currentTime` past 1 s,
/// then further on.
async fn play_and_advance(c: &Client, title: &str) -> Result<(), String> {
    let button = format!("tr[data-title='{title}'] button[data-action='play']");
    c.find(Locator::Css(&button))
        .await
        .map_err(|e| format!("the Play button of {title}: {e}"))?
        .click()
        .await
        .map_err(|e| format!("clicking Play on {title}: {e}"))?;
    let now = "const v = document.getElementById('player'); \
               return {t: v.currentTime, err: v.error ? v.error.message || String(v.error.code) : null, \
               info: document.getElementById('player-info').textContent, src: v.currentSrc, \
               buffered: Array.from({length: v.buffered.length}, (_, i) => [v.buffered.start(i), v.buffered.end(i)])}";
    let started = wait_js(c, now, 40, &format!("{title} playing past 1 s"), |v| {
        v["t"].as_f64().unwrap_or(0.0) > 1.0
    })
    .await?;
    let t1 = started["t"].as_f64().unwrap_or(0.0);
    wait_js(c, now, 20, &format!("{title} advancing"), |v| {
        v["t"].as_f64().unwrap_or(0.0) > t1 + 0.5
    })
    .await?;
    Ok(())
}

/// Saves the page as `target/artifacts/status-page.png`.
async fn screenshot(c: &Client) -> Result<(), String> {
    let png = c
        .screenshot()
        .await
        .map_err(|e| format!("screenshot: {e}"))?;
    if !png.starts_with(b"\x89PNG") {
        return Err("the screenshot is not a PNG".into());
    }
    let dir = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../target/artifacts"
    ));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join("status-page.png");
    std::fs::write(&path, png).map_err(|e| format!("{}: {e}", path.display()))
}
