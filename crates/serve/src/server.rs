//! Server start and stop: builds each thread's handles (the data plane's `PlaneDeps`, the
//! control half's `Control`, the API's `ApiState`, the background threads' own), starts
//! the threads, and the handle that stops them.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;

use isnode_plane::deps::PlaneDeps;
use isnode_plane::Plane;
use isnode_pool::cache::{Cache, Residency};
use isnode_pool::demand::PositionBoard;
use isnode_pool::members::Members;
use isnode_pool::objects::Objects;
use isnode_serve_config::ConfigCell;
use isnode_serve_core::slack::SlackBoard;
use isnode_sys::clock::Clock;
use isnode_sys::stop::Stop;

use crate::api::state::ApiState;
use crate::metrics::{Metrics, MetricsSnapshot};
use crate::{api, fd_budget};
use isnode_control::broadcast::Broadcasts;
use isnode_control::keepalive;
use isnode_control::registry::Registry;
use isnode_control::Control;
use isnode_serve_config::EngineKind;
use isnode_serve_config::ReadIo;
use isnode_serve_config::ServeConfig;
use isnode_sys::fds::DescriptorRoom;

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

/// Reads the token file again and puts it in force at once (revoked tokens are refused
/// from the next request); a missing or broken file is refused and the old tokens kept.
pub(crate) fn reload_tokens(sh: &ApiState) -> Result<(), isnode_auth::TokenError> {
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

/// A running server (in-process). Dropping it shuts it down.
pub struct ServerHandle {
    local_addr: SocketAddr,
    https: bool,
    pub(crate) shared: Arc<ApiState>,
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
        self.shared.control.engine
    }

    /// A snapshot of the counters (as `GET /metrics` reports them).
    pub fn metrics(&self) -> MetricsSnapshot {
        self.shared.snapshot()
    }

    /// Why the data plane failed, if it did (the server has then stopped serving).
    pub fn failure(&self) -> Option<String> {
        self.shared.stop.failure().map(str::to_string)
    }

    /// Stops the data plane and the control API and waits for their threads.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.shared.stop.stop();
        self.shared.control.broadcasts.clear(self.shared.now_ns());
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
        EngineKind::UringZc if !isnode_pool::uring_probe::send_zc_available() => {
            tracing::warn!(
                "io_uring SEND_ZC is not available on this kernel: using the gso engine"
            );
            EngineKind::Gso
        }
        e => e,
    };
    let read_io = match config.read_io {
        ReadIo::Uring if !isnode_pool::reader::available() => {
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

/// The control API's connection limits: the cap from the descriptors the data plane
/// leaves ([`fd_budget`]), the timeouts from the flags.
/// Also the sessions the `sendfile` engine may hold a socket for (`None`: another engine),
/// and what objects added later may take of the descriptors.
fn api_limits(
    config: &ServeConfig,
    vol: &isnode_store::Volume,
    threads: usize,
    engine: EngineKind,
) -> Result<(api::ConnLimits, Option<u64>, DescriptorRoom), ServeError> {
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
    let descriptors = needs.room_for_objects(max_connections);
    let limits = api::ConnLimits {
        max_connections,
        header_timeout_ns: config.api_header_timeout_ms.saturating_mul(1_000_000),
        idle_timeout_ns: config.api_idle_timeout_ms.saturating_mul(1_000_000),
        write_timeout_ns: config.api_write_timeout_ms.saturating_mul(1_000_000),
        send_buffer_bytes: match config.api_send_buffer_bytes {
            0 => None,
            n => usize::try_from(n).ok(),
        },
    };
    Ok((limits, sendfile_sessions, descriptors))
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

/// A cluster of `https://` nodes: its probes' TLS settings (`cluster_ca_file`) must load.
pub fn cluster_tls_check(config: &ServeConfig) -> Result<(), ServeError> {
    if !config.nodes.iter().any(|n| n.url.starts_with("https://")) {
        return Ok(());
    }
    isnode_control::cluster::tls::connector(config.cluster_ca_file.as_deref())
        .map(|_| ())
        .map_err(|e| ServeError::Config(format!("cluster_ca_file: {e}")))
}

/// What a server runs on, opened and sized before any thread starts.
struct Opened {
    /// The volume (taken by the catalog's handle once the plane is sized).
    vol: Option<isnode_store::Volume>,
    params: isnode_store::VolumeParams,
    failed_in_catalog: Vec<u32>,
    slots: u32,
    threads: usize,
    engine: EngineKind,
    read_io: ReadIo,
    limits: api::ConnLimits,
    sendfile_sessions: Option<u64>,
    descriptors: DescriptorRoom,
    multicast: isnode_sys::net::Multicast,
}

/// Validates `config`, opens the volume at `volume_dir` (created with default parameters
/// if absent) and sizes the pool, the threads and the API's connections.
fn open(volume_dir: &Path, config: &ServeConfig) -> Result<Opened, ServeError> {
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
    let slots = pool_slots(config, params.members, params.block_len as usize)?;
    let threads = config
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .clamp(1, 256);
    let (engine, read_io) = io_choices(config);
    let (limits, sendfile_sessions, descriptors) = api_limits(config, &vol, threads, engine)?;
    let multicast = multicast_options(config)?;
    Ok(Opened {
        vol: Some(vol),
        params,
        failed_in_catalog,
        slots,
        threads,
        engine,
        read_io,
        limits,
        sendfile_sessions,
        descriptors,
        multicast,
    })
}

/// The fills from the origin of `config`; a title is in use (not evicted) while a session
/// or broadcast of `control` sends it.
fn fills(
    o: &Opened,
    config: &ServeConfig,
    (objects, cell, stop): (&Arc<Objects>, &ConfigCell, &Arc<Stop>),
    control: (&Arc<Registry>, &Arc<Broadcasts>),
) -> Result<Arc<isnode_fill::Fills>, ServeError> {
    let (sessions, broadcasts) = (control.0.clone(), control.1.clone());
    let unless_in_use = Box::new(move |name: &str, toi: u32, delete: &mut dyn FnMut()| {
        let closing = sessions.close_object(toi);
        let used = !closing.users.is_empty()
            || broadcasts.list().iter().any(|b| b.object.rec.name == name);
        if !used {
            delete();
        }
        !used
    });
    let env = isnode_fill::FillEnv {
        objects: objects.clone(),
        config: cell.clone(),
        stop: stop.clone(),
        unless_in_use,
        descriptors: o.descriptors,
    };
    let fills = isnode_fill::Fills::new(config, env).map_err(ServeError::Config)?;
    Ok(Arc::new(fills))
}

/// The data plane's handles, its threads started.
struct Started {
    plane: Arc<Plane>,
    deps: Arc<PlaneDeps>,
    workers: Vec<JoinHandle<()>>,
}

/// Builds the data plane's handles from `o` and starts its threads.
fn start_plane(
    o: &Opened,
    config: &ConfigCell,
    stop: &Arc<Stop>,
    wakes: &crate::wake::Wakes,
    first_packet: isnode_plane::deps::FirstPacket,
) -> Result<Started, ServeError> {
    let params = o.params;
    let residency = match o.engine {
        EngineKind::Sendfile => Residency::OnUse,
        _ => Residency::Touched,
    };
    let clock = Clock::start();
    let members = Members::new(params.members, config.clone(), clock)
        .map_err(io_error("creating an eventfd"))?;
    for &m in &o.failed_in_catalog {
        members.health.mark_failed(m);
        tracing::warn!(member = m, "member {m} is failed in the catalog: not read (rebuild it with `isnode volume rebuild --member {m}`)");
    }
    let deps = Arc::new(PlaneDeps {
        cache: Cache::with_residency(o.slots, params.block_len as usize, residency),
        params,
        members: Arc::new(members),
        positions: Arc::new(PositionBoard::new(o.threads)),
        slack: Arc::new(SlackBoard::new(o.threads)),
        pace: wakes.pace.clone(),
        counters: Arc::default(),
        stop: stop.clone(),
        clock,
        config: config.clone(),
        engine: o.engine,
        read_io: o.read_io,
        multicast: o.multicast,
        first_packet,
    });
    let (plane, workers) =
        Plane::start(deps.clone(), o.threads).map_err(io_error("starting a data-plane thread"))?;
    Ok(Started {
        plane,
        deps,
        workers,
    })
}

/// The keepalive socket on the API's IP, its port, and its twin the token datagrams go
/// out from.
fn keepalive_sockets(
    local_addr: SocketAddr,
) -> Result<(std::net::UdpSocket, u16, std::net::UdpSocket), ServeError> {
    let sock = keepalive::bind(local_addr).map_err(io_error(&format!(
        "binding the keepalive port on {}",
        local_addr.ip()
    )))?;
    let port = sock
        .local_addr()
        .map_err(io_error("reading the keepalive port"))?
        .port();
    let token_socket = sock
        .try_clone()
        .map_err(io_error("cloning the keepalive socket"))?;
    Ok((sock, port, token_socket))
}

/// Spawns a named background thread of the server.
fn spawn(
    name: &str,
    what: &str,
    body: impl FnOnce() + Send + 'static,
) -> Result<JoinHandle<()>, ServeError> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(body)
        .map_err(io_error(what))
}

/// Starts the background threads beside the data plane: keepalives, the members' writer,
/// the scrub and the viewer-pace writer.
fn spawn_background(
    shared: &Arc<ApiState>,
    volume_dir: &Path,
    keepalive_sock: std::net::UdpSocket,
) -> Result<Vec<JoinHandle<()>>, ServeError> {
    let keepalives = keepalive::Keepalives {
        sessions: shared.control.sessions.clone(),
        counters: shared.control.counters.clone(),
        clock: shared.control.clock,
        stop: shared.stop.clone(),
    };
    let keepalives = spawn(
        "isnode-keepalive",
        "starting the keepalive thread",
        move || keepalive::run(keepalives, keepalive_sock),
    )?;
    let (members, stop, root) = (
        shared.members.clone(),
        shared.stop.clone(),
        volume_dir.to_path_buf(),
    );
    let objects = shared.control.objects.clone();
    // A member that comes back (rebuilt, or probed good) is read from its new files.
    let writer = spawn(
        "isnode-members",
        "starting the member-state thread",
        move || members.record_failures(&root, &stop, &|m| objects.reopen_member(m)),
    )?;
    let viewers = crate::scrub::Viewers {
        slack: shared.slack.clone(),
        cache: shared.control.cache.clone(),
        plane: shared.plane_counters.clone(),
    };
    let scrub = crate::scrub::Scrub {
        root: volume_dir.to_path_buf(),
        config: shared.config_cell().clone(),
        state: shared.scrub.clone(),
        stop: shared.stop.clone(),
        reloaded: shared.wakes.reloaded.clone(),
        viewers: viewers.clone(),
    };
    let scrub = spawn("isnode-scrub", "starting the scrub thread", move || {
        crate::scrub::run(scrub)
    })?;
    let pace = crate::viewer_pace::Pace {
        volume: volume_dir.to_path_buf(),
        viewers,
        clock: shared.control.clock,
        stop: shared.stop.clone(),
        first_stream: shared.wakes.pace.clone(),
    };
    let pace = spawn(
        "isnode-pace",
        "starting the viewer-pace thread",
        move || crate::viewer_pace::run(pace),
    )?;
    Ok(vec![keepalives, writer, scrub, pace])
}

/// Starts the control API's thread and waits until it listens.
fn spawn_api(
    handle: &mut ServerHandle,
    listener: std::net::TcpListener,
    conn: (api::ConnLimits, Option<tokio_rustls::TlsAcceptor>),
) -> Result<(), ServeError> {
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let sh = handle.shared.clone();
    handle.api_stop = Some(stop_tx);
    handle.api_thread = Some(spawn(
        "isnode-api",
        "starting the control API thread",
        move || api::serve(sh, listener, conn, stop_rx, ready_tx),
    )?);
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(ServeError::Config("the control API thread died".into())),
    }
}

/// The stop signal (which also wakes the signal loop), the sleepers' events, the counters.
fn signals() -> Result<(Arc<Stop>, crate::wake::Wakes, Arc<Metrics>), ServeError> {
    let stop = Arc::new(Stop::new().map_err(io_error("creating an eventfd"))?);
    let wakes = crate::wake::Wakes::new().map_err(io_error("creating an eventfd"))?;
    let notify = wakes.stop_notify.clone();
    stop.on_stop(Box::new(move || notify.notify_one()));
    Ok((stop, wakes, Arc::new(Metrics::new())))
}

/// Says that the server started, and with what.
fn log_started(
    handle: &ServerHandle,
    shared: &ApiState,
    config: &ServeConfig,
    (engine, read_io, threads): (EngineKind, ReadIo, usize),
    api_max_connections: usize,
) {
    let pool_bytes = shared.control.cache.pool_bytes();
    tracing::info!(
        listen = %handle.local_addr,
        keepalive_port = shared.keepalive_port,
        engine = engine.name(),
        read_io = ?read_io,
        threads,
        cache_bytes = pool_bytes,
        bitrate_budget_bps = config.bitrate_budget_bps(),
        max_sessions_per_client = config.max_sessions_per_client,
        api_max_connections,
        "isnode serve started"
    );
    warn_if_memory_short(pool_bytes, config.http_mirror_bytes);
}

/// Says how many HTTP readers (at their least) this process's cgroup memory limit holds
/// beside the pool, the server itself and the headroom (the HTTP mirror gives way to them:
/// `api/memory_gate.rs`), and warns when that is fewer than [`FEW_READERS`].
fn warn_if_memory_short(pool_bytes: u64, mirror_bytes: u64) {
    let Some(limit) = isnode_sys::memory::cgroup_limit_bytes() else {
        return;
    };
    let readers = isnode_serve_core::admission::memory::readers_held(limit, pool_bytes);
    if readers < FEW_READERS {
        tracing::warn!(
            limit_bytes = limit,
            pool_bytes,
            readers,
            "the memory cgroup's limit leaves room for {readers} HTTP readers beside the pool, \
             24 MiB for the server and the headroom kept free: lower cache_size_bytes or \
             raise the limit (README: Memory)"
        );
    } else {
        tracing::info!(
            limit_bytes = limit,
            pool_bytes,
            http_mirror_bytes = mirror_bytes,
            readers,
            "under a memory limit: at most {readers} HTTP readers, and the HTTP mirror gives \
             way to them (README: Memory)"
        );
    }
}

/// `http_mirror_dir`, if set, must be a directory on a tmpfs (files elsewhere would be
/// written back to a disk); one mounted without huge pages, or smaller than the mirror,
/// works, and is said.
fn check_mirror_dir(config: &ServeConfig) -> Result<(), ServeError> {
    let Some(dir) = config
        .http_mirror_dir
        .as_deref()
        .filter(|_| config.http_mirror_bytes > 0)
    else {
        return Ok(());
    };
    let fs = isnode_sys::fileview::tmpfs_of(dir)
        .map_err(|e| ServeError::Config(format!("http_mirror_dir {}: {e}", dir.display())))?;
    let shown = dir.display();
    match fs.pages {
        isnode_sys::fileview::TmpfsPages::Huge => tracing::info!(
            dir = %shown,
            "the HTTP mirror's files get huge pages: memory comes and goes a huge page at a time"
        ),
        isnode_sys::fileview::TmpfsPages::Small => tracing::warn!(
            dir = %shown,
            "http_mirror_dir is a tmpfs without huge pages (mount it with huge=within_size): \
             its files get pages only, and memory still comes and goes a huge page at a time"
        ),
    }
    if fs.size_bytes < config.http_mirror_bytes {
        tracing::warn!(
            dir = %shown,
            size_bytes = fs.size_bytes,
            http_mirror_bytes = config.http_mirror_bytes,
            "http_mirror_dir's tmpfs is smaller than the mirror: codewords past it are copied \
             instead (mount it with size= at least http_mirror_bytes)"
        );
    }
    Ok(())
}

/// Fewer HTTP readers than this under a memory limit is worth a warning at start.
const FEW_READERS: u64 = 64;

/// The HTTP mirror, and the memory gate that weighs readers and the mirror against the
/// pool under a memory limit.
fn content_memory(
    config: &ServeConfig,
    control: &Control,
) -> Result<
    (
        Option<Arc<crate::api::mirror::Mirror>>,
        crate::api::memory_gate::MemoryGate,
    ),
    ServeError,
> {
    check_mirror_dir(config)?;
    let mirror =
        crate::api::mirror::Mirror::new(config.http_mirror_bytes, config.http_mirror_dir.clone());
    let gate = crate::api::memory_gate::MemoryGate::new(
        control.cache.pool_bytes(),
        mirror.clone().map(|m| (m, config.http_mirror_bytes)),
    );
    Ok((mirror, gate))
}

/// The control half's handles, over the data plane `started`.
fn control_handles(
    o: &Opened,
    config: ConfigCell,
    (objects, sessions, broadcasts): (Arc<Objects>, Arc<Registry>, Arc<Broadcasts>),
    started: &Started,
    wakes: &crate::wake::Wakes,
) -> Arc<Control> {
    Arc::new(Control {
        config,
        clock: started.deps.clock,
        objects,
        cache: started.deps.cache.clone(),
        sessions,
        broadcasts,
        plane: started.plane.clone(),
        engine: o.engine,
        sendfile_sessions: o.sendfile_sessions,
        uploads: Arc::default(),
        descriptors: o.descriptors,
        counters: Arc::default(),
        reap: wakes.reap.clone(),
    })
}

/// Starts a server on the volume at `volume_dir` (created with default parameters if
/// absent) and returns once it listens.
pub fn start(volume_dir: &Path, config: &ServeConfig) -> Result<ServerHandle, ServeError> {
    let mut o = open(volume_dir, config)?;
    let tls = tls_acceptor(config)?;
    cluster_tls_check(config)?;
    let cell = ConfigCell::new(config.clone());
    let (stop, wakes, metrics) = signals()?;
    let objects =
        Arc::new(Objects::new(o.vol.take().ok_or_else(|| {
            ServeError::Config("the volume was opened once".into())
        })?));
    let sessions = Arc::new(Registry::new());
    let broadcasts = Arc::new(Broadcasts::kept_in(volume_dir));
    let fills = fills(
        &o,
        config,
        (&objects, &cell, &stop),
        (&sessions, &broadcasts),
    )?;
    let (tokens_path, tokens) = load_tokens(volume_dir, config)?;
    let (std_listener, local_addr) = bind(config.listen)?;
    let (keepalive_sock, keepalive_port, token_socket) = keepalive_sockets(local_addr)?;
    let cluster = isnode_control::cluster::ClusterState::of(config).map_err(ServeError::Config)?;
    let m = metrics.clone();
    let first_packet = Box::new(move |ns: u64| m.session_first_packet(ns));
    let started = start_plane(&o, &cell, &stop, &wakes, first_packet)?;
    let deps = &started.deps;
    let control = control_handles(&o, cell, (objects, sessions, broadcasts), &started, &wakes);
    let (mirror, memory_gate) = content_memory(config, &control)?;
    let shared = Arc::new(ApiState {
        control,
        metrics,
        stop,
        wakes,
        draining: AtomicBool::new(false),
        plane_counters: deps.counters.clone(),
        members: deps.members.clone(),
        positions: deps.positions.clone(),
        slack: deps.slack.clone(),
        keepalive_port,
        token_socket,
        tokens: std::sync::RwLock::new(tokens),
        auth_throttle: std::sync::Mutex::new(isnode_auth::throttle::Throttle::default()),
        last_use: isnode_auth::last_use::LastUse::load(&isnode_auth::last_use::side_path(
            &tokens_path,
        )),
        tokens_path,
        scrub: Arc::default(),
        cluster: Arc::new(cluster),
        fills,
        catalog_slots: tokio::sync::Semaphore::new(crate::api::state::CATALOG_THREADS),
        disk_read_slots: tokio::sync::Semaphore::new(crate::api::state::DISK_READ_THREADS),
        memory_gate,
        mirror,
    });
    let mut handle = ServerHandle {
        local_addr,
        https: tls.is_some(),
        shared: shared.clone(),
        workers: started.workers,
        api_thread: None,
        api_stop: None,
    };
    // Before the API answers: a receiver asking at once finds its broadcast.
    isnode_control::broadcast::start::restore(&shared.control, volume_dir);
    handle
        .workers
        .extend(spawn_background(&shared, volume_dir, keepalive_sock)?);
    spawn_api(&mut handle, std_listener, (o.limits, tls))?;
    isnode_fill::resume_all(&shared.fills);
    log_started(
        &handle,
        &shared,
        config,
        (o.engine, o.read_io, o.threads),
        o.limits.max_connections,
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
