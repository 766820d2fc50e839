//! The API middleware that sends a request for a title to the node that serves it
//! (docs/protocol.md, "Redirects between edges"): `POST /v1/sessions` (the title is the
//! body's `object`), `GET`/`HEAD /v1/objects/{name}` and its `content`, `index`,
//! `index.m3u8`, `master.m3u8`, `manifest.mpd` and `iframes.m3u8`, and `/o/{name}`
//! ([`PLACED_ROUTES`]). A request this node does not serve is answered
//! `307 Temporary Redirect` with `Location` = the serving node's URL for the same path and
//! query; one it serves gets `Isnode-Ranking` (the title's live ranking) on its answer. A
//! redirect past the title's serving nodes for load carries `isnode_spill=1` in its query:
//! the node it goes to serves it whatever its own view of the loads (no redirect back).
//! A role token in the query (`?token=`) is copied into `Location` only when the node it
//! goes to is `https://`: never to a plain-HTTP URL (docs/protocol.md). Every redirect goes
//! to a node of the node list, so never to a stranger either.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::api::state::ApiState;
use isnode_control::cluster::{Asked, Route, Why};

/// The header carrying a title's live ranking: its nodes' URLs, the owner first, separated by
/// `, `.
pub(crate) const RANKING_HEADER: &str = "isnode-ranking";
/// The header of a client failing over along a title's ranking: this node serves it whatever
/// the placement if it is next in the ranking (the lost node may not be counted dead here
/// yet); a node further down places it as usual.
pub(crate) const SERVE_HERE_HEADER: &str = "isnode-serve-here";
/// The header naming the node that answered (on redirects: the node that redirected).
pub(crate) const NODE_HEADER: &str = "isnode-node";
/// The query parameter of a request redirected for load: served where it is sent.
pub(crate) const SPILL_PARAM: &str = "isnode_spill=1";

/// The routes under `/v1/objects/{name}/` a viewer reaches through placement (besides the
/// object itself, `GET /v1/objects/{name}`): what a player or an info request asks of
/// whichever node it picked, and which would otherwise make any edge fill the title. The
/// routes of a client's session (`digests`, `codewords/.../packets`, `key`) go to the node
/// it streams from, which serves the title.
const PLACED_ROUTES: [&str; 6] = [
    "content",
    "index",
    "index.m3u8",
    "master.m3u8",
    "manifest.mpd",
    "iframes.m3u8",
];

/// The title a request names in its path, for the routes that redirect (percent-decoded);
/// `None` for every other route.
pub(crate) fn title_in_path(method: &Method, path: &str) -> Option<String> {
    if *method != Method::GET && *method != Method::HEAD {
        return None;
    }
    let raw = if let Some(rest) = path.strip_prefix("/o/") {
        rest
    } else {
        let rest = path.strip_prefix("/v1/objects/")?;
        match rest.split_once('/') {
            None => rest,
            Some((name, route)) if PLACED_ROUTES.contains(&route) => name,
            Some(_) => return None,
        }
    };
    if raw.is_empty() || raw.contains('/') {
        return None;
    }
    percent_decode(raw)
}

/// `%XX` escapes decoded (UTF-8 required); `None` for a malformed escape.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        if c == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(c);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The object a session request asks for (`None`: malformed, left to the handler).
fn title_in_body(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Named {
        object: String,
    }
    serde_json::from_slice::<Named>(body).ok().map(|n| n.object)
}

/// Redirects or passes on (see the module's documentation).
pub(crate) async fn to_the_serving_node(
    State(sh): State<Arc<ApiState>>,
    req: Request,
    next: Next,
) -> Response {
    let cluster = &sh.cluster;
    if !cluster.active() {
        return next.run(req).await;
    }
    let (title, req) = if *req.method() == Method::POST && req.uri().path() == "/v1/sessions" {
        let (parts, body) = req.into_parts();
        let bytes = match axum::body::to_bytes(body, isnode_http::limits::MAX_BODY_BYTES).await {
            Ok(b) => b,
            Err(e) => {
                let body = isnode_proto::ErrorBody::new(format!("request body: {e}"));
                return (StatusCode::PAYLOAD_TOO_LARGE, axum::Json(body)).into_response();
            }
        };
        let title = title_in_body(&bytes);
        (title, Request::from_parts(parts, Body::from(bytes)))
    } else {
        (title_in_path(req.method(), req.uri().path()), req)
    };
    let Some(title) = title else {
        return next.run(req).await;
    };
    // A request its route would refuse gets that refusal here, from its handler: no
    // redirect, no ranking for strangers.
    let (parts, body) = req.into_parts();
    let allowed = super::roles::allowed(&sh, &parts, isnode_auth::Role::Viewer);
    let req = Request::from_parts(parts, body);
    if !allowed {
        return next.run(req).await;
    }
    let spilled = req
        .uri()
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == SPILL_PARAM));
    let asked = if spilled {
        Asked::Spilled
    } else if req.headers().contains_key(SERVE_HERE_HEADER) {
        Asked::FailingOver
    } else {
        Asked::Placed
    };
    let own_load = match asked == Asked::Placed && cluster.uses_load() {
        true => Some(isnode_control::admit::load_share(&sh.control)),
        false => None,
    };
    match cluster.route(&title, asked, own_load) {
        Route::There(base, why) => {
            let tls = base.starts_with("https://");
            let query = req.uri().query().and_then(|q| query_for(q, tls));
            let path = match &query {
                Some(q) => format!("{}?{q}", req.uri().path()),
                None => req.uri().path().to_string(),
            };
            let location = match (why, &query) {
                (Why::Placement, _) => format!("{base}{path}"),
                (Why::Load, Some(_)) => format!("{base}{path}&{SPILL_PARAM}"),
                (Why::Load, None) => format!("{base}{path}?{SPILL_PARAM}"),
            };
            redirect(&location, &sh)
        }
        Route::Here(ranking) => {
            let mut r = next.run(req).await;
            // The ranking goes with what is served, not with a refusal.
            if !r.status().is_success() {
                return r;
            }
            if let Ok(v) = HeaderValue::from_str(&ranking.join(", ")) {
                r.headers_mut().insert(RANKING_HEADER, v);
            }
            r
        }
    }
}

/// The query a redirect to a node carries: `query` as it came to an `https://` node
/// (`tls`), without its `token=` parameters to a plain-HTTP one; `None` when nothing is
/// left.
fn query_for(query: &str, tls: bool) -> Option<String> {
    let kept: Vec<&str> = query
        .split('&')
        .filter(|p| tls || !(p.starts_with("token=") || *p == "token"))
        .collect();
    match kept.is_empty() {
        true => None,
        false => Some(kept.join("&")),
    }
}

fn redirect(location: &str, sh: &ApiState) -> Response {
    let mut r = StatusCode::TEMPORARY_REDIRECT.into_response();
    if let Ok(v) = HeaderValue::from_str(location) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    let name = sh.config().node_name.clone().unwrap_or_default();
    if let Ok(v) = HeaderValue::from_str(&name) {
        r.headers_mut().insert(NODE_HEADER, v);
    }
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_are_found_in_the_redirecting_routes_only() {
        let get = Method::GET;
        assert_eq!(title_in_path(&get, "/o/a.ts").as_deref(), Some("a.ts"));
        assert_eq!(
            title_in_path(&Method::HEAD, "/v1/objects/a%20b.ts/content").as_deref(),
            Some("a b.ts")
        );
        assert_eq!(
            title_in_path(&get, "/v1/objects/x.mp4/index.m3u8").as_deref(),
            Some("x.mp4")
        );
        assert_eq!(title_in_path(&get, "/v1/objects/x.mp4/digests"), None);
        for placed in [
            "/v1/objects/x.mp4",
            "/v1/objects/x.mp4/index",
            "/v1/objects/x.mp4/master.m3u8",
            "/v1/objects/x.mp4/manifest.mpd",
            "/v1/objects/x.mp4/iframes.m3u8",
        ] {
            assert_eq!(
                title_in_path(&get, placed).as_deref(),
                Some("x.mp4"),
                "{placed}"
            );
        }
        assert_eq!(title_in_path(&get, "/v1/objects/x.mp4/key"), None);
        assert_eq!(
            title_in_path(&get, "/v1/objects/x.mp4/codewords/1/packets"),
            None
        );
        assert_eq!(title_in_path(&Method::PUT, "/o/a.ts"), None);
        assert_eq!(title_in_path(&get, "/o/%zz"), None);
        assert_eq!(title_in_path(&get, "/o/"), None);
        assert_eq!(
            title_in_body(br#"{"object":"t.ts","port":5000}"#).as_deref(),
            Some("t.ts")
        );
        assert_eq!(title_in_body(b"{"), None);
    }

    #[test]
    fn a_token_goes_into_a_redirect_to_https_only() {
        let q = "a=1&token=secret&b=2";
        assert_eq!(query_for(q, true).as_deref(), Some(q));
        assert_eq!(query_for(q, false).as_deref(), Some("a=1&b=2"));
        assert_eq!(query_for("token=secret", false), None);
        assert_eq!(query_for("token", false), None);
        assert_eq!(query_for("tokens=1", false).as_deref(), Some("tokens=1"));
    }
}
