//! `isnode play` against a hostile server (issue 11, "a client with bounds"): a fake server
//! written here, a tiny HTTP/1.1 responder on loopback answering `POST /v1/sessions` with
//! crafted JSON in the documented shape and a UDP sender of real isnode packets of a
//! generated title. One case per attack:
//!
//! - the server dies mid-stream: the client stops with a clear error once `--timeout-s`
//!   has passed, its output holds only what was received (no zeros for the rest);
//! - a huge object announced: refused before anything is written;
//! - `bitrate_bps: 1`: refused at once;
//! - a server sending ten times faster than it announced: the client's memory (peak RSS,
//!   and the queue to playout in its statistics) stays bounded;
//! - `--max-seconds` is a hard wall-clock bound, paced playout included;
//! - `--keep-length` pads the output of a session cut short to the announced length.
//!
//! Every case ends within bounded time (the client is killed at a deadline, which fails the
//! test), memory and disk.

mod serve_support;

use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use isnode_fec::Code;
use isnode_wire::partition::Partition;
use isnode_wire::{build_data_packet, DataPacketId, DATA_HEADER_LEN};
use serde_json::{json, Value};
use serve_support::{command, ChildGuard};

/// What the fake server announces and what the title's bytes are.
#[derive(Clone, Copy, Debug)]
struct Title {
    size_bytes: u64,
    bitrate_bps: u64,
    symbol_len: u32,
    source_symbols: u32,
    repair_symbols: u32,
}

const TSI: u32 = 0x1234_5678;
const TOI: u32 = 7;

impl Title {
    fn new(size_bytes: u64, bitrate_bps: u64) -> Title {
        Title {
            size_bytes,
            bitrate_bps,
            symbol_len: 1408,
            source_symbols: 223,
            repair_symbols: 32,
        }
    }

    fn partition(&self) -> Partition {
        Partition::new(self.size_bytes, self.symbol_len, self.source_symbols).unwrap()
    }

    /// The object description of the session answer.
    fn object_json(&self) -> Value {
        json!({
            "name": "title.ts",
            "size_bytes": self.size_bytes,
            "bitrate_bps": self.bitrate_bps,
            "duration_s": self.size_bytes as f64 * 8.0 / self.bitrate_bps.max(1) as f64,
            "content_type": "video/mp2t",
            "symbol_size": self.symbol_len,
            "source_symbols": self.source_symbols,
            "repair_symbols": self.repair_symbols,
            "codewords": self.partition().blocks(),
            "tsi": TSI,
            "toi": TOI,
        })
    }

    /// The `201` answer to `POST /v1/sessions` for a stream to `port`.
    fn session_json(&self, port: u16) -> Value {
        json!({
            "id": "0123456789abcdef",
            "secret": "00112233445566778899aabbccddeeff",
            "validate_timeout_ms": 2000,
            "destination": format!("127.0.0.1:{port}"),
            "object": self.object_json(),
            "start_codeword": 0,
            "send_rate_bps": self.bitrate_bps,
            "keepalive_interval_ms": 200,
            "session_timeout_ms": 5000,
            "fdt_xml": "",
            "fec": {
                "encoding_id": 5,
                "symbol_size": self.symbol_len,
                "max_source_block_length": self.source_symbols,
                "max_encoding_symbols": self.source_symbols + self.repair_symbols,
            },
        })
    }

    /// The bytes of codeword `sbn`.
    fn codeword_bytes(&self, sbn: u32) -> Vec<u8> {
        let part = self.partition();
        let at = part.block_offset(sbn);
        (at..at + part.block_bytes(sbn)).map(byte_at).collect()
    }

    /// The k source packets of codeword `sbn` and its first `repair` repair packets.
    fn packets(&self, sbn: u32, repair: usize) -> Vec<Vec<u8>> {
        let part = self.partition();
        let e = self.symbol_len as usize;
        let k = part.source_symbols(sbn) as usize;
        let bytes = self.codeword_bytes(sbn);
        let mut symbols = vec![vec![0u8; e]; k + repair];
        for (i, chunk) in bytes.chunks(e).enumerate() {
            symbols[i][..chunk.len()].copy_from_slice(chunk);
        }
        let (source, rest) = symbols.split_at_mut(k);
        let source: Vec<&[u8]> = source.iter().map(|s| &s[..]).collect();
        let mut rest: Vec<&mut [u8]> = rest.iter_mut().map(|s| &mut s[..]).collect();
        let code = Code::new(k, k + self.repair_symbols as usize).unwrap();
        code.encode(&source, &mut rest).unwrap();
        symbols
            .iter()
            .enumerate()
            .map(|(esi, symbol)| {
                let mut p = vec![0u8; DATA_HEADER_LEN + e];
                let id = DataPacketId {
                    tsi: TSI,
                    toi: TOI,
                    sbn,
                    esi: u8::try_from(esi).unwrap(),
                };
                build_data_packet(&mut p, &id, symbol).unwrap();
                p
            })
            .collect()
    }
}

/// Byte `i` of every title: a pattern that differs from zeros and from its neighbours.
fn byte_at(i: u64) -> u8 {
    (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8 | 1
}

/// What the fake server's UDP sender does once a session is asked for.
#[derive(Clone, Copy, Debug)]
struct SendPlan {
    /// Codewords sent, from 0.
    codewords: u32,
    /// Repair packets sent after the source packets of each codeword.
    repair: usize,
    /// The rate on the wire, in bit/s of packet bytes.
    rate_bps: u64,
    /// After the last packet: the whole server goes away (HTTP too), or stays up.
    after: After,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum After {
    Die,
    StayUp,
}

/// The fake server: an HTTP responder and, per session, a UDP sender. Stops when dropped.
struct FakeServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    /// Requests seen, as "METHOD PATH".
    requests: Arc<Mutex<Vec<String>>>,
    /// Packet bytes sent.
    sent_bytes: Arc<AtomicU64>,
    http: Option<JoinHandle<()>>,
}

impl FakeServer {
    fn start(title: Title, plan: SendPlan) -> FakeServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let sent_bytes = Arc::new(AtomicU64::new(0));
        let (s, r, b) = (stop.clone(), requests.clone(), sent_bytes.clone());
        let http = std::thread::spawn(move || serve_http(listener, title, plan, s, r, b));
        FakeServer {
            addr,
            stop,
            requests,
            sent_bytes,
            http: Some(http),
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn saw(&self, request: &str) -> bool {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .any(|r| r.starts_with(request))
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.http.take() {
            let _ = h.join();
        }
    }
}

/// Answers requests until `stop` (or, with [`After::Die`], until the stream has been sent).
fn serve_http(
    listener: TcpListener,
    title: Title,
    plan: SendPlan,
    stop: Arc<AtomicBool>,
    requests: Arc<Mutex<Vec<String>>>,
    sent_bytes: Arc<AtomicU64>,
) {
    let dead = Arc::new(AtomicBool::new(false));
    // Set when the client echoes the token: the stream starts then, as from a real server.
    let validated = Arc::new(AtomicBool::new(false));
    let mut senders = Vec::new();
    while !stop.load(Ordering::SeqCst) && !dead.load(Ordering::SeqCst) {
        let Ok((conn, _)) = listener.accept() else {
            std::thread::sleep(Duration::from_millis(5));
            continue;
        };
        let Some((line, body)) = read_request(&conn) else {
            continue;
        };
        requests.lock().unwrap().push(line.clone());
        let (status, answer) = if line.starts_with("POST /v1/sessions ") {
            let port = serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|v| v["port"].as_u64())
                .and_then(|p| u16::try_from(p).ok())
                .unwrap_or(0);
            let (stop, dead, sent) = (stop.clone(), dead.clone(), sent_bytes.clone());
            let validated = validated.clone();
            senders.push(std::thread::spawn(move || {
                send_token_then_wait(port, &validated, &stop);
                send_stream(title, plan, port, &stop, &sent);
                if plan.after == After::Die {
                    dead.store(true, Ordering::SeqCst);
                }
            }));
            ("201 Created", title.session_json(port).to_string())
        } else if line.starts_with("POST /v1/sessions/") && line.contains("/validate ") {
            validated.store(true, Ordering::SeqCst);
            ("204 No Content", String::new())
        } else if line.starts_with("POST /v1/sessions/") || line.starts_with("DELETE ") {
            ("204 No Content", String::new())
        } else {
            ("404 Not Found", json!({"error": "not found"}).to_string())
        };
        respond(conn, status, &answer);
    }
    // Dead: the listener closes (connections are refused), the senders have stopped.
    drop(listener);
    stop.store(true, Ordering::SeqCst);
    for s in senders {
        let _ = s.join();
    }
}

/// One request: its first line and its body (Content-Length bytes), within 2 s.
fn read_request(mut conn: &TcpStream) -> Option<(String, Vec<u8>)> {
    conn.set_nonblocking(false).ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = conn.read(&mut chunk).ok()?;
        if n == 0 || buf.len() > 64 << 10 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0)
        .min(1 << 20);
    while buf.len() < head_end + len {
        let n = conn.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let line = head.lines().next().unwrap_or_default().to_string();
    Some((line, buf[head_end..head_end + len].to_vec()))
}

fn respond(mut conn: TcpStream, status: &str, body: &str) {
    let ctype = if body.is_empty() {
        ""
    } else {
        "Content-Type: application/json\r\n"
    };
    let _ = write!(
        conn,
        "HTTP/1.1 {status}\r\n{ctype}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// Sends the plan's codewords to `port` on loopback at the plan's rate, until `stop`.
/// Return routability, as a real server does it: the token datagram to `port`, then a
/// wait (bounded) for the client's echo.
fn send_token_then_wait(port: u16, validated: &AtomicBool, stop: &AtomicBool) {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let token = isnode_proto::auth::token_datagram(&[7; 16]);
    let _ = socket.send_to(&token, ("127.0.0.1", port));
    let deadline = Instant::now() + Duration::from_secs(5);
    while !validated.load(Ordering::SeqCst) && !stop.load(Ordering::SeqCst) {
        if Instant::now() > deadline {
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn send_stream(title: Title, plan: SendPlan, port: u16, stop: &AtomicBool, sent: &AtomicU64) {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = SocketAddr::from(([127, 0, 0, 1], port));
    let start = Instant::now();
    let mut bytes = 0u64;
    for sbn in 0..plan.codewords.min(title.partition().blocks()) {
        for p in title.packets(sbn, plan.repair) {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            let due = start + Duration::from_secs_f64(bytes as f64 * 8.0 / plan.rate_bps as f64);
            let now = Instant::now();
            if due > now + Duration::from_millis(2) {
                std::thread::sleep(due - now);
            }
            // Loopback: a full receive buffer drops, which the client counts as loss.
            let _ = socket.send_to(&p, to);
            bytes += p.len() as u64;
            sent.fetch_add(p.len() as u64, Ordering::Relaxed);
        }
    }
}

/// A client run: its exit, stderr, output and statistics.
struct Played {
    status: ExitStatus,
    took: Duration,
    stderr: String,
    out: Vec<u8>,
    stats: Option<Value>,
    /// The client's peak resident set (VmHWM), in bytes, as last read while it ran.
    peak_rss_bytes: u64,
}

/// Runs `isnode play` against `server` with `extra` flags; kills it (and fails) if it is
/// still running `limit` after its start.
fn play(server: &FakeServer, dir: &Path, extra: &[&str], limit: Duration) -> Played {
    let out: PathBuf = dir.join("out.ts");
    let stats = dir.join("stats.json");
    let err = dir.join("stderr.txt");
    let mut cmd = command();
    cmd.args(["play", "title.ts", "--server", &server.url(), "--out"])
        .arg(&out)
        .arg("--stats-json")
        .arg(&stats)
        .args(["--no-repair"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(File::create(&err).unwrap());
    let start = Instant::now();
    let mut child = ChildGuard(Some(cmd.spawn().unwrap()));
    let status_path = format!("/proc/{}/status", child.id());
    let mut peak_rss_bytes = 0;
    let deadline = start + limit;
    let status = loop {
        if let Some(st) = child.0.as_mut().unwrap().try_wait().unwrap() {
            child.0 = None;
            break st;
        }
        if let Some(kb) = std::fs::read_to_string(&status_path)
            .ok()
            .and_then(|s| vm_kb(&s, "VmHWM:"))
        {
            peak_rss_bytes = peak_rss_bytes.max(kb * 1024);
        }
        if Instant::now() >= deadline {
            let written = std::fs::metadata(&out).map_or(0, |m| m.len());
            child.wait_until(deadline, &format!("play (output {written} bytes so far)"));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Played {
        status,
        took: start.elapsed(),
        stderr: std::fs::read_to_string(&err).unwrap_or_default(),
        out: std::fs::read(&out).unwrap_or_default(),
        stats: std::fs::read(&stats)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok()),
        peak_rss_bytes,
    }
}

fn vm_kb(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(key))?;
    line[key.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// The output matches the title byte for byte from its start, except in the codewords
/// the statistics list as unrecoverable (written as zeros).
#[track_caller]
fn assert_prefix_of_title(title: &Title, out: &[u8], stats: Option<&Value>) {
    let lost: Vec<(u64, u64)> = stats
        .and_then(|s| s["unrecoverable"].as_array())
        .map(|a| {
            a.iter()
                .filter_map(|r| Some((r["offset"].as_u64()?, r["len"].as_u64()?)))
                .collect()
        })
        .unwrap_or_default();
    assert!(out.len() as u64 <= title.size_bytes);
    for (i, &b) in out.iter().enumerate() {
        let i = i as u64;
        if lost.iter().any(|&(o, l)| i >= o && i < o + l) {
            assert_eq!(b, 0, "byte {i} of a lost codeword");
        } else if b != byte_at(i) {
            panic!("output byte {i} is {b}, the title's is {}", byte_at(i));
        }
    }
}

#[test]
fn server_dying_mid_stream_ends_the_output_after_what_was_received() {
    // 30 s at 8 Mbit/s; the server sends 4 codewords (~1.3 MB) four times too fast, dies.
    let title = Title::new(30_000_000, 8_000_000);
    let plan = SendPlan {
        codewords: 4,
        repair: 4,
        rate_bps: 32_000_000,
        after: After::Die,
    };
    let server = FakeServer::start(title, plan);
    let dir = tempfile::tempdir().unwrap();
    let p = play(
        &server,
        dir.path(),
        &["--timeout-s", "1"],
        Duration::from_secs(12),
    );
    assert!(!p.status.success(), "{}", p.stderr);
    assert!(p.stderr.contains("the server is gone"), "{}", p.stderr);
    assert!(p.stderr.contains("--timeout-s"), "{}", p.stderr);
    let part = title.partition();
    let received = part.block_offset(4);
    assert!(
        p.out.len() as u64 <= received,
        "wrote {} bytes, received {received}",
        p.out.len()
    );
    assert!(
        p.out.len() as u64 >= part.block_offset(3),
        "{}",
        p.out.len()
    );
    assert_prefix_of_title(&title, &p.out, p.stats.as_ref());
    let stats = p.stats.expect("stats JSON");
    assert_eq!(stats["end_reason"], "timeout");
}

#[test]
fn keep_length_pads_a_session_cut_short() {
    // 4 s at 8 Mbit/s: the server sends 4 of 13 codewords and dies.
    let title = Title::new(4_000_000, 8_000_000);
    let plan = SendPlan {
        codewords: 4,
        repair: 4,
        rate_bps: 32_000_000,
        after: After::Die,
    };
    let server = FakeServer::start(title, plan);
    let dir = tempfile::tempdir().unwrap();
    let flags = ["--timeout-s", "1", "--keep-length", "--max-seconds", "3"];
    let p = play(&server, dir.path(), &flags, Duration::from_secs(12));
    assert!(!p.status.success(), "lossy: {}", p.stderr);
    assert!(!p.stderr.contains("the server is gone"), "{}", p.stderr);
    assert_eq!(p.out.len() as u64, title.size_bytes, "{}", p.stderr);
    assert_prefix_of_title(&title, &p.out, p.stats.as_ref());
}

#[test]
fn a_huge_object_is_refused_before_anything_is_written() {
    // 1 TiB at 100 Mbit/s (a day of playing time): over the 256 GiB default.
    let title = Title::new(1 << 40, 100_000_000);
    let plan = SendPlan {
        codewords: 0,
        repair: 0,
        rate_bps: 1_000_000,
        after: After::StayUp,
    };
    let server = FakeServer::start(title, plan);
    let dir = tempfile::tempdir().unwrap();
    let p = play(
        &server,
        dir.path(),
        &["--timeout-s", "1"],
        Duration::from_secs(10),
    );
    assert!(!p.status.success());
    assert!(p.stderr.contains("--max-object-bytes"), "{}", p.stderr);
    assert!(p.out.is_empty(), "wrote {} bytes", p.out.len());
    assert!(server.saw("DELETE /v1/sessions/"), "the session is deleted");
    // The flag raises the limit: the same answer is then taken (and times out quietly).
    let p = play(
        &server,
        dir.path(),
        &["--timeout-s", "0.5", "--max-object-bytes", "2000000000000"],
        Duration::from_secs(10),
    );
    assert!(p.stderr.contains("the server is gone"), "{}", p.stderr);
    assert!(p.out.is_empty(), "wrote {} bytes", p.out.len());
}

#[test]
fn a_bitrate_of_one_is_refused_at_once() {
    let title = Title::new(1_000_000, 1);
    let plan = SendPlan {
        codewords: 4,
        repair: 0,
        rate_bps: 8_000_000,
        after: After::StayUp,
    };
    let server = FakeServer::start(title, plan);
    let dir = tempfile::tempdir().unwrap();
    let p = play(
        &server,
        dir.path(),
        &["--timeout-s", "1"],
        Duration::from_secs(10),
    );
    assert!(!p.status.success());
    assert!(p.stderr.contains("bitrate of 1 bit/s"), "{}", p.stderr);
    assert!(p.stderr.contains("--min-bitrate-bps"), "{}", p.stderr);
    assert!(p.out.is_empty());
    assert!(p.took < Duration::from_secs(5), "{:?}", p.took);
}

#[test]
fn a_server_ten_times_too_fast_cannot_grow_the_clients_memory() {
    // Announced 16 Mbit/s, 64 MB (32 s); sent at 160 Mbit/s (3.2 s). The old client queued
    // everything the paced playout had not written yet: ~60 MB.
    let title = Title::new(64_000_000, 16_000_000);
    let plan = SendPlan {
        codewords: u32::MAX,
        repair: 4,
        rate_bps: 160_000_000,
        after: After::StayUp,
    };
    let server = FakeServer::start(title, plan);
    let dir = tempfile::tempdir().unwrap();
    let flags = ["--timeout-s", "2", "--max-seconds", "6"];
    let p = play(&server, dir.path(), &flags, Duration::from_secs(20));
    let stats = p.stats.as_ref().expect("stats JSON");
    let q = &stats["playout_queue"];
    let limit = q["limit_bytes"].as_u64().unwrap();
    // Four seconds of media: 8 MB.
    assert_eq!(limit, 8_000_000);
    let part = title.partition();
    let codeword = part.block_bytes(0);
    let peak = q["peak_bytes"].as_u64().unwrap();
    assert!(peak <= limit + codeword, "queue peak {peak} of {limit}");
    assert!(q["full_events"].as_u64().unwrap() > 0, "{q}");
    assert!(
        p.stderr.contains("sent faster than the playout"),
        "{}",
        p.stderr
    );
    // Resident memory: the binary, the receive window (16 codewords of 255 symbols) and
    // the queue: far below the title's size.
    assert!(p.peak_rss_bytes > 0);
    assert!(
        p.peak_rss_bytes < 48 << 20,
        "peak RSS {} bytes",
        p.peak_rss_bytes
    );
    eprintln!(
        "10x too fast: peak RSS {} bytes, queue peak {peak} of {limit}, {} bytes out in {:?}",
        p.peak_rss_bytes,
        p.out.len(),
        p.took
    );
    // The stream ends after 3.2 s; the paced playout stops at --max-seconds.
    assert!(p.took < Duration::from_secs(10), "{:?}", p.took);
    assert!(p.out.len() < 16_000_000, "{}", p.out.len());
    assert_prefix_of_title(&title, &p.out, Some(stats));
}

#[test]
fn max_seconds_is_a_hard_bound_on_paced_playout() {
    // 30 s at 4 Mbit/s, sent at its rate (plus repair) for as long as the client listens.
    let title = Title::new(15_000_000, 4_000_000);
    let plan = SendPlan {
        codewords: u32::MAX,
        repair: 8,
        rate_bps: 4_400_000,
        after: After::StayUp,
    };
    let server = FakeServer::start(title, plan);
    let dir = tempfile::tempdir().unwrap();
    let p = play(
        &server,
        dir.path(),
        &["--max-seconds", "2"],
        Duration::from_secs(8),
    );
    assert!(p.took < Duration::from_secs(5), "{:?}", p.took);
    // Two seconds at 0.5 MB/s, and what came before playout started.
    assert!(p.out.len() < 2_000_000, "{}", p.out.len());
    assert!(!p.out.is_empty());
    assert!(p.out.len() as u64 <= server.sent_bytes.load(Ordering::Relaxed));
    assert_prefix_of_title(&title, &p.out, p.stats.as_ref());
    assert_eq!(p.stats.unwrap()["end_reason"], "max_duration");
}

#[test]
fn max_seconds_bounds_play_http_and_its_linger() {
    // 30 s at 4 Mbit/s, served to a local player over HTTP with a long linger.
    let title = Title::new(15_000_000, 4_000_000);
    let plan = SendPlan {
        codewords: u32::MAX,
        repair: 8,
        rate_bps: 4_400_000,
        after: After::StayUp,
    };
    let server = FakeServer::start(title, plan);
    let dir = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", serve_support::free_port());
    let flags = [
        "--http",
        &listen,
        "--http-linger-s",
        "30",
        "--max-seconds",
        "2",
    ];
    let p = play(&server, dir.path(), &flags, Duration::from_secs(8));
    assert!(p.took < Duration::from_secs(5), "{:?}", p.took);
    assert!(p.out.len() < 2_000_000, "{}", p.out.len());
    assert!(!p.out.is_empty(), "{}", p.stderr);
    assert_prefix_of_title(&title, &p.out, p.stats.as_ref());
}
