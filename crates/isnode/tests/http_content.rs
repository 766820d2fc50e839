//! The original bytes over HTTP (issue 10): `GET`/`HEAD /v1/objects/{name}/content` with
//! `Range` (single, multiple), conditional requests, `ffprobe` reading the URL, the bytes
//! right with a member missing and with a corrupt block, the unicast repair route, and bad
//! input answered with a clear 4xx that changes nothing.
//!
//! These tests need Debian's `ffmpeg` package (`bash scripts/test` installs it); without it
//! they fail, saying so.

mod serve_support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use serve_support::media::{self, Container};
use serve_support::*;

/// An HTTP answer with its body as bytes.
struct Raw {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Raw {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    #[track_caller]
    fn error_text(&self) -> String {
        let v: serde_json::Value = serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "answer {} is not a JSON ErrorBody ({e}): {:?}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        });
        v["error"].as_str().expect("an error field").to_string()
    }
}

/// One request over a fresh connection (`Connection: close`); the body is read to the end.
#[track_caller]
fn raw(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> Raw {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).expect("reading the answer");
    let split = all
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an HTTP head");
    let head = String::from_utf8_lossy(&all[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap().split_whitespace().nth(1).unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            Some((k.trim().to_ascii_lowercase(), v.trim().to_string()))
        })
        .collect();
    let body = all[split + 4..].to_vec();
    assert!(
        !headers.iter().any(|(k, _)| k == "transfer-encoding"),
        "{method} {path}: answers carry a Content-Length: {headers:?}"
    );
    Raw {
        status: status.parse().unwrap(),
        headers,
        body,
    }
}

/// A 20 s MPEG-TS title ingested as `clip.ts`; its bytes.
fn ts_title(vol: &Vol) -> Vec<u8> {
    let file = media::make(vol.dir.path(), Container::Ts, 20);
    vol.add_file("clip.ts", &file)
}

/// Asserts that a few pseudo-random single ranges (and the whole body) equal the source.
#[track_caller]
fn assert_ranges(server: &Server, bytes: &[u8], seed: u64, what: &str) {
    let path = "/v1/objects/clip.ts/content";
    let full = raw(server.addr, "GET", path, &[]);
    assert_eq!(full.status, 200, "{what}");
    assert!(full.body == bytes, "{what}: the whole body differs");
    let len = bytes.len() as u64;
    let mut rng = Rng(seed);
    for _ in 0..6 {
        let a = (rng.unit() * len as f64) as u64;
        let b = (a + (rng.unit() * 400_000.0) as u64).min(len - 1);
        let r = raw(
            server.addr,
            "GET",
            path,
            &[("Range", &format!("bytes={a}-{b}"))],
        );
        assert_eq!(r.status, 206, "{what}: bytes={a}-{b}");
        assert_eq!(
            r.header("content-range"),
            Some(format!("bytes {a}-{b}/{len}").as_str()),
            "{what}"
        );
        assert!(
            r.body == bytes[a as usize..=b as usize],
            "{what}: bytes {a}-{b} differ"
        );
    }
    let r = raw(server.addr, "GET", path, &[("Range", "bytes=-1000")]);
    assert!(
        r.status == 206 && r.body == bytes[bytes.len() - 1000..],
        "{what}: suffix"
    );
}

/// The single segment file of member `m` of the volume.
fn segment_file(vol: &Vol, m: usize) -> std::path::PathBuf {
    let dir = vol.root.join("members").join(m.to_string()).join("objects");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files.pop().unwrap()
}

fn flip_byte(file: &Path, at: u64) {
    let mut bytes = std::fs::read(file).unwrap();
    bytes[at as usize] ^= 0x5a;
    std::fs::write(file, bytes).unwrap();
}

/// Random ranges are the source's bytes, healthy, with a member missing, and with a block
/// failing its checksum (rebuilt through the code from the shared pool).
#[test]
fn ranges_are_the_source_bytes_with_a_member_missing_and_a_corrupt_block() {
    let vol = Vol::create(&[]);
    let bytes = ts_title(&vol);
    let server = Server::start(&vol, &[]);
    let head = raw(server.addr, "HEAD", "/v1/objects/clip.ts/content", &[]);
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    assert_eq!(
        head.header("content-length"),
        Some(bytes.len().to_string().as_str())
    );
    assert_eq!(head.header("accept-ranges"), Some("bytes"));
    assert_eq!(head.header("content-type"), Some("video/mp2t"));
    assert!(head.header("etag").is_some_and(|t| t.starts_with("\"t")));
    assert!(head
        .header("last-modified")
        .is_some_and(|d| d.ends_with(" GMT")));
    assert_ranges(&server, &bytes, 11, "healthy");
    let m = server.metrics();
    assert!(m.get("isnode_http_range_requests_total") >= 7.0, "{}", m.0);
    assert!(m.get("isnode_http_bytes_total") >= bytes.len() as f64);
    readers_done(&server);
    drop(server);

    // Member 2 gone (moved away, as a failed disk): its symbols are rebuilt.
    let member = vol.root.join("members").join("2");
    let aside = vol.path("member-2.gone");
    std::fs::rename(&member, &aside).unwrap();
    let server = Server::start(&vol, &[]);
    assert_ranges(&server, &bytes, 12, "member 2 missing");
    let m = server.metrics();
    assert!(
        m.get("isnode_member_errors_total{member=\"2\"}") > 0.0,
        "{}",
        m.0
    );
    drop(server);
    std::fs::rename(&aside, &member).unwrap();

    // A block of member 1 fails its CRC32C (one flipped byte in a stored packet).
    flip_byte(&segment_file(&vol, 1), 100);
    let server = Server::start(&vol, &[]);
    assert_ranges(&server, &bytes, 13, "corrupt block");
    let m = server.metrics();
    assert!(
        m.get("isnode_member_errors_total{member=\"1\"}") > 0.0,
        "{}",
        m.0
    );
}

/// `ffprobe` reads the content URL (and the short path) of each container and finds the
/// source's duration and streams.
#[test]
fn ffprobe_reads_the_content_url_of_every_container() {
    let vol = Vol::create(&[]);
    let mut titles = Vec::new();
    for c in [
        Container::Ts,
        Container::Mp4MoovFront,
        Container::Mp4MoovEnd,
    ] {
        let file = media::make(vol.dir.path(), c, 20);
        let name = file.file_name().unwrap().to_str().unwrap().to_string();
        vol.add_file(&name, &file);
        titles.push((c, name, media::probe(file.to_str().unwrap())));
    }
    let server = Server::start(&vol, &[]);
    for (c, name, (duration_s, codecs)) in titles {
        for path in [format!("/v1/objects/{name}/content"), format!("/o/{name}")] {
            let url = format!("{}{path}", server.url());
            let (d, cs) = media::probe(&url);
            assert_eq!(cs, codecs, "{c:?} {url}");
            assert!(
                (d - duration_s).abs() < 0.1,
                "{c:?} {url}: {d} s, source {duration_s} s"
            );
        }
    }
    let m = server.metrics();
    assert!(
        m.get("isnode_http_range_requests_total") > 0.0,
        "ffprobe seeks: {}",
        m.0
    );
    readers_done(&server);
}

/// Waits (bounded) until no content body is being produced: the place of a reader is
/// freed when its producing thread returns, which may be just after the client has read
/// the last byte.
#[track_caller]
fn readers_done(server: &Server) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while server.metrics().get("isnode_http_readers_active") > 0.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "a content reader's place was not freed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Parses a `multipart/byteranges` body: (Content-Range, bytes) of each part.
fn parts(body: &[u8], boundary: &str) -> Vec<(String, Vec<u8>)> {
    let delim = format!("--{boundary}");
    let mut out = Vec::new();
    let mut rest = body;
    loop {
        let at = rest
            .windows(delim.len())
            .position(|w| w == delim.as_bytes())
            .expect("a boundary");
        rest = &rest[at + delim.len()..];
        if rest.starts_with(b"--") {
            return out;
        }
        let head_end = rest.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        let head = String::from_utf8_lossy(&rest[..head_end]).into_owned();
        let range = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Range: "))
            .expect("a Content-Range")
            .to_string();
        let (_, total) = range.split_once('/').unwrap();
        let (a, b) = range["bytes ".len()..range.find('/').unwrap()]
            .split_once('-')
            .unwrap();
        let (a, b): (usize, usize) = (a.parse().unwrap(), b.parse().unwrap());
        assert!(total.parse::<usize>().unwrap() > b);
        let data = &rest[head_end + 4..head_end + 4 + (b - a + 1)];
        out.push((range.clone(), data.to_vec()));
        rest = &rest[head_end + 4 + data.len()..];
    }
}

/// Several ranges in one request, `If-None-Match`, `If-Range`.
#[test]
fn multiple_ranges_and_conditional_requests() {
    let vol = Vol::create(&[]);
    let bytes = vol.add_ts("clip.ts", 2_000_000, 3.0, 5);
    let len = bytes.len();
    let server = Server::start(&vol, &[]);
    let path = "/v1/objects/clip.ts/content";
    let r = raw(
        server.addr,
        "GET",
        path,
        &[("Range", "bytes=0-99, 400000-400099,-50")],
    );
    assert_eq!(r.status, 206);
    let ct = r.header("content-type").unwrap().to_string();
    let boundary = ct
        .strip_prefix("multipart/byteranges; boundary=")
        .unwrap_or_else(|| panic!("{ct}"));
    assert_eq!(
        r.header("content-length"),
        Some(r.body.len().to_string().as_str())
    );
    let got = parts(&r.body, boundary);
    let want = [
        (format!("bytes 0-99/{len}"), &bytes[..100]),
        (
            format!("bytes 400000-400099/{len}"),
            &bytes[400_000..400_100],
        ),
        (
            format!("bytes {}-{}/{len}", len - 50, len - 1),
            &bytes[len - 50..],
        ),
    ];
    assert_eq!(got.len(), 3);
    for ((gr, gd), (wr, wd)) in got.iter().zip(&want) {
        assert_eq!(gr, wr);
        assert!(gd == wd, "{gr}: bytes differ");
    }

    let etag = raw(server.addr, "HEAD", path, &[])
        .header("etag")
        .unwrap()
        .to_string();
    let r = raw(server.addr, "GET", path, &[("If-None-Match", &etag)]);
    assert_eq!(r.status, 304);
    assert!(r.body.is_empty());
    assert_eq!(r.header("etag"), Some(etag.as_str()));
    let r = raw(server.addr, "GET", path, &[("If-None-Match", "\"other\"")]);
    assert!(r.status == 200 && r.body == bytes);
    let r = raw(
        server.addr,
        "GET",
        path,
        &[("Range", "bytes=10-19"), ("If-Range", &etag)],
    );
    assert!(r.status == 206 && r.body == bytes[10..20]);
    let r = raw(
        server.addr,
        "GET",
        path,
        &[("Range", "bytes=10-19"), ("If-Range", "\"stale\"")],
    );
    assert!(
        r.status == 200 && r.body == bytes,
        "a stale If-Range gets the whole body"
    );
}

/// Bad input: a clear 4xx with a JSON body, and nothing changed.
#[test]
fn bad_input_is_a_clear_4xx_and_changes_nothing() {
    let vol = Vol::create(&[]);
    let bytes = vol.add_ts("clip.ts", 2_000_000, 3.0, 6);
    let len = bytes.len();
    let server = Server::start(&vol, &[]);
    let listed = server.req("GET", "/v1/objects", None).body;
    let path = "/v1/objects/clip.ts/content";
    let r = raw(server.addr, "GET", path, &[("Range", "bytes=20-10")]);
    assert_eq!(r.status, 400);
    assert!(r.error_text().contains("Range"), "{}", r.error_text());
    let r = raw(server.addr, "GET", path, &[("Range", "bytes=abc")]);
    assert_eq!(r.status, 400);
    let many = (0..17)
        .map(|i| format!("{i}-{i}"))
        .collect::<Vec<_>>()
        .join(",");
    let r = raw(
        server.addr,
        "GET",
        path,
        &[("Range", &format!("bytes={many}"))],
    );
    assert_eq!(r.status, 400);
    assert!(r.error_text().contains("at most 16"), "{}", r.error_text());
    let r = raw(
        server.addr,
        "GET",
        path,
        &[("Range", &format!("bytes={len}-"))],
    );
    assert_eq!(r.status, 416);
    assert_eq!(
        r.header("content-range"),
        Some(format!("bytes */{len}").as_str())
    );
    r.error_text();
    for p in [
        "/v1/objects/nope.ts/content",
        "/o/nope.ts",
        "/v1/objects/nope.ts/codewords/0/packets?esi=1",
    ] {
        let r = raw(server.addr, "GET", p, &[]);
        assert_eq!(r.status, 404, "{p}");
        r.error_text();
    }
    let info = server.req("GET", "/v1/objects/clip.ts", None).json();
    let codewords = info["codewords"].as_u64().unwrap();
    let n = info["source_symbols"].as_u64().unwrap() + info["repair_symbols"].as_u64().unwrap();
    let rp = |q: &str| {
        raw(
            server.addr,
            "GET",
            &format!("/v1/objects/clip.ts/codewords/{q}"),
            &[],
        )
    };
    let r = rp(&format!("{codewords}/packets?esi=0"));
    assert_eq!(r.status, 404, "a codeword past the end");
    assert!(r.error_text().contains("no codeword"), "{}", r.error_text());
    let last = codewords - 1;
    for q in [
        format!("0/packets?esi={n}"),
        "0/packets?esi=1,1".to_string(),
        "0/packets".to_string(),
        "x/packets?esi=1".to_string(),
        format!(
            "0/packets?esi={}",
            (0..=n).map(|i| i.to_string()).collect::<Vec<_>>().join(",")
        ),
    ] {
        let r = rp(&q);
        assert_eq!(r.status, 400, "{q}");
        r.error_text();
    }
    let r = rp(&format!("{last}/packets?esi=0"));
    assert_eq!(r.status, 200, "the last codeword exists");
    // Nothing changed.
    assert_eq!(server.req("GET", "/v1/objects", None).body, listed);
    assert!(raw(server.addr, "GET", path, &[]).body == bytes);
}

/// Splits a repair answer into its packets (2-byte big-endian length, then the packet).
fn framed(mut body: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while !body.is_empty() {
        let len = u16::from_be_bytes([body[0], body[1]]) as usize;
        out.push(body[2..2 + len].to_vec());
        body = &body[2 + len..];
    }
    out
}

/// The repair route answers the stored packets, verified; with the repair member missing,
/// the rebuilt repair packets are byte for byte the stored ones.
#[test]
fn repair_route_answers_the_stored_packets_even_rebuilt() {
    let vol = Vol::create(&[]);
    vol.add_ts("clip.ts", 2_000_000, 3.0, 8);
    let server = Server::start(&vol, &[]);
    let info = server.req("GET", "/v1/objects/clip.ts", None).json();
    let partition = isnode_wire::partition::Partition::new(
        info["size_bytes"].as_u64().unwrap(),
        info["symbol_size"].as_u64().unwrap() as u32,
        info["source_symbols"].as_u64().unwrap() as u32,
    )
    .unwrap();
    assert!(partition.blocks() > 1, "codeword 1 exists");
    let k = partition.source_symbols(1) as u8;
    let m = info["repair_symbols"].as_u64().unwrap() as u8;
    let esis = [0u8, 5, k - 1, k, k + m - 1];
    let q = esis
        .iter()
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let path = format!("/v1/objects/clip.ts/codewords/1/packets?esi={q}");
    let r = raw(server.addr, "GET", &path, &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/octet-stream"));
    let stored = framed(&r.body);
    assert_eq!(stored.len(), esis.len());
    for (p, esi) in stored.iter().zip(esis) {
        let d = isnode_wire::parse_data_packet(p).expect("a valid ALC packet with its CRC32C");
        assert_eq!((d.id.sbn, d.id.esi), (1, esi));
    }
    assert_eq!(
        server.metrics().get("isnode_repair_packets_total"),
        esis.len() as f64
    );
    drop(server);
    // The last member holds every repair symbol; the first, the first source symbols.
    for gone in [7usize, 0] {
        let member = vol.root.join("members").join(gone.to_string());
        let aside = vol.path("gone");
        std::fs::rename(&member, &aside).unwrap();
        let server = Server::start(&vol, &[]);
        let r = raw(server.addr, "GET", &path, &[]);
        assert_eq!(r.status, 200);
        assert!(
            framed(&r.body) == stored,
            "member {gone} missing: packets differ"
        );
        assert!(server.metrics().get("isnode_symbols_rebuilt_total") > 0.0);
        drop(server);
        std::fs::rename(&aside, &member).unwrap();
    }
}

/// Runs `isnode play NAME` against `server` with `flags`, as fast as possible; (whether it
/// exited 0, stats, output).
fn play(
    vol: &Vol,
    server: &Server,
    name: &str,
    flags: &[&str],
) -> (bool, serde_json::Value, Vec<u8>) {
    let mut extra = vec![
        "--as-fast-as-possible",
        "--timeout-s",
        "5",
        "--max-seconds",
        "60",
    ];
    extra.extend_from_slice(flags);
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    let p = play_run(server, vol, name, name, &extra, deadline);
    let bytes = p.bytes();
    (p.status.success(), p.stats, bytes)
}

/// Through 12 % loss in long bursts (beyond what m = 32 repair symbols per codeword can
/// repair), `play` still ends byte for byte identical: the codewords the FEC could not
/// decode are completed by unicast repair over HTTP.
#[test]
fn play_through_heavy_bursty_loss_is_identical_thanks_to_unicast_repair() {
    let vol = Vol::create(&[]);
    let bytes = vol.add_ts("heavy.ts", 8_000_000, 5.0, 21);
    let server = Server::start(&vol, &[]);
    let loss = ["--loss", "0.12", "--burst", "20", "--seed", "3"];
    let (ok, s, out) = play(&vol, &server, "heavy.ts", &loss);
    assert!(ok, "{s}");
    let repaired = s["repair"]["codewords_repaired"].as_u64().unwrap();
    assert!(
        repaired > 0,
        "the FEC alone decoded every codeword: the loss is not heavy enough for this test: {s}"
    );
    assert_eq!(s["codewords_unrecoverable"], 0, "{s}");
    assert_eq!(s["repair"]["codewords_failed"], 0, "{s}");
    assert!(s["repair"]["bytes_fetched"].as_u64().unwrap() > 0, "{s}");
    assert!(out == bytes, "output differs from the source: {s}");
    let m = server.metrics();
    assert!(
        m.get("isnode_repair_requests_total") >= repaired as f64,
        "{}",
        m.0
    );

    // The same loss without repair: those codewords are lost (written as zeros).
    let mut no_repair = loss.to_vec();
    no_repair.push("--no-repair");
    let (ok, s, out) = play(&vol, &server, "heavy.ts", &no_repair);
    assert!(
        !ok,
        "play reports the lost codewords by its exit status: {s}"
    );
    assert!(s["codewords_unrecoverable"].as_u64().unwrap() > 0, "{s}");
    assert_eq!(s["repair"]["requests"], 0, "{s}");
    assert!(out != bytes);
}

/// `play --http` serves the decoded stream to a local player: `ffprobe` reads it as the
/// source, `ffmpeg` decodes it, a plain `GET` is the source byte for byte and a `Range` of
/// what has arrived is answered `206`. Its temporary file is unlinked from the start, so
/// that a player killed mid-stream leaves nothing in `TMPDIR`.
#[test]
fn play_http_serves_the_stream_to_ffprobe_and_ffmpeg() {
    let vol = Vol::create(&[]);
    let file = media::make(vol.dir.path(), Container::Ts, 10);
    let bytes = vol.add_file("clip.ts", &file);
    let (duration_s, codecs) = media::probe(file.to_str().unwrap());
    let server = Server::start(&vol, &[]);
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let stderr = vol.path("play-http.stderr");
    let tmp = vol.path("play-tmp");
    std::fs::create_dir(&tmp).unwrap();
    let mut child = ChildGuard(Some(
        command()
            .env("TMPDIR", &tmp)
            .args([
                "play",
                "clip.ts",
                "--server",
                &server.url(),
                "--http",
                &listen,
            ])
            .args([
                "--as-fast-as-possible",
                "--http-linger-s",
                "1",
                "--max-seconds",
                "60",
            ])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("spawning isnode play --http"),
    ));
    let addr: SocketAddr = listen.parse().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "play --http does not listen:\n{}",
            std::fs::read_to_string(&stderr).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().collect();
    assert!(
        left.is_empty(),
        "play --http left files in TMPDIR: {left:?}"
    );
    let url = format!("http://{listen}/");
    let (d, cs) = media::probe(&url);
    assert_eq!(cs, codecs);
    assert!((d - duration_s).abs() < 0.1, "{d} s, source {duration_s} s");
    let whole = raw(addr, "GET", "/", &[]);
    assert_eq!(whole.status, 200);
    assert!(
        whole.body == bytes,
        "the served stream differs from the source"
    );
    let r = raw(addr, "GET", "/", &[("Range", "bytes=1000-1999")]);
    assert!(r.status == 206 && r.body == bytes[1000..2000]);
    assert_eq!(
        r.header("content-range"),
        Some(format!("bytes 1000-1999/{}", bytes.len()).as_str())
    );
    media::decodes_cleanly(&url);
    let status = child.wait_until(std::time::Instant::now() + Duration::from_secs(30), "play");
    assert!(
        status.success(),
        "{}",
        std::fs::read_to_string(&stderr).unwrap_or_default()
    );
}

/// Content readers are admitted up to `--max-content-readers`: a reader that does not read
/// holds its place (its body waits, bounded in memory), the next one is refused with `503`
/// and a JSON reason, and once the first is done the next is served.
#[test]
fn content_readers_beyond_the_limit_are_refused_with_503() {
    use socket2::{Domain, Socket, Type};
    let vol = Vol::create(&[]);
    let bytes = vol.add_ts("big.ts", 8_000_000, 8.0, 9);
    let server = Server::start(&vol, &["--max-content-readers", "1"]);
    // A slow reader: a tiny receive buffer, and it reads nothing for now.
    let sock = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    sock.connect_timeout(&server.addr.into(), Duration::from_secs(5))
        .unwrap();
    let mut slow: TcpStream = sock.into();
    slow.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let req = format!(
        "GET /o/big.ts HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        server.addr
    );
    slow.write_all(req.as_bytes()).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while server.metrics().get("isnode_http_readers_active") < 1.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the reader never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = raw(server.addr, "GET", "/o/big.ts", &[("Range", "bytes=0-9")]);
    assert_eq!(r.status, 503);
    assert!(
        r.error_text().contains("--max-content-readers"),
        "{}",
        r.error_text()
    );
    let m = server.metrics();
    assert_eq!(m.get("isnode_http_readers_refused_total"), 1.0, "{}", m.0);
    assert_eq!(m.get("isnode_http_readers_active"), 1.0);
    // The slow reader gets every byte, right.
    let mut all = Vec::new();
    slow.read_to_end(&mut all).unwrap();
    let split = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    assert!(
        all[split + 4..] == bytes[..],
        "the slow reader's body differs"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while server.metrics().get("isnode_http_readers_active") > 0.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the reader's place was not freed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = raw(server.addr, "GET", "/o/big.ts", &[("Range", "bytes=0-9")]);
    assert!(r.status == 206 && r.body == bytes[..10]);
}

/// The HTTP mirror (codewords gathered once, sent with `sendfile`) under pressure: with room
/// for three codewords only, eight readers at once asking for the whole title and random
/// ranges get the source's bytes while codewords are gathered, shared, given back and
/// gathered again (and frames whose codeword another reader is filling are copied).
#[test]
fn the_mirror_sends_the_source_bytes_while_it_gives_codewords_back() {
    let vol = Vol::create(&[]);
    let bytes = std::sync::Arc::new(ts_title(&vol));
    let server = Server::start(&vol, &["--http-mirror-bytes", "1000000"]);
    readers_under_pressure(&server, &bytes, 1_000_000);
    readers_done(&server);
    drop(server);

    // Without a mirror every frame is copied, and no byte is held.
    let server = Server::start(&vol, &["--http-mirror-bytes", "0"]);
    assert_ranges(&server, &bytes, 21, "no mirror");
    let m = server.metrics();
    assert_eq!(m.get("isnode_http_mirror_frames_total"), 0.0, "{}", m.0);
}

/// Eight readers at once, each asking for four random ranges and then the whole title,
/// get the source's bytes from a mirror of `budget_bytes` that must give codewords back
/// and gather them again.
fn readers_under_pressure(server: &Server, bytes: &std::sync::Arc<Vec<u8>>, budget_bytes: u64) {
    let addr = server.addr;
    let readers: Vec<_> = (0..8u64)
        .map(|i| {
            let bytes = bytes.clone();
            std::thread::spawn(move || {
                let len = bytes.len() as u64;
                let mut rng = Rng(100 + i);
                for _ in 0..4 {
                    let a = (rng.unit() * len as f64) as u64;
                    let b = (a + (rng.unit() * 900_000.0) as u64).min(len - 1);
                    let range = format!("bytes={a}-{b}");
                    let r = raw(addr, "GET", "/o/clip.ts", &[("Range", &range)]);
                    assert_eq!(r.status, 206, "{range}");
                    assert!(r.body == bytes[a as usize..=b as usize], "{range} differs");
                }
                let full = raw(addr, "GET", "/o/clip.ts", &[]);
                assert!(
                    full.status == 200 && full.body == **bytes,
                    "reader {i}: whole body"
                );
            })
        })
        .collect();
    for r in readers {
        r.join().expect("a reader failed");
    }
    let m = server.metrics();
    let codewords = (bytes.len() as f64 / (223.0 * 1408.0)).ceil();
    assert!(m.get("isnode_http_mirror_frames_total") > 0.0, "{}", m.0);
    assert!(
        m.get("isnode_http_mirror_fills_total") > codewords,
        "codewords were given back and gathered again: {}",
        m.0
    );
    assert!(
        m.get("isnode_http_mirror_bytes") <= budget_bytes as f64,
        "{}",
        m.0
    );
}

/// Huge pages the kernel has given shmem files (tmpfs included) so far.
fn shmem_huge_pages() -> u64 {
    let path = "/sys/kernel/mm/transparent_hugepage/hugepages-2048kB/stats/shmem_alloc";
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{path}: {e} (no transparent huge pages here)"))
        .trim()
        .parse()
        .expect("a count")
}

/// The mirror's files in a tmpfs with huge pages (`--http-mirror-dir`): memory comes and
/// goes a huge page (several codewords) at a time, and under the same pressure every
/// reader still gets the source's bytes; the files do get huge pages.
#[test]
fn the_mirror_in_a_huge_page_tmpfs_gives_back_whole_huge_pages() {
    let vol = Vol::create(&[]);
    let file = media::make(vol.dir.path(), Container::Ts, 60);
    let bytes = std::sync::Arc::new(vol.add_file("clip.ts", &file));
    let tmpfs = isnode_bench::tmpfs::HugeTmpfs::mount(&vol.path("mirror"), 64 << 20)
        .expect("a tmpfs with huge pages for the mirror");
    let dir = tmpfs.dir().to_str().unwrap().to_string();
    let before = shmem_huge_pages();
    // Room for two huge pages: fewer than the title's codewords need.
    let budget = 4u64 << 20;
    assert!(bytes.len() as u64 > 2 * budget, "{} bytes", bytes.len());
    let server = Server::start(
        &vol,
        &[
            "--http-mirror-bytes",
            &budget.to_string(),
            "--http-mirror-dir",
            &dir,
        ],
    );
    // A slow reader: its socket holds sent pages of codewords long after their extents
    // are given back (a huge page punched in part would be zeroed under it).
    let slow = {
        let (addr, bytes) = (server.addr, bytes.clone());
        std::thread::spawn(move || slow_whole_body(addr, &bytes))
    };
    readers_under_pressure(&server, &bytes, budget);
    slow.join().expect("the slow reader failed");
    assert!(
        shmem_huge_pages() > before,
        "the mirror's files got no huge page"
    );
    readers_done(&server);
    drop(server);

    // A mirror larger than its tmpfs (64 MiB) works, and the server says so.
    let server = Server::start(
        &vol,
        &[
            "--http-mirror-bytes",
            &(128u64 << 20).to_string(),
            "--http-mirror-dir",
            &dir,
        ],
    );
    assert_ranges(&server, &bytes, 7, "a mirror larger than its tmpfs");
    let log = server.log_text();
    assert!(log.contains("smaller than the mirror"), "{log}");
    drop(server);

    // A directory that is not on a tmpfs (its files would be written back to a disk) stops
    // the server at start, saying why.
    let on_disk = vol.path("on-disk");
    std::fs::create_dir(&on_disk).unwrap();
    let stderr = vol.path("serve-on-disk.stderr");
    let mut child = ChildGuard(Some(
        command()
            .arg("--volume")
            .arg(&vol.root)
            .arg("serve")
            .args(["--listen", &format!("127.0.0.1:{}", free_port())])
            .args(["--http-mirror-dir", on_disk.to_str().unwrap()])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("spawning isnode serve"),
    ));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = child.wait_until(deadline, "serve with a mirror directory on a disk");
    let said = std::fs::read_to_string(&stderr).unwrap();
    assert!(
        !status.success() && said.contains("is not on a tmpfs"),
        "{status}: {said}"
    );
}

/// `GET /o/clip.ts` read 64 KiB at a time, 10 ms apart; the body must be `bytes`.
fn slow_whole_body(addr: SocketAddr, bytes: &[u8]) {
    let mut conn = TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let req = b"GET /o/clip.ts HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    conn.write_all(req).unwrap();
    let mut got = Vec::with_capacity(bytes.len() + 1024);
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = conn.read(&mut buf).expect("reading the body");
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
        std::thread::sleep(Duration::from_millis(10));
    }
    let at = got
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a header")
        + 4;
    assert!(got[at..] == *bytes, "the slow reader's body differs");
}
