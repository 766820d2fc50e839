//! Health probes of the cluster's peers: every `probe_interval_ms`, a `GET /v1/health` of
//! each peer (plain HTTP/1.1, one connection each, `Connection: close`) that must answer
//! `200` within `probe_timeout_ms`; the outcomes (and the load the answer reports) go to the
//! sans-IO core, which marks a peer
//! dead after `probe_failures_to_dead` failures in a row and live at its first answer. The
//! peers and the settings are read again each round (a reload applies at the next one;
//! without peers the loop sleeps until a reload).

use std::sync::Arc;
use std::time::Duration;

use isnode_edge::cluster::Probe;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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
    loop {
        let every = Duration::from_millis(p.config.load().probe_interval_ms.max(1));
        if cluster.peers().is_empty() {
            // Nothing to probe until a reload brings peers (it wakes this at once).
            let reloaded = p.reloaded.notified();
            let _ = tokio::time::timeout(IDLE_WAIT, reloaded).await;
            continue;
        }
        tokio::time::sleep(every).await;
        let timeout = Duration::from_millis(p.config.load().probe_timeout_ms.max(1));
        let probes = cluster.peers().into_iter().map(|(i, url)| async move {
            let (outcome, load) = match tokio::time::timeout(timeout, probe(&url)).await {
                Ok(Ok(load)) => (Probe::Answered, load),
                Ok(Err(e)) => {
                    tracing::debug!(%url, "probe failed: {e}");
                    (Probe::Failed, None)
                }
                Err(_) => (Probe::Failed, None),
            };
            (i, url, outcome, load)
        });
        for (i, url, outcome, load) in futures_join_all(probes).await {
            cluster.record_probe(i, &url, outcome, load);
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

/// The `host:port` of an `http://host[:port]` base URL.
pub fn authority(url: &str) -> Result<&str, String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url:?} is not an http:// URL"))?;
    let host = rest.split('/').next().unwrap_or_default();
    if host.is_empty() {
        return Err(format!("{url:?} has no host"));
    }
    Ok(host)
}

/// One probe: connects, asks, reads the answer (to its end, at most `MAX_ANSWER_BYTES`);
/// the load its body reports (`None`: a node that reports none).
async fn probe(url: &str) -> Result<Option<f64>, String> {
    let host = authority(url)?;
    let addr = if host.contains(':') && !host.ends_with(']') {
        host.to_string()
    } else {
        format!("{host}:80")
    };
    let mut conn = tokio::net::TcpStream::connect(&addr)
        .await
        .map_err(|e| format!("connecting to {addr}: {e}"))?;
    let ask = format!("GET {HEALTH_PATH} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    conn.write_all(ask.as_bytes())
        .await
        .map_err(|e| format!("asking {addr}: {e}"))?;
    let mut buf = vec![0u8; MAX_ANSWER_BYTES];
    let mut got = 0;
    while got < MAX_ANSWER_BYTES {
        let slot = buf.get_mut(got..).ok_or("no room")?;
        let n = conn
            .read(slot)
            .await
            .map_err(|e| format!("reading from {addr}: {e}"))?;
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
    fn node_urls_give_their_authority() {
        assert_eq!(
            authority("http://127.0.0.1:9000").unwrap(),
            "127.0.0.1:9000"
        );
        assert_eq!(authority("http://h/x").unwrap(), "h");
        assert!(authority("https://h").is_err());
        assert!(authority("http://").is_err());
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
        assert_eq!(probe(&url).await, Ok(None));
        assert_eq!(probe(&url).await, Ok(Some(0.75)));
        assert!(probe(&url).await.is_err());
        server.await.unwrap();
        // Nobody listening any more.
        assert!(probe(&url).await.is_err());
    }
}
