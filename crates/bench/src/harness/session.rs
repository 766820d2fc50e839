//! Sessions of a benchmark's server, over its HTTP control API: created, validated, kept
//! alive ([`super::keepalive`]) and ended.

use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;

use super::keepalive::{keep_alive, Live};
use super::secret::with_session_secret;
use crate::udp::server_ip;

/// The sessions of one server: one agent for every request (persistent connections, as a
/// player keeps its own), and the thread that keeps the live ones alive, started by the
/// first from the thread that adds it (so in its network namespace), stopped when dropped.
pub(crate) struct Sessions {
    agent: ureq::Agent,
    base: String,
    live: Arc<Mutex<Vec<Live>>>,
    /// The keepalive period, ms (below 50: look again every 50 ms).
    period_ms: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    keeper: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Sessions {
    /// No sessions yet of the server at `base`, kept alive every `period` (zero: as soon as
    /// [`Sessions::set_period`] says).
    pub(crate) fn new(base: &str, period: Duration) -> Sessions {
        Sessions::with_agent(ureq::Agent::new_with_defaults(), base, period)
    }

    /// As [`Sessions::new`], every request through `agent` (an HTTPS server's trust).
    pub(crate) fn with_agent(agent: ureq::Agent, base: &str, period: Duration) -> Sessions {
        Sessions {
            agent,
            base: base.to_string(),
            live: Arc::new(Mutex::new(Vec::new())),
            period_ms: Arc::new(AtomicU64::new(period.as_millis() as u64)),
            stop: Arc::new(AtomicBool::new(false)),
            keeper: Mutex::new(None),
        }
    }

    /// The agent of every request to the server.
    pub(crate) fn agent(&self) -> &ureq::Agent {
        &self.agent
    }

    /// The server's base URL.
    pub(crate) fn base(&self) -> &str {
        &self.base
    }

    /// `POST /v1/sessions` of `object` to `port` (of the client's address): the server's
    /// answer and the session's id.
    pub(crate) fn create(
        &self,
        object: &str,
        port: u16,
    ) -> anyhow::Result<(serde_json::Value, String)> {
        let body = serde_json::json!({ "object": object, "port": port });
        let mut resp = (self.agent)
            .post(format!("{}/v1/sessions", self.base))
            .send_json(&body)
            .context("creating a session")?;
        let v: serde_json::Value = resp.body_mut().read_json()?;
        let id = v["id"].as_str().context("session id")?.to_string();
        Ok((v, id))
    }

    /// Return routability, as `isnode play` does it: the token datagram the server sends
    /// to the session's socket, echoed over HTTP; the stream starts then.
    pub(crate) fn validate(
        &self,
        socket: &UdpSocket,
        id: &str,
        secret: &str,
    ) -> anyhow::Result<()> {
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

    /// The keepalive period the server asked for, ms.
    pub(crate) fn set_period(&self, period_ms: u64) {
        self.period_ms.store(period_ms, Ordering::Relaxed);
    }

    /// Keeps `session` alive from now on (starting the keepalive thread if it is not
    /// running, from the calling thread).
    pub(crate) fn keep(&self, session: Live) {
        self.start_keeper();
        if let Ok(mut l) = self.live.lock() {
            l.push(session);
        }
    }

    /// Starts the keepalive thread if it is not running (from the calling thread).
    pub(crate) fn start_keeper(&self) {
        let Ok(mut keeper) = self.keeper.lock() else {
            return;
        };
        if keeper.is_some() {
            return;
        }
        let (a, l, s, b, p) = (
            self.agent.clone(),
            self.live.clone(),
            self.stop.clone(),
            self.base.clone(),
            self.period_ms.clone(),
        );
        *keeper = Some(std::thread::spawn(move || keep_alive(&a, &b, &l, &p, &s)));
    }

    /// Ends session `id`: no more keepalives, and `DELETE` with its secret.
    pub(crate) fn end(&self, id: &str) {
        let mut secret = None;
        if let Ok(mut l) = self.live.lock() {
            secret = l.iter().find(|x| x.id == id).map(|x| x.secret.clone());
            l.retain(|x| x.id != id);
        }
        let req = (self.agent).delete(format!("{}/v1/sessions/{id}", self.base));
        let _ = with_session_secret(req, &secret.unwrap_or_default()).call();
    }
}

impl Drop for Sessions {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(k) = self.keeper.get_mut().ok().and_then(Option::take) {
            let _ = k.join();
        }
    }
}
