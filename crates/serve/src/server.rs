//! Server start and stop: the state every thread shares, the data-plane threads, the
//! control API thread, and the handle that stops them.

use std::net::SocketAddr;
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use crate::cache::{Cache, Residency};
use crate::member_health::MemberState;
use crate::metrics::{Metrics, MetricsSnapshot};
use crate::objects::Objects;
use crate::registry::{Registry, SessionState, SessionTable};
use crate::{api, fd_budget, keepalive, plane, reader, uring, EngineKind, ReadIo, ServeConfig};

/// Errors of starting a server.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The volume could not be opened.
    #[error("opening the volume: {0}")]
    Volume(#[from] isnode_store::StoreError),
    /// The configuration cannot work.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A socket, thread or runtime could not be set up.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

fn io_error(context: &str) -> impl FnOnce(std::io::Error) -> ServeError + '_ {
    move |source| ServeError::Io {
        context: context.to_string(),
        source,
    }
}

/// Everything the threads of a server share.
pub(crate) struct Shared {
    /// The configuration in force (swapped whole by a reload: [`Shared::reload_config`]).
    config: arc_swap::ArcSwap<ServeConfig>,
    pub objects: Objects,
    pub cache: Cache,
    pub metrics: Metrics,
    pub sessions: Registry,
    pub epoch: Instant,
    pub shutdown: AtomicBool,
    /// What wakes the threads that sleep until something happens (`wake.rs`).
    pub wakes: crate::wake::Wakes,
    /// Set by SIGTERM: new sessions, broadcasts and uploads are refused (`api/drain.rs`).
    pub draining: AtomicBool,
    pub workers: Vec<std::sync::mpsc::SyncSender<plane::PlaneMsg>>,
    /// Whether a wake-up is queued for each data-plane thread ([`plane::wake`]).
    pub wakes_queued: Vec<AtomicBool>,
    pub next_worker: AtomicUsize,
    /// Engine in use (uring-zc falls back to gso where io_uring is unavailable).
    pub engine: EngineKind,
    /// Block reads in use (uring falls back to sync where io_uring is unavailable).
    pub read_io: ReadIo,
    /// The multicast options of every send socket (`--multicast-ttl`, `--multicast-if`).
    pub multicast: isnode_sys::net::Multicast,
    /// Where each data-plane thread's sessions are (eviction decisions; data plane only).
    pub positions: plane::demand::PositionBoard,
    /// Each data-plane thread's playback slack (pacing of background work; `plane/slack.rs`).
    pub slack: isnode_serve_core::slack::SlackBoard,
    /// Why the data plane failed (a thread panicked): the server stops.
    pub failure: std::sync::OnceLock<String>,
    /// UDP port of the keepalive datagrams (`keepalive.rs`), on the control API's IP.
    pub keepalive_port: u16,
    /// The keepalive socket's twin: token datagrams go out from it (`api/owner.rs`).
    pub token_socket: std::net::UdpSocket,
    /// The running broadcasts.
    pub broadcasts: crate::broadcast::Broadcasts,
    /// Most sessions the `sendfile` engine may hold a socket for (`None`: another engine).
    pub sendfile_sessions: Option<u64>,
    /// The role tokens in force (`None`: no token file); swapped by [`reload_tokens`].
    pub tokens: std::sync::RwLock<Option<Arc<isnode_auth::TokenStore>>>,
    /// Failed authentications per client, which slow it down (`api/roles.rs`).
    pub auth_throttle: std::sync::Mutex<isnode_auth::throttle::Throttle>,
    /// The token file [`reload_tokens`] reads.
    pub tokens_path: std::path::PathBuf,
    /// When each token was last used (written beside the token file by the API's writer).
    pub last_use: isnode_auth::last_use::LastUse,
    /// The quota room held by the uploads under way (`uploads.rs`).
    pub uploads: Arc<crate::uploads::Uploads>,
    /// The background scrub's progress and findings (`scrub.rs`).
    pub scrub: crate::scrub::ScrubState,
    /// Members marked failed, waiting to be written into the catalog
    /// (`member_health::record_member_failures`).
    pub member_failures: std::sync::Mutex<Vec<(u32, String)>>,
    /// This edge's cluster (inactive without a node list: a single node).
    pub cluster: crate::cluster::ClusterState,
    /// Fills from the origin (`crate::fill`).
    pub fills: crate::fill::Fills,
}

/// Reads the token file again and puts it in force at once (revoked tokens are refused
/// from the next request); a missing or broken file is refused and the old tokens kept.
pub(crate) fn reload_tokens(sh: &Shared) -> Result<(), isnode_auth::TokenError> {
    let store = isnode_auth::TokenStore::load(&sh.tokens_path)?.ok_or_else(|| {
        isnode_auth::TokenError::Usage(format!(
            "token file {} is missing: the old tokens are kept",
            sh.tokens_path.display()
        ))
    })?;
    let n = store.records().len();
    *sh.tokens.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(store));
    tracing::info!(tokens = n, path = %sh.tokens_path.display(), "token file reloaded");
    Ok(())
}

/// The token file of `config` on `volume_dir`, read; an error if a non-loopback server would
/// have open operator routes without `--insecure-open-operator-routes`.
fn load_tokens(
    volume_dir: &Path,
    config: &ServeConfig,
) -> Result<(std::path::PathBuf, Option<Arc<isnode_auth::TokenStore>>), ServeError> {
    let path = isnode_auth::tokens_path(volume_dir, config.tokens_file.as_deref());
    let store =
        isnode_auth::TokenStore::load(&path).map_err(|e| ServeError::Config(e.to_string()))?;
    if store.is_none() && !config.listen.ip().is_loopback() {
        if !config.insecure_open_operator_routes {
            return Err(ServeError::Config(format!(
                "no token file at {} on the non-loopback address {}: make one with `isnode \
                 token add`, or open the operator routes with --insecure-open-operator-routes",
                path.display(),
                config.listen
            )));
        }
        tracing::warn!(listen = %config.listen, "operator and metrics routes are open to anyone (--insecure-open-operator-routes)");
    }
    Ok((path, store.map(Arc::new)))
}

impl Shared {
    /// Writes the tokens' last uses beside the token file if they changed (blocking); a
    /// failure is logged and retried at the next call.
    pub(crate) fn flush_last_use(&self) {
        let tokens = self
            .tokens
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let Some(tokens) = tokens else {
            return;
        };
        let path = isnode_auth::last_use::side_path(&self.tokens_path);
        if let Err(e) = self.last_use.flush(&path, &tokens) {
            tracing::warn!("writing the tokens' last uses: {e}");
        }
    }

    /// The configuration in force (cheap: an atomic load; hold it only briefly).
    pub(crate) fn config(&self) -> arc_swap::Guard<Arc<ServeConfig>> {
        self.config.load()
    }

    /// Puts `new` in force, keeping the running values of the settings that need a restart;
    /// returns the names of those that differed (a reload reports them).
    pub(crate) fn reload_config(&self, mut new: ServeConfig) -> Vec<&'static str> {
        let old = self.config();
        let kept = old.keep_restart_only(&mut new);
        self.cluster.reconfigure(&new);
        self.config.store(Arc::new(new));
        self.wakes.reloaded.set();
        self.wakes.cluster.notify_one();
        kept
    }

    /// Records a data-plane failure and stops the server.
    pub(crate) fn fail(&self, why: String) {
        let _ = self.failure.set(why);
        self.stop();
    }

    /// Tells every thread to stop: sets `shutdown` and wakes the sleepers (the events they
    /// wait on, and each data-plane thread's queue).
    pub(crate) fn stop(&self) {
        self.shutdown.store(true, Ordering::Release);
        self.wakes.stopped.set();
        self.wakes.stop_notify.notify_one();
        plane::wake(&self.workers, &self.wakes_queued);
    }

    /// Sleeps `d` unless the server stops meanwhile (`Break` then, at once).
    pub(crate) fn sleep_unless_stopped(&self, d: std::time::Duration) -> ControlFlow<()> {
        if self.shutdown.load(Ordering::Acquire) || self.wakes.stopped.wait(d) {
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }

    /// Wakes every data-plane thread, so that control requests just queued on a session
    /// apply at once (a full queue means the thread is awake anyway).
    pub(crate) fn wake_data_plane(&self) {
        plane::wake(&self.workers, &self.wakes_queued);
    }

    pub(crate) fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    pub(crate) fn lock_sessions(&self) -> impl std::ops::DerefMut<Target = SessionTable> + '_ {
        self.sessions.lock_sessions()
    }

    pub(crate) fn snapshot(&self) -> MetricsSnapshot {
        let m = &self.metrics;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let active = self
            .lock_sessions()
            .values()
            .filter(|s| s.state() == SessionState::Streaming)
            .count() as u64;
        let cs = self.cache.stats();
        MetricsSnapshot {
            sessions_active: active,
            sessions_started: load(&m.sessions_started),
            broadcasts_active: self.broadcasts.list().len() as u64,
            broadcasts_started: load(&m.broadcasts_started),
            broadcast_redirects: load(&m.broadcast_redirects),
            broadcast_packets_sent: load(&m.broadcast_packets),
            broadcast_bytes_sent: load(&m.broadcast_bytes),
            sessions_expired: load(&m.sessions_expired),
            keepalives_udp: load(&m.keepalives_udp),
            keepalives_refused: load(&m.keepalives_refused),
            tokens_sent: load(&m.tokens_sent),
            sessions_unvalidated: load(&m.sessions_unvalidated),
            forbidden: load(&m.forbidden),
            sessions_refused: std::array::from_fn(|i| load(&m.refused[i])),
            packets_sent: std::array::from_fn(|i| load(&m.packets[i])),
            bytes_sent: std::array::from_fn(|i| load(&m.bytes[i])),
            send_errors: load(&m.send_errors),
            cache_hits: load(&cs.hits),
            cache_misses: load(&cs.misses),
            cache_bytes: self.cache.bytes_cached(),
            cache_pool_bytes: u64::from(self.cache.slots()) * self.cache.block_len() as u64,
            cache_read_bytes: load(&cs.bytes_read),
            member_errors: m.member_errors.iter().map(load).collect(),
            symbols_rebuilt: load(&m.symbols_rebuilt),
            packets_skipped: load(&m.packets_skipped),
            zc_sends: load(&m.zc_sends),
            zc_copied: load(&m.zc_copied),
            repair_packets_sent: load(&m.repair_sent),
            repair_packets_skipped: load(&m.repair_skipped),
            loss_reports: load(&m.loss_reports),
            start_bursts: load(&m.start_bursts),
            catalog_lookups_active: self.objects.lookups_active(),
            http_content_requests: load(&m.http_content_requests),
            http_range_requests: load(&m.http_range_requests),
            http_bytes: load(&m.http_bytes),
            http_readers_active: load(&m.http_readers_active),
            http_readers_refused: load(&m.http_readers_refused),
            repair_requests: load(&m.repair_requests),
            repair_packets: load(&m.repair_packets),
            cache_evictions: load(&cs.evictions),
            scrub: self.scrub.snapshot(),
            fill: self.fills.snapshot(),
            member_failed: (0..m.health.members() as u32)
                .map(|i| m.health.is_failed(i))
                .collect(),
            member_slow: (0..m.health.members() as u32)
                .map(|i| m.health.state(i, self.now_ns()) == MemberState::Slow)
                .collect(),
            reads_hedged: load(&m.health.hedged),
            bursts_late: load(&m.bursts_late),
            members_revived: load(&m.health.revived),
            playback: self.slack.total(),
        }
    }
}

/// A running server (in-process). Dropping it shuts it down.
pub struct ServerHandle {
    local_addr: SocketAddr,
    https: bool,
    pub(crate) shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    api_thread: Option<JoinHandle<()>>,
    api_stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl ServerHandle {
    /// Reloads the token file ([`reload_tokens`]): what SIGHUP does.
    pub fn reload_tokens(&self) -> Result<(), isnode_auth::TokenError> {
        reload_tokens(&self.shared)
    }

    /// The address the control API listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The base URL of the control API (`https://` when it is served over TLS).
    pub fn url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}", self.local_addr)
    }

    /// The engine in use (`uring-zc` falls back to `gso` if io_uring is unavailable).
    pub fn engine(&self) -> EngineKind {
        self.shared.engine
    }

    /// A snapshot of the counters (as `GET /metrics` reports them).
    pub fn metrics(&self) -> MetricsSnapshot {
        self.shared.snapshot()
    }

    /// Why the data plane failed, if it did (the server has then stopped serving).
    pub fn failure(&self) -> Option<String> {
        self.shared.failure.get().cloned()
    }

    /// Stops the data plane and the control API and waits for their threads.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.shared.stop();
        self.shared.broadcasts.clear(self.shared.now_ns());
        if let Some(tx) = self.api_stop.take() {
            let _ = tx.send(());
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
        if let Some(t) = self.api_thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Blocks of the pool for `cache_size_bytes`: at least two per member, at most 2^20.
fn pool_slots(config: &ServeConfig, members: u32, block_len: usize) -> Result<u32, ServeError> {
    let slots = config.cache_size_bytes / block_len as u64;
    if slots < u64::from(members) * 2 {
        return Err(ServeError::Config(format!(
            "--cache-size-bytes {} holds {slots} blocks of {block_len} bytes; at least {} (two per member) are needed",
            config.cache_size_bytes,
            members * 2
        )));
    }
    Ok(u32::try_from(slots).unwrap_or(u32::MAX).min(1 << 20))
}

/// The engine and block reads to use, falling back where io_uring is unavailable.
fn io_choices(config: &ServeConfig) -> (EngineKind, ReadIo) {
    let engine = match config.engine {
        EngineKind::UringZc if !uring::available() => {
            tracing::warn!(
                "io_uring SEND_ZC is not available on this kernel: using the gso engine"
            );
            EngineKind::Gso
        }
        e => e,
    };
    let read_io = match config.read_io {
        ReadIo::Uring if !reader::available() => {
            tracing::warn!(
                "io_uring reads are not available on this kernel: reading blocks with pread"
            );
            ReadIo::Sync
        }
        r => r,
    };
    (engine, read_io)
}

/// The control API's listener, non-blocking, and its address.
fn bind(listen: SocketAddr) -> Result<(std::net::TcpListener, SocketAddr), ServeError> {
    let ctx = format!("binding the control API to {listen}");
    let listener = std::net::TcpListener::bind(listen).map_err(io_error(&ctx))?;
    let local = listener
        .local_addr()
        .map_err(io_error("reading the listen address"))?;
    listener
        .set_nonblocking(true)
        .map_err(io_error("setting the listener non-blocking"))?;
    Ok((listener, local))
}

type PlaneQueue = std::sync::mpsc::Receiver<plane::PlaneMsg>;

fn spawn_workers(
    shared: &Arc<Shared>,
    queues: Vec<PlaneQueue>,
) -> Result<Vec<JoinHandle<()>>, ServeError> {
    let mut workers = Vec::with_capacity(queues.len());
    for (i, rx) in queues.into_iter().enumerate() {
        let sh = shared.clone();
        let h = std::thread::Builder::new()
            .name(format!("isnode-plane-{i}"))
            .spawn(move || plane::worker(sh, i, rx))
            .map_err(io_error("starting a data-plane thread"))?;
        workers.push(h);
    }
    Ok(workers)
}

/// The control API's connection limits: the cap from the descriptors the data plane
/// leaves ([`fd_budget`]), the timeouts from the flags.
/// Also the sessions the `sendfile` engine may hold a socket for (`None`: another engine).
fn api_limits(
    config: &ServeConfig,
    vol: &isnode_store::Volume,
    threads: usize,
    engine: EngineKind,
) -> Result<(api::ConnLimits, Option<u64>), ServeError> {
    let limit = fd_budget::raise_open_files_limit();
    let needs = fd_budget::FdNeeds {
        limit,
        in_use: fd_budget::open_descriptors().map_err(io_error("counting the open descriptors"))?,
        objects: vol.objects()?.len() as u64,
        members: u64::from(vol.params().members),
        threads: threads as u64,
        per_thread_files: match engine {
            EngineKind::Sendfile => fd_budget::PerThreadFiles::Yes,
            _ => fd_budget::PerThreadFiles::No,
        },
        session_sockets: 0,
    };
    let sendfile_sessions = (engine == EngineKind::Sendfile)
        .then(|| needs.sendfile_sessions(config.max_sendfile_sessions));
    let needs = fd_budget::FdNeeds {
        session_sockets: sendfile_sessions.unwrap_or(0),
        ..needs
    };
    let max_connections = needs
        .api_connections(config.api_max_connections)
        .map_err(ServeError::Config)?;
    if config.api_header_timeout_ms == 0
        || config.api_idle_timeout_ms == 0
        || config.api_write_timeout_ms == 0
    {
        return Err(ServeError::Config(
            "--api-header-timeout-ms, --api-idle-timeout-ms and --api-write-timeout-ms must be above 0".into(),
        ));
    }
    tracing::debug!(
        limit,
        data_plane = needs.data_plane(),
        max_connections,
        ?sendfile_sessions,
        "descriptor budget"
    );
    let limits = api::ConnLimits {
        max_connections,
        header_timeout_ns: config.api_header_timeout_ms.saturating_mul(1_000_000),
        idle_timeout_ns: config.api_idle_timeout_ms.saturating_mul(1_000_000),
        write_timeout_ns: config.api_write_timeout_ms.saturating_mul(1_000_000),
    };
    Ok((limits, sendfile_sessions))
}

/// The TLS acceptor of `--tls-cert` and `--tls-key`, if given; an error if plain HTTP
/// would be served on a non-loopback address without `--plain-http`.
fn tls_acceptor(config: &ServeConfig) -> Result<Option<tokio_rustls::TlsAcceptor>, ServeError> {
    let plain = match config.plain_http {
        true => isnode_http::tls::PlainHttp::Allowed,
        false => isnode_http::tls::PlainHttp::LoopbackOnly,
    };
    let transport = isnode_http::tls::transport(
        config.listen,
        config.tls_cert.as_deref(),
        config.tls_key.as_deref(),
        plain,
    )
    .map_err(ServeError::Config)?;
    match transport {
        isnode_http::tls::Transport::Plain => Ok(None),
        isnode_http::tls::Transport::Tls { cert, key } => isnode_http::tls::acceptor(&cert, &key)
            .map(Some)
            .map_err(ServeError::Config),
    }
}

/// Starts a server on the volume at `volume_dir` (created with default parameters if
/// absent) and returns once it listens.
pub fn start(volume_dir: &Path, config: &ServeConfig) -> Result<ServerHandle, ServeError> {
    config
        .validate()
        .map_err(|e| ServeError::Config(e.to_string()))?;
    let vol = isnode_store::Volume::open_or_create(volume_dir)?;
    let params = *vol.params();
    // Members the catalog calls failed are not read (their symbols come from the others).
    let failed_in_catalog: Vec<u32> = vol
        .member_states()?
        .iter()
        .enumerate()
        .filter(|(_, st)| matches!(st, isnode_store::MemberState::Failed { .. }))
        .map(|(m, _)| m as u32)
        .collect();
    let block_len = params.block_len as usize;
    let slots = pool_slots(config, params.members, block_len)?;
    let threads = config
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .clamp(1, 256);
    let (engine, read_io) = io_choices(config);
    let (limits, sendfile_sessions) = api_limits(config, &vol, threads, engine)?;
    let multicast = multicast_options(config)?;
    let residency = match engine {
        EngineKind::Sendfile => Residency::OnUse,
        _ => Residency::Touched,
    };
    let cache = Cache::with_residency(slots, block_len, residency);
    let tls = tls_acceptor(config)?;
    let fills = crate::fill::Fills::new(config).map_err(ServeError::Config)?;
    let (tokens_path, tokens) = load_tokens(volume_dir, config)?;
    let (std_listener, local_addr) = bind(config.listen)?;
    let keepalive_sock = keepalive::bind(local_addr).map_err(io_error(&format!(
        "binding the keepalive port on {}",
        local_addr.ip()
    )))?;
    let keepalive_port = keepalive_sock
        .local_addr()
        .map_err(io_error("reading the keepalive port"))?
        .port();
    let token_socket = keepalive_sock
        .try_clone()
        .map_err(io_error("cloning the keepalive socket"))?;
    let (senders, queues): (Vec<_>, Vec<_>) = (0..threads)
        .map(|_| std::sync::mpsc::sync_channel(1024))
        .unzip();
    let cluster = crate::cluster::ClusterState::of(config).map_err(ServeError::Config)?;
    let shared = Arc::new(Shared {
        config: arc_swap::ArcSwap::from_pointee(config.clone()),
        objects: Objects::new(vol),
        cache,
        metrics: Metrics::new(params.members),
        sessions: Registry::new(),
        epoch: Instant::now(),
        shutdown: AtomicBool::new(false),
        wakes: crate::wake::Wakes::new().map_err(io_error("creating an eventfd"))?,
        draining: AtomicBool::new(false),
        workers: senders,
        wakes_queued: (0..threads).map(|_| AtomicBool::new(false)).collect(),
        next_worker: AtomicUsize::new(0),
        engine,
        read_io,
        multicast,
        positions: plane::demand::PositionBoard::new(threads),
        slack: isnode_serve_core::slack::SlackBoard::new(threads),
        failure: std::sync::OnceLock::new(),
        keepalive_port,
        token_socket,
        broadcasts: crate::broadcast::Broadcasts::kept_in(volume_dir),
        sendfile_sessions,
        tokens: std::sync::RwLock::new(tokens),
        auth_throttle: std::sync::Mutex::new(isnode_auth::throttle::Throttle::default()),
        last_use: isnode_auth::last_use::LastUse::load(&isnode_auth::last_use::side_path(
            &tokens_path,
        )),
        tokens_path,
        uploads: Arc::default(),
        scrub: crate::scrub::ScrubState::default(),
        member_failures: std::sync::Mutex::default(),
        cluster,
        fills,
    });
    let api_tls = tls.clone();
    let mut handle = ServerHandle {
        local_addr,
        https: tls.is_some(),
        shared: shared.clone(),
        workers: Vec::new(),
        api_thread: None,
        api_stop: None,
    };
    handle.workers = spawn_workers(&shared, queues)?;
    // Before the API answers: a receiver asking at once finds its broadcast.
    crate::broadcast::start::restore(&shared, volume_dir);
    let sh = shared.clone();
    handle.workers.push(
        std::thread::Builder::new()
            .name("isnode-keepalive".into())
            .spawn(move || keepalive::run(sh, keepalive_sock))
            .map_err(io_error("starting the keepalive thread"))?,
    );
    for &m in &failed_in_catalog {
        shared.metrics.health.mark_failed(m);
        tracing::warn!(member = m, "member {m} is failed in the catalog: not read (rebuild it with `isnode volume rebuild --member {m}`)");
    }
    let (sh, root) = (shared.clone(), volume_dir.to_path_buf());
    handle.workers.push(
        std::thread::Builder::new()
            .name("isnode-members".into())
            .spawn(move || crate::member_health::record_member_failures(sh, root))
            .map_err(io_error("starting the member-state thread"))?,
    );
    let sh = shared.clone();
    handle.workers.push(
        std::thread::Builder::new()
            .name("isnode-scrub".into())
            .spawn(move || crate::scrub::run(sh))
            .map_err(io_error("starting the scrub thread"))?,
    );
    let (sh, root) = (shared.clone(), volume_dir.to_path_buf());
    handle.workers.push(
        std::thread::Builder::new()
            .name("isnode-pace".into())
            .spawn(move || crate::viewer_pace::run(sh, root))
            .map_err(io_error("starting the viewer-pace thread"))?,
    );
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let sh = shared.clone();
    handle.api_stop = Some(stop_tx);
    handle.api_thread = Some(
        std::thread::Builder::new()
            .name("isnode-api".into())
            .spawn(move || api::serve(sh, std_listener, (limits, api_tls), stop_rx, ready_tx))
            .map_err(io_error("starting the control API thread"))?,
    );
    match ready_rx.recv() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e),
        Err(_) => return Err(ServeError::Config("the control API thread died".into())),
    }
    crate::fill::resume_all(&shared);
    tracing::info!(
        listen = %local_addr,
        keepalive_port = shared.keepalive_port,
        engine = engine.name(),
        read_io = ?read_io,
        threads,
        cache_bytes = u64::from(slots) * block_len as u64,
        bitrate_budget_bps = config.bitrate_budget_bps(),
        max_sessions_per_client = config.max_sessions_per_client,
        api_max_connections = limits.max_connections,
        "isnode serve started"
    );
    Ok(handle)
}

/// The multicast options of every send socket, from `--multicast-ttl` and `--multicast-if`.
fn multicast_options(config: &ServeConfig) -> Result<isnode_sys::net::Multicast, ServeError> {
    let ifindex = match &config.multicast_if {
        None => 0,
        Some(name) => isnode_sys::net::interface_index(name).ok_or_else(|| {
            ServeError::Config(format!("--multicast-if {name}: no such interface"))
        })?,
    };
    Ok(isnode_sys::net::Multicast {
        ttl: config.multicast_ttl,
        ifindex,
    })
}
