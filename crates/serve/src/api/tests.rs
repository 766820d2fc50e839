//! The control API stays responsive while the catalog is slow or locked.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc;
use std::time::Duration;

use isnode_store::{ingest, IngestOptions, Volume};

use crate::server::start;
use crate::server::ServerHandle;
use isnode_serve_config::ServeConfig;

/// Longest wait for an answer the server owes at once (a bound, not a measurement).
const ANSWER_BOUND: Duration = Duration::from_secs(20);

fn volume() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let p = crate::test_params();
    let mut vol = Volume::create(dir.path(), p, None).unwrap();
    let bytes = vec![7u8; 200_000];
    let opts = IngestOptions {
        name: "a.ts".into(),
        bitrate_bps: 1_000_000,
        content_type: "video/mp2t".into(),
        replace: false,
    };
    ingest(
        &mut vol,
        &opts,
        &mut &bytes[..],
        bytes.len() as u64,
        &mut |_| {},
    )
    .unwrap();
    dir
}

fn server(dir: &tempfile::TempDir) -> ServerHandle {
    let args = ServeConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        cache_size_bytes: 2 << 20,
        threads: Some(1),
        // Port 9, nobody to echo a token: these tests are about the API's answers.
        min_dest_port: 1,
        validate_destination: isnode_serve_config::ValidateDestination::Off,
        ..ServeConfig::default()
    };
    start(dir.path(), &args).unwrap()
}

/// One HTTP/1.1 request; (status, body), or the I/O error (e.g. the read timed out).
fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> std::io::Result<(u16, String)> {
    http_with(addr, method, path, body, &[])
}

/// [`http`] with a role token (`Authorization: Bearer`; none if empty).
fn http_as(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
    token: &str,
) -> std::io::Result<(u16, String)> {
    let auth = (!token.is_empty()).then(|| format!("Bearer {token}"));
    http_with(
        addr,
        method,
        path,
        body,
        &[("Authorization", auth.as_deref())],
    )
}

/// [`http`] with a session's secret (`Isnode-Session-Secret`; none if empty).
fn http_owner(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
    secret: &str,
) -> std::io::Result<(u16, String)> {
    let h = (!secret.is_empty()).then_some(secret);
    http_with(addr, method, path, body, &[("Isnode-Session-Secret", h)])
}

/// [`http`] with `headers` (those without a value are left out).
fn http_with(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
    headers: &[(&str, Option<&str>)],
) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(ANSWER_BOUND))?;
    let extra: String = headers
        .iter()
        .filter_map(|(k, v)| v.map(|v| format!("{k}: {v}\r\n")))
        .collect();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n{extra}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut resp = Vec::new();
    s.read_to_end(&mut resp)?;
    let text = String::from_utf8_lossy(&resp).into_owned();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((status, rest.to_string()))
}

/// Creates a session of `a.ts` to port 9 and returns its description (201 asserted).
fn create_session(addr: SocketAddr) -> isnode_proto::SessionInfo {
    let (status, body) = http(
        addr,
        "POST",
        "/v1/sessions",
        r#"{"object":"a.ts","port":9}"#,
    )
    .expect("POST /v1/sessions");
    assert_eq!(status, 201, "{body}");
    let info: isnode_proto::SessionInfo = serde_json::from_str(&body).expect("a SessionInfo");
    // Ingested locally: no origin version to carry.
    assert_eq!(info.origin_etag, None, "{body}");
    info
}

/// Issues a request on its own thread; the answer comes on the channel.
fn request(
    addr: SocketAddr,
    method: &'static str,
    path: String,
    body: &'static str,
) -> mpsc::Receiver<std::io::Result<(u16, String)>> {
    request_owner(addr, method, path, body, String::new())
}

/// [`request`] with a session's secret.
fn request_owner(
    addr: SocketAddr,
    method: &'static str,
    path: String,
    body: &'static str,
    secret: String,
) -> mpsc::Receiver<std::io::Result<(u16, String)>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(http_owner(addr, method, &path, body, &secret));
    });
    rx
}

/// Defect 6: while a catalog lookup waits for the volume (held here, as a slow or
/// locked SQLite would hold it), `GET /metrics` and keepalives are still answered.
#[test]
fn a_locked_catalog_does_not_stall_metrics_or_keepalives() {
    let dir = volume();
    let server = server(&dir);
    let addr = server.local_addr();
    let info = create_session(addr);
    let (id, secret) = (info.id, info.secret);

    let held = server.shared.control.objects.lock_volume();
    let create = request(
        addr,
        "POST",
        "/v1/sessions".into(),
        r#"{"object":"a.ts","port":10}"#,
    );
    // Wait (bounded) until that request is blocked on the catalog.
    let mut waiting = false;
    for _ in 0..4000 {
        if server.metrics().catalog_lookups_active > 0 {
            waiting = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(waiting, "the session request never reached the catalog");
    let metrics = request(addr, "GET", "/metrics".into(), "");
    let keepalive = request_owner(
        addr,
        "POST",
        format!("/v1/sessions/{id}/keepalive"),
        "",
        secret,
    );
    let metrics = metrics.recv_timeout(ANSWER_BOUND);
    let keepalive = keepalive.recv_timeout(ANSWER_BOUND);
    drop(held);

    let (status, text) = metrics
        .expect("GET /metrics was not answered while the catalog was locked")
        .expect("GET /metrics failed while the catalog was locked");
    assert_eq!(status, 200);
    assert!(text.contains("isnode_catalog_lookups_active 1"), "{text}");
    let (status, _) = keepalive
        .expect("the keepalive was not answered while the catalog was locked")
        .expect("the keepalive failed while the catalog was locked");
    assert_eq!(status, 204);
    // Once the catalog is free, the waiting request completes.
    let (status, body) = create.recv_timeout(ANSWER_BOUND).unwrap().unwrap();
    assert_eq!(status, 201, "{body}");
}

/// Loss reports (adaptive repair): the HTTP keepalive's JSON body and the version 2
/// keepalive datagram set the session's reported loss; a malformed body or a rate outside
/// [0, 1] is a 400 and changes nothing.
#[test]
fn keepalives_carry_loss_reports() {
    use isnode_proto::keepalive::{keepalive_datagram, LossReport};
    let dir = volume();
    let server = server(&dir);
    let addr = server.local_addr();
    let info = create_session(addr);
    assert!(info.loss_reports);
    let keepalive = format!("/v1/sessions/{}/keepalive", info.id);
    let status_of = || {
        let (status, body) = http(addr, "GET", &format!("/v1/sessions/{}", info.id), "").unwrap();
        assert_eq!(status, 200, "{body}");
        serde_json::from_str::<isnode_proto::SessionStatus>(&body).unwrap()
    };
    assert_eq!(status_of().reported_loss_units, None, "no report yet");
    let secret = info.secret.clone();
    let http = |addr, method, path: &str, body: &str| http_owner(addr, method, path, body, &secret);
    assert_eq!(http(addr, "POST", &keepalive, "").unwrap().0, 204);
    assert_eq!(
        status_of().reported_loss_units,
        None,
        "a plain keepalive reports nothing"
    );
    let (status, _) = http(addr, "POST", &keepalive, r#"{"loss_rate":0.05}"#).unwrap();
    assert_eq!(status, 204);
    assert_eq!(status_of().reported_loss_units, Some(500));
    for bad in [
        r#"{"loss_rate":1.5}"#,
        r#"{"loss_rate":-0.1}"#,
        r#"{"loss":1}"#,
        "nope",
    ] {
        let (status, body) = http(addr, "POST", &keepalive, bad).unwrap();
        assert_eq!(status, 400, "{bad}: {body}");
    }
    assert_eq!(
        status_of().reported_loss_units,
        Some(500),
        "refused bodies change nothing"
    );
    // The datagram, from the session's destination IP.
    let port = info.keepalive_port.expect("a keepalive port");
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let key = isnode_proto::auth::parse_key_hex(&info.secret).unwrap();
    for counter in 1..=200 {
        let d = keepalive_datagram(&info.id, &key, counter, LossReport::from_units(123)).unwrap();
        sock.send_to(&d, (addr.ip(), port)).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        if status_of().reported_loss_units == Some(123) {
            break;
        }
    }
    assert_eq!(status_of().reported_loss_units, Some(123));
    assert!(server.metrics().loss_reports >= 2);
}

/// The session routes take the session's secret in `Isnode-Session-Secret` only (the
/// [`super::owner::OwnedSession`] check): not in `Authorization`, not a wrong or malformed
/// one; each refusal is a counted `403` saying what is wrong, and an unknown session `404`.
#[test]
fn session_routes_take_the_secret_in_its_own_header() {
    let dir = volume();
    let server = server(&dir);
    let addr = server.local_addr();
    let info = create_session(addr);
    let keepalive = format!("/v1/sessions/{}/keepalive", info.id);
    let bearer = format!("Bearer {}", info.secret);
    let wrong = "0".repeat(32);
    let upper = info.secret.to_uppercase();
    let refused: [(&str, &str, &str); 4] = [
        ("Authorization", &bearer, "Isnode-Session-Secret"),
        ("Isnode-Session-Secret", &wrong, "wrong session secret"),
        ("Isnode-Session-Secret", &upper, "32 lowercase"),
        ("X-Other", "1", "Isnode-Session-Secret"),
    ];
    for (i, (name, value, says)) in refused.iter().enumerate() {
        let (status, body) =
            http_with(addr, "POST", &keepalive, "", &[(name, Some(value))]).unwrap();
        assert_eq!(status, 403, "{name}: {body}");
        assert!(body.contains(says), "{name}: {body}");
        assert_eq!(server.metrics().forbidden, i as u64 + 1);
    }
    let owner = |method, path: &str| http_owner(addr, method, path, "", &info.secret).unwrap();
    assert_eq!(owner("POST", &keepalive).0, 204);
    // Not validated yet (validation is off here: streaming at once), so a control is taken.
    let control = format!("/v1/sessions/{}/control", info.id);
    let (status, body) = http_owner(
        addr,
        "POST",
        &control,
        r#"{"action":"pause"}"#,
        &info.secret,
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    let (status, body) = owner("POST", "/v1/sessions/0123456789abcdef/keepalive");
    assert_eq!(
        (status, body.contains("no streaming session")),
        (404, true),
        "{body}"
    );
    let session = format!("/v1/sessions/{}", info.id);
    assert_eq!(owner("DELETE", &session).0, 204);
    let (status, body) = owner("DELETE", &session);
    assert_eq!((status, body.contains("no session")), (404, true), "{body}");
    assert_eq!(server.metrics().forbidden, 4, "404s are not refusals");
}

mod roles;
mod upload_room;
