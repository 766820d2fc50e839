//! `isnode status`, the Grafana dashboard and `--log-format json`, against a real server.

mod serve_support;

use std::collections::BTreeSet;
use std::net::UdpSocket;
use std::time::{Duration, Instant};

use serve_support::{run_ok, Server, Vol};

/// `isnode status` prints the summary and one table per section, with the title and the
/// session the server has (read from `GET /v1/status`).
#[test]
fn isnode_status_prints_titles_sessions_and_summary() {
    let vol = Vol::create(&[]);
    vol.add_ts("clip.ts", 2_000_000, 20.0, 7);
    let server = Server::start(&vol, &[]);
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let info = server.open_session("clip.ts", &sock);
    let id = info["id"].as_str().expect("a session id").to_string();

    let out = run_ok(&["status", "--server", &server.url()]);
    assert!(out.starts_with("isnode "), "{out}");
    assert!(
        out.contains("sessions 1 streaming (1 started, 0 refused)"),
        "{out}"
    );
    assert!(out.contains("members 8/8 ok"), "{out}");
    assert!(out.contains("\nTITLES (1)\n"), "{out}");
    let title_row = out
        .lines()
        .find(|l| l.trim_start().starts_with("clip.ts"))
        .unwrap_or_else(|| panic!("no title row:\n{out}"));
    assert!(title_row.contains("video/mp2t"), "{title_row}");
    assert!(title_row.contains("2.00 Mbit/s"), "{title_row}");
    assert!(title_row.trim_end().ends_with("ok"), "{title_row}");
    assert!(out.contains("\nSESSIONS (1)\n"), "{out}");
    let session_row = out
        .lines()
        .find(|l| l.trim_start().starts_with(&id))
        .unwrap_or_else(|| panic!("no row for session {id}:\n{out}"));
    assert!(session_row.contains("clip.ts"), "{session_row}");
    assert!(session_row.contains("streaming"), "{session_row}");
    assert!(out.contains("\nBROADCASTS (0)\n  (none)\n"), "{out}");

    // The JSON it reads is the documented one.
    let r = server.req("GET", "/v1/status", None);
    assert_eq!(r.status, 200, "{}", r.body);
    let body: isnode_proto::status::StatusBody = serde_json::from_str(&r.body).expect("StatusBody");
    assert_eq!(body.sessions.len(), 1);
    assert_eq!(body.sessions[0].id, id);
    assert_eq!(body.titles[0].sessions, 1);
}

/// A server that cannot be reached: `isnode status` fails, naming it.
#[test]
fn isnode_status_fails_without_a_server() {
    let port = serve_support::free_port();
    let out = serve_support::command()
        .args(["status", "--server", &format!("http://127.0.0.1:{port}")])
        .output()
        .expect("running isnode status");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("isnode: error"), "{err}");
}

/// Every metric the dashboard's expressions name is one a running server exports, and the
/// dashboard covers the main families.
#[test]
fn grafana_dashboard_names_only_exported_metrics() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../packaging/grafana-dashboard.json"
    );
    let text = std::fs::read_to_string(path).expect("packaging/grafana-dashboard.json");
    let dash: serde_json::Value = serde_json::from_str(&text).expect("the dashboard parses");
    let panels = dash["panels"].as_array().expect("panels");
    let mut used = BTreeSet::new();
    for p in panels {
        let targets = p["targets"].as_array().expect("targets of a panel");
        assert!(!targets.is_empty(), "panel {} has no query", p["title"]);
        for t in targets {
            let expr = t["expr"].as_str().expect("expr");
            used.extend(metric_names(expr));
        }
    }

    let vol = Vol::create(&[]);
    let server = Server::start(&vol, &[]);
    let exported: BTreeSet<String> = server
        .metrics()
        .0
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_string)
        .collect();
    let unknown: Vec<_> = used.difference(&exported).collect();
    assert!(
        unknown.is_empty(),
        "not exported: {unknown:?}\nexported: {exported:?}"
    );
    for main in [
        "isnode_sessions_active",
        "isnode_bytes_sent_total",
        "isnode_title_bytes_sent_total",
        "isnode_session_start_seconds_bucket",
        "isnode_sessions_refused_total",
        "isnode_cache_hits_total",
        "isnode_cache_evictions_total",
        "isnode_member_healthy",
        "isnode_auth_failures_total",
        "isnode_upload_bytes_total",
        "isnode_upload_failures_total",
    ] {
        assert!(used.contains(main), "the dashboard has no panel of {main}");
    }
}

/// The `isnode_...` identifiers of a PromQL expression.
fn metric_names(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("isnode_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        out.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    out
}

/// `--log-format json`: the server's log lines are JSON objects.
#[test]
fn log_format_json_writes_json_lines() {
    let vol = Vol::create(&[]);
    let server = Server::start_env(&vol, &["--log-format", "json"], &[("ISNODE_LOG", "info")]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let line = loop {
        let log = server.log_text();
        if let Some(l) = log.lines().find(|l| l.contains("isnode serve started")) {
            break l.to_string();
        }
        assert!(Instant::now() < deadline, "no start line:\n{log}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let v: serde_json::Value =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(v["level"], "INFO", "{line}");
    assert_eq!(v["fields"]["message"], "isnode serve started", "{line}");
    assert!(v["fields"]["listen"].is_string(), "{line}");
}
