//! Uploads and the volume's quota: concurrent uploads share it (each reserves its room
//! before its body), and a client that goes away mid-body is counted.

use super::*;

/// The server of [`volume`] with a quota of `max_volume_bytes`.
fn server_with_quota(dir: &tempfile::TempDir, max_volume_bytes: u64) -> ServerHandle {
    let args = ServeConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        cache_size_bytes: 2 << 20,
        threads: Some(1),
        min_dest_port: 1,
        validate_destination: isnode_serve_config::ValidateDestination::Off,
        max_volume_bytes: Some(max_volume_bytes),
        ..ServeConfig::default()
    };
    start(dir.path(), &args).unwrap()
}

/// Sends the head of an upload of `len` bytes to `name` (with `Expect: 100-continue`,
/// so the server answers before the body when it refuses).
fn send_head(addr: SocketAddr, name: &str, len: usize) -> TcpStream {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(ANSWER_BOUND)).unwrap();
    write!(
        s,
        "PUT /v1/objects/{name}?bitrate_bps=1000000 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\
         Expect: 100-continue\r\nContent-Length: {len}\r\n\r\n"
    )
    .unwrap();
    s
}

/// The status of the next answer's head on `s` (`100` for the interim answer).
fn read_status(s: &mut TcpStream) -> u16 {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(1) => head.push(b[0]),
            // The server's threads may signal one another (a read is then retried).
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            _ => break,
        }
    }
    let text = String::from_utf8_lossy(&head);
    text.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// Bytes the volume's objects take now.
fn stored_now(server: &ServerHandle) -> u64 {
    server
        .shared
        .control
        .objects
        .with_volume(isnode_store::spool::volume_bytes)
        .unwrap()
}

#[test]
fn two_uploads_that_fit_the_quota_alone_but_not_together_one_is_refused() {
    let dir = volume();
    let len = 150_000usize;
    let one = isnode_store::spool::stored_bytes(crate::test_params(), len as u64).unwrap();
    // Room for one upload and half of another.
    let probe = server(&dir);
    let settled = stored_now(&probe);
    drop(probe);
    let server = server_with_quota(&dir, settled + one + one / 2);
    let addr = server.local_addr();
    // Both heads are in before either body: both prechecks race.
    let mut conns = [send_head(addr, "x.bin", len), send_head(addr, "y.bin", len)];
    let mut statuses = Vec::new();
    for s in &mut conns {
        let status = match read_status(s) {
            100 => {
                let body: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
                s.write_all(&body).unwrap();
                read_status(s)
            }
            other => other,
        };
        statuses.push(status);
    }
    statuses.sort_unstable();
    assert_eq!(
        statuses,
        [201, 507],
        "one upload fits, the other is refused"
    );
    assert!(
        stored_now(&server) <= settled + one + one / 2,
        "the quota held"
    );
    assert_eq!(
        server.shared.control.uploads.reserved_bytes(),
        0,
        "the room given back"
    );
    // The room of the refused one was never taken: a small upload still fits.
    let mut s = send_head(addr, "z.bin", 1000);
    assert_eq!(read_status(&mut s), 100);
    s.write_all(&[5u8; 1000]).unwrap();
    assert_eq!(read_status(&mut s), 201);
}

#[test]
fn a_client_gone_mid_upload_is_counted_as_disconnected() {
    let dir = volume();
    let server = server(&dir);
    let addr = server.local_addr();
    let mut s = send_head(addr, "gone.bin", 1_000_000);
    assert_eq!(read_status(&mut s), 100);
    s.write_all(&[1u8; 10_000]).unwrap();
    drop(s);
    let want = "isnode_upload_failures_total{reason=\"disconnected\"} 1";
    let deadline = std::time::Instant::now() + ANSWER_BOUND;
    loop {
        let (status, text) = http(addr, "GET", "/metrics", "").unwrap();
        assert_eq!(status, 200);
        if text.contains(want) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not counted as disconnected:\n{}",
            text.lines()
                .filter(|l| l.contains("upload_failures"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The ingest thread ends once it sees the cut, and gives the room back.
    while server.shared.control.uploads.reserved_bytes() != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the room never given back"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (status, _) = http(addr, "GET", "/v1/objects/gone.bin", "").unwrap();
    assert_eq!(status, 404, "nothing kept");
}
