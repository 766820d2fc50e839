//! No caller can lock others out (issue 21, "Resource defects a review found and a probe
//! reproduced"): each test is the regression test of one defect, run against the real
//! binary.

mod serve_support;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serve_support::*;

/// A client's receive buffer that never drains (the kernel's minimum is about 2 KiB).
const SMALL_RCVBUF_BYTES: usize = 4096;

/// A connection with a small receive buffer that sends `GET path` (with extra header
/// lines, each ending in CRLF) and never reads.
fn stalled_get(addr: SocketAddr, path: &str, extra: &str) -> TcpStream {
    use socket2::{Domain, Socket, Type};
    let sock = Socket::new(Domain::IPV4, Type::STREAM, None).expect("a socket");
    sock.set_recv_buffer_size(SMALL_RCVBUF_BYTES)
        .expect("SO_RCVBUF");
    sock.connect_timeout(&addr.into(), Duration::from_secs(5))
        .expect("connecting to the API");
    let mut s: TcpStream = sock.into();
    s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\n{extra}\r\n");
    s.write_all(req.as_bytes()).expect("sending the request");
    s
}

/// Tries a range request every 250 ms until it answers 206 or `within` has passed; the
/// statuses seen.
fn range_until_ok(server: &Server, path: &str, within: Duration) -> Vec<u16> {
    let deadline = Instant::now() + within;
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        let r = try_http(
            server.addr,
            None,
            "GET",
            path,
            None,
            &[("Range", "bytes=0-99")],
        );
        let status = r.map(|r| r.status).unwrap_or(0);
        seen.push(status);
        if status == 206 {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    seen
}

/// 40 connections that ask for a whole object and never read (more than the 32 content
/// readers) no longer lock everyone else out: their bodies stall, are dropped after the
/// write timeout and release their readers, and another client's range request is
/// answered. (Before the fix, every range request was answered 503 for as long as the
/// stalled connections stayed open.)
#[test]
fn stalled_readers_release_their_content_readers() {
    let vol = Vol::create(&[]);
    vol.add_ts("big.ts", 8_000_000, 24.0, 7);
    // 32 content readers (the default before bodies stopped holding threads): the 40
    // stalled connections take them all.
    let server = Server::start(
        &vol,
        &[
            "--api-write-timeout-ms",
            "2000",
            "--max-content-readers",
            "32",
        ],
    );
    let stalled: Vec<TcpStream> = (0..40)
        .map(|_| stalled_get(server.addr, "/o/big.ts", ""))
        .collect();
    // Every reader taken (or refused) by now: the stalled bodies fill their buffers.
    std::thread::sleep(Duration::from_millis(1500));
    let seen = range_until_ok(&server, "/o/big.ts", Duration::from_secs(30));
    assert_eq!(
        seen.last(),
        Some(&206),
        "a range request while 40 readers stall: {seen:?}\n{}",
        server.log_text()
    );
    let m = server.metrics();
    assert!(
        m.get("isnode_http_readers_active") < 32.0,
        "the stalled readers still hold their places\n{}",
        m.0
    );
    drop(stalled);
}

/// Connections that ask for a large digest answer and never read.
const DIGEST_READERS: usize = 200;
/// The server's memory growth allowed per such connection (before the fix each held its
/// whole answer, about 1 MiB).
const MAX_RSS_PER_DIGEST_READER_BYTES: u64 = 256 << 10;

/// 200 connections asking for 256 codewords of digests (about 1 MiB each) that never read
/// cost the server little memory each: the answer is streamed in chunks as the client
/// reads, so a stalled one holds a chunk, not the answer. (Before the fix each held its
/// whole answer until the idle timeout.)
#[test]
fn stalled_digest_readers_hold_little_memory() {
    let vol = Vol::create(&["--symbol-size", "128"]);
    vol.add_ts("d.ts", 2_000_000, 32.0, 11);
    let server = Server::start(&vol, &[]);
    let path = "/v1/objects/d.ts/digests?from=0&count=256";
    let one = server.req("GET", path, None);
    assert_eq!(one.status, 200, "{}", one.body);
    let answer_bytes = one
        .header("content-length")
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(one.body.len() as u64);
    assert!(
        answer_bytes > 900_000,
        "a digest answer of {answer_bytes} bytes"
    );
    // Warm up: a few answers read whole, so the allocator's pools exist already.
    for _ in 0..4 {
        assert_eq!(server.req("GET", path, None).status, 200);
    }
    let before = server.rss_bytes();
    let stalled: Vec<TcpStream> = (0..DIGEST_READERS)
        .map(|_| stalled_get(server.addr, path, ""))
        .collect();
    // Every request answered (as far as the client lets it) by now.
    std::thread::sleep(Duration::from_secs(4));
    let after = server.rss_bytes();
    let per = after.saturating_sub(before) / DIGEST_READERS as u64;
    println!(
        "server RSS {} KiB before, {} KiB with {DIGEST_READERS} stalled digest readers: {} KiB each (answer {answer_bytes} bytes)",
        before >> 10,
        after >> 10,
        per >> 10
    );
    assert!(
        per < MAX_RSS_PER_DIGEST_READER_BYTES,
        "{per} bytes of server memory per stalled digest reader"
    );
    // The API still answers.
    assert_eq!(server.req("GET", "/v1/objects", None).status, 200);
    drop(stalled);
}

/// Never-echoing sessions from 8 loopback addresses (each as many as it is let) do not make
/// a viewer's request 503: they take no bitrate budget (before the fix they took it all,
/// and the viewer was refused).
#[test]
fn never_echoing_sessions_do_not_lock_viewers_out() {
    let vol = Vol::create(&[]);
    vol.add_ts("v.ts", 2_000_000, 4.0, 13);
    // Room for about five streams of this title.
    let server = Server::start(
        &vol,
        &[
            "--max-bitrate-bps",
            "12000000",
            "--validate-timeout-ms",
            "60000",
        ],
    );
    let mut refused = 0;
    let mut created = 0;
    for a in 1..=8u8 {
        let ip = std::net::IpAddr::from([127, 0, 0, a]);
        for _ in 0..40 {
            let body = serde_json::json!({ "object": "v.ts", "port": 40_000 + u16::from(a) });
            let r = http(
                server.addr,
                Some(ip),
                "POST",
                "/v1/sessions",
                Some(&body.to_string()),
                &[],
            );
            match r.status {
                201 => created += 1,
                503 => {
                    refused += 1;
                    break;
                }
                s => panic!("POST /v1/sessions from {ip}: {s} {}", r.body),
            }
        }
    }
    println!(
        "{created} never-echoing sessions created, {refused} addresses refused at their limit"
    );
    let viewer = std::net::IpAddr::from([127, 0, 0, 20]);
    let sock = udp(viewer, 0).expect("the viewer's socket");
    let body = serde_json::json!({ "object": "v.ts", "port": sock.local_addr().unwrap().port() });
    let r = http(
        server.addr,
        Some(viewer),
        "POST",
        "/v1/sessions",
        Some(&body.to_string()),
        &[],
    );
    assert_eq!(r.status, 201, "the viewer's session: {}", r.body);
    server.remember(&r);
    server.validate_from(&r.json(), &sock, Some(viewer));
    assert!(
        count_for(&sock, Duration::from_secs(2)) > 0,
        "the viewer's stream sends nothing"
    );
}

/// A digest row missing from the catalog is found by `volume check` (exit 1, naming the
/// codeword) and the server answers the range holding it with an error instead of an
/// answer without it (which made the client ask again in a tight loop). Before the fix,
/// the check passed and the answer silently lacked the row.
#[test]
fn missing_digest_rows_are_found_and_refused() {
    let vol = Vol::create(&["--symbol-size", "256"]);
    vol.add_ts("m.ts", 2_000_000, 4.0, 17);
    let root = vol.root.to_str().unwrap().to_string();
    run_ok(&["volume", "check", "--volume", &root]);
    let db = rusqlite::Connection::open(vol.root.join("catalog.sqlite")).unwrap();
    let n = db
        .execute("DELETE FROM packet_digests WHERE sbn = 3", [])
        .unwrap();
    assert_eq!(n, 1, "no digest row of codeword 3");
    drop(db);
    let out = command()
        .args(["volume", "check", "--volume", &root])
        .output()
        .expect("running volume check");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "volume check passed:\n{text}");
    assert!(
        text.contains("no packet digests for codeword 3"),
        "volume check does not name the missing row:\n{text}"
    );
    let server = Server::start(&vol, &[]);
    let r = server.req("GET", "/v1/objects/m.ts/digests?from=0&count=8", None);
    assert_eq!(r.status, 500, "an answer without codeword 3: {}", r.body);
    assert!(r.body.contains("lacks digests"), "{}", r.body);
}
