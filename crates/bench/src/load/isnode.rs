//! isnode under load: the volume of the titles, `isnode serve` with an engine, and sessions
//! created, kept alive and ended through its HTTP control API.

use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use isnode_store::{IngestOptions, Volume, VolumeParams};

use super::net::Net;
use super::receivers::{set_udp_gro, Conn};
use super::title::Title;
use crate::common::{with_session_secret, ServerChild};
use crate::udp::{server_ip, set_int_option};

/// Receive buffer asked for each session's socket.
const RCVBUF_BYTES: usize = 2 << 20;

/// Ingests every title into a new volume at `dir`.
pub(crate) fn make_volume(
    dir: &Path,
    titles: &[Title],
    block_len: Option<u32>,
) -> anyhow::Result<()> {
    let mut params = VolumeParams::default();
    if let Some(b) = block_len {
        params.block_len = b;
    }
    let mut vol = Volume::create(dir, params, None)
        .with_context(|| format!("a volume of {}-byte blocks", params.block_len))?;
    for t in titles {
        let opts = IngestOptions {
            name: t.name.clone(),
            bitrate_bps: t.bitrate_bps,
            content_type: "video/mp2t".into(),
            replace: false,
        };
        isnode_store::ingest(
            &mut vol,
            &opts,
            &mut t.bytes.as_slice(),
            t.bytes.len() as u64,
            &mut |_| {},
        )
        .with_context(|| format!("ingesting {}", t.name))?;
    }
    Ok(())
}

/// A running `isnode serve` and the sessions it streams.
pub(crate) struct IsnodeServer {
    /// The server process.
    pub(crate) child: ServerChild,
    base: String,
    /// The clients' address (sessions' sockets are bound there).
    client_host: String,
    live: Arc<Mutex<Vec<Live>>>,
    /// The keepalive period the server asked for (ms; 0 until the first session).
    keepalive_ms: Arc<AtomicU64>,
    /// One agent for every request: persistent connections, as a player keeps its own.
    agent: ureq::Agent,
    stop: Arc<AtomicBool>,
    /// Started by the first session, from the clients' thread (so in their namespace).
    keeper: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// The server's counters that a level's figures need, from `GET /metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counters {
    /// Block lookups served from the pool.
    pub(crate) cache_hits: u64,
    /// Block lookups that read from disk.
    pub(crate) cache_misses: u64,
    /// Bytes read from the members into the pool.
    pub(crate) cache_read_bytes: u64,
}

impl Counters {
    /// From the Prometheus text of `/metrics`; None if a counter is missing.
    pub(crate) fn parse(text: &str) -> Option<Counters> {
        Some(Counters {
            cache_hits: metric(text, "isnode_cache_hits_total")?,
            cache_misses: metric(text, "isnode_cache_misses_total")?,
            cache_read_bytes: metric(text, "isnode_cache_read_bytes_total")?,
        })
    }

    /// What was counted since `before`.
    pub(crate) fn since(&self, before: &Counters) -> Counters {
        Counters {
            cache_hits: self.cache_hits.saturating_sub(before.cache_hits),
            cache_misses: self.cache_misses.saturating_sub(before.cache_misses),
            cache_read_bytes: self
                .cache_read_bytes
                .saturating_sub(before.cache_read_bytes),
        }
    }
}

/// The sum of the samples of metric `name` (every label set) in Prometheus text.
pub(crate) fn metric(text: &str, name: &str) -> Option<u64> {
    let mut found = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let value = match rest.strip_prefix('{') {
            Some(labelled) => labelled.split_once('}').map(|(_, v)| v),
            None => rest.starts_with(' ').then_some(rest),
        };
        if let Some(v) = value.and_then(|v| v.trim().parse::<u64>().ok()) {
            found = Some(found.unwrap_or(0u64).saturating_add(v));
        }
    }
    found
}

/// A session just created.
pub(crate) struct Opened {
    /// Its id, to end it.
    pub(crate) id: String,
    /// Its socket, for the receivers.
    pub(crate) conn: Conn,
    /// UDP payload bits per second the server sends it.
    pub(crate) send_rate_bps: u64,
    /// Bytes of one packet.
    pub(crate) packet_bytes: usize,
}

impl IsnodeServer {
    /// Starts `isnode serve` on the volume with `engine` and `extra` arguments (inside
    /// `group` when there is one).
    pub(crate) fn start(
        vol_dir: &Path,
        exe: &Path,
        engine: &str,
        cache_size_bytes: u64,
        extra: &[&str],
        net: &Net,
        group: Option<&crate::cgroup::Cgroup>,
    ) -> anyhow::Result<IsnodeServer> {
        let (child, base) = crate::serve::start_server_in(
            vol_dir,
            net.server_host(),
            engine,
            exe,
            cache_size_bytes,
            extra,
            group,
        )?;
        Ok(IsnodeServer {
            child,
            base,
            client_host: net.client_host().to_string(),
            live: Arc::new(Mutex::new(Vec::new())),
            keepalive_ms: Arc::new(AtomicU64::new(0)),
            agent: ureq::Agent::new_with_defaults(),
            stop: Arc::new(AtomicBool::new(false)),
            keeper: Mutex::new(None),
        })
    }

    /// Starts the keepalive thread if it is not running (from the calling thread).
    fn start_keeper(&self) {
        let Ok(mut keeper) = self.keeper.lock() else {
            return;
        };
        if keeper.is_some() {
            return;
        }
        let (a, l, s, b, k) = (
            self.agent.clone(),
            self.live.clone(),
            self.stop.clone(),
            self.base.clone(),
            self.keepalive_ms.clone(),
        );
        *keeper = Some(std::thread::spawn(move || keep_alive(&a, &b, &l, &k, &s)));
    }

    /// The server's counters now.
    pub(crate) fn counters(&self) -> anyhow::Result<Counters> {
        let mut resp = (self.agent)
            .get(format!("{}/metrics", self.base))
            .call()
            .context("GET /metrics")?;
        let text = resp.body_mut().read_to_string()?;
        Counters::parse(&text).context("cache counters in /metrics")
    }

    /// Creates a session of `title` to a new socket.
    pub(crate) fn open(&self, title: &str) -> anyhow::Result<Opened> {
        self.start_keeper();
        let socket = UdpSocket::bind((self.client_host.as_str(), 0))?;
        set_udp_gro(&socket).context("setting UDP_GRO")?;
        set_rcvbuf(&socket);
        let port = socket.local_addr()?.port();
        let body = serde_json::json!({ "object": title, "port": port });
        let mut resp = (self.agent)
            .post(format!("{}/v1/sessions", self.base))
            .send_json(&body)
            .context("creating a session")?;
        let v: serde_json::Value = resp.body_mut().read_json()?;
        let id = v["id"].as_str().context("session id")?.to_string();
        // A binary from before owned sessions (`ENGINE@PATH` in a before/after run) gives no
        // secret and streams at once: nothing to validate, and version 1 keepalives.
        // One from before keepalive MACs announces no `keepalive_version`: version 3
        // datagrams (the secret in clear).
        let secret = v["secret"].as_str().unwrap_or_default().to_string();
        let key = match v["secret"].as_str() {
            Some(secret) => {
                self.validate(&socket, &id, secret)?;
                Some(isnode_proto::auth::parse_key_hex(secret).context("session secret")?)
            }
            None => None,
        };
        let datagrams = match (key, v["keepalive_version"].as_u64()) {
            (Some(key), Some(_)) => Datagrams::Mac {
                key,
                counter: AtomicU64::new(0),
            },
            (Some(key), None) => Datagrams::Secret(key),
            (None, _) => Datagrams::Legacy,
        };
        socket.set_nonblocking(true)?;
        let toi = v["object"]["toi"].as_u64().context("object toi")? as u32;
        let symbol = v["object"]["symbol_size"].as_u64().context("symbol size")? as usize;
        let send_rate_bps = v["send_rate_bps"].as_u64().context("send rate")?;
        let keepalive_ms = v["keepalive_interval_ms"]
            .as_u64()
            .context("keepalive interval")?;
        self.keepalive_ms.store(keepalive_ms, Ordering::Relaxed);
        let keepalive = match v["keepalive_port"].as_u64() {
            Some(port) => Keepalive::Udp {
                socket: socket.try_clone().context("sharing the session socket")?,
                to: SocketAddr::new(server_ip(&self.base)?, port as u16),
            },
            None => Keepalive::Http,
        };
        if let Ok(mut l) = self.live.lock() {
            l.push(Live {
                id: id.clone(),
                secret,
                datagrams,
                keepalive,
            });
        }
        Ok(Opened {
            id,
            conn: Conn::Udp {
                socket,
                toi,
                last: None,
            },
            send_rate_bps,
            packet_bytes: symbol + isnode_wire::DATA_HEADER_LEN,
        })
    }

    /// Return routability, as `isnode play` does it: the token datagram the server sends
    /// to the session's socket, echoed over HTTP; the stream starts then.
    fn validate(&self, socket: &UdpSocket, id: &str, secret: &str) -> anyhow::Result<()> {
        let server = server_ip(&self.base)?;
        let token = isnode_recv::validate::await_token(socket, Duration::from_secs(5), |from| {
            from.ip().to_canonical() == server.to_canonical()
        })?;
        let body = isnode_proto::auth::ValidateSession {
            token: isnode_proto::auth::key_hex(&token),
        };
        let req = (self.agent).post(format!("{}/v1/sessions/{id}/validate", self.base));
        let resp = with_session_secret(req, secret)
            .send_json(&body)
            .context("validating a session")?;
        anyhow::ensure!(
            resp.status().as_u16() == 204,
            "validating session {id}: the server answered {}",
            resp.status()
        );
        Ok(())
    }

    /// Ends a session.
    pub(crate) fn close(&self, id: &str) {
        let mut secret = None;
        if let Ok(mut l) = self.live.lock() {
            secret = l.iter().find(|x| x.id == id).map(|x| x.secret.clone());
            l.retain(|x| x.id != id);
        }
        let req = (self.agent).delete(format!("{}/v1/sessions/{id}", self.base));
        let _ = with_session_secret(req, &secret.unwrap_or_default()).call();
    }
}

impl Drop for IsnodeServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(k) = self.keeper.get_mut().ok().and_then(Option::take) {
            let _ = k.join();
        }
    }
}

fn set_rcvbuf(socket: &UdpSocket) {
    let v = libc::c_int::try_from(RCVBUF_BYTES).unwrap_or(libc::c_int::MAX);
    set_int_option(socket, libc::SOL_SOCKET, libc::SO_RCVBUF, v);
}

/// A live session, as its keepalives need it.
struct Live {
    id: String,
    /// Its secret (empty from a server older than owned sessions, which ignores it).
    secret: String,
    /// The keepalive datagrams the server takes.
    datagrams: Datagrams,
    keepalive: Keepalive,
}

/// Which keepalive datagrams a session's server takes.
enum Datagrams {
    /// Version 4 (today's): the MAC of the secret over the id and the next counter.
    Mac {
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

/// How a session's keepalives go, as `isnode play` sends them.
enum Keepalive {
    /// A datagram from the session's socket to the server's keepalive port.
    Udp { socket: UdpSocket, to: SocketAddr },
    /// `POST /v1/sessions/{id}/keepalive` (a server without keepalive port).
    Http,
}

fn send_keepalive(agent: &ureq::Agent, base: &str, s: &Live) {
    match &s.keepalive {
        Keepalive::Udp { socket, to } => {
            if let Some(d) = s.datagrams.next(&s.id) {
                let _ = socket.send_to(&d, to);
            }
        }
        Keepalive::Http => {
            let req = agent.post(format!("{base}/v1/sessions/{}/keepalive", s.id));
            let _ = with_session_secret(req, &s.secret).send_empty();
        }
    }
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

/// Sends a keepalive for every live session once per the server's keepalive period (as
/// `isnode play` does: a datagram to the keepalive port, else an HTTP request over the
/// agent's persistent connection), until `stop`.
fn keep_alive(
    agent: &ureq::Agent,
    base: &str,
    live: &Mutex<Vec<Live>>,
    period_ms: &AtomicU64,
    stop: &AtomicBool,
) {
    while !stop.load(Ordering::Relaxed) {
        let started = std::time::Instant::now();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_from_prometheus_text() {
        let text = "# HELP isnode_cache_hits_total Block lookups.\n\
                    # TYPE isnode_cache_hits_total counter\n\
                    isnode_cache_hits_total 90\n\
                    isnode_cache_misses_total 10\n\
                    isnode_cache_read_bytes_total 4096\n\
                    isnode_cache_read_bytes_total_x 7\n\
                    isnode_bytes_sent_total{engine=\"gso\"} 5\n\
                    isnode_bytes_sent_total{engine=\"sendfile\"} 6\n";
        let c = Counters::parse(text);
        let want = Counters {
            cache_hits: 90,
            cache_misses: 10,
            cache_read_bytes: 4096,
        };
        assert_eq!(c, Some(want));
        assert_eq!(metric(text, "isnode_bytes_sent_total"), Some(11));
        assert_eq!(Counters::parse("isnode_cache_hits_total 1\n"), None);
        let later = Counters {
            cache_hits: 100,
            ..want
        };
        assert_eq!(later.since(&want).cache_hits, 10);
        assert_eq!(later.since(&want).cache_read_bytes, 0);
    }
}
