//! Content protection of CMAF titles end to end (issue 32, the CENC half): an ffmpeg-made
//! H.264 + AAC CMAF file (`-movflags +cmaf`) ingested with `--encrypt` is stored as CENC
//! `cbcs`; its MPD names the key id and the Clear Key licence URL (the token carried); the
//! licence route answers a viewer's W3C Clear Key request with the JSON Web Key, never
//! cached, and `401` without a token; ffmpeg given that key decodes the stored object to
//! the clear file's video and audio frames (framemd5); without it, it does not; the HLS
//! playlists of the encrypted title carry a `SAMPLE-AES` Clear Key line with its key id.
//! `isnode play` with a viewer token writes the clear CMAF file (the input less its `sidx`),
//! over unicast and broadcast alike, and with `--start-at` the clear init segment and then
//! the clear fragments from that point, byte for byte the same file ingested clear's.
//!
//! ffmpeg 5.1 (Debian 12) matches CENC sample information to the wrong fragment when it
//! reads every `moof` at open (a file without `sidx`), so the decryptions here read with
//! `-fflags +ignidx` (fragments one at a time; newer ffmpeg needs no flag).
//!
//! These tests need Debian's `ffmpeg` package (`bash scripts/test` installs it); without it
//! they fail, saying so.

mod serve_support;

use std::path::Path;
use std::process::Command;

use isnode_keys::b64url;
use serve_support::media::tool;
use serve_support::*;

/// A 12 s H.264 + AAC CMAF file (2 s GOPs, 1 s fragments).
fn make_cmaf(dir: &Path) -> std::path::PathBuf {
    let out = dir.join("clear.mp4");
    let status = Command::new(tool("ffmpeg"))
        .args(["-v", "error", "-y", "-f", "lavfi", "-i"])
        .arg("testsrc2=size=320x240:rate=25")
        .args(["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000"])
        .args([
            "-t",
            "12",
            "-c:v",
            "libx264",
            "-g",
            "50",
            "-keyint_min",
            "50",
        ])
        .args([
            "-sc_threshold",
            "0",
            "-pix_fmt",
            "yuv420p",
            "-c:a",
            "aac",
            "-b:a",
            "64k",
        ])
        .args(["-movflags", "+cmaf", "-frag_duration", "1000000"])
        .arg(&out)
        .status()
        .expect("running ffmpeg");
    assert!(status.success(), "ffmpeg making the CMAF file");
    out
}

/// ffmpeg's framemd5 of stream `map` of `input` (`key`: CENC decryption key, hex), its
/// comment lines dropped, and whether it decoded without a message.
fn framemd5(input: &Path, map: &str, key: Option<&str>) -> (Vec<String>, bool) {
    let mut cmd = Command::new(tool("ffmpeg"));
    cmd.args(["-v", "error"]);
    if let Some(k) = key {
        cmd.args(["-fflags", "+ignidx", "-decryption_key", k]);
    }
    let out = cmd
        .arg("-i")
        .arg(input)
        .args(["-map", map, "-f", "framemd5", "-"])
        .output()
        .expect("running ffmpeg");
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(str::to_string)
        .collect();
    (lines, out.status.success() && out.stderr.is_empty())
}

/// The `cenc:default_KID` of an MPD, as 16 bytes.
fn default_kid(mpd: &str) -> [u8; 16] {
    let at = mpd.find("cenc:default_KID=\"").expect("a default_KID") + 18;
    let uuid = &mpd[at..at + 36];
    let hex: String = uuid.chars().filter(|c| *c != '-').collect();
    let bytes: Vec<u8> = (0..32)
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    bytes.try_into().unwrap()
}

#[test]
fn a_cmaf_title_is_cenc_cbcs_and_its_clear_key_licence_needs_a_viewer_token() {
    let vol = Vol::create(&[]);
    let clear = make_cmaf(vol.dir.path());
    let ingest = isnode(
        &vol,
        &["ingest", "--encrypt", "--name", "enc.mp4"]
            .iter()
            .copied()
            .chain([clear.to_str().unwrap()])
            .collect::<Vec<_>>(),
    );
    assert!(ingest.status.success(), "{}", text(&ingest));
    assert!(text(&ingest).contains("CENC cbcs"), "{}", text(&ingest));
    let viewer = token(&vol, "v", "viewer");
    let server = Server::start_env(&vol, &[], &[("ISNODE_LOG", "debug")]);

    // The MPD: the scheme with its key id, Clear Key with the licence URL and the token.
    let r = server.req(
        "GET",
        &format!("/v1/objects/enc.mp4/manifest.mpd?token={viewer}"),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let mpd = r.body.clone();
    serve_support::media::validate_mpd(&mpd);
    assert!(
        mpd.contains("urn:mpeg:dash:mp4protection:2011\" value=\"cbcs\""),
        "{mpd}"
    );
    assert!(
        mpd.contains("urn:uuid:e2719d58-a985-b3c9-781a-b030af78d30e"),
        "{mpd}"
    );
    let licence = format!("{}/v1/objects/enc.mp4/license?token={viewer}", server.url());
    assert!(
        mpd.contains(&format!("<dashif:Laurl>{licence}</dashif:Laurl>")),
        "{mpd}"
    );
    let kid = default_kid(&mpd);

    // The licence: 401 without a token, the JWK set with one, never cached.
    let body = format!(
        "{{\"kids\":[\"{}\"],\"type\":\"temporary\"}}",
        b64url::encode(&kid)
    );
    let r = server.req("POST", "/v1/objects/enc.mp4/license", Some(&body));
    assert_eq!(r.status, 401, "{}", r.body);
    assert!(r.body.contains("viewer"), "{}", r.body);
    let path = format!("/v1/objects/enc.mp4/license?token={viewer}");
    let other = format!("{{\"kids\":[\"{}\"]}}", b64url::encode(&[0x55; 16]));
    assert_eq!(server.req("POST", &path, Some(&other)).status, 404);
    let r = server.req("POST", &path, Some(&body));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("cache-control"), Some("private, no-store"));
    let set = r.json();
    assert_eq!(set["type"], "temporary");
    assert_eq!(set["keys"][0]["kty"], "oct");
    assert_eq!(set["keys"][0]["kid"], b64url::encode(&kid));
    let key = b64url::decode(set["keys"][0]["k"].as_str().unwrap()).unwrap();
    assert_eq!(key.len(), 16);
    let key_hex: String = key.iter().map(|b| format!("{b:02x}")).collect();

    // HLS of the encrypted CMAF title: SAMPLE-AES with Clear Key and the key id (base64 in
    // a data: URI), in the media and I-frame playlists; the master names no key.
    let key_line = format!(
        "#EXT-X-KEY:METHOD=SAMPLE-AES,URI=\"data:text/plain;base64,{}==\",\
         KEYFORMAT=\"org.w3.clearkey\",KEYFORMATVERSIONS=\"1\"",
        b64url::encode(&kid).replace('-', "+").replace('_', "/")
    );
    for route in ["index.m3u8", "master.m3u8", "iframes.m3u8"] {
        let path = format!("/v1/objects/enc.mp4/{route}?token={viewer}");
        let r = server.req("GET", &path, None);
        assert_eq!(r.status, 200, "{route}: {}", r.body);
        let keyed = r.body.lines().any(|l| l == key_line);
        assert_eq!(keyed, route != "master.m3u8", "{route}: {}", r.body);
    }

    // The stored object: with the key, the clear file's frames; without it, not.
    let stored = vol.path("stored.mp4");
    let out = isnode(&vol, &["cat", "enc.mp4"]);
    assert!(out.status.success(), "{}", text(&out));
    std::fs::write(&stored, &out.stdout).unwrap();
    assert!(
        !contains(&out.stdout, &key),
        "the key is not in the stored object"
    );
    for map in ["0:v", "0:a"] {
        let (want, clean) = framemd5(&clear, map, None);
        assert!(
            clean && want.len() >= 100,
            "{map} of the clear file: {}",
            want.len()
        );
        let (got, clean) = framemd5(&stored, map, Some(&key_hex));
        assert!(clean, "{map}: ffmpeg decrypting reported errors");
        assert_eq!(got, want, "{map}: the decrypted frames");
    }
    // The key in no log line (the server's, at debug) nor error body.
    let log = server.log_text();
    for form in [
        key_hex.clone(),
        key_hex.to_uppercase(),
        b64url::encode(&key),
    ] {
        assert!(!log.contains(&form), "the key in the server's log");
    }
    let (without, clean) = framemd5(&stored, "0:v", None);
    let (want, _) = framemd5(&clear, "0:v", None);
    assert!(!clean, "ffmpeg decodes the ciphertext without complaint");
    let same = without.iter().zip(&want).filter(|(a, b)| a == b).count();
    assert!(
        same * 10 < want.len(),
        "{same} of {} frames decode without the key",
        want.len()
    );
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// An HEVC (`hvc1`) CMAF title: ffmpeg decrypts it with the key of `GET .../key` to the
/// clear file's frames (2-byte NAL headers kept clear).
#[test]
fn an_hevc_cmaf_title_decrypts_to_the_clear_frames() {
    let vol = Vol::create(&[]);
    let clear = vol.path("hevc.mp4");
    let status = Command::new(tool("ffmpeg"))
        .args(["-v", "error", "-y", "-f", "lavfi", "-i"])
        .arg("testsrc2=size=320x240:rate=25")
        .args([
            "-t",
            "6",
            "-c:v",
            "libx265",
            "-x265-params",
            "log-level=error",
        ])
        .args(["-g", "50", "-tag:v", "hvc1", "-movflags", "+cmaf"])
        .args(["-frag_duration", "1000000"])
        .arg(&clear)
        .status()
        .expect("running ffmpeg");
    assert!(status.success(), "ffmpeg making the HEVC CMAF file");
    let out = isnode(&vol, &["ingest", "--encrypt", clear.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    let viewer = token(&vol, "v", "viewer");
    let server = Server::start(&vol, &[]);
    let (status, _, key) = get_bytes(&server, &format!("/v1/objects/hevc.mp4/key?token={viewer}"));
    assert_eq!(status, 200);
    assert_eq!(key.len(), 16);
    let key_hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    let stored = vol.path("stored.mp4");
    let out = isnode(&vol, &["cat", "hevc.mp4"]);
    assert!(out.status.success(), "{}", text(&out));
    std::fs::write(&stored, &out.stdout).unwrap();
    let (want, clean) = framemd5(&clear, "0:v", None);
    assert!(
        clean && want.len() == 150,
        "{} frames of the clear file",
        want.len()
    );
    let (got, clean) = framemd5(&stored, "0:v", Some(&key_hex));
    assert!(clean, "ffmpeg decrypting reported errors");
    assert_eq!(got, want, "the decrypted frames");
    let (_, clean) = framemd5(&stored, "0:v", None);
    assert!(
        !clean,
        "ffmpeg decodes the HEVC ciphertext without complaint"
    );
}

/// A GET's status, head and body bytes (the key is binary).
fn get_bytes(server: &Server, path: &str) -> (u16, String, Vec<u8>) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(server.addr).expect("connect");
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        server.addr
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("reading the answer");
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head");
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status");
    (status, head, raw[split + 4..].to_vec())
}

/// `bytes` (an MP4) without its top-level `sidx` boxes (what `--encrypt` drops).
fn without_sidx(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < bytes.len() {
        let size = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        assert!(size >= 8, "a box size of {size} at byte {at}");
        if &bytes[at + 4..at + 8] != b"sidx" {
            out.extend_from_slice(&bytes[at..at + size]);
        }
        at += size;
    }
    out
}

/// `isnode play` of an encrypted CMAF title with a viewer token writes the clear CMAF file:
/// byte-identical to the clear input less its top-level `sidx` boxes (dropped at
/// encryption), decoding to the clear title's video and audio frames; without a token it
/// fails naming the viewer role and writes nothing.
#[test]
fn play_of_an_encrypted_cmaf_title_writes_the_clear_file() {
    let vol = Vol::create(&[]);
    let clear = make_cmaf(vol.dir.path());
    let ingest = isnode(
        &vol,
        &[
            "ingest",
            "--encrypt",
            "--name",
            "enc.mp4",
            clear.to_str().unwrap(),
        ],
    );
    assert!(ingest.status.success(), "{}", text(&ingest));
    let viewer = token(&vol, "v", "viewer");
    let server = Server::start(&vol, &[]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    let (_, out) = play_to_end(
        &server,
        &vol,
        "enc.mp4",
        "pc",
        &["--token", &viewer],
        deadline,
    );
    let clear_bytes = std::fs::read(&clear).unwrap();
    let expected = without_sidx(&clear_bytes);
    assert!(
        out == expected,
        "play wrote {} bytes, not the {} of the clear file (less sidx: {})",
        out.len(),
        clear_bytes.len(),
        expected.len()
    );
    let played = vol.path("played.mp4");
    std::fs::write(&played, &out).unwrap();
    for map in ["0:v", "0:a"] {
        let (want, clean) = framemd5(&clear, map, None);
        assert!(clean && want.len() >= 100, "{map} of the clear file");
        let (got, clean) = framemd5(&played, map, None);
        assert!(clean, "{map}: ffmpeg reported errors on the played file");
        assert_eq!(got, want, "{map}: the played file's frames");
    }
    // Without a token: refused by role, nothing written.
    let refused = vol.path("refused.mp4");
    let out = command()
        .args(["play", "enc.mp4", "--server", &server.url(), "--out"])
        .arg(&refused)
        .output()
        .expect("running isnode play");
    assert!(!out.status.success(), "played without a token");
    let msg = text(&out);
    assert!(msg.contains("viewer role"), "{msg}");
    assert_eq!(std::fs::read(&refused).map_or(0, |b| b.len()), 0);
}

/// `play --broadcast` of an encrypted CMAF title with a viewer token writes the clear CMAF
/// file, byte for byte what unicast play writes (the input less its `sidx`); without a
/// token it fails naming the viewer role and writes nothing (never ciphertext). In a
/// namespace of the test's own (the server sends the broadcast to multicast groups on its
/// loopback).
#[test]
fn play_broadcast_of_an_encrypted_cmaf_title_writes_the_clear_file() {
    let ns = serve_support::netns::Netns::with_loopback_multicast();
    ns.run(|| {
        let vol = Vol::create(&[]);
        let clear = make_cmaf(vol.dir.path());
        let got = encrypted_broadcast_output(&vol, &clear, "enc.mp4");
        let out_path = vol.path("broadcast-out.mp4");
        std::fs::write(&out_path, &got).unwrap();
        let expected = without_sidx(&std::fs::read(&clear).unwrap());
        assert!(
            got == expected,
            "the broadcast wrote {} bytes, not the {} of the clear file less sidx",
            got.len(),
            expected.len()
        );
        for map in ["0:v", "0:a"] {
            let (want, _) = framemd5(&clear, map, None);
            let (frames, clean) = framemd5(&out_path, map, None);
            assert!(
                clean,
                "{map}: ffmpeg reported errors on the broadcast's output"
            );
            assert_eq!(frames, want, "{map}: the broadcast's output's frames");
        }
    });
}

/// `bytes` (an MP4) without its top-level boxes of the kinds `drop`.
fn without_boxes(bytes: &[u8], drop: &[&[u8; 4]]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < bytes.len() {
        let size = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        assert!(size >= 8, "a box size of {size} at byte {at}");
        if !drop.iter().any(|k| &bytes[at + 4..at + 8] == *k) {
            out.extend_from_slice(&bytes[at..at + size]);
        }
        at += size;
    }
    out
}

/// The bytes of an MP4 before its first top-level `moof` (its init segment).
fn init_of(bytes: &[u8]) -> &[u8] {
    let mut at = 0usize;
    while &bytes[at + 4..at + 8] != b"moof" {
        at += u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    }
    &bytes[..at]
}

/// `isnode play --start-at 6` of an encrypted CMAF title with a viewer token writes the
/// clear init segment and then the clear fragments from the random-access point at or
/// before 6 s: the fragments byte for byte what `--start-at 6` of the same file ingested
/// clear writes (less the `sidx` boxes encryption drops, and the `mfra`, whose entries name
/// fragments not written), and it decodes to the clear file's last video frames. Of the
/// clear title, `--start-at 6` writes its init segment (less its `sidx`) first too, and
/// decodes to the same frames.
#[test]
fn play_start_at_of_an_encrypted_cmaf_title_writes_the_clear_fragments_from_there() {
    let vol = Vol::create(&[]);
    let clear = make_cmaf(vol.dir.path());
    for (name, encrypt) in [("enc.mp4", true), ("clear.mp4", false)] {
        let mut args = vec!["ingest", "--name", name, clear.to_str().unwrap()];
        if encrypt {
            args.insert(1, "--encrypt");
        }
        let out = isnode(&vol, &args);
        assert!(out.status.success(), "{}", text(&out));
    }
    let viewer = token(&vol, "v", "viewer");
    let server = Server::start(&vol, &[]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    let from = ["--start-at", "6", "--as-fast-as-possible"];
    let (_, plain) = play_to_end(&server, &vol, "clear.mp4", "plain", &from, deadline);
    let extra = [&from[..], &["--token", &viewer]].concat();
    let (_, got) = play_to_end(&server, &vol, "enc.mp4", "enc", &extra, deadline);
    let clear_bytes = std::fs::read(&clear).unwrap();
    // Clear `--start-at` writes the title's init segment (less its `sidx`), then the stored
    // bytes from a fragment on: its output plays alone.
    let clear_init = without_sidx(&clear_bytes);
    let clear_init = init_of(&clear_init);
    assert!(
        plain.starts_with(clear_init),
        "clear --start-at starts with the init segment"
    );
    let from_fragment = &plain[clear_init.len()..];
    assert_eq!(&from_fragment[4..8], b"moof", "then a fragment");
    assert!(plain.len() * 3 < clear_bytes.len() * 2, "6 s into 12 s");
    let fragments = without_boxes(from_fragment, &[b"sidx", b"mfra"]);
    let expected = [clear_init, &fragments[..]].concat();
    assert!(
        got == expected,
        "play --start-at wrote {} bytes, not the {} of the clear init and fragments",
        got.len(),
        expected.len()
    );
    let played = vol.path("from6.mp4");
    std::fs::write(&played, &got).unwrap();
    // Each frame's size and MD5 (ffmpeg times the output from its first fragment's).
    let pictures = |lines: Vec<String>| -> Vec<String> {
        let fields = |l: &String| l.rsplitn(3, ',').take(2).collect::<Vec<_>>().join(",");
        lines.iter().map(fields).collect()
    };
    let (want, _) = framemd5(&clear, "0:v", None);
    let (frames, clean) = framemd5(&played, "0:v", None);
    assert!(clean, "ffmpeg reported errors on the output from 6 s");
    let (want, frames) = (pictures(want), pictures(frames));
    assert!(
        frames.len() >= 100 && want.ends_with(&frames),
        "{} frames from 6 s, not the clear file's last ones (of {})",
        frames.len(),
        want.len()
    );
    // The clear title's output from 6 s plays alone too: the same frames.
    let plain_played = vol.path("plain-from6.mp4");
    std::fs::write(&plain_played, &plain).unwrap();
    let (plain_frames, clean) = framemd5(&plain_played, "0:v", None);
    assert!(clean, "ffmpeg reported errors on the clear output from 6 s");
    assert_eq!(
        pictures(plain_frames),
        frames,
        "the clear output's frames from 6 s"
    );
    http_from_a_later_fragment_stops(&server, &vol, &viewer, deadline);
}

/// `play --http --start-at 6` of the encrypted CMAF title `enc.mp4`: its clear length is
/// not known before the fragments arrive, so play stops, saying so, instead of announcing
/// a wrong length.
fn http_from_a_later_fragment_stops(
    server: &Server,
    vol: &Vol,
    viewer: &str,
    deadline: std::time::Instant,
) {
    let listen = format!("127.0.0.1:{}", free_port());
    let stderr = vol.path("http.stderr");
    let mut child = ChildGuard(Some(
        command()
            .args(["play", "enc.mp4", "--server", &server.url()])
            .args(["--token", viewer, "--start-at", "6", "--http", &listen])
            .args(["--max-seconds", "30"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("spawning isnode play --http"),
    ));
    let status = child.wait_until(deadline, "isnode play --http --start-at");
    let msg = std::fs::read_to_string(&stderr).unwrap_or_default();
    assert!(
        !status.success(),
        "--http --start-at of a cbcs title: {msg}"
    );
    assert!(msg.contains("--http plays it from its start only"), "{msg}");
}
