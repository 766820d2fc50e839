//! The media index end to end (issue 10): the random-access points of real ffmpeg media,
//! the HLS playlist of an MPEG-TS title, `play --start-at`, and seek / pause / resume of a
//! live session through the control API, observed on a UDP socket.
//!
//! These tests need Debian's `ffmpeg` package (`bash scripts/test` installs it); without
//! it they fail, saying so.

mod serve_support;

use std::net::UdpSocket;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use serve_support::media::{self, Container, KEYFRAME_EVERY_S};
use serve_support::*;

/// Byte positions of the video key frames of `file`, from ffprobe.
fn key_positions(file: &std::path::Path) -> Vec<u64> {
    let out = Command::new("ffprobe")
        .args(["-v", "error", "-select_streams", "v", "-of", "csv"])
        .args(["-show_entries", "packet=pos,flags"])
        .arg(file)
        .output()
        .expect("running ffprobe (install Debian's ffmpeg package)");
    assert!(out.status.success(), "ffprobe: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(",K"))
        .filter_map(|l| l.split(',').nth(1)?.parse().ok())
        .collect()
}

/// `(time_s, offset_bytes, codeword)` of each point of `GET /v1/objects/{name}/index`.
fn index_points(server: &Server, name: &str) -> Vec<(f64, u64, u64)> {
    let r = server.req("GET", &format!("/v1/objects/{name}/index"), None);
    assert_eq!(r.status, 200, "{}", r.body);
    let j = r.json();
    assert_eq!(j["container"], "mpeg-ts", "{j}");
    j["points"]
        .as_array()
        .expect("points")
        .iter()
        .map(|p| {
            (
                p["time_s"].as_f64().unwrap(),
                p["offset_bytes"].as_u64().unwrap(),
                p["codeword"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// The error answer of a refused request: its status is `status`, the body an ErrorBody.
#[track_caller]
fn refused(r: &Resp, status: u16) {
    assert_eq!(r.status, status, "{}", r.body);
    assert!(
        r.json()["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{}",
        r.body
    );
}

/// The index of a 20 s ffmpeg TS has a point every 2 s, at the key frames ffprobe finds;
/// the HLS playlist cuts there and covers the whole title; MP4 titles say where their
/// `moov` is and get no playlist; unknown titles are 404.
#[test]
fn ts_index_and_hls_playlist() {
    let vol = Vol::create(&[]);
    let ts = media::make(vol.dir.path(), Container::Ts, 20);
    let bytes = vol.add_file("clip.ts", &ts);
    let front = media::make(vol.dir.path(), Container::Mp4MoovFront, 20);
    vol.add_file("front.mp4", &front);
    let end = media::make(vol.dir.path(), Container::Mp4MoovEnd, 20);
    vol.add_file("end.mp4", &end);
    let server = Server::start(&vol, &[]);

    let points = index_points(&server, "clip.ts");
    let offsets: Vec<u64> = points.iter().map(|p| p.1).collect();
    assert_eq!(offsets, key_positions(&ts));
    assert_eq!(points.len(), 10, "{points:?}");
    for (i, p) in points.iter().enumerate() {
        let want = (i as u32 * KEYFRAME_EVERY_S) as f64;
        assert!((p.0 - want).abs() < 0.05, "point {i}: {p:?}");
    }

    let r = server.req("GET", "/v1/objects/clip.ts/index.m3u8", None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.header("content-type"),
        Some("application/vnd.apple.mpegurl")
    );
    let lines: Vec<&str> = r.body.lines().collect();
    assert_eq!(
        lines[..5],
        [
            "#EXTM3U",
            "#EXT-X-VERSION:4",
            "#EXT-X-TARGETDURATION:2",
            "#EXT-X-PLAYLIST-TYPE:VOD",
            "#EXT-X-MEDIA-SEQUENCE:0"
        ]
    );
    assert_eq!(lines.last(), Some(&"#EXT-X-ENDLIST"));
    let mut next = 0u64;
    let mut total_s = 0.0;
    let segs: Vec<&[&str]> = lines[5..lines.len() - 1].chunks(3).collect();
    for (i, seg) in segs.iter().enumerate() {
        let d: f64 = seg[0]
            .strip_prefix("#EXTINF:")
            .unwrap()
            .trim_end_matches(',')
            .parse()
            .unwrap();
        let (len, at) = seg[1]
            .strip_prefix("#EXT-X-BYTERANGE:")
            .unwrap()
            .split_once('@')
            .unwrap();
        let (len, at): (u64, u64) = (len.parse().unwrap(), at.parse().unwrap());
        assert_eq!(at, next, "segments are contiguous: {}", r.body);
        assert!(at == 0 || offsets.contains(&at), "cut at a key frame: {at}");
        // The last one lasts until the duration the bitrate gives.
        let range = if i + 1 == segs.len() {
            1.0..=2.5
        } else {
            1.9..=2.1
        };
        assert!(range.contains(&d), "segment {i} of {d} s:\n{}", r.body);
        let v = seg[2]
            .strip_prefix("content?isnode_version=")
            .and_then(|r| r.strip_suffix("&ext=.ts"));
        assert!(v.is_some_and(|v| v.parse::<u32>().is_ok()), "{}", seg[2]);
        next = at + len;
        total_s += d;
    }
    assert_eq!(next, bytes.len() as u64);
    assert!((total_s - 20.0).abs() < 0.5, "{total_s}");

    let moov = |name: &str| {
        server
            .req("GET", &format!("/v1/objects/{name}"), None)
            .json()["moov_at_front"]
            .clone()
    };
    assert_eq!(moov("front.mp4"), json!(true));
    assert_eq!(moov("end.mp4"), json!(false));
    assert_eq!(moov("clip.ts"), Value::Null);
    refused(
        &server.req("GET", "/v1/objects/front.mp4/index.m3u8", None),
        400,
    );
    refused(
        &server.req("GET", "/v1/objects/nope.ts/index.m3u8", None),
        404,
    );
    refused(&server.req("GET", "/v1/objects/nope.ts/index", None), 404);
    let r = server.req("GET", "/v1/objects/end.mp4/index", None);
    assert_eq!(
        r.json()["points"].as_array().map(Vec::len),
        Some(10),
        "{}",
        r.body
    );
}

/// `ffprobe` reads the HLS playlist URL and reports the title's duration and streams, and
/// `ffmpeg` copies the title through it without an error.
#[test]
fn hls_playlist_probes_with_ffprobe() {
    let vol = Vol::create(&[]);
    let ts = media::make(vol.dir.path(), Container::Ts, 20);
    vol.add_file("clip.ts", &ts);
    let server = Server::start(&vol, &[]);
    let url = format!("{}/v1/objects/clip.ts/index.m3u8", server.url());
    let (duration_s, codecs) = media::probe(&url);
    let (source_s, source_codecs) = media::probe(ts.to_str().unwrap());
    assert_eq!(codecs, source_codecs);
    assert!(
        (duration_s - source_s).abs() < 0.5,
        "{duration_s} vs {source_s}"
    );
    let copy = vol.path("copy.ts");
    let out = Command::new("ffmpeg")
        .args([
            "-v", "error", "-y", "-i", &url, "-c", "copy", "-f", "mpegts",
        ])
        .arg(&copy)
        .output()
        .expect("running ffmpeg (install Debian's ffmpeg package)");
    assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");
    media::decodes_cleanly(copy.to_str().unwrap());
}

/// `play --start-at 10` writes the source from the last random-access point at or before
/// 10 s on, byte for byte, and ffmpeg decodes it cleanly.
#[test]
fn play_start_at_begins_at_a_random_access_point() {
    let vol = Vol::create(&[]);
    let ts = media::make(vol.dir.path(), Container::Ts, 20);
    let bytes = vol.add_file("clip.ts", &ts);
    let server = Server::start(&vol, &[]);
    let points = index_points(&server, "clip.ts");
    let &(t, offset, _) = points
        .iter()
        .rev()
        .find(|p| p.0 <= 10.0)
        .expect("a point before 10 s");
    assert!(t > 10.0 - 2.5, "the point at or before 10 s is at {t} s");
    assert!(key_positions(&ts).contains(&offset));

    let extra = [
        "--start-at",
        "10",
        "--as-fast-as-possible",
        "--timeout-s",
        "5",
        "--max-seconds",
        "60",
    ];
    let deadline = Instant::now() + Duration::from_secs(90);
    let p = play_run(&server, &vol, "clip.ts", "tail", &extra, deadline);
    let log = &p.log;
    assert!(p.status.success(), "isnode play: {}\n{log}", p.status);
    let got = p.bytes();
    let out = p.out.clone();
    assert_eq!(got.len() as u64, bytes.len() as u64 - offset, "{log}");
    assert!(
        got[..] == bytes[offset as usize..],
        "not the source's suffix from byte {offset}"
    );
    media::decodes_cleanly(out.to_str().unwrap());
}

/// A session request with a bad `start_at_s` is refused and starts nothing; an object
/// without an index falls back to bitrate arithmetic and says so.
#[test]
fn start_at_bad_input_and_bitrate_fallback() {
    let vol = Vol::create(&[]);
    let ts = media::make(vol.dir.path(), Container::Ts, 20);
    vol.add_file("clip.ts", &ts);
    vol.add_ts("synthetic.ts", 2_000_000, 4.0, 1);
    let server = Server::start(&vol, &[]);
    let sock = udp(LO1, 0).unwrap();
    let port = sock.local_addr().unwrap().port();
    let post = |body: Value| server.req("POST", "/v1/sessions", Some(&body.to_string()));
    let started = || server.metrics().get("isnode_sessions_started_total");
    let before = started();
    refused(
        &post(json!({"object": "clip.ts", "port": port, "start_at_s": -1.0})),
        400,
    );
    refused(
        &post(json!({"object": "clip.ts", "port": port, "start_at_s": 1e9})),
        400,
    );
    refused(
        &post(json!({"object": "clip.ts", "port": port, "start_at_s": "NaN"})),
        400,
    );
    refused(
        &post(json!({"object": "clip.ts", "port": port, "start_at_s": 1.0, "start_codeword": 2})),
        400,
    );
    refused(
        &post(json!({"object": "nope.ts", "port": port, "start_at_s": 1.0})),
        404,
    );
    assert_eq!(started(), before);
    assert_eq!(drain(&sock), 0, "a refused request sent something");

    let r = post(json!({"object": "clip.ts", "port": port, "start_at_s": 7.0}));
    assert_eq!(r.status, 201, "{}", r.body);
    server.remember(&r);
    let j = r.json();
    assert_eq!(j["seek_by"], "index");
    assert!(
        (j["start_time_s"].as_f64().unwrap() - 6.0).abs() < 0.05,
        "{j}"
    );
    let id = j["id"].as_str().unwrap();
    assert_eq!(server.session_req("DELETE", id, "", None).status, 204);

    // The generated stream has no video PES, so no random-access point: bitrate arithmetic.
    let r = post(json!({"object": "synthetic.ts", "port": port, "start_at_s": 2.0}));
    assert_eq!(r.status, 201, "{}", r.body);
    let j = r.json();
    assert_eq!(j["seek_by"], "bitrate", "{j}");
    let offset = j["start_offset_bytes"].as_u64().unwrap();
    let symbol = j["fec"]["symbol_size"].as_u64().unwrap();
    let max_cw_bytes = symbol * j["fec"]["max_source_block_length"].as_u64().unwrap();
    // The first byte of the codeword holding byte 2 s × 2 Mbit/s / 8 = 500000.
    assert!(offset <= 500_000 && 500_000 - offset < max_cw_bytes, "{j}");
    assert_eq!(offset % symbol, 0, "{j}");
    assert!(j["start_codeword"].as_u64().unwrap() >= 1, "{j}");
}

/// Data packets of the object arriving on `sock` within `dur`: their (SBN, ESI).
fn data_packets(sock: &UdpSocket, dur: Duration) -> Vec<(u32, u8)> {
    let mut buf = vec![0u8; 65536];
    let end = Instant::now() + dur;
    let mut got = Vec::new();
    while Instant::now() < end {
        if let Ok(n) = sock.recv(&mut buf) {
            if let Ok(p) = isnode_wire::parse_data_packet(&buf[..n]) {
                if p.id.toi != 0 {
                    got.push((p.id.sbn, p.id.esi));
                }
            }
        }
    }
    got
}

/// Pause stops the packets, resume brings them back, and a seek (to a codeword, to a
/// time) makes the next packets those of the new place; bad control requests are refused
/// and change nothing.
#[test]
fn seek_pause_resume_change_what_is_sent() {
    let vol = Vol::create(&[]);
    let ts = media::make(vol.dir.path(), Container::Ts, 20);
    vol.add_file("clip.ts", &ts);
    let server = Server::start(&vol, &[]);
    let points = index_points(&server, "clip.ts");
    let codewords = server.req("GET", "/v1/objects/clip.ts", None).json()["codewords"]
        .as_u64()
        .unwrap() as u32;
    assert!(codewords >= 4, "{codewords} codewords");
    let sock = udp(LO1, 0).unwrap();
    let r = server.open_session("clip.ts", &sock);
    let id = r["id"].as_str().unwrap().to_string();
    let control =
        |body: Value| server.session_req("POST", &id, "/control", Some(&body.to_string()));
    let first = data_packets(&sock, Duration::from_millis(500));
    assert!(first.first().is_some_and(|p| p.0 == 0), "{first:?}");

    // Bad requests: refused, nothing changes.
    refused(
        &server.req(
            "POST",
            "/v1/sessions/0000000000000000/control",
            Some(r#"{"action":"pause"}"#),
        ),
        404,
    );
    refused(&control(json!({"action": "seek"})), 400);
    refused(
        &control(json!({"action": "seek", "at_s": 1.0, "codeword": 1})),
        400,
    );
    refused(&control(json!({"action": "seek", "at_s": -3.0})), 400);
    refused(&control(json!({"action": "seek", "at_s": 1e6})), 400);
    refused(
        &control(json!({"action": "seek", "codeword": codewords})),
        400,
    );
    refused(&control(json!({"action": "rewind"})), 400);
    assert!(
        !data_packets(&sock, Duration::from_millis(300)).is_empty(),
        "still streaming"
    );

    // Pause: a window with no packet at all comes (bounded); the status says paused.
    let r = control(json!({"action": "pause"}));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["paused"], true);
    let mut quiet = false;
    for _ in 0..10 {
        assert_eq!(server.keepalive(&id), 204);
        drain(&sock);
        if count_for(&sock, Duration::from_millis(300)) == 0 {
            quiet = true;
            break;
        }
    }
    assert!(quiet, "packets kept coming while paused");
    let status = server
        .req("GET", &format!("/v1/sessions/{id}"), None)
        .json();
    assert_eq!(
        (status["paused"].clone(), status["state"].clone()),
        (json!(true), json!("streaming"))
    );

    // Resume: packets again.
    let r = control(json!({"action": "resume"}));
    assert_eq!((r.status, r.json()["paused"].clone()), (200, json!(false)));
    assert!(
        !data_packets(&sock, Duration::from_millis(500)).is_empty(),
        "nothing after resume"
    );

    // Seek to the last codeword: its first packet comes, and nothing before it after that.
    let last = codewords - 1;
    let r = control(json!({"action": "seek", "codeword": last}));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["codeword"], last);
    assert_eq!(server.keepalive(&id), 204);
    let got = data_packets(&sock, Duration::from_millis(800));
    let at = got
        .iter()
        .position(|&p| p == (last, 0))
        .unwrap_or_else(|| panic!("no packet of codeword {last}: {got:?}"));
    assert!(got[at..].iter().all(|p| p.0 == last), "{got:?}");

    // Seek back by time: to the codeword of the point at or before 4 s.
    let &(_, offset, cw) = points.iter().rev().find(|p| p.0 <= 4.0).unwrap();
    let r = control(json!({"action": "seek", "at_s": 4.0}));
    assert_eq!(r.status, 200, "{}", r.body);
    let j = r.json();
    assert_eq!(
        (
            j["codeword"].as_u64(),
            j["offset_bytes"].as_u64(),
            j["seek_by"].clone()
        ),
        (Some(cw), Some(offset), json!("index"))
    );
    let got = data_packets(&sock, Duration::from_millis(800));
    let at = got
        .iter()
        .position(|&p| p == (cw as u32, 0))
        .unwrap_or_else(|| panic!("no packet of codeword {cw}: {got:?}"));
    assert!(
        got[at..].iter().all(|p| u64::from(p.0) >= cw && p.0 < last),
        "{got:?}"
    );
    assert_eq!(server.session_req("DELETE", &id, "", None).status, 204);
    refused(&control(json!({"action": "resume"})), 404);
}

/// A playlist's segment URIs carry the title's version: after a replace, the old playlist's
/// segments answer `410` (never the new version's bytes at the old byte ranges) and the new
/// playlist's segments play.
#[test]
fn an_old_playlist_never_reads_a_replaced_title() {
    let vol = Vol::create(&[]);
    let first = vol.add_ts("clip.ts", 2_000_000, 6.0, 1);
    let server = Server::start(&vol, &[]);
    let segment = |playlist: &str| -> (String, String) {
        let lines: Vec<&str> = playlist.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.starts_with("#EXT-X-BYTERANGE:"))
            .expect("a byte range");
        let (len, off) = lines[at]["#EXT-X-BYTERANGE:".len()..]
            .split_once('@')
            .expect("LEN@OFFSET");
        let end = off.parse::<u64>().unwrap() + len.parse::<u64>().unwrap() - 1;
        (lines[at + 1].to_string(), format!("bytes={off}-{end}"))
    };
    let old = server.req("GET", "/v1/objects/clip.ts/index.m3u8", None);
    assert_eq!(old.status, 200, "{}", old.body);
    let (uri, range) = segment(&old.body);
    let path = format!("/v1/objects/clip.ts/{uri}");
    let r = http(server.addr, None, "GET", &path, None, &[("Range", &range)]);
    assert_eq!(r.status, 206, "{}", r.body);
    let first_len = first.len();
    assert!(first_len > 0 && !r.body.is_empty());

    let file = vol.path("other.ts");
    gen_ts(&file, 3_000_000, 6.0, 2);
    let out = command()
        .args([
            "ingest",
            "--server",
            &server.url(),
            "--replace",
            "--name",
            "clip.ts",
        ])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = http(server.addr, None, "GET", &path, None, &[("Range", &range)]);
    assert_eq!(r.status, 410, "the old playlist's segment: {}", r.body);
    assert!(r.body.contains("fetch the playlist again"), "{}", r.body);
    let new = server.req("GET", "/v1/objects/clip.ts/index.m3u8", None);
    let (uri, range) = segment(&new.body);
    let path = format!("/v1/objects/clip.ts/{uri}");
    let r = http(server.addr, None, "GET", &path, None, &[("Range", &range)]);
    assert_eq!(r.status, 206, "{}", r.body);
    // A request without a version reads whatever is stored.
    let r = server.req("GET", "/v1/objects/clip.ts/content", None);
    assert_eq!(r.status, 200);
}
