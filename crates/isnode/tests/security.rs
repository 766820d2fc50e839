//! Issue 11, tried as a hostile user would, against the real binaries on loopback:
//!
//! 1. Forged packets (whole forged codewords sent early, and a forged codeword far ahead,
//!    CRC-valid, from the server's IP): with packet digests they cost no byte and change
//!    no byte; without (`--verify-digests off`) the same attack damages the output.
//! 2. A session request for a port that never echoes the token gets no stream: a few
//!    token datagrams, then the session ends. The amplification (bytes sent to the
//!    address per request byte) before (`--validate-destination off`) and after.
//!    Ports below 1024 are refused.
//! 3. Another address, or the creator without the secret, cannot delete or steer a
//!    session (403), and the stream goes on.

mod serve_support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use isnode_wire::DataPacketId;
use serde_json::{json, Value};
use serve_support::*;

/// Sends forged, CRC-valid packets of `info`'s object to `to` from 127.0.0.1 (the server's
/// IP: the client's source filter takes them, as it would take spoofed ones) until `stop`:
/// the source symbols of codewords 0 and 1 with wrong bytes, and k symbols of the last
/// codeword (far ahead of the stream: without authentication the receiver follows it and
/// gives up everything before).
fn forge(info: &Value, to: SocketAddr, stop: &AtomicBool) -> u64 {
    let tsi = info["tsi"].as_u64().unwrap() as u32;
    let toi = info["toi"].as_u64().unwrap() as u32;
    let e = info["symbol_size"].as_u64().unwrap() as usize;
    let k = info["source_symbols"].as_u64().unwrap() as u8;
    let last = info["codewords"].as_u64().unwrap() as u32 - 1;
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut packet = vec![0u8; isnode_wire::DATA_HEADER_LEN + e];
    let symbol = vec![0xEEu8; e];
    let mut sent = 0u64;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
        for sbn in [0, 1, last] {
            for esi in 0..k {
                let id = DataPacketId { tsi, toi, sbn, esi };
                isnode_wire::build_data_packet(&mut packet, &id, &symbol).unwrap();
                // The client's port may not be open yet: errors are expected.
                if sock.send_to(&packet, to).is_ok() {
                    sent += 1;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    sent
}

/// Plays `name` to `port` while forged packets fly; the run's result.
fn play_under_attack(server: &Server, vol: &Vol, tag: &str, extra: &[&str]) -> (Played, u64) {
    let info = server.req("GET", "/v1/objects/clip.ts", None).json();
    let port = free_port();
    let stop = Arc::new(AtomicBool::new(false));
    let forger = {
        let stop = stop.clone();
        std::thread::spawn(move || forge(&info, SocketAddr::from(([127, 0, 0, 1], port)), &stop))
    };
    let port_s = port.to_string();
    let mut args = vec!["--port", &port_s, "--timeout-s", "5"];
    args.extend_from_slice(extra);
    let played = play_run(
        server,
        vol,
        "clip.ts",
        tag,
        &args,
        Instant::now() + Duration::from_secs(60),
    );
    stop.store(true, Ordering::Relaxed);
    let forged = forger.join().unwrap();
    (played, forged)
}

#[test]
fn forged_packets_cost_no_byte_and_change_no_byte() {
    let vol = Vol::create(&[]);
    let bytes = vol.add_ts("clip.ts", 8_000_000, 8.0, 71);
    let server = Server::start(&vol, &[]);
    let obj = server.req("GET", "/v1/objects/clip.ts", None).json();
    assert_eq!(obj["packet_digests"], "sha256-128", "{obj}");
    assert!(
        obj["codewords"].as_u64().unwrap() > 20,
        "the last codeword must lie beyond the window: {obj}"
    );

    let (p, forged) = play_under_attack(&server, &vol, "auth", &[]);
    let s = &p.stats;
    println!(
        "with digests: {forged} forged packets sent; the client dropped {} as forged, {} unverified; \
         {} codewords unrecoverable; status {}",
        s["packets_forged"], s["packets_unverified"], s["codewords_unrecoverable"], p.status
    );
    assert!(p.status.success(), "{}", p.log);
    assert_eq!(s["authenticated"], true, "{s}");
    assert!(
        s["packets_forged"].as_u64().unwrap() > 0,
        "no forged packet reached the client: {s}"
    );
    assert_eq!(s["codewords_unrecoverable"], 0, "{s}");
    assert!(p.bytes() == bytes, "the output differs from the title");

    // The same attack on a client that trusts the CRC: the output is damaged.
    let (p, _) = play_under_attack(&server, &vol, "crc-only", &["--verify-digests", "off"]);
    let out = p.bytes();
    println!(
        "CRC only: {} of {} bytes written, {} codewords unrecoverable",
        out.len(),
        bytes.len(),
        p.stats["codewords_unrecoverable"]
    );
    assert_eq!(p.stats["authenticated"], false);
    assert!(
        out != bytes,
        "the attack did nothing to an unauthenticated client"
    );
}

/// One raw `POST /v1/sessions` from 127.0.0.1 for `port`; (status, body, request bytes).
fn raw_post(server: &Server, port: u16) -> (u16, Value, usize) {
    let body = json!({"object": "clip.ts", "port": port}).to_string();
    let req = format!(
        "POST /v1/sessions HTTP/1.1\r\nHost: s\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut s = TcpStream::connect(server.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(req.as_bytes()).unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let status = resp.split(' ').nth(1).unwrap().parse().unwrap();
    let json = resp
        .split_once("\r\n\r\n")
        .and_then(|(_, b)| serde_json::from_str(b).ok())
        .unwrap_or(Value::Null);
    (status, json, req.len())
}

/// Bytes and datagrams arriving at `sock` for `dur`, and whether each was a token datagram.
fn arrivals(sock: &UdpSocket, dur: Duration) -> (u64, u64, bool) {
    sock.set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let end = Instant::now() + dur;
    let (mut bytes, mut n, mut all_tokens) = (0u64, 0u64, true);
    let mut buf = vec![0u8; 65536];
    while Instant::now() < end {
        if let Ok(len) = sock.recv(&mut buf) {
            bytes += len as u64;
            n += 1;
            all_tokens &= isnode_proto::auth::parse_token_datagram(&buf[..len]).is_some();
        }
    }
    (bytes, n, all_tokens)
}

#[test]
fn a_port_that_never_echoes_gets_no_stream() {
    let vol = Vol::create(&[]);
    vol.add_ts("clip.ts", 2_000_000, 8.0, 72);
    let window = Duration::from_secs(5);

    // After: the server waits for the echo (3 s by default), then ends the session.
    let server = Server::start(&vol, &[]);
    let sock = udp(LO1, 0).unwrap();
    let (status, info, req_bytes) = raw_post(&server, sock.local_addr().unwrap().port());
    assert_eq!(status, 201, "{info}");
    let (bytes, datagrams, all_tokens) = arrivals(&sock, window);
    let after = bytes as f64 / req_bytes as f64;
    let id = info["id"].as_str().unwrap();
    let g = server.req("GET", &format!("/v1/sessions/{id}"), None);
    let m = server.metrics();
    println!(
        "validated: {datagrams} datagrams, {bytes} bytes for a {req_bytes}-byte request: \
         amplification {after:.2}"
    );
    assert!(all_tokens, "something other than token datagrams arrived");
    assert!((1..=6).contains(&datagrams), "{datagrams} token datagrams");
    assert!(after < 1.0, "amplification {after:.2}");
    assert!(g.status == 404 || g.json()["state"] == "done", "{}", g.body);
    assert_eq!(m.get("isnode_sessions_unvalidated_total"), 1.0);
    assert_eq!(m.get("isnode_tokens_sent_total"), datagrams as f64);
    // Well-known ports are refused outright.
    let (status, body, _) = raw_post(&server, 80);
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().unwrap().contains("1024"), "{body}");
    drop(server);

    // Before: the same request streams until the session times out (5 s without keepalive).
    let server = Server::start(&vol, &["--validate-destination", "off"]);
    let sock = udp(LO1, 0).unwrap();
    let (status, info, req_bytes) = raw_post(&server, sock.local_addr().unwrap().port());
    assert_eq!(status, 201, "{info}");
    let (bytes, datagrams, _) = arrivals(&sock, window + Duration::from_secs(1));
    let before = bytes as f64 / req_bytes as f64;
    println!(
        "unvalidated: {datagrams} datagrams, {bytes} bytes for a {req_bytes}-byte request: \
         amplification {before:.0}"
    );
    assert!(
        before > 100.0,
        "amplification without validation only {before:.1}"
    );
}

#[test]
fn another_address_cannot_delete_or_steer_a_session() {
    let vol = Vol::create(&[]);
    vol.add_ts("clip.ts", 2_000_000, 20.0, 73);
    let server = Server::start(&vol, &[]);
    let sock = udp(LO1, 0).unwrap();
    let info = server.open_session("clip.ts", &sock);
    let id = info["id"].as_str().unwrap().to_string();
    let secret = info["secret"].as_str().unwrap().to_string();
    let wrong = "0".repeat(32);
    let bearer = format!("Bearer {secret}");
    let path = |suffix: &str| format!("/v1/sessions/{id}{suffix}");
    let pause = json!({"action": "pause"}).to_string();
    let token = json!({"token": "0".repeat(32)}).to_string();
    const SECRET: &str = "Isnode-Session-Secret";
    // (from, header, method, path, body): every one must be refused with 403.
    type Attempt<'a> = (
        std::net::IpAddr,
        (&'a str, &'a str),
        &'a str,
        String,
        Option<&'a str>,
    );
    let attempts: Vec<Attempt> = vec![
        (LO2, (SECRET, &secret), "DELETE", path(""), None),
        (LO2, (SECRET, &secret), "POST", path("/keepalive"), None),
        (
            LO2,
            (SECRET, &secret),
            "POST",
            path("/control"),
            Some(&pause),
        ),
        (
            LO2,
            (SECRET, &secret),
            "POST",
            path("/validate"),
            Some(&token),
        ),
        (LO1, ("", ""), "DELETE", path(""), None),
        (LO1, (SECRET, &wrong), "DELETE", path(""), None),
        (
            LO1,
            (SECRET, &wrong),
            "POST",
            path("/control"),
            Some(&pause),
        ),
        (LO1, ("", ""), "POST", path("/keepalive"), None),
        // The secret no longer rides `Authorization` (role tokens only).
        (LO1, ("Authorization", &bearer), "DELETE", path(""), None),
        (
            LO1,
            ("Authorization", &bearer),
            "POST",
            path("/keepalive"),
            None,
        ),
    ];
    for (from, (name, value), method, p, body) in &attempts {
        let auth = (name, value);
        let headers: Vec<(&str, &str)> = if name.is_empty() {
            vec![]
        } else {
            vec![(*name, *value)]
        };
        let r = http(server.addr, Some(*from), method, p, *body, &headers);
        assert_eq!(
            r.status, 403,
            "{method} {p} from {from} ({auth:?}): {}",
            r.body
        );
        assert!(
            r.json()["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{}",
            r.body
        );
    }
    // The stream goes on, not paused.
    drain(&sock);
    assert!(
        count_for(&sock, Duration::from_millis(500)) > 0,
        "the stream stopped"
    );
    let status = server.req("GET", &path(""), None).json();
    assert_eq!(status["state"], "streaming", "{status}");
    assert!(status.get("paused").is_none(), "{status}");
    let m = server.metrics();
    assert_eq!(m.get("isnode_forbidden_total"), attempts.len() as f64);
    // The creator, with the secret, can.
    assert_eq!(server.session_req("DELETE", &id, "", None).status, 204);
}
