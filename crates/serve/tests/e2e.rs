//! In-process end-to-end tests on loopback: a real server on a temporary volume, real UDP
//! receivers, a raw HTTP/1.1 client.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use isnode_serve::{start, Degraded, EngineKind, ServeConfig, ServerHandle, ValidateDestination};
use isnode_store::{ingest, IngestOptions, Layout, Volume, VolumeParams};
use serde_json::Value;

/// 6 members, k <= 20, m = 4, 1024-byte symbols, 7 packets per 8 KiB block.
fn params() -> VolumeParams {
    VolumeParams {
        symbol_len: 1024,
        source_symbols: 20,
        repair_symbols: 4,
        members: 6,
        block_len: 8192,
    }
}

fn data(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// A volume with objects `(name, bytes, bitrate)`.
fn volume(objects: &[(&str, usize, u64)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut vol = Volume::create(dir.path(), params(), None).unwrap();
    for (i, (name, len, bitrate)) in objects.iter().enumerate() {
        let bytes = data(*len, i as u32 + 1);
        let opts = IngestOptions {
            name: name.to_string(),
            bitrate_bps: *bitrate,
            content_type: "video/mp2t".into(),
            replace: false,
        };
        ingest(&mut vol, &opts, &mut &bytes[..], *len as u64, &mut |_| {}).unwrap();
    }
    dir
}

fn args(engine: EngineKind) -> ServeConfig {
    ServeConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        engine,
        cache_size_bytes: 2 << 20,
        threads: Some(2),
        // These tests look at what the data plane sends; return routability and the port
        // floor are tested end to end with the real client (crates/isnode/tests/security.rs).
        validate_destination: ValidateDestination::Off,
        min_dest_port: 1,
        ..ServeConfig::default()
    }
}

/// One HTTP/1.1 request; returns (status, body).
fn http(addr: SocketAddr, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    http_as(addr, method, path, body, "")
}

/// [`http`] with `Isnode-Session-Secret: <secret>` (a session's secret; none if empty).
fn http_as(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
    secret: &str,
) -> (u16, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let body = body.unwrap_or("");
    let auth = if secret.is_empty() {
        String::new()
    } else {
        format!("Isnode-Session-Secret: {secret}\r\n")
    };
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).unwrap();
    let text = String::from_utf8_lossy(&resp).into_owned();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(rest)
    } else {
        rest.to_string()
    };
    (status, body)
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    for _ in 0..10_000 {
        let Some((len, rest)) = s.split_once("\r\n") else {
            break;
        };
        let n = usize::from_str_radix(len.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = &rest[n + 2..];
    }
    out
}

fn json(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

fn receiver() -> UdpSocket {
    let r = UdpSocket::bind("127.0.0.1:0").unwrap();
    let size: libc::c_int = 16 << 20;
    // SAFETY: setsockopt on a valid socket with an int value.
    unsafe {
        libc::setsockopt(
            r.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&raw const size).cast(),
            4,
        );
        libc::setsockopt(
            r.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&raw const size).cast(),
            4,
        );
    }
    r.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    r
}

fn create(server: &ServerHandle, object: &str, port: u16) -> (u16, Value) {
    let (st, body) = http(
        server.local_addr(),
        "POST",
        "/v1/sessions",
        Some(&format!(r#"{{"object": "{object}", "port": {port}}}"#)),
    );
    (st, json(&body))
}

/// Receives datagrams until `done(packets)`, `limit` passes, or (once something arrived)
/// the stream has been silent for 700 ms; calls `tick` on each packet.
fn receive(
    r: &UdpSocket,
    limit: Duration,
    mut tick: impl FnMut(usize),
    done: impl Fn(&[Vec<u8>]) -> bool,
) -> Vec<Vec<u8>> {
    let deadline = Instant::now() + limit;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 65536];
    let mut last = Instant::now();
    while Instant::now() < deadline && !done(&out) {
        if let Ok(n) = r.recv(&mut buf) {
            out.push(buf[..n].to_vec());
            last = Instant::now();
            tick(out.len());
        } else if !out.is_empty() && last.elapsed() > Duration::from_millis(700) {
            break;
        }
    }
    out
}

/// Data packets by (sbn, esi), verifying each one's CRC and identifiers; FDT packets counted.
fn classify(packets: &[Vec<u8>], tsi: u32, toi: u32) -> (BTreeMap<(u32, u8), Vec<u8>>, usize) {
    let mut data = BTreeMap::new();
    let mut fdt = 0;
    for p in packets {
        let a = isnode_wire::parse_packet(p).expect("every packet parses");
        assert_eq!(
            a.crc,
            isnode_wire::CrcStatus::Valid,
            "every packet has a valid CRC32C"
        );
        assert_eq!(a.lct.tsi, u64::from(tsi));
        if a.lct.toi == 0 {
            fdt += 1;
            continue;
        }
        let d = isnode_wire::parse_data_packet(p).unwrap();
        assert_eq!(d.id.toi, toi);
        assert!(
            data.insert((d.id.sbn, d.id.esi), p.clone()).is_none(),
            "duplicate packet {:?}",
            d.id
        );
    }
    (data, fdt)
}

/// The stored packets of an object, read straight from the segment files.
fn stored(dir: &Path, name: &str) -> (BTreeMap<(u32, u8), Vec<u8>>, Layout) {
    let vol = Volume::open(dir).unwrap();
    let rec = vol.object(name).unwrap();
    let layout = Layout::new(*vol.params(), rec.size_bytes).unwrap();
    let p = vol.params().packet_len() as usize;
    let mut out = BTreeMap::new();
    for sbn in 0..layout.codewords() {
        for m in 0..vol.params().members {
            let run = layout.member_run(sbn, m);
            let f = std::fs::File::open(vol.segment_path(m, rec.toi)).unwrap();
            for esi in run.esis.clone() {
                let (block, off) =
                    layout.packet_position(run.first_packet + u64::from(esi - run.esis.start));
                let mut buf = vec![0u8; p];
                f.read_exact_at(&mut buf, block * 8192 + off as u64)
                    .unwrap();
                out.insert((sbn, esi as u8), buf);
            }
        }
    }
    (out, layout)
}

fn metric(server: &ServerHandle, line: &str) -> u64 {
    let (st, body) = http(server.local_addr(), "GET", "/metrics", None);
    assert_eq!(st, 200);
    body.lines()
        .find_map(|l| {
            l.strip_prefix(line)
                .map(|v| v.trim().parse::<u64>().unwrap())
        })
        .unwrap_or_else(|| panic!("no {line} in\n{body}"))
}

#[test]
fn objects_api_and_bad_requests() {
    let dir = volume(&[("a.ts", 30_000, 1_000_000), ("b.ts", 5_000, 2_000_000)]);
    let server = start(dir.path(), &args(EngineKind::Gso)).unwrap();
    let addr = server.local_addr();
    let (st, body) = http(addr, "GET", "/v1/objects", None);
    assert_eq!(st, 200);
    let list = json(&body);
    assert_eq!(list.as_array().unwrap().len(), 2);
    let (st, body) = http(addr, "GET", "/v1/objects/a.ts", None);
    assert_eq!(st, 200);
    let o = json(&body);
    assert_eq!(o["size_bytes"], 30_000);
    assert_eq!(o["bitrate_bps"], 1_000_000);
    assert_eq!(o["symbol_size"], 1024);
    assert_eq!(o["source_symbols"], 20);
    assert_eq!(o["repair_symbols"], 4);
    assert_eq!(o["codewords"], 2);
    assert!(o["tsi"].as_u64().unwrap() > 0 && o["toi"].as_u64().unwrap() > 0);
    let (st, body) = http(addr, "GET", "/v1/objects/nope", None);
    assert_eq!(st, 404);
    assert!(json(&body)["error"].is_string());
    for bad in [
        r#"{"object": "a.ts", "port": 0}"#,
        r#"{"object": "a.ts"}"#,
        r#"{"object": "a.ts", "port": 70000}"#,
        r#"not json"#,
        r#"{"object": "a.ts", "port": 9, "start_codeword": 2}"#,
    ] {
        let (st, body) = http(addr, "POST", "/v1/sessions", Some(bad));
        assert_eq!(st, 400, "{bad}: {body}");
        assert!(json(&body)["error"].is_string());
    }
    let (st, _) = http(
        addr,
        "POST",
        "/v1/sessions",
        Some(r#"{"object": "zz", "port": 9}"#),
    );
    assert_eq!(st, 404);
    let (st, _) = http(addr, "POST", "/v1/sessions/0123/keepalive", None);
    assert_eq!(st, 404);
    let (st, _) = http(addr, "DELETE", "/v1/sessions/0123", None);
    assert_eq!(st, 404);
    let (st, body) = http(addr, "PUT", "/v1/objects", None);
    assert_eq!(st, 405);
    assert!(json(&body)["error"].is_string());
    let (st, body) = http(addr, "GET", "/nothing", None);
    assert_eq!(st, 404);
    assert!(json(&body)["error"].is_string());
    server.shutdown();
}

/// Streams `name` with `engine` and returns what arrived plus the session answer.
fn stream_all(
    dir: &Path,
    engine: EngineKind,
    name: &str,
) -> (Vec<Vec<u8>>, Value, isnode_serve::MetricsSnapshot) {
    let server = start(dir, &args(engine)).unwrap();
    let (all, s) = stream_on(&server, dir, name);
    let m = server.metrics();
    server.shutdown();
    (all, s, m)
}

/// Streams `name` from a running server; returns what arrived plus the session answer.
fn stream_on(server: &ServerHandle, dir: &Path, name: &str) -> (Vec<Vec<u8>>, Value) {
    let (expected, _) = stored(dir, name);
    let r = receiver();
    let (st, s) = create(server, name, r.local_addr().unwrap().port());
    assert_eq!(st, 201, "{s}");
    let want = expected.len();
    let packets = receive(&r, Duration::from_secs(15), |_| {}, |p| p.len() > want);
    // Late or duplicate packets would show up here.
    let extra = receive(&r, Duration::from_millis(200), |_| {}, |_| false);
    let mut all = packets;
    all.extend(extra);
    (all, s)
}

#[test]
fn every_engine_delivers_the_stored_packets() {
    let dir = volume(&[("movie.ts", 120_000, 8_000_000)]);
    let (expected, layout) = stored(dir.path(), "movie.ts");
    assert_eq!(layout.codewords(), 6);
    let mut results = HashMap::new();
    for engine in EngineKind::ALL {
        let (packets, s, m) = stream_all(dir.path(), engine, "movie.ts");
        let tsi = s["object"]["tsi"].as_u64().unwrap() as u32;
        let toi = s["object"]["toi"].as_u64().unwrap() as u32;
        let (got, fdt) = classify(&packets, tsi, toi);
        assert!(fdt >= 1, "{engine:?}: the FDT is sent");
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            expected.keys().collect::<Vec<_>>(),
            "{engine:?}: every packet of every codeword, once"
        );
        assert!(
            got == expected,
            "{engine:?}: packets byte-identical to the stored ones"
        );
        let sent = m.packets_sent[engine.index()];
        assert!(sent >= expected.len() as u64, "{engine:?} counted {sent}");
        if engine == EngineKind::UringZc {
            assert!(m.zc_sends > 0, "uring-zc notifications seen");
            // On loopback the kernel always copies: the engine must say so.
            assert_eq!(m.zc_copied, m.zc_sends);
        }
        results.insert(engine, got);
    }
    // The FDT XML names the object with its FEC parameters.
    let (_, s, _) = stream_all(dir.path(), EngineKind::Gso, "movie.ts");
    let xml = s["fdt_xml"].as_str().unwrap();
    let fdt = isnode_wire::fdt::FdtInstance::from_xml(xml.as_bytes()).unwrap();
    assert_eq!(fdt.files[0].content_location, "movie.ts");
    assert_eq!(fdt.files[0].transfer_length, 120_000);
    assert_eq!(s["fec"]["encoding_id"], 5);
    assert_eq!(s["fec"]["max_encoding_symbols"], 24);
}

#[test]
fn per_client_limit_delete_and_done() {
    let dir = volume(&[("slow.ts", 60_000, 400_000)]);
    let mut a = args(EngineKind::Gso);
    a.max_sessions_per_client = 1;
    let server = start(dir.path(), &a).unwrap();
    let addr = server.local_addr();
    let r = receiver();
    // Fields naming another destination are ignored: packets go to the peer.
    let (st, body) = http(
        addr,
        "POST",
        "/v1/sessions",
        Some(&format!(
            r#"{{"object": "slow.ts", "port": {}, "address": "10.9.9.9", "destination": "10.9.9.9:9"}}"#,
            r.local_addr().unwrap().port()
        )),
    );
    assert_eq!(st, 201, "{body}");
    let s = json(&body);
    assert_eq!(
        s["destination"].as_str().unwrap(),
        r.local_addr().unwrap().to_string()
    );
    assert!(s["send_rate_bps"].as_u64().unwrap() > 400_000);
    let id = s["id"].as_str().unwrap().to_string();
    let secret = s["secret"].as_str().unwrap().to_string();
    let (st, body) = create(&server, "slow.ts", 9);
    assert_eq!(st, 503, "{body}");
    assert_eq!(body["limit"], "max_sessions_per_client");
    assert_eq!(body["value"], 1);
    assert!(body["error"]
        .as_str()
        .unwrap()
        .contains("admission refused"));
    let (st, body) = http(addr, "GET", &format!("/v1/sessions/{id}"), None);
    assert_eq!(st, 200);
    assert_eq!(json(&body)["state"], "streaming");
    assert_eq!(
        http_as(
            addr,
            "POST",
            &format!("/v1/sessions/{id}/keepalive"),
            None,
            &secret
        )
        .0,
        204
    );
    // Some packets arrive, then DELETE stops the stream.
    let got = receive(&r, Duration::from_secs(5), |_| {}, |p| p.len() >= 5);
    assert!(got.len() >= 5);
    assert_eq!(
        http_as(addr, "DELETE", &format!("/v1/sessions/{id}"), None, &secret).0,
        204
    );
    assert_eq!(
        http(addr, "GET", &format!("/v1/sessions/{id}"), None).0,
        404
    );
    std::thread::sleep(Duration::from_millis(100));
    while r.recv(&mut [0u8; 2048]).is_ok() {}
    let after = receive(&r, Duration::from_millis(400), |_| {}, |_| false);
    assert!(after.is_empty(), "packets after DELETE: {}", after.len());
    assert_eq!(
        metric(
            &server,
            "isnode_sessions_refused_total{limit=\"max_sessions_per_client\"}"
        ),
        1
    );
    // The slot is free again; a finished session is reported done.
    let dir2 = volume(&[("tiny.ts", 3_000, 8_000_000)]);
    drop(server);
    let server = start(dir2.path(), &a).unwrap();
    let (st, s) = create(&server, "tiny.ts", r.local_addr().unwrap().port());
    assert_eq!(st, 201);
    let id = s["id"].as_str().unwrap();
    let secret = s["secret"].as_str().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (st, body) = http(
            server.local_addr(),
            "GET",
            &format!("/v1/sessions/{id}"),
            None,
        );
        assert_eq!(st, 200);
        let v = json(&body);
        if v["state"] == "done" {
            assert_eq!(v["next_codeword"], 1);
            assert!(v["packets_sent"].as_u64().unwrap() >= 7);
            break;
        }
        assert!(Instant::now() < deadline, "session never done");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        http_as(
            server.local_addr(),
            "POST",
            &format!("/v1/sessions/{id}/keepalive"),
            None,
            secret
        )
        .0,
        404
    );
}

#[test]
fn session_without_keepalive_ends() {
    let dir = volume(&[("long.ts", 200_000, 200_000)]);
    let mut a = args(EngineKind::Gso);
    a.session_timeout_ms = 400;
    let server = start(dir.path(), &a).unwrap();
    let addr = server.local_addr();
    let r1 = receiver();
    let r2 = receiver();
    let (st, s1) = create(&server, "long.ts", r1.local_addr().unwrap().port());
    assert_eq!(st, 201);
    let (st, s2) = create(&server, "long.ts", r2.local_addr().unwrap().port());
    assert_eq!(st, 201);
    let id1 = s1["id"].as_str().unwrap().to_string();
    let id2 = s2["id"].as_str().unwrap().to_string();
    let secret2 = s2["secret"].as_str().unwrap();
    // Keep session 2 alive for 1.2 s; session 1 gets no keepalive.
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(1200) {
        assert_eq!(
            http_as(
                addr,
                "POST",
                &format!("/v1/sessions/{id2}/keepalive"),
                None,
                secret2
            )
            .0,
            204
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        http(addr, "GET", &format!("/v1/sessions/{id1}"), None).0,
        404
    );
    assert_eq!(
        http(addr, "GET", &format!("/v1/sessions/{id2}"), None).0,
        200
    );
    assert_eq!(server.metrics().sessions_expired, 1);
    assert_eq!(server.metrics().sessions_active, 1);
    // Session 1 stopped: nothing more arrives; session 2 still streams.
    while r1.recv(&mut [0u8; 2048]).is_ok() {}
    assert!(receive(&r1, Duration::from_millis(300), |_| {}, |_| false).is_empty());
    assert!(!receive(&r2, Duration::from_millis(300), |_| {}, |p| !p.is_empty()).is_empty());
}

/// Keepalive datagrams keep a session alive only from its destination, with the MAC of its
/// secret and a counter not taken before: an observer who replays the client's datagrams,
/// or forges some without the secret, cannot keep (or take over) the session.
#[test]
fn keepalive_datagrams_keep_a_session_alive_only_from_its_destination() {
    use isnode_proto::keepalive::keepalive_datagram;
    let dir = volume(&[("long.ts", 200_000, 200_000)]);
    let mut a = args(EngineKind::Sendfile);
    a.session_timeout_ms = 400;
    let server = start(dir.path(), &a).unwrap();
    let (r1, r2, r3) = (receiver(), receiver(), receiver());
    let (_, s1) = create(&server, "long.ts", r1.local_addr().unwrap().port());
    let (_, s2) = create(&server, "long.ts", r2.local_addr().unwrap().port());
    let (_, s3) = create(&server, "long.ts", r3.local_addr().unwrap().port());
    assert_eq!(s1["keepalive_version"], 4);
    let port = s1["keepalive_port"].as_u64().expect("a keepalive port") as u16;
    let to = SocketAddr::from(([127, 0, 0, 1], port));
    let id = |s: &Value| s["id"].as_str().unwrap().to_string();
    let key = |s: &Value| isnode_proto::auth::parse_key_hex(s["secret"].as_str().unwrap()).unwrap();
    let (id1, id2, id3) = (id(&s1), id(&s2), id(&s3));
    // Session 1's authentic keepalives come from another IP than its destination
    // (127.0.0.1), and forged ones (another key) from its destination. Session 3's first
    // datagram is taken, then replayed from its destination. Session 2's come from the
    // socket it streams to, each with the next counter, as the client sends them. Plus one
    // malformed datagram.
    let elsewhere = UdpSocket::bind("127.0.0.2:0").unwrap();
    let seen = keepalive_datagram(&id3, &key(&s3), 1, None).unwrap();
    r3.send_to(&seen, to).unwrap();
    r2.send_to(b"ISKA\x01 not a keepalive", to).unwrap();
    let t0 = Instant::now();
    let mut sent = 0u64;
    for counter in 1.. {
        if t0.elapsed() > Duration::from_millis(1200) {
            break;
        }
        let d1 = keepalive_datagram(&id1, &key(&s1), counter, None).unwrap();
        let forged = keepalive_datagram(&id1, &[0; 16], counter, None).unwrap();
        let d2 = keepalive_datagram(&id2, &key(&s2), counter, None).unwrap();
        elsewhere.send_to(&d1, to).unwrap();
        r1.send_to(&forged, to).unwrap();
        r3.send_to(&seen, to).unwrap();
        r2.send_to(&d2, to).unwrap();
        sent += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    let addr = server.local_addr();
    let status = |id: &str| http(addr, "GET", &format!("/v1/sessions/{id}"), None).0;
    assert_eq!(
        status(&id1),
        404,
        "kept alive by another IP or forged datagrams"
    );
    assert_eq!(status(&id3), 404, "kept alive by replayed datagrams");
    assert_eq!(status(&id2), 200, "the real client's session ended");
    let m = server.metrics();
    assert_eq!(m.sessions_expired, 2);
    // Session 2's, and session 3's first (taken once).
    assert!(
        m.keepalives_udp >= 8 && m.keepalives_udp <= sent + 1,
        "{m:?}"
    );
    // Sessions 1's and 3's (until they expired, then as unknown sessions) and the
    // malformed one.
    assert!(m.keepalives_refused >= 2 * sent, "{m:?}");
}

#[test]
fn admission_refuses_bitrate_and_cache() {
    let dir = volume(&[("a.ts", 100_000, 1_000_000), ("b.ts", 100_000, 1_000_000)]);
    let mut a = args(EngineKind::Gso);
    a.max_bitrate_bps = Some(2_000_000);
    let server = start(dir.path(), &a).unwrap();
    let (st, s) = create(&server, "a.ts", 9);
    assert_eq!(st, 201, "{s}");
    let (st, body) = create(&server, "b.ts", 9);
    assert_eq!(st, 503);
    assert_eq!(body["limit"], "max_bitrate_bps");
    assert_eq!(body["value"], 2_000_000);
    // The admitted session keeps streaming.
    let id = s["id"].as_str().unwrap();
    let (_, b) = http(
        server.local_addr(),
        "GET",
        &format!("/v1/sessions/{id}"),
        None,
    );
    assert_eq!(json(&b)["state"], "streaming");
    drop(server);

    // A pool of 16 blocks: each session at a distinct position needs about 6-12.
    let mut a = args(EngineKind::Gso);
    a.cache_size_bytes = 16 * 8192;
    let server = start(dir.path(), &a).unwrap();
    let mut refused = None;
    for i in 0..4 {
        let obj = if i % 2 == 0 { "a.ts" } else { "b.ts" };
        let (st, body) = create(&server, obj, 9);
        if st == 503 {
            refused = Some(body);
            break;
        }
        assert_eq!(st, 201);
    }
    let body = refused.expect("the pool must refuse at some point");
    assert_eq!(body["limit"], "cache_size_bytes");
    assert_eq!(body["value"], 16 * 8192);
    assert_eq!(server.metrics().sessions_refused, [0, 1, 0, 0, 0, 0, 0, 0]);
}

#[test]
fn viewers_of_one_title_share_one_copy() {
    let dir = volume(&[("pop.ts", 100_000, 8_000_000)]);
    let server = start(dir.path(), &args(EngineKind::Gso)).unwrap();
    let receivers: Vec<UdpSocket> = (0..4).map(|_| receiver()).collect();
    for r in &receivers {
        let (st, _) = create(&server, "pop.ts", r.local_addr().unwrap().port());
        assert_eq!(st, 201);
    }
    let (expected, layout) = stored(dir.path(), "pop.ts");
    for r in &receivers {
        let got = receive(
            r,
            Duration::from_secs(10),
            |_| {},
            |p| p.len() > expected.len(),
        );
        assert!(got.len() > expected.len());
    }
    let blocks: u64 = (0..params().members).map(|m| layout.member_blocks(m)).sum();
    let m = server.metrics();
    assert_eq!(
        m.cache_misses, blocks,
        "each block read once for all viewers"
    );
    assert_eq!(m.cache_read_bytes, blocks * 8192);
}

#[test]
fn a_member_lost_mid_stream_is_rebuilt() {
    for degraded in [Degraded::Rebuild, Degraded::SendAvailable] {
        let dir = volume(&[("big.ts", 600_000, 16_000_000)]);
        let (expected, layout) = stored(dir.path(), "big.ts");
        let mut a = args(EngineKind::Gso);
        a.degraded = degraded;
        let server = start(dir.path(), &a).unwrap();
        let r = receiver();
        let (st, s) = create(&server, "big.ts", r.local_addr().unwrap().port());
        assert_eq!(st, 201);
        let member_dir = dir.path().join("members/2");
        let mut removed = false;
        let packets = receive(
            &r,
            Duration::from_secs(15),
            |n| {
                if n == 30 && !removed {
                    // The server keeps its segment files open: truncate them (an open
                    // descriptor then reads EOF) before removing the directory.
                    for f in std::fs::read_dir(member_dir.join("objects")).unwrap() {
                        let f = f.unwrap().path();
                        std::fs::File::options()
                            .write(true)
                            .open(&f)
                            .and_then(|h| h.set_len(0))
                            .unwrap();
                    }
                    std::fs::remove_dir_all(&member_dir).unwrap();
                    removed = true;
                }
            },
            |p| p.len() > expected.len(),
        );
        let mut all = packets;
        all.extend(receive(&r, Duration::from_millis(300), |_| {}, |_| false));
        assert!(removed);
        let tsi = s["object"]["tsi"].as_u64().unwrap() as u32;
        let toi = s["object"]["toi"].as_u64().unwrap() as u32;
        let (got, _) = classify(&all, tsi, toi);
        let m = server.metrics();
        assert!(m.member_errors[2] > 0, "{degraded:?}: member error counted");
        assert_eq!(m.member_errors.iter().sum::<u64>(), m.member_errors[2]);
        for sbn in 0..layout.codewords() {
            let k = layout.source_symbols(sbn);
            let n = layout.encoding_symbols(sbn);
            let esis: BTreeSet<u8> = got
                .keys()
                .filter(|(c, _)| *c == sbn)
                .map(|(_, e)| *e)
                .collect();
            match degraded {
                // Every packet arrives, the lost member's ones rebuilt byte-identical.
                Degraded::Rebuild => assert_eq!(esis.len() as u32, n, "codeword {sbn}"),
                Degraded::SendAvailable => assert!(esis.len() as u32 >= k, "codeword {sbn}"),
            }
        }
        for (key, p) in &got {
            assert_eq!(
                Some(p),
                expected.get(key),
                "{key:?} differs from the stored packet"
            );
        }
        match degraded {
            Degraded::Rebuild => assert!(m.symbols_rebuilt > 0),
            Degraded::SendAvailable => assert!(m.packets_skipped > 0 && m.symbols_rebuilt == 0),
        }
        assert!(metric(&server, "isnode_member_errors_total{member=\"2\"}") > 0);
    }
}

/// Defect 9: the default limits are finite. With nothing configured, one client gets 16
/// concurrent sessions and the 17th is refused with the documented JSON error; another
/// client is still admitted.
#[test]
fn default_limits_refuse_a_seventeenth_session_per_client() {
    // 200 kB at 100 kbit/s: 16 s of playing time, so every session is still streaming.
    let dir = volume(&[("long.ts", 200_000, 100_000)]);
    let server = start(dir.path(), &args(EngineKind::Gso)).unwrap();
    let r = receiver();
    let port = r.local_addr().unwrap().port();
    for i in 0..16 {
        let (st, body) = create(&server, "long.ts", port);
        assert_eq!(st, 201, "session {i}: {body}");
    }
    let (st, body) = create(&server, "long.ts", port);
    assert_eq!(st, 503, "{body}");
    let err: isnode_proto::ErrorBody = serde_json::from_value(body.clone()).unwrap();
    assert_eq!(err.limit, Some(isnode_serve::Limit::MaxSessionsPerClient));
    assert_eq!(err.value, Some(16));
    assert!(err.error.starts_with("admission refused: "), "{body}");
    assert_eq!(server.metrics().sessions_refused, [0, 0, 1, 0, 0, 0, 0, 0]);
}

/// Defect 9: the default bitrate budget is 90 % of the default egress capacity
/// (1 Gbit/s): a session that would send faster is refused with the documented error.
#[test]
fn default_bitrate_budget_refuses_beyond_the_egress_capacity() {
    let dir = volume(&[
        ("fast.ts", 100_000, 800_000_000),
        ("ok.ts", 100_000, 100_000),
    ]);
    let server = start(dir.path(), &args(EngineKind::Gso)).unwrap();
    let (st, body) = create(&server, "fast.ts", 9);
    assert_eq!(st, 503, "{body}");
    let err: isnode_proto::ErrorBody = serde_json::from_value(body.clone()).unwrap();
    assert_eq!(err.limit, Some(isnode_serve::Limit::MaxBitrateBps));
    assert_eq!(err.value, Some(900_000_000));
    let (st, body) = create(&server, "ok.ts", 9);
    assert_eq!(st, 201, "{body}");
    assert_eq!(server.metrics().sessions_refused, [1, 0, 0, 0, 0, 0, 0, 0]);
}

/// Defect 5: an object replaced in the catalog while the server runs is streamed with its
/// new content (new TOI, new packets), and its session FDT names the new object.
#[test]
fn an_object_replaced_while_serving_streams_its_new_content() {
    let dir = volume(&[("v.ts", 30_000, 2_000_000)]);
    let server = start(dir.path(), &args(EngineKind::Gso)).unwrap();
    let (packets, s) = stream_on(&server, dir.path(), "v.ts");
    let old_toi = s["object"]["toi"].as_u64().unwrap() as u32;
    assert!(!packets.is_empty());
    {
        let mut vol = Volume::open(dir.path()).unwrap();
        let bytes = data(40_000, 99);
        let opts = IngestOptions {
            name: "v.ts".into(),
            bitrate_bps: 2_000_000,
            content_type: "video/mp2t".into(),
            replace: true,
        };
        ingest(&mut vol, &opts, &mut &bytes[..], 40_000, &mut |_| {}).unwrap();
    }
    let (packets, s) = stream_on(&server, dir.path(), "v.ts");
    let toi = s["object"]["toi"].as_u64().unwrap() as u32;
    assert_ne!(toi, old_toi);
    assert_eq!(s["object"]["size_bytes"], 40_000);
    let tsi = s["object"]["tsi"].as_u64().unwrap() as u32;
    let (got, _) = classify(&packets, tsi, toi);
    let (want, _) = stored(dir.path(), "v.ts");
    assert_eq!(got, want);
    let fdt =
        isnode_wire::fdt::FdtInstance::from_xml(s["fdt_xml"].as_str().unwrap().as_bytes()).unwrap();
    assert_eq!(fdt.files[0].toi, toi);
}
