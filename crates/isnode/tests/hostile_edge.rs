//! An edge under hostile load (issue 30, item 6), in CI: its origin stops answering; 1000
//! anonymous requests from 100 addresses ask for titles being filled and hang up; 500 ask
//! for names the origin lacks; strangers probe its health and spill; meanwhile 10 viewers
//! read titles the edge holds and an operator uploads 2 titles. Every viewer's bytes are
//! identical, both uploads are `201`, the volume stays within its quota, and the server's
//! threads and memory stay within the bounds stated here.

mod serve_support;

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serve_support::stalling_origin::{Answers, StallingOrigin};
use serve_support::*;

/// Most threads the server may run under the flood (data plane, API, origin runtime,
/// background threads, at most 16 fills and 32 catalog threads, and slack).
const MAX_THREADS: u64 = 128;
/// Most resident memory under the flood.
const MAX_RSS_BYTES: u64 = 512 << 20;
/// The volume's quota.
const QUOTA_BYTES: u64 = 60_000_000;

/// Client `i`: a loopback address of its own.
fn client(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(
        127,
        0,
        2 + (i / 200) as u8,
        2 + (i % 200) as u8,
    ))
}

fn send_get(server: SocketAddr, from: IpAddr, path: &str) -> Option<TcpStream> {
    use socket2::{Domain, Socket, Type};
    let sock = Socket::new(Domain::IPV4, Type::STREAM, None).ok()?;
    sock.bind(&SocketAddr::new(from, 0).into()).ok()?;
    sock.connect_timeout(&server.into(), Duration::from_secs(5))
        .ok()?;
    let mut s: TcpStream = sock.into();
    let req = format!("GET {path} HTTP/1.1\r\nHost: {server}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).ok()?;
    Some(s)
}

/// Threads of process `pid`.
fn threads(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// The strangers: 1000 requests for titles being filled (hung up after 1 s, in batches of
/// 100), 500 for names the origin lacks, health probes and spills in between.
fn flood(server: SocketAddr, done: &AtomicBool) -> u64 {
    let mut sent = 0u64;
    for batch in 0..10 {
        let conns: Vec<TcpStream> = (0..100)
            .filter_map(|i| {
                let n = batch * 100 + i;
                let path = match n % 3 {
                    0 => format!("/v1/objects/film{n}.ts/index"),
                    1 => format!("/o/film{n}.ts?isnode_spill=1"),
                    _ => format!("/v1/objects/film{n}.ts/digests?from=0"),
                };
                send_get(server, client(n % 100), &path)
            })
            .collect();
        sent += conns.len() as u64;
        for i in 0..50 {
            let n = batch * 50 + i;
            let _ = try_http(
                server,
                Some(client(n % 100)),
                "GET",
                &format!("/o/missing{n}.ts"),
                None,
                &[],
            );
            let _ = try_http(
                server,
                Some(client(n % 100)),
                "GET",
                "/v1/health",
                None,
                &[],
            );
        }
        std::thread::sleep(Duration::from_secs(1));
        drop(conns);
    }
    done.store(true, Ordering::Relaxed);
    sent
}

#[test]
fn an_edge_under_hostile_load_keeps_its_viewers_and_uploads() {
    let vol = Vol::create(SMALL_SHAPE);
    let mut held = Vec::new();
    for i in 0..5 {
        held.push(vol.add_ts(&format!("held{i}.ts"), 2_000_000, 6.0, 10 + i));
    }
    let origin = StallingOrigin::start(Answers::MissingNames);
    let endpoint = format!("http://{}", origin.addr);
    let quota = QUOTA_BYTES.to_string();
    let server = Server::start_env(
        &vol,
        &[
            "--origin",
            "s3://films",
            "--origin-endpoint",
            &endpoint,
            "--max-volume-bytes",
            &quota,
        ],
        &[
            ("AWS_ACCESS_KEY_ID", "GKfake"),
            ("AWS_SECRET_ACCESS_KEY", "fake-secret"),
        ],
    );
    let done = AtomicBool::new(false);
    let (max_threads, max_rss) = std::thread::scope(|s| {
        let flood = s.spawn(|| flood(server.addr, &done));
        let viewers: Vec<_> = (0..10)
            .map(|v| {
                let (server, held) = (&server, &held);
                s.spawn(move || {
                    let i = v % held.len();
                    (
                        i,
                        read_body(server.addr, &format!("/o/held{i}.ts")) == held[i],
                    )
                })
            })
            .collect();
        let uploads: Vec<_> = (0..2)
            .map(|u| {
                let (server, vol) = (&server, &vol);
                s.spawn(move || {
                    let file = vol.path(&format!("up{u}.ts"));
                    gen_ts(&file, 2_000_000, 3.0, 40 + u);
                    command()
                        .args(["ingest", "--server", &server.url()])
                        .arg(&file)
                        .output()
                        .unwrap()
                })
            })
            .collect();
        let (mut max_threads, mut max_rss) = (0, 0);
        while !done.load(Ordering::Relaxed) {
            max_threads = max_threads.max(threads(server.pid()));
            max_rss = max_rss.max(server.rss_bytes());
            std::thread::sleep(Duration::from_millis(100));
        }
        for v in viewers {
            let (i, same) = v.join().unwrap();
            assert!(same, "a viewer's held{i}.ts differs during the flood");
        }
        for u in uploads {
            let out = u.join().unwrap();
            assert!(
                out.status.success(),
                "an upload failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let sent = flood.join().unwrap();
        eprintln!("flood: {sent} fill requests sent; max threads {max_threads}, max RSS {max_rss}");
        (max_threads, max_rss)
    });
    // And whole again after it.
    let t0 = Instant::now();
    for (i, want) in held.iter().enumerate() {
        let got = read_body(server.addr, &format!("/o/held{i}.ts"));
        assert!(&got == want, "held{i}.ts differs after the flood");
    }
    eprintln!("held titles read again in {:?}", t0.elapsed());
    assert!(
        max_threads <= MAX_THREADS,
        "threads: {max_threads} > {MAX_THREADS}"
    );
    assert!(max_rss <= MAX_RSS_BYTES, "RSS: {max_rss} > {MAX_RSS_BYTES}");
    let used = segment_bytes(&vol.root);
    assert!(used <= QUOTA_BYTES, "segment files: {used} > {QUOTA_BYTES}");
}

/// `GET path`'s body as bytes (a plain `Content-Length` or chunked answer).
fn read_body(server: SocketAddr, path: &str) -> Vec<u8> {
    let mut s = TcpStream::connect_timeout(&server, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {server}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    let split = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&all[..split]).to_ascii_lowercase();
    let body = all[split + 4..].to_vec();
    if !head.contains("transfer-encoding: chunked") {
        return body;
    }
    let (mut out, mut rest) = (Vec::new(), &body[..]);
    while let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") {
        let size =
            usize::from_str_radix(std::str::from_utf8(&rest[..eol]).unwrap().trim(), 16).unwrap();
        rest = &rest[eol + 2..];
        if size == 0 {
            break;
        }
        out.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
    out
}
