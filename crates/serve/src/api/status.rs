//! The status routes: `GET /v1/status` (a JSON snapshot, docs/protocol.md), the status
//! page `GET /` with its script and style (embedded in the binary), and the sampler task
//! that keeps the egress of the last minutes.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Json;
use isnode_proto::status::{
    MemberHealth, StatusBody, StatusBroadcast, StatusCache, StatusMember, StatusSession,
    StatusTitle, StatusTotals,
};
use isnode_proto::ObjectStatus;

use super::{blocking, store_error, Sh};
use crate::api::state::ApiState;
use crate::metrics::expose::Scrape;
use crate::metrics::MetricsSnapshot;
use isnode_plane::stream::SessionState;

const PAGE_HTML: &str = include_str!("../ui/index.html");
const PAGE_JS: &str = include_str!("../ui/app.js");
const PAGE_CSS: &str = include_str!("../ui/style.css");
/// hls.js 1.7.4 (`dist/hls.min.js` of the npm package, Apache-2.0: `ui/vendor/hls.js.LICENSE`),
/// the page's player for HLS (titles with renditions, MPEG-TS objects, AES-128).
const HLS_JS: &[u8] = include_bytes!("../ui/vendor/hls.min.js");
/// hls.js's licence, served beside it.
const HLS_JS_LICENSE: &str = include_str!("../ui/vendor/hls.js.LICENSE");
/// dash.js 5.2.1 (`dist/modern/umd/dash.all.min.js` of the npm package `dashjs`,
/// BSD-3-Clause: `ui/vendor/dash.js.LICENSE`), loaded by the page only to play encrypted
/// CMAF titles (DASH with EME Clear Key).
const DASH_JS: &[u8] = include_bytes!("../ui/vendor/dash.all.min.js");
/// dash.js's licence, served beside it.
const DASH_JS_LICENSE: &str = include_str!("../ui/vendor/dash.js.LICENSE");

/// `r` with the status routes added.
pub(super) fn routes(r: super::Routes) -> super::Routes {
    r.route("/v1/status", get(status))
        .route("/", get(|| async { page() }))
        .route(
            "/ui/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", PAGE_JS) }),
        )
        .route(
            "/ui/style.css",
            get(|| async { asset("text/css; charset=utf-8", PAGE_CSS) }),
        )
        .route(
            "/ui/vendor/hls.min.js",
            get(|| async { asset("text/javascript; charset=utf-8", HLS_JS) }),
        )
        .route(
            "/ui/vendor/hls.js.LICENSE",
            get(|| async { asset("text/plain; charset=utf-8", HLS_JS_LICENSE) }),
        )
        .route(
            "/ui/vendor/dash.all.min.js",
            get(|| async { asset("text/javascript; charset=utf-8", DASH_JS) }),
        )
        .route(
            "/ui/vendor/dash.js.LICENSE",
            get(|| async { asset("text/plain; charset=utf-8", DASH_JS_LICENSE) }),
        )
}

/// What the status page may load and run: its own scripts and styles only (no inline
/// script, no `eval`), media and hls.js's worker from `blob:` URLs (MSE), media and
/// playlists from any node of a cluster (a title may be redirected to another node's
/// origin), no plug-ins, no framing.
const PAGE_CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
    img-src 'self' data:; media-src 'self' blob: http: https:; worker-src 'self' blob:; \
    connect-src 'self' http: https:; object-src 'none'; base-uri 'none'; \
    frame-ancestors 'none'; form-action 'self'";

/// The status page, under [`PAGE_CSP`].
fn page() -> Response {
    let mut r = asset("text/html; charset=utf-8", PAGE_HTML);
    r.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        header::HeaderValue::from_static(PAGE_CSP),
    );
    r
}

/// One of the page's embedded files: never sniffed as another type.
fn asset(content_type: &'static str, body: impl Into<axum::body::Body>) -> Response {
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body.into(),
    )
        .into_response()
}

/// Everything `GET /metrics` encodes: the counters and the per-title series (read under
/// the session table's lock, as sessions leaving it are counted).
pub(super) fn scrape(sh: &ApiState) -> Scrape {
    let snapshot = sh.snapshot();
    let table = sh.lock_sessions();
    let live = table.values().map(|s| {
        (
            s.object.rec.name.as_str(),
            s.bytes_sent.load(Ordering::Relaxed),
        )
    });
    let titles = sh.metrics.titles.counts(live);
    drop(table);
    Scrape { snapshot, titles }
}

/// Samples the egress every second (`metrics::egress`) until aborted.
pub(super) async fn sample_egress(sh: Arc<ApiState>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let m = &sh.metrics;
        let udp: u64 = sh
            .plane_counters
            .bytes
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .sum();
        let http = m.http_bytes.load(Ordering::Relaxed);
        m.egress.sample(sh.now_ns(), udp, http);
    }
}

/// `GET /v1/status`.
async fn status(_: super::roles::MetricsReader, State(sh): Sh) -> Response {
    let read = blocking(&sh, |sh| {
        let states = sh.control.objects.with_volume(|v| v.member_states());
        sh.control.objects.list().map(|l| (l, states))
    });
    let (listed, states) = match read.await {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => return store_error(e),
        Err(r) => return r,
    };
    let tsi = sh.control.objects.tsi();
    let objects: Vec<isnode_proto::ObjectInfo> = listed.iter().map(|o| o.json(tsi)).collect();
    let mut body = body(&sh, objects);
    match states {
        Ok(states) => add_member_states(&mut body.members, &states),
        Err(e) => tracing::warn!("status: reading the member states: {e}"),
    }
    Json(body).into_response()
}

fn body(sh: &ApiState, objects: Vec<isnode_proto::ObjectInfo>) -> StatusBody {
    let snap = sh.snapshot();
    let sessions = sessions(sh);
    let mut streaming: HashMap<&str, u64> = HashMap::new();
    for s in sessions.iter().filter(|s| s.state == "streaming") {
        *streaming.entry(s.title.as_str()).or_default() += 1;
    }
    let titles = objects
        .into_iter()
        .map(|o| StatusTitle {
            sessions: streaming.get(o.name.as_str()).copied().unwrap_or(0),
            name: o.name,
            size_bytes: o.size_bytes,
            duration_s: o.duration_s,
            bitrate_bps: o.bitrate_bps,
            content_type: o.content_type,
            status: o.status,
            problem: o.problem.filter(|_| o.status != ObjectStatus::Ok),
        })
        .collect();
    StatusBody {
        version: env!("CARGO_PKG_VERSION").to_string(),
        uptime_s: sh.control.clock.epoch().elapsed().as_secs(),
        engine: sh.control.engine.name().to_string(),
        titles,
        broadcasts: broadcasts(sh),
        sessions,
        members: members(&snap),
        scrub: Some(scrub(sh, &snap)),
        fills: sh.fills.origin().map(|(o, _)| {
            let f = &snap.fill;
            isnode_proto::status::StatusFills {
                origin: o.label().to_string(),
                fill_bytes: f.fill_bytes,
                origin_requests: f.origin_requests,
                active: f.fills_active,
                started: f.fills_started,
                done: f.fills_done,
                errors: f.fill_errors.iter().sum(),
                titles_evicted: f.titles_evicted,
            }
        }),
        playback: Some(isnode_proto::status::StatusPlayback {
            streams: snap.playback.streams,
            late_streams: snap.playback.late_streams,
            min_slack_ms: snap.playback.min_slack_ms,
        }),
        cache: cache(&snap),
        egress_interval_s: 1,
        egress: sh.metrics.egress.samples(),
        totals: StatusTotals {
            sessions_started: snap.sessions_started,
            sessions_refused: snap.sessions_refused.iter().sum(),
            broadcasts_started: snap.broadcasts_started,
            udp_bytes_sent: snap.total_bytes(),
            http_bytes_sent: snap.http_bytes,
        },
    }
}

fn sessions(sh: &ApiState) -> Vec<StatusSession> {
    let now = sh.now_ns();
    let mut v: Vec<StatusSession> = sh
        .lock_sessions()
        .values()
        .map(|s| {
            let next = s.next_codeword.load(Ordering::Relaxed);
            let position_ns = u128::from(next) * u128::from(s.object.codeword_ns());
            StatusSession {
                id: s.id.clone(),
                title: s.object.rec.name.clone(),
                state: match s.state() {
                    SessionState::Streaming => "streaming",
                    _ => "done",
                }
                .to_string(),
                paused: s.paused.load(Ordering::Acquire) || !s.validated.load(Ordering::Acquire),
                position_s: (position_ns as f64 / 1e9).min(s.object.rec.duration_s.max(0.0)),
                rate_bps: s.send_rate_bps,
                loss_rate: s.loss_report().map(|l| f64::from(l.units()) / 10_000.0),
                peer: s.dest.to_string(),
                bytes_sent: s.bytes_sent.load(Ordering::Relaxed),
                age_s: now.saturating_sub(s.created_ns) as f64 / 1e9,
            }
        })
        .collect();
    v.sort_by(|a, b| a.title.cmp(&b.title).then(a.id.cmp(&b.id)));
    v
}

fn broadcasts(sh: &ApiState) -> Vec<StatusBroadcast> {
    sh.control
        .broadcasts
        .list()
        .iter()
        .map(|b| StatusBroadcast {
            id: b.id.clone(),
            title: b.object.rec.name.clone(),
            scheme: b.scheme.clone(),
            channels: b.channels.len() as u64,
            viewers: b.viewers.load(Ordering::Relaxed),
            automatic: b.automatic,
            send_rate_bps: b.send_rate_bps,
            rung: b.rung.clone(),
        })
        .collect()
}

fn members(snap: &MetricsSnapshot) -> Vec<StatusMember> {
    snap.member_errors
        .iter()
        .zip(snap.member_failed.iter().zip(&snap.member_slow))
        .enumerate()
        .map(|(m, (errors, (failed, slow)))| StatusMember {
            member: u32::try_from(m).unwrap_or(u32::MAX),
            health: if *failed {
                MemberHealth::Failed
            } else if *slow {
                MemberHealth::Slow
            } else {
                MemberHealth::Ok
            },
            read_errors: *errors,
            state: None,
            reason: None,
            rebuilt_bytes: None,
        })
        .collect()
}

/// Adds the catalog's state of each member.
fn add_member_states(members: &mut [StatusMember], states: &[isnode_store::MemberState]) {
    for (m, state) in members.iter_mut().zip(states) {
        m.state = Some(state.name().to_string());
        match state {
            isnode_store::MemberState::Failed { reason } => m.reason = Some(reason.clone()),
            isnode_store::MemberState::Rebuilding { done_bytes, .. } => {
                m.rebuilt_bytes = Some(*done_bytes)
            }
            isnode_store::MemberState::Ok => {}
        }
    }
}

fn scrub(sh: &ApiState, snap: &MetricsSnapshot) -> isnode_proto::status::StatusScrub {
    let s = &snap.scrub;
    isnode_proto::status::StatusScrub {
        enabled: sh.config().scrub_rate_bps > 0,
        rate_bps: s.rate_bps,
        passes: s.passes,
        pass_done_bytes: s.pass_done_bytes,
        pass_total_bytes: s.pass_total_bytes,
        bytes_read: s.bytes_read,
        bad_blocks: s.bad_blocks,
        bad_packets: s.bad_packets,
        damaged_objects: s.damaged_objects,
    }
}

fn cache(snap: &MetricsSnapshot) -> StatusCache {
    let lookups = snap.cache_hits + snap.cache_misses;
    StatusCache {
        hits: snap.cache_hits,
        misses: snap.cache_misses,
        evictions: snap.cache_evictions,
        hit_ratio: (lookups > 0).then(|| snap.cache_hits as f64 / lookups as f64),
        bytes: snap.cache_bytes,
        pool_bytes: snap.cache_pool_bytes,
    }
}
