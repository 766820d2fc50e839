//! `isnode play`: receive one object from a server, repair it, and play it out.
//!
//! The shell around [`Receiver`](crate::receiver::Receiver): it binds a UDP socket, asks the
//! server for a session (`POST /v1/sessions`), keeps it alive from a thread, receives with
//! `recvmmsg` and `UDP_GRO` (a coalesced GSO run is split back into its packets), takes only
//! packets from the session's source ([`SourceFilter`]: the server's
//! IP address unless `--accept-from` says otherwise), optionally impairs what it receives
//! ([`crate::impair`]), feeds the receive core, hands the in-order output to the playout
//! thread ([`crate::playout`]), and deletes the session at the end.
//!
//! The session ends when every codeword is decoded or declared lost; when the last codeword
//! has been seen and no datagram came for a second (or `--timeout-s`, if shorter); when no
//! datagram came for `--timeout-s`; or after `--max-seconds`. Whatever is still undecoded
//! then is reported unrecoverable and written as zeros, unless the unicast repair
//! ([`crate::repair`]) fetches the missing symbols from the server first.
//!
//! Inside: `args` (the command line, [`PlayArgs`]), `session` (the session as received,
//! [`SessionSetup`], and the receive loop), `stats` (what is reported, [`PlayStats`]),
//! `http` (`--http`: the stream served to a local player, [`HttpServe`]).

mod args;
mod http;
mod session;
mod stats;

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::control::{leading_skip_bytes, ControlClient};
use crate::impair::Impairer;
use isnode_proto::keepalive::LossReport;

pub use args::{AcceptFrom, PlayArgs, ReleaseArg};
pub use http::{HttpListener, HttpOut, HttpServe};
pub use session::{SessionSetup, SourceFilter};
pub use stats::{EndReason, LostRange, PlayStats};

use session::run_session;

/// `play` was answered with a broadcast: the caller follows it
/// ([`crate::broadcast::play_described`]).
#[derive(Debug)]
pub struct FollowBroadcast {
    /// The broadcast.
    pub info: Box<isnode_proto::broadcast::BroadcastInfo>,
    /// When the request was sent.
    pub asked: Instant,
    /// How long the answer took.
    pub rtt: Duration,
}

impl std::fmt::Display for FollowBroadcast {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the server serves the title by broadcast {}",
            self.info.id
        )
    }
}

impl std::error::Error for FollowBroadcast {}

/// Plays `args.name` from `args.server`: binds the receive socket (`--bind`, `--port`) and
/// runs [`play_on`]. Writes `--stats-json` if asked; the caller prints [`PlayStats::summary`].
pub fn play(args: &PlayArgs) -> anyhow::Result<PlayStats> {
    let control = args.control(Duration::from_secs(10))?;
    let ip = match args.bind {
        Some(ip) => ip,
        None => {
            let server = control.server_addr()?;
            match server.ip() {
                IpAddr::V4(ip) if ip.is_loopback() => IpAddr::V4(Ipv4Addr::LOCALHOST),
                IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                // Dual-stack: receives whether the HTTP connection went over IPv6 or IPv4.
                IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            }
        }
    };
    let addr = SocketAddr::new(ip, args.port);
    let socket = UdpSocket::bind(addr).with_context(|| format!("binding UDP {addr}"))?;
    play_on(args, socket)
}

/// Plays on an already bound socket (so that an embedding program, e.g. `isnode demo`, knows
/// the receive port before the session starts): opens the session on the server, receives,
/// keeps it alive, deletes it at the end.
pub fn play_on(args: &PlayArgs, socket: UdpSocket) -> anyhow::Result<PlayStats> {
    // Check everything local before asking the server for anything.
    Impairer::new(&args.impair)?;
    let linger = secs_arg(args.http_linger_s, "--http-linger-s")?;
    let mut http = args.http.map(HttpListener::bind).transpose()?;
    let mut out = match http {
        None => Some(open_output(args.out.as_deref())?),
        Some(_) => None,
    };
    let local = socket.local_addr()?;
    let port = args.session_port.unwrap_or(local.port());
    let control = Arc::new(args.control(Duration::from_secs(10))?);
    let source = source_filter(args.accept_from, &control)?;
    // The receive buffer is grown before the request: the server's start-up burst arrives
    // at once, faster than the stream's rate, before the receive loop runs.
    crate::net::grow_recv_buffer(&socket, RECV_BUFFER_BYTES);
    let requested = Instant::now();
    let opened = control.open(&isnode_proto::CreateSession {
        object: args.name.clone(),
        port,
        start_codeword: args.start_codeword,
        start_at_s: args.start_at,
        no_start_burst: args.no_start_burst,
    })?;
    let info = match opened {
        crate::control::Opened::Session(info) => *info,
        crate::control::Opened::Broadcast(b) => {
            tracing::info!(broadcast = %b.id, "the server serves {} by broadcast", args.name);
            return Err(FollowBroadcast {
                info: b,
                asked: requested,
                rtt: requested.elapsed(),
            }
            .into());
        }
    };
    let skip = leading_skip_bytes(&info)?;
    if let (Some(offset), Some(by)) = (info.start_offset_bytes, info.seek_by) {
        tracing::info!(
            "starting at byte {offset} ({:.3} s, found by {by:?}), codeword {}",
            info.start_time_s.unwrap_or(0.0),
            info.start_codeword
        );
    }
    tracing::info!(
        session = %info.id, destination = %info.destination, receive = %local,
        accept_from = ?source, "session opened for {}", info.object.name
    );
    let via = keepalive_via(&info, &socket, &control);
    let loss = Arc::new(AtomicU32::new(NO_LOSS_MEASURED));
    let keepalive = Keepalive::start(
        via,
        info.id.clone(),
        Duration::from_millis(info.keepalive_interval_ms.clamp(50, 60_000)),
        info.loss_reports.then(|| loss.clone()),
    );
    let mut served = None;
    let result = SessionSetup::from_info(&info, source).and_then(|setup| {
        let out = match (out.take(), http.take()) {
            (Some(out), _) => out,
            (None, listener) => {
                let listener = listener.context("no output")?;
                let len = setup.output_len()?.saturating_sub(skip);
                let (server, out) = listener.serve(&setup.object, len, args.out.as_deref())?;
                served = Some(server);
                Box::new(out)
            }
        };
        run_session(
            args,
            &socket,
            &setup,
            skip_leading(out, skip),
            requested,
            &loss,
        )
    });
    let reported = keepalive.stop();
    if let Err(e) = control.delete_session(&info.id) {
        tracing::warn!("could not delete session {}: {e:#}", info.id);
    }
    let mut stats = result?;
    stats.loss_reports_sent = reported.sent;
    stats.reported_loss_rate = reported.last.map(LossReport::rate);
    stats.max_reported_loss_rate = reported.max.map(LossReport::rate);
    write_stats_json(args, &stats)?;
    if let Some(server) = served {
        server.linger(linger);
    }
    Ok(stats)
}

fn secs_arg(v: f64, what: &str) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(v).map_err(|_| anyhow::anyhow!("{what} must be >= 0, got {v}"))
}
/// Receive buffer asked for the session's socket (`SO_RCVBUFFORCE`, else `SO_RCVBUF`).
pub(crate) const RECV_BUFFER_BYTES: usize = 8 << 20;

/// The shared measured loss before any measurement (else [`LossReport::units`]).
pub(crate) const NO_LOSS_MEASURED: u32 = u32::MAX;

/// Receives a preset session on `socket` without any control traffic (tests, demos, a
/// sender started by other means). Honours every option of `args` but `server`,
/// `session_port`, `start_codeword` and `accept_from` (taken from `setup`), `port`, `bind`,
/// `http` (the stream goes to `--out` only) and the unicast repair (there is no server to
/// ask).
pub fn play_session(
    args: &PlayArgs,
    socket: &UdpSocket,
    setup: &SessionSetup,
) -> anyhow::Result<PlayStats> {
    let out = open_output(args.out.as_deref())?;
    let loss = AtomicU32::new(NO_LOSS_MEASURED);
    let stats = run_session(args, socket, setup, out, Instant::now(), &loss)?;
    write_stats_json(args, &stats)?;
    Ok(stats)
}

/// The sources a session takes datagrams from: `--accept-from`, by default the server's IP.
fn source_filter(
    accept_from: Option<AcceptFrom>,
    control: &ControlClient,
) -> anyhow::Result<SourceFilter> {
    Ok(match accept_from {
        Some(AcceptFrom::Any) => SourceFilter::Any,
        Some(AcceptFrom::Ip(ip)) => SourceFilter::ip(ip),
        None => SourceFilter::ip(control.server_addr()?.ip()),
    })
}

/// `out` without the first `skip` bytes written to it (a start at an access point inside
/// the first codeword).
fn skip_leading(out: Box<dyn Write + Send>, skip: u64) -> Box<dyn Write + Send> {
    match skip {
        0 => out,
        n => Box::new(SkipWriter {
            skip: n,
            inner: out,
        }),
    }
}

fn write_stats_json(args: &PlayArgs, stats: &PlayStats) -> anyhow::Result<()> {
    if let Some(path) = &args.stats_json {
        let json = serde_json::to_string_pretty(stats)?;
        std::fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

pub(crate) fn open_output(out: Option<&Path>) -> anyhow::Result<Box<dyn Write + Send>> {
    Ok(match out {
        None => Box::new(io::sink()),
        Some(p) if p.as_os_str() == "-" => {
            Box::new(BufWriter::with_capacity(1 << 16, io::stdout()))
        }
        Some(p) => Box::new(BufWriter::with_capacity(
            1 << 20,
            File::create(p).with_context(|| format!("creating {}", p.display()))?,
        )),
    })
}

/// Drops the first `skip` bytes written, passes the rest on: the bytes of the start
/// codeword before the random-access point `--start-at` starts at.
struct SkipWriter {
    skip: u64,
    inner: Box<dyn Write + Send>,
}

impl Write for SkipWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let dropped = usize::try_from(self.skip)
            .unwrap_or(usize::MAX)
            .min(buf.len());
        self.skip -= dropped as u64;
        if dropped == buf.len() {
            return Ok(dropped);
        }
        Ok(dropped + self.inner.write(&buf[dropped..])?)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// How keepalives go: a datagram from the stream's socket to the server's keepalive port
/// (also keeps a NAT mapping of the stream's path open), or an HTTP request when the
/// server has no keepalive port.
enum KeepaliveVia {
    Udp { socket: UdpSocket, to: SocketAddr },
    Http(Arc<ControlClient>),
}

/// UDP when the server offers a keepalive port and the socket can be shared, else HTTP.
fn keepalive_via(
    info: &isnode_proto::SessionInfo,
    socket: &UdpSocket,
    control: &Arc<ControlClient>,
) -> KeepaliveVia {
    let udp = info.keepalive_port.and_then(|port| {
        let server = control.server_addr().ok()?;
        let socket = socket.try_clone().ok()?;
        Some(KeepaliveVia::Udp {
            socket,
            to: SocketAddr::new(server.ip(), port),
        })
    });
    udp.unwrap_or_else(|| KeepaliveVia::Http(control.clone()))
}

impl KeepaliveVia {
    /// Sends one keepalive, with the loss report `loss` if any; false once the server said
    /// the session is gone (HTTP only: a datagram has no answer, the session's end shows in
    /// the stream).
    fn send(&self, id: &str, loss: Option<LossReport>) -> bool {
        use isnode_proto::keepalive::{keepalive_datagram, keepalive_datagram_with_loss};
        match self {
            KeepaliveVia::Udp { socket, to } => {
                let datagram = match loss {
                    Some(l) => keepalive_datagram_with_loss(id, l),
                    None => keepalive_datagram(id),
                };
                match datagram {
                    Some(d) => {
                        if let Err(e) = socket.send_to(&d, to) {
                            tracing::warn!("keepalive of session {id} to {to}: {e}");
                        }
                        true
                    }
                    None => {
                        tracing::warn!("session id {id:?} cannot be sent in a keepalive datagram");
                        false
                    }
                }
            }
            KeepaliveVia::Http(control) => {
                match control.keepalive_with_loss(id, loss.map(LossReport::rate)) {
                    Ok(true) => true,
                    Ok(false) => {
                        tracing::debug!("session {id} is gone: keepalives stop");
                        false
                    }
                    Err(e) => {
                        tracing::warn!("keepalive of session {id}: {e:#}");
                        true
                    }
                }
            }
        }
    }
}

/// The loss reports a keepalive thread sent.
#[derive(Clone, Copy, Debug, Default)]
struct Reported {
    /// Keepalives that carried a loss report.
    sent: u64,
    /// The last loss reported.
    last: Option<LossReport>,
    /// The highest loss reported.
    max: Option<LossReport>,
}

/// Sends keepalives from a thread until stopped.
struct Keepalive {
    stop: mpsc::Sender<()>,
    handle: std::thread::JoinHandle<Reported>,
}

impl Keepalive {
    /// Starts the thread; with `loss` (the server takes loss reports), every keepalive
    /// carries the measured loss once there is one.
    fn start(
        via: KeepaliveVia,
        id: String,
        interval: Duration,
        loss: Option<Arc<AtomicU32>>,
    ) -> Keepalive {
        let (stop, stopped) = mpsc::channel::<()>();
        let handle = std::thread::spawn(move || {
            let mut reported = Reported::default();
            while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(interval) {
                let report = loss.as_ref().and_then(|l| {
                    let units = u16::try_from(l.load(Ordering::Relaxed)).ok()?;
                    LossReport::from_units(units)
                });
                if let Some(r) = report {
                    reported.sent += 1;
                    reported.last = Some(r);
                    reported.max = reported.max.max(Some(r));
                }
                if !via.send(&id, report) {
                    break;
                }
            }
            reported
        });
        Keepalive { stop, handle }
    }

    fn stop(self) -> Reported {
        let _ = self.stop.send(());
        self.handle.join().unwrap_or_default()
    }
}
