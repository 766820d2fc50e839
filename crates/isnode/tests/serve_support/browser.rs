//! A headless Chromium (Debian's `chromium`) driven over WebDriver (`chromedriver`,
//! Debian's `chromium-driver`) with `fantoccini`, for the browser tests (`status_page.rs`,
//! `stock_players.rs`). A missing tool fails the test naming `scripts/test`.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder};
use serde_json::{json, Value};

use super::{free_port, ChildGuard, Vol};

/// Debian's Chromium.
pub(crate) const CHROMIUM: &str = "/usr/bin/chromium";
/// Debian's chromedriver.
pub(crate) const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// Fails (naming `scripts/test`) when Chromium or chromedriver is missing.
#[track_caller]
pub(crate) fn require_chromium() {
    for tool in [CHROMIUM, CHROMEDRIVER] {
        assert!(
            Path::new(tool).exists(),
            "{tool} is missing: run scripts/test, which installs Debian's chromium and \
             chromium-driver"
        );
    }
}

/// A `chromedriver` child on a free port.
pub(crate) struct Driver {
    _child: ChildGuard,
    /// Its WebDriver URL.
    pub url: String,
}

impl Driver {
    /// Starts chromedriver (its log in the volume directory) and waits (bounded) for it.
    pub(crate) fn start(vol: &Vol) -> Driver {
        let port = free_port();
        let child = ChildGuard(Some(
            std::process::Command::new(CHROMEDRIVER)
                .arg(format!("--port={port}"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(vol.path("chromedriver.log")).expect("log"))
                .spawn()
                .expect("spawning chromedriver"),
        ));
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let deadline = Instant::now() + Duration::from_secs(30);
        while !ready(addr) {
            assert!(
                Instant::now() < deadline,
                "chromedriver did not answer in 30 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Driver {
            _child: child,
            url: format!("http://127.0.0.1:{port}"),
        }
    }
}

/// Whether chromedriver's `GET /status` answers 200 (its headers have no space after the
/// colon, so it is read raw).
fn ready(addr: SocketAddr) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 12];
    s.read_exact(&mut head).is_ok() && head.ends_with(b"200")
}

/// A headless Chromium session with a fresh profile.
pub(crate) async fn browser(driver: &str, profile: &Path) -> Client {
    let args = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--autoplay-policy=no-user-gesture-required",
        "--window-size=1400,1250",
    ]
    .iter()
    .map(|a| a.to_string())
    .chain([format!("--user-data-dir={}", profile.display())])
    .collect::<Vec<_>>();
    let caps = json!({
        "browserName": "chrome",
        "goog:chromeOptions": { "binary": CHROMIUM, "args": args },
    });
    let caps = match caps {
        Value::Object(m) => m,
        _ => unreachable!("an object literal"),
    };
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    ClientBuilder::new(connector)
        .capabilities(caps)
        .connect(driver)
        .await
        .expect("a Chromium session through chromedriver")
}

/// Evaluates `script` (a function body that returns a value) until `ok` accepts its
/// value or `secs` pass; the last value.
pub(crate) async fn wait_js(
    c: &Client,
    script: &str,
    secs: u64,
    what: &str,
    ok: impl Fn(&Value) -> bool,
) -> Result<Value, String> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let v = c
            .execute(script, vec![])
            .await
            .map_err(|e| format!("{what}: {e}"))?;
        if ok(&v) {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            return Err(format!("{what}: not within {secs} s (last: {v})"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
