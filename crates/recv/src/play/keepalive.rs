//! The keepalives of a session: sent from a thread ([`Keepalive`]) over UDP to the server's
//! keepalive port or over HTTP ([`KeepaliveVia`]), with the session's id and secret
//! ([`Owner`]) and, when the server takes them, the measured loss ([`Reported`]).

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use isnode_proto::keepalive::LossReport;

use crate::control::ControlClient;

/// How keepalives go: a datagram from the stream's socket to the server's keepalive port
/// (also keeps a NAT mapping of the stream's path open), or an HTTP request when the
/// server has no keepalive port.
pub(super) enum KeepaliveVia {
    Udp {
        socket: UdpSocket,
        to: SocketAddr,
        /// The counter of the last datagram sent (the first is 1).
        counter: AtomicU64,
    },
    Http(Arc<ControlClient>),
}

/// UDP when the server offers a keepalive port taking this client's datagram version and
/// the socket can be shared, else HTTP.
pub(super) fn keepalive_via(
    info: &isnode_proto::SessionInfo,
    socket: &UdpSocket,
    control: &Arc<ControlClient>,
) -> KeepaliveVia {
    let version = Some(isnode_proto::keepalive::KEEPALIVE_VERSION);
    let port = info
        .keepalive_port
        .filter(|_| info.keepalive_version == version);
    let udp = port.and_then(|port| {
        let server = control.server_addr().ok()?;
        let socket = socket.try_clone().ok()?;
        Some(KeepaliveVia::Udp {
            socket,
            to: SocketAddr::new(server.ip(), port),
            counter: AtomicU64::new(0),
        })
    });
    udp.unwrap_or_else(|| KeepaliveVia::Http(control.clone()))
}

/// A session's id and secret, as its keepalives carry them.
pub(super) struct Owner {
    id: String,
    secret: String,
    key: isnode_proto::auth::Key,
}

impl Owner {
    pub(super) fn of(info: &isnode_proto::SessionInfo) -> anyhow::Result<Owner> {
        let key = isnode_proto::auth::parse_key_hex(&info.secret).with_context(|| {
            format!(
                "the server's session secret {:?} is not 32 hexadecimal digits",
                info.secret
            )
        })?;
        Ok(Owner {
            id: info.id.clone(),
            secret: info.secret.clone(),
            key,
        })
    }
}

impl KeepaliveVia {
    /// Sends one keepalive, with the loss report `loss` if any; false once the server said
    /// the session is gone (HTTP only: a datagram has no answer, the session's end shows in
    /// the stream).
    fn send(&self, owner: &Owner, loss: Option<LossReport>) -> bool {
        use isnode_proto::keepalive::keepalive_datagram;
        let id = &owner.id;
        match self {
            KeepaliveVia::Udp {
                socket,
                to,
                counter,
            } => {
                let n = counter.fetch_add(1, Ordering::Relaxed) + 1;
                let datagram = keepalive_datagram(id, &owner.key, n, loss);
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
                match control.keepalive_with_loss(id, &owner.secret, loss.map(LossReport::rate)) {
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
pub(super) struct Reported {
    /// Keepalives that carried a loss report.
    pub(super) sent: u64,
    /// The last loss reported.
    pub(super) last: Option<LossReport>,
    /// The highest loss reported.
    pub(super) max: Option<LossReport>,
}

impl Reported {
    /// Adds the reports of a later keepalive thread (of a resumed session).
    pub(super) fn merge(&mut self, later: Reported) {
        self.sent += later.sent;
        self.last = later.last.or(self.last);
        self.max = match (self.max, later.max) {
            (Some(a), Some(b)) => Some(if b.rate() > a.rate() { b } else { a }),
            (a, b) => a.or(b),
        };
    }
}

/// Sends keepalives from a thread until stopped.
pub(super) struct Keepalive {
    stop: mpsc::Sender<()>,
    handle: std::thread::JoinHandle<Reported>,
}

impl Keepalive {
    /// Starts the thread; with `loss` (the server takes loss reports), every keepalive
    /// carries the measured loss once there is one.
    pub(super) fn start(
        via: KeepaliveVia,
        owner: Owner,
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
                if !via.send(&owner, report) {
                    break;
                }
            }
            reported
        });
        Keepalive { stop, handle }
    }

    /// Stops the thread and returns the loss reports it sent.
    pub(super) fn stop(self) -> Reported {
        let _ = self.stop.send(());
        self.handle.join().unwrap_or_default()
    }
}
