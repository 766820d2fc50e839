//! I/O tests without the real server: an in-test sender builds an object's packets
//! (isnode_fec + isnode_wire) and sends them over loopback, directly or through the lossy
//! relay; a tiny fake control server answers the HTTP API of docs/protocol.md.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use isnode_recv::play::{play_session, EndReason, SessionSetup, SourceFilter};
use isnode_recv::receiver::{FdtCheck, SessionParams};
use isnode_recv::sender::object_packets;
use isnode_recv::{play, play_on, PlayConfig, Relay, RelayArgs};
use isnode_wire::fdt::{build_fdt_packets, FdtFile, FdtInstance};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn params(len: u64) -> SessionParams {
    SessionParams {
        tsi: 0x5EED_0001,
        toi: 3,
        transfer_length: len,
        symbol_len: 1024,
        max_source_block_len: 40,
        repair_symbols: 10,
        start_codeword: 0,
    }
}

fn data(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..len).map(|_| rng.random()).collect()
}

fn fdt(p: &SessionParams) -> FdtInstance {
    FdtInstance {
        instance_id: 1,
        expires: 4_000_000_000,
        files: vec![FdtFile {
            toi: p.toi,
            content_location: "clip.ts".into(),
            content_length: p.transfer_length,
            transfer_length: p.transfer_length,
            content_type: Some("video/mp2t".into()),
            content_encoding: None,
            fec_oti: Some(p.fec_oti()),
        }],
    }
}

/// A fresh temporary directory per test, removed when the test ends.
fn tmpdir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// What the in-test sender does.
#[derive(Clone)]
struct SendPlan {
    /// Bitrate to pace codewords at (0: a short pause per codeword only).
    bitrate_bps: u64,
    /// (sbn, esi) pairs not to send.
    skip: Vec<(u32, usize)>,
}

/// Sends the FDT, then every codeword, to `to`, like the server (source then repair).
fn spawn_sender(
    p: SessionParams,
    bytes: Vec<u8>,
    to: SocketAddr,
    plan: SendPlan,
) -> JoinHandle<u64> {
    std::thread::spawn(move || {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let cws = object_packets(&bytes, &p).unwrap();
        let fdt_packets = build_fdt_packets(&fdt(&p), p.tsi, p.symbol_len as usize).unwrap();
        let mut sent = 0u64;
        for f in &fdt_packets {
            sock.send_to(f, to).unwrap();
            sent += 1;
        }
        for (sbn, cw) in cws.iter().enumerate().skip(p.start_codeword as usize) {
            let k = cw.len() - p.repair_symbols as usize;
            let per_packet = if plan.bitrate_bps > 0 {
                Duration::from_secs_f64(
                    k as f64 * f64::from(p.symbol_len) * 8.0
                        / plan.bitrate_bps as f64
                        / cw.len() as f64,
                )
            } else {
                Duration::ZERO
            };
            for (esi, packet) in cw.iter().enumerate() {
                if plan.skip.contains(&(sbn as u32, esi)) {
                    continue;
                }
                sock.send_to(packet, to).unwrap();
                sent += 1;
                if plan.bitrate_bps > 0 {
                    std::thread::sleep(per_packet);
                }
            }
            if plan.bitrate_bps == 0 {
                std::thread::sleep(Duration::from_millis(2));
            }
            if sbn % 8 == 7 {
                for f in &fdt_packets {
                    sock.send_to(f, to).unwrap();
                    sent += 1;
                }
            }
        }
        sent
    })
}

fn setup(p: &SessionParams, bitrate_bps: u64) -> SessionSetup {
    SessionSetup {
        object: "clip.ts".into(),
        session_id: None,
        params: p.clone(),
        bitrate_bps,
        fdt_session: FdtCheck::NotReceived,
        source: SourceFilter::ip([127, 0, 0, 1].into()),
    }
}

/// The client's socket on loopback, its receive buffer grown at once: the unpaced senders
/// of these tests start before the receive loop (which grows the buffer itself), and on a
/// loaded machine the default buffer would overflow, a loss no test means to inject.
fn client_socket() -> UdpSocket {
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket2::SockRef::from(&client)
        .set_recv_buffer_size(4 << 20)
        .unwrap();
    client
}

fn fast_args(out: &Path) -> PlayConfig {
    let mut args = PlayConfig::new("clip.ts");
    args.out = Some(out.to_path_buf());
    args.as_fast_as_possible = true;
    args.timeout_s = 3.0;
    args
}

#[test]
fn relay_with_loss_and_corruption_gives_identical_output() {
    let dir = tmpdir();
    let len = 400_000;
    let p = params(len);
    let bytes = data(len as usize, 1);
    let client = client_socket();
    let mut rargs = RelayArgs::new("127.0.0.1:0".parse().unwrap(), client.local_addr().unwrap());
    rargs.impair.loss = 0.04;
    rargs.impair.burst = Some(2.0);
    rargs.impair.corrupt = 0.01;
    rargs.impair.seed = 11;
    rargs.max_seconds = 20.0;
    let relay = Relay::bind(&rargs).unwrap();
    let relay_addr = relay.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let relay_thread = {
        let stop = stop.clone();
        std::thread::spawn(move || relay.run(&stop).unwrap())
    };
    let sender = spawn_sender(
        p.clone(),
        bytes.clone(),
        relay_addr,
        SendPlan {
            bitrate_bps: 0,
            skip: vec![],
        },
    );
    let out = dir.path().join("relay.out");
    let mut args = fast_args(&out);
    // More corruption on receive, on top of the relay's.
    args.impair.corrupt = 0.01;
    args.impair.seed = 5;
    args.stats_json = Some(dir.path().join("relay.json"));
    let stats = play_session(&args, &client, &setup(&p, 8_000_000)).unwrap();
    let sent = sender.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    let rstats = relay_thread.join().unwrap();

    assert_eq!(std::fs::read(&out).unwrap(), bytes, "{}", stats.summary());
    assert!(stats.is_clean(), "{}", stats.summary());
    assert_eq!(stats.end_reason, EndReason::Complete);
    assert_eq!(rstats.packets_in, sent, "every packet reaches the relay");
    assert!(rstats.packets_dropped > 0 && rstats.packets_corrupted > 0);
    assert!(stats.packets_corrupt >= rstats.packets_corrupted);
    assert!(stats.injected_corrupt > 0);
    assert!(stats.symbols_repaired > 0);
    assert!(stats.packets_lost > 0);
    assert_eq!(stats.fdt_stream, FdtCheck::Verified);
    assert_eq!(stats.bytes_written, len);
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("relay.json")).unwrap()).unwrap();
    assert_eq!(json["bytes_written"], len);
    assert_eq!(json["codewords_unrecoverable"], 0);
    assert!(json["per_second_bitrate_bps"].is_array());
}

#[test]
fn unrecoverable_codeword_is_zeroed_in_place() {
    let dir = tmpdir();
    let len = 200_000;
    let p = params(len);
    let bytes = data(len as usize, 2);
    let client = client_socket();
    // Codeword 2 loses 11 of its 50 packets: one more than m.
    let skip: Vec<(u32, usize)> = (0..11).map(|esi| (2, esi * 3)).collect();
    let sender = spawn_sender(
        p.clone(),
        bytes.clone(),
        client.local_addr().unwrap(),
        SendPlan {
            bitrate_bps: 0,
            skip,
        },
    );
    let out = dir.path().join("lost.out");
    let stats = play_session(&fast_args(&out), &client, &setup(&p, 8_000_000)).unwrap();
    sender.join().unwrap();
    let got = std::fs::read(&out).unwrap();
    assert_eq!(got.len(), bytes.len(), "never silently shorter");
    let part = p.partition().unwrap();
    let lost = part.block_offset(2) as usize..part.block_offset(3) as usize;
    let cw = lost.len();
    assert!(got[lost.clone()].iter().all(|&b| b == 0));
    assert_eq!(got[..lost.start], bytes[..lost.start]);
    assert_eq!(got[lost.end..], bytes[lost.end..]);
    assert_eq!(stats.codewords_unrecoverable, 1);
    assert_eq!(stats.unrecoverable[0].sbn, 2);
    assert_eq!(stats.unrecoverable[0].offset, lost.start as u64);
    assert_eq!(stats.unrecoverable[0].len, cw as u64);
    assert_eq!(stats.packets_lost, 11);
    assert!(!stats.is_clean());
    assert!(stats.summary().contains("lost codeword 2"));
}

/// Silence ends the session after `--timeout-s`: nothing was received, so nothing is
/// written (issue 11: no zeros for a title that never came); `--keep-length` pads the
/// output to the announced length with zeros, everything lost.
#[test]
fn silence_ends_the_session_with_nothing_written_unless_keep_length() {
    let dir = tmpdir();
    let p = params(100_000);
    let client = client_socket();
    let mut args = fast_args(&dir.path().join("silent.out"));
    args.timeout_s = 0.3;
    let t = Instant::now();
    let stats = play_session(&args, &client, &setup(&p, 1_000_000)).unwrap();
    assert!(t.elapsed() < Duration::from_secs(3));
    assert_eq!(stats.end_reason, EndReason::Timeout);
    assert_eq!(stats.codewords_decoded, 0);
    assert_eq!(stats.bytes_written, 0);
    assert!(!stats.is_clean());
    assert!(std::fs::read(dir.path().join("silent.out"))
        .unwrap()
        .is_empty());

    args.keep_length = true;
    let stats = play_session(&args, &client, &setup(&p, 1_000_000)).unwrap();
    assert_eq!(stats.end_reason, EndReason::Timeout);
    assert_eq!(stats.codewords_unrecoverable, stats.codewords_total);
    assert_eq!(stats.bytes_written, 100_000);
    assert_eq!(
        std::fs::read(dir.path().join("silent.out")).unwrap(),
        vec![0u8; 100_000]
    );
}

/// Defect 2 of issue 7: datagrams that are not the session's stream must not change the
/// output. Before the stream starts, another host (127.0.0.2) sends CRC-valid forgeries of the
/// first codewords and of the last one, and another socket of the sender's host sends a
/// far-future symbol, duplicates of real packets and packets of another session.
#[test]
fn stray_duplicate_and_far_future_packets_leave_output_identical() {
    let dir = tmpdir();
    let len = 200_000;
    let p = SessionParams {
        symbol_len: 256,
        max_source_block_len: 10,
        repair_symbols: 4,
        ..params(len)
    };
    let bytes = data(len as usize, 6);
    let cws = object_packets(&bytes, &p).unwrap();
    let last = cws.len() as u32 - 1;
    assert!(
        last > 64,
        "the object spans more codewords than the reorder window"
    );
    let client = client_socket();
    let to = client.local_addr().unwrap();
    let forge = |sbn: u32, esi: u8, tsi: u32| {
        let mut pkt = vec![0x5A; isnode_wire::DATA_HEADER_LEN + p.symbol_len as usize];
        let id = isnode_wire::DataPacketId {
            tsi,
            toi: p.toi,
            sbn,
            esi,
        };
        isnode_wire::seal_data_packet(&mut pkt, &id).unwrap();
        pkt
    };
    let elsewhere = UdpSocket::bind("127.0.0.2:0").expect("loopback 127.0.0.2");
    for sbn in [0, 1, 2, last] {
        for esi in 0..10 {
            elsewhere.send_to(&forge(sbn, esi, p.tsi), to).unwrap();
        }
    }
    let same_host = UdpSocket::bind("127.0.0.1:0").unwrap();
    same_host.send_to(&forge(last, 0, p.tsi), to).unwrap();
    same_host.send_to(&forge(0, 0, p.tsi + 1), to).unwrap();
    for pkt in cws[0].iter().chain(&cws[0]) {
        same_host.send_to(pkt, to).unwrap();
    }
    let sender = spawn_sender(
        p.clone(),
        bytes.clone(),
        to,
        SendPlan {
            bitrate_bps: 0,
            skip: vec![],
        },
    );
    let out = dir.path().join("strays.out");
    let stats = play_session(&fast_args(&out), &client, &setup(&p, 8_000_000)).unwrap();
    sender.join().unwrap();
    assert_eq!(std::fs::read(&out).unwrap(), bytes, "{}", stats.summary());
    assert!(stats.is_clean(), "{}", stats.summary());
    assert!(stats.packets_duplicate >= cws[0].len() as u64);
}

// ---------------------------------------------------------------------------------------
// A fake control server.

#[derive(Default)]
struct ServerLog {
    posts: Vec<serde_json::Value>,
    peers: Vec<SocketAddr>,
    keepalives: u64,
    deletes: Vec<String>,
}

struct FakeServer {
    addr: SocketAddr,
    log: Arc<Mutex<ServerLog>>,
    stop: Arc<AtomicBool>,
    senders: Arc<Mutex<Vec<JoinHandle<u64>>>>,
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Reads one HTTP request (headers and Content-Length body); None at EOF.
fn read_request(r: &mut BufReader<TcpStream>) -> Option<(String, String, Vec<u8>)> {
    let mut line = String::new();
    if r.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let path = parts.next()?.to_string();
    let mut content_length = 0usize;
    for _ in 0..100 {
        let mut h = String::new();
        r.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                content_length = v.trim().parse().ok()?;
            }
        }
    }
    let mut body = vec![0u8; content_length.min(1 << 20)];
    r.read_exact(&mut body).ok()?;
    Some((method, path, body))
}

/// `admission`: answer every POST with this 503 body instead of a session.
fn fake_server(
    p: SessionParams,
    bytes: Vec<u8>,
    bitrate_bps: u64,
    admission: Option<serde_json::Value>,
) -> FakeServer {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let log = Arc::new(Mutex::new(ServerLog::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let senders = Arc::new(Mutex::new(Vec::new()));
    let next_id = Arc::new(AtomicU64::new(1));
    let pending = Arc::new(Mutex::new(std::collections::HashMap::new()));
    {
        let (log, stop, senders) = (log.clone(), stop.clone(), senders.clone());
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(30);
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                let (conn, peer) = match listener.accept() {
                    Ok(c) => c,
                    Err(_) => {
                        std::thread::sleep(Duration::from_millis(5));
                        continue;
                    }
                };
                let (log, senders, p, bytes, admission, next_id, pending) = (
                    log.clone(),
                    senders.clone(),
                    p.clone(),
                    bytes.clone(),
                    admission.clone(),
                    next_id.clone(),
                    pending.clone(),
                );
                std::thread::spawn(move || {
                    conn.set_nonblocking(false).unwrap();
                    conn.set_read_timeout(Some(Duration::from_secs(10)))
                        .unwrap();
                    let mut w = conn.try_clone().unwrap();
                    let mut r = BufReader::new(conn);
                    while let Some((method, path, body)) = read_request(&mut r) {
                        let (status, reply) = match (method.as_str(), path.as_str()) {
                            ("POST", "/v1/sessions") => {
                                let req: serde_json::Value = serde_json::from_slice(&body).unwrap();
                                let port = req["port"].as_u64().unwrap() as u16;
                                let start = req["start_codeword"].as_u64().unwrap_or(0) as u32;
                                {
                                    let mut l = log.lock().unwrap();
                                    l.posts.push(req);
                                    l.peers.push(peer);
                                }
                                if let Some(a) = &admission {
                                    ("503 Service Unavailable", a.to_string())
                                } else {
                                    let id =
                                        format!("s{}", next_id.fetch_add(1, Ordering::Relaxed));
                                    let mut sp = p.clone();
                                    sp.start_codeword = start;
                                    let to = SocketAddr::new(peer.ip(), port);
                                    // Return routability as a real server does it: the
                                    // token first, the stream once it is echoed.
                                    let token = isnode_proto::auth::token_datagram(&[9; 16]);
                                    let _ = std::net::UdpSocket::bind("127.0.0.1:0")
                                        .and_then(|u| u.send_to(&token, to));
                                    pending.lock().unwrap().insert(id.clone(), (sp, to));
                                    let codewords = isnode_wire::partition::Partition::new(
                                        p.transfer_length,
                                        p.symbol_len,
                                        p.max_source_block_len,
                                    )
                                    .unwrap()
                                    .blocks();
                                    let reply = serde_json::json!({
                                        "id": id,
                                        "secret": "00112233445566778899aabbccddeeff",
                                        "validate_timeout_ms": 2000,
                                        "destination": to.to_string(),
                                        "object": {
                                            "name": "clip.ts", "size_bytes": p.transfer_length,
                                            // A sender at 0 sends unpaced; a server
                                            // never announces 0 (the client refuses it).
                                            "bitrate_bps": bitrate_bps.max(1_000_000),
                                            "duration_s": 1.0,
                                            "content_type": "video/mp2t",
                                            "symbol_size": p.symbol_len,
                                            "source_symbols": p.max_source_block_len,
                                            "repair_symbols": p.repair_symbols,
                                            "codewords": codewords, "tsi": p.tsi, "toi": p.toi
                                        },
                                        "start_codeword": start,
                                        "send_rate_bps": bitrate_bps * 5 / 4,
                                        "keepalive_interval_ms": 100,
                                        "session_timeout_ms": 500,
                                        "fdt_xml": fdt(&p).to_xml(),
                                        "fec": {
                                            "encoding_id": 5, "symbol_size": p.symbol_len,
                                            "max_source_block_length": p.max_source_block_len,
                                            "max_encoding_symbols": p.max_source_block_len + p.repair_symbols
                                        }
                                    });
                                    ("201 Created", reply.to_string())
                                }
                            }
                            ("POST", path) if path.ends_with("/validate") => {
                                let id = path
                                    .trim_start_matches("/v1/sessions/")
                                    .trim_end_matches("/validate");
                                match pending.lock().unwrap().remove(id) {
                                    Some((sp, to)) => {
                                        senders.lock().unwrap().push(spawn_sender(
                                            sp,
                                            bytes.clone(),
                                            to,
                                            SendPlan {
                                                bitrate_bps,
                                                skip: vec![],
                                            },
                                        ));
                                        ("204 No Content", String::new())
                                    }
                                    None => (
                                        "404 Not Found",
                                        r#"{"error":"no such session"}"#.to_string(),
                                    ),
                                }
                            }
                            ("POST", path) if path.ends_with("/keepalive") => {
                                log.lock().unwrap().keepalives += 1;
                                ("204 No Content", String::new())
                            }
                            ("DELETE", path) => {
                                log.lock().unwrap().deletes.push(path.to_string());
                                ("204 No Content", String::new())
                            }
                            _ => ("404 Not Found", r#"{"error":"no such thing"}"#.to_string()),
                        };
                        let head = format!(
                            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                            reply.len()
                        );
                        if w.write_all(head.as_bytes()).is_err()
                            || w.write_all(reply.as_bytes()).is_err()
                        {
                            break;
                        }
                    }
                });
            }
        });
    }
    FakeServer {
        addr,
        log,
        stop,
        senders,
    }
}

#[test]
fn play_against_a_control_server_paced() {
    let dir = tmpdir();
    // 120 000 bytes at 960 kbit/s: one second of media, 3 codewords of 40 KiB.
    let len = 120_000;
    let bitrate = 960_000;
    let p = params(len);
    let bytes = data(len as usize, 3);
    let server = fake_server(p.clone(), bytes.clone(), bitrate, None);
    let out = dir.path().join("paced.out");
    let mut args = PlayConfig::new("clip.ts");
    args.server = format!("http://{}", server.addr);
    args.out = Some(out.clone());
    args.timeout_s = 3.0;
    args.prebuffer_ms = Some(200);
    args.impair.loss = 0.05;
    args.impair.seed = 9;
    let t = Instant::now();
    let stats = play(&args).unwrap();
    let took = t.elapsed();
    assert_eq!(std::fs::read(&out).unwrap(), bytes, "{}", stats.summary());
    assert!(stats.is_clean(), "{}", stats.summary());
    assert!(stats.paced);
    assert!(stats.injected_lost > 0);
    assert_eq!(stats.session_id.as_deref(), Some("s1"));
    assert_eq!(stats.fdt_session, FdtCheck::Verified);
    assert_eq!(stats.fdt_stream, FdtCheck::Verified);
    // Paced playout of one second of media: at least ~1 s, and the first full second
    // carries about the nominal bitrate.
    assert!(took >= Duration::from_millis(900), "{took:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    let first = stats.per_second_bitrate_bps[0];
    assert!(
        first > bitrate * 8 / 10 && first < bitrate * 12 / 10,
        "{:?}",
        stats.per_second_bitrate_bps
    );
    assert_eq!(stats.per_second_bitrate_bps.iter().sum::<u64>(), len * 8);
    let startup = stats.startup_delay_ms.unwrap();
    assert!((200..3000).contains(&startup), "{startup}");
    for s in server.senders.lock().unwrap().drain(..) {
        s.join().unwrap();
    }
    let log = server.log.lock().unwrap();
    assert_eq!(log.posts.len(), 1);
    assert_eq!(log.posts[0]["object"], "clip.ts");
    assert!(
        log.keepalives >= 3,
        "keepalives every 100 ms: {}",
        log.keepalives
    );
    assert_eq!(log.deletes, vec!["/v1/sessions/s1".to_string()]);
}

#[test]
fn session_port_through_a_relay() {
    let dir = tmpdir();
    let len = 300_000;
    let p = params(len);
    let bytes = data(len as usize, 4);
    let server = fake_server(p.clone(), bytes.clone(), 0, None);
    let client = client_socket();
    let mut rargs = RelayArgs::new("127.0.0.1:0".parse().unwrap(), client.local_addr().unwrap());
    rargs.impair.loss = 0.03;
    rargs.impair.seed = 2;
    rargs.idle_exit_s = Some(2.0);
    rargs.max_seconds = 20.0;
    let relay = Relay::bind(&rargs).unwrap();
    let relay_port = relay.local_addr().unwrap().port();
    let stop = AtomicBool::new(false);
    let (stats, rstats) = std::thread::scope(|s| {
        let r = s.spawn(|| relay.run(&stop).unwrap());
        let mut args = fast_args(&dir.path().join("viarelay.out"));
        args.server = format!("http://{}", server.addr);
        args.session_port = Some(relay_port);
        args.start_codeword = 1;
        let stats = play_on(&args, client).unwrap();
        stop.store(true, Ordering::Relaxed);
        (stats, r.join().unwrap())
    });
    let log = server.log.lock().unwrap();
    assert_eq!(
        log.posts[0]["port"],
        u64::from(relay_port),
        "session names the relay"
    );
    assert_eq!(log.posts[0]["start_codeword"], 1);
    assert!(rstats.packets_dropped > 0);
    assert!(stats.is_clean(), "{}", stats.summary());
    let from = p.partition().unwrap().block_offset(1) as usize;
    assert_eq!(stats.bytes_expected, len - from as u64);
    assert_eq!(
        std::fs::read(dir.path().join("viarelay.out")).unwrap(),
        &bytes[from..]
    );
}

#[test]
fn admission_refusal_is_a_clear_error() {
    let p = params(1000);
    let refusal = serde_json::json!({
        "error": "admission refused: bitrate budget exhausted",
        "limit": "max_bitrate_bps", "value": 100000000
    });
    let server = fake_server(p, vec![0; 1000], 1000, Some(refusal));
    let mut args = PlayConfig::new("clip.ts");
    args.server = format!("http://{}", server.addr);
    let err = format!("{:#}", play(&args).unwrap_err());
    assert!(err.contains("503"), "{err}");
    assert!(err.contains("bitrate budget exhausted"), "{err}");
    assert!(err.contains("max_bitrate_bps = 100000000"), "{err}");
    // Bad local arguments fail before any request.
    let mut bad = args.clone();
    bad.impair.loss = 2.0;
    assert!(play(&bad).is_err());
    assert_eq!(server.log.lock().unwrap().posts.len(), 1);
}

/// Sets the socket-wide GSO segment size (`UDP_SEGMENT`): a larger send is cut by the kernel.
fn set_udp_segment(socket: &UdpSocket, size: usize) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let size = libc::c_int::try_from(size).unwrap();
    // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from a valid c_int.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            17,  // SOL_UDP
            103, // UDP_SEGMENT
            (&raw const size).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Like the server's gso engine: the FDT, then each codeword in GSO runs of equal-size
/// packets (one `send_to` per run). Returns the packets sent.
fn spawn_gso_sender(p: SessionParams, bytes: Vec<u8>, to: SocketAddr) -> JoinHandle<u64> {
    std::thread::spawn(move || {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let cws = object_packets(&bytes, &p).unwrap();
        let fdt_packets = build_fdt_packets(&fdt(&p), p.tsi, p.symbol_len as usize).unwrap();
        let mut sent = 0u64;
        for f in &fdt_packets {
            set_udp_segment(&sock, f.len()).unwrap();
            sock.send_to(f, to).unwrap();
            sent += 1;
        }
        for cw in &cws {
            for run in cw.chunk_by(|a, b| a.len() == b.len()) {
                for part in run.chunks(32) {
                    set_udp_segment(&sock, part[0].len()).unwrap();
                    sock.send_to(&part.concat(), to).unwrap();
                    sent += part.len() as u64;
                }
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        sent
    })
}

#[test]
fn gso_runs_through_a_gro_relay_to_a_gro_client_give_identical_output() {
    let dir = tmpdir();
    let len = 400_000;
    let p = params(len);
    let bytes = data(len as usize, 12);
    let client = client_socket();
    let mut rargs = RelayArgs::new("127.0.0.1:0".parse().unwrap(), client.local_addr().unwrap());
    rargs.idle_exit_s = Some(1.0);
    rargs.max_seconds = 20.0;
    let relay = Relay::bind(&rargs).unwrap();
    let relay_addr = relay.local_addr().unwrap();
    let stop = AtomicBool::new(false);
    let relay_thread = std::thread::spawn(move || relay.run(&stop).unwrap());
    let sender = spawn_gso_sender(p.clone(), bytes.clone(), relay_addr);
    let out = dir.path().join("gso.out");
    let stats = play_session(&fast_args(&out), &client, &setup(&p, 8_000_000)).unwrap();
    let sent = sender.join().unwrap();
    let rstats = relay_thread.join().unwrap();

    assert_eq!(std::fs::read(&out).unwrap(), bytes, "{}", stats.summary());
    assert!(stats.is_clean(), "{}", stats.summary());
    assert_eq!(stats.packets_corrupt, 0, "{}", stats.summary());
    assert_eq!(stats.fdt_stream, FdtCheck::Verified);
    assert_eq!(
        rstats.packets_in, sent,
        "the relay takes each packet of each run"
    );
    assert_eq!(
        rstats.packets_forwarded, sent,
        "and forwards each as its own datagram"
    );
    assert_eq!(rstats.packets_truncated, 0);
}
