//! Periodic broadcast, the server's side (issue 9): `POST /v1/broadcasts` on a real
//! `isnode serve` in a network namespace of the test's own whose loopback carries
//! multicast. Receivers join every channel's groups and check that the server sends what
//! the plan says (its egress within 2 % of the plan's rate), that every packet is a stored
//! packet of the title (source on source groups, repair on repair groups), and that bad
//! requests get a clear 4xx and change nothing.

mod serve_support;

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use serve_support::netns::Netns;
use serve_support::{Server, Vol};

/// A socket bound to `bind_ip:port` that joined `groups` (on the loopback) and receives
/// those groups only (`IP_MULTICAST_ALL` off: by default Linux hands a wildcard-bound
/// socket every group any socket of the host joined).
fn join_at(bind_ip: Ipv4Addr, port: u16, groups: &[Ipv4Addr]) -> UdpSocket {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::DGRAM, None).expect("socket");
    s.set_reuse_address(true).expect("SO_REUSEADDR");
    s.set_multicast_all_v4(false).expect("IP_MULTICAST_ALL");
    let _ = s.set_recv_buffer_size(4 << 20);
    s.bind(&SocketAddr::from((bind_ip, port)).into())
        .expect("bind");
    for g in groups {
        s.join_multicast_v4(g, &Ipv4Addr::LOCALHOST)
            .expect("joining a group");
    }
    let s: UdpSocket = s.into();
    s.set_read_timeout(Some(Duration::from_millis(20)))
        .expect("timeout");
    s
}

/// [`join_at`] on the wildcard address.
fn join(port: u16, groups: &[Ipv4Addr]) -> UdpSocket {
    join_at(Ipv4Addr::UNSPECIFIED, port, groups)
}

/// [`serve_support::planned::partition`] in `usize`: (source symbols of codeword `sbn`,
/// symbols before it).
fn partition(len: usize, k: usize, e: usize, sbn: usize) -> (usize, usize) {
    let (n, before) = serve_support::planned::partition(len as u64, k as u64, e as u64, sbn as u64);
    (n as usize, before as usize)
}

/// The IPv4 address of a group (these tests use IPv4 groups only).
fn v4(a: SocketAddr) -> Ipv4Addr {
    match a.ip() {
        std::net::IpAddr::V4(v) => v,
        other => panic!("IPv4 groups expected, got {other}"),
    }
}

/// `ip:port` of a channel's group.
fn addr(v: &Value) -> SocketAddr {
    v.as_str().expect("an address").parse().expect("ip:port")
}

/// Where each datagram of one channel came from, by destination group.
struct Got {
    /// (group, TOI, SBN, ESI, bytes) of each data packet.
    packets: Vec<(Ipv4Addr, u32, u32, u32, Vec<u8>)>,
    /// FDT packets (TOI 0).
    fdts: usize,
    bytes: u64,
}

/// Receives on `sock` for `dur`; `IP_PKTINFO` is not needed: the source and repair groups
/// of a channel are told apart by the packets' ESIs, checked against what each group may carry.
fn receive(sock: &UdpSocket, dur: Duration) -> Got {
    let mut got = Got {
        packets: Vec::new(),
        fdts: 0,
        bytes: 0,
    };
    let mut buf = vec![0u8; 65536];
    let end = Instant::now() + dur;
    while Instant::now() < end {
        let Ok(n) = sock.recv(&mut buf) else { continue };
        got.bytes += n as u64;
        match isnode_wire::parse_data_packet(&buf[..n]) {
            Ok(p) if p.id.toi != 0 => got.packets.push((
                Ipv4Addr::UNSPECIFIED,
                p.id.toi,
                p.id.sbn,
                u32::from(p.id.esi),
                p.symbol.to_vec(),
            )),
            _ => got.fdts += 1,
        }
    }
    got
}

#[test]
fn broadcast_sends_the_plan_with_stored_packets() {
    let ns = Netns::with_loopback_multicast();
    ns.run(|| {
        let vol = Vol::create(&[]);
        let bytes = vol.add_ts("clip.ts", 2_000_000, 30.0, 7);
        let server = Server::start(&vol, &[]);
        let body = json!({"object": "clip.ts", "scheme": "fast", "max_wait_s": 3.0}).to_string();
        let r = server.req("POST", "/v1/broadcasts", Some(&body));
        assert_eq!(r.status, 201, "{}", r.body);
        let info = r.json();
        let id = info["id"].as_str().expect("id").to_string();
        let channels = info["channels"].as_array().expect("channels").clone();
        assert!(channels.len() >= 2, "{info}");
        let k = info["fec"]["max_source_block_length"].as_u64().unwrap() as usize;
        let e = info["fec"]["symbol_size"].as_u64().unwrap() as usize;

        // One socket per channel (its port), on the channel's source and repair groups.
        let socks: Vec<(UdpSocket, SocketAddr, SocketAddr)> = channels
            .iter()
            .map(|c| {
                let (s, r) = (addr(&c["source"]), addr(&c["repair"]));
                assert_eq!(s.port(), r.port());
                (join(s.port(), &[v4(s), v4(r)]), s, r)
            })
            .collect();
        let reserved_bps: u64 = channels
            .iter()
            .map(|c| c["send_rate_bps"].as_u64().unwrap())
            .sum();
        assert_eq!(reserved_bps, info["send_rate_bps"].as_u64().unwrap());
        let planned_bps: u64 = channels
            .iter()
            .map(|c| c["mean_send_rate_bps"].as_u64().unwrap())
            .sum();
        assert!(planned_bps <= reserved_bps);

        // Measure the server's own count over a window, receivers draining meanwhile.
        std::thread::sleep(Duration::from_millis(500));
        let sent0 = server.metrics().get("isnode_broadcast_bytes_sent_total");
        let t0 = Instant::now();
        let window = Duration::from_secs(6);
        let gots: Vec<Got> = std::thread::scope(|s| {
            let hs: Vec<_> = socks
                .iter()
                .map(|(sock, _, _)| s.spawn(move || receive(sock, window)))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let secs = t0.elapsed().as_secs_f64();
        let sent1 = server.metrics().get("isnode_broadcast_bytes_sent_total");
        let measured_bps = (sent1 - sent0) * 8.0 / secs;
        let ratio = measured_bps / planned_bps as f64;
        eprintln!(
            "broadcast egress: measured {:.3} Mbit/s, plan {:.3} Mbit/s, ratio {ratio:.4}",
            measured_bps / 1e6,
            planned_bps as f64 / 1e6
        );
        assert!((0.98..=1.02).contains(&ratio), "egress {ratio} of the plan");

        // Every packet is a stored one: its source symbols are the title's bytes.
        let received: u64 = gots.iter().map(|g| g.bytes).sum();
        assert!(
            received as f64 >= 0.95 * (sent1 - sent0),
            "received {received} of {} bytes",
            sent1 - sent0
        );
        let mut per_codeword: HashMap<u32, usize> = HashMap::new();
        for g in &gots {
            assert!(g.fdts >= 1, "no FDT on a channel");
            for (_, toi, sbn, esi, sym) in &g.packets {
                assert_ne!(*toi, 0);
                *per_codeword.entry(*sbn).or_default() += 1;
                let esi = *esi as usize;
                let (k_sbn, before) = partition(bytes.len(), k, e, *sbn as usize);
                if esi < k_sbn {
                    let at = (before + esi) * e;
                    let want = &bytes[at.min(bytes.len())..(at + e).min(bytes.len())];
                    assert_eq!(&sym[..want.len()], want, "sbn {sbn} esi {esi}");
                }
            }
        }
        assert!(per_codeword.len() > 3, "{per_codeword:?}");

        let r = server.req("DELETE", &format!("/v1/broadcasts/{id}"), None);
        assert_eq!(r.status, 204, "{}", r.body);
        std::thread::sleep(Duration::from_millis(300));
        let after0 = server.metrics().get("isnode_broadcast_bytes_sent_total");
        std::thread::sleep(Duration::from_millis(500));
        let after1 = server.metrics().get("isnode_broadcast_bytes_sent_total");
        assert_eq!(after0, after1, "a deleted broadcast still sends");
        let list = server.req("GET", "/v1/broadcasts", None).json();
        assert_eq!(list["broadcasts"].as_array().map(Vec::len), Some(0));
    });
}

#[test]
fn repair_packets_go_to_the_repair_groups_only() {
    let ns = Netns::with_loopback_multicast();
    ns.run(|| {
        let vol = Vol::create(&[]);
        let bytes = vol.add_ts("clip.ts", 2_000_000, 20.0, 3);
        let server = Server::start(&vol, &[]);
        let body =
            json!({"object": "clip.ts", "scheme": "skyscraper", "max_wait_s": 3.0}).to_string();
        let r = server.req("POST", "/v1/broadcasts", Some(&body));
        assert_eq!(r.status, 201, "{}", r.body);
        let info = r.json();
        let k = info["fec"]["max_source_block_length"].as_u64().unwrap() as usize;
        let e = info["fec"]["symbol_size"].as_u64().unwrap() as usize;
        let is_source = |p: &(Ipv4Addr, u32, u32, u32, Vec<u8>)| {
            (p.3 as usize) < partition(bytes.len(), k, e, p.2 as usize).0
        };
        let c0 = &info["channels"][0];
        let (s, r) = (addr(&c0["source"]), addr(&c0["repair"]));
        // A clean receiver joins the source group only: it never sees a repair symbol.
        let clean = receive(&join(s.port(), &[v4(s)]), Duration::from_secs(3));
        assert!(clean.fdts >= 1, "no FDT on the source group");
        assert!(!clean.packets.is_empty());
        assert!(
            clean.packets.iter().all(is_source),
            "a repair symbol on a source group"
        );
        drop(clean);
        let repair_only = {
            let sock = join_at(v4(r), r.port(), &[v4(r)]);
            receive(&sock, Duration::from_secs(3))
        };
        assert!(!repair_only.packets.is_empty());
        assert!(
            !repair_only.packets.iter().any(is_source),
            "a source symbol on a repair group"
        );
    });
}

#[test]
fn bad_broadcast_requests_are_a_clear_4xx_and_change_nothing() {
    let vol = Vol::create(&[]);
    vol.add_ts("clip.ts", 2_000_000, 10.0, 5);
    let server = Server::start(&vol, &[]);
    let post = |v: Value| server.req("POST", "/v1/broadcasts", Some(&v.to_string()));
    let cases = [
        (
            json!({"object": "clip.ts", "scheme": "nope", "max_wait_s": 3.0}),
            400,
            "unknown",
        ),
        (
            json!({"object": "clip.ts", "scheme": "fast", "max_wait_s": 0.01}),
            400,
            "wait",
        ),
        (
            json!({"object": "clip.ts", "scheme": "fast", "max_wait_s": -1.0}),
            400,
            "max_wait_s",
        ),
        (
            json!({"object": "missing.ts", "scheme": "fast", "max_wait_s": 3.0}),
            404,
            "missing",
        ),
        (
            json!({"object": "clip.ts", "scheme": "fast", "max_wait_s": 3.0,
                   "source_groups": ["238.1.1.1"], "repair_groups": ["239.255.9.9"]}),
            400,
            "outside",
        ),
        (
            json!({"object": "clip.ts", "scheme": "fast", "max_wait_s": 3.0,
                   "source_groups": ["239.255.9.8"], "repair_groups": []}),
            400,
            "repair_groups",
        ),
        (
            json!({"object": "clip.ts", "scheme": "fast", "max_wait_s": 3.0, "ip_version": 5}),
            400,
            "ip_version",
        ),
        (
            json!({"object": "clip.ts", "scheme": "fast"}),
            400,
            "max_wait_s",
        ),
    ];
    for (body, status, needle) in cases {
        let r = post(body.clone());
        assert_eq!(r.status, status, "{body}: {}", r.body);
        let err = r.json();
        let msg = err["error"].as_str().unwrap_or_default();
        assert!(msg.contains(needle), "{body}: {msg:?} lacks {needle:?}");
    }
    let r = server.req("POST", "/v1/broadcasts", Some("{not json"));
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(
        server.req("DELETE", "/v1/broadcasts/nope", None).status,
        404
    );
    assert_eq!(server.req("GET", "/v1/broadcasts/nope", None).status, 404);
    let list = server.req("GET", "/v1/broadcasts", None).json();
    assert_eq!(list["broadcasts"].as_array().map(Vec::len), Some(0));
    assert_eq!(server.metrics().get("isnode_broadcasts_started_total"), 0.0);
}

/// A standard FLUTE receiver (the `flute` crate) that joins every group of a broadcast
/// rebuilds the file: the channels are the ALC/LCT channels of one FLUTE session (RFC 6726
/// §2), the FDT comes on every source group.
#[test]
fn a_standard_flute_receiver_on_all_groups_rebuilds_the_file() {
    use flute::core::UDPEndpoint;
    use flute::receiver::writer::ObjectWriterBufferBuilder;
    use flute::receiver::MultiReceiver;
    use std::rc::Rc;
    use std::time::SystemTime;

    let ns = Netns::with_loopback_multicast();
    ns.run(|| {
        let vol = Vol::create(&[]);
        let bytes = vol.add_ts("flute.ts", 2_000_000, 6.0, 17);
        let server = Server::start(&vol, &[]);
        let body = json!({"object": "flute.ts", "scheme": "fast", "max_wait_s": 2.0}).to_string();
        let r = server.req("POST", "/v1/broadcasts", Some(&body));
        assert_eq!(r.status, 201, "{}", r.body);
        let info = r.json();
        let socks: Vec<UdpSocket> = info["channels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                let (s, r) = (addr(&c["source"]), addr(&c["repair"]));
                let sock = join(s.port(), &[v4(s), v4(r)]);
                sock.set_nonblocking(true).unwrap();
                sock
            })
            .collect();
        let writer = Rc::new(ObjectWriterBufferBuilder::new(true));
        let mut receiver = MultiReceiver::new(writer.clone(), None, false);
        // One FLUTE session: every channel's packets under one endpoint.
        let endpoint = UDPEndpoint::new(None, "239.255.0.1".to_owned(), 30000);
        let complete =
            |w: &ObjectWriterBufferBuilder| w.objects.borrow().iter().any(|o| o.borrow().complete);
        let mut buf = vec![0u8; 65536];
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline && !complete(&writer) {
            let mut any = false;
            for s in &socks {
                while let Ok(n) = s.recv(&mut buf) {
                    any = true;
                    receiver
                        .push(&endpoint, &buf[..n], SystemTime::now())
                        .unwrap_or_else(|e| panic!("flute refused a packet: {e:?}"));
                }
            }
            if !any {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        let objects = writer.objects.borrow();
        let obj = objects
            .iter()
            .find(|o| o.borrow().complete)
            .expect("flute completed the object");
        let obj = obj.borrow();
        assert!(!obj.error);
        assert!(obj.data == bytes, "flute's object differs from the title");
    });
}

/// Issue 17: a requested broadcast has an end. One asking to run past the server's maximum
/// (by `duration_s`, `until` or `cycles`) is refused, one naming no end gets the default,
/// and one of two seconds stops by itself and leaves the list.
#[test]
fn a_broadcast_ends_by_itself_and_one_that_would_never_end_is_refused() {
    let ns = Netns::with_loopback_multicast();
    ns.run(|| {
        let vol = Vol::create(&[]);
        vol.add_ts("clip.ts", 2_000_000, 10.0, 5);
        let server = Server::start(&vol, &["--broadcast-max-duration-s", "7200"]);
        let post = |v: &Value| server.req("POST", "/v1/broadcasts", Some(&v.to_string()));
        let with = |k: &str, v: Value| {
            let mut b = json!({"object": "clip.ts", "scheme": "fast", "max_wait_s": 3.0});
            b[k] = v;
            b
        };
        let now_s = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("a clock after 1970")
            .as_secs();
        let too_long = [
            with("duration_s", json!(7201.0)),
            with("until", json!(now_s + 8000)),
            with("cycles", json!(1_000_000)),
        ];
        for body in &too_long {
            let r = post(body);
            assert_eq!(r.status, 400, "{body}: {}", r.body);
            let err = r.json();
            let msg = err["error"].as_str().unwrap_or_default();
            assert!(msg.contains("--broadcast-max-duration-s"), "{body}: {msg}");
        }
        let mut both = with("duration_s", json!(5.0));
        both["cycles"] = json!(2);
        assert_eq!(post(&both).status, 400);
        assert_eq!(post(&with("until", json!(now_s - 10))).status, 400);
        assert_eq!(server.metrics().get("isnode_broadcasts_started_total"), 0.0);

        // No end named: the default, an hour.
        let r = post(&with("max_wait_s", json!(3.0)));
        assert_eq!(r.status, 201, "{}", r.body);
        let info = r.json();
        let remaining = info["remaining_s"].as_f64().expect("remaining_s");
        assert!(remaining > 3500.0 && remaining <= 3600.0, "{info}");
        let id = info["id"].as_str().expect("id");
        assert_eq!(
            server
                .req("DELETE", &format!("/v1/broadcasts/{id}"), None)
                .status,
            204
        );

        // A cycle of the plan is at most the title's duration here.
        let r = post(&with("cycles", json!(1)));
        assert_eq!(r.status, 201, "{}", r.body);
        let info = r.json();
        let remaining = info["remaining_s"].as_f64().expect("remaining_s");
        assert!(remaining > 0.0 && remaining <= 10.5, "{info}");

        // Two seconds: it stops by itself.
        let r = post(&with("duration_s", json!(2.0)));
        assert_eq!(r.status, 201, "{}", r.body);
        let id = r.json()["id"].as_str().expect("id").to_string();
        let deadline = Instant::now() + Duration::from_secs(30);
        let path = format!("/v1/broadcasts/{id}");
        while server.req("GET", &path, None).status == 200 {
            assert!(
                Instant::now() < deadline,
                "the broadcast did not stop by itself"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(server.req("GET", &path, None).status, 404);
        let list = server.req("GET", "/v1/broadcasts", None).json();
        let ids: Vec<&str> = list["broadcasts"]
            .as_array()
            .expect("broadcasts")
            .iter()
            .filter_map(|b| b["id"].as_str())
            .collect();
        assert!(!ids.contains(&id.as_str()), "{list}");
    });
}

/// Issue 17: broadcasts have a budget of their own (`--broadcast-budget-percent`, 50 % of
/// the bitrate budget by default): broadcasts are started until one is refused with a `503`
/// naming that budget, and a viewer's unicast session request still succeeds.
#[test]
fn broadcasts_cannot_starve_unicast() {
    let ns = Netns::with_loopback_multicast();
    ns.run(|| {
        let vol = Vol::create(&[]);
        vol.add_ts("clip.ts", 2_000_000, 10.0, 5);
        // 40 Mbit/s in all, 20 of them for broadcasts: each of these takes ~5-7.
        let server = Server::start(&vol, &["--max-bitrate-bps", "40000000"]);
        let body = json!({"object": "clip.ts", "scheme": "fast", "max_wait_s": 3.0}).to_string();
        let mut started = 0;
        let refusal = loop {
            let r = server.req("POST", "/v1/broadcasts", Some(&body));
            match r.status {
                201 => started += 1,
                503 => break r.json(),
                s => panic!("broadcast request: {s}: {}", r.body),
            }
            assert!(started < 20, "20 broadcasts of ~6 Mbit/s within 20 Mbit/s");
        };
        assert!(started >= 1, "{refusal}");
        assert_eq!(refusal["limit"], "broadcast_budget_bps", "{refusal}");
        assert_eq!(refusal["value"], 20_000_000, "{refusal}");
        let msg = refusal["error"].as_str().unwrap_or_default();
        assert!(msg.contains("broadcast budget"), "{msg}");
        let sink = UdpSocket::bind("127.0.0.1:0").expect("a sink");
        let r = server.post_session("clip.ts", sink.local_addr().expect("addr").port());
        assert_eq!(
            r.status, 201,
            "a viewer's session beside the broadcasts: {}",
            r.body
        );
        let m = server.metrics();
        assert_eq!(
            m.get("isnode_sessions_refused_total{limit=\"broadcast_budget_bps\"}"),
            1.0
        );
    });
}
