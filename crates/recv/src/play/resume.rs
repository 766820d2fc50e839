//! Riding through a lost server: when no datagram has come for `--resume-after-ms`, the
//! receive loop asks [`Resume::resume`]. The [`SessionResumer`] checks the session with a
//! short control request; if the server no longer streams it (restarted, or unreachable),
//! it opens a new session at the first codeword the client has not delivered, on the same
//! server or, when that one cannot be reached or refuses, on the next one of
//! `--server A,B,...` (round robin). The new session must carry the same stream
//! ([`same_stream`]: parameters, TSI, TOI, and the packet digests of the codeword it starts
//! at), else it is deleted and the next server tried: bytes of two different objects are
//! never mixed. The session is validated with the same socket and the keepalives move to
//! it. The receive core, its digests and the output go on untouched, so the output is the
//! same bytes as without the loss.

use std::net::UdpSocket;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

use super::session::SourceFilter;
use super::{keepalive_via, Keepalive, Owner, Reported};
use crate::control::{ControlClient, Opened, Placement, SessionInfoExt};
use crate::receiver::SessionParams;

/// What a resume attempt found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Resumed {
    /// The server still streams the session (it is only quiet): nothing done.
    StillStreaming,
    /// A new session streams from the codeword asked for.
    NewSession {
        /// Its id.
        id: String,
        /// The base URL of its server (digests and repairs are fetched from there now).
        server: String,
        /// Whether that is the server of the session before.
        moved: Moved,
    },
    /// This server could not be reached, refused, or serves another stream: the next one
    /// of the list is to be tried at once.
    TryNext,
    /// Every server of the list failed in this round: try again after a back-off.
    NotYet,
}

/// Whether a resumed session is on the server of the session before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Moved {
    /// The same server (restarted, or only quiet).
    SameServer,
    /// Another server of `--server A,B,...`.
    OtherServer,
}

/// Re-opens a session whose server went quiet (see the module documentation).
pub(super) trait Resume {
    /// Makes a server stream again from codeword `from`, if the held session's server no
    /// longer does; `booked` is the digests the client holds for codeword `from` (the new
    /// stream's are compared with them).
    fn resume(&mut self, from: u32, booked: Option<&[u8]>) -> Resumed;
}

/// The session a client holds now: its identity and its keepalive thread.
pub(super) struct Held {
    /// The session's server-side description.
    pub info: isnode_proto::SessionInfo,
    /// Its keepalives.
    pub keepalive: Keepalive,
    /// Its server, an index into [`SessionResumer::servers`].
    pub server: usize,
}

/// One server of `--server A,B,...`.
pub(super) struct Server {
    /// Its base URL as given.
    pub base: String,
    /// Short-timeout client for the checks and the re-open.
    pub control: Arc<ControlClient>,
}

/// [`Resume`] against the servers of `--server`.
pub(super) struct SessionResumer<'a> {
    /// The servers, in the order of `--server` (at least one).
    pub servers: Vec<Server>,
    /// The server tried next (the held session's until it fails).
    pub current: usize,
    /// Servers that failed in a row in this round.
    pub failed_in_round: usize,
    /// The stream the session carries (its start codeword aside): what every server's
    /// session must carry too.
    pub stream: SessionParams,
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

/// Why a server's session is not the stream the client receives.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(super) enum StreamMismatch {
    /// Its parameters (length, symbol size, code, TSI, TOI) differ.
    #[error("it serves another stream of the object: {field} is {theirs}, not {ours}")]
    Params {
        /// The first field that differs.
        field: &'static str,
        /// The value received so far.
        ours: u64,
        /// The server's.
        theirs: u64,
    },
    /// It starts at another codeword than the one asked for.
    #[error("it starts at codeword {theirs}, not at {asked}")]
    Start {
        /// The codeword asked for.
        asked: u32,
        /// The one it starts at.
        theirs: u32,
    },
    /// The packet digests of the codeword it starts at differ: another content.
    #[error("its packet digests of codeword {sbn} differ: another content under that name")]
    Digests {
        /// The codeword compared.
        sbn: u32,
    },
}

/// Checks that a session starting at `theirs.start_codeword` (asked at `from`) carries the
/// stream `ours`, and that its digests of codeword `from` (if fetched) equal those the
/// client holds (`booked`). Pure.
pub(super) fn same_stream(
    ours: &SessionParams,
    theirs: &SessionParams,
    from: u32,
    digests: Option<(&[u8], &[u8])>,
) -> Result<(), StreamMismatch> {
    let fields: [(&'static str, u64, u64); 6] = [
        ("tsi", ours.tsi.into(), theirs.tsi.into()),
        ("toi", ours.toi.into(), theirs.toi.into()),
        (
            "transfer_length",
            ours.transfer_length,
            theirs.transfer_length,
        ),
        (
            "symbol_len",
            ours.symbol_len.into(),
            theirs.symbol_len.into(),
        ),
        (
            "max_source_block_len",
            ours.max_source_block_len.into(),
            theirs.max_source_block_len.into(),
        ),
        (
            "repair_symbols",
            ours.repair_symbols.into(),
            theirs.repair_symbols.into(),
        ),
    ];
    if let Some((field, ours, theirs)) = fields.into_iter().find(|(_, a, b)| a != b) {
        return Err(StreamMismatch::Params {
            field,
            ours,
            theirs,
        });
    }
    if theirs.start_codeword != from {
        return Err(StreamMismatch::Start {
            asked: from,
            theirs: theirs.start_codeword,
        });
    }
    match digests {
        Some((booked, got)) if booked != got => Err(StreamMismatch::Digests { sbn: from }),
        _ => Ok(()),
    }
}

impl SessionResumer<'_> {
    /// Stops the held session's keepalives; its id and secret, and the client of its
    /// server, for the final delete.
    pub(super) fn finish(
        mut self,
    ) -> (
        Option<(isnode_proto::SessionInfo, Arc<ControlClient>)>,
        Reported,
    ) {
        let mut reported = self.reported;
        let held = self.held.take().and_then(|h| {
            reported.merge(h.keepalive.stop());
            let control = self.servers.get(h.server)?.control.clone();
            Some((h.info, control))
        });
        (held, reported)
    }

    /// Opens the session on server `at`, checks that it carries the same stream, validates
    /// it and moves the keepalives to it.
    fn reopen(&mut self, at: usize, from: u32, booked: Option<&[u8]>) -> anyhow::Result<String> {
        let control = self
            .servers
            .get(at)
            .context("no such server")?
            .control
            .clone();
        // The next node of the ranking serves it even while the cluster still counts the
        // lost node live (its probes take a few seconds to agree).
        let req = isnode_proto::CreateSession {
            object: self.object.clone(),
            port: self.port,
            start_codeword: from,
            start_at_s: None,
            no_start_burst: false,
        };
        let opened = control.open_placed(&req, Placement::ServeHere)?.opened;
        let Opened::Session(info) = opened else {
            anyhow::bail!("the server now serves the title by broadcast");
        };
        if let Err(e) = self.check(&control, &info, from, booked) {
            if let Err(d) = control.delete_session(&info.id, &info.secret) {
                tracing::warn!("could not delete session {}: {d:#}", info.id);
            }
            return Err(e.context("refusing the server's session"));
        }
        let source = self.source;
        control
            .await_token_and_validate(&info, self.socket, |f| source.accepts(Some(f)))
            .context("validating the resumed session")?;
        let owner = Owner::of(&info)?;
        let via = keepalive_via(&info, self.socket, &control);
        let interval = Duration::from_millis(info.keepalive_interval_ms.clamp(50, 60_000));
        let keepalive = Keepalive::start(via, owner, interval, self.loss.clone());
        if let Some(old) = self.held.take() {
            self.reported.merge(old.keepalive.stop());
        }
        let id = info.id.clone();
        self.held = Some(Held {
            info: *info,
            keepalive,
            server: at,
        });
        Ok(id)
    }

    /// [`same_stream`] of a new session `info` on `control`'s server.
    fn check(
        &self,
        control: &ControlClient,
        info: &isnode_proto::SessionInfo,
        from: u32,
        booked: Option<&[u8]>,
    ) -> anyhow::Result<()> {
        let theirs = info.params()?;
        same_stream(&self.stream, &theirs, from, None)?;
        let Some(booked) = booked else {
            return Ok(());
        };
        let partition = theirs.partition()?;
        let symbols = crate::digest_fetch::symbols_of(partition, theirs.repair_symbols);
        let rows = control
            .digests(&self.object, from, 1, symbols)
            .context("fetching the new session's packet digests")?;
        let got = rows
            .iter()
            .find(|(sbn, _)| *sbn == from)
            .map(|(_, d)| &d[..])
            .context("the server has no packet digests of that codeword")?;
        same_stream(&self.stream, &theirs, from, Some((booked, got)))?;
        Ok(())
    }

    /// The server of the session before this one (or the first one).
    fn previous_server(&self) -> usize {
        self.held.as_ref().map_or(0, |h| h.server)
    }
}

impl Resume for SessionResumer<'_> {
    fn resume(&mut self, from: u32, booked: Option<&[u8]>) -> Resumed {
        let n = self.servers.len().max(1);
        if let Some(held) = self.held.as_ref().filter(|h| h.server == self.current) {
            let control = self.servers.get(held.server).map(|s| &s.control);
            if let Some(Ok(true)) = control.map(|c| c.session_streaming(&held.info.id)) {
                return Resumed::StillStreaming;
            }
        }
        let at = self.current % n;
        let before = self.previous_server();
        match self.reopen(at, from, booked) {
            Ok(id) => {
                let server = self
                    .servers
                    .get(at)
                    .map(|s| s.base.clone())
                    .unwrap_or_default();
                tracing::info!(session = %id, codeword = from, %server, "resumed the stream");
                self.failed_in_round = 0;
                Resumed::NewSession {
                    id,
                    server,
                    moved: if at == before {
                        Moved::SameServer
                    } else {
                        Moved::OtherServer
                    },
                }
            }
            Err(e) => {
                let base = self.servers.get(at).map_or("", |s| s.base.as_str());
                if e.downcast_ref::<StreamMismatch>().is_some() {
                    tracing::warn!("resuming at codeword {from} on {base}: {e:#}");
                } else {
                    tracing::info!("resuming at codeword {from} on {base}: {e:#}");
                }
                self.current = (at + 1) % n;
                self.failed_in_round += 1;
                if self.failed_in_round >= n {
                    self.failed_in_round = 0;
                    Resumed::NotYet
                } else {
                    Resumed::TryNext
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(start: u32) -> SessionParams {
        SessionParams {
            tsi: 7,
            toi: 1,
            transfer_length: 1_000_000,
            symbol_len: 1428,
            max_source_block_len: 101,
            repair_symbols: 8,
            start_codeword: start,
        }
    }

    #[test]
    fn the_same_stream_at_the_codeword_asked_is_taken() {
        let d = [1u8; 32];
        assert_eq!(same_stream(&params(0), &params(5), 5, None), Ok(()));
        assert_eq!(
            same_stream(&params(0), &params(5), 5, Some((&d, &d))),
            Ok(())
        );
    }

    #[test]
    fn another_stream_is_refused_naming_why() {
        let mut other = params(5);
        other.tsi = 8;
        assert_eq!(
            same_stream(&params(0), &other, 5, None),
            Err(StreamMismatch::Params {
                field: "tsi",
                ours: 7,
                theirs: 8
            })
        );
        let mut longer = params(5);
        longer.transfer_length += 1;
        assert!(matches!(
            same_stream(&params(0), &longer, 5, None),
            Err(StreamMismatch::Params {
                field: "transfer_length",
                ..
            })
        ));
        assert_eq!(
            same_stream(&params(0), &params(4), 5, None),
            Err(StreamMismatch::Start {
                asked: 5,
                theirs: 4
            })
        );
        let (a, mut b) = ([1u8; 32], [1u8; 32]);
        b[31] ^= 1;
        assert_eq!(
            same_stream(&params(0), &params(5), 5, Some((&a, &b))),
            Err(StreamMismatch::Digests { sbn: 5 })
        );
    }
}
