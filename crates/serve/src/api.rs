//! The HTTP/JSON control API (docs/protocol.md), on a small current-thread tokio runtime.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use isnode_store::StoreError;
use serde::Deserialize;
use serde_json::json;

use crate::metrics::Limit;
use crate::plane::{NewSession, LOOKAHEAD_CODEWORDS};
use crate::session::{blocks_of, Pacer, PacerConfig};
use crate::{EngineKind, ServeError, SessionShared, SessionState, Shared};

/// Keepalive period the server recommends to clients.
const KEEPALIVE_INTERVAL_MS: u64 = 1000;
/// The FDT is repeated before every this many codewords.
pub(crate) const FDT_EVERY: u32 = 8;
/// Pool slots kept free beyond the sessions' working sets (rebuilds, in-flight sends).
const CACHE_RESERVE_SLOTS: usize = 2;

type Sh = State<Arc<Shared>>;

/// Runs the API until `stop` fires; reports readiness (or the setup error) on `ready`.
pub(crate) fn serve(
    sh: Arc<Shared>,
    listener: std::net::TcpListener,
    stop: tokio::sync::oneshot::Receiver<()>,
    ready: std::sync::mpsc::Sender<Result<(), ServeError>>,
) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(source) => {
            let _ = ready.send(Err(ServeError::Io {
                context: "creating the control API runtime".into(),
                source,
            }));
            return;
        }
    };
    rt.block_on(async move {
        let listener = match tokio::net::TcpListener::from_std(listener) {
            Ok(l) => l,
            Err(source) => {
                let _ = ready.send(Err(ServeError::Io {
                    context: "registering the listener".into(),
                    source,
                }));
                return;
            }
        };
        let app = router(sh.clone());
        let _ = ready.send(Ok(()));
        let reaper = tokio::spawn(reap(sh.clone()));
        let (stopped_tx, stopped_rx) = tokio::sync::oneshot::channel::<()>();
        let server = axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(async move {
            let _ = stop.await;
            let _ = stopped_tx.send(());
        });
        tokio::select! {
            r = server => {
                if let Err(e) = r {
                    tracing::error!("control API: {e}");
                }
            }
            // Connections that do not close within 2 s of the stop are dropped.
            _ = async {
                let _ = stopped_rx.await;
                tokio::time::sleep(Duration::from_secs(2)).await;
            } => {}
        }
        reaper.abort();
    });
}

fn router(sh: Arc<Shared>) -> Router {
    Router::new()
        .route("/v1/objects", get(list_objects))
        .route("/v1/objects/{name}", get(get_object))
        .route("/v1/sessions", post(create_session))
        .route("/v1/sessions/{id}", get(get_session).delete(delete_session))
        .route("/v1/sessions/{id}/keepalive", post(keepalive))
        .route("/metrics", get(metrics))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "no such resource") })
        .method_not_allowed_fallback(|| async {
            error(
                StatusCode::METHOD_NOT_ALLOWED,
                "method not allowed on this resource",
            )
        })
        .with_state(sh)
}

/// Forgets ended sessions: expired and deleted ones at once, done ones after the timeout.
async fn reap(sh: Arc<Shared>) {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tick.tick().await;
        let now = sh.now_ns();
        let keep_ns = sh.args.session_timeout_ms.saturating_mul(1_000_000);
        sh.lock_sessions().retain(|_, s| match s.state() {
            SessionState::Streaming => true,
            SessionState::Done => now.saturating_sub(s.ended_ns.load(Ordering::Acquire)) < keep_ns,
            SessionState::Expired | SessionState::Deleted => false,
        });
    }
}

fn error(status: StatusCode, msg: impl std::fmt::Display) -> Response {
    (status, Json(json!({ "error": msg.to_string() }))).into_response()
}

fn store_error(e: StoreError) -> Response {
    match e {
        StoreError::NotFound(_) => error(StatusCode::NOT_FOUND, e),
        StoreError::BadName { .. } => error(StatusCode::NOT_FOUND, e),
        e => error(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

async fn list_objects(State(sh): Sh) -> Response {
    match sh.objects.list() {
        Ok(v) => Json(v.iter().map(|o| o.json()).collect::<Vec<_>>()).into_response(),
        Err(e) => store_error(e),
    }
}

async fn get_object(State(sh): Sh, Path(name): Path<String>) -> Response {
    match sh.objects.get(&name) {
        Ok(o) => Json(o.json()).into_response(),
        Err(e) => store_error(e),
    }
}

#[derive(Deserialize)]
struct CreateSession {
    object: String,
    port: u16,
    #[serde(default)]
    start_codeword: u32,
}

fn refuse(sh: &Shared, limit: Limit, value: u64, what: &str) -> Response {
    sh.metrics.refused(limit);
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(json!({
            "error": format!("admission refused: {what}"),
            "limit": limit.name(),
            "value": value,
        })),
    )
        .into_response()
}

async fn create_session(
    State(sh): Sh,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    body: Bytes,
) -> Response {
    let req: CreateSession = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("malformed request: {e}")),
    };
    if req.port == 0 {
        return error(StatusCode::BAD_REQUEST, "port 0 is not a destination");
    }
    let obj = match sh.objects.get(&req.object) {
        Ok(o) => o,
        Err(e) => return store_error(e),
    };
    // Packets only ever go to the HTTP peer's own address.
    let peer_ip = match peer.ip() {
        IpAddr::V6(v6) => v6.to_canonical(),
        v4 => v4,
    };
    let dest = SocketAddr::new(peer_ip, req.port);
    let packet_len = obj.layout.params().packet_len() as usize;
    let max_burst =
        (crate::net::MAX_SEND_BYTES / packet_len).clamp(1, crate::net::MAX_GSO_SEGMENTS) as u32;
    let now = sh.now_ns();
    let pacer = match Pacer::new(
        PacerConfig {
            layout: obj.layout.clone(),
            bitrate_bps: obj.rec.bitrate_bps,
            start_codeword: req.start_codeword,
            max_burst,
            fdt_every: FDT_EVERY,
        },
        now,
    ) {
        Ok(p) => p,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };

    let mut sessions = sh.lock_sessions();
    let active: Vec<&Arc<SessionShared>> = sessions
        .values()
        .filter(|s| s.state() == SessionState::Streaming)
        .collect();
    if let Some(max) = sh.args.max_sessions_per_client {
        let mine = active.iter().filter(|s| s.peer_ip == peer_ip).count();
        if mine >= max as usize {
            return refuse(
                &sh,
                Limit::MaxSessionsPerClient,
                u64::from(max),
                &format!("{peer_ip} already has {mine} sessions"),
            );
        }
    }
    if let Some(max) = sh.args.max_bitrate {
        let used: u64 = active.iter().map(|s| s.send_rate_bps).sum();
        if used.saturating_add(obj.send_rate_bps) > max {
            return refuse(
                &sh,
                Limit::MaxBitrateBps,
                max,
                &format!(
                    "bitrate budget exhausted ({used} of {max} bit/s in use, {} more needed)",
                    obj.send_rate_bps
                ),
            );
        }
    }
    if sh.engine != EngineKind::Traditional {
        let mut blocks: HashSet<(u32, u32, u64)> = HashSet::new();
        let mut add = |o: &crate::objects::ObjectInfo, c: u32| {
            for (m, b) in blocks_of(&o.layout, c..c.saturating_add(LOOKAHEAD_CODEWORDS)) {
                blocks.insert((o.rec.toi, m, b));
            }
        };
        for s in &active {
            add(&s.object, s.next_codeword.load(Ordering::Relaxed));
        }
        add(&obj, req.start_codeword);
        let slots = sh.cache.slots() as usize;
        if blocks.len() + CACHE_RESERVE_SLOTS > slots {
            return refuse(
                &sh,
                Limit::CacheSizeBytes,
                sh.args.cache_size,
                &format!(
                    "the block pool ({slots} blocks) cannot hold the {} blocks the sessions need",
                    blocks.len()
                ),
            );
        }
    }
    drop(active);
    let id = loop {
        let id = format!("{:016x}", rand::random::<u64>());
        if !sessions.contains_key(&id) {
            break id;
        }
    };
    let s = Arc::new(SessionShared {
        id: id.clone(),
        object: obj.clone(),
        dest,
        peer_ip,
        send_rate_bps: obj.send_rate_bps,
        start_codeword: req.start_codeword,
        next_codeword: AtomicU32::new(req.start_codeword),
        packets_sent: AtomicU64::new(0),
        bytes_sent: AtomicU64::new(0),
        state: AtomicU8::new(SessionState::Streaming as u8),
        last_keepalive_ns: AtomicU64::new(now),
        ended_ns: AtomicU64::new(0),
    });
    let n = sh.workers.len();
    let w = sh.next_worker.fetch_add(1, Ordering::Relaxed) % n;
    if sh.workers[w]
        .try_send(NewSession {
            shared: s.clone(),
            pacer,
        })
        .is_err()
    {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "data plane busy, try again",
        );
    }
    sessions.insert(id.clone(), s);
    drop(sessions);
    sh.metrics.sessions_started.fetch_add(1, Ordering::Relaxed);
    tracing::info!(%id, object = %obj.rec.name, %dest, "session started");
    let body = json!({
        "id": id,
        "destination": dest.to_string(),
        "object": obj.json(),
        "start_codeword": req.start_codeword,
        "send_rate_bps": obj.send_rate_bps,
        "keepalive_interval_ms": KEEPALIVE_INTERVAL_MS,
        "session_timeout_ms": sh.args.session_timeout_ms,
        "fdt_xml": obj.fdt_xml,
        "fec": {
            "encoding_id": isnode_wire::FEC_ENCODING_ID_RS28,
            "symbol_size": obj.rec.symbol_len,
            "max_source_block_length": obj.rec.source_symbols,
            "max_encoding_symbols": obj.rec.source_symbols + obj.rec.repair_symbols,
        },
    });
    (StatusCode::CREATED, Json(body)).into_response()
}

fn find(sh: &Shared, id: &str) -> Option<Arc<SessionShared>> {
    sh.lock_sessions().get(id).cloned()
}

async fn get_session(State(sh): Sh, Path(id): Path<String>) -> Response {
    let Some(s) = find(&sh, &id) else {
        return error(StatusCode::NOT_FOUND, format!("no session {id:?}"));
    };
    let state = match s.state() {
        SessionState::Streaming => "streaming",
        _ => "done",
    };
    Json(json!({
        "id": s.id,
        "object": s.object.rec.name,
        "destination": s.dest.to_string(),
        "start_codeword": s.start_codeword,
        "next_codeword": s.next_codeword.load(Ordering::Relaxed),
        "packets_sent": s.packets_sent.load(Ordering::Relaxed),
        "bytes_sent": s.bytes_sent.load(Ordering::Relaxed),
        "state": state,
    }))
    .into_response()
}

async fn keepalive(State(sh): Sh, Path(id): Path<String>) -> Response {
    match find(&sh, &id) {
        Some(s) if s.state() == SessionState::Streaming => {
            s.last_keepalive_ns.store(sh.now_ns(), Ordering::Release);
            StatusCode::NO_CONTENT.into_response()
        }
        _ => error(
            StatusCode::NOT_FOUND,
            format!("no streaming session {id:?}"),
        ),
    }
}

async fn delete_session(State(sh): Sh, Path(id): Path<String>) -> Response {
    let removed = sh.lock_sessions().remove(&id);
    match removed {
        Some(s) => {
            s.end(SessionState::Deleted, sh.now_ns());
            StatusCode::NO_CONTENT.into_response()
        }
        None => error(StatusCode::NOT_FOUND, format!("no session {id:?}")),
    }
}

async fn metrics(State(sh): Sh) -> Response {
    let text = crate::metrics::render(&sh.snapshot());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}
