//! The HTTP/JSON control API (docs/protocol.md), on a small current-thread tokio runtime.
//!
//! Nothing here blocks the runtime: catalog lookups (SQLite) run on tokio's blocking
//! pool ([`blocking`]), the session table is locked only for short copies and inserts,
//! and session creation ([`create`]) admits over a snapshot of the sessions.

mod broadcast;
mod cmaf;
mod common;
mod content;
mod control;
mod create;
mod digests;
mod drain;
mod fill_wait;
mod fills;
pub mod fuzzing;
mod hybrid;
mod licence;
mod manifests;
mod media;
pub(crate) mod memory_gate;
pub(crate) mod mirror;
mod owner;
mod pool_read;
mod protected;
mod redirect;
mod remove;
mod renditions;
mod roles;
pub(crate) mod state;
mod status;
#[cfg(test)]
mod tests;
mod titles;
mod upload;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, Path, State};
use axum::handler::Handler;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, MethodRouter};
use axum::{Json, Router};
use isnode_proto::SessionStatus;
use isnode_store::StoreError;

pub(crate) use isnode_http::conns::ConnLimits;
use isnode_http::conns::ConnServer;
use isnode_http::limits as errors;

use crate::api::state::ApiState;
use crate::server::ServeError;
use fill_wait::{lookup, Asker};
use isnode_plane::stream::SessionState;

type Sh = State<Arc<ApiState>>;

/// Runs the API until `stop` fires; reports readiness (or the setup error) on `ready`.
/// Connections are accepted under `limits` (`isnode_http::conns`), over TLS with `tls` if given.
pub(crate) fn serve(
    sh: Arc<ApiState>,
    listener: std::net::TcpListener,
    (limits, tls): (ConnLimits, Option<tokio_rustls::TlsAcceptor>),
    stop: tokio::sync::oneshot::Receiver<()>,
    ready: std::sync::mpsc::Sender<Result<(), ServeError>>,
) {
    let threads = sh.config().api_threads.unwrap_or_else(default_api_threads);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name("isnode-api")
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
        let server = ConnServer::new(router(sh.clone()), limits, tls);
        let _ = ready.send(Ok(()));
        let reaper = tokio::spawn(reap(sh.clone()));
        let sampler = tokio::spawn(status::sample_egress(sh.clone()));
        let memory = tokio::spawn(memory_gate::watch(sh.clone()));
        let last_use = tokio::spawn(write_last_use(sh.clone()));
        let prober = tokio::spawn(isnode_control::cluster::probe::run(prober(&sh)));
        // Connections still busy 2 s after the stop are dropped.
        server.run(listener, stop, Duration::from_secs(2)).await;
        reaper.abort();
        sampler.abort();
        memory.abort();
        last_use.abort();
        prober.abort();
        // The last uses since the last write.
        let sh = sh.clone();
        let _ = tokio::task::spawn_blocking(move || sh.flush_last_use()).await;
    });
    // A catalog lookup still running on the blocking pool is not waited for long.
    rt.shutdown_timeout(Duration::from_secs(2));
}

/// The API's threads when the configuration names none: one per core, at most
/// [`MOST_DEFAULT_API_THREADS`] (its work is mostly handing page-cache pages to sockets).
fn default_api_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, MOST_DEFAULT_API_THREADS)
}

/// The most API threads chosen by default.
const MOST_DEFAULT_API_THREADS: usize = 4;

/// The routes as they are added: [`Routes::route`] is the only way into the router, and
/// the table test (`api/tests/roles.rs`) checks what it recorded against
/// [`roles::ROUTES`] (every path in the table, every method of a path in the table).
pub(super) struct Routes {
    router: Router<Arc<ApiState>>,
    /// The paths added, in order.
    #[cfg(test)]
    paths: Vec<&'static str>,
}

impl Routes {
    fn new() -> Routes {
        Routes {
            router: Router::new(),
            #[cfg(test)]
            paths: Vec::new(),
        }
    }

    /// Adds `methods` at `path`.
    pub(super) fn route(
        mut self,
        path: &'static str,
        methods: MethodRouter<Arc<ApiState>>,
    ) -> Routes {
        #[cfg(test)]
        self.paths.push(path);
        self.router = self.router.route(path, methods);
        self
    }
}

/// Every route of the API (each one's role check is in its handler: [`roles`]).
fn routes() -> Routes {
    let r = Routes::new()
        .route("/v1/objects", get(list_objects))
        .route(
            "/v1/objects/{name}",
            get(get_object)
                // An upload has no body limit: its own progress timeout instead.
                .put(upload::put_object.layer(axum::extract::DefaultBodyLimit::disable()))
                .delete(remove::delete_object),
        )
        .route(
            "/v1/objects/{name}/content",
            sandboxed(get(content::content)),
        )
        .route("/o/{name}", sandboxed(get(content::content)))
        .route(
            "/v1/objects/{name}/codewords/{sbn}/packets",
            get(content::packets),
        )
        .route("/v1/objects/{name}/digests", get(digests::digests))
        .route("/v1/sessions", post(create::create_session))
        .route("/v1/sessions/{id}", get(get_session).delete(delete_session))
        .route("/v1/sessions/{id}/keepalive", post(keepalive))
        .route("/v1/sessions/{id}/validate", post(owner::validate_session))
        .route("/v1/sessions/{id}/control", post(control::control_session))
        .route("/v1/objects/{name}/index", get(media::get_index))
        .route("/v1/objects/{name}/index.m3u8", get(media::get_playlist))
        .route("/v1/objects/{name}/key", get(protected::get_key))
        .route(
            "/v1/objects/{name}/license",
            post(licence::post_licence).layer(axum::extract::DefaultBodyLimit::max(
                licence::MAX_REQUEST_BYTES,
            )),
        )
        .route(
            "/v1/objects/{name}/master.m3u8",
            get(renditions::get_master),
        )
        .route("/v1/objects/{name}/manifest.mpd", get(renditions::get_mpd))
        .route("/v1/titles", get(titles::list_titles))
        .route("/v1/titles/{name}", axum::routing::put(titles::put_title))
        .route("/v1/objects/{name}/iframes.m3u8", get(cmaf::get_iframes))
        .route(
            "/v1/broadcasts",
            post(broadcast::create_broadcast).get(broadcast::list_broadcasts),
        )
        .route(
            "/v1/broadcasts/{id}",
            get(broadcast::get_broadcast).delete(broadcast::delete_broadcast),
        )
        .route("/metrics", get(metrics))
        .route(isnode_control::cluster::probe::HEALTH_PATH, get(health))
        .route("/v1/cluster", get(cluster_status));
    fills::routes(status::routes(r))
}

/// A route that answers an object's own bytes, under an operator-chosen content type, on
/// the status page's origin: never sniffed as another type, and sandboxed (no script in it
/// runs with the page's origin).
fn sandboxed(route: MethodRouter<Arc<ApiState>>) -> MethodRouter<Arc<ApiState>> {
    route.layer(axum::middleware::map_response(
        |mut r: Response| async move {
            let h = r.headers_mut();
            h.insert(
                header::X_CONTENT_TYPE_OPTIONS,
                axum::http::HeaderValue::from_static("nosniff"),
            );
            h.insert(
                header::CONTENT_SECURITY_POLICY,
                axum::http::HeaderValue::from_static("sandbox"),
            );
            r
        },
    ))
}

fn router(sh: Arc<ApiState>) -> Router {
    routes()
        .router
        .fallback(|| async { error(StatusCode::NOT_FOUND, "no such resource") })
        .method_not_allowed_fallback(|| async {
            error(
                StatusCode::METHOD_NOT_ALLOWED,
                "method not allowed on this resource",
            )
        })
        .layer(axum::extract::DefaultBodyLimit::max(errors::MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn_with_state(
            sh.clone(),
            redirect::to_the_serving_node,
        ))
        .layer(axum::middleware::from_fn_with_state(
            sh.clone(),
            drain::refuse_new_work_while_draining,
        ))
        .layer(axum::middleware::from_fn(errors::limits_and_json_errors))
        .with_state(sh)
}

/// The cluster prober's handles.
fn prober(sh: &ApiState) -> isnode_control::cluster::probe::Prober {
    isnode_control::cluster::probe::Prober {
        config: sh.control.config.clone(),
        cluster: sh.cluster.clone(),
        reloaded: sh.wakes.cluster.clone(),
    }
}

/// Writes the tokens' last uses beside the token file every
/// [`isnode_auth::last_use::FLUSH_INTERVAL_S`] (when they changed), off the runtime.
async fn write_last_use(sh: Arc<ApiState>) {
    let every = Duration::from_secs(isnode_auth::last_use::FLUSH_INTERVAL_S);
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    loop {
        tick.tick().await;
        let sh = sh.clone();
        let _ = tokio::task::spawn_blocking(move || sh.flush_last_use()).await;
    }
}

/// Forgets ended sessions: expired and deleted ones at once, done ones after the timeout;
/// stops broadcasts at their end. Looks every 250 ms while there are sessions or
/// broadcasts; without, it sleeps until one is registered (`Wakes::reap`).
async fn reap(sh: Arc<ApiState>) {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tick.tick().await;
        if reap_once(&sh) == Reaped::Empty {
            let idle = sh.wakes.reap.notified();
            let _ = tokio::time::timeout(crate::wake::IDLE_WAIT, idle).await;
            tick.reset_immediately();
        }
    }
}

/// What a reaping round left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reaped {
    /// Sessions or broadcasts, to look at again.
    Left,
    /// Neither.
    Empty,
}

/// One round of [`reap`].
fn reap_once(sh: &ApiState) -> Reaped {
    let now = sh.now_ns();
    for id in sh.control.broadcasts.stop_over(now) {
        tracing::info!(%id, "broadcast stopped: at its end, or its viewers have finished");
    }
    let keep_ns = sh.config().session_timeout_ms.saturating_mul(1_000_000);
    let mut sessions = sh.lock_sessions();
    sessions.retain(|_, s| {
        let keep = match s.state() {
            SessionState::Streaming => true,
            SessionState::Done => now.saturating_sub(s.ended_ns.load(Ordering::Acquire)) < keep_ns,
            SessionState::Expired | SessionState::Deleted => false,
        };
        if !keep {
            let bytes = s.bytes_sent.load(Ordering::Relaxed);
            sh.metrics.titles.retired(&s.object.rec.name, bytes);
        }
        keep
    });
    let none = sessions.is_empty();
    drop(sessions);
    match none && sh.control.broadcasts.list().is_empty() {
        true => Reaped::Empty,
        false => Reaped::Left,
    }
}

use isnode_http::error::{error, ApiError};

/// The HTTP status of a fill's failure.
fn fill_status(s: isnode_fill::FillStatus) -> StatusCode {
    use isnode_fill::FillStatus as F;
    match s {
        F::NotFound => StatusCode::NOT_FOUND,
        F::Conflict => StatusCode::CONFLICT,
        F::BadGateway => StatusCode::BAD_GATEWAY,
        F::InsufficientStorage => StatusCode::INSUFFICIENT_STORAGE,
        F::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        F::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

fn store_error(e: StoreError) -> Response {
    match e {
        StoreError::NotFound(_) => error(StatusCode::NOT_FOUND, e),
        StoreError::BadName { .. } => error(StatusCode::NOT_FOUND, e),
        StoreError::BadObject { .. } => error(StatusCode::CONFLICT, e),
        StoreError::FillBusy(_) => error(StatusCode::CONFLICT, e),
        e => error(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

/// Runs `f` (which may block: catalog lookups) on the runtime's blocking pool.
async fn blocking<T: Send + 'static>(
    sh: &Arc<ApiState>,
    f: impl FnOnce(&ApiState) -> T + Send + 'static,
) -> Result<T, Response> {
    // At most `CATALOG_THREADS` at once: a flood of requests queues here, holding no
    // thread, instead of growing tokio's blocking pool to hundreds of threads that all
    // wait for the catalog's lock.
    let _slot = sh.catalog_slots.acquire().await.map_err(|e| {
        error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the catalog is closed: {e}"),
        )
    })?;
    let sh = sh.clone();
    tokio::task::spawn_blocking(move || f(&sh))
        .await
        .map_err(|e| {
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("catalog lookup failed: {e}"),
            )
        })
}

async fn list_objects(_: roles::Viewer, State(sh): Sh) -> Response {
    let listed = blocking(&sh, |sh| {
        let complete = sh.control.objects.list()?;
        Ok::<_, isnode_store::StoreError>((complete, sh.control.objects.filling()?))
    });
    match listed.await {
        Ok(Ok((v, filling))) => {
            let tsi = sh.control.objects.tsi();
            let mut list: isnode_proto::ObjectList = v.iter().map(|o| o.json(tsi)).collect();
            list.extend(
                filling
                    .iter()
                    .map(|f| isnode_pool::objects::filling_json(f, tsi)),
            );
            Json(list).into_response()
        }
        Ok(Err(e)) => store_error(e),
        Err(r) => r,
    }
}

async fn get_object(
    _: roles::Viewer,
    State(sh): Sh,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    Path(name): Path<String>,
) -> Response {
    match lookup(&sh, Asker::Viewer(peer.ip()), name).await {
        Ok(o) => Json(o.json()).into_response(),
        Err(r) => r,
    }
}

async fn get_session(_: roles::Viewer, State(sh): Sh, Path(id): Path<String>) -> Response {
    let Some(s) = sh.control.sessions.find(&id) else {
        return error(StatusCode::NOT_FOUND, format!("no session {id:?}"));
    };
    Json(SessionStatus {
        id: s.id.clone(),
        object: s.object.rec.name.clone(),
        destination: s.dest.to_string(),
        start_codeword: s.start_codeword,
        next_codeword: s.next_codeword.load(Ordering::Relaxed),
        packets_sent: s.packets_sent.load(Ordering::Relaxed),
        bytes_sent: s.bytes_sent.load(Ordering::Relaxed),
        state: s.state().wire(),
        paused: s.paused.load(Ordering::Acquire),
        awaiting_validation: !s.validated.load(Ordering::Acquire),
        repair_packets_sent: s.repair_sent.load(Ordering::Relaxed),
        repair_packets_skipped: s.repair_skipped.load(Ordering::Relaxed),
        reported_loss_units: s.loss_report().map(|l| l.units()),
    })
    .into_response()
}

/// `POST /v1/sessions/{id}/keepalive`: an empty body, or a JSON
/// [`isnode_proto::KeepaliveBody`] carrying the client's loss report (a `loss_rate` in
/// [0, 1]; anything else is a `400` and changes nothing).
async fn keepalive(
    owner::OwnedSession(s): owner::OwnedSession,
    State(sh): Sh,
    body: axum::body::Bytes,
) -> Response {
    let loss = if body.is_empty() {
        None
    } else {
        match serde_json::from_slice::<isnode_proto::KeepaliveBody>(&body) {
            Ok(b) if (0.0..=1.0).contains(&b.loss_rate) => {
                Some(isnode_proto::keepalive::LossReport::from_rate(b.loss_rate))
            }
            Ok(b) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    format!("loss_rate {} is not in [0, 1]", b.loss_rate),
                )
            }
            Err(e) => return error(StatusCode::BAD_REQUEST, format!("malformed keepalive: {e}")),
        }
    };
    s.last_keepalive_ns.store(sh.now_ns(), Ordering::Release);
    if let Some(loss) = loss {
        s.report_loss(loss);
        sh.control
            .counters
            .loss_reports
            .fetch_add(1, Ordering::Relaxed);
    }
    StatusCode::NO_CONTENT.into_response()
}

/// `DELETE /v1/sessions/{id}`: by its creator, with its secret.
async fn delete_session(
    owner::OwnedSessionAnyState(s): owner::OwnedSessionAnyState,
    State(sh): Sh,
) -> Response {
    let retire = |s: &isnode_plane::stream::StreamShared| {
        let bytes = s.bytes_sent.load(Ordering::Relaxed);
        sh.metrics.titles.retired(&s.object.rec.name, bytes);
    };
    match sh.control.sessions.remove_with(&s.id, retire) {
        Some(s) => {
            s.end(SessionState::Deleted, sh.now_ns());
            StatusCode::NO_CONTENT.into_response()
        }
        None => error(StatusCode::NOT_FOUND, format!("no session {:?}", s.id)),
    }
}

async fn metrics(_: roles::MetricsReader, State(sh): Sh) -> Response {
    let text = crate::metrics::expose::render(status::scrape(&sh), &sh.metrics.families);
    let text = isnode_control::cluster::with_cluster_metrics(text, &sh.cluster);
    (
        [(header::CONTENT_TYPE, crate::metrics::expose::CONTENT_TYPE)],
        text,
    )
        .into_response()
}

/// `GET /v1/health` (public): `200` while the server takes new work, `503` while it drains;
/// what the cluster's peers probe.
async fn health(State(sh): Sh) -> Response {
    let name = sh.config().node_name.clone().unwrap_or_default();
    let draining = sh.draining.load(Ordering::Acquire);
    let status = match draining {
        false => StatusCode::OK,
        true => StatusCode::SERVICE_UNAVAILABLE,
    };
    let load = isnode_control::admit::load_share(&sh.control);
    (
        status,
        Json(serde_json::json!({ "node": name, "draining": draining, "load": load })),
    )
        .into_response()
}

/// `GET /v1/cluster`: the node list and each node's liveness as this node sees it (`404`
/// without a node list).
async fn cluster_status(_: roles::MetricsReader, State(sh): Sh) -> Response {
    match sh.cluster.status() {
        Some(c) => Json(c).into_response(),
        None => error(
            StatusCode::NOT_FOUND,
            "no cluster: this server has no node list",
        ),
    }
}
