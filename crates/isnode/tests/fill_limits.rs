//! What strangers can ask of an edge's origin (issue 30): waits on fills are bounded per
//! client and in total and end when the client hangs up, so an origin that stops answering
//! cannot stall the titles the edge holds; a client starts few fills at once; a title the
//! origin lacks is answered `404` without asking the origin again for a while.
//!
//! The silent origin is a TCP listener on loopback that takes every connection and never
//! answers. Many clients are many loopback addresses (127.0.x.y).

mod serve_support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serve_support::fills::{kill_fill_past, Front};
use serve_support::stalling_origin::{Answers, StallingOrigin};
use serve_support::*;

/// An edge on `vol` whose origin is `origin` (bucket `films`, fake credentials).
fn edge(vol: &Vol, origin: SocketAddr) -> Server {
    let endpoint = format!("http://{origin}");
    Server::start_env(
        vol,
        &["--origin", "s3://films", "--origin-endpoint", &endpoint],
        &[
            ("AWS_ACCESS_KEY_ID", "GKfake"),
            ("AWS_SECRET_ACCESS_KEY", "fake-secret"),
        ],
    )
}

/// Client `i` of many: a loopback address of its own.
fn client(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(
        127,
        0,
        1 + (i / 200) as u8,
        2 + (i % 200) as u8,
    ))
}

/// 700 anonymous requests for the index of titles the edge lacks, from 70 clients, each
/// hanging up after 2 s, in batches (the issue's reproduction: 700 a minute). Before the
/// bounds, each held a blocking thread for a minute after its client left, and with 512 of
/// them taken the edge stopped answering for the titles it holds.
#[test]
fn waits_on_a_silent_origin_never_stall_the_titles_the_edge_holds() {
    let vol = Vol::create(SMALL_SHAPE);
    vol.add_ts("held.ts", 2_000_000, 8.0, 1);
    let origin = StallingOrigin::start(Answers::Nothing);
    let server = edge(&vol, origin.addr);
    for batch in 0..7 {
        let conns: Vec<TcpStream> = (0..100)
            .map(|i| {
                let n = batch * 100 + i;
                let path = format!("/v1/objects/missing{n}.ts/index");
                send_get(server.addr, client(n % 70), &path)
            })
            .collect();
        std::thread::sleep(Duration::from_secs(2));
        drop(conns);
    }
    // Read with a 10 s timeout each: the edge answers for what it holds at once.
    let t0 = Instant::now();
    let index = try_http(
        server.addr,
        None,
        "GET",
        "/v1/objects/held.ts/index",
        None,
        &[],
    )
    .expect("the index of a title the edge holds");
    assert_eq!(index.status, 200, "{}", index.body);
    let head = try_http(
        server.addr,
        Some(client(500)),
        "GET",
        "/o/held.ts",
        None,
        &[("Range", "bytes=0-1048575")],
    )
    .expect("the first megabyte of a title the edge holds");
    assert_eq!(head.status, 206, "{}", head.body);
    eprintln!("held title answered in {:?} after the flood", t0.elapsed());
    let m = server.metrics();
    let active = m.get("isnode_fills_active");
    assert!(
        active <= 16.0,
        "fills running: {active} (fill_max_active 16)"
    );
    // A new title from a new client is refused or waited on, never left hanging: the caps
    // answer at once.
    let r = try_http(
        server.addr,
        Some(client(600)),
        "GET",
        "/v1/objects/another.ts/index",
        None,
        &[],
    );
    if let Ok(r) = r {
        assert!(
            r.status == 503 || r.status == 502,
            "{} {}",
            r.status,
            r.body
        );
    }
}

/// One client's requests for many missing titles start at most `fill_max_per_client`
/// fills; another client may still start one.
#[test]
fn one_client_starts_at_most_its_share_of_fills() {
    let vol = Vol::create(SMALL_SHAPE);
    let origin = StallingOrigin::start(Answers::Nothing);
    let server = edge(&vol, origin.addr);
    let conns: Vec<TcpStream> = (0..10)
        .map(|i| send_get(server.addr, client(1), &format!("/o/m{i}.ts")))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut active = 0.0;
    while Instant::now() < deadline {
        active = server.metrics().get("isnode_fills_active");
        if active >= 4.0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // Give the other six requests time to be refused rather than started.
    std::thread::sleep(Duration::from_millis(500));
    let active = server.metrics().get("isnode_fills_active").max(active);
    assert_eq!(
        active, 4.0,
        "fills one client started (fill_max_per_client 4)"
    );
    let other = send_get(server.addr, client(2), "/o/other.ts");
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.metrics().get("isnode_fills_active") < 5.0 {
        assert!(
            Instant::now() < deadline,
            "another client could not start a fill"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    drop((conns, other));
}

/// A title the origin lacks is `404`; asked again within `origin_miss_ttl_s` it is `404`
/// without a request to the origin.
#[test]
fn a_title_the_origin_lacks_is_not_asked_for_again_at_once() {
    let vol = Vol::create(SMALL_SHAPE);
    let dir = vol.path("origin");
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("file://{}", dir.display());
    let server = Server::start(&vol, &["--origin", &url]);
    let r = server.req("GET", "/o/nope.ts", None);
    assert_eq!(r.status, 404, "{}", r.body);
    let asked = server.metrics().get("isnode_origin_requests_total");
    assert!(asked >= 1.0, "the origin was asked: {asked}");
    for _ in 0..5 {
        let r = server.req("GET", "/o/nope.ts", None);
        assert_eq!(r.status, 404, "{}", r.body);
    }
    let again = server.metrics().get("isnode_origin_requests_total");
    assert_eq!(
        again, asked,
        "the origin was asked again for a title it lacked"
    );
}

/// The issue's reproduction: an edge with a `file://` origin of 16 titles of 5 MB and a
/// 25 MB quota, asked anonymously for each title and 500 names the origin lacks, stays
/// within its quota (fills evict the titles nothing uses) and takes an operator's 2 MB
/// upload afterwards. Before, fills ignored the quota and the upload was refused with 507.
#[test]
fn fills_stay_within_the_quota_and_leave_room_for_uploads() {
    let vol = Vol::create(SMALL_SHAPE);
    let dir = vol.path("origin");
    std::fs::create_dir_all(&dir).unwrap();
    for i in 0..16u64 {
        gen_ts(&dir.join(format!("t{i}.ts")), 8_000_000, 5.0, 100 + i);
    }
    let url = format!("file://{}", dir.display());
    let server = Server::start(&vol, &["--origin", &url, "--max-volume-bytes", "25000000"]);
    let mut served = 0;
    for i in 0..16 {
        let r = try_http(server.addr, None, "GET", &format!("/o/t{i}.ts"), None, &[]);
        match r {
            Ok(r) if r.status == 200 => served += 1,
            Ok(r) => assert!([503, 507].contains(&r.status), "{} {}", r.status, r.body),
            Err(e) => panic!("GET /o/t{i}.ts: {e}"),
        }
    }
    assert!(served >= 8, "only {served} of 16 titles served");
    for i in 0..500 {
        let r = server.req("GET", &format!("/o/missing{i}.ts"), None);
        assert_eq!(r.status, 404, "{}", r.body);
    }
    let used = segment_bytes(&vol.root);
    assert!(
        used <= 25_000_000,
        "segment files take {used} bytes (quota 25000000)"
    );
    let up = vol.path("up.ts");
    gen_ts(&up, 4_000_000, 4.0, 7);
    let out = command()
        .args(["ingest", "--server", &server.url()])
        .arg(&up)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the operator's upload was refused: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A fill that failed part way leaves a partial object that `DELETE` removes (it answered
/// `404` before) and that the next fill may evict.
#[test]
fn a_partial_fill_is_deletable() {
    let vol = Vol::create(SMALL_SHAPE);
    let dir = vol.path("origin");
    std::fs::create_dir_all(&dir).unwrap();
    gen_ts(&dir.join("cut.ts"), 8_000_000, 5.0, 3);
    let url = format!("file://{}", dir.display());
    {
        let mut server = Server::start(&vol, &["--origin", &url]);
        let body = r#"{"titles": ["cut.ts"], "rate_bps": 3000000}"#;
        let r = server.req("POST", "/v1/fills", Some(body));
        assert_eq!(r.status, 202, "{}", r.body);
        kill_fill_past(&mut server, "cut.ts", 3 << 19, Front::Any);
    }
    let partial = segment_bytes(&vol.root);
    assert!(partial > 0, "no partial fill left");
    // Without the origin, nothing resumes it: the partial object stays as it is.
    let server = Server::start(&vol, &[]);
    let r = server.req("DELETE", "/v1/objects/cut.ts", None);
    assert_eq!(r.status, 204, "{}", r.body);
    assert_eq!(
        segment_bytes(&vol.root),
        0,
        "the partial fill's files are left"
    );
}

/// An object uploaded here while a fill of the same name ran is kept: the fill gives way
/// (it failed with `409`, its partial object gone), where it used to replace the upload.
#[test]
fn a_fill_never_replaces_an_object_uploaded_while_it_ran() {
    let vol = Vol::create(SMALL_SHAPE);
    let dir = vol.path("origin");
    std::fs::create_dir_all(&dir).unwrap();
    gen_ts(&dir.join("race.ts"), 4_000_000, 6.0, 5);
    let url = format!("file://{}", dir.display());
    let server = Server::start(&vol, &["--origin", &url]);
    // 3 MB in 1 MiB ranges at 2 Mbit/s, about 12 s: the upload lands while it runs.
    let body = r#"{"titles": ["race.ts"], "rate_bps": 2000000}"#;
    let r = server.req("POST", "/v1/fills", Some(body));
    assert_eq!(r.status, 202, "{}", r.body);
    let upload = vol.path("race.ts");
    gen_ts(&upload, 2_000_000, 3.0, 6);
    let out = command()
        .args(["ingest", "--server", &server.url()])
        .arg(&upload)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let f = serve_support::fills::fill_of(&server, "race.ts");
        let phase = f
            .as_ref()
            .map(|f| f["phase"].as_str().unwrap_or("").to_string());
        if matches!(phase.as_deref(), Some("failed" | "done")) {
            let f = f.unwrap();
            assert_eq!(phase.as_deref(), Some("failed"), "{f}");
            assert!(
                f["error"].as_str().unwrap_or("").contains("uploaded"),
                "{f}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "the fill did not end: {f:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let r = http(server.addr, None, "GET", "/v1/objects/race.ts", None, &[]);
    assert_eq!(r.status, 200, "{}", r.body);
    let size = std::fs::metadata(&upload).unwrap().len();
    assert_eq!(r.json()["size_bytes"].as_u64(), Some(size), "{}", r.body);
}
