//! Health probes of the cluster's peers: every `probe_interval_ms`, a `GET /v1/health` of
//! each peer (HTTP/1.1, one connection each, `Connection: close`; over TLS to a peer named
//! `https://`, trusting `cluster_ca_file` or the public roots: [`super::tls`]) that must
//! answer `200` within `probe_timeout_ms`; the outcomes (and the load the answer reports) go
//! to the sans-IO core, which marks a peer
//! dead after `probe_failures_to_dead` failures in a row and live at its first answer. The
//! peers and the settings (the CA file too) are read again each round (a reload applies at
//! the next one; without peers the loop sleeps until a reload).

use std::sync::Arc;
use std::time::Duration;

use isnode_edge::cluster::Probe;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use isnode_serve_config::ConfigCell;
use isnode_sys::event::IDLE_WAIT;

use super::ClusterState;

/// The probed route (public, cheap: docs/protocol.md).
pub const HEALTH_PATH: &str = "/v1/health";
/// Most bytes of a probe's answer read (its status line is all that counts).
const MAX_ANSWER_BYTES: usize = 1024;

/// What the prober holds.
pub struct Prober {
    /// The configuration in force (the probe settings are read each round).
    pub config: ConfigCell,
    /// The peers and their health.
    pub cluster: Arc<ClusterState>,
    /// Told by a reload: the prober, asleep without peers, looks at the node list again.
    pub reloaded: Arc<tokio::sync::Notify>,
}

/// Probes the peers until aborted (no peers without a node list: nothing asked then).
pub async fn run(p: Prober) {
    let cluster = &p.cluster;
    // The last TLS settings error, logged once until it changes or goes away.
    let mut tls_error: Option<String> = None;
    loop {
        let every = Duration::from_millis(p.config.load().probe_interval_ms.max(1));
        if cluster.peers().is_empty() {
            // Nothing to probe until a reload brings peers (it wakes this at once).
            let reloaded = p.reloaded.notified();
            let _ = tokio::time::timeout(IDLE_WAIT, reloaded).await;
            continue;
        }
        tokio::time::sleep(every).await;
        let config = p.config.load();
        let timeout = Duration::from_millis(config.probe_timeout_ms.max(1));
        let peers = cluster.peers();
        let tls = match peers.iter().any(|(_, u)| u.starts_with("https://")) {
            true => tls_settings(config.cluster_ca_file.as_deref(), &mut tls_error),
            false => None,
        };
        let probes = peers.into_iter().map(|(i, url)| {
            let tls = tls.clone();
            async move {
                let (outcome, load) =
                    match tokio::time::timeout(timeout, probe(&url, tls.as_ref())).await {
                        Ok(Ok(load)) => (Probe::Answered, load),
                        Ok(Err(e)) => {
                            tracing::debug!(%url, "probe failed: {e}");
                            (Probe::Failed, None)
                        }
                        Err(_) => (Probe::Failed, None),
                    };
                (i, url, outcome, load)
            }
        });
        for (i, url, outcome, load) in futures_join_all(probes).await {
            cluster.record_probe(i, &url, outcome, load);
        }
    }
}

/// The probes' TLS connector of `ca_file`; `None` (every `https://` probe fails) when it
/// cannot be built, logged once per distinct error (`last`).
fn tls_settings(
    ca_file: Option<&std::path::Path>,
    last: &mut Option<String>,
) -> Option<tokio_rustls::TlsConnector> {
    match super::tls::connector(ca_file) {
        Ok(c) => {
            *last = None;
            Some(c)
        }
        Err(e) => {
            if last.as_deref() != Some(e.as_str()) {
                tracing::warn!(
                    "cluster probes over TLS cannot run (every https:// peer fails): {e}"
                );
                *last = Some(e);
            }
            None
        }
    }
}

/// Runs the futures concurrently (each has its own deadline) and collects their outputs.
async fn futures_join_all<F>(fs: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = fs.map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        if let Ok(v) = h.await {
            out.push(v);
        }
    }
    out
}

/// A peer's base URL, split: whether it is `https://`, its `host[:port]` as written, and the
/// address to connect to (port 80 or 443 when the URL names none).
#[derive(Debug, PartialEq, Eq)]
pub struct Peer<'a> {
    /// `https://`: probed over TLS.
    pub tls: bool,
    /// The URL's authority (`host[:port]`), the probe's `Host`.
    pub authority: &'a str,
    /// The URL's host (an IPv6 address in brackets), the name its certificate must carry.
    pub host: &'a str,
    /// `host:port` to connect to.
    pub addr: String,
}

/// The parts of an `http://` or `https://` base URL.
pub fn peer(url: &str) -> Result<Peer<'_>, String> {
    let (tls, rest) = match (url.strip_prefix("https://"), url.strip_prefix("http://")) {
        (Some(rest), _) => (true, rest),
        (None, Some(rest)) => (false, rest),
        (None, None) => return Err(format!("{url:?} is not an http:// or https:// URL")),
    };
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.is_empty() {
        return Err(format!("{url:?} has no host"));
    }
    let has_port = authority.contains(':') && !authority.ends_with(']');
    let host = match has_port {
        true => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
        false => authority,
    };
    let addr = match (has_port, tls) {
        (true, _) => authority.to_string(),
        (false, true) => format!("{authority}:443"),
        (false, false) => format!("{authority}:80"),
    };
    Ok(Peer {
        tls,
        authority,
        host,
        addr,
    })
}

/// One probe: connects (over TLS to an `https://` peer, with `tls`), asks, reads the answer
/// (to its end, at most `MAX_ANSWER_BYTES`); the load its body reports (`None`: a node that
/// reports none).
async fn probe(url: &str, tls: Option<&tokio_rustls::TlsConnector>) -> Result<Option<f64>, String> {
    let p = peer(url)?;
    let addr = &p.addr;
    let conn = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connecting to {addr}: {e}"))?;
    if !p.tls {
        return ask(conn, &p).await;
    }
    let tls = tls.ok_or_else(|| format!("{addr}: no TLS settings (see the warning above)"))?;
    let name = super::tls::server_name(p.host)?;
    let conn = tls
        .connect(name, conn)
        .await
        .map_err(|e| format!("TLS with {addr}: {e}"))?;
    ask(conn, &p).await
}

/// Asks `GET /v1/health` on `conn` and reads the answer.
async fn ask<S: AsyncRead + AsyncWrite + Unpin>(
    mut conn: S,
    p: &Peer<'_>,
) -> Result<Option<f64>, String> {
    let (addr, host) = (&p.addr, p.authority);
    let ask = format!("GET {HEALTH_PATH} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    conn.write_all(ask.as_bytes())
        .await
        .map_err(|e| format!("asking {addr}: {e}"))?;
    let mut buf = vec![0u8; MAX_ANSWER_BYTES];
    let mut got = 0;
    while got < MAX_ANSWER_BYTES {
        let slot = buf.get_mut(got..).ok_or("no room")?;
        let n = match conn.read(slot).await {
            Ok(n) => n,
            // A TLS peer that closes without close_notify: what came is the answer.
            Err(_) if got > 0 && p.tls => 0,
            Err(e) => return Err(format!("reading from {addr}: {e}")),
        };
        if n == 0 {
            break;
        }
        got += n;
    }
    let head = buf.get(..got).unwrap_or_default();
    if head.starts_with(b"HTTP/1.1 200 ") || head.starts_with(b"HTTP/1.0 200 ") {
        Ok(load_in(head))
    } else {
        let line: String = String::from_utf8_lossy(head)
            .lines()
            .next()
            .unwrap_or("")
            .chars()
            .take(80)
            .collect();
        Err(format!("{addr} answered {line:?}"))
    }
}

/// The `load` of a health answer's JSON body (after the head), if any.
fn load_in(answer: &[u8]) -> Option<f64> {
    #[derive(serde::Deserialize)]
    struct Health {
        load: f64,
    }
    let at = answer.windows(4).position(|w| w == b"\r\n\r\n")?;
    let body = answer.get(at + 4..)?;
    serde_json::from_slice::<Health>(body).ok().map(|h| h.load)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_urls_give_their_peer() {
        let p = peer("http://127.0.0.1:9000").unwrap();
        assert_eq!(
            (p.tls, p.authority, p.host),
            (false, "127.0.0.1:9000", "127.0.0.1")
        );
        assert_eq!(p.addr, "127.0.0.1:9000");
        assert_eq!(peer("http://h/x").unwrap().addr, "h:80");
        let p = peer("https://[::1]").unwrap();
        assert_eq!(
            (p.tls, p.host, p.addr.as_str()),
            (true, "[::1]", "[::1]:443")
        );
        assert_eq!(peer("https://[::1]:7/").unwrap().host, "[::1]");
        assert!(peer("ftp://h").is_err());
        assert!(peer("http://").is_err());
    }

    #[tokio::test]
    async fn a_probe_needs_a_200() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        let server = tokio::spawn(async move {
            for answer in [
                "HTTP/1.1 200 OK\r\n\r\n",
                "HTTP/1.1 200 OK\r\n\r\n{\"node\":\"a\",\"load\":0.75}",
                "HTTP/1.1 503 Busy\r\n\r\n",
            ] {
                let (mut c, _) = l.accept().await.unwrap();
                let mut b = [0u8; 256];
                let _ = c.read(&mut b).await;
                c.write_all(answer.as_bytes()).await.unwrap();
            }
        });
        assert_eq!(probe(&url, None).await, Ok(None));
        assert_eq!(probe(&url, None).await, Ok(Some(0.75)));
        assert!(probe(&url, None).await.is_err());
        server.await.unwrap();
        // Nobody listening any more.
        assert!(probe(&url, None).await.is_err());
    }

    /// A TLS server on loopback answering one probe `200` with the certificate of
    /// `127.0.0.1` it returns (PEM).
    async fn tls_peer() -> (String, String, tokio::task::JoinHandle<()>) {
        let pair = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
        let pem = pair.cert.pem();
        let key =
            rustls_pki_types::PrivateKeyDer::try_from(pair.signing_key.serialize_der()).unwrap();
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![pair.cert.der().clone()], key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}", l.local_addr().unwrap());
        let server = tokio::spawn(async move {
            // One refused handshake (an untrusting client), then one answered probe.
            for _ in 0..2 {
                let (c, _) = l.accept().await.unwrap();
                let Ok(mut c) = acceptor.accept(c).await else {
                    continue;
                };
                let mut b = [0u8; 256];
                let _ = c.read(&mut b).await;
                let answer = "HTTP/1.1 200 OK\r\n\r\n{\"load\":0.5}";
                c.write_all(answer.as_bytes()).await.unwrap();
                c.shutdown().await.unwrap();
            }
        });
        (url, pem, server)
    }

    /// An `https://` peer is probed over TLS, trusting the CA file only.
    #[tokio::test]
    async fn an_https_peer_is_probed_over_tls_trusting_the_ca_file() {
        let (url, pem, server) = tls_peer().await;
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, pem).unwrap();
        let public = crate::cluster::tls::connector(None).unwrap();
        let e = probe(&url, Some(&public)).await.unwrap_err();
        assert!(e.contains("TLS"), "{e}");
        let trusting = crate::cluster::tls::connector(Some(&ca)).unwrap();
        assert_eq!(probe(&url, Some(&trusting)).await, Ok(Some(0.5)));
        server.await.unwrap();
    }
}
