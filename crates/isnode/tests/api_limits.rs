//! The data plane never depends on the control plane's resources (issue 11): under a
//! 1024-descriptor limit, 1100 idle TCP connections and a few "slowloris" ones dribbling
//! header bytes leave a playing stream byte-identical and the API answering; idle and slow
//! connections are closed after the API's timeouts.

mod serve_support;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serve_support::*;

/// Idle connections the attacker opens (more than the server's descriptor limit).
const IDLE_CONNECTIONS: usize = 1100;
/// Connections sending their request head one byte at a time.
const SLOW_CONNECTIONS: usize = 20;
/// The server's open files limit (soft and hard).
const SERVER_NOFILE: u64 = 1024;
/// How long a probe of the API may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// Raises this process's soft open files limit to its hard limit (the test holds more
/// than a thousand sockets).
fn raise_own_nofile() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to an rlimit.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        lim.rlim_cur = lim.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
    }
    lim.rlim_cur
}

/// `GET /v1/objects` on a new connection, everything bounded by [`PROBE_TIMEOUT`]; the
/// status, or why there was none.
fn probe(addr: SocketAddr) -> Result<u16, String> {
    let t0 = Instant::now();
    let mut s = TcpStream::connect_timeout(&addr, PROBE_TIMEOUT).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(PROBE_TIMEOUT))
        .map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(PROBE_TIMEOUT))
        .map_err(|e| e.to_string())?;
    s.write_all(b"GET /v1/objects HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)
        .map_err(|e| format!("after {:?}: {e}", t0.elapsed()))?;
    let head = String::from_utf8_lossy(&raw);
    head.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no HTTP answer: {head:?}"))
}

/// True if the server has closed `s` (EOF or reset), waiting at most `within`.
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return true,
        }
    }
    false
}

/// True if the server has closed `s` already (EOF or reset), without waiting.
fn is_closed_now(s: &TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 64];
    let mut r = s;
    let closed = match r.read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != ErrorKind::WouldBlock,
    };
    s.set_nonblocking(false).unwrap();
    closed
}

/// Opens `n` connections (those the kernel completes within a second each).
fn open_idle(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    (0..n)
        .filter_map(|_| TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok())
        .collect()
}

/// Dribbles a request head into each of `SLOW_CONNECTIONS` connections, a byte per
/// connection every 100 ms, until `stop`; returns how many the server closed.
fn slowloris(addr: SocketAddr, stop: &AtomicBool) -> usize {
    let head = b"GET /v1/objects HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let mut conns: Vec<Option<TcpStream>> = (0..SLOW_CONNECTIONS)
        .map(|_| TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok())
        .collect();
    let mut closed = 0;
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        let byte = [head.get(i % head.len()).copied().unwrap_or(b'a')];
        for c in conns.iter_mut() {
            let Some(s) = c else { continue };
            if s.write_all(&byte).is_err() {
                *c = None;
                closed += 1;
            }
        }
        i += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    closed
}

/// 1100 idle and 20 slow connections against a server at a 1024-descriptor limit while
/// a stream plays: the output is identical, the server lost no codeword and read every
/// block it needed, and the API answers every probe within a few seconds. (Before the
/// fix, the API stopped answering and the stream lost codewords: block reads opened
/// segment files and the opens failed with EMFILE.)
#[test]
fn idle_and_slow_connections_do_not_hurt_a_playing_stream() {
    assert!(
        raise_own_nofile() > (IDLE_CONNECTIONS + SLOW_CONNECTIONS + 100) as u64,
        "the test needs more descriptors than its hard limit allows"
    );
    let vol = Vol::create(&["--block-size", "65536"]);
    let original = vol.add_ts("long.ts", 4_000_000, 8.0, 31);
    let cache = (32u64 << 20).to_string();
    let server = Server::start_limited(
        &vol,
        &["--cache-size", &cache, "--threads", "2"],
        &[],
        Some(SERVER_NOFILE),
    );
    let addr = server.addr;
    let stop = AtomicBool::new(false);
    let (played, probes, evicted, slow_closed) = std::thread::scope(|s| {
        let player = s.spawn(|| {
            let extra = [
                "--as-fast-as-possible",
                "--timeout-s",
                "5",
                "--max-seconds",
                "60",
            ];
            let deadline = Instant::now() + Duration::from_secs(60);
            play_run(&server, &vol, "long.ts", "flooded", &extra, deadline)
        });
        std::thread::sleep(Duration::from_millis(1000));
        let slow = s.spawn(|| slowloris(addr, &stop));
        let idle = open_idle(addr, IDLE_CONNECTIONS);
        println!("{} idle connections open", idle.len());
        let mut probes = Vec::new();
        for _ in 0..6 {
            probes.push(probe(addr));
            std::thread::sleep(Duration::from_millis(300));
        }
        let evicted = idle.iter().filter(|c| is_closed_now(c)).count();
        let played = player.join().expect("the player thread");
        stop.store(true, Ordering::Relaxed);
        let slow_closed = slow.join().expect("the slowloris thread");
        drop(idle);
        (played, probes, evicted, slow_closed)
    });
    println!(
        "probes: {probes:?}; idle connections closed by the server: {evicted}; slow: {slow_closed}"
    );
    for (i, p) in probes.iter().enumerate() {
        assert_eq!(
            p,
            &Ok(200),
            "probe {i} of the API while the connections were held\n{}",
            server.log_text()
        );
    }
    assert!(
        played.status.success(),
        "isnode play failed: {}\n{}\n{}",
        played.status,
        played.log,
        server.log_text()
    );
    assert!(played.bytes() == original, "the played output differs");
    let m = server.metrics();
    assert_eq!(m.get("isnode_packets_skipped_total"), 0.0, "{}", m.0);
    for member in 0..8 {
        let series = format!("isnode_member_errors_total{{member=\"{member}\"}}");
        assert_eq!(m.get(&series), 0.0, "{series}\n{}", m.0);
    }
    // The server never ran out of descriptors: its budget held.
    let log = server.log_text();
    assert!(!log.contains("Too many open files"), "{log}");
    // Beyond its cap (below the descriptor limit) the server closed the oldest idle ones.
    assert!(
        evicted >= IDLE_CONNECTIONS - SERVER_NOFILE as usize,
        "only {evicted} of {IDLE_CONNECTIONS} idle connections were closed"
    );
}

/// Reads one response (head and `Content-Length` body) from a kept-alive connection;
/// its status.
fn read_response(s: &mut TcpStream) -> u16 {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    let split = loop {
        let n = s.read(&mut buf).expect("reading a response");
        assert!(n > 0, "the connection closed before its response");
        raw.extend_from_slice(&buf[..n]);
        if let Some(p) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        assert!(raw.len() < 1 << 20, "a response head without end");
    };
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("a content-length");
    while raw.len() < split + len {
        let n = s.read(&mut buf).expect("reading a response body");
        assert!(n > 0, "the connection closed inside its response");
        raw.extend_from_slice(&buf[..n]);
    }
    head.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status")
}

/// A connection that sends nothing, one that dribbles its request head, one whose
/// request body stalls, and a kept-alive one after its answer are all closed by the server after its header and idle timeouts
/// (before the fix none was ever closed), while a prompt request is answered.
#[test]
fn idle_and_slow_connections_are_closed_after_the_timeouts() {
    let vol = Vol::create(&[]);
    vol.add_ts("a.ts", 1_000_000, 1.0, 5);
    let server = Server::start(
        &vol,
        &[
            "--api-header-timeout-ms",
            "500",
            "--api-idle-timeout-ms",
            "1000",
        ],
    );
    let addr = server.addr;
    let bound = Duration::from_secs(8);

    let mut silent = TcpStream::connect(addr).unwrap();
    assert!(
        closed_within(&mut silent, bound),
        "a silent connection was not closed"
    );

    let mut slow = TcpStream::connect(addr).unwrap();
    let head = b"GET /v1/objects HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let t0 = Instant::now();
    let mut cut = false;
    for b in head.iter().cycle() {
        if slow.write_all(&[*b]).is_err() || closed_within(&mut slow, Duration::from_millis(50)) {
            cut = true;
            break;
        }
        if t0.elapsed() > bound {
            break;
        }
    }
    assert!(
        cut,
        "a connection dribbling its request head was not closed"
    );

    // A request whose body never comes whole.
    let mut body = TcpStream::connect(addr).unwrap();
    body.write_all(
        b"POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"object\"",
    )
    .unwrap();
    assert!(
        closed_within(&mut body, bound),
        "a request whose body stalls kept its connection"
    );

    let mut kept = TcpStream::connect(addr).unwrap();
    kept.write_all(b"GET /v1/objects HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut kept), 200);
    // Still usable for a second request right away.
    kept.write_all(b"GET /v1/objects HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut kept), 200);
    assert!(
        closed_within(&mut kept, bound),
        "an idle kept-alive connection was not closed"
    );
    assert_eq!(probe(addr), Ok(200));
}

/// Objects added after the start (uploads, each then read so that its segment files stay
/// open) on a server at a 1024-descriptor limit: once the descriptors its start-time
/// budget keeps for API connections would be taken, an upload is refused with `507`
/// naming the open files limit, every stored object still reads, and the API still
/// answers. (Before the fix the budget was computed once at start: the objects ate the
/// API's descriptors, and reads and connections failed with EMFILE.)
#[test]
fn objects_added_after_the_start_leave_the_api_its_descriptors() {
    let vol = Vol::create(&["--block-size", "65536"]);
    let server = Server::start_limited(
        &vol,
        &["--threads", "2", "--api-max-connections", "64"],
        &[],
        Some(SERVER_NOFILE),
    );
    let body = "x".repeat(4096);
    let mut stored = Vec::new();
    let mut refusal = None;
    for i in 0..300 {
        let name = format!("f{i}.bin");
        let path = format!("/v1/objects/{name}?bitrate_bps=1000000");
        let r = http(server.addr, None, "PUT", &path, Some(&body), &[]);
        if r.status != 201 {
            refusal = Some(r);
            break;
        }
        let read = server.req("GET", &format!("/o/{name}"), None);
        assert_eq!(read.status, 200, "reading {name}: {}", read.body);
        stored.push(name);
    }
    let refusal = refusal.expect("300 objects of 8 segment files each fit in 1024 descriptors");
    assert_eq!(refusal.status, 507, "{}", refusal.body);
    assert!(
        refusal.body.contains("open files limit"),
        "{}",
        refusal.body
    );
    assert!(
        stored.len() >= 8,
        "only {} objects before the refusal",
        stored.len()
    );
    for name in &stored {
        let read = server.req("GET", &format!("/o/{name}"), None);
        assert_eq!(read.status, 200, "reading {name} again: {}", read.body);
    }
    for _ in 0..32 {
        assert_eq!(probe(server.addr), Ok(200));
    }
    let log = server.log_text();
    assert!(!log.contains("Too many open files"), "{log}");
    println!("{} objects stored before the refusal", stored.len());
}

/// The server-side send buffer (`tb` of `ss -tm`, the kernel's doubled `SO_SNDBUF`) of the
/// connection from `client`, on the server at `server`.
fn server_send_buffer(server: SocketAddr, client: SocketAddr) -> u64 {
    let out = std::process::Command::new("ss")
        .args(["-tmnH", "state", "established"])
        .output()
        .expect("ss (iproute2) runs: scripts/test installs it");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let ours = line.contains(&format!(" {server} ")) && line.contains(&format!(" {client}"));
        let mem = lines.next().unwrap_or_default();
        if !ours {
            continue;
        }
        let tb = mem
            .split([',', '(', ')'])
            .find_map(|f| f.strip_prefix("tb"));
        return tb.and_then(|v| v.parse().ok()).expect("tb in ss's skmem");
    }
    panic!("no established connection {server} <- {client} in: {text}");
}

/// A reader that stops reading a large body: the server's socket keeps the send buffer
/// `--api-send-buffer-bytes` asks (the kernel doubles it) instead of autotuning up to
/// `tcp_wmem`'s 4 MiB, which holds the HTTP mirror's pages (0 gives autotuning back).
#[test]
fn a_slow_readers_socket_keeps_the_configured_send_buffer() {
    let vol = Vol::create(&[]);
    vol.add_ts("big.ts", 8_000_000, 8.0, 5);
    for (flag, bounded) in [("131072", true), ("0", false)] {
        let server = Server::start(&vol, &["--api-send-buffer-bytes", flag]);
        let mut s = TcpStream::connect(server.addr).expect("connect");
        s.write_all(b"GET /o/big.ts HTTP/1.1\r\nHost: x\r\n\r\n")
            .expect("request");
        let mut first = [0u8; 4096];
        s.read_exact(&mut first).expect("the answer starts");
        // The socket's queue fills while the reader waits.
        std::thread::sleep(Duration::from_millis(500));
        let local = s.local_addr().expect("addr");
        let tb = server_send_buffer(server.addr, local);
        match bounded {
            true => assert_eq!(tb, 2 * 131_072, "--api-send-buffer-bytes {flag}"),
            false => assert!(tb > 2 * 131_072, "autotuned buffer {tb}"),
        }
    }
}

/// A content reader is refused (`503`, saying memory is short) while the server's memory
/// cgroup cannot hold it: when the limit holds no reader's share beside the pool, the
/// server and the headroom (an eighth of the limit, at least 16 MiB), and when what the
/// group really holds leaves no headroom (here a process of the test's holding 480 MiB in
/// the same group); once there is room it is served. A node under a memory limit turns
/// players away instead of being ended, with all of them, by the kernel's OOM killer. The
/// server is moved into a group of the test's own (v1 or v2; root needed).
#[test]
fn content_readers_are_refused_while_the_memory_limit_leaves_no_room() {
    use isnode_bench::cgroup::{Cgroup, Limits};
    const MIB: u64 = 1 << 20;
    let vol = Vol::create(&[]);
    let title = vol.add_ts("t.ts", 2_000_000, 4.0, 9);
    let name = format!("isnode-t{}-memory-gate", std::process::id());
    let group = Cgroup::create(&name, Limits::default(), &vol.root)
        .expect("a memory cgroup of the test's own (root and cgroup controllers are needed)");
    let server = Server::start(&vol, &["--cache-size-bytes", &(32 * MIB).to_string()]);
    let get = |limit_bytes: u64| {
        group
            .set_memory_limit(limit_bytes)
            .expect("setting the limit");
        std::thread::sleep(Duration::from_millis(250)); // past the gate's last reading
        server.req("GET", "/o/t.ts", None)
    };
    assert_eq!(server.req("GET", "/o/t.ts", None).status, 200, "unlimited");
    group.add_process(server.pid()).expect("moving the server");
    let charged = group.memory_charged_bytes().expect("the group's usage");
    // 64 MiB: less than the 32 MiB pool, 24 MiB for the server and 16 MiB of headroom.
    let r = get(charged + 64 * MIB);
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(
        r.body.contains("holds 0 readers beside the pool"),
        "{}",
        r.body
    );
    // 512 MiB, of which another process of the group holds about 480 MiB (and the
    // headroom is 64 MiB): the shares fit, what is held does not leave the headroom.
    // (Allowed 32 MiB more, the holder leaves the headroom's eighth of the limit as room
    // to judge in, either side.)
    // It allocates once it is in the group (a line on its stdin), then says so.
    let script = "import sys, time; sys.stdin.readline(); b = b'x' * (470 << 20); \
                  print(1, flush=True); time.sleep(60)";
    let mut holder = std::process::Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 holding memory");
    let (mut stdin, stdout) = (holder.stdin.take(), holder.stdout.take());
    let holder = ChildGuard(Some(holder));
    group.add_process(holder.id()).expect("moving the holder");
    group
        .set_memory_limit(charged + 512 * MIB)
        .expect("raising the limit");
    stdin
        .as_mut()
        .expect("its stdin")
        .write_all(b"go\n")
        .expect("telling the holder");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(stdout.expect("its stdout")),
        &mut line,
    )
    .expect("the holder allocated");
    assert_eq!(line.trim(), "1", "the holder allocated");
    let r = get(charged + 512 * MIB);
    assert_eq!(r.status, 503, "with the holder: {}", r.body.len());
    assert!(r.body.contains("MiB kept free"), "{}", r.body);
    drop(holder);
    let r = get(charged + 512 * MIB);
    assert_eq!(r.status, 200, "once the holder is gone");
    assert_eq!(
        r.header("content-length"),
        Some(title.len().to_string().as_str())
    );
    let refused = "isnode_http_readers_refused_memory_total";
    assert_eq!(server.metrics().get(refused), 2.0);
    drop(server); // before the group, which is removed only once empty
}
