//! The control API's connections: its own accept loop, so that no connection can hold a
//! descriptor, or the API, for long without a request in service.
//!
//! - A **connection cap** (derived at start from the descriptors the data plane does not
//!   need, `isnode-serve`): at the cap, a new connection evicts the oldest connection
//!   that has no request in service (idle or still sending its request head); if every
//!   connection is busy, the new one is closed at once. Idle and slow connections,
//!   however many, thus never keep the API from answering a new client.
//! - A **header timeout**: a request head must be complete within it, counted from the
//!   connection's accept or from the first byte of a later request.
//! - An **idle timeout**: a kept-alive connection without a request for this long is
//!   closed.
//! - A **write timeout**: a response body the client takes no byte of for this long is
//!   dropped with its connection (releasing a content reader's place and its buffers); at
//!   the cap, a connection whose response has made no progress for the header timeout may
//!   be evicted like an idle one.
//!
//! What a connection may still do is decided by [`deadline_ns`] (pure) from its
//! [`ConnState`], which the connection's byte stream ([`Watched`]), its requests and their
//! response bodies ([`Busy`]) update.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;

use crate::sendfile::FileSend;

/// Most bytes a connection buffers each way (hyper's read and write buffers): request heads
/// fit (a target of 8 KiB, header fields of 16 KiB: `errors.rs`), and a client that does
/// not read holds this and one chunk of its answer, not the answer.
const CONN_BUF_BYTES: usize = 64 * 1024;
/// Longest wait of the accept loop for an evicted connection to close.
const EVICTION_WAIT: Duration = Duration::from_secs(1);

/// Limits of the control API's connections (`--api-*` flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnLimits {
    /// Most connections open at once.
    pub max_connections: usize,
    /// A request head must be complete within this, nanoseconds.
    pub header_timeout_ns: u64,
    /// A connection without a request for this long is closed, nanoseconds.
    pub idle_timeout_ns: u64,
    /// A response body without progress for this long is dropped, nanoseconds.
    pub write_timeout_ns: u64,
    /// Each connection's send buffer (`SO_SNDBUF`), bytes; `None`: the kernel's autotuning.
    pub send_buffer_bytes: Option<usize>,
}

/// What one connection is doing, shared by its byte stream, its requests and the
/// watchdog of its task.
#[derive(Debug)]
pub struct ConnState {
    /// When the connection was accepted (nanoseconds since the API's epoch).
    accepted_ns: u64,
    /// Requests in service or response bodies being sent.
    busy: AtomicUsize,
    /// Requests served (their responses started).
    served: AtomicU64,
    /// When the last response body ended (or the accept), nanoseconds.
    idle_since_ns: AtomicU64,
    /// When the first byte of the next request head arrived (0: none yet), nanoseconds.
    head_since_ns: AtomicU64,
    /// When the request in service started (its head complete), nanoseconds.
    request_since_ns: AtomicU64,
    /// The request in service is still receiving its body (the client's pace).
    receiving: AtomicBool,
    /// A response (head or body) is being sent (the client's pace).
    responding: AtomicBool,
    /// When the response being sent started or last had bytes taken by the socket,
    /// nanoseconds.
    progress_ns: AtomicU64,
    /// Chosen to make room for a new connection: it closes.
    evicted: AtomicBool,
    /// Wakes the connection's task to close it.
    kill: Notify,
    /// Told when the connection is closed (its descriptor released).
    closed: Notify,
}

/// A snapshot of [`ConnState`] for [`deadline_ns`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnPhase {
    /// When the connection was accepted.
    pub accepted_ns: u64,
    /// Requests in service or bodies being sent.
    pub busy: usize,
    /// Requests served so far.
    pub served: u64,
    /// When the last response ended (or the accept).
    pub idle_since_ns: u64,
    /// When the first byte of the next request head arrived (0: none).
    pub head_since_ns: u64,
    /// When the request in service started.
    pub request_since_ns: u64,
    /// Whether the request in service is still receiving its body.
    pub receiving: bool,
    /// Whether a response is being sent.
    pub responding: bool,
    /// When the response being sent started or last made progress.
    pub progress_ns: u64,
}

/// When the connection must be closed if nothing changes; `None` while a request is in
/// service (its body received, its answer not started). A new connection has the header
/// timeout from its accept to send its first request head; afterwards the idle timeout
/// runs from the last response, and the header timeout from the first byte of the next
/// head; a request's body must arrive within the header timeout from the end of its head;
/// a response must make progress within the write timeout.
pub fn deadline_ns(p: ConnPhase, limits: &ConnLimits) -> Option<u64> {
    if p.busy > 0 {
        if p.receiving {
            return Some(p.request_since_ns.saturating_add(limits.header_timeout_ns));
        }
        return p
            .responding
            .then(|| p.progress_ns.saturating_add(limits.write_timeout_ns));
    }
    if p.served == 0 {
        return Some(p.accepted_ns.saturating_add(limits.header_timeout_ns));
    }
    if p.head_since_ns > 0 {
        return Some(p.head_since_ns.saturating_add(limits.header_timeout_ns));
    }
    Some(p.idle_since_ns.saturating_add(limits.idle_timeout_ns))
}

impl ConnState {
    fn new(now_ns: u64) -> ConnState {
        ConnState {
            accepted_ns: now_ns,
            busy: AtomicUsize::new(0),
            served: AtomicU64::new(0),
            idle_since_ns: AtomicU64::new(now_ns),
            head_since_ns: AtomicU64::new(0),
            request_since_ns: AtomicU64::new(0),
            receiving: AtomicBool::new(false),
            responding: AtomicBool::new(false),
            progress_ns: AtomicU64::new(0),
            evicted: AtomicBool::new(false),
            kill: Notify::new(),
            closed: Notify::new(),
        }
    }

    fn phase(&self) -> ConnPhase {
        ConnPhase {
            accepted_ns: self.accepted_ns,
            busy: self.busy.load(Ordering::Acquire),
            served: self.served.load(Ordering::Acquire),
            idle_since_ns: self.idle_since_ns.load(Ordering::Acquire),
            head_since_ns: self.head_since_ns.load(Ordering::Acquire),
            request_since_ns: self.request_since_ns.load(Ordering::Acquire),
            receiving: self.receiving.load(Ordering::Acquire),
            responding: self.responding.load(Ordering::Acquire),
            progress_ns: self.progress_ns.load(Ordering::Acquire),
        }
    }

    /// True if it has no request in service.
    fn is_idle(&self) -> bool {
        self.busy.load(Ordering::Acquire) == 0
    }

    /// True if it may be evicted at `now_ns`: no request in service, one still receiving
    /// its body (nothing done for it yet), or one whose response has made no progress for
    /// `stall_ns` (a client that does not read).
    fn is_evictable(&self, now_ns: u64, stall_ns: u64) -> bool {
        let stalled = || {
            self.responding.load(Ordering::Acquire)
                && now_ns.saturating_sub(self.progress_ns.load(Ordering::Acquire)) >= stall_ns
        };
        self.is_idle() || self.receiving.load(Ordering::Acquire) || stalled()
    }

    /// Notes that the socket took response bytes at `now_ns`.
    fn progressed(&self, now_ns: u64) {
        if self.responding.load(Ordering::Relaxed) {
            self.progress_ns.store(now_ns, Ordering::Release);
        }
    }
}

/// Marks a connection busy from the start of a request until its response body ends
/// (or is dropped).
pub struct Busy {
    state: Arc<ConnState>,
    clock: Clock,
}

impl Busy {
    fn start(state: Arc<ConnState>, clock: Clock) -> Busy {
        state
            .request_since_ns
            .store(clock.now_ns(), Ordering::Release);
        state.busy.fetch_add(1, Ordering::AcqRel);
        state.served.fetch_add(1, Ordering::AcqRel);
        state.head_since_ns.store(0, Ordering::Release);
        Busy { state, clock }
    }
}

impl Busy {
    /// The response has started: its progress is timed from now.
    fn responding(&self) {
        self.state
            .progress_ns
            .store(self.clock.now_ns(), Ordering::Release);
        self.state.responding.store(true, Ordering::Release);
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.state.responding.store(false, Ordering::Release);
        self.state
            .idle_since_ns
            .store(self.clock.now_ns(), Ordering::Release);
        self.state.head_since_ns.store(0, Ordering::Release);
        self.state.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Nanoseconds since the API started.
#[derive(Clone, Copy, Debug)]
pub struct Clock(Instant);

impl Clock {
    fn now_ns(&self) -> u64 {
        u64::try_from(self.0.elapsed().as_nanos())
            .unwrap_or(u64::MAX)
            .max(1)
    }
}

/// A connection's byte stream, noting when the first byte of a request head arrives.
pub struct Watched<S> {
    inner: S,
    state: Arc<ConnState>,
    clock: Clock,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        if buf.filled().len() > before
            && this.state.is_idle()
            && this.state.head_since_ns.load(Ordering::Acquire) == 0
        {
            this.state
                .head_since_ns
                .store(this.clock.now_ns(), Ordering::Release);
        }
        r
    }
}

impl<S: AsyncWrite + FileSend + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            this.state.progressed(this.clock.now_ns());
        }
        r
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let r = crate::sendfile::poll_write_views(&mut this.inner, cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            this.state.progressed(this.clock.now_ns());
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// A response body that keeps its connection [`Busy`] until it ends or is dropped.
struct GuardedBody {
    inner: Body,
    _busy: Busy,
}

impl http_body::Body for GuardedBody {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Who watches the pace of a request body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BodyPace {
    /// The connection: whole within the header timeout, evictable meanwhile.
    HeaderTimeout,
    /// The handler (an upload, `PUT`: its own progress timeout, `api::upload`).
    Handler,
}

impl BodyPace {
    fn of(method: &axum::http::Method) -> BodyPace {
        match *method {
            axum::http::Method::PUT => BodyPace::Handler,
            _ => BodyPace::HeaderTimeout,
        }
    }
}

/// A request body that tells its connection when it has been received whole.
struct ReceivedBody {
    inner: Incoming,
    state: Arc<ConnState>,
}

impl ReceivedBody {
    fn new(inner: Incoming, state: Arc<ConnState>, pace: BodyPace) -> ReceivedBody {
        let receiving = pace == BodyPace::HeaderTimeout && !http_body::Body::is_end_stream(&inner);
        state.receiving.store(receiving, Ordering::Release);
        ReceivedBody { inner, state }
    }
}

impl http_body::Body for ReceivedBody {
    type Data = axum::body::Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_frame(cx);
        if matches!(r, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) || this.inner.is_end_stream()
        {
            this.state.receiving.store(false, Ordering::Release);
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for ReceivedBody {
    fn drop(&mut self) {
        self.state.receiving.store(false, Ordering::Release);
    }
}

/// The open connections, oldest first.
#[derive(Default)]
pub struct Conns {
    table: Mutex<BTreeMap<u64, Arc<ConnState>>>,
    next_id: AtomicU64,
}

/// What the accept loop does with a new connection.
#[derive(Debug)]
pub enum Admit {
    /// Below the cap: serve it.
    Serve,
    /// At the cap: this connection, the oldest idle one, was told to close; serve the new
    /// one once it has.
    Evicted(Arc<ConnState>),
    /// At the cap and every connection is busy (or already closing): close it at once.
    Refuse,
}

impl Conns {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<u64, Arc<ConnState>>> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Connections open (their tasks running).
    pub fn open(&self) -> usize {
        self.lock().len()
    }

    /// Makes room for one more connection under `cap` at `now_ns` (a response without
    /// progress for `stall_ns` counts as evictable).
    /// Connections still holding their descriptor count until their task has closed
    /// them, so the open connections never exceed `cap` but for the one being admitted.
    fn admit(&self, cap: usize, now_ns: u64, stall_ns: u64) -> Admit {
        let table = self.lock();
        if table.len() < cap {
            return Admit::Serve;
        }
        let victim = table
            .values()
            .find(|c| c.is_evictable(now_ns, stall_ns) && !c.evicted.load(Ordering::Acquire));
        match victim {
            Some(v) => {
                v.evicted.store(true, Ordering::Release);
                v.kill.notify_one();
                Admit::Evicted(v.clone())
            }
            None => Admit::Refuse,
        }
    }

    /// Tells every connection without a request in service to close (shutdown).
    fn close_idle(&self) {
        for c in self.lock().values().filter(|c| c.is_idle()) {
            c.evicted.store(true, Ordering::Release);
            c.kill.notify_one();
        }
    }

    fn insert(&self, state: Arc<ConnState>) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(id, state);
        id
    }

    fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }
}

/// Everything the connection tasks share.
#[derive(Clone)]
pub struct ConnServer {
    /// The routes each connection serves.
    pub router: Router,
    /// The cap and the deadlines.
    pub limits: ConnLimits,
    /// The open connections.
    pub conns: Arc<Conns>,
    /// Connections are TLS (HTTPS) if set.
    tls: Option<tokio_rustls::TlsAcceptor>,
    clock: Clock,
}

impl ConnServer {
    /// A server of `router`'s connections under `limits`.
    pub fn new(
        router: Router,
        limits: ConnLimits,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> ConnServer {
        ConnServer {
            router,
            limits,
            tls,
            conns: Arc::default(),
            clock: Clock(Instant::now()),
        }
    }

    /// Accepts connections until `stop` fires, then closes the idle ones and gives those
    /// with a request in service up to `grace` to finish.
    pub async fn run(
        &self,
        listener: tokio::net::TcpListener,
        mut stop: tokio::sync::oneshot::Receiver<()>,
        grace: Duration,
    ) {
        self.accept_until(&listener, &mut stop).await;
        drop(listener);
        let deadline = tokio::time::Instant::now() + grace;
        while self.conns.open() > 0 && tokio::time::Instant::now() < deadline {
            self.conns.close_idle();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn accept_until(
        &self,
        listener: &tokio::net::TcpListener,
        stop: &mut tokio::sync::oneshot::Receiver<()>,
    ) {
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                _ = &mut *stop => return,
            };
            match accepted {
                Ok((tcp, peer)) => self.admit(tcp, peer).await,
                Err(e) => {
                    // EMFILE and the like (descriptors the budget did not foresee): the
                    // backlog keeps the connection; try again shortly rather than spinning.
                    tracing::warn!("control API: accepting a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }

    /// Serves a new connection if the cap allows, after the connection evicted for it
    /// has closed (bounded): the descriptors in use never grow past the cap plus one.
    async fn admit(&self, tcp: tokio::net::TcpStream, peer: SocketAddr) {
        let (now, stall) = (self.clock.now_ns(), self.limits.header_timeout_ns);
        match self.conns.admit(self.limits.max_connections, now, stall) {
            Admit::Serve => {}
            Admit::Evicted(victim) => {
                let _ = tokio::time::timeout(EVICTION_WAIT, victim.closed.notified()).await;
            }
            Admit::Refuse => {
                tracing::debug!(%peer, "control API: at the connection cap, every connection busy: closed");
                return;
            }
        }
        let _ = tcp.set_nodelay(true);
        if let Some(bytes) = self.limits.send_buffer_bytes {
            if let Err(e) = isnode_sys::net::set_send_buffer(&tcp, bytes) {
                tracing::debug!(%peer, "control API: send buffer of {bytes} bytes: {e}");
            }
        }
        // Counted at once, not when its task first runs: under a flood the accept loop
        // admits many connections before any of their tasks runs, and each must count
        // against the cap from its accept.
        let state = Arc::new(ConnState::new(self.clock.now_ns()));
        let id = self.conns.insert(state.clone());
        let me = self.clone();
        tokio::spawn(async move { me.serve(tcp, peer, id, state).await });
    }

    /// Serves one connection (after its TLS handshake, within the header timeout, if the
    /// API is HTTPS) until it ends, times out or is evicted; then forgets it (`id`).
    async fn serve(
        &self,
        tcp: tokio::net::TcpStream,
        peer: SocketAddr,
        id: u64,
        state: Arc<ConnState>,
    ) {
        match &self.tls {
            None => self.drive(tcp, peer, &state).await,
            Some(acceptor) => {
                let limit = self.until_deadline(&state);
                let handshake = tokio::select! {
                    r = tokio::time::timeout(limit, acceptor.accept(tcp)) => r.ok(),
                    _ = state.kill.notified() => None,
                };
                match handshake {
                    Some(Ok(tls)) => self.drive(tls, peer, &state).await,
                    Some(Err(e)) => tracing::debug!(%peer, "control API TLS handshake: {e}"),
                    None => {
                        tracing::debug!(%peer, "control API TLS handshake timed out or evicted")
                    }
                }
            }
        }
        self.conns.remove(id);
        state.closed.notify_one();
    }

    async fn drive<S>(&self, io: S, peer: SocketAddr, state: &Arc<ConnState>)
    where
        S: AsyncRead + AsyncWrite + FileSend + Unpin + Send + 'static,
    {
        let io = Watched {
            inner: io,
            state: state.clone(),
            clock: self.clock,
        };
        let router = self.router.clone();
        let (st, clock) = (state.clone(), self.clock);
        let svc = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
            let busy = Busy::start(st.clone(), clock);
            req.extensions_mut().insert(ConnectInfo(peer));
            let mut router = router.clone();
            let pace = BodyPace::of(req.method());
            let req = req.map(|b| Body::new(ReceivedBody::new(b, st.clone(), pace)));
            async move {
                let resp = tower_service::Service::call(&mut router, req).await;
                busy.responding();
                resp.map(|r| {
                    r.map(|b| {
                        Body::new(GuardedBody {
                            inner: b,
                            _busy: busy,
                        })
                    })
                })
            }
        });
        let conn = hyper::server::conn::http1::Builder::new()
            .header_read_timeout(None)
            .max_buf_size(CONN_BUF_BYTES)
            .serve_connection(TokioIo::new(io), svc);
        tokio::pin!(conn);
        loop {
            let wait = self.until_deadline(state);
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!(%peer, "control API connection: {e}");
                    }
                    return;
                }
                _ = state.kill.notified() => return,
                _ = tokio::time::sleep(wait) => {
                    if self.until_deadline(state).is_zero() {
                        tracing::debug!(%peer, "control API connection timed out");
                        return;
                    }
                }
            }
        }
    }

    /// Time left before `state`'s deadline (a while if it has none: a request in service).
    fn until_deadline(&self, state: &ConnState) -> Duration {
        let recheck = Duration::from_nanos(self.limits.header_timeout_ns.min(1_000_000_000));
        match deadline_ns(state.phase(), &self.limits) {
            None => recheck,
            Some(d) => Duration::from_nanos(d.saturating_sub(self.clock.now_ns())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn limits() -> ConnLimits {
        ConnLimits {
            max_connections: 2,
            header_timeout_ns: 5 * S,
            idle_timeout_ns: 30 * S,
            write_timeout_ns: 20 * S,
            send_buffer_bytes: None,
        }
    }

    fn phase() -> ConnPhase {
        ConnPhase {
            accepted_ns: 100 * S,
            busy: 0,
            served: 0,
            idle_since_ns: 100 * S,
            head_since_ns: 0,
            request_since_ns: 0,
            receiving: false,
            responding: false,
            progress_ns: 0,
        }
    }

    #[test]
    fn a_new_connection_has_the_header_timeout_from_its_accept() {
        let mut p = phase();
        assert_eq!(deadline_ns(p, &limits()), Some(105 * S));
        // Dribbling bytes does not extend it.
        p.head_since_ns = 104 * S;
        assert_eq!(deadline_ns(p, &limits()), Some(105 * S));
    }

    #[test]
    fn a_request_in_service_has_no_deadline_once_its_body_is_in() {
        let mut p = phase();
        p.busy = 1;
        p.served = 1;
        p.request_since_ns = 300 * S;
        assert_eq!(deadline_ns(p, &limits()), None);
        // Still receiving its body: the header timeout from the end of its head.
        p.receiving = true;
        assert_eq!(deadline_ns(p, &limits()), Some(305 * S));
    }

    #[test]
    fn a_response_must_make_progress_within_the_write_timeout() {
        let mut p = phase();
        p.busy = 1;
        p.served = 1;
        p.request_since_ns = 300 * S;
        p.responding = true;
        p.progress_ns = 301 * S;
        assert_eq!(deadline_ns(p, &limits()), Some(321 * S));
        p.progress_ns = 350 * S;
        assert_eq!(deadline_ns(p, &limits()), Some(370 * S));
    }

    #[test]
    fn at_the_cap_a_connection_whose_response_stalls_is_evicted() {
        let conns = Conns::default();
        let clock = Clock(Instant::now());
        let a = Arc::new(ConnState::new(1));
        let ia = conns.insert(a.clone());
        let busy = Busy::start(a.clone(), clock);
        busy.responding();
        a.progress_ns.store(10 * S, Ordering::Release);
        // Progress 4 s ago: not stalled for 5 s.
        assert!(matches!(conns.admit(1, 14 * S, 5 * S), Admit::Refuse));
        assert!(matches!(conns.admit(1, 15 * S, 5 * S), Admit::Evicted(v) if Arc::ptr_eq(&v, &a)));
        // Its bytes taken by the socket: progress again.
        a.evicted.store(false, Ordering::Release);
        a.progressed(15 * S);
        assert!(matches!(conns.admit(1, 16 * S, 5 * S), Admit::Refuse));
        drop(busy);
        assert!(!a.responding.load(Ordering::Acquire));
        conns.remove(ia);
    }

    #[test]
    fn a_kept_alive_connection_has_the_idle_timeout_then_the_header_timeout() {
        let mut p = phase();
        p.served = 3;
        p.idle_since_ns = 200 * S;
        assert_eq!(deadline_ns(p, &limits()), Some(230 * S));
        // A head started late: the header timeout from its first byte.
        p.head_since_ns = 229 * S;
        assert_eq!(deadline_ns(p, &limits()), Some(234 * S));
        // A head started early: still the header timeout from its first byte.
        p.head_since_ns = 201 * S;
        assert_eq!(deadline_ns(p, &limits()), Some(206 * S));
    }

    #[test]
    fn at_the_cap_the_oldest_idle_connection_is_evicted_and_busy_ones_never() {
        let conns = Conns::default();
        let clock = Clock(Instant::now());
        let a = Arc::new(ConnState::new(1));
        let b = Arc::new(ConnState::new(2));
        let ia = conns.insert(a.clone());
        let ib = conns.insert(b.clone());
        assert!(matches!(conns.admit(3, 0, u64::MAX), Admit::Serve));
        let busy_a = Busy::start(a.clone(), clock);
        assert!(matches!(conns.admit(2, 0, u64::MAX), Admit::Evicted(v) if Arc::ptr_eq(&v, &b)));
        assert!(!a.evicted.load(Ordering::Acquire));
        // b still holds its descriptor until it has closed: a is busy, nothing to evict.
        assert!(matches!(conns.admit(2, 0, u64::MAX), Admit::Refuse));
        conns.remove(ib);
        assert!(matches!(conns.admit(2, 0, u64::MAX), Admit::Serve));
        let c = Arc::new(ConnState::new(3));
        let ic = conns.insert(c.clone());
        assert!(matches!(conns.admit(2, 0, u64::MAX), Admit::Evicted(v) if Arc::ptr_eq(&v, &c)));
        conns.remove(ic);
        let d = Arc::new(ConnState::new(4));
        conns.insert(d.clone());
        let _busy_d = Busy::start(d.clone(), clock);
        // A request still receiving its body (at the client's pace) may be evicted...
        d.receiving.store(true, Ordering::Release);
        assert!(matches!(conns.admit(2, 0, u64::MAX), Admit::Evicted(v) if Arc::ptr_eq(&v, &d)));
        // ...one whose body is in may not.
        d.receiving.store(false, Ordering::Release);
        d.evicted.store(false, Ordering::Release);
        assert!(matches!(conns.admit(2, 0, u64::MAX), Admit::Refuse));
        // Once a's response has ended, it is the one evicted (the oldest idle).
        drop(busy_a);
        assert!(matches!(conns.admit(2, 0, u64::MAX), Admit::Evicted(v) if Arc::ptr_eq(&v, &a)));
        assert_eq!(conns.open(), 2);
        conns.remove(ia);
    }
}
