//! End-to-end tests of `isnode serve` and `isnode play` (issue 3): the real binary on
//! loopback, real sockets, real files, a real member failure.
//!
//! Each test has its own temporary volume and its own server child on a free port, killed
//! when the test ends (also on failure). The server paces at real time, so objects are
//! short (3-6 s); the tests run in parallel. Every wait is bounded.

mod serve_support;

use std::collections::HashMap;
use std::process::Stdio;
use std::rc::Rc;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Value};
use serve_support::*;

/// Default volume shape (`volume create` defaults): E = 1408, k = 223, m = 32, 8 members,
/// 1 MiB blocks.
const E: u64 = 1408;
const K: u64 = 223;

/// Repair symbols per codeword of the default shape.
const M: u64 = 32;

/// The send rate protocol.md promises for an object of `size` bytes at `bitrate` on the
/// default shape: bitrate × (packet bytes per codeword / source bytes per codeword),
/// rounded up, on the first codeword, whose k comes from the RFC 5052 block partitioning
/// (k = ceil(Kt / ceil(Kt / B)) for Kt = ceil(size / E) source symbols).
fn expected_send_rate(bitrate: u64, size: u64) -> u64 {
    let kt = size.div_ceil(E);
    let k = kt.div_ceil(kt.div_ceil(K)).min(K);
    let packet = E + isnode_wire::DATA_HEADER_LEN as u64;
    (bitrate * (k + M) * packet).div_ceil(k * E)
}

/// Injected loss rate, mean burst length, corruption rate.
type Impair = (f64, Option<f64>, f64);

/// Spawns `isnode play NAME --server URL --out OUT --stats-json STATS --as-fast-as-possible`
/// with injected impairments.
fn spawn_play(
    server: &Server,
    vol: &Vol,
    name: &str,
    tag: &str,
    (loss, burst, corrupt): Impair,
    seed: u64,
) -> (ChildGuard, std::path::PathBuf, std::path::PathBuf) {
    let out = vol.path(&format!("{tag}.out"));
    let stats = vol.path(&format!("{tag}.json"));
    let mut cmd = command();
    cmd.arg("play")
        .arg(name)
        .arg("--server")
        .arg(server.url())
        .arg("--out")
        .arg(&out)
        .arg("--stats-json")
        .arg(&stats)
        .arg("--loss")
        .arg(loss.to_string())
        .arg("--corrupt")
        .arg(corrupt.to_string())
        .arg("--seed")
        .arg(seed.to_string())
        .arg("--as-fast-as-possible")
        .arg("--timeout-s")
        .arg("5")
        .arg("--max-seconds")
        .arg("40");
    if let Some(b) = burst {
        cmd.arg("--burst").arg(b.to_string());
    }
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(vol.path(&format!("{tag}.stderr"))).unwrap())
        .spawn()
        .expect("spawning isnode play");
    (ChildGuard(Some(child)), out, stats)
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("stats lack {k:?}: {v}"))
}

/// Test 1: at least 20 concurrent `isnode play` processes on three objects, each with its
/// own injected loss (up to 5 %, bursts up to 4) and corruption (up to 1 %), all within
/// the code's limit (m = 32 of n = 255 per codeword, 12.5 %): every output is the
/// ingested file, byte for byte, and the stats show the injected damage was repaired.
#[test]
fn serve_many_clients() {
    let vol = Vol::create(&[]);
    let objects = [
        ("a.ts", 1_500_000u64, 3.0f64, 11u64),
        ("b.ts", 2_000_000, 3.5, 12),
        ("c.ts", 1_000_000, 4.0, 13),
    ];
    let originals: HashMap<&str, Vec<u8>> = objects
        .iter()
        .map(|&(name, rate, secs, seed)| (name, vol.add_ts(name, rate, secs, seed)))
        .collect();
    // More sessions from 127.0.0.1 than the default per-client limit (16).
    let server = Server::start(
        &vol,
        &[
            "--cache-size",
            &(64u64 << 20).to_string(),
            "--max-sessions-per-client",
            "64",
        ],
    );

    // (loss, mean burst, corruption) of each client, cycled. "Within the code's limit"
    // means at most m = 32 erasures in a codeword of ~240 packets: independent losses of
    // 5 % never get there, but Gilbert-Elliott bursts of mean length 4 have a fat tail (a
    // simulation of the chain gives > 32 erasures in ~3 % of codewords at 5 % loss, ~0.2 %
    // at 2 %), so the long bursts come with the lower loss rates.
    let impair: [Impair; 7] = [
        (0.0, None, 0.0),
        (0.01, None, 0.01),
        (0.02, Some(2.0), 0.005),
        (0.03, Some(2.0), 0.0),
        (0.05, None, 0.005),
        (0.05, None, 0.01),
        (0.02, Some(4.0), 0.005),
    ];
    const CLIENTS: usize = 21;
    let t0 = Instant::now();
    let mut clients = Vec::new();
    for i in 0..CLIENTS {
        let (name, ..) = objects[i % objects.len()];
        let (loss, burst, corrupt) = impair[i % impair.len()];
        let (child, out, stats) = spawn_play(
            &server,
            &vol,
            name,
            &format!("client-{i}"),
            (loss, burst, corrupt),
            1000 + i as u64,
        );
        clients.push((i, name, loss, burst, corrupt, child, out, stats));
    }
    let deadline = Instant::now() + Duration::from_secs(40);
    let (mut lost_total, mut corrupt_total, mut repaired_total) = (0u64, 0u64, 0u64);
    println!(
        "client object loss burst corrupt | injected_lost injected_corrupt repaired identical"
    );
    for (i, name, loss, burst, corrupt, mut child, out, stats) in clients {
        let status = child.wait_until(deadline, &format!("client {i}"));
        let stderr =
            std::fs::read_to_string(vol.path(&format!("client-{i}.stderr"))).unwrap_or_default();
        assert!(
            status.success(),
            "client {i} ({name}) failed: {status}\n{stderr}"
        );
        let got = std::fs::read(&out).unwrap();
        let same = got == originals[name];
        let s: Value =
            serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).expect("stats JSON");
        println!(
            "{i:>6} {name} {loss:.2} {burst:?} {corrupt:.3} | {} {} {} {same}",
            u(&s, "injected_lost"),
            u(&s, "injected_corrupt"),
            u(&s, "symbols_repaired")
        );
        assert!(
            same,
            "client {i}: output of {name} differs from the ingested file ({} vs {} bytes)",
            got.len(),
            originals[name].len()
        );
        assert_eq!(s["end_reason"], "complete", "client {i}: {s}");
        assert_eq!(u(&s, "codewords_unrecoverable"), 0, "client {i}: {s}");
        assert_eq!(
            u(&s, "codewords_decoded"),
            u(&s, "codewords_total"),
            "client {i}: {s}"
        );
        if loss >= 0.01 {
            assert!(
                u(&s, "injected_lost") > 0,
                "client {i}: no loss injected: {s}"
            );
            // Not `packets_lost >= injected_lost`: a complete stream's last codeword counts
            // only the symbols below its highest ESI seen, so injected drops of its
            // trailing repair packets are not in packets_lost (crates/recv receiver.rs,
            // `stats`); at most m of them.
            assert!(u(&s, "packets_lost") + M >= u(&s, "injected_lost"), "{s}");
        } else {
            assert_eq!(u(&s, "injected_lost"), 0, "{s}");
        }
        if corrupt == 0.0 {
            assert_eq!(u(&s, "injected_corrupt"), 0, "{s}");
        }
        // Every injected corruption was caught by the CRC32C check.
        assert!(u(&s, "packets_corrupt") >= u(&s, "injected_corrupt"), "{s}");
        lost_total += u(&s, "injected_lost");
        corrupt_total += u(&s, "injected_corrupt");
        repaired_total += u(&s, "symbols_repaired");
    }
    println!(
        "{CLIENTS} clients in {:.1} s: {lost_total} packets lost and {corrupt_total} corrupted on purpose, \
         {repaired_total} symbols repaired",
        t0.elapsed().as_secs_f64()
    );
    assert!(
        lost_total > 100 && corrupt_total > 10,
        "too little damage was injected"
    );
    assert!(
        repaired_total > 100,
        "the injected losses were not repaired by FEC"
    );
    let m = server.metrics();
    assert!(m.get("isnode_sessions_started_total") >= CLIENTS as f64);
    assert_eq!(
        m.get("isnode_sessions_refused_total{limit=\"max_bitrate_bps\"}")
            + m.get("isnode_sessions_refused_total{limit=\"cache_size_bytes\"}")
            + m.get("isnode_sessions_refused_total{limit=\"max_sessions_per_client\"}"),
        0.0
    );
}

/// Test 2: a member fails for real in the middle of streaming; every client's output is
/// still byte-identical and the server reports the member's errors and the symbols it
/// rebuilt.
///
/// How the member is failed: `crates/serve/src/cache.rs` (`read_block`) opens the segment
/// file for every block read and keeps no descriptor, so renaming the member directory
/// away makes every later read fail (ENOENT). A server that kept descriptors open would
/// still read a renamed or unlinked file, so the test also truncates every segment file of
/// the member to 0 bytes first: an open descriptor then reads EOF. Blocks already in the
/// pool stay valid (they were verified when read), so only blocks not yet read fail: the
/// volume has 64 KiB blocks (a block holds about 1.4 codewords' run of one member) and the
/// object is 6 s long (10 codewords), so most of the member is still unread at 1.5 s.
#[test]
fn serve_member_loss_mid_stream() {
    member_loss_mid_stream("gso");
}

/// The `sendfile` engine sends from the page cache: a member that fails mid-stream makes
/// `sendfile` come up short, and those packets go to the same rebuild from the pool.
#[test]
fn serve_member_loss_mid_stream_sendfile() {
    member_loss_mid_stream("sendfile");
}

fn member_loss_mid_stream(engine: &str) {
    let vol = Vol::create(&["--block-size", "65536"]);
    let original = vol.add_ts("long.ts", 4_000_000, 6.0, 21);
    let cache = (32u64 << 20).to_string();
    let server = Server::start(&vol, &["--cache-size", &cache, "--engine", engine]);
    let impair: [Impair; 5] = [
        (0.0, None, 0.0),
        (0.02, None, 0.0),
        (0.03, Some(2.0), 0.005),
        (0.0, None, 0.01),
        (0.01, None, 0.0),
    ];
    let t0 = Instant::now();
    let mut clients = Vec::new();
    for (i, &(loss, burst, corrupt)) in impair.iter().enumerate() {
        let (child, out, stats) = spawn_play(
            &server,
            &vol,
            "long.ts",
            &format!("m-client-{i}"),
            (loss, burst, corrupt),
            2000 + i as u64,
        );
        clients.push((i, child, out, stats));
    }
    std::thread::sleep(Duration::from_millis(1500));
    let failed: u32 = 2;
    let member_dir = vol.root.join("members").join(failed.to_string());
    let truncated = fail_member(&member_dir);
    assert!(truncated >= 1, "member {failed} had no segment file");
    println!(
        "member {failed} failed at {:.2} s ({truncated} segment file(s) truncated, directory renamed)",
        t0.elapsed().as_secs_f64()
    );

    let deadline = Instant::now() + Duration::from_secs(30);
    for (i, mut child, out, stats) in clients {
        let status = child.wait_until(deadline, &format!("client {i}"));
        let stderr =
            std::fs::read_to_string(vol.path(&format!("m-client-{i}.stderr"))).unwrap_or_default();
        assert!(status.success(), "client {i} failed: {status}\n{stderr}");
        let s: Value = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
        let got = std::fs::read(&out).unwrap();
        println!(
            "client {i}: lost {} (injected {}), corrupt {}, repaired {}, identical {}",
            u(&s, "packets_lost"),
            u(&s, "injected_lost"),
            u(&s, "packets_corrupt"),
            u(&s, "symbols_repaired"),
            got == original
        );
        assert!(
            got == original,
            "client {i}: output differs from the ingested file"
        );
        assert_eq!(s["end_reason"], "complete", "client {i}: {s}");
        assert_eq!(u(&s, "codewords_unrecoverable"), 0, "client {i}: {s}");
        // The server rebuilt the failed member's symbols: a client sees (almost) none of the
        // ~32 packets per codeword the member held as lost (a few loopback drops allowed).
        // `packets_missed` (corrupt ones included), not `packets_lost`: adaptive repair
        // leaves repair packets unsent, which `packets_lost` (all n expected) would count.
        let extra = u(&s, "packets_missed")
            .saturating_sub(u(&s, "injected_lost") + u(&s, "packets_corrupt"));
        assert!(
            extra < 20,
            "client {i}: {extra} packets missing beyond the injected loss: {s}"
        );
    }
    let m = server.metrics();
    let errors = m.get(&format!(
        "isnode_member_errors_total{{member=\"{failed}\"}}"
    ));
    let rebuilt = m.get("isnode_symbols_rebuilt_total");
    println!("server: member {failed} errors {errors}, symbols rebuilt {rebuilt}");
    assert!(
        errors > 0.0,
        "no member error counted for member {failed}:\n{}",
        m.0
    );
    assert!(rebuilt > 0.0, "no symbols rebuilt:\n{}", m.0);
    for other in (0..8).filter(|&x| x != failed) {
        assert_eq!(
            m.get(&format!("isnode_member_errors_total{{member=\"{other}\"}}")),
            0.0,
            "member {other} should have no errors"
        );
    }
}

/// Receives one session with the `flute` crate's standard receiver, dropping a seeded
/// fraction `loss` of the data packets; returns (object bytes, content location, packets
/// received, data packets dropped).
fn flute_session(
    server: &Server,
    object: &str,
    loss: f64,
    seed: u64,
) -> (Vec<u8>, String, u64, u64) {
    use flute::core::UDPEndpoint;
    use flute::receiver::writer::ObjectWriterBufferBuilder;
    use flute::receiver::MultiReceiver;

    let sock = udp(LO1, 0).unwrap();
    let port = sock.local_addr().unwrap().port();
    let info = server.open_session(object, &sock);
    let id = info["id"].as_str().unwrap().to_string();
    let duration = info["object"]["duration_s"].as_f64().unwrap();

    let writer = Rc::new(ObjectWriterBufferBuilder::new(true));
    let mut receiver = MultiReceiver::new(writer.clone(), None, false);
    let endpoint = UDPEndpoint::new(None, "127.0.0.1".to_owned(), port);
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let (mut received, mut dropped) = (0u64, 0u64);
    let mut buf = vec![0u8; 65536];
    let deadline = Instant::now() + Duration::from_secs_f64(duration + 8.0);
    let mut next_keepalive = Instant::now() + Duration::from_millis(800);
    let complete =
        |w: &ObjectWriterBufferBuilder| w.objects.borrow().iter().any(|o| o.borrow().complete);
    while Instant::now() < deadline && !complete(&writer) {
        if Instant::now() >= next_keepalive {
            assert_eq!(server.keepalive(&id), 204, "keepalive");
            next_keepalive = Instant::now() + Duration::from_millis(800);
        }
        let Ok(n) = sock.recv(&mut buf) else { continue };
        received += 1;
        let pkt = &buf[..n];
        // The loss hits data packets only: the FDT (TOI 0) is not FEC-protected and is
        // repeated once every 8 codewords, i.e. sent once for an object this short.
        let toi = isnode_wire::parse_packet(pkt)
            .map(|a| a.lct.toi)
            .unwrap_or(0);
        if toi != 0 && rng.unit() < loss {
            dropped += 1;
            continue;
        }
        receiver
            .push(&endpoint, pkt, SystemTime::now())
            .unwrap_or_else(|e| panic!("the flute receiver refused an isnode packet: {e:?}"));
    }
    let del = server.session_req("DELETE", &id, "", None).status;
    assert!(del == 204 || del == 404, "DELETE: {del}");
    let objects = writer.objects.borrow();
    let obj = objects
        .iter()
        .find(|o| o.borrow().complete)
        .unwrap_or_else(|| {
            panic!("flute completed no object ({received} packets, {dropped} dropped)")
        });
    let obj = obj.borrow();
    assert!(!obj.error, "flute reports an error");
    (
        obj.data.clone(),
        obj.meta.content_location.to_string(),
        received,
        dropped,
    )
}

/// Test 3: a standard FLUTE receiver (`flute::receiver::MultiReceiver`) reconstructs a file
/// from a real isnode session, without loss and with ~5 % of the data packets dropped.
#[test]
fn serve_flute_interop() {
    let vol = Vol::create(&[]);
    let original = vol.add_ts("flute.ts", 2_000_000, 3.0, 31);
    let server = Server::start(&vol, &["--cache-size", &(32u64 << 20).to_string()]);
    std::thread::scope(|s| {
        let runs: Vec<_> = [(0.0, 1u64), (0.05, 7u64)]
            .into_iter()
            .map(|(loss, seed)| {
                let server = &server;
                let original = &original;
                s.spawn(move || {
                    let (data, location, received, dropped) =
                        flute_session(server, "flute.ts", loss, seed);
                    println!(
                        "flute receiver, loss {loss}: {received} packets received, {dropped} dropped, \
                         object {location:?} of {} bytes",
                        data.len()
                    );
                    assert!(location.ends_with("flute.ts"), "content location {location:?}");
                    assert!(data == *original, "flute's object differs from the ingested file");
                    if loss > 0.0 {
                        assert!(dropped > 10, "only {dropped} packets dropped");
                    }
                })
            })
            .collect();
        for r in runs {
            r.join().expect("flute run");
        }
    });
}

/// Binds a pair of UDP sockets with the same port on 127.0.0.1 and 127.0.0.2.
fn socket_pair() -> (std::net::UdpSocket, std::net::UdpSocket, u16) {
    for _ in 0..20 {
        let hi = udp(LO2, 0).unwrap();
        let port = hi.local_addr().unwrap().port();
        if let Ok(lo) = udp(LO1, port) {
            return (lo, hi, port);
        }
    }
    panic!("no port free on both 127.0.0.1 and 127.0.0.2");
}

/// Test 4: (a) packets go only to the HTTP peer's address, whatever the request says;
/// (b) a session without keepalive ends, one with keepalive continues; (c) DELETE stops
/// the packets; (d) errors are JSON with a reason.
#[test]
fn serve_security_and_lifecycle() {
    let vol = Vol::create(&[]);
    vol.add_ts("life.ts", 1_000_000, 6.0, 41);
    let server = Server::start(
        &vol,
        &[
            "--cache-size",
            &(32u64 << 20).to_string(),
            "--session-timeout-ms",
            "1000",
        ],
    );

    // (b) runs beside the rest: one session without keepalive, one with.
    let lifecycle = std::thread::scope(|scope| {
        let b = scope.spawn(|| {
            let quiet = udp(LO1, 0).unwrap();
            let kept = udp(LO1, 0).unwrap();
            let t0 = Instant::now();
            let rq = server.post_session("life.ts", quiet.local_addr().unwrap().port());
            let rk = server.post_session("life.ts", kept.local_addr().unwrap().port());
            assert_eq!((rq.status, rk.status), (201, 201), "{} {}", rq.body, rk.body);
            assert_eq!(rq.json()["session_timeout_ms"], 1000);
            let (qid, kid) = (
                rq.json()["id"].as_str().unwrap().to_string(),
                rk.json()["id"].as_str().unwrap().to_string(),
            );
            server.validate(&rq.json(), &quiet);
            server.validate(&rk.json(), &kept);
            let rec_q = Recorder::start(quiet, t0);
            let rec_k = Recorder::start(kept, t0);
            while t0.elapsed() < Duration::from_millis(3500) {
                assert_eq!(server.keepalive(&kid), 204, "keepalive of a live session");
                std::thread::sleep(Duration::from_millis(300));
            }
            let (q, k) = (rec_q.finish(), rec_k.finish());
            let q_last = q.last().map_or(0.0, |p| p.0);
            let k_last = k.last().map_or(0.0, |p| p.0);
            println!(
                "no keepalive: {} packets, last at {q_last:.2} s; keepalive: {} packets, last at {k_last:.2} s",
                q.len(),
                k.len()
            );
            assert!(!q.is_empty(), "the session without keepalive never sent");
            assert!(
                q_last < 2.2,
                "packets of a session without keepalive (timeout 1 s) still came at {q_last:.2} s"
            );
            assert!(k_last > 3.0, "the kept-alive session stopped at {k_last:.2} s");
            let g = server.req("GET", &format!("/v1/sessions/{qid}"), None);
            assert!(
                g.status == 404 || g.json()["state"] == "done",
                "the expired session is still there: {} {}",
                g.status,
                g.body
            );
            assert_eq!(server.keepalive(&qid), 404, "keepalive of an expired session");
            let g = server.req("GET", &format!("/v1/sessions/{kid}"), None);
            assert_eq!(g.status, 200);
            assert_eq!(g.json()["state"], "streaming", "{}", g.body);
            assert_eq!(server.session_req("DELETE", &kid, "", None).status, 204);
            (q.len(), k.len())
        });

        // (a) Packets go only to the HTTP peer's address: the POST comes from 127.0.0.2,
        // with forwarding headers and (second request) address fields naming 127.0.0.1.
        let (lo_a, hi_a, port_a) = socket_pair();
        let (lo_b, hi_b, port_b) = socket_pair();
        let smuggle_headers = [
            ("X-Forwarded-For", "127.0.0.1"),
            ("Forwarded", "for=127.0.0.1"),
            ("X-Real-IP", "127.0.0.1"),
        ];
        let body_a = json!({"object": "life.ts", "port": port_a}).to_string();
        let ra = http(
            server.addr,
            Some(LO2),
            "POST",
            "/v1/sessions",
            Some(&body_a),
            &smuggle_headers,
        );
        assert_eq!(ra.status, 201, "{}", ra.body);
        server.remember(&ra);
        server.validate_from(&ra.json(), &hi_a, Some(LO2));
        assert_eq!(
            ra.json()["destination"],
            format!("127.0.0.2:{port_a}"),
            "{}",
            ra.body
        );
        let dest_b = format!("127.0.0.1:{port_b}");
        let body_b = json!({
            "object": "life.ts", "port": port_b,
            "destination": dest_b, "address": "127.0.0.1", "ip": "127.0.0.1",
            "host": "127.0.0.1", "addr": dest_b, "dest": dest_b,
        })
        .to_string();
        let rb = http(
            server.addr,
            Some(LO2),
            "POST",
            "/v1/sessions",
            Some(&body_b),
            &[],
        );
        // Refusing the extra fields would be fine too; admitting them must not obey them.
        let b_admitted = rb.status == 201;
        if b_admitted {
            server.remember(&rb);
            server.validate_from(&rb.json(), &hi_b, Some(LO2));
            assert_eq!(
                rb.json()["destination"],
                format!("127.0.0.2:{port_b}"),
                "{}",
                rb.body
            );
        } else {
            assert!((400..500).contains(&rb.status), "{} {}", rb.status, rb.body);
        }
        let window = Duration::from_millis(800);
        let counts = std::thread::scope(|s| {
            let h: Vec<_> = [&lo_a, &hi_a, &lo_b, &hi_b]
                .into_iter()
                .map(|sock| s.spawn(move || count_for(sock, window)))
                .collect();
            h.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
        });
        println!(
            "peer-only: 127.0.0.1:{port_a} got {}, 127.0.0.2:{port_a} got {}; smuggled: 127.0.0.1:{port_b} got {}, 127.0.0.2:{port_b} got {}",
            counts[0], counts[1], counts[2], counts[3]
        );
        assert!(counts[1] > 0, "nothing arrived at the HTTP peer's address");
        assert_eq!(counts[0], 0, "packets went to 127.0.0.1, not the HTTP peer");
        assert_eq!(counts[2], 0, "the smuggled address received packets");
        if b_admitted {
            assert!(
                counts[3] > 0,
                "nothing arrived at the peer for the second session"
            );
        }
        let ida = ra.json()["id"].as_str().unwrap().to_string();
        let g = server.req("GET", &format!("/v1/sessions/{ida}"), None);
        assert_eq!(g.json()["destination"], format!("127.0.0.2:{port_a}"));
        for r in [&ra, &rb].into_iter().filter(|r| r.status == 201) {
            let id = r.json()["id"].as_str().unwrap().to_string();
            assert_eq!(
                server
                    .session_req_from(Some(LO2), "DELETE", &id, "", None)
                    .status,
                204
            );
        }

        // (c) DELETE stops the packets.
        let sock = udp(LO1, 0).unwrap();
        let r = server.open_session("life.ts", &sock);
        let id = r["id"].as_str().unwrap().to_string();
        let before = count_for(&sock, Duration::from_millis(500));
        assert!(before > 0, "the session sent nothing");
        assert_eq!(server.session_req("DELETE", &id, "", None).status, 204);
        std::thread::sleep(Duration::from_millis(200));
        drain(&sock);
        let after = count_for(&sock, Duration::from_millis(1000));
        println!("DELETE: {before} packets in 0.5 s before, {after} in 1 s after");
        assert_eq!(after, 0, "packets kept coming after DELETE");
        let g = server.req("GET", &format!("/v1/sessions/{id}"), None);
        assert_eq!(g.status, 404, "{}", g.body);
        assert_eq!(server.keepalive(&id), 404);
        let again = server.session_req("DELETE", &id, "", None);
        assert_eq!(again.status, 404);

        // (d) Errors are JSON with a reason.
        let cases: Vec<(&str, String, Option<String>, u16)> = vec![
            (
                "unknown object",
                "/v1/sessions".into(),
                Some(json!({"object": "nope.ts", "port": 5000}).to_string()),
                404,
            ),
            (
                "port 0",
                "/v1/sessions".into(),
                Some(json!({"object": "life.ts", "port": 0}).to_string()),
                400,
            ),
            (
                "malformed JSON",
                "/v1/sessions".into(),
                Some("{\"object\": \"life.ts\", \"port\":".into()),
                400,
            ),
            (
                "missing port",
                "/v1/sessions".into(),
                Some(json!({"object": "life.ts"}).to_string()),
                400,
            ),
            (
                "port out of range",
                "/v1/sessions".into(),
                Some(json!({"object": "life.ts", "port": 70000}).to_string()),
                400,
            ),
            (
                "start codeword past the end",
                "/v1/sessions".into(),
                Some(
                    json!({"object": "life.ts", "port": 5000, "start_codeword": 1_000_000})
                        .to_string(),
                ),
                400,
            ),
            (
                "name with ../",
                "/v1/sessions".into(),
                Some(json!({"object": "../vol/catalog.sqlite", "port": 5000}).to_string()),
                404,
            ),
        ];
        for (what, path, body, want) in cases {
            let r = server.req("POST", &path, body.as_deref());
            assert_eq!(r.status, want, "{what}: {}", r.body);
            let j = r.json();
            let reason = j["error"].as_str().unwrap_or("");
            assert!(!reason.is_empty(), "{what}: no reason in {}", r.body);
            println!("{what}: {} {reason}", r.status);
        }
        for (method, path, want) in [
            ("GET", "/v1/objects/nope.ts", 404),
            ("GET", "/v1/sessions/0123456789abcdef", 404),
            ("POST", "/v1/sessions/0123456789abcdef/keepalive", 404),
            ("DELETE", "/v1/sessions/0123456789abcdef", 404),
        ] {
            let r = server.req(method, path, None);
            assert_eq!(r.status, want, "{method} {path}: {}", r.body);
            assert!(
                r.json()["error"].as_str().is_some_and(|s| !s.is_empty()),
                "{method} {path}: {}",
                r.body
            );
        }
        b.join().expect("lifecycle part")
    });
    println!("lifecycle: {lifecycle:?}");
    let m = server.metrics();
    assert!(m.get("isnode_sessions_expired_total") >= 1.0, "{}", m.0);
}

/// Bits received in each whole second `[s, s+1)` of `rec` (arrival times in seconds).
fn per_second_bits(rec: &[(f64, usize)], seconds: usize) -> Vec<u64> {
    let mut v = vec![0u64; seconds];
    for &(t, n) in rec {
        let s = t.floor() as usize;
        if s < seconds {
            v[s] += n as u64 * 8;
        }
    }
    v
}

/// Test 5a: a bitrate budget of exactly two sessions: the third and later POSTs are
/// refused with 503 `max_bitrate_bps`, and the two admitted sessions keep their rate in
/// every full second while the refusals happen.
#[test]
fn serve_admission_bitrate() {
    let vol = Vol::create(&[]);
    // 8 Mbit/s: a burst (one member run, ~32 packets, ~370 kbit) is then under 5 % of a
    // second, so the count of bursts in a 1 s window barely moves its bit count.
    let bitrate = 8_000_000u64;
    let size = vol.add_ts("rate.ts", bitrate, 5.0, 51).len() as u64;
    let rate = expected_send_rate(bitrate, size);
    let budget = 2 * rate;
    let server = Server::start(
        &vol,
        &[
            "--cache-size",
            &(32u64 << 20).to_string(),
            "--max-bitrate",
            &budget.to_string(),
        ],
    );
    let socks: Vec<_> = (0..3).map(|_| udp(LO1, 0).unwrap()).collect();
    let ports: Vec<u16> = socks
        .iter()
        .map(|s| s.local_addr().unwrap().port())
        .collect();
    let t0 = Instant::now();
    let mut ids = Vec::new();
    for (sock, &p) in socks.iter().zip(&ports[..2]) {
        let r = server.post_session("rate.ts", p);
        assert_eq!(r.status, 201, "{}", r.body);
        server.validate(&r.json(), sock);
        assert_eq!(
            r.json()["send_rate_bps"].as_u64(),
            Some(rate),
            "send_rate_bps differs from protocol.md's formula: {}",
            r.body
        );
        ids.push(r.json()["id"].as_str().unwrap().to_string());
    }
    let mut socks = socks.into_iter();
    let recs: Vec<Recorder> = (0..2)
        .map(|_| Recorder::start(socks.next().unwrap(), t0))
        .collect();
    let mut refused = 0;
    while t0.elapsed() < Duration::from_millis(4200) {
        let r = server.post_session("rate.ts", ports[2]);
        assert_eq!(
            r.status, 503,
            "a session beyond the budget was admitted: {}",
            r.body
        );
        let j = r.json();
        assert_eq!(j["limit"], "max_bitrate_bps", "{}", r.body);
        assert!(j["error"].as_str().is_some_and(|s| !s.is_empty()));
        refused += 1;
        for id in &ids {
            assert_eq!(server.keepalive(id), 204);
        }
        std::thread::sleep(Duration::from_millis(150));
    }
    let recs: Vec<Vec<(f64, usize)>> = recs.into_iter().map(Recorder::finish).collect();
    for (i, rec) in recs.iter().enumerate() {
        let bits = per_second_bits(rec, 4);
        println!(
            "admitted session {i}: bits per second {bits:?} (object {bitrate}, send rate {rate}); {refused} POSTs refused meanwhile"
        );
        // Second 0 is start-up; seconds 1, 2 and 3 are full seconds of a 5 s object.
        for (s, &b) in bits.iter().enumerate().skip(1) {
            assert!(
                b >= bitrate,
                "session {i} received {b} bit in second {s}, below the object's {bitrate} bit/s"
            );
        }
    }
    let m = server.metrics();
    assert_eq!(
        m.get("isnode_sessions_refused_total{limit=\"max_bitrate_bps\"}"),
        refused as f64
    );
}

/// Test 5b: one session per client address: the second POST from 127.0.0.1 is refused with
/// 503 `max_sessions_per_client`; another address is admitted; a deleted session frees
/// the slot.
#[test]
fn serve_admission_per_client() {
    let vol = Vol::create(&[]);
    vol.add_ts("pc.ts", 1_000_000, 3.0, 52);
    let server = Server::start(
        &vol,
        &[
            "--cache-size",
            &(32u64 << 20).to_string(),
            "--max-sessions-per-client",
            "1",
        ],
    );
    // A streaming (validated) session counts against the limit; sessions awaiting their
    // token's echo do not (they have limits of their own: lockout.rs).
    let sock = udp(std::net::Ipv4Addr::LOCALHOST.into(), 0).unwrap();
    let first = server.open_session("pc.ts", &sock);
    let body = json!({"object": "pc.ts", "port": 40009}).to_string();
    let second = server.req("POST", "/v1/sessions", Some(&body));
    assert_eq!(second.status, 503, "{}", second.body);
    assert_eq!(
        second.json()["limit"],
        "max_sessions_per_client",
        "{}",
        second.body
    );
    assert!(second.json()["error"]
        .as_str()
        .is_some_and(|s| !s.is_empty()));
    let other = http(
        server.addr,
        Some(LO2),
        "POST",
        "/v1/sessions",
        Some(&body),
        &[],
    );
    assert_eq!(other.status, 201, "another client address: {}", other.body);
    let id = first["id"].as_str().unwrap().to_string();
    assert_eq!(server.session_req("DELETE", &id, "", None).status, 204);
    let third = server.req("POST", "/v1/sessions", Some(&body));
    assert_eq!(third.status, 201, "after DELETE: {}", third.body);
    let m = server.metrics();
    assert_eq!(
        m.get("isnode_sessions_refused_total{limit=\"max_sessions_per_client\"}"),
        1.0
    );
}

/// Test 5c: a block pool too small for another session: 503 `cache_size_bytes`.
///
/// How the limit is computed (crates/serve/src/api.rs, `create_session`): each active
/// session needs the blocks of its next `LOOKAHEAD_CODEWORDS` = 3 codewords, counted once
/// per distinct (object, member, block) so that sessions of one title share them, plus 2
/// reserve slots; the pool has `--cache-size / block size` slots. Here: 1 MiB blocks, 8
/// members, objects of 3 codewords (one block per member): a session needs 8 blocks, and
/// a 16 MiB pool has 16 slots. Two sessions of the same title need 8 + 2 ≤ 16 (admitted:
/// one copy shared), a session of a second title would need 16 + 2 > 16 (refused).
#[test]
fn serve_admission_cache_size() {
    // 1 MiB blocks (the default before 64 KiB): a 16 MiB pool holds one title's working set
    // and not two.
    let vol = Vol::create(&["--block-size", "1048576"]);
    vol.add_ts("one.ts", 2_000_000, 3.0, 53);
    vol.add_ts("two.ts", 2_000_000, 3.0, 54);
    let server = Server::start(&vol, &["--cache-size", &(16u64 << 20).to_string()]);
    // Streaming (validated) sessions hold their blocks; sessions awaiting their echo hold
    // none.
    let s1 = udp(std::net::Ipv4Addr::LOCALHOST.into(), 0).unwrap();
    let s2 = udp(std::net::Ipv4Addr::LOCALHOST.into(), 0).unwrap();
    server.open_session("one.ts", &s1);
    // A second viewer of the same title shares its blocks.
    server.open_session("one.ts", &s2);
    let b = server.post_session("two.ts", 40011);
    assert_eq!(b.status, 503, "{}", b.body);
    assert_eq!(b.json()["limit"], "cache_size_bytes", "{}", b.body);
    assert!(b.json()["error"].as_str().is_some_and(|s| !s.is_empty()));
    let m = server.metrics();
    assert_eq!(
        m.get("isnode_sessions_refused_total{limit=\"cache_size_bytes\"}"),
        1.0
    );
    assert_eq!(m.get("isnode_sessions_active"), 2.0);
}

/// Test 5d: disks that cannot sustain another reader: 503 `disk_read_bps`, while a viewer
/// the pool serves (a second viewer of a title at its position) is still admitted.
///
/// `--disk-read-bps` is 1.5 sessions' send rate: the first viewer of `one.ts` reads from
/// disk (one rate), the second shares its blocks (no more reads), a viewer of `two.ts`
/// would read too (two rates > 1.5): refused.
#[test]
fn serve_admission_disk_read() {
    let vol = Vol::create(&[]);
    let one = vol.add_ts("one.ts", 2_000_000, 3.0, 53);
    let two = vol.add_ts("two.ts", 2_000_000, 3.0, 54);
    assert_eq!(one.len(), two.len(), "the titles' send rates are equal");
    let rate = expected_send_rate(2_000_000, one.len() as u64);
    let limit = (rate * 3 / 2).to_string();
    let server = Server::start(&vol, &["--disk-read-bps", &limit]);
    let s1 = udp(std::net::Ipv4Addr::LOCALHOST.into(), 0).unwrap();
    let s2 = udp(std::net::Ipv4Addr::LOCALHOST.into(), 0).unwrap();
    server.open_session("one.ts", &s1);
    server.open_session("one.ts", &s2);
    let b = server.post_session("two.ts", 40012);
    assert_eq!(b.status, 503, "{}", b.body);
    assert_eq!(b.json()["limit"], "disk_read_bps", "{}", b.body);
    assert_eq!(b.json()["value"].as_u64(), Some(rate * 3 / 2), "{}", b.body);
    let m = server.metrics();
    assert_eq!(
        m.get("isnode_sessions_refused_total{limit=\"disk_read_bps\"}"),
        1.0
    );
    assert_eq!(m.get("isnode_sessions_active"), 2.0);
}

/// Test 6: the server's memory stays flat when 1 viewer of a title becomes 50.
///
/// The pool (`--cache-size` 64 MiB) is allocated and touched at start, so it is in the RSS
/// from the beginning. One copy per viewer would cost each viewer its working set: the
/// blocks of 3 codewords of every member, here 8 × 1 MiB = 8 MiB, i.e. 392 MiB for 49 more
/// viewers (even a per-session buffer of one codeword's packets, 255 × 1436 B ≈ 358 KiB,
/// would be ~17 MiB). The test allows 8 MiB of growth for 49 sessions' bookkeeping.
#[test]
fn serve_memory_flat() {
    // 1 MiB blocks (the default before 64 KiB): the bound on misses below counts them.
    let vol = Vol::create(&["--block-size", "1048576"]);
    vol.add_ts("pop.ts", 1_000_000, 6.0, 61);
    // More sessions from 127.0.0.1 than the default per-client limit (16).
    let server = Server::start(
        &vol,
        &[
            "--cache-size",
            &(64u64 << 20).to_string(),
            "--max-sessions-per-client",
            "64",
            // One thread drains all sockets (it would take the tokens): this test is about
            // memory, return routability has its own (security.rs).
            "--validate-destination",
            "off",
        ],
    );
    const VIEWERS: usize = 50;
    let socks: Vec<std::net::UdpSocket> = (0..VIEWERS).map(|_| udp(LO1, 0).unwrap()).collect();
    let ports: Vec<u16> = socks
        .iter()
        .map(|s| s.local_addr().unwrap().port())
        .collect();
    for s in &socks {
        s.set_nonblocking(true).unwrap();
    }
    // One thread drains every viewer's socket and counts its datagrams.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let st = stop.clone();
    let drainer = std::thread::spawn(move || {
        let mut counts = vec![0u64; socks.len()];
        let mut buf = vec![0u8; 65536];
        let end = Instant::now() + Duration::from_secs(30);
        while !st.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < end {
            let mut any = false;
            for (i, s) in socks.iter().enumerate() {
                while s.recv(&mut buf).is_ok() {
                    counts[i] += 1;
                    any = true;
                }
            }
            if !any {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        counts
    });
    let r = server.post_session("pop.ts", ports[0]);
    assert_eq!(r.status, 201, "{}", r.body);
    std::thread::sleep(Duration::from_millis(1500));
    let rss1 = server.rss_bytes();
    for &p in &ports[1..] {
        let r = server.post_session("pop.ts", p);
        assert_eq!(r.status, 201, "{}", r.body);
    }
    std::thread::sleep(Duration::from_millis(1500));
    let rss50 = server.rss_bytes();
    let m = server.metrics();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let counts = drainer.join().unwrap();
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    println!(
        "server RSS: {:.1} MiB with 1 viewer, {:.1} MiB with {VIEWERS} viewers of the same title \
         (growth {:.2} MiB); pool {:.0} MiB holding {:.0} MiB; cache hits {}, misses {}",
        mib(rss1),
        mib(rss50),
        mib(rss50.saturating_sub(rss1)),
        mib(m.get("isnode_cache_pool_bytes") as u64),
        mib(m.get("isnode_cache_bytes") as u64),
        m.get("isnode_cache_hits_total"),
        m.get("isnode_cache_misses_total"),
    );
    assert_eq!(m.get("isnode_sessions_active"), VIEWERS as f64, "{}", m.0);
    // One copy: the title's first codewords sit in one 1 MiB block per member (8 blocks);
    // 50 viewers read each of them from disk once, not once per viewer.
    assert!(
        m.get("isnode_cache_misses_total") <= 16.0,
        "the viewers read the title's blocks {} times",
        m.get("isnode_cache_misses_total")
    );
    assert!(
        counts.iter().all(|&c| c > 0),
        "a viewer received nothing: {counts:?}"
    );
    assert!(
        rss50 <= rss1 + (8 << 20),
        "RSS grew from {:.1} to {:.1} MiB for {} more viewers of one title",
        mib(rss1),
        mib(rss50),
        VIEWERS - 1
    );
}

/// Issue 17: the real client keeps its session alive with version 4 keepalive datagrams
/// (MAC and counter, no secret, one a second): with a session timeout of 2.5 s, `isnode
/// play` of a 6 s title (paced by the server at its bitrate) gets the whole title, the
/// server took its datagrams and refused none, and no session expired.
#[test]
fn the_client_keeps_its_session_alive_with_authenticated_keepalives() {
    let vol = Vol::create(&[]);
    let original = vol.add_ts("kept.ts", 1_000_000, 6.0, 43);
    let server = Server::start(&vol, &["--session-timeout-ms", "2500"]);
    let out = vol.path("kept.out");
    let status = command()
        .args([
            "play",
            "kept.ts",
            "--server",
            &server.url(),
            "--max-seconds",
            "40",
        ])
        .arg("--out")
        .arg(&out)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(vol.path("kept.stderr")).unwrap())
        .status()
        .expect("running isnode play");
    let stderr = std::fs::read_to_string(vol.path("kept.stderr")).unwrap_or_default();
    assert!(status.success(), "isnode play: {status}: {stderr}");
    assert!(
        std::fs::read(&out).unwrap() == original,
        "output differs: {stderr}"
    );
    let m = server.metrics();
    assert!(
        m.get("isnode_keepalives_udp_total") >= 3.0,
        "no datagram keepalives taken"
    );
    assert_eq!(m.get("isnode_keepalives_refused_total"), 0.0);
    assert_eq!(m.get("isnode_sessions_expired_total"), 0.0);
}
