//! Encrypted uploads and fills (issue 32): an upload asking for encryption (`isnode ingest
//! --encrypt --server`, `?encrypt=on`) or under the server's `encrypt = "on"` is stored as
//! ciphertext whose key a viewer token fetches, and `isnode play` writes the clear file
//! from it; `?encrypt=off` keeps an upload clear. Two edges filling the same origin version
//! with the same cluster key store byte-identical ciphertext (`GET /o/NAME` compared) under
//! the same content key; a viewer plays the clear file from either, and one whose edge is
//! killed midway resumes on the other's copy; without a cluster
//! key `encrypt = "on"` with an origin is refused at start.

mod serve_support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use serve_support::*;

/// One raw HTTP/1.1 request with a binary body: status and body bytes.
fn raw(addr: SocketAddr, method: &str, path: &str, headers: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{headers}\
         Content-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(body).unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).expect("reading the answer");
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an HTTP head");
    let head = String::from_utf8_lossy(&answer[..split]).to_ascii_lowercase();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status");
    let body = answer[split + 4..].to_vec();
    let body = match head.contains("transfer-encoding: chunked") {
        true => dechunk(&body),
        false => body,
    };
    (status, body)
}

/// A chunked body's bytes.
fn dechunk(mut rest: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("a chunk size");
        let size =
            usize::from_str_radix(std::str::from_utf8(&rest[..line_end]).unwrap().trim(), 16)
                .expect("a hexadecimal chunk size");
        rest = &rest[line_end + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

/// `GET PATH`: status and body.
fn get(addr: SocketAddr, path: &str) -> (u16, Vec<u8>) {
    raw(addr, "GET", path, "", &[])
}

/// `isnode play NAME` from `server` with `token`: the bytes written.
fn play(server: &Server, vol: &Vol, name: &str, tag: &str, token: &str) -> Vec<u8> {
    let deadline = Instant::now() + Duration::from_secs(90);
    play_to_end(server, vol, name, tag, &["--token", token], deadline).1
}

#[test]
fn uploads_asking_for_encryption_or_under_encrypt_on_are_stored_encrypted() {
    let vol = Vol::create(&[]);
    let clear_path = vol.path("film.ts");
    gen_ts(&clear_path, 2_000_000, 6.0, 7);
    let clear = std::fs::read(&clear_path).unwrap();
    let operator = token(&vol, "o", "operator");
    let viewer = token(&vol, "v", "viewer");
    let server = Server::start(&vol, &[]);
    let addr = server.addr;

    // `isnode ingest --encrypt --server`: the server encrypts.
    let out = isnode(
        &vol,
        &[
            "ingest",
            "--encrypt",
            "--name",
            "enc.ts",
            clear_path.to_str().unwrap(),
            "--server",
            &server.url(),
            "--token",
            &operator,
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let (status, stored) = get(addr, "/o/enc.ts");
    assert_eq!(status, 200);
    assert!(
        stored != clear && stored.len() > clear.len(),
        "stored clear"
    );
    let (status, key) = get(addr, &format!("/v1/objects/enc.ts/key?token={viewer}"));
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&key));
    assert_eq!(key.len(), 16);
    assert!(
        play(&server, &vol, "enc.ts", "p1", &viewer) == clear,
        "played bytes"
    );

    // A plain upload is clear: no key.
    let auth = format!("Authorization: Bearer {operator}\r\n");
    let (status, body) = raw(addr, "PUT", "/v1/objects/plain.ts", &auth, &clear);
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
    let (status, _) = get(addr, &format!("/v1/objects/plain.ts/key?token={viewer}"));
    assert_eq!(status, 404, "a clear upload has no key");
    assert!(get(addr, "/o/plain.ts").1 == clear);

    // Media that cannot be encrypted is refused, nothing stored.
    let (status, body) = raw(
        addr,
        "PUT",
        "/v1/objects/junk.bin?encrypt=on&bitrate_bps=1000000",
        &auth,
        &[7u8; 50_000],
    );
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&body));
    assert!(
        String::from_utf8_lossy(&body).contains("encrypt"),
        "{}",
        String::from_utf8_lossy(&body)
    );
    assert_eq!(get(addr, "/o/junk.bin").0, 404);
    drop(server);

    // `encrypt = "on"`: every upload is encrypted unless it says `?encrypt=off`.
    let server = Server::start(&vol, &["--encrypt", "on"]);
    let addr = server.addr;
    let (status, body) = raw(addr, "PUT", "/v1/objects/default.ts", &auth, &clear);
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
    let (status, _) = get(addr, &format!("/v1/objects/default.ts/key?token={viewer}"));
    assert_eq!(status, 200, "encrypt = on: the upload has a key");
    assert!(get(addr, "/o/default.ts").1 != clear);
    assert!(
        play(&server, &vol, "default.ts", "p2", &viewer) == clear,
        "played bytes"
    );
    let (status, _) = raw(addr, "PUT", "/v1/objects/off.ts?encrypt=off", &auth, &clear);
    assert_eq!(status, 201);
    assert!(get(addr, "/o/off.ts").1 == clear, "?encrypt=off is clear");
}

#[test]
fn two_edges_filling_one_origin_version_store_the_same_ciphertext() {
    let a = Vol::create(&[]);
    let b = Vol::create(&[]);
    let origin = a.path("origin");
    std::fs::create_dir_all(&origin).unwrap();
    let clear_path = origin.join("film.ts");
    gen_ts(&clear_path, 2_000_000, 8.0, 11);
    let clear = std::fs::read(&clear_path).unwrap();
    let cluster_key = a.path("cluster.key");
    std::fs::write(&cluster_key, format!("{}\n", "c3".repeat(32))).unwrap();
    std::fs::set_permissions(&cluster_key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let origin_url = format!("file://{}", origin.display());

    // Without a cluster key an encrypting edge's configuration is refused.
    let toml = a.path("edge.toml");
    std::fs::write(
        &toml,
        format!("origin = \"{origin_url}\"\nencrypt = \"on\"\n"),
    )
    .unwrap();
    let out = isnode(&a, &["config", "check", toml.to_str().unwrap()]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("cluster_key_file"), "{}", text(&out));

    let args = [
        "--origin",
        origin_url.as_str(),
        "--encrypt",
        "on",
        "--cluster-key-file",
        cluster_key.to_str().unwrap(),
    ];
    // One token file for both edges: a viewer's token works on either.
    let viewer = token(&a, "v", "viewer");
    let tokens = a.root.join("tokens.json");
    let edge_a = Server::start(&a, &args);
    let mut b_args = args.to_vec();
    b_args.extend(["--tokens-file", tokens.to_str().unwrap()]);
    let edge_b = Server::start(&b, &b_args);
    let (status, from_a) = get(edge_a.addr, "/o/film.ts");
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&from_a));
    let (status, from_b) = get(edge_b.addr, "/o/film.ts");
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&from_b));
    assert!(from_a != clear, "edge A stored the clear title");
    assert!(from_a.len() > clear.len());
    assert!(from_a == from_b, "the two edges' ciphertexts differ");

    // The same content key from each edge (each wraps it under its own node key).
    let (sa, key_a) = get(
        edge_a.addr,
        &format!("/v1/objects/film.ts/key?token={viewer}"),
    );
    let (sb, key_b) = get(
        edge_b.addr,
        &format!("/v1/objects/film.ts/key?token={viewer}"),
    );
    assert_eq!((sa, sb), (200, 200));
    assert_eq!(key_a.len(), 16);
    assert_eq!(key_a, key_b);
    let node_a = std::fs::read(a.root.join("node.key")).unwrap();
    let node_b = std::fs::read(b.root.join("node.key")).unwrap();
    assert_ne!(node_a, node_b, "each edge has a node key of its own");

    // A viewer plays the clear file from edge B; one playing from edge A, killed midway,
    // resumes on edge B's copy (the same origin ETag, another TSI and TOI) and writes the
    // clear file all the same.
    assert!(
        play(&edge_b, &b, "film.ts", "pb", &viewer) == clear,
        "played from edge B"
    );
    let mut edge_a = edge_a;
    let servers = format!("{},{}", edge_a.url(), edge_b.url());
    let out = a.path("failover.ts");
    let stats = a.path("failover.json");
    let mut child = ChildGuard(Some(
        command()
            .args(["play", "film.ts", "--server", &servers, "--token", &viewer])
            .arg("--out")
            .arg(&out)
            .arg("--stats-json")
            .arg(&stats)
            .args(["--timeout-s", "20", "--max-seconds", "90"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(a.path("failover.stderr")).unwrap())
            .spawn()
            .expect("spawning isnode play"),
    ));
    // The title lasts 8 s at its pace: edge A goes 3 s in.
    std::thread::sleep(Duration::from_secs(3));
    edge_a.kill9();
    let status = child.wait_until(Instant::now() + Duration::from_secs(90), "isnode play");
    let log = std::fs::read_to_string(a.path("failover.stderr")).unwrap_or_default();
    assert!(status.success(), "{status}\n{log}");
    let stats: serde_json::Value = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
    assert!(
        stats["resumes_on_other_copy"].as_u64().unwrap_or(0) >= 1,
        "{stats}\n{log}"
    );
    assert!(
        std::fs::read(&out).unwrap() == clear,
        "the resumed output differs\n{log}"
    );
}

/// `isnode play --http` of an encrypted title serves the clear file (its length announced)
/// to a local player.
#[test]
fn play_http_of_an_encrypted_title_serves_the_clear_file() {
    let vol = Vol::create(&[]);
    let clear_path = vol.path("film.ts");
    gen_ts(&clear_path, 2_000_000, 6.0, 5);
    let clear = std::fs::read(&clear_path).unwrap();
    ingest_encrypted(&vol, "enc.ts", &clear_path);
    let viewer = token(&vol, "v", "viewer");
    let server = Server::start(&vol, &[]);
    let body = play_http(&vol, &server, "enc.ts", &viewer);
    assert!(
        body == clear,
        "play --http served {} bytes, not the clear file's {}",
        body.len(),
        clear.len()
    );
}

/// The top-level boxes of an MP4: (type, first byte, bytes).
fn top_boxes(bytes: &[u8]) -> Vec<([u8; 4], usize, &[u8])> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < bytes.len() {
        let size = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        assert!(size >= 8, "a box size of {size} at byte {at}");
        out.push((
            bytes[at + 4..at + 8].try_into().unwrap(),
            at,
            &bytes[at..at + size],
        ));
        at += size;
    }
    out
}

/// The `moof_offset` of every `tfra` entry of an `mfra` box (whole).
fn tfra_offsets(mfra: &[u8]) -> Vec<u64> {
    let mut out = Vec::new();
    for (kind, _, tfra) in top_boxes(&mfra[8..]) {
        if &kind != b"tfra" {
            continue;
        }
        let v1 = tfra[8] == 1;
        let sizes = u32::from_be_bytes(tfra[16..20].try_into().unwrap());
        let extra: usize = [(sizes >> 4) & 3, (sizes >> 2) & 3, sizes & 3]
            .iter()
            .map(|&n| n as usize + 1)
            .sum();
        let n = u32::from_be_bytes(tfra[20..24].try_into().unwrap()) as usize;
        let (word, mut at) = (if v1 { 8 } else { 4 }, 24);
        for _ in 0..n {
            let o = &tfra[at + word..at + 2 * word];
            out.push(match v1 {
                true => u64::from_be_bytes(o.try_into().unwrap()),
                false => u64::from(u32::from_be_bytes(o.try_into().unwrap())),
            });
            at += 2 * word + extra;
        }
    }
    out
}

/// `play --http` of a CMAF title in CENC `cbcs` serves the clear CMAF file at the length
/// the session announced: the input less its `sidx` boxes (ffmpeg's `global_sidx` writes
/// two), every other box as the input's but the `mfra`, whose entries point at the moved
/// fragments.
#[test]
fn play_http_of_an_encrypted_cmaf_title_serves_the_clear_file() {
    let vol = Vol::create(&[]);
    let clear_path = vol.path("film.mp4");
    let out = std::process::Command::new(serve_support::media::tool("ffmpeg"))
        .args(["-v", "error", "-y", "-f", "lavfi", "-i"])
        .arg("testsrc2=size=320x240:rate=25")
        .args(["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000"])
        .args([
            "-t", "6", "-c:v", "libx264", "-g", "25", "-pix_fmt", "yuv420p",
        ])
        .args(["-c:a", "aac", "-movflags", "+cmaf+global_sidx"])
        .arg(&clear_path)
        .output()
        .expect("running ffmpeg");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let input = std::fs::read(&clear_path).unwrap();
    ingest_encrypted(&vol, "enc.mp4", &clear_path);
    let viewer = token(&vol, "v", "viewer");
    let server = Server::start(&vol, &[]);
    let body = play_http(&vol, &server, "enc.mp4", &viewer);
    let want: Vec<_> = top_boxes(&input)
        .into_iter()
        .filter(|b| &b.0 != b"sidx")
        .collect();
    assert!(
        want.len() < top_boxes(&input).len(),
        "the input has sidx boxes"
    );
    let got = top_boxes(&body);
    assert_eq!(got.len(), want.len(), "the clear file's boxes");
    let mut moofs = Vec::new();
    for ((kind, at, b), (wkind, _, w)) in got.iter().zip(&want) {
        assert_eq!(kind, wkind);
        match kind {
            b"mfra" => {
                assert_eq!(b.len(), w.len());
                // A tfra per track, each naming every fragment.
                let mut offsets = tfra_offsets(b);
                offsets.sort_unstable();
                offsets.dedup();
                assert_eq!(offsets, moofs, "the mfra points at the fragments");
            }
            _ => assert!(
                b == w,
                "the {} box at byte {at}",
                String::from_utf8_lossy(kind)
            ),
        }
        if kind == b"moof" {
            moofs.push(*at as u64);
        }
    }
}

/// `isnode play NAME --http` with `viewer`'s token: the body a GET of its listener gets.
fn play_http(vol: &Vol, server: &Server, name: &str, viewer: &str) -> Vec<u8> {
    let listen = format!("127.0.0.1:{}", free_port());
    let stderr = vol.path("play-http.stderr");
    let _child = ChildGuard(Some(
        command()
            .args(["play", name, "--server", &server.url(), "--token", viewer])
            .args([
                "--http",
                &listen,
                "--as-fast-as-possible",
                "--http-linger-s",
                "5",
            ])
            .args(["--max-seconds", "60"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("spawning isnode play --http"),
    ));
    let addr: SocketAddr = listen.parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        assert!(
            Instant::now() < deadline,
            "play --http does not listen:\n{}",
            std::fs::read_to_string(&stderr).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (status, body) = get(addr, "/");
    assert_eq!(
        status,
        200,
        "{}",
        std::fs::read_to_string(&stderr).unwrap_or_default()
    );
    body
}

/// A viewer token with an expiry: its keys carry it (`Isnode-Key-Expires`), and past it
/// the key is `401` naming the expiry; `licence_ttl_s` bounds a key handed to a token that
/// never expires.
#[test]
fn keys_carry_the_tokens_expiry_or_the_licence_ttl_and_expired_tokens_get_none() {
    let vol = Vol::create(&[]);
    let clear_path = vol.path("film.ts");
    gen_ts(&clear_path, 2_000_000, 4.0, 3);
    ingest_encrypted(&vol, "enc.ts", &clear_path);
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    };
    let before = now();
    let out = isnode(
        &vol,
        &[
            "token",
            "add",
            "--name",
            "brief",
            "--role",
            "viewer",
            "--expires-in-s",
            "2",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let brief = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(text(&out).contains("expires"), "{}", text(&out));
    let list = text(&isnode(&vol, &["token", "list"]));
    assert!(list.contains("brief") && list.contains("expires"), "{list}");
    let lasting = token(&vol, "lasting", "viewer");
    let server = Server::start(&vol, &["--licence-ttl-s", "3600"]);

    let key_head = |t: &str| {
        let mut s = TcpStream::connect_timeout(&server.addr, Duration::from_secs(5)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            s,
            "GET /v1/objects/enc.ts/key?token={t} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut a = Vec::new();
        s.read_to_end(&mut a).unwrap();
        String::from_utf8_lossy(&a).to_ascii_lowercase()
    };
    let expires_of = |head: &str| -> u64 {
        head.lines()
            .find_map(|l| l.strip_prefix("isnode-key-expires:"))
            .unwrap_or_else(|| panic!("no expiry: {head}"))
            .trim()
            .parse()
            .unwrap()
    };
    let head = key_head(&brief);
    assert!(head.starts_with("http/1.1 200"), "{head}");
    let e = expires_of(&head);
    assert!(
        e >= before + 2 && e <= now() + 2,
        "the token's expiry {e}, added at {before}"
    );
    let head = key_head(&lasting);
    assert!(head.starts_with("http/1.1 200"), "{head}");
    let e = expires_of(&head);
    assert!(
        e >= before + 3600 && e <= now() + 3600,
        "licence_ttl_s: {e}"
    );

    // Past the token's expiry: 401, saying it expired; `play` with it fails.
    while now() <= before + 3 {
        std::thread::sleep(Duration::from_millis(200));
    }
    let head = key_head(&brief);
    assert!(
        head.starts_with("http/1.1 401") && head.contains("expired"),
        "{head}"
    );
    let out = command()
        .args([
            "play",
            "enc.ts",
            "--server",
            &server.url(),
            "--token",
            &brief,
        ])
        .arg("--out")
        .arg(vol.path("late.ts"))
        .args(["--max-seconds", "30"])
        .output()
        .expect("running isnode play");
    assert!(!out.status.success());
    assert!(text(&out).contains("expired"), "{}", text(&out));
}

/// An encrypted pre-fill keeps to its rate cap as a clear one does (it fetched the whole
/// title at once before), the cap lifted by a pre-fill without one; the filled title then
/// plays clear (its origin ETag committing with it is tested in the store's unit tests).
#[test]
fn an_encrypted_prefill_keeps_to_its_rate_cap_and_commits_its_origin_etag() {
    let vol = Vol::create(&[]);
    let origin = vol.path("origin");
    std::fs::create_dir_all(&origin).unwrap();
    let clear_path = origin.join("capped.ts");
    gen_ts(&clear_path, 2_000_000, 12.0, 21);
    let clear = std::fs::read(&clear_path).unwrap();
    let cluster_key = vol.path("cluster.key");
    std::fs::write(&cluster_key, format!("{}\n", "d4".repeat(32))).unwrap();
    std::fs::set_permissions(&cluster_key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let origin_url = format!("file://{}", origin.display());
    let viewer = token(&vol, "v", "viewer");
    // With a token file, the fill routes need the operator role.
    let op = token(&vol, "o", "operator");
    let bearer = format!("Bearer {op}");
    let as_op = |server: &Server, method: &str, body: Option<&str>| {
        let auth = [("Authorization", bearer.as_str())];
        http(server.addr, None, method, "/v1/fills", body, &auth)
    };
    let fill_of = |server: &Server| {
        let r = as_op(server, "GET", None);
        assert_eq!(r.status, 200, "GET /v1/fills: {}", r.body);
        r.json()["fills"]
            .as_array()
            .and_then(|a| a.iter().find(|f| f["name"] == "capped.ts").cloned())
    };
    let server = Server::start(
        &vol,
        &[
            "--origin",
            origin_url.as_str(),
            "--encrypt",
            "on",
            "--cluster-key-file",
            cluster_key.to_str().unwrap(),
        ],
    );
    // 3 MB at 200 kbit/s: about 2 min; one 1 MiB range (the default) every 42 s.
    let r = as_op(
        &server,
        "POST",
        Some("{\"titles\": [\"capped.ts\"], \"rate_bps\": 200000}"),
    );
    assert_eq!(r.status, 202, "{}", r.body);
    let deadline = Instant::now() + Duration::from_secs(30);
    let filled = |f: &serde_json::Value| f["filled_bytes"].as_u64().unwrap_or(0);
    loop {
        let f = fill_of(&server).expect("the fill is listed");
        if filled(&f) > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "no byte fetched: {f}");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Uncapped, a file:// origin gives the whole title within milliseconds.
    std::thread::sleep(Duration::from_secs(2));
    let f = fill_of(&server).expect("the fill is listed");
    assert_ne!(f["phase"], "done", "{f}");
    assert!(
        filled(&f) < clear.len() as u64 / 2,
        "the cap was not kept: {f}"
    );
    // Lift the cap: the fill completes.
    let r = as_op(
        &server,
        "POST",
        Some("{\"titles\": [\"capped.ts\"], \"rate_bps\": 0}"),
    );
    assert_eq!(r.status, 202, "{}", r.body);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let f = fill_of(&server).expect("the fill is listed");
        if f["phase"] == "done" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not done: {f}\n{}",
            server.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(play(&server, &vol, "capped.ts", "pc", &viewer) == clear);
}
