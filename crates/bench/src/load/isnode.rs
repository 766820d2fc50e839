//! isnode under load: the volume of the titles, `isnode serve` with an engine, and sessions
//! created, kept alive and ended through its HTTP control API.

use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use isnode_store::{IngestOptions, Volume, VolumeParams};

use super::net::Net;
use super::receivers::{set_udp_gro, Conn, Hls};
use super::title::Title;
use super::tls::{TlsPair, Wire};
use crate::cgroup::Cgroup;
use crate::harness::keepalive::{Datagrams, Live, Route};
use crate::harness::metrics::{self, metric};
use crate::harness::server::{self, ServerChild, ServerSpec};
use crate::harness::session::Sessions;
use crate::udp::server_ip;

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

/// Ingests every title encrypted (HLS AES-128 under a random key, the volume's node key
/// made, as `ingest --encrypt` does) into a new volume at `dir`; the titles as stored (their
/// ciphertext, what a client of this volume must receive).
pub(crate) fn make_encrypted_volume(
    dir: &Path,
    titles: &[Title],
    block_len: Option<u32>,
) -> anyhow::Result<Vec<Title>> {
    make_volume(dir, &[], block_len)?;
    let mut vol = Volume::open(dir).context("opening the new volume")?;
    let (node_key, _) =
        isnode_keys::node_key::NodeKey::load_or_create(&dir.join(isnode_keys::NODE_KEY_FILE))?;
    let mut out = Vec::with_capacity(titles.len());
    for t in titles {
        let mut file = tempfile::tempfile_in(vol.tmp_dir()).context("a spool for the title")?;
        std::io::Write::write_all(&mut file, &t.bytes).context("writing the spool")?;
        let hints = isnode_protect::Hints {
            bitrate_bps: Some(t.bitrate_bps),
            content_type: Some("video/mp2t".into()),
        };
        let enc = isnode_protect::encrypt_file(
            &vol.tmp_dir(),
            (&file, t.bytes.len() as u64),
            &hints,
            &node_key,
            isnode_protect::Keys::Random,
            &t.name,
        )?;
        let bitrate_bps = enc.bitrate_bps;
        let rec = isnode_protect::store(
            &mut vol,
            &t.name,
            isnode_protect::Existing::Refuse,
            enc,
            &mut |_| {},
        )?;
        let mut reader =
            isnode_store::ObjectReader::for_record(&vol, rec, isnode_store::ReadOrder::Sequential)?;
        let mut bytes = Vec::new();
        reader
            .copy_to(&mut bytes, &mut |_| {})
            .with_context(|| format!("reading {} back", t.name))?;
        out.push(Title {
            name: t.name.clone(),
            bitrate_bps,
            bytes: Arc::new(bytes),
        });
    }
    Ok(out)
}

/// A running `isnode serve` and the sessions it streams.
pub(crate) struct IsnodeServer {
    /// Its sessions (their keepalives stop before the server does).
    sessions: Sessions,
    /// The server process.
    pub(crate) child: ServerChild,
    /// The clients' address (sessions' sockets are bound there).
    client_host: String,
    /// The readers' TLS configuration when the server speaks HTTPS.
    tls: Option<Arc<rustls::ClientConfig>>,
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
    /// `group` when there is one; over HTTPS with `tls`).
    pub(crate) fn start(
        vol_dir: &Path,
        exe: &Path,
        (engine, cache_size_bytes): (&str, u64),
        extra: &[&str],
        net: &Net,
        group: Option<&Cgroup>,
        tls: Option<&TlsPair>,
    ) -> anyhow::Result<IsnodeServer> {
        let spec = ServerSpec {
            extra,
            group,
            tls: tls.map(|t| (t.cert.as_path(), t.key.as_path())),
            ..ServerSpec::new(exe, vol_dir, net.server_host(), engine, cache_size_bytes)
        };
        let (child, base) = server::start(&spec)?;
        let agent = server::agent(tls.map(|t| t.cert.as_path()))?;
        Ok(IsnodeServer {
            // Until the first session says the period, look again soon.
            sessions: Sessions::with_agent(agent, &base, Duration::ZERO),
            child,
            client_host: net.client_host().to_string(),
            tls: tls.map(|t| t.client.clone()),
        })
    }

    /// A reader's connection to the server's API (TLS when it speaks HTTPS), `request`
    /// sent; non-blocking.
    fn connect(&self, request: &str) -> anyhow::Result<Wire> {
        let base = self.sessions.base();
        let hostport = base
            .strip_prefix("https://")
            .or_else(|| base.strip_prefix("http://"))
            .unwrap_or(base);
        let addr: SocketAddr = hostport
            .parse()
            .with_context(|| format!("the server's address {hostport:?}"))?;
        let host = addr.ip().to_string();
        Wire::connect(addr, &host, self.tls.as_ref(), request.as_bytes())
            .context("connecting to isnode")
    }

    /// The server's counters now.
    pub(crate) fn counters(&self) -> anyhow::Result<Counters> {
        let text = metrics::fetch(self.sessions.agent(), self.sessions.base())?;
        Counters::parse(&text).context("cache counters in /metrics")
    }

    /// Creates a session of `title` to a new socket.
    pub(crate) fn open(&self, title: &str) -> anyhow::Result<Opened> {
        self.sessions.start_keeper();
        let socket = UdpSocket::bind((self.client_host.as_str(), 0))?;
        set_udp_gro(&socket).context("setting UDP_GRO")?;
        set_rcvbuf(&socket);
        let port = socket.local_addr()?.port();
        let (v, id) = self.sessions.create(title, port)?;
        // A binary from before owned sessions (`ENGINE@PATH` in a before/after run) gives no
        // secret and streams at once: nothing to validate, and version 1 keepalives.
        // One from before keepalive MACs announces no `keepalive_version`: version 3
        // datagrams (the secret in clear).
        let secret = v["secret"].as_str().unwrap_or_default().to_string();
        let key = match v["secret"].as_str() {
            Some(secret) => {
                self.sessions.validate(&socket, &id, secret)?;
                Some(isnode_proto::auth::parse_key_hex(secret).context("session secret")?)
            }
            None => None,
        };
        let datagrams = match (key, v["keepalive_version"].as_u64()) {
            (Some(key), Some(_)) => Datagrams::mac(key),
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
        self.sessions.set_period(keepalive_ms);
        let route = match v["keepalive_port"].as_u64() {
            Some(port) => Route::Udp {
                socket: Arc::new(socket.try_clone().context("sharing the session socket")?),
                to: SocketAddr::new(server_ip(self.sessions.base())?, port as u16),
            },
            None => Route::Http,
        };
        self.sessions.keep(Live {
            id: id.clone(),
            secret,
            datagrams,
            route,
        });
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

    /// Connects to the server's HTTP API and asks for `name`'s bytes as a player does
    /// (`GET /o/NAME`); the stream is non-blocking.
    pub(crate) fn get(&self, name: &str) -> anyhow::Result<Wire> {
        self.connect(&format!(
            "GET /o/{name} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
        ))
    }

    /// An HLS player of `name`: its playlist fetched and read, a connection kept alive
    /// for its segments, the first asked for; the stream is non-blocking.
    pub(crate) fn hls(&self, name: &str) -> anyhow::Result<(Wire, Hls)> {
        let url = format!("{}/v1/objects/{name}/index.m3u8", self.sessions.base());
        let text = self
            .sessions
            .agent()
            .get(&url)
            .call()
            .context("fetching the playlist")?
            .body_mut()
            .read_to_string()
            .context("reading the playlist")?;
        let (uri, segments) = Hls::parse_playlist(&text).map_err(anyhow::Error::msg)?;
        let left = segments.first().map_or(0, |s| s.1);
        let hls = Hls {
            target: format!("/v1/objects/{name}/{uri}"),
            segments,
            current: 0,
            left,
        };
        let s = self.connect(&hls.request())?;
        Ok((s, hls))
    }

    /// Ends a session.
    pub(crate) fn close(&self, id: &str) {
        self.sessions.end(id);
    }
}

fn set_rcvbuf(socket: &UdpSocket) {
    let _ = isnode_sys::net::set_receive_buffer(socket, RCVBUF_BYTES);
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
