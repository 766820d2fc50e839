//! Edges that fill titles from an origin while they serve them (issue 19), against a
//! `file:///DIR` origin (no Garage needed) and a tiny fake S3 server: a title only at the
//! origin plays byte-identical; its first byte comes before the fill completes; 20
//! concurrent requests make one fill; a fill killed mid-way resumes from its front; an
//! object changed mid-fill is filled again, never mixed; missing → 404, unreachable →
//! 502, a short body → 502 with nothing complete; a garbled body of the right length
//! (an MD5 ETag) → 502, never complete, never served whole; an MD5-checked fill killed
//! mid-way resumes and passes its check; `cache_max_bytes` evicts the least recently used
//! title, never a pinned or used one; the secret is never printed; a title being filled is
//! listed (API and `ls --server`) with its front; its HLS playlist is an `EVENT` playlist
//! of the filled part; a broadcast of a title only at the origin fills it whole first.

mod serve_support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use serve_support::fills::{fill_of, kill_fill_past, Front};
use serve_support::*;

/// A volume and an origin directory beside it.
struct Edge {
    vol: Vol,
    origin: PathBuf,
}

impl Edge {
    fn new() -> Edge {
        let vol = Vol::create(SMALL_SHAPE);
        let origin = vol.path("origin");
        std::fs::create_dir_all(&origin).unwrap();
        Edge { vol, origin }
    }

    /// Writes a generated MPEG-TS at the origin as `name` (atomically: a new file, renamed).
    fn put(&self, name: &str, bitrate: u64, seconds: f64, seed: u64) -> Vec<u8> {
        let tmp = self.vol.path(&format!("gen-{name}-{seed}"));
        gen_ts(&tmp, bitrate, seconds, seed);
        let bytes = std::fs::read(&tmp).unwrap();
        std::fs::rename(&tmp, self.origin.join(name)).unwrap();
        bytes
    }

    fn origin_url(&self) -> String {
        format!("file://{}", self.origin.display())
    }

    fn serve(&self, extra: &[&str]) -> Server {
        let origin = self.origin_url();
        let mut args = vec!["--origin", origin.as_str()];
        args.extend_from_slice(extra);
        Server::start(&self.vol, &args)
    }

    /// A server on this edge's volume whose origin is the fake S3 at `addr` (bucket
    /// `films`, fake credentials), with `extra` flags.
    fn serve_fake_s3(&self, addr: SocketAddr, extra: &[&str]) -> Server {
        let endpoint = format!("http://{addr}");
        let mut args = vec!["--origin", "s3://films", "--origin-endpoint", &endpoint];
        args.extend_from_slice(extra);
        Server::start_env(
            &self.vol,
            &args,
            &[
                ("AWS_ACCESS_KEY_ID", "GKfake"),
                ("AWS_SECRET_ACCESS_KEY", "fake-secret"),
            ],
        )
    }
}

/// `GET path` as raw bytes (status, body), with a generous read timeout.
fn get_bytes(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut all = Vec::new();
    let _ = s.read_to_end(&mut all);
    let split = all
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an HTTP head");
    let head = String::from_utf8_lossy(&all[..split]).to_string();
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status");
    let mut body = all[split + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body);
    }
    (status, body)
}

fn dechunk(mut rest: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&rest[..eol])
            .ok()
            .and_then(|s| usize::from_str_radix(s.trim(), 16).ok())
            .unwrap_or(0);
        rest = &rest[eol + 2..];
        if size == 0 || rest.len() < size {
            out.extend_from_slice(&rest[..size.min(rest.len())]);
            break;
        }
        out.extend_from_slice(&rest[..size]);
        rest = rest.get(size + 2..).unwrap_or(&[]);
    }
    out
}

/// Waits (bounded) until the fill of `name` is in `phase`; its report.
#[track_caller]
fn wait_fill(server: &Server, name: &str, phase: &str, within: Duration) -> Value {
    let deadline = Instant::now() + within;
    loop {
        if let Some(f) = fill_of(server, name) {
            if f["phase"] == phase {
                return f;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the fill of {name} is not {phase} within {within:?}: {:?}\n{}",
            fill_of(server, name),
            server.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn prefill(server: &Server, name: &str, rate_bps: u64) {
    let body = format!("{{\"titles\": [\"{name}\"], \"rate_bps\": {rate_bps}}}");
    let r = server.req("POST", "/v1/fills", Some(&body));
    assert_eq!(r.status, 202, "POST /v1/fills: {}", r.body);
    assert_eq!(r.json()[0]["state"], "filling", "{}", r.body);
}

fn listed(server: &Server) -> Vec<String> {
    let r = server.req("GET", "/v1/objects", None);
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_title_only_at_the_origin_plays_byte_identical_and_is_then_ordinary() {
    let edge = Edge::new();
    let src = edge.put("film.ts", 2_000_000, 4.0, 1);
    let server = edge.serve(&[]);
    let deadline = Instant::now() + Duration::from_secs(60);
    let (_, out) = play_to_end(&server, &edge.vol, "film.ts", "p1", &[], deadline);
    assert!(out == src, "the played bytes differ from the origin's");
    let f = wait_fill(&server, "film.ts", "done", Duration::from_secs(30));
    assert_eq!(f["size_bytes"], src.len() as u64);
    let m = server.metrics();
    let fetched = m.get("isnode_fill_bytes_total");
    assert!(
        fetched >= src.len() as f64 && fetched < 2.0 * src.len() as f64,
        "fetched {fetched} bytes for {}",
        src.len()
    );
    // Now an ordinary object: listed, played again without the origin.
    assert!(listed(&server).contains(&"film.ts".to_string()));
    let requests = m.get("isnode_origin_requests_total");
    let (_, again) = play_to_end(&server, &edge.vol, "film.ts", "p2", &[], deadline);
    assert!(again == src);
    assert_eq!(
        server.metrics().get("isnode_origin_requests_total"),
        requests
    );
    // Fill bytes and served bytes are counted apart.
    let status = server.req("GET", "/v1/status", None).json();
    assert_eq!(status["fills"]["fill_bytes"], fetched as u64, "{status}");
    assert_eq!(status["fills"]["done"], 1);
}

#[test]
fn the_first_byte_comes_before_the_fill_completes() {
    let edge = Edge::new();
    // 12 s at 2 Mbit/s: 3 MB. Pre-filled at 1 Mbit/s; a viewer's request raises the cap to
    // twice the bitrate (4 Mbit/s): the fill takes about 6 s, the first byte much less.
    let src = edge.put("slow.ts", 2_000_000, 12.0, 2);
    let server = edge.serve(&[]);
    prefill(&server, "slow.ts", 1_000_000);
    let t0 = Instant::now();
    let (status, body) = get_bytes(server.addr, "/o/slow.ts", &[("Range", "bytes=0-9999")]);
    let first_byte_s = t0.elapsed().as_secs_f64();
    assert_eq!(status, 206);
    assert!(body == src[..10_000], "the first bytes differ");
    let phase_then = fill_of(&server, "slow.ts").unwrap()["phase"].clone();
    // A session started now catches the front in its start-up burst (4x the bitrate against
    // a fill at 2x): it is held there, never sent past it, and plays every byte.
    let (srv, vol) = (&server, &edge.vol);
    let played = std::thread::scope(|s| {
        let p = s.spawn(|| {
            let deadline = Instant::now() + Duration::from_secs(90);
            play_to_end(srv, vol, "slow.ts", "held", &[], deadline).1
        });
        let f = wait_fill(srv, "slow.ts", "done", Duration::from_secs(60));
        let fill_s = t0.elapsed().as_secs_f64();
        (p.join().unwrap(), f, fill_s)
    });
    let (out, f, fill_s) = played;
    assert!(out == src, "the session played other bytes");
    eprintln!(
        "sessions held at the fill front: {}",
        server.metrics().get("isnode_fill_holds_total")
    );
    eprintln!(
        "time to first byte {first_byte_s:.3} s, fill complete {fill_s:.3} s, {} bytes, {} origin requests",
        f["size_bytes"], f["origin_requests"]
    );
    assert_eq!(
        phase_then, "filling",
        "the first bytes came while it was filling"
    );
    assert!(first_byte_s < fill_s);
    let (status, all) = get_bytes(server.addr, "/o/slow.ts", &[]);
    assert_eq!(status, 200);
    assert!(all == src);
}

#[test]
fn twenty_concurrent_requests_for_one_missing_title_make_one_fill() {
    let edge = Edge::new();
    let src = Arc::new(edge.put("herd.ts", 4_000_000, 6.0, 3));
    let server = edge.serve(&[]);
    let addr = server.addr;
    let threads: Vec<_> = (0..20)
        .map(|i| {
            let src = src.clone();
            std::thread::spawn(move || {
                let path = match i % 2 {
                    0 => "/o/herd.ts",
                    _ => "/v1/objects/herd.ts/content",
                };
                let (status, body) = get_bytes(addr, path, &[]);
                assert_eq!(status, 200, "client {i}");
                assert!(body == *src, "client {i}: the bytes differ");
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let m = server.metrics();
    assert_eq!(m.get("isnode_fills_started_total"), 1.0, "one fill");
    let ranges = src.len().div_ceil(1 << 20) as f64;
    // HEAD, the ranges, the probe's tail.
    let requests = m.get("isnode_origin_requests_total");
    assert!(
        requests <= ranges + 2.0,
        "{requests} origin requests for {ranges} ranges"
    );
}

#[test]
fn a_fill_killed_mid_way_resumes_from_its_front() {
    let edge = Edge::new();
    let src = edge.put("long.ts", 4_000_000, 10.0, 4); // 5 MB
    let size = src.len() as f64;
    let mut server = edge.serve(&[]);
    prefill(&server, "long.ts", 3_000_000);
    // Past 1.5 MiB fetched, kill -9.
    let fetched_before = kill_fill_past(&mut server, "long.ts", 3 << 19, Front::Any);
    let server = edge.serve(&[]);
    let f = wait_fill(&server, "long.ts", "done", Duration::from_secs(60));
    let fetched_after = server.metrics().get("isnode_fill_bytes_total");
    eprintln!("fetched {fetched_before} bytes before the kill, {fetched_after} after, of {size}");
    assert!(
        fetched_after < size - 1_000_000.0,
        "resumed, not restarted: {f}"
    );
    assert!(fetched_before + fetched_after < 2.0 * size);
    let (status, all) = get_bytes(server.addr, "/o/long.ts", &[]);
    assert_eq!(status, 200);
    assert!(all == src, "the resumed fill's bytes differ");
}

#[test]
fn an_object_changed_during_its_fill_is_filled_again_never_mixed() {
    let edge = Edge::new();
    let old = edge.put("moving.ts", 4_000_000, 8.0, 5);
    let server = edge.serve(&[]);
    prefill(&server, "moving.ts", 2_000_000);
    let deadline = Instant::now() + Duration::from_secs(60);
    while fill_of(&server, "moving.ts").unwrap()["filled_bytes"]
        .as_u64()
        .unwrap_or(0)
        == 0
    {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(20));
    }
    let new = edge.put("moving.ts", 4_000_000, 8.0, 6);
    assert!(new != old);
    // Lift the cap (a pre-fill without one joins).
    prefill(&server, "moving.ts", 0);
    let f = wait_fill(&server, "moving.ts", "done", Duration::from_secs(60));
    assert!(f["attempts"].as_u64().unwrap() >= 2, "{f}");
    let (status, all) = get_bytes(server.addr, "/o/moving.ts", &[]);
    assert_eq!(status, 200);
    assert!(all == new, "the output is not the new version");
    let m = server.metrics();
    assert!(m.get("isnode_fill_errors_total{class=\"changed\"}") >= 1.0);
}

#[test]
fn a_missing_object_is_404_and_an_unreachable_origin_502_without_the_secret() {
    let edge = Edge::new();
    let server = edge.serve(&[]);
    let (status, _) = get_bytes(server.addr, "/o/nope.ts", &[]);
    assert_eq!(status, 404);
    let r = server.post_session("nope.ts", 40_000);
    assert_eq!(r.status, 404, "{}", r.body);
    drop(server);

    let secret = "wJalrXUtnFEMI-K7MDENG-do-not-print";
    let config = edge.vol.path("edge.toml");
    let dead = free_port();
    std::fs::write(
        &config,
        format!(
            "origin = \"s3://films\"\norigin_endpoint = \"http://127.0.0.1:{dead}\"\n\
             origin_region = \"garage\"\norigin_access_key_id = \"GK0123\"\n\
             origin_secret_access_key = \"{secret}\"\n"
        ),
    )
    .unwrap();
    let checked = run_ok(&["config", "check", config.to_str().unwrap()]);
    assert!(!checked.contains(secret), "config check printed the secret");
    assert!(checked.contains("origin_secret_access_key"), "{checked}");
    let server = Server::start_env(
        &edge.vol,
        &["--config", config.to_str().unwrap()],
        &[("RUST_LOG", "debug")],
    );
    let r = server.req("GET", "/o/film.ts", None);
    assert_eq!(r.status, 502, "{}", r.body);
    assert!(!r.body.contains(secret));
    let r = server.post_session("film.ts", 40_000);
    assert_eq!(r.status, 502, "{}", r.body);
    assert!(
        !server.log_text().contains(secret),
        "the log shows the secret"
    );
    let unreachable = server
        .metrics()
        .get("isnode_fill_errors_total{class=\"unreachable\"}");
    assert!(unreachable >= 1.0, "{unreachable}");
}

/// How late each ranged GET of the slow fake origin answers.
const SLOW_RANGE_DELAY: Duration = Duration::from_secs(2);

/// How the fake S3 server answers ranged GETs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fake {
    /// Half of the asked bytes, announced as such.
    Short,
    /// The whole length announced, half sent, the connection closed.
    Cut,
    /// Right, each GET answered after 5 s (an origin slower than the playing).
    Slow,
    /// The right length, one byte flipped in the object's last range (its ETag the MD5 of
    /// the right bytes, as an S3 single-part upload's).
    Garbled,
}

/// A tiny S3 server on loopback serving one object under `/films/`; counts its GETs.
fn fake_s3(data: Arc<Vec<u8>>, mode: Fake) -> (SocketAddr, Arc<AtomicU64>, Arc<AtomicBool>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let gets = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (g, s) = (gets.clone(), stop.clone());
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        while !s.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((conn, _)) => {
                    let (data, g) = (data.clone(), g.clone());
                    std::thread::spawn(move || fake_answer(conn, &data, mode, &g));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    });
    (addr, gets, stop)
}

fn fake_answer(mut conn: TcpStream, data: &[u8], mode: Fake, gets: &AtomicU64) {
    conn.set_nonblocking(false).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    loop {
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            match conn.read(&mut b) {
                Ok(1) => head.push(b[0]),
                _ => return,
            }
        }
        let text = String::from_utf8_lossy(&head).to_string();
        let method = text.split_whitespace().next().unwrap_or("").to_string();
        // A single-part upload's ETag: the MD5 of the object, checked by the fill.
        let etag = format!("\"{}\"", md5_hex(data));
        let common = format!(
            "ETag: {etag}\r\nLast-Modified: Tue, 24 Nov 2026 10:00:00 GMT\r\nAccept-Ranges: bytes\r\n"
        );
        if method == "HEAD" {
            let a = format!(
                "HTTP/1.1 200 OK\r\n{common}Content-Length: {}\r\n\r\n",
                data.len()
            );
            if conn.write_all(a.as_bytes()).is_err() {
                return;
            }
            continue;
        }
        gets.fetch_add(1, Ordering::Relaxed);
        let range = text
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("range: bytes=")
                    .map(str::to_string)
            })
            .and_then(|r| {
                let (a, b) = r.trim().split_once('-')?;
                Some((a.parse::<usize>().ok()?, b.parse::<usize>().ok()?))
            })
            .unwrap_or((0, data.len() - 1));
        let (start, end) = (range.0, range.1.min(data.len() - 1));
        let half = start + (end + 1 - start) / 2;
        let (announced_end, sent) = match mode {
            Fake::Short => (half, &data[start..half]),
            Fake::Cut => (end + 1, &data[start..half]),
            Fake::Slow => {
                std::thread::sleep(SLOW_RANGE_DELAY);
                (end + 1, &data[start..=end])
            }
            Fake::Garbled => (end + 1, &data[start..=end]),
        };
        let garbled;
        let sent = match mode {
            Fake::Garbled if end + 1 == data.len() => {
                let mut g = sent.to_vec();
                if let Some(b) = g.last_mut() {
                    *b ^= 0x20;
                }
                garbled = g;
                &garbled[..]
            }
            _ => sent,
        };
        let a = format!(
            "HTTP/1.1 206 Partial Content\r\n{common}Content-Range: bytes {start}-{}/{}\r\nContent-Length: {}\r\n\r\n",
            announced_end - 1,
            data.len(),
            announced_end - start
        );
        let _ = conn.write_all(a.as_bytes());
        let _ = conn.write_all(sent);
        if mode == Fake::Cut {
            return;
        }
    }
}

#[test]
fn an_origin_sending_short_or_cut_bodies_is_502_and_nothing_is_complete() {
    for mode in [Fake::Short, Fake::Cut] {
        let edge = Edge::new();
        let src = Arc::new(edge.put("film.ts", 2_000_000, 6.0, 7));
        let (addr, gets, stop) = fake_s3(src.clone(), mode);
        let server = edge.serve_fake_s3(addr, &[]);
        let r = server.req("GET", "/o/film.ts", None);
        assert_eq!(r.status, 502, "{}", r.body);
        let r = server.post_session("film.ts", 40_000);
        assert_eq!(r.status, 502, "{}", r.body);
        assert!(
            gets.load(Ordering::Relaxed) >= 1,
            "the fake origin was asked"
        );
        assert!(
            !listed(&server).contains(&"film.ts".to_string()),
            "nothing complete"
        );
        let m = server.metrics();
        let bad = m.get("isnode_fill_errors_total{class=\"garbled\"}")
            + m.get("isnode_fill_errors_total{class=\"unreachable\"}");
        assert!(bad >= 1.0);
        stop.store(true, Ordering::Relaxed);
    }
}

/// The MD5 of `data` in hex (an S3 single-part ETag).
fn md5_hex(data: &[u8]) -> String {
    use md5::Digest;
    md5::Md5::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn a_garbled_body_of_the_right_length_is_502_and_never_complete() {
    let edge = Edge::new();
    // 3 MB: three 1 MiB ranges, the last one garbled.
    let src = Arc::new(edge.put("film.ts", 4_000_000, 6.0, 41));
    let (addr, gets, stop) = fake_s3(src.clone(), Fake::Garbled);
    let server = edge.serve_fake_s3(addr, &[]);
    // The whole body over HTTP: it may begin (bytes before the last range are served as
    // they are committed) but it never ends well: 502 at once, or a body cut short.
    let (status, body) = get_bytes(server.addr, "/o/film.ts", &[]);
    assert!(
        status == 502 || body.len() < src.len(),
        "status {status}, {} bytes of {}",
        body.len(),
        src.len()
    );
    let f = wait_fill(&server, "film.ts", "failed", Duration::from_secs(60));
    assert!(f["error"].as_str().unwrap_or("").contains("garbled"), "{f}");
    assert!(
        gets.load(Ordering::Relaxed) >= 3,
        "the fake origin was asked"
    );
    assert!(
        !listed(&server).contains(&"film.ts".to_string()),
        "a garbled object is never listed complete"
    );
    assert_eq!(
        server
            .metrics()
            .get("isnode_fill_errors_total{class=\"garbled\"}"),
        1.0
    );
    // Asked again, it is filled again and found garbled again: never served complete.
    let (status, body) = get_bytes(server.addr, "/o/film.ts", &[]);
    assert!(status == 502 || body.len() < src.len(), "status {status}");
    wait_fill(&server, "film.ts", "failed", Duration::from_secs(60));
    assert!(!listed(&server).contains(&"film.ts".to_string()));
    let m = server.metrics();
    assert_eq!(m.get("isnode_fill_errors_total{class=\"garbled\"}"), 2.0);
    stop.store(true, Ordering::Relaxed);
}

#[test]
fn cache_max_bytes_evicts_the_least_recently_used_title_not_a_pinned_or_used_one() {
    let edge = Edge::new();
    for (i, name) in ["a.ts", "b.ts", "c.ts", "d.ts"].iter().enumerate() {
        edge.put(name, 2_000_000, 3.0, 10 + i as u64);
    }
    // One title's stored size, from a first server without a cap.
    let server = edge.serve(&[]);
    assert_eq!(get_bytes(server.addr, "/o/a.ts", &[]).0, 200);
    wait_fill(&server, "a.ts", "done", Duration::from_secs(30));
    let one = segment_bytes(&edge.vol.root);
    assert!(one > 0);
    drop(server);
    // Room for three titles and a half.
    let cap = (one * 7 / 2).to_string();
    let server = edge.serve(&["--cache-max-bytes", &cap]);
    for name in ["b.ts", "c.ts"] {
        assert_eq!(get_bytes(server.addr, &format!("/o/{name}"), &[]).0, 200);
        wait_fill(&server, name, "done", Duration::from_secs(30));
    }
    // a.ts (oldest) pinned, b.ts in use by a session: c.ts goes for d.ts.
    let r = server.req("POST", "/v1/objects/a.ts/pin", None);
    assert_eq!(r.status, 204, "{}", r.body);
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let r = server.post_session("b.ts", sock.local_addr().unwrap().port());
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(get_bytes(server.addr, "/o/d.ts", &[]).0, 200);
    wait_fill(&server, "d.ts", "done", Duration::from_secs(30));
    let names = listed(&server);
    assert!(names.contains(&"a.ts".to_string()), "pinned: {names:?}");
    assert!(names.contains(&"b.ts".to_string()), "in use: {names:?}");
    assert!(
        !names.contains(&"c.ts".to_string()),
        "least recently used: {names:?} (cap {cap}, one title {one})\n{}",
        server.log_text()
    );
    assert!(names.contains(&"d.ts".to_string()), "{names:?}");
    assert_eq!(server.metrics().get("isnode_titles_evicted_total"), 1.0);
    let pins = server.req("GET", "/v1/fills", None).json()["pins"].clone();
    assert_eq!(pins, serde_json::json!(["a.ts"]));
}

#[test]
fn the_fill_command_prefills_titles_at_a_capped_rate() {
    let edge = Edge::new();
    let a = edge.put("a.ts", 2_000_000, 3.0, 20);
    edge.put("b.ts", 2_000_000, 3.0, 21);
    let server = edge.serve(&["--prefill-rate-bps", "50000000"]);
    let out = command()
        .args(["fill", "a.ts", "b.ts", "nope.ts", "--server", &server.url()])
        .args(["--rate-bps", "40000000", "--wait", "--wait-timeout-s", "60"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let text = text(&out);
    // nope.ts fails (404 at the origin): exit 1, the others done.
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("\"a.ts\": filling"), "{text}");
    assert!(text.contains("nope.ts: failed"), "{text}");
    for name in ["a.ts", "b.ts"] {
        let f = wait_fill(&server, name, "done", Duration::from_secs(30));
        assert_eq!(f["rate_cap_bps"], 40_000_000, "{f}");
    }
    let names = listed(&server);
    assert!(names.contains(&"a.ts".to_string()) && names.contains(&"b.ts".to_string()));
    let (status, body) = get_bytes(server.addr, "/o/a.ts", &[]);
    assert_eq!(status, 200);
    assert!(body == a);
    // Pre-filling a present title says so.
    let r = server.req("POST", "/v1/fills", Some("{\"titles\": [\"a.ts\"]}"));
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(r.json()[0]["state"], "present");
}

#[test]
fn a_session_from_an_origin_slower_than_the_playing_plays_every_byte() {
    let edge = Edge::new();
    // 8 s at 8 Mbit/s: eight 1 MiB ranges one after the other, each 2 s late from the
    // origin (4.2 Mbit/s: slower than the playing). The session request waits for the
    // probe's two ranges (the first and the tail), about 4 s, well inside the client's 10 s
    // control timeout (5 s ranges made it 10 s and the request timed out on a loaded
    // machine). (`isnode play` asks for its digests a window ahead before it starts; the
    // digest route answers up to the front.)
    let src = Arc::new(edge.put("film.ts", 8_000_000, 8.0, 30));
    let (addr, _gets, stop) = fake_s3(src.clone(), Fake::Slow);
    let server = edge.serve_fake_s3(addr, &["--fill-parallel-ranges", "1"]);
    let deadline = Instant::now() + Duration::from_secs(90);
    let (_, out) = play_to_end(&server, &edge.vol, "film.ts", "held", &[], deadline);
    assert!(out == *src, "the session played other bytes");
    let m = server.metrics();
    let holds = m.get("isnode_fill_holds_total");
    eprintln!(
        "held {holds} times; late bursts {}",
        m.get("isnode_bursts_late_total")
    );
    // The fill runs at about half the playing rate and the session starts after the first
    // two ranges: it must catch up with the front and be held there.
    assert!(holds >= 1.0, "the session was never held at the fill front");
    assert_eq!(m.get("isnode_fills_done_total"), 1.0);
    stop.store(true, Ordering::Relaxed);
}

/// The entry of `name` in `GET /v1/objects` with `"status": "filling"`, if listed so.
fn listed_filling(server: &Server, name: &str) -> Option<Value> {
    let r = server.req("GET", "/v1/objects", None);
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()
        .as_array()?
        .iter()
        .find(|o| o["name"] == name && o["status"] == "filling")
        .cloned()
}

#[test]
fn a_title_being_filled_is_listed_with_its_front_by_the_api_and_ls_server() {
    let edge = Edge::new();
    let src = edge.put("slow.ts", 8_000_000, 6.0, 31);
    let server = edge.serve(&[]);
    // 1 MiB ranges at 2 Mbit/s: one range every 4 s, the fill lasts about 24 s.
    prefill(&server, "slow.ts", 2_000_000);
    let deadline = Instant::now() + Duration::from_secs(30);
    let entry = loop {
        if let Some(o) = listed_filling(&server, "slow.ts") {
            if o["front_codewords"].as_u64().unwrap_or(0) > 0 {
                break o;
            }
        }
        assert!(
            Instant::now() < deadline,
            "slow.ts never listed filling with a front: {}",
            server.req("GET", "/v1/objects", None).body
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let front = entry["front_codewords"].as_u64().unwrap();
    let codewords = entry["codewords"].as_u64().unwrap();
    assert!(front < codewords, "{entry}");
    assert_eq!(entry["size_bytes"], src.len() as u64, "{entry}");
    // `isnode ls --server` prints it as `ls` prints the volume's filling objects.
    let out = command()
        .args(["ls", "--server", &server.url()])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let text = text(&out);
    assert!(out.status.success(), "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("slow.ts"))
        .unwrap_or_else(|| panic!("slow.ts not in {text}"));
    assert!(
        line.contains("filling: ") && line.contains(&format!("of {codewords} codewords")),
        "{line}"
    );
    // The cap lifted, the fill completes and the title is listed as an ordinary object.
    let r = server.req(
        "POST",
        "/v1/fills",
        Some("{\"titles\": [\"slow.ts\"], \"rate_bps\": 0}"),
    );
    assert_eq!(r.status, 202, "{}", r.body);
    wait_fill(&server, "slow.ts", "done", Duration::from_secs(60));
    assert!(listed_filling(&server, "slow.ts").is_none());
    assert!(listed(&server).contains(&"slow.ts".to_string()));
    let (status, body) = get_bytes(server.addr, "/o/slow.ts", &[]);
    assert_eq!(status, 200);
    assert!(body == src);
}

#[test]
fn a_broadcast_of_a_title_only_at_the_origin_fills_it_whole_first() {
    let edge = Edge::new();
    let src = edge.put("live.ts", 8_000_000, 8.0, 51);
    let server = edge.serve(&[]);
    let body = serde_json::json!({"object": "live.ts", "scheme": "fast", "max_wait_s": 3.0});
    let r = server.req("POST", "/v1/broadcasts", Some(&body.to_string()));
    assert_eq!(r.status, 201, "{}", r.body);
    // The broadcast started on the whole title: its fill was done before.
    let f = fill_of(&server, "live.ts").expect("a fill of live.ts");
    assert_eq!(f["phase"], "done", "{f}");
    assert_eq!(f["size_bytes"], src.len() as u64, "{f}");
    assert!(listed(&server).contains(&"live.ts".to_string()));
    assert!(listed_filling(&server, "live.ts").is_none());
    // A title missing at the origin too: 404, no broadcast.
    let body = serde_json::json!({"object": "nope.ts", "scheme": "fast", "max_wait_s": 3.0});
    let r = server.req("POST", "/v1/broadcasts", Some(&body.to_string()));
    assert_eq!(r.status, 404, "{}", r.body);
    let list = server.req("GET", "/v1/broadcasts", None).json();
    assert_eq!(list["broadcasts"].as_array().map(Vec::len), Some(1));
}

/// `(offset, length)` of each `#EXT-X-BYTERANGE:LEN@OFF` of a playlist.
fn byteranges(playlist: &str) -> Vec<(usize, usize)> {
    playlist
        .lines()
        .filter_map(|l| l.strip_prefix("#EXT-X-BYTERANGE:"))
        .filter_map(|r| {
            let (len, off) = r.split_once('@')?;
            Some((off.parse().ok()?, len.parse().ok()?))
        })
        .collect()
}

#[test]
fn the_playlist_of_a_title_being_filled_is_an_event_playlist_of_its_filled_part() {
    let edge = Edge::new();
    // Real H.264 in MPEG-TS with a key frame every 2 s (about 1.1 Mbit/s, 4 MB).
    let dir = edge.vol.path("media");
    std::fs::create_dir_all(&dir).unwrap();
    let made = serve_support::media::make(&dir, serve_support::media::Container::Ts, 30);
    let src = std::fs::read(&made).unwrap();
    std::fs::write(edge.origin.join("hls.ts"), &src).unwrap();
    let server = edge.serve(&[]);
    // 1 MiB ranges at 1 Mbit/s (twice the bitrate once a viewer asks): one range every few
    // seconds, the fill lasts about 15 s.
    prefill(&server, "hls.ts", 1_000_000);
    let deadline = Instant::now() + Duration::from_secs(30);
    let text = loop {
        let r = server.req("GET", "/v1/objects/hls.ts/index.m3u8", None);
        if r.status == 200 {
            break r.body;
        }
        assert!(Instant::now() < deadline, "{} {}", r.status, r.body);
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(text.contains("#EXT-X-PLAYLIST-TYPE:EVENT\n"), "{text}");
    assert!(!text.contains("#EXT-X-ENDLIST"), "{text}");
    let partial = byteranges(&text);
    assert!(!partial.is_empty(), "{text}");
    let covered = partial.last().map_or(0, |&(o, l)| o + l);
    assert!(
        covered < src.len(),
        "only the filled part: {covered} of {}",
        src.len()
    );
    // Its segments are contiguous from 0 and served as the title's bytes.
    let mut at = 0;
    for &(o, l) in &partial {
        assert_eq!(o, at, "{text}");
        at = o + l;
        let range = format!("bytes={o}-{}", o + l - 1);
        let (status, body) = get_bytes(server.addr, "/o/hls.ts", &[("Range", &range)]);
        assert_eq!(status, 206);
        assert!(body == src[o..o + l], "segment at {o}");
    }
    // Complete: the VOD playlist, whose first segments are the event playlist's but the
    // last one (which may have ended early).
    let r = server.req(
        "POST",
        "/v1/fills",
        Some("{\"titles\": [\"hls.ts\"], \"rate_bps\": 0}"),
    );
    assert_eq!(r.status, 202, "{}", r.body);
    wait_fill(&server, "hls.ts", "done", Duration::from_secs(60));
    let r = server.req("GET", "/v1/objects/hls.ts/index.m3u8", None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("#EXT-X-PLAYLIST-TYPE:VOD\n") && r.body.contains("#EXT-X-ENDLIST"));
    let whole = byteranges(&r.body);
    assert_eq!(whole.last().map(|&(o, l)| o + l), Some(src.len()));
    let n = partial.len() - 1;
    assert_eq!(whole[..n], partial[..n]);
}

#[test]
fn a_fill_checked_against_an_md5_etag_and_killed_mid_way_resumes_and_passes_its_check() {
    let edge = Edge::new();
    let src = Arc::new(edge.put("film.ts", 4_000_000, 12.0, 71)); // 6 MB: 6 ranges
    let (addr, _gets, stop) = fake_s3(src.clone(), Fake::Slow);
    let start = || edge.serve_fake_s3(addr, &[]);
    let mut server = start();
    prefill(&server, "film.ts", 3_000_000);
    kill_fill_past(&mut server, "film.ts", 3 << 19, Front::Readable);
    // The restarted server resumes the fill from its front: the MD5 of the stored prefix is
    // read back, the rest hashed as it comes, and the whole matches the ETag.
    let server = start();
    let f = wait_fill(&server, "film.ts", "done", Duration::from_secs(90));
    assert_eq!(f["size_bytes"], src.len() as u64, "{f}");
    let m = server.metrics();
    assert_eq!(m.get("isnode_fill_errors_total{class=\"garbled\"}"), 0.0);
    assert!(
        m.get("isnode_fill_bytes_total") < src.len() as f64,
        "resumed, not restarted"
    );
    let (status, all) = get_bytes(server.addr, "/o/film.ts", &[]);
    assert_eq!(status, 200);
    let first_diff = all.iter().zip(src.iter()).position(|(a, b)| a != b);
    assert!(
        all == *src,
        "the resumed fill's bytes differ: {} bytes of {}, first difference at {first_diff:?}",
        all.len(),
        src.len()
    );
    stop.store(true, Ordering::Relaxed);
}
