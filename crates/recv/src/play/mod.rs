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
//! then is reported unrecoverable and written as zeros.
//!
//! Inside: `args` (the command line, [`PlayArgs`]), `session` (the session as received,
//! [`SessionSetup`], and the receive loop), `stats` (what is reported, [`PlayStats`]).

mod args;
mod session;
mod stats;

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::path::Path;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::control::ControlClient;
use crate::impair::Impairer;

pub use args::{AcceptFrom, PlayArgs};
pub use session::{SessionSetup, SourceFilter};
pub use stats::{EndReason, LostRange, PlayStats};

use session::run_session;

/// Plays `args.name` from `args.server`: binds the receive socket (`--bind`, `--port`) and
/// runs [`play_on`]. Writes `--stats-json` if asked; the caller prints [`PlayStats::summary`].
pub fn play(args: &PlayArgs) -> anyhow::Result<PlayStats> {
    let control = ControlClient::new(&args.server, Duration::from_secs(10));
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
    let out = open_output(args.out.as_deref())?;
    let local = socket.local_addr()?;
    let port = args.session_port.unwrap_or(local.port());
    let control = Arc::new(ControlClient::new(&args.server, Duration::from_secs(10)));
    let source = source_filter(args.accept_from, &control)?;
    let requested = Instant::now();
    let info = control.create_session(&args.name, port, args.start_codeword)?;
    tracing::info!(
        session = %info.id, destination = %info.destination, receive = %local,
        accept_from = ?source, "session opened for {}", info.object.name
    );
    let via = keepalive_via(&info, &socket, &control);
    let keepalive = Keepalive::start(
        via,
        info.id.clone(),
        Duration::from_millis(info.keepalive_interval_ms.clamp(50, 60_000)),
    );
    let result = SessionSetup::from_info(&info, source)
        .and_then(|setup| run_session(args, &socket, &setup, out, requested));
    keepalive.stop();
    if let Err(e) = control.delete_session(&info.id) {
        tracing::warn!("could not delete session {}: {e:#}", info.id);
    }
    let stats = result?;
    write_stats_json(args, &stats)?;
    Ok(stats)
}

/// Receives a preset session on `socket` without any control traffic (tests, demos, a
/// sender started by other means). Honours every option of `args` but `server`,
/// `session_port`, `start_codeword` and `accept_from` (taken from `setup`), `port` and `bind`.
pub fn play_session(
    args: &PlayArgs,
    socket: &UdpSocket,
    setup: &SessionSetup,
) -> anyhow::Result<PlayStats> {
    let out = open_output(args.out.as_deref())?;
    let stats = run_session(args, socket, setup, out, Instant::now())?;
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

fn write_stats_json(args: &PlayArgs, stats: &PlayStats) -> anyhow::Result<()> {
    if let Some(path) = &args.stats_json {
        let json = serde_json::to_string_pretty(stats)?;
        std::fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn open_output(out: Option<&Path>) -> anyhow::Result<Box<dyn Write + Send>> {
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
    /// Sends one keepalive; false once the server said the session is gone (HTTP only:
    /// a datagram has no answer, the session's end shows in the stream).
    fn send(&self, id: &str) -> bool {
        match self {
            KeepaliveVia::Udp { socket, to } => {
                match isnode_proto::keepalive::keepalive_datagram(id) {
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
            KeepaliveVia::Http(control) => match control.keepalive(id) {
                Ok(true) => true,
                Ok(false) => {
                    tracing::debug!("session {id} is gone: keepalives stop");
                    false
                }
                Err(e) => {
                    tracing::warn!("keepalive of session {id}: {e:#}");
                    true
                }
            },
        }
    }
}

/// Sends keepalives from a thread until stopped.
struct Keepalive {
    stop: mpsc::Sender<()>,
    handle: std::thread::JoinHandle<()>,
}

impl Keepalive {
    fn start(via: KeepaliveVia, id: String, interval: Duration) -> Keepalive {
        let (stop, stopped) = mpsc::channel::<()>();
        let handle = std::thread::spawn(move || {
            while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(interval) {
                if !via.send(&id) {
                    return;
                }
            }
        });
        Keepalive { stop, handle }
    }

    fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.handle.join();
    }
}
