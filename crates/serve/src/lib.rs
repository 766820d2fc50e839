//! `isnode serve`: the data plane and the control API of the isnode server.
//!
//! - [`session`]: the sans-IO pacing core (what to send when), tested with a virtual clock.
//! - [`cache`]: the fixed pool of aligned block buffers shared by every session.
//! - `reader`: fills the pool, per data-plane thread: io_uring `READ_FIXED` (O_DIRECT,
//!   registered pool buffers) without stalling the thread's other sessions, or `pread`.
//! - [`net`]: the UDP send system calls (GSO `sendmsg`, `sendmmsg`, `sendto`); the
//!   io_uring zero-copy engine lives in `uring`.
//! - data-plane threads (one per core by default) each own their sessions and send from
//!   the pool; the control API (HTTP/JSON, `docs/protocol.md`) runs on a small tokio
//!   runtime beside them.
//!
//! Embedding: [`start`] runs a server in-process and returns a [`ServerHandle`];
//! [`run`] does the same and blocks until SIGINT or SIGTERM.

#![deny(missing_docs)]

mod api;
pub mod cache;
pub mod metrics;
pub mod net;
pub mod objects;
mod plane;
mod reader;
pub mod session;
mod uring;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use anyhow::Context as _;
use serde::Serialize;

pub use metrics::{Limit, MetricsSnapshot};

use cache::Cache;
use metrics::Metrics;
use objects::{ObjectInfo, Objects};

/// The send engine of the data plane.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EngineKind {
    /// `sendmsg` with `UDP_SEGMENT` (GSO) straight from the block pool: one call per run.
    Gso,
    /// io_uring `SEND_ZC` from the registered pool buffers, with socket-level GSO.
    UringZc,
    /// `sendmmsg` from the pool: one call per run, one datagram per packet in the kernel.
    Sendmmsg,
    /// The seeds' baseline: buffered reads into a per-session buffer, parity encoded at
    /// send time, headers built and payload copied per packet, one `sendto` per packet.
    Traditional,
}

impl EngineKind {
    /// Every engine, in metrics order.
    pub const ALL: [EngineKind; 4] = [
        EngineKind::Gso,
        EngineKind::UringZc,
        EngineKind::Sendmmsg,
        EngineKind::Traditional,
    ];

    /// The engine's name on the command line and in metrics.
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Gso => "gso",
            EngineKind::UringZc => "uring-zc",
            EngineKind::Sendmmsg => "sendmmsg",
            EngineKind::Traditional => "traditional",
        }
    }

    /// Position in [`EngineKind::ALL`] (and in the metrics arrays).
    pub fn index(self) -> usize {
        match self {
            EngineKind::Gso => 0,
            EngineKind::UringZc => 1,
            EngineKind::Sendmmsg => 2,
            EngineKind::Traditional => 3,
        }
    }
}

/// What to do with the packets of a failed member.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Degraded {
    /// Rebuild the missing symbols from the other members and send them.
    Rebuild,
    /// Send what can be read; the client's FEC repairs the rest.
    SendAvailable,
}

/// How the data plane reads blocks into the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReadIo {
    /// io_uring `READ_FIXED` (O_DIRECT, registered pool buffers) without blocking the
    /// thread's other sessions; falls back to `Sync` where io_uring is unavailable.
    Uring,
    /// A synchronous `pread` (O_DIRECT where allowed) on the data-plane thread.
    Sync,
}

/// Flags of `isnode serve`.
#[derive(clap::Args, Clone, Debug)]
pub struct ServeArgs {
    /// Address of the HTTP control API.
    #[arg(long, default_value = "127.0.0.1:7878")]
    pub listen: SocketAddr,
    /// Send engine.
    #[arg(long, value_enum, default_value_t = EngineKind::Gso)]
    pub engine: EngineKind,
    /// Size of the block pool in bytes (allocated at start; bounds the sessions at
    /// distinct positions: each needs about one block per member).
    #[arg(long, default_value_t = 256 << 20)]
    pub cache_size: u64,
    /// Bitrate budget: the sum of admitted sessions' send rates, bits per second (default: unlimited).
    #[arg(long)]
    pub max_bitrate: Option<u64>,
    /// Most concurrent sessions per client IP address (default: unlimited).
    #[arg(long)]
    pub max_sessions_per_client: Option<u32>,
    /// Data-plane threads (default: one per core).
    #[arg(long)]
    pub threads: Option<usize>,
    /// What to send for a failed member's packets.
    #[arg(long, value_enum, default_value_t = Degraded::Rebuild)]
    pub degraded: Degraded,
    /// A session without keepalive for this long ends by itself (milliseconds).
    #[arg(long, default_value_t = 5000)]
    pub session_timeout_ms: u64,
    /// How blocks are read into the pool (`uring` falls back to `sync` where io_uring is
    /// unavailable).
    #[arg(long, value_enum, env = "ISNODE_READ_IO", default_value_t = ReadIo::Uring)]
    pub read_io: ReadIo,
}

impl Default for ServeArgs {
    fn default() -> Self {
        ServeArgs {
            listen: SocketAddr::from(([127, 0, 0, 1], 7878)),
            engine: EngineKind::Gso,
            cache_size: 256 << 20,
            max_bitrate: None,
            max_sessions_per_client: None,
            threads: None,
            degraded: Degraded::Rebuild,
            session_timeout_ms: 5000,
            read_io: ReadIo::Uring,
        }
    }
}

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

/// Lifecycle of a session, as published by the data plane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum SessionState {
    Streaming = 0,
    Done = 1,
    Expired = 2,
    Deleted = 3,
}

/// What the control API and the data plane share about one session.
pub(crate) struct SessionShared {
    pub id: String,
    pub object: Arc<ObjectInfo>,
    pub dest: SocketAddr,
    pub peer_ip: IpAddr,
    pub send_rate_bps: u64,
    pub start_codeword: u32,
    pub next_codeword: AtomicU32,
    pub packets_sent: AtomicU64,
    pub bytes_sent: AtomicU64,
    state: AtomicU8,
    pub last_keepalive_ns: AtomicU64,
    pub ended_ns: AtomicU64,
}

impl SessionShared {
    pub fn state(&self) -> SessionState {
        match self.state.load(Ordering::Acquire) {
            0 => SessionState::Streaming,
            1 => SessionState::Done,
            2 => SessionState::Expired,
            _ => SessionState::Deleted,
        }
    }

    /// Moves from streaming to `to`; false if it had already ended.
    pub fn end(&self, to: SessionState, now_ns: u64) -> bool {
        let ok = self
            .state
            .compare_exchange(
                SessionState::Streaming as u8,
                to as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok();
        if ok {
            self.ended_ns.store(now_ns, Ordering::Release);
        }
        ok
    }
}

/// Everything the threads of a server share.
pub(crate) struct Shared {
    pub args: ServeArgs,
    pub objects: Objects,
    pub cache: Cache,
    pub metrics: Metrics,
    pub sessions: Mutex<HashMap<String, Arc<SessionShared>>>,
    pub epoch: Instant,
    pub shutdown: AtomicBool,
    pub workers: Vec<std::sync::mpsc::SyncSender<plane::NewSession>>,
    pub next_worker: AtomicUsize,
    /// Engine in use (uring-zc falls back to gso where io_uring is unavailable).
    pub engine: EngineKind,
    /// Block reads in use (uring falls back to sync where io_uring is unavailable).
    pub read_io: ReadIo,
    /// Where each data-plane thread's sessions are (eviction decisions; data plane only).
    pub positions: plane::demand::PositionBoard,
    /// Why the data plane failed (a thread panicked): the server stops.
    pub failure: std::sync::OnceLock<String>,
}

impl Shared {
    /// Records a data-plane failure and stops the server (every thread, the API's sessions).
    pub fn fail(&self, why: String) {
        let _ = self.failure.set(why);
        self.shutdown.store(true, Ordering::Release);
    }

    pub fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    pub fn lock_sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<SessionShared>>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn snapshot(&self) -> MetricsSnapshot {
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
            sessions_expired: load(&m.sessions_expired),
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
        }
    }
}

/// A running server (in-process). Dropping it shuts it down.
pub struct ServerHandle {
    local_addr: SocketAddr,
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    api_thread: Option<JoinHandle<()>>,
    api_stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl ServerHandle {
    /// The address the control API listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
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
        self.shared.shutdown.store(true, Ordering::Release);
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

/// Starts a server on the volume at `volume_dir` (created with default parameters if
/// absent) and returns once it listens.
pub fn start(volume_dir: &Path, args: &ServeArgs) -> Result<ServerHandle, ServeError> {
    let vol = isnode_store::Volume::open_or_create(volume_dir)?;
    let params = *vol.params();
    let block_len = params.block_len as usize;
    let slots = args.cache_size / block_len as u64;
    if slots < u64::from(params.members) * 2 {
        return Err(ServeError::Config(format!(
            "--cache-size {} holds {slots} blocks of {block_len} bytes; at least {} (two per member) are needed",
            args.cache_size,
            params.members * 2
        )));
    }
    let slots = u32::try_from(slots).unwrap_or(u32::MAX).min(1 << 20);
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .clamp(1, 256);
    let cache = Cache::new(slots, block_len);
    let engine = match args.engine {
        EngineKind::UringZc if !uring::available() => {
            tracing::warn!(
                "io_uring SEND_ZC is not available on this kernel: using the gso engine"
            );
            EngineKind::Gso
        }
        e => e,
    };
    let read_io = match args.read_io {
        ReadIo::Uring if !reader::available() => {
            tracing::warn!(
                "io_uring reads are not available on this kernel: reading blocks with pread"
            );
            ReadIo::Sync
        }
        r => r,
    };
    let std_listener =
        std::net::TcpListener::bind(args.listen).map_err(|source| ServeError::Io {
            context: format!("binding the control API to {}", args.listen),
            source,
        })?;
    let local_addr = std_listener.local_addr().map_err(|source| ServeError::Io {
        context: "reading the listen address".into(),
        source,
    })?;
    std_listener
        .set_nonblocking(true)
        .map_err(|source| ServeError::Io {
            context: "setting the listener non-blocking".into(),
            source,
        })?;

    let mut senders = Vec::with_capacity(threads);
    let mut receivers = Vec::with_capacity(threads);
    for _ in 0..threads {
        let (tx, rx) = std::sync::mpsc::sync_channel(1024);
        senders.push(tx);
        receivers.push(rx);
    }
    let shared = Arc::new(Shared {
        args: args.clone(),
        objects: Objects::new(vol),
        cache,
        metrics: Metrics::new(params.members),
        sessions: Mutex::new(HashMap::new()),
        epoch: Instant::now(),
        shutdown: AtomicBool::new(false),
        workers: senders,
        next_worker: AtomicUsize::new(0),
        engine,
        read_io,
        positions: plane::demand::PositionBoard::new(threads),
        failure: std::sync::OnceLock::new(),
    });
    let mut workers = Vec::with_capacity(threads);
    for (i, rx) in receivers.into_iter().enumerate() {
        let sh = shared.clone();
        let h = std::thread::Builder::new()
            .name(format!("isnode-plane-{i}"))
            .spawn(move || plane::worker(sh, i, rx))
            .map_err(|source| ServeError::Io {
                context: "starting a data-plane thread".into(),
                source,
            })?;
        workers.push(h);
    }
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
    let sh = shared.clone();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let api_thread = std::thread::Builder::new()
        .name("isnode-api".into())
        .spawn(move || api::serve(sh, std_listener, stop_rx, ready_tx))
        .map_err(|source| ServeError::Io {
            context: "starting the control API thread".into(),
            source,
        })?;
    let mut handle = ServerHandle {
        local_addr,
        shared,
        workers,
        api_thread: Some(api_thread),
        api_stop: Some(stop_tx),
    };
    match ready_rx.recv() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            handle.stop();
            return Err(e);
        }
        Err(_) => {
            handle.stop();
            return Err(ServeError::Config("the control API thread died".into()));
        }
    }
    tracing::info!(
        listen = %local_addr,
        engine = engine.name(),
        read_io = ?read_io,
        threads,
        cache_bytes = u64::from(slots) * block_len as u64,
        "isnode serve started"
    );
    Ok(handle)
}

/// Runs a server until SIGINT or SIGTERM, then shuts it down cleanly.
pub fn run(volume_dir: &Path, args: &ServeArgs) -> anyhow::Result<()> {
    let handle = start(volume_dir, args)
        .with_context(|| format!("starting the server on {}", volume_dir.display()))?;
    eprintln!(
        "isnode serve: listening on http://{} (engine {}), Ctrl-C to stop",
        handle.local_addr(),
        handle.engine().name()
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("creating the signal runtime")?;
    let stop = rt
        .block_on(async {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
            let mut check = tokio::time::interval(std::time::Duration::from_millis(100));
            loop {
                tokio::select! {
                    r = tokio::signal::ctrl_c() => return r.map(|()| None),
                    _ = term.recv() => return Ok(None),
                    _ = check.tick() => {
                        if let Some(why) = handle.failure() {
                            return Ok(Some(why));
                        }
                    }
                }
            }
        })
        .context("waiting for a signal")?;
    if let Some(why) = stop {
        handle.shutdown();
        anyhow::bail!("the server stopped: {why}");
    }
    eprintln!("isnode serve: shutting down");
    handle.shutdown();
    Ok(())
}
