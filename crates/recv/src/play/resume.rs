//! Riding through a lost server: when no datagram has come for `--resume-after-ms`, the
//! receive loop asks [`Resume::resume`]. The [`SessionResumer`] checks the session with a
//! short control request; if the server no longer streams it (restarted, or unreachable),
//! it opens a new session at the first codeword the client has not delivered, validates it
//! with the same socket, and moves the keepalives to it. The receive core, its digests and
//! the output go on untouched, so the output is the same bytes as without the loss.

use std::net::UdpSocket;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

use super::session::SourceFilter;
use super::{keepalive_via, Keepalive, Owner, Reported};
use crate::control::{ControlClient, Opened};

/// What a resume attempt found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Resumed {
    /// The server still streams the session (it is only quiet): nothing done.
    StillStreaming,
    /// A new session streams from the codeword asked for; its id.
    NewSession(String),
    /// The server could not be reached or refused: try again later.
    NotYet,
}

/// Re-opens a session whose server went quiet (see the module documentation).
pub(super) trait Resume {
    /// Makes the server stream again from codeword `from`, if it no longer does.
    fn resume(&mut self, from: u32) -> Resumed;
}

/// The session a client holds now: its identity and its keepalive thread.
pub(super) struct Held {
    /// The session's server-side description.
    pub info: isnode_proto::SessionInfo,
    /// Its keepalives.
    pub keepalive: Keepalive,
}

/// [`Resume`] against the server of `--server`.
pub(super) struct SessionResumer<'a> {
    /// Short-timeout client for the checks and the re-open.
    pub control: Arc<ControlClient>,
    /// The receive socket (the token datagram of a new session comes there).
    pub socket: &'a UdpSocket,
    /// Who may send the token datagram.
    pub source: &'a SourceFilter,
    /// The object and the port the session streams to.
    pub object: String,
    /// The UDP port the sessions stream to.
    pub port: u16,
    /// The measured loss the keepalives report.
    pub loss: Option<Arc<AtomicU32>>,
    /// The session held now.
    pub held: Option<Held>,
    /// Keepalive reports of the sessions already left.
    pub reported: Reported,
}

impl SessionResumer<'_> {
    /// Stops the held session's keepalives; its id and secret for the final delete.
    pub(super) fn finish(mut self) -> (Option<isnode_proto::SessionInfo>, Reported) {
        let mut reported = self.reported;
        let info = self.held.take().map(|h| {
            reported.merge(h.keepalive.stop());
            h.info
        });
        (info, reported)
    }

    fn reopen(&mut self, from: u32) -> anyhow::Result<String> {
        let opened = self.control.open(&isnode_proto::CreateSession {
            object: self.object.clone(),
            port: self.port,
            start_codeword: from,
            start_at_s: None,
            no_start_burst: false,
        })?;
        let Opened::Session(info) = opened else {
            anyhow::bail!("the server now serves the title by broadcast");
        };
        let source = self.source;
        self.control
            .await_token_and_validate(&info, self.socket, |f| source.accepts(Some(f)))
            .context("validating the resumed session")?;
        let owner = Owner::of(&info)?;
        let via = keepalive_via(&info, self.socket, &self.control);
        let interval = Duration::from_millis(info.keepalive_interval_ms.clamp(50, 60_000));
        let keepalive = Keepalive::start(via, owner, interval, self.loss.clone());
        if let Some(old) = self.held.take() {
            self.reported.merge(old.keepalive.stop());
        }
        let id = info.id.clone();
        self.held = Some(Held {
            info: *info,
            keepalive,
        });
        Ok(id)
    }
}

impl Resume for SessionResumer<'_> {
    fn resume(&mut self, from: u32) -> Resumed {
        if let Some(held) = &self.held {
            if let Ok(true) = self.control.session_streaming(&held.info.id) {
                return Resumed::StillStreaming;
            }
        }
        match self.reopen(from) {
            Ok(id) => {
                tracing::info!(session = %id, codeword = from, "resumed the stream");
                Resumed::NewSession(id)
            }
            Err(e) => {
                tracing::info!("resuming at codeword {from}: {e:#}");
                Resumed::NotYet
            }
        }
    }
}
