//! isnode under load: the volume of the titles, `isnode serve` with an engine, and sessions
//! created, kept alive and ended through its HTTP control API.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use isnode_store::{IngestOptions, Volume, VolumeParams};

use super::receivers::{set_udp_gro, Conn};
use super::Title;
use crate::common::ServerChild;

/// Receive buffer asked for each session's socket.
const RCVBUF_BYTES: usize = 2 << 20;

/// Ingests every title into a new volume at `dir`.
pub(crate) fn make_volume(dir: &Path, titles: &[Title]) -> anyhow::Result<()> {
    let mut vol = Volume::create(dir, VolumeParams::default(), None)?;
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
    live: Arc<Mutex<Vec<Live>>>,
    /// The keepalive period the server asked for (ms; 0 until the first session).
    keepalive_ms: Arc<AtomicU64>,
    /// One agent for every request: persistent connections, as a player keeps its own.
    agent: ureq::Agent,
    stop: Arc<AtomicBool>,
    keeper: Option<std::thread::JoinHandle<()>>,
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
    /// Starts `isnode serve` on the volume with `engine`.
    pub(crate) fn start(
        vol_dir: &Path,
        exe: &Path,
        engine: &str,
        cache_size_bytes: u64,
    ) -> anyhow::Result<IsnodeServer> {
        let (child, base) =
            crate::serve::start_server(vol_dir, "127.0.0.1", engine, exe, cache_size_bytes)?;
        let live = Arc::new(Mutex::new(Vec::<Live>::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let keepalive_ms = Arc::new(AtomicU64::new(0));
        let agent = ureq::Agent::new_with_defaults();
        let keeper = {
            let (a, l, s, b, k) = (
                agent.clone(),
                live.clone(),
                stop.clone(),
                base.clone(),
                keepalive_ms.clone(),
            );
            std::thread::spawn(move || keep_alive(&a, &b, &l, &k, &s))
        };
        Ok(IsnodeServer {
            child,
            base,
            live,
            keepalive_ms,
            agent,
            stop,
            keeper: Some(keeper),
        })
    }

    /// Creates a session of `title` to a new socket.
    pub(crate) fn open(&self, title: &str) -> anyhow::Result<Opened> {
        let socket = UdpSocket::bind("127.0.0.1:0")?;
        socket.set_nonblocking(true)?;
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

    /// Ends a session.
    pub(crate) fn close(&self, id: &str) {
        if let Ok(mut l) = self.live.lock() {
            l.retain(|x| x.id != id);
        }
        let _ = (self.agent)
            .delete(format!("{}/v1/sessions/{id}", self.base))
            .call();
    }
}

impl Drop for IsnodeServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(k) = self.keeper.take() {
            let _ = k.join();
        }
    }
}

fn set_rcvbuf(socket: &UdpSocket) {
    use std::os::fd::AsRawFd;
    let v = RCVBUF_BYTES as libc::c_int;
    // SAFETY: setsockopt reads one c_int from a valid pointer for the given length.
    #[allow(unsafe_code)]
    unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}

/// A live session, as its keepalives need it.
struct Live {
    id: String,
    keepalive: Keepalive,
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
            if let Some(d) = isnode_proto::keepalive::keepalive_datagram(&s.id) {
                let _ = socket.send_to(&d, to);
            }
        }
        Keepalive::Http => {
            let _ = agent
                .post(format!("{base}/v1/sessions/{}/keepalive", s.id))
                .send_empty();
        }
    }
}

/// The IP of a control API's base URL (`http://IP:PORT`).
fn server_ip(base: &str) -> anyhow::Result<IpAddr> {
    let host = base
        .trim_start_matches("http://")
        .rsplit_once(':')
        .map_or(base, |(h, _)| h);
    host.trim_matches(|c| c == '[' || c == ']')
        .parse()
        .with_context(|| format!("the server address of {base}"))
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
