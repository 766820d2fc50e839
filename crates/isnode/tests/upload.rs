//! Upload and delete over HTTP (`PUT` / `DELETE /v1/objects/{name}`), end to end with the
//! real binary: byte-identical uploads (Content-Length, chunked, the CLI, curl), uploads
//! cut at random points (client killed, connection reset, server killed) leaving nothing,
//! quota and full-disk refusals (`507`) that change nothing, `If-None-Match: *` races,
//! progress timeouts, and deletes against live sessions.
//!
//! Every wait has a deadline; nothing asserts on timing.

mod serve_support;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use serve_support::{command, run_ok, udp, ChildGuard, Server, Vol};

/// The small volume shape (E=64, k=20, m=4, 6 members, 4 KiB blocks): quick ingests.
const SMALL: &[&str] = &[
    "--symbol-size",
    "64",
    "--source-symbols",
    "20",
    "--repair-symbols",
    "4",
    "--members",
    "6",
    "--block-size",
    "4096",
];

/// Deterministic bytes (SplitMix64).
fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x1234_5678;
    (0..len)
        .map(|_| {
            s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            (z ^ (z >> 31)) as u8
        })
        .collect()
}

/// How the body is framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Framing {
    Length,
    Chunked,
}

/// A raw answer: status, headers (lower-case names) and body bytes.
#[derive(Debug)]
struct Answer {
    status: u16,
    body: Vec<u8>,
}

impl Answer {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
}

/// A connection with timeouts.
fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connecting");
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(60))).unwrap();
    s
}

/// Sends a `PUT` head (with `Expect: 100-continue`) and returns the stream once the server
/// said `100 Continue`, or its final answer if it refused before the body.
fn put_head(
    addr: SocketAddr,
    path: &str,
    framing: Framing,
    len: usize,
    headers: &[(&str, &str)],
) -> Result<TcpStream, Answer> {
    let mut s = connect(addr);
    let mut head = format!("PUT {path} HTTP/1.1\r\nHost: {addr}\r\nExpect: 100-continue\r\n");
    match framing {
        Framing::Length => head.push_str(&format!("Content-Length: {len}\r\n")),
        Framing::Chunked => head.push_str("Transfer-Encoding: chunked\r\n"),
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    let mut got = Vec::new();
    let mut b = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(1) => got.push(b[0]),
            _ => break,
        }
    }
    if got.starts_with(b"HTTP/1.1 100") {
        return Ok(s);
    }
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    got.extend_from_slice(&rest);
    Err(parse(&got))
}

/// Writes `data` as the body (framed), in pieces.
fn send_body(s: &mut TcpStream, framing: Framing, data: &[u8]) -> std::io::Result<()> {
    for piece in data.chunks(64 * 1024) {
        match framing {
            Framing::Length => s.write_all(piece)?,
            Framing::Chunked => {
                s.write_all(format!("{:x}\r\n", piece.len()).as_bytes())?;
                s.write_all(piece)?;
                s.write_all(b"\r\n")?;
            }
        }
    }
    Ok(())
}

fn finish_body(s: &mut TcpStream, framing: Framing) -> std::io::Result<()> {
    if framing == Framing::Chunked {
        s.write_all(b"0\r\n\r\n")?;
    }
    Ok(())
}

/// Reads the whole answer (the server closes, or the body's length is reached).
fn read_answer(s: &mut TcpStream) -> Answer {
    let mut raw = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
        if complete(&raw) {
            break;
        }
    }
    parse(&raw)
}

/// Whether `raw` holds a whole answer with a `Content-Length` body.
fn complete(raw: &[u8]) -> bool {
    let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    head.lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .is_some_and(|len| raw.len() >= split + 4 + len)
}

fn parse(raw: &[u8]) -> Answer {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP answer: {:?}", String::from_utf8_lossy(raw)));
    let head = String::from_utf8_lossy(&raw[..split]);
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status");
    Answer {
        status,
        body: raw[split + 4..].to_vec(),
    }
}

/// A whole upload; the answer.
fn put(
    addr: SocketAddr,
    path: &str,
    framing: Framing,
    data: &[u8],
    headers: &[(&str, &str)],
) -> Answer {
    let mut s = match put_head(addr, path, framing, data.len(), headers) {
        Ok(s) => s,
        Err(a) => return a,
    };
    // The server may answer (and close) before the whole body: its answer counts.
    let _ = send_body(&mut s, framing, data).and_then(|()| finish_body(&mut s, framing));
    read_answer(&mut s)
}

/// `GET path`: the raw answer (body bytes as sent).
fn get(addr: SocketAddr, path: &str) -> Answer {
    let mut s = connect(addr);
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    parse(&raw)
}

fn delete(addr: SocketAddr, path: &str) -> Answer {
    let mut s = connect(addr);
    s.write_all(
        format!("DELETE {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    parse(&raw)
}

/// `isnode cat NAME` on the volume: its bytes.
fn cat(vol: &Vol, name: &str) -> Vec<u8> {
    let out = command()
        .args(["cat", "--volume"])
        .arg(&vol.root)
        .arg(name)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cat {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The volume's files but the catalog's: path → length.
fn files(root: &Path) -> BTreeMap<PathBuf, u64> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, u64>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if e.file_type().unwrap().is_dir() {
                walk(root, &p, out);
            } else if !e
                .file_name()
                .to_string_lossy()
                .starts_with("catalog.sqlite")
            {
                out.insert(
                    p.strip_prefix(root).unwrap().to_path_buf(),
                    e.metadata().unwrap().len(),
                );
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// Object rows in the catalog (any state): (name, state).
fn rows(root: &Path) -> Vec<(String, String)> {
    let db = rusqlite::Connection::open(root.join("catalog.sqlite")).unwrap();
    let mut q = db
        .prepare("SELECT name, state FROM objects ORDER BY toi")
        .unwrap();
    let r = q
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    r
}

/// Digest rows of every object.
fn digest_rows(root: &Path) -> i64 {
    let db = rusqlite::Connection::open(root.join("catalog.sqlite")).unwrap();
    db.query_row("SELECT count(*) FROM packet_digests", [], |r| r.get(0))
        .unwrap()
}

/// Asserts the volume holds exactly `names` (complete), no other row, and no file but
/// their segments (one per member), the members' identity files, the locks, and the
/// running server's `run/` (its viewers' load in `viewer-pace.json`, not volume data).
#[track_caller]
fn assert_only(vol: &Vol, names: &[&str]) {
    let rows = rows(&vol.root);
    let mut listed: Vec<&str> = rows.iter().map(|(n, _)| n.as_str()).collect();
    listed.sort_unstable();
    let mut want = names.to_vec();
    want.sort_unstable();
    assert_eq!(listed, want, "catalog rows: {rows:?}");
    assert!(rows.iter().all(|(_, s)| s == "complete"), "rows: {rows:?}");
    let segs: Vec<PathBuf> = files(&vol.root)
        .into_keys()
        .filter(|p| !p.ends_with("MEMBER") && !p.ends_with("lock") && !p.ends_with("repair.lock"))
        .filter(|p| !p.starts_with("run"))
        .collect();
    assert_eq!(
        segs.len(),
        names.len() * 6,
        "files besides the segments of {names:?}: {segs:?}"
    );
    assert!(
        segs.iter()
            .all(|p| p.to_string_lossy().contains("/objects/")),
        "a file outside objects/: {segs:?}"
    );
}

fn small_vol() -> Vol {
    Vol::create(SMALL)
}

/// Uploads, with `Content-Length` and chunked, through the CLI and curl: byte-identical
/// through `isnode cat` and `/o/NAME`; replaced atomically without `If-None-Match`, kept
/// with it (`412`).
#[test]
fn uploads_are_byte_identical() {
    let vol = small_vol();
    let server = Server::start(&vol, &[]);
    let a = bytes(1, 300_000);
    let r = put(
        server.addr,
        "/v1/objects/a.bin?bitrate_bps=1000000",
        Framing::Length,
        &a,
        &[],
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let j = r.json();
    assert_eq!(j["name"], "a.bin");
    assert_eq!(j["size_bytes"], 300_000);
    assert_eq!(j["bitrate_bps"], 1_000_000);
    assert!(j["packet_digests"].is_string(), "{j}");
    // Chunked, and an MPEG-TS title whose bitrate is probed.
    let ts = vol.path("t.ts");
    run_ok(&[
        "gen-ts",
        "--bitrate",
        "2000000",
        "--duration",
        "2",
        ts.to_str().unwrap(),
    ]);
    let t = std::fs::read(&ts).unwrap();
    let r = put(
        server.addr,
        "/v1/objects/t%20v.ts",
        Framing::Chunked,
        &t,
        &[],
    );
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(r.json()["bitrate_bps"], 2_000_000);
    assert_eq!(r.json()["content_type"], "video/mp2t");
    for (name, path, data) in [("a.bin", "a.bin", &a), ("t v.ts", "t%20v.ts", &t)] {
        assert_eq!(&cat(&vol, name), data, "cat {name}");
        let g = get(server.addr, &format!("/o/{path}"));
        assert_eq!(g.status, 200);
        assert!(&g.body == data, "/o/{path} differs");
    }
    // The CLI (Content-Length, progress bar) and curl -T.
    let c = vol.path("c.ts");
    std::fs::write(&c, &t[..t.len() / 188 / 2 * 188]).unwrap();
    let out = command()
        .args(["ingest", "--server", &server.url()])
        .arg(&c)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(cat(&vol, "c.ts"), std::fs::read(&c).unwrap());
    // The CLI refuses to replace without --replace (If-None-Match: *), clearly.
    let out = command()
        .args(["ingest", "--server", &server.url()])
        .arg(&c)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("412"));
    let curl = Command::new("curl")
        .args(["-sS", "-o", "/dev/null", "-w", "%{http_code}", "-T"])
        .arg(&ts)
        .arg(format!("{}/v1/objects/curl.ts", server.url()))
        .output()
        .expect("curl is needed by this test: install it (apt-get install curl)");
    assert_eq!(String::from_utf8_lossy(&curl.stdout), "201");
    assert_eq!(cat(&vol, "curl.ts"), t);
    // With a known length the probe runs once the last byte is in: the same description.
    let j = get(server.addr, "/v1/objects/curl.ts").json();
    assert_eq!(
        (j["bitrate_bps"].as_u64(), j["content_type"].as_str()),
        (Some(2_000_000), Some("video/mp2t"))
    );
    // Bytes whose bitrate cannot be told, without ?bitrate_bps=: 422, nothing kept.
    for framing in [Framing::Length, Framing::Chunked] {
        let r = put(
            server.addr,
            "/v1/objects/noise",
            framing,
            &bytes(3, 100_000),
            &[],
        );
        assert_eq!(r.status, 422, "{}", r.text());
        assert!(r.text().contains("bitrate_bps"), "{}", r.text());
        assert_eq!(get(server.addr, "/v1/objects/noise").status, 404);
    }
    // Replacing: the new version, once complete; If-None-Match: * keeps the old one.
    let b = bytes(2, 200_000);
    let r = put(
        server.addr,
        "/v1/objects/a.bin?bitrate_bps=1000000",
        Framing::Length,
        &b,
        &[("If-None-Match", "*")],
    );
    assert_eq!(r.status, 412, "{}", r.text());
    assert_eq!(cat(&vol, "a.bin"), a);
    let r = put(
        server.addr,
        "/v1/objects/a.bin?bitrate_bps=1000000",
        Framing::Chunked,
        &b,
        &[],
    );
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(cat(&vol, "a.bin"), b);
    assert!(get(server.addr, "/o/a.bin").body == b);
    drop(server);
    assert_only(&vol, &["a.bin", "t v.ts", "c.ts", "curl.ts"]);
}

/// Two uploads of one name with `If-None-Match: *` at once: exactly one `201`, one `412`.
#[test]
fn concurrent_uploads_with_if_none_match_one_wins() {
    let vol = small_vol();
    let server = Server::start(&vol, &[]);
    for round in 0..3u64 {
        let name = format!("race{round}");
        let path = format!("/v1/objects/{name}?bitrate_bps=1000000");
        let barrier = Arc::new(Barrier::new(2));
        let handles: Vec<_> = (0..2u64)
            .map(|i| {
                let (barrier, path, addr) = (barrier.clone(), path.clone(), server.addr);
                std::thread::spawn(move || {
                    let data = bytes(10 * round + i, 400_000);
                    let head = put_head(
                        addr,
                        &path,
                        Framing::Length,
                        data.len(),
                        &[("If-None-Match", "*")],
                    );
                    // Both past the server's first look before either sends its body.
                    barrier.wait();
                    let answer = match head {
                        Err(a) => a,
                        Ok(mut s) => {
                            let _ = send_body(&mut s, Framing::Length, &data);
                            read_answer(&mut s)
                        }
                    };
                    (answer, data)
                })
            })
            .collect();
        let results: Vec<(Answer, Vec<u8>)> =
            handles.into_iter().map(|h| h.join().unwrap()).collect();
        let mut statuses: Vec<u16> = results.iter().map(|(a, _)| a.status).collect();
        statuses.sort_unstable();
        assert_eq!(
            statuses,
            [201, 412],
            "{:?}",
            results.iter().map(|(a, _)| a.text()).collect::<Vec<_>>()
        );
        let winner = results.iter().find(|(a, _)| a.status == 201).unwrap();
        assert_eq!(cat(&vol, &name), winner.1);
    }
    drop(server);
    assert_only(&vol, &["race0", "race1", "race2"]);
}

/// Waits (bounded) until the volume has no `writing` row and no file in a `tmp/`.
fn settle(vol: &Vol) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let busy = rows(&vol.root).iter().any(|(_, s)| s != "complete")
            || files(&vol.root)
                .keys()
                .any(|p| p.to_string_lossy().contains("tmp/"));
        if !busy {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the volume did not settle: {:?}",
            files(&vol.root)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// How an upload is interrupted.
#[derive(Clone, Copy, Debug)]
enum Cut {
    /// The CLI client is killed (SIGKILL) mid-body.
    ClientKilled,
    /// The connection is reset (RST) mid-body.
    Reset,
    /// The server is killed (SIGKILL) mid-body.
    ServerKilled,
}

/// Uploads cut at ten random points leave no object, no file and no row (after a
/// restart for a killed server); the volume keeps what it had.
#[test]
fn interrupted_uploads_leave_nothing() {
    let vol = small_vol();
    let keep = bytes(99, 50_000);
    let mut server = Server::start(&vol, &[]);
    let r = put(
        server.addr,
        "/v1/objects/keep?bitrate_bps=1000000",
        Framing::Length,
        &keep,
        &[],
    );
    assert_eq!(r.status, 201);
    let data = bytes(7, 2_000_000);
    let input = vol.path("big.bin");
    std::fs::write(&input, &data).unwrap();
    let seed = std::env::var("ISNODE_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(17u64);
    let mut rng = seed;
    let mut next = |n: u64| {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (rng >> 33) % n
    };
    let cuts = [
        Cut::ClientKilled,
        Cut::ClientKilled,
        Cut::ClientKilled,
        Cut::ClientKilled,
        Cut::Reset,
        Cut::Reset,
        Cut::Reset,
        Cut::ServerKilled,
        Cut::ServerKilled,
        Cut::ServerKilled,
    ];
    for (i, cut) in cuts.into_iter().enumerate() {
        let at = 1 + next(data.len() as u64 - 2) as usize;
        let framing = if i % 2 == 0 {
            Framing::Length
        } else {
            Framing::Chunked
        };
        eprintln!("cut {i}: {cut:?} after {at} bytes ({framing:?}, seed {seed})");
        match cut {
            Cut::ClientKilled => {
                let mut child = ChildGuard(Some(
                    command()
                        .args([
                            "ingest",
                            "--name",
                            "big",
                            "--bitrate",
                            "1000000",
                            "--server",
                            &server.url(),
                            "-",
                        ])
                        .stdin(Stdio::piped())
                        .stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .spawn()
                        .unwrap(),
                ));
                let mut stdin = child.0.as_mut().unwrap().stdin.take().unwrap();
                stdin.write_all(&data[..at]).unwrap();
                stdin.flush().unwrap();
                // The client has (some of) it in flight: kill it mid-body.
                std::thread::sleep(Duration::from_millis(100 + next(200)));
                drop(child);
                drop(stdin);
            }
            Cut::Reset => {
                let path = "/v1/objects/big?bitrate_bps=1000000";
                let mut s =
                    put_head(server.addr, path, framing, data.len(), &[]).expect("100 Continue");
                send_body(&mut s, framing, &data[..at]).unwrap();
                std::thread::sleep(Duration::from_millis(50));
                // SO_LINGER 0: close sends a reset.
                let sock = socket2::Socket::from(s);
                sock.set_linger(Some(Duration::ZERO)).unwrap();
                drop(sock);
            }
            Cut::ServerKilled => {
                let path = "/v1/objects/big?bitrate_bps=1000000";
                let mut s =
                    put_head(server.addr, path, framing, data.len(), &[]).expect("100 Continue");
                send_body(&mut s, framing, &data[..at]).unwrap();
                std::thread::sleep(Duration::from_millis(100));
                // SAFETY: kill(2) on our own child's pid.
                unsafe { libc::kill(server.pid() as i32, libc::SIGKILL) };
                let _ = server.wait_exit(Instant::now() + Duration::from_secs(10));
                drop(s);
                server = Server::start(&vol, &[]);
            }
        }
        settle(&vol);
        assert_eq!(get(server.addr, "/v1/objects/big").status, 404, "cut {i}");
        assert_only(&vol, &["keep"]);
    }
    // A restart finds nothing to clean either.
    drop(server);
    let server = Server::start(&vol, &[]);
    assert_only(&vol, &["keep"]);
    assert!(get(server.addr, "/o/keep").body == keep);
}

/// A quota (`--max-volume-bytes`): an upload past it is refused with `507` before the
/// body when the length is known, midway when chunked; nothing changes.
#[test]
fn a_quota_refuses_with_507_and_changes_nothing() {
    let vol = small_vol();
    let mut server = Server::start(&vol, &[]);
    let keep = bytes(3, 100_000);
    assert_eq!(
        put(
            server.addr,
            "/v1/objects/keep?bitrate_bps=1000000",
            Framing::Length,
            &keep,
            &[]
        )
        .status,
        201
    );
    drop(server);
    let used: u64 = files(&vol.root)
        .iter()
        .filter(|(p, _)| p.to_string_lossy().contains("/objects/"))
        .map(|(_, l)| l)
        .sum();
    let quota = (used + 400_000).to_string();
    server = Server::start(&vol, &["--max-volume-bytes", &quota]);
    let before = files(&vol.root);
    let big = bytes(4, 1_000_000);
    refused_with_507(&server, &vol, &big, "max_volume_bytes", &before);
    // Within the quota it goes in.
    let small = bytes(5, 150_000);
    let r = put(
        server.addr,
        "/v1/objects/small?bitrate_bps=1000000",
        Framing::Chunked,
        &small,
        &[],
    );
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(cat(&vol, "small"), small);
}

/// `PUT big` with a known length and chunked: each `507` naming `why`, and the volume left
/// as it was (`before`: its files; only `keep` stored).
#[track_caller]
fn refused_with_507(
    server: &Server,
    vol: &Vol,
    big: &[u8],
    why: &str,
    before: &BTreeMap<PathBuf, u64>,
) {
    for framing in [Framing::Length, Framing::Chunked] {
        let r = put(
            server.addr,
            "/v1/objects/big?bitrate_bps=1000000",
            framing,
            big,
            &[],
        );
        assert_eq!(r.status, 507, "{framing:?}: {}", r.text());
        assert!(r.text().contains(why), "{}", r.text());
        settle(vol);
        assert_eq!(&files(&vol.root), before);
        assert_only(vol, &["keep"]);
    }
}

/// Unmounts a tmpfs when dropped.
struct Mount(PathBuf);

impl Mount {
    /// Mounts a tmpfs of `size` at `dir`; panics saying why if it cannot (root is needed).
    fn tmpfs(dir: &Path, size: &str) -> Mount {
        std::fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .expect("running mount (util-linux) to make a small tmpfs");
        assert!(
            out.status.success(),
            "this test needs a small tmpfs as the volume (run it as root, with mount): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Mount(dir.to_path_buf())
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.0)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

/// A volume on a full tmpfs: `507` with the reason, nothing changed, for a known length
/// and for a chunked body; a small upload then still works.
#[test]
fn a_full_disk_refuses_with_507_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("vol");
    let _mount = Mount::tmpfs(&root, "4m");
    let mut args = vec!["volume", "create", "--volume", root.to_str().unwrap()];
    args.extend_from_slice(SMALL);
    run_ok(&args);
    let vol = Vol { dir, root };
    let server = Server::start(&vol, &[]);
    let keep = bytes(6, 100_000);
    assert_eq!(
        put(
            server.addr,
            "/v1/objects/keep?bitrate_bps=1000000",
            Framing::Length,
            &keep,
            &[]
        )
        .status,
        201
    );
    let before = files(&vol.root);
    let big = bytes(8, 6_000_000);
    refused_with_507(&server, &vol, &big, "free space", &before);
    let small = bytes(9, 300_000);
    let r = put(
        server.addr,
        "/v1/objects/small?bitrate_bps=1000000",
        Framing::Length,
        &small,
        &[],
    );
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(cat(&vol, "small"), small);
    assert_eq!(cat(&vol, "keep"), keep);
    drop(server);
}

/// A body that stalls, or trickles below the minimum rate, is cut (`408`); nothing kept.
#[test]
fn stalled_and_trickling_uploads_are_cut() {
    let vol = small_vol();
    let server = Server::start(
        &vol,
        &[
            "--upload-stall-timeout-ms",
            "400",
            "--upload-min-rate-bps",
            "800000",
        ],
    );
    let data = bytes(11, 100_000);
    let path = "/v1/objects/slow?bitrate_bps=1000000";
    // A stall: half the body, then nothing.
    let mut s =
        put_head(server.addr, path, Framing::Length, data.len(), &[]).expect("100 Continue");
    send_body(&mut s, Framing::Length, &data[..50_000]).unwrap();
    let a = read_answer(&mut s);
    assert_eq!(a.status, 408, "{}", a.text());
    assert!(a.text().contains("upload_stall_timeout_ms"), "{}", a.text());
    // A trickle: 100 bytes every 100 ms (8 kbit/s) is below 800 kbit/s.
    let mut s =
        put_head(server.addr, path, Framing::Length, data.len(), &[]).expect("100 Continue");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut sent = 0;
    while sent < data.len() && Instant::now() < deadline {
        if s.write_all(&data[sent..sent + 100]).is_err() {
            break;
        }
        sent += 100;
        std::thread::sleep(Duration::from_millis(100));
        if sent % 1000 == 0 {
            s.set_nonblocking(true).unwrap();
            let mut peek = [0u8; 1];
            let answered = matches!(s.peek(&mut peek), Ok(n) if n > 0);
            s.set_nonblocking(false).unwrap();
            if answered {
                break;
            }
        }
    }
    let a = read_answer(&mut s);
    assert_eq!(a.status, 408, "{}", a.text());
    assert!(a.text().contains("upload_min_rate_bps"), "{}", a.text());
    settle(&vol);
    assert_only(&vol, &[]);
}

/// `DELETE` answers `409` while a session plays the object; `?force=true` ends the
/// session and removes the row, digests and segments; `isnode rm` does it from the CLI,
/// locally and over HTTP.
#[test]
fn delete_refuses_an_object_in_use_unless_forced() {
    let vol = small_vol();
    let t = vol.add_ts("live.ts", 2_000_000, 10.0, 1);
    let other = bytes(12, 50_000);
    let server = Server::start(&vol, &[]);
    assert_eq!(
        put(
            server.addr,
            "/v1/objects/other?bitrate_bps=1000000",
            Framing::Length,
            &other,
            &[]
        )
        .status,
        201
    );
    assert!(digest_rows(&vol.root) > 0);
    let sock = udp("127.0.0.1".parse().unwrap(), 0).unwrap();
    let info = server.open_session("live.ts", &sock);
    let id = info["id"].as_str().unwrap().to_string();
    let r = delete(server.addr, "/v1/objects/live.ts");
    assert_eq!(r.status, 409, "{}", r.text());
    assert!(r.text().contains("force=true"), "{}", r.text());
    assert_eq!(cat(&vol, "live.ts"), t);
    // The CLI says the same.
    let out = command()
        .args(["rm", "live.ts", "--server", &server.url()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("409"));
    let out = command()
        .args(["rm", "live.ts", "--force", "--server", &server.url()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = server.session_req("GET", &id, "", None);
    assert!(
        s.status == 404 || s.json()["state"] != "streaming",
        "the session still streams: {}",
        s.body
    );
    assert_eq!(get(server.addr, "/v1/objects/live.ts").status, 404);
    assert_eq!(delete(server.addr, "/v1/objects/live.ts").status, 404);
    drop(server);
    assert_only(&vol, &["other"]);
    let before = digest_rows(&vol.root);
    // Locally, with no server.
    let out = command()
        .args(["rm", "other", "--volume"])
        .arg(&vol.root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_only(&vol, &[]);
    assert!(before > 0);
    assert_eq!(digest_rows(&vol.root), 0);
    let server = Server::start(&vol, &[]);
    assert_eq!(get(server.addr, "/v1/objects").text(), "[]");
}

/// Real media (ffmpeg's MPEG-TS, MP4 with `moov` at the front and at the end) uploaded
/// with a known length, probed as its bytes arrive: the same bitrate, type and media index
/// as a local `isnode ingest` of the same file, and the same bytes.
#[test]
fn uploaded_media_is_described_like_a_local_ingest() {
    use serve_support::media::{make, Container};
    let vol = Vol::create(&[]);
    let kinds = [
        Container::Ts,
        Container::Mp4MoovFront,
        Container::Mp4MoovEnd,
    ];
    let files: Vec<PathBuf> = kinds.iter().map(|k| make(vol.dir.path(), *k, 6)).collect();
    for (i, f) in files.iter().enumerate() {
        vol.add_file(&format!("local{i}"), f);
    }
    let server = Server::start(&vol, &[]);
    for (i, f) in files.iter().enumerate() {
        let data = std::fs::read(f).unwrap();
        for (framing, name) in [
            (Framing::Length, format!("len{i}")),
            (Framing::Chunked, format!("chunked{i}")),
        ] {
            let r = put(
                server.addr,
                &format!("/v1/objects/{name}"),
                framing,
                &data,
                &[],
            );
            assert_eq!(r.status, 201, "{:?} {framing:?}: {}", kinds[i], r.text());
            let up = r.json();
            let local = get(server.addr, &format!("/v1/objects/local{i}")).json();
            for field in [
                "bitrate_bps",
                "content_type",
                "duration_s",
                "moov_at_front",
                "size_bytes",
            ] {
                assert_eq!(
                    up[field], local[field],
                    "{:?} {framing:?}: {field}",
                    kinds[i]
                );
            }
            let (ix_up, ix_local) = (
                get(server.addr, &format!("/v1/objects/{name}/index")).text(),
                get(server.addr, &format!("/v1/objects/local{i}/index")).text(),
            );
            assert_eq!(
                ix_up.replace(&name, "X"),
                ix_local.replace(&format!("local{i}"), "X")
            );
            assert!(get(server.addr, &format!("/o/{name}")).body == data);
        }
    }
}

/// `DELETE` of an object a broadcast sends: `409`; with `?force=true` the broadcast
/// stops and the object goes.
#[test]
fn delete_refuses_an_object_broadcast_unless_forced() {
    let ns = serve_support::netns::Netns::with_loopback_multicast();
    ns.run(|| {
        let vol = small_vol();
        vol.add_ts("clip.ts", 2_000_000, 10.0, 7);
        let server = Server::start(&vol, &[]);
        let body = r#"{"object": "clip.ts", "scheme": "fast", "max_wait_s": 3.0}"#;
        let r = server.req("POST", "/v1/broadcasts", Some(body));
        assert_eq!(r.status, 201, "{}", r.body);
        let id = r.json()["id"].as_str().unwrap().to_string();
        let r = delete(server.addr, "/v1/objects/clip.ts");
        assert_eq!(r.status, 409, "{}", r.text());
        assert!(r.text().contains("1 broadcast"), "{}", r.text());
        let r = delete(server.addr, "/v1/objects/clip.ts?force=true");
        assert_eq!(r.status, 204, "{}", r.text());
        let b = server.req("GET", &format!("/v1/broadcasts/{id}"), None);
        assert_eq!(b.status, 404, "the broadcast still runs: {}", b.body);
        assert_eq!(get(server.addr, "/v1/objects/clip.ts").status, 404);
        drop(server);
        assert_only(&vol, &[]);
    });
}
