//! Content protection end to end (issue 32, the MPEG-TS / HLS AES-128 half): an
//! ffmpeg-made H.264 + AAC MPEG-TS title ingested clear and with `--encrypt`; ffmpeg plays
//! the encrypted title's HLS with a viewer token and decodes the same video frames as the
//! clear file (framemd5); `isnode play` with the token writes the clear file (through
//! loss, and from a time), and without one fails naming the role; the stored ciphertext, decrypted segment by segment with the key
//! and IVs the server hands out, is the clear file byte for byte; without a token the key
//! is `401`; the stored bytes alone do not decode; the key's bytes appear in no log line,
//! metrics scrape, `/v1/status`, error body, command output or UDP datagram (captured on
//! the loopback with `dumpcap`) of the run; `node.key` is
//! 0600 and a key file others may read is refused. A title of MPEG-TS renditions ingested
//! with `--encrypt` has one key for every rung: each variant of its master playlist plays
//! to its clear file's frames, and `isnode play --rung N` writes rung N's clear file.
//!
//! These tests need Debian's `ffmpeg` and `tshark` packages (`bash scripts/test` installs
//! them); without them they fail, saying so.

mod serve_support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serve_support::media::{self, tool, Container};
use serve_support::*;

/// A raw HTTP/1.1 GET: status, lower-cased headers, body bytes (the key is binary).
fn get_raw(addr: SocketAddr, path: &str) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("reading the answer");
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an HTTP head");
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status");
    (status, head, raw[split + 4..].to_vec())
}

/// The video frames' MD5s of `input` (ffmpeg's framemd5, its comment lines dropped).
fn video_framemd5(input: &str) -> Vec<String> {
    let out = Command::new(tool("ffmpeg"))
        .args([
            "-v", "error", "-i", input, "-map", "0:v", "-f", "framemd5", "-",
        ])
        .output()
        .expect("running ffmpeg");
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "ffmpeg framemd5 of {input}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

/// The video frames ffprobe decodes in the file at `path` (0 when it finds no stream).
fn frames_in(path: &Path) -> u64 {
    let out = Command::new(tool("ffprobe"))
        .args(["-v", "error", "-count_frames", "-select_streams", "v"])
        .args(["-show_entries", "stream=nb_read_frames", "-of", "csv=p=0"])
        .arg(path)
        .output()
        .expect("running ffprobe");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().parse::<u64>().ok())
        .sum()
}

/// One segment of an encrypted playlist: byte range and IV.
#[derive(Debug)]
struct Seg {
    offset: u64,
    len: u64,
    iv: [u8; 16],
}

/// The segments of an AES-128 playlist: every segment has its own `EXT-X-KEY` line.
fn encrypted_segments(playlist: &str, key_uri: &str) -> Vec<Seg> {
    let mut out = Vec::new();
    let mut iv = None;
    for line in playlist.lines() {
        if let Some(rest) = line.strip_prefix("#EXT-X-KEY:") {
            let want = format!("METHOD=AES-128,URI=\"{key_uri}\",IV=0x");
            let hex = rest.strip_prefix(&want).unwrap_or_else(|| panic!("{line}"));
            let bytes: Vec<u8> = (0..32)
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            assert_eq!(hex.len(), 32, "{line}");
            iv = Some(<[u8; 16]>::try_from(bytes).unwrap());
        }
        if let Some(range) = line.strip_prefix("#EXT-X-BYTERANGE:") {
            let (len, offset) = range.split_once('@').unwrap();
            out.push(Seg {
                offset: offset.parse().unwrap(),
                len: len.parse().unwrap(),
                iv: iv.take().expect("an EXT-X-KEY before each segment"),
            });
        }
    }
    out
}

/// Every way the key's bytes could show: raw, and hexadecimal in either case.
fn key_forms(key: &[u8]) -> Vec<Vec<u8>> {
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    vec![
        key.to_vec(),
        hex.clone().into_bytes(),
        hex.to_uppercase().into_bytes(),
    ]
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// `dumpcap` capturing the UDP datagrams on the loopback (the stream, keepalives, token
/// echoes) into a file, until stopped. A missing `dumpcap` fails the test: `scripts/test`
/// installs tshark, which brings it.
struct UdpCapture {
    child: ChildGuard,
    path: std::path::PathBuf,
}

impl UdpCapture {
    fn start(path: &Path) -> UdpCapture {
        let child = Command::new("dumpcap")
            .args(["-q", "-i", "lo", "-f", "udp", "-w"])
            .arg(path)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("dumpcap (tshark) is needed by this test: run scripts/test");
        let capture = UdpCapture {
            child: ChildGuard(Some(child)),
            path: path.to_path_buf(),
        };
        // Capturing once the file has its header (pcapng's section and interface blocks).
        let by = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::fs::metadata(path).map_or(0, |m| m.len()) == 0 {
            assert!(std::time::Instant::now() < by, "dumpcap did not start");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
        capture
    }

    /// Stops the capture (SIGTERM: dumpcap flushes and exits) and returns its bytes.
    fn stop(mut self) -> Vec<u8> {
        std::thread::sleep(std::time::Duration::from_millis(300));
        if let Some(c) = self.child.0.as_mut() {
            let pid = libc::pid_t::try_from(c.id()).unwrap();
            // SAFETY: kill(2) with a child's pid has no memory effects.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        self.child.wait_until(
            std::time::Instant::now() + std::time::Duration::from_secs(10),
            "dumpcap",
        );
        std::fs::read(&self.path).expect("the capture file")
    }
}

#[test]
fn an_encrypted_ts_title_plays_with_a_token_and_its_key_leaks_nowhere() {
    let vol = Vol::create(&[]);
    let clear = media::make(vol.dir.path(), Container::Ts, 12);
    let clear_s = clear.to_str().unwrap();
    let mut outputs = Vec::new();
    let ingest = isnode(&vol, &["ingest", "--name", "clear.ts", clear_s]);
    assert!(ingest.status.success(), "{}", text(&ingest));
    let ingest = isnode(&vol, &["ingest", "--encrypt", "--name", "enc.ts", clear_s]);
    assert!(ingest.status.success(), "{}", text(&ingest));
    outputs.push(text(&ingest).into_bytes());
    let node_key = vol.root.join("node.key");
    let mode = std::fs::metadata(&node_key).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "node.key's mode");

    let viewer = token(&vol, "v", "viewer");
    let metrics = token(&vol, "m", "metrics");
    let server = Server::start_env(&vol, &[], &[("ISNODE_LOG", "debug")]);
    let addr = server.addr;

    // The playlist: one EXT-X-KEY per segment, the token carried onto key and segments.
    let (status, _, body) = get_raw(
        addr,
        &format!("/v1/objects/enc.ts/index.m3u8?token={viewer}"),
    );
    assert_eq!(status, 200);
    let playlist = String::from_utf8(body).unwrap();
    let segs = encrypted_segments(&playlist, &format!("key?token={viewer}"));
    assert!(segs.len() >= 5, "12 s in 2 s GOPs: {playlist}");
    let ivs: std::collections::HashSet<_> = segs.iter().map(|s| s.iv).collect();
    assert_eq!(ivs.len(), segs.len(), "every segment has its own IV");
    // No I-frame playlist of the ciphertext (a key frame of a title encrypted segment by
    // segment cannot be deciphered alone); the clear title has one.
    for (name, want) in [("enc.ts", 404), ("clear.ts", 200)] {
        let path = format!("/v1/objects/{name}/iframes.m3u8?token={viewer}");
        let (status, _, body) = get_raw(addr, &path);
        assert_eq!(status, want, "{path}: {}", String::from_utf8_lossy(&body));
    }

    // The key: 401 without a token (anonymous viewers are allowed here), with an unknown
    // one, 200 and 16 bytes, never cached, with the viewer's.
    let mut error_bodies = Vec::new();
    for path in [
        "/v1/objects/enc.ts/key".to_string(),
        format!("/v1/objects/enc.ts/key?token={}", "ab".repeat(32)),
    ] {
        let (status, _, body) = get_raw(addr, &path);
        assert_eq!(status, 401, "{path}: {}", String::from_utf8_lossy(&body));
        assert!(String::from_utf8_lossy(&body).contains("viewer"));
        error_bodies.push(body);
    }
    let (status, _, body) = get_raw(addr, &format!("/v1/objects/clear.ts/key?token={viewer}"));
    assert_eq!(status, 404, "a clear title has no key");
    error_bodies.push(body);
    let (status, head, key) = get_raw(addr, &format!("/v1/objects/enc.ts/key?token={viewer}"));
    assert_eq!(status, 200, "{head}");
    assert_eq!(key.len(), 16);
    assert!(head.contains("cache-control: private, no-store"), "{head}");

    // ffmpeg plays the HLS with the token: the clear file's video frames, every one.
    let url = format!(
        "{}/v1/objects/enc.ts/index.m3u8?token={viewer}",
        server.url()
    );
    let played = video_framemd5(&url);
    let want = video_framemd5(clear_s);
    assert!(want.len() >= 12 * 25, "{} frames", want.len());
    assert_eq!(played, want, "the encrypted title's frames");

    // `isnode play` with the token, through 3 % loss: the clear file, byte for byte; from
    // 4 s: the clear file from the segment there. Without a token: refused naming the role.
    let clear_bytes = std::fs::read(&clear).unwrap();
    let played_path = vol.path("played.ts");
    let play = |extra: &[&str]| {
        command()
            .args(["play", "enc.ts", "--server", &server.url(), "--out"])
            .arg(&played_path)
            .args(extra)
            .output()
            .expect("running isnode play")
    };
    let capture = UdpCapture::start(&vol.path("udp.pcapng"));
    let out = play(&["--token", &viewer, "--loss", "0.03", "--seed", "5"]);
    let udp = capture.stop();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        udp.len() > clear_bytes.len(),
        "the stream's UDP packets were captured"
    );
    outputs.push(udp);
    assert!(
        std::fs::read(&played_path).unwrap() == clear_bytes,
        "play's output"
    );
    outputs.push(text(&out).into_bytes());
    let out = play(&["--token", &viewer, "--start-at", "4"]);
    assert!(out.status.success(), "{}", text(&out));
    let tail = std::fs::read(&played_path).unwrap();
    assert!(
        tail.len() > 100_000 && tail.len() < clear_bytes.len(),
        "{}",
        tail.len()
    );
    assert!(clear_bytes.ends_with(&tail), "play --start-at 4's output");
    let out = play(&[]);
    assert!(!out.status.success(), "played without a token");
    let msg = text(&out);
    assert!(
        msg.contains("viewer role") && msg.contains("encrypted"),
        "{msg}"
    );
    assert_eq!(
        std::fs::read(&played_path).map_or(0, |b| b.len()),
        0,
        "output without a key"
    );
    outputs.push(msg.into_bytes());

    // The stored object is ciphertext that decrypts, segment by segment, to the clear file.
    let (status, _, stored) = get_raw(addr, "/o/enc.ts");
    assert_eq!(status, 200, "segments are public");
    assert_ne!(stored, clear_bytes);
    let ck = isnode_keys::content::ContentKey::from_slice(&key).unwrap();
    let mut decrypted = Vec::new();
    for s in &segs {
        let c = &stored[s.offset as usize..(s.offset + s.len) as usize];
        decrypted.extend(isnode_keys::segment::decrypt(&ck, &s.iv, c).unwrap());
    }
    assert!(
        decrypted == clear_bytes,
        "decrypted segments differ from the clear file"
    );

    // Without the key the stored bytes do not decode.
    let stored_path = vol.path("stored.ts");
    std::fs::write(&stored_path, &stored).unwrap();
    assert_eq!(
        frames_in(&stored_path),
        0,
        "ffprobe decoded frames of ciphertext"
    );
    assert!(
        frames_in(&clear) >= 12 * 25,
        "the probe counts frames of the clear file"
    );

    // The key's bytes are nowhere else: the log, metrics, /v1/status, error bodies, output.
    let auth = format!("Bearer {metrics}");
    for path in ["/metrics", "/v1/status"] {
        let r = http(addr, None, "GET", path, None, &[("Authorization", &auth)]);
        assert_eq!(r.status, 200, "{path}");
        outputs.push(r.body.into_bytes());
    }
    let ls = isnode(&vol, &["ls", "--json"]);
    outputs.push(text(&ls).into_bytes());
    let log = std::fs::read(&server.log).unwrap();
    assert!(log.len() > 100, "a debug log was written");
    for (what, bytes) in [("the log", &log)]
        .into_iter()
        .chain(error_bodies.iter().map(|b| ("an error body", b)))
        .chain(outputs.iter().map(|b| ("an answer or output", b)))
    {
        for form in key_forms(&key) {
            assert!(!contains(bytes, &form), "the key is in {what}");
        }
    }
}

/// Two MPEG-TS renditions ingested as one title with `--encrypt`: one key (the same bytes
/// from either rung's key route, 401 without a token), every variant of `master.m3u8` an
/// AES-128 playlist whose frames are its clear file's, and `isnode play --rung N` with the
/// token writes rung N's clear file byte for byte.
#[test]
fn an_encrypted_ts_ladder_has_one_key_and_plays_every_rung() {
    let vol = Vol::create(&[]);
    let rungs: Vec<std::path::PathBuf> = [("320x180", "300k"), ("480x270", "600k")]
        .iter()
        .enumerate()
        .map(|(i, &r)| media::encode_rung(vol.dir.path(), &format!("r{i}"), r, false, "6"))
        .collect();
    let mut args = vec!["ingest", "--encrypt", "--name", "show"];
    args.extend(rungs.iter().map(|f| f.to_str().unwrap()));
    let out = isnode(&vol, &args);
    assert!(out.status.success(), "{}", text(&out));
    let viewer = token(&vol, "v", "viewer");
    let server = Server::start(&vol, &[]);
    let keys: Vec<Vec<u8>> = (0..2)
        .map(|i| {
            let path = format!("/v1/objects/show%40{i}/key");
            let (status, _, _) = get_raw(server.addr, &path);
            assert_eq!(status, 401, "{path} without a token");
            let (status, head, key) = get_raw(server.addr, &format!("{path}?token={viewer}"));
            assert_eq!(status, 200, "{path}: {head}");
            key
        })
        .collect();
    assert_eq!(keys[0].len(), 16);
    assert_eq!(keys[0], keys[1], "one key for the title");
    let master = format!("/v1/objects/show/master.m3u8?token={viewer}");
    let (status, _, body) = get_raw(server.addr, &master);
    assert_eq!(status, 200);
    let master = String::from_utf8(body).unwrap();
    assert_eq!(master.matches("#EXT-X-STREAM-INF").count(), 2, "{master}");
    for (i, clear) in rungs.iter().enumerate() {
        let url = format!(
            "{}/v1/objects/show%40{i}/index.m3u8?token={viewer}",
            server.url()
        );
        let (_, _, body) = get_raw(server.addr, &url[server.url().len()..]);
        let playlist = String::from_utf8(body).unwrap();
        assert!(
            playlist.contains("#EXT-X-KEY:METHOD=AES-128,"),
            "{playlist}"
        );
        let clear_s = clear.to_str().unwrap();
        assert_eq!(
            video_framemd5(&url),
            video_framemd5(clear_s),
            "rung {i}'s frames"
        );
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let rung = i.to_string();
        let extra = ["--token", viewer.as_str(), "--rung", rung.as_str()];
        let played = play_run(&server, &vol, "show", &format!("rung{i}"), &extra, deadline);
        assert!(
            played.status.success(),
            "isnode play --rung {i}: {}",
            played.log
        );
        assert!(
            played.bytes() == std::fs::read(clear).unwrap(),
            "rung {i}: the clear file"
        );
    }
}

#[test]
fn key_files_others_can_read_and_unsupported_inputs_are_refused() {
    let vol = Vol::create(&[]);
    let clear = media::make(vol.dir.path(), Container::Ts, 4);
    let key_file = vol.path("shared.key");
    std::fs::write(&key_file, format!("{}\n", "5a".repeat(32))).unwrap();
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let args = [
        "ingest",
        "--encrypt",
        "--node-key-file",
        key_file.to_str().unwrap(),
        clear.to_str().unwrap(),
    ];
    let out = isnode(&vol, &args);
    assert!(!out.status.success(), "a 0644 key file was used");
    let msg = text(&out);
    assert!(msg.contains("0644") && msg.contains("0600"), "{msg}");
    assert!(
        !msg.contains(&"5a".repeat(32)),
        "the error shows the key: {msg}"
    );

    // 0600: used, and the title is listed.
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = isnode(&vol, &args);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        !vol.root.join("node.key").exists(),
        "the named file, not node.key"
    );

    // A progressive (not fragmented) MP4: refused by name, nothing written (a fragmented
    // one is CENC cbcs: tests/protection_cmaf.rs).
    let mp4 = media::make(vol.dir.path(), Container::Mp4MoovFront, 4);
    let out = isnode(&vol, &["ingest", "--encrypt", mp4.to_str().unwrap()]);
    assert!(!out.status.success());
    let msg = text(&out);
    assert!(
        msg.contains("not fragmented") && msg.contains("+cmaf"),
        "{msg}"
    );
    let ls = text(&isnode(&vol, &["ls"]));
    assert!(!ls.contains(".mp4"), "{ls}");
}

#[test]
fn a_rekey_rewraps_the_keys_without_touching_the_titles() {
    let vol = Vol::create(&[]);
    let file = vol.path("gen.ts");
    gen_ts(&file, 2_000_000, 6.0, 3);
    let out = isnode(&vol, &["ingest", "--encrypt", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    let viewer = token(&vol, "v", "viewer");
    let node_key = vol.root.join("node.key");
    let before = std::fs::read(&node_key).unwrap();
    let server = Server::start(&vol, &[]);
    let key_path = format!("/v1/objects/gen.ts/key?token={viewer}");
    let (status, _, key) = get_raw(server.addr, &key_path);
    assert_eq!(status, 200);
    let (_, _, stored) = get_raw(server.addr, "/o/gen.ts");

    let out = isnode(&vol, &["volume", "rekey"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("rewrapped 1 of 1"), "{}", text(&out));
    let after = std::fs::read(&node_key).unwrap();
    assert_ne!(before, after, "a new node key");
    let mode = std::fs::metadata(&node_key).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    assert!(!vol.root.join("node.key.new").exists());

    // The running server unwraps with the new key at once: the same content key, the
    // same stored bytes.
    let (status, _, again) = get_raw(server.addr, &key_path);
    assert_eq!(status, 200);
    assert_eq!(again, key);
    let (_, _, stored_again) = get_raw(server.addr, "/o/gen.ts");
    assert!(stored_again == stored, "the title's bytes changed");

    // The old node key no longer unwraps: put back, the key route fails (500, no key).
    let old = vol.path("old.key");
    std::fs::write(&old, &before).unwrap();
    std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = isnode(
        &vol,
        &["volume", "rekey", "--new-key-file", old.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", text(&out));
    let (status, _, body) = get_raw(server.addr, &key_path);
    assert_eq!(status, 500, "node.key no longer wraps the keys");
    assert!(!contains(&body, &key));
    assert!(String::from_utf8_lossy(&body).contains("cannot be unwrapped"));
}

/// `play --broadcast` of an encrypted title decrypts with a viewer token: the clear file,
/// byte for byte; without a token it fails naming the viewer role and writes nothing (never
/// ciphertext), before joining any group. In a namespace of the test's own (the server
/// sends the broadcast to multicast groups on its loopback).
#[test]
fn play_broadcast_of_an_encrypted_title_decrypts_with_a_token_and_not_without() {
    let ns = serve_support::netns::Netns::with_loopback_multicast();
    ns.run(|| {
        let vol = Vol::create(&[]);
        let clear = vol.path("clear.ts");
        gen_ts(&clear, 2_000_000, 6.0, 9);
        let got = encrypted_broadcast_output(&vol, &clear, "enc.ts");
        assert!(
            got == std::fs::read(&clear).unwrap(),
            "the broadcast's decrypted output differs from the clear file"
        );
    });
}
