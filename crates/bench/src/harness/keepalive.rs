//! Keepalives of a benchmark's sessions, sent as `isnode play` sends them: a datagram to
//! the server's keepalive port, else an HTTP request.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::secret::with_session_secret;

/// A live session, as its keepalives need it.
pub(crate) struct Live {
    /// Its id.
    pub(crate) id: String,
    /// Its secret (empty from a server older than owned sessions, which ignores it).
    pub(crate) secret: String,
    /// The keepalive datagrams the server takes.
    pub(crate) datagrams: Datagrams,
    /// How they go.
    pub(crate) route: Route,
}

/// Which keepalive datagrams a session's server takes.
pub(crate) enum Datagrams {
    /// Version 4 (today's): the MAC of the secret over the id and the next counter.
    Mac {
        /// The session's key (its secret).
        key: isnode_proto::auth::Key,
        /// The last counter sent.
        counter: AtomicU64,
    },
    /// Version 3, from a binary before keepalive MACs: the secret in clear.
    Secret(isnode_proto::auth::Key),
    /// Version 1, from a binary before owned sessions: the id alone.
    Legacy,
}

impl Datagrams {
    /// Version 4 datagrams of the session whose secret is `key`, counting from 1.
    pub(crate) fn mac(key: isnode_proto::auth::Key) -> Datagrams {
        Datagrams::Mac {
            key,
            counter: AtomicU64::new(0),
        }
    }

    /// The next keepalive datagram of session `id`.
    fn next(&self, id: &str) -> Option<Vec<u8>> {
        match self {
            Datagrams::Mac { key, counter } => {
                let n = counter.fetch_add(1, Ordering::Relaxed) + 1;
                isnode_proto::keepalive::keepalive_datagram(id, key, n, None).map(|d| d.to_vec())
            }
            Datagrams::Secret(key) => Some(secret_keepalive_datagram(id, key)),
            Datagrams::Legacy => Some(legacy_keepalive_datagram(id)),
        }
    }
}

/// How a session's keepalives go.
pub(crate) enum Route {
    /// A datagram from `socket` (the clients' address: the server checks the source IP,
    /// not the port) to the server's keepalive port `to`.
    Udp {
        /// The socket it is sent from (one per session, or one for all).
        socket: Arc<UdpSocket>,
        /// The server's keepalive address.
        to: SocketAddr,
    },
    /// `POST /v1/sessions/{id}/keepalive` (a server without keepalive port).
    Http,
}

/// The version 3 keepalive datagram (40 bytes: `ISKA`, 3, zero, `FF FF` for no loss
/// report, the id, the secret) that servers from before keepalive MACs take; today's
/// refuse it (`isnode_proto::keepalive`).
fn secret_keepalive_datagram(id: &str, key: &isnode_proto::auth::Key) -> Vec<u8> {
    let mut d = b"ISKA\x03\0\xff\xff".to_vec();
    d.extend_from_slice(id.as_bytes());
    d.extend_from_slice(key);
    d
}

/// The version 1 keepalive datagram (24 bytes: `ISKA`, 1, three zeros, the id) that
/// servers from before owned sessions take; today's refuse it (`isnode_proto::keepalive`).
fn legacy_keepalive_datagram(id: &str) -> Vec<u8> {
    let mut d = b"ISKA\x01\0\0\0".to_vec();
    d.extend_from_slice(id.as_bytes());
    d
}

fn send_keepalive(agent: &ureq::Agent, base: &str, s: &Live) {
    match &s.route {
        Route::Udp { socket, to } => {
            if let Some(d) = s.datagrams.next(&s.id) {
                let _ = socket.send_to(&d, to);
            }
        }
        Route::Http => {
            let req = agent.post(format!("{base}/v1/sessions/{}/keepalive", s.id));
            let _ = with_session_secret(req, &s.secret).send_empty();
        }
    }
}

/// Sends a keepalive for every live session once per `period_ms` (HTTP ones over the
/// agent's persistent connection), until `stop`.
pub(crate) fn keep_alive(
    agent: &ureq::Agent,
    base: &str,
    live: &Mutex<Vec<Live>>,
    period_ms: &AtomicU64,
    stop: &AtomicBool,
) {
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        if let Ok(l) = live.lock() {
            for s in l.iter() {
                send_keepalive(agent, base, s);
            }
        }
        // Until the first session says the period, look again soon.
        let period = Duration::from_millis(period_ms.load(Ordering::Relaxed).clamp(50, 60_000));
        let mut left = period.saturating_sub(started.elapsed());
        while !left.is_zero() && !stop.load(Ordering::Relaxed) {
            let nap = left.min(Duration::from_millis(50));
            std::thread::sleep(nap);
            left -= nap;
        }
    }
}
