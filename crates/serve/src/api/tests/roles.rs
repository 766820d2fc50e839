//! Every route × {no token, unknown token, each role} → its status, with and without
//! anonymous viewers; a revoked token is refused once the file is reloaded.

use super::*;
use crate::api::roles::{Rule, ROUTES};
use crate::metrics::AuthFailure;
use isnode_auth::{Role, TokenStore};

/// The tokens of a test server, one per role, and one with every role.
struct Tokens {
    viewer: String,
    operator: String,
    metrics: String,
}

fn with_tokens(dir: &tempfile::TempDir) -> Tokens {
    let mut s = TokenStore::default();
    let t = Tokens {
        viewer: s.add("v", &[Role::Viewer], 0).unwrap(),
        operator: s.add("o", &[Role::Operator], 0).unwrap(),
        metrics: s.add("m", &[Role::Metrics], 0).unwrap(),
    };
    s.save(&dir.path().join(isnode_auth::DEFAULT_TOKENS_FILE))
        .unwrap();
    t
}

fn server_with(dir: &tempfile::TempDir, anonymous_viewers: bool) -> ServerHandle {
    let args = ServeConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        cache_size_bytes: 2 << 20,
        threads: Some(1),
        min_dest_port: 1,
        validate_destination: isnode_serve_config::ValidateDestination::Off,
        anonymous_viewers,
        ..ServeConfig::default()
    };
    start(dir.path(), &args).unwrap()
}

/// A concrete request path for a route pattern.
fn concrete(path: &str) -> String {
    path.replace("{name}", "a.ts")
        .replace("{sbn}", "0")
        .replace("{id}", "nosuch")
}

/// Whether a status means the role check let the request through.
fn passed(status: u16) -> bool {
    status != 401 && status != 403
}

#[test]
fn every_route_answers_each_token_as_its_rule_says() {
    for anonymous_viewers in [true, false] {
        let dir = volume();
        let t = with_tokens(&dir);
        let server = server_with(&dir, anonymous_viewers);
        let addr = server.local_addr();
        let unknown = "ab".repeat(32);
        for &(method, pattern, rule) in ROUTES {
            let path = concrete(pattern);
            let cases: [(&str, Option<Role>); 5] = [
                ("", None),
                (&unknown, None),
                (&t.viewer, Some(Role::Viewer)),
                (&t.operator, Some(Role::Operator)),
                (&t.metrics, Some(Role::Metrics)),
            ];
            for (i, (token, holds)) in cases.iter().enumerate() {
                // Broadcast creation with an empty body is a 400 after the check: no stream.
                let (status, body) = http_as(addr, method, &path, "", token).unwrap();
                // This test fails on purpose far more than a client may: not slowed here.
                server.shared.auth_throttle.lock().unwrap().clear();
                let ctx =
                    format!("{method} {path} case {i} anon {anonymous_viewers}: {status} {body}");
                assert!(
                    status != 405 && !(status == 404 && body.contains("no such resource")),
                    "a route of the table the router does not have: {ctx}"
                );
                let want_pass = match rule {
                    Rule::Public | Rule::SessionOwner => true,
                    Rule::Role(r) if i == 0 => r == Role::Viewer && anonymous_viewers,
                    Rule::Role(r) => *holds == Some(r),
                    Rule::ViewerToken => *holds == Some(Role::Viewer),
                };
                if let Rule::SessionOwner = rule {
                    // The session check: no such session, whatever the token.
                    assert_eq!(status, 404, "{ctx}");
                    continue;
                }
                assert_eq!(passed(status), want_pass, "{ctx}");
                if !want_pass {
                    let want = if i < 2 { 401 } else { 403 };
                    assert_eq!(status, want, "{ctx}");
                    assert!(body.contains("\"error\""), "{ctx}");
                    if let Rule::Role(r) = rule {
                        assert!(body.contains(r.name()), "names the role: {ctx}");
                    }
                    if let Rule::ViewerToken = rule {
                        assert!(body.contains("viewer"), "names the role: {ctx}");
                    }
                }
            }
        }
        let m = &server.shared.metrics;
        for why in [
            AuthFailure::Missing,
            AuthFailure::Unknown,
            AuthFailure::WrongRole,
        ] {
            assert!(m.auth_failures(why) > 0, "{why:?} not counted");
        }
    }
}

/// Methods a route may answer (`HEAD` comes with `GET`).
const METHODS: [&str; 5] = ["GET", "POST", "PUT", "DELETE", "PATCH"];

/// The table is the router's: every path the router was built with is in the table and
/// every table path in the router; of each path, the router answers exactly the methods
/// the table lists (the others are `405`). A route added without its line in the table,
/// or a method added to a path, fails here.
#[test]
fn the_table_lists_every_route_of_the_real_router() {
    let built = crate::api::routes().paths;
    let mut table_paths: Vec<&str> = ROUTES.iter().map(|r| r.1).collect();
    table_paths.sort_unstable();
    table_paths.dedup();
    let mut router_paths = built.clone();
    router_paths.sort_unstable();
    assert_eq!(router_paths.len(), built.len(), "a path added twice");
    router_paths.dedup();
    assert_eq!(
        router_paths, table_paths,
        "the router's paths and the table's"
    );

    // Closed: nothing runs past the role checks (no upload, delete or stream).
    let dir = volume();
    with_tokens(&dir);
    let server = server_with(&dir, false);
    let addr = server.local_addr();
    let mut answered = 0;
    for pattern in &built {
        for method in METHODS {
            let path = concrete(pattern);
            let (status, body) = http(addr, method, &path, "").unwrap();
            server.shared.auth_throttle.lock().unwrap().clear();
            let listed = ROUTES.iter().any(|r| r.0 == method && r.1 == *pattern);
            let ctx = format!("{method} {path}: {status} {body}");
            assert_ne!(status, 0, "{ctx}");
            assert!(
                !(status == 404 && body.contains("no such resource")),
                "{ctx}"
            );
            if status != 405 {
                answered += 1;
            }
            assert_eq!(
                status != 405,
                listed,
                "the router and the table differ: {ctx}"
            );
        }
    }
    assert_eq!(answered, ROUTES.len(), "routes the router answers");
}

#[test]
fn without_a_token_file_operator_routes_stay_open_on_loopback() {
    let dir = volume();
    let server = server(&dir);
    let (status, _) = http(server.local_addr(), "GET", "/metrics", "").unwrap();
    assert_eq!(status, 200);
    let (status, _) = http(server.local_addr(), "DELETE", "/v1/broadcasts/x", "").unwrap();
    assert_eq!(status, 404);
}

#[test]
fn the_token_query_parameter_opens_content() {
    let dir = volume();
    let t = with_tokens(&dir);
    let server = server_with(&dir, false);
    let addr = server.local_addr();
    let (status, _) = http(addr, "GET", "/o/a.ts", "").unwrap();
    assert_eq!(status, 401);
    let (status, _) = http(addr, "GET", &format!("/o/a.ts?token={}", t.viewer), "").unwrap();
    assert_eq!(status, 200);
}

#[test]
fn a_revoked_token_is_refused_after_reload_and_a_broken_file_keeps_the_old_ones() {
    let dir = volume();
    let t = with_tokens(&dir);
    let server = server_with(&dir, true);
    let addr = server.local_addr();
    let (status, _) = http_as(addr, "GET", "/metrics", "", &t.metrics).unwrap();
    assert_eq!(status, 200);
    let path = dir.path().join(isnode_auth::DEFAULT_TOKENS_FILE);
    let mut s = TokenStore::load(&path).unwrap().unwrap();
    assert!(s.revoke("m"));
    s.save(&path).unwrap();
    server.reload_tokens().unwrap();
    let (status, _) = http_as(addr, "GET", "/metrics", "", &t.metrics).unwrap();
    assert_eq!(status, 401);
    std::fs::write(&path, "{ broken").unwrap();
    assert!(server.reload_tokens().is_err());
    let (status, _) = http_as(addr, "DELETE", "/v1/broadcasts/x", "", &t.operator).unwrap();
    assert_eq!(status, 404, "the old tokens are kept");
}

#[test]
fn off_loopback_without_a_token_file_the_server_refuses_to_start() {
    let dir = volume();
    let args = ServeConfig {
        listen: "0.0.0.0:0".parse().unwrap(),
        plain_http: true,
        threads: Some(1),
        cache_size_bytes: 2 << 20,
        ..ServeConfig::default()
    };
    let err = start(dir.path(), &args).err().expect("refused");
    assert!(err.to_string().contains("token"), "{err}");
}

#[test]
fn failed_authentications_are_slowed_down_with_429() {
    let dir = volume();
    let t = with_tokens(&dir);
    let server = server_with(&dir, true);
    let addr = server.local_addr();
    let unknown = "cd".repeat(32);
    for i in 0..isnode_auth::throttle::BURST {
        let (status, _) = http_as(addr, "GET", "/metrics", "", &unknown).unwrap();
        assert_eq!(status, 401, "failure {i}");
    }
    // The next failure is slowed down.
    let (status, body) = http_as(addr, "GET", "/metrics", "", &unknown).unwrap();
    assert_eq!(status, 429, "{body}");
    assert!(body.contains("retry in"), "{body}");
    assert_eq!(
        server.shared.metrics.auth_failures(AuthFailure::Throttled),
        1
    );
    // A good token from the same address is not (issue 30: strangers sharing an operator's
    // address or /64 kept its scraper at 429).
    let (status, body) = http_as(addr, "GET", "/metrics", "", &t.metrics).unwrap();
    assert_eq!(status, 200, "{body}");
    // Anonymous viewer routes are not slowed by it.
    let (status, body) = http(addr, "GET", "/v1/objects", "").unwrap();
    assert_eq!(status, 200, "{body}");
}

#[test]
fn a_token_s_use_is_recorded_and_written_beside_the_token_file() {
    let dir = volume();
    let t = with_tokens(&dir);
    let server = server_with(&dir, true);
    let addr = server.local_addr();
    let store = server.shared.tokens.read().unwrap().clone().unwrap();
    let hash = |name: &str| store.find(name).unwrap().sha256.clone();
    let (status, _) = http_as(addr, "GET", "/metrics", "", &t.metrics).unwrap();
    assert_eq!(status, 200);
    // A refused use (wrong role) is not a use.
    let (status, _) = http_as(addr, "GET", "/metrics", "", &t.viewer).unwrap();
    assert_eq!(status, 403);
    assert!(server.shared.last_use.get(&hash("m")).is_some());
    assert_eq!(server.shared.last_use.get(&hash("v")), None);
    let side = isnode_auth::last_use::side_path(&server.shared.tokens_path);
    assert!(!side.exists(), "not written on the request path");
    // Written at shutdown (and every FLUSH_INTERVAL_S while running).
    server.shutdown();
    let times = isnode_auth::last_use::read(&side).unwrap();
    assert!(times.contains_key(&hash("m")), "{times:?}");
    assert!(!times.contains_key(&hash("v")) && !times.contains_key(&hash("o")));
}
