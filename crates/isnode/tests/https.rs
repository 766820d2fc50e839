//! HTTPS for the control API (issue 11, "an authentic control channel"): `isnode cert`
//! makes a self-signed pair, `serve --tls-cert --tls-key` serves the API over TLS, and
//! `play --ca-cert` trusts it; a client that does not trust the certificate fails with a
//! clear certificate error; plain HTTP on a non-loopback address needs `--plain-http`.

mod serve_support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serve_support::*;

/// `isnode cert --out DIR`: (certificate, key).
fn make_cert(dir: &Path) -> (PathBuf, PathBuf) {
    run_ok(&["cert", "--out", dir.to_str().unwrap()]);
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    assert!(cert.is_file() && key.is_file(), "isnode cert wrote no pair");
    (cert, key)
}

/// Runs `isnode play NAME --server URL EXTRA...` to its end (bounded); (success, stderr,
/// output bytes).
fn play(vol: &Vol, url: &str, name: &str, tag: &str, extra: &[&str]) -> (bool, String, Vec<u8>) {
    let out = vol.path(&format!("{tag}.out"));
    let stderr = vol.path(&format!("{tag}.stderr"));
    let mut child = ChildGuard(Some(
        command()
            .args(["play", name, "--server", url, "--out"])
            .arg(&out)
            .args([
                "--as-fast-as-possible",
                "--timeout-s",
                "5",
                "--max-seconds",
                "30",
            ])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("spawning isnode play"),
    ));
    let status = child.wait_until(Instant::now() + Duration::from_secs(60), "isnode play");
    let log = std::fs::read_to_string(&stderr).unwrap_or_default();
    (
        status.success(),
        log,
        std::fs::read(&out).unwrap_or_default(),
    )
}

#[test]
fn play_over_https_trusts_only_the_given_ca() {
    let vol = Vol::create(&[]);
    let original = vol.add_ts("clip.ts", 2_000_000, 2.0, 7);
    let (cert, key) = make_cert(&vol.path("pair"));
    let (other_cert, _) = make_cert(&vol.path("other"));
    let server = Server::start(
        &vol,
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    );
    let url = format!("https://{}", server.addr);

    // The right CA: the stream plays, byte-identical.
    let (ok, log, bytes) = play(
        &vol,
        &url,
        "clip.ts",
        "trusted",
        &["--ca-cert", cert.to_str().unwrap()],
    );
    assert!(ok, "play over HTTPS with the CA failed:\n{log}");
    assert!(bytes == original, "the output over HTTPS differs");

    // No CA (the public roots) and another self-signed CA: a certificate error, no stream.
    for (tag, extra) in [
        ("no-ca", vec![]),
        ("other-ca", vec!["--ca-cert", other_cert.to_str().unwrap()]),
    ] {
        let (ok, log, bytes) = play(&vol, &url, "clip.ts", tag, &extra);
        assert!(
            !ok,
            "{tag}: play trusted a certificate it should not:\n{log}"
        );
        assert!(
            log.to_ascii_lowercase().contains("certificate"),
            "{tag}: the error does not say it is the certificate:\n{log}"
        );
        assert!(bytes.is_empty(), "{tag}: bytes were written");
    }

    // Plain HTTP to the HTTPS port gets nothing useful either.
    assert!(try_http(server.addr, None, "GET", "/v1/objects", None, &[])
        .map(|r| r.status != 200)
        .unwrap_or(true));
}

/// `serve` on a non-loopback address refuses plain HTTP unless `--plain-http` is given.
#[test]
fn plain_http_off_loopback_is_refused_without_the_flag() {
    let vol = Vol::create(&[]);
    let out = command()
        .args(["serve", "--volume", vol.root.to_str().unwrap()])
        .args(["--listen", "0.0.0.0:0"])
        .stdin(Stdio::null())
        .output()
        .expect("running isnode serve");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "serve started plain HTTP on 0.0.0.0");
    assert!(
        stderr.contains("--plain-http") && stderr.contains("--tls-cert"),
        "{stderr}"
    );
}
