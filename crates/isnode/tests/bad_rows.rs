//! Hostile catalog rows and hostile HTTP requests: an impossible row marks only its own
//! object bad (listed with its problem, never served, reported by `volume check`), and
//! every error the control API answers is the documented JSON `ErrorBody`.

mod serve_support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::Value;
use serve_support::*;

/// Sets `column = value` (an SQL literal) in the row of object `name`, as a hostile or
/// broken writer of the catalog would.
fn corrupt_row(vol: &Vol, name: &str, column: &str, value: &str) {
    let db = rusqlite::Connection::open(vol.root.join("catalog.sqlite")).unwrap();
    let n = db
        .execute(
            &format!("UPDATE objects SET {column} = {value} WHERE name = ?1"),
            [name],
        )
        .unwrap();
    assert_eq!(n, 1, "no row for {name}");
}

/// The listing entry of `name`.
#[track_caller]
fn entry<'a>(list: &'a [Value], name: &str) -> &'a Value {
    list.iter()
        .find(|o| o["name"] == name)
        .unwrap_or_else(|| panic!("{name} is not listed: {list:?}"))
}

/// Asserts that `r` is an error answer with `status` and an `ErrorBody` whose message
/// contains `want`.
#[track_caller]
fn assert_error(r: &Resp, status: u16, want: &str) {
    assert_eq!(r.status, status, "{r:?}");
    assert!(
        r.header("content-type")
            .is_some_and(|c| c.starts_with("application/json")),
        "answer {} is not JSON: {r:?}",
        r.status
    );
    let e: isnode_proto::ErrorBody = serde_json::from_str(&r.body).unwrap_or_else(|e| {
        panic!(
            "answer {} is not an ErrorBody ({e}): {:?}",
            r.status, r.body
        )
    });
    assert!(
        e.error.to_lowercase().contains(&want.to_lowercase()),
        "{want:?} not in {:?}",
        e.error
    );
}

/// Objects with `symbol_len = 0`, a negative bitrate and a block row with the wrong
/// packet count are listed bad with their problem, refused with `409` for sessions,
/// content and HLS, and reported by `volume check` (non-zero exit); the good object is
/// listed `ok` and streams byte for byte. Before: `GET /v1/objects` answered 500 for
/// every object and `volume check` called the volume clean.
#[test]
fn an_impossible_row_marks_only_its_object_bad() {
    let vol = Vol::create(&[]);
    let good = vol.add_ts("good.ts", 1_000_000, 2.0, 1);
    for (i, name) in ["zero.ts", "neg.ts", "blocks.ts", "index.ts", "stray.ts"]
        .iter()
        .enumerate()
    {
        vol.add_ts(name, 1_000_000, 1.0, 2 + i as u64);
    }
    corrupt_row(&vol, "zero.ts", "symbol_len", "0");
    corrupt_row(&vol, "neg.ts", "bitrate_bps", "-1000000");
    let db = rusqlite::Connection::open(vol.root.join("catalog.sqlite")).unwrap();
    db.execute(
        "UPDATE blocks SET packets = packets + 1 WHERE toi = (SELECT toi FROM objects WHERE name = 'blocks.ts') AND member = 0",
        [],
    )
    .unwrap();
    // A random-access point far past the object's end (HLS would cut a segment there).
    db.execute(
        "INSERT OR REPLACE INTO media_index (toi, seq, time_s, offset_bytes) SELECT toi, 0, 0.0, 1000000000000 FROM objects WHERE name = 'index.ts'",
        [],
    )
    .unwrap();
    db.execute(
        "INSERT INTO blocks (toi, member, block, packets, crc32c) SELECT toi, 99, 0, 1, 0 FROM objects WHERE name = 'stray.ts'",
        [],
    )
    .unwrap();
    drop(db);

    let server = Server::start(&vol, &[]);
    let r = server.req("GET", "/v1/objects", None);
    assert_eq!(r.status, 200, "{r:?}");
    let list = r.json();
    let list = list.as_array().expect("an array");
    assert_eq!(list.len(), 6, "{list:?}");
    let good_entry = entry(list, "good.ts");
    assert!(good_entry.get("status").is_none() && good_entry.get("problem").is_none());
    for (name, why) in [
        ("zero.ts", "symbol size"),
        ("neg.ts", "bitrate_bps = -1000000"),
        ("blocks.ts", "packets recorded"),
        ("index.ts", "past the object"),
        ("stray.ts", "member 99"),
    ] {
        let e = entry(list, name);
        assert_eq!(e["status"], "bad", "{e}");
        let problem = e["problem"].as_str().unwrap_or_default();
        assert!(problem.contains(why), "{why:?} not in {problem:?}");
        // Never served: sessions, content, HLS and the object's own description.
        assert_error(&server.post_session(name, free_port()), 409, "is bad");
        for path in [
            format!("/v1/objects/{name}"),
            format!("/v1/objects/{name}/content"),
            format!("/o/{name}"),
            format!("/v1/objects/{name}/index.m3u8"),
        ] {
            assert_error(&server.req("GET", &path, None), 409, "is bad");
        }
    }

    // The good object still streams, byte for byte.
    let deadline = Instant::now() + Duration::from_secs(60);
    let (_, bytes) = play_to_end(&server, &vol, "good.ts", "good", &[], deadline);
    assert!(bytes == good, "good.ts played back different bytes");
    drop(server);

    // `volume check` reports every bad row and fails; `ls` lists them with their status.
    let out = command()
        .args(["volume", "check", "--json", "--volume"])
        .arg(&vol.root)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let bad = report["report"]["bad_objects"]
        .as_array()
        .expect("bad_objects");
    let mut names: Vec<&str> = bad.iter().filter_map(|b| b["object"].as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        ["blocks.ts", "index.ts", "neg.ts", "stray.ts", "zero.ts"],
        "{report}"
    );
    let out = command()
        .args(["volume", "check", "--volume"])
        .arg(&vol.root)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("BAD ROW") && text.contains("zero.ts"),
        "{text}"
    );
    let ls: Value = serde_json::from_str(&run_ok(&[
        "ls",
        "--json",
        "--volume",
        vol.root.to_str().unwrap(),
    ]))
    .unwrap();
    let ls = ls.as_array().unwrap();
    assert_eq!(entry(ls, "neg.ts")["status"], "bad");
    assert_eq!(entry(ls, "good.ts")["status"], "ok");
}

/// A codeword count that contradicts the size is reported by `volume check` (before: the
/// volume was called clean), and `--replace` replaces the bad object with a good one.
#[test]
fn a_bad_object_can_be_replaced() {
    let vol = Vol::create(&[]);
    vol.add_ts("x.ts", 1_000_000, 1.0, 1);
    corrupt_row(&vol, "x.ts", "codewords", "77");
    let out = command()
        .args(["volume", "check", "--volume"])
        .arg(&vol.root)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("codewords = 77"), "{text}");
    let file = vol.dir.path().join("in/x.ts");
    run_ok(&[
        "ingest",
        "--volume",
        vol.root.to_str().unwrap(),
        "--replace",
        "--name",
        "x.ts",
        file.to_str().unwrap(),
    ]);
    run_ok(&["volume", "check", "--volume", vol.root.to_str().unwrap()]);
}

/// Ingest refuses a bitrate that would be stored negative (past `i64::MAX`) or is
/// implausible, and stores nothing.
#[test]
fn ingest_refuses_an_impossible_bitrate() {
    let vol = Vol::create(&[]);
    let file = vol.dir.path().join("in/y.ts");
    std::fs::write(&file, vec![0x47u8; 188 * 100]).unwrap();
    for bitrate in ["9223372036854775808", "100000000001"] {
        let out = command()
            .args(["ingest", "--volume"])
            .arg(&vol.root)
            .args(["--bitrate", bitrate])
            .arg(&file)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains("bitrate"), "{err}");
    }
    let ls = run_ok(&["ls", "--json", "--volume", vol.root.to_str().unwrap()]);
    assert_eq!(
        serde_json::from_str::<Value>(&ls).unwrap(),
        Value::Array(vec![])
    );
}

/// Sends `raw` as one request and reads the whole answer (bounded by timeouts).
fn raw_request(addr: SocketAddr, raw: &[u8]) -> Resp {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(raw).unwrap();
    let mut resp = Vec::new();
    // A server that answers before reading the whole request may reset the connection
    // after its answer: keep what arrived.
    let mut buf = [0u8; 8192];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => resp.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&resp).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Resp {
        status,
        headers,
        body: body.to_string(),
    }
}

/// Every error is JSON with the documented shape: unknown route (404), wrong method
/// (405), a body over the limit (413), a URI over 8 KiB (414), header fields over 16 KiB
/// (431), a name that is not UTF-8 or badly percent-encoded (400), a malformed JSON body
/// (400). Before: 413, 414, 431 and the path rejections were plain text.
#[test]
fn every_api_error_is_json() {
    let vol = Vol::create(&[]);
    vol.add_ts("a.ts", 1_000_000, 1.0, 1);
    let server = Server::start(&vol, &[]);
    assert_error(
        &server.req("GET", "/nowhere", None),
        404,
        "no such resource",
    );
    assert_error(
        &server.req("PUT", "/v1/objects", None),
        405,
        "method not allowed",
    );
    let big = format!(
        r#"{{"object": "a.ts", "port": 9, "x": "{}"}}"#,
        "x".repeat(isnode_serve::MAX_BODY_BYTES + 1)
    );
    assert_error(
        &server.req("POST", "/v1/sessions", Some(&big)),
        413,
        "more than 65536 bytes",
    );
    let long = format!(
        "/v1/objects/{}",
        "a".repeat(isnode_serve::MAX_URI_BYTES + 1)
    );
    assert_error(&server.req("GET", &long, None), 414, "more than 8192");
    let fat = "b".repeat(isnode_serve::MAX_HEADER_BYTES + 1);
    let r = http(
        server.addr,
        None,
        "GET",
        "/v1/objects",
        None,
        &[("X-Fat", &fat)],
    );
    assert_error(&r, 431, "more than 16384");
    // Many fields that together pass the limit.
    let field = "c".repeat(1000);
    let fields: Vec<(&str, &str)> = (0..20).map(|_| ("X-Many", field.as_str())).collect();
    let r = http(server.addr, None, "GET", "/v1/objects", None, &fields);
    assert_error(&r, 431, "header");
    for path in ["/v1/objects/%FF%FE", "/v1/objects/%C3%28/content", "/o/%FF"] {
        let raw = format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        let r = raw_request(server.addr, raw.as_bytes());
        assert_error(&r, 400, "");
    }
    // A '%' without two hex digits is kept literally: no such object, as JSON.
    let r = raw_request(
        server.addr,
        b"GET /v1/objects/%zz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    );
    assert_error(&r, 404, "no object named \"%zz\"");
    assert_error(
        &server.req("POST", "/v1/sessions", Some("{not json")),
        400,
        "",
    );
    assert_eq!(
        (isnode_serve::MAX_URI_BYTES, isnode_serve::MAX_HEADER_BYTES),
        (8192, 16384),
        "docs/protocol.md documents these"
    );
    // Limits are not hit by ordinary requests.
    assert_eq!(server.req("GET", "/v1/objects/a.ts", None).status, 200);
}
