//! Riding through a lost server: when no datagram has come for `--resume-after-ms`, the
//! receive loop asks [`Resume::resume`]. The [`SessionResumer`] checks the session with a
//! short control request; if the server no longer streams it (restarted, or unreachable),
//! it opens a new session at the first codeword the client has not delivered, on the same
//! server or, when that one cannot be reached or refuses, on the next one of
//! `--server A,B,...` (round robin). The new session must carry the same stream
//! ([`same_stream`]: parameters, TSI, TOI, and the packet digests of the codeword it starts
//! at) or another copy of the same origin version (another edge's fill of the object: the
//! same origin ETag, length and codeword layout; another TSI and TOI), else it is deleted
//! and the next server tried: bytes of two different objects or versions are never mixed.
//! The session is validated with the same socket and the keepalives move to it. On the
//! same stream the receive core, its digests and the output go on untouched; on another
//! copy the core is re-bound to it at the codeword resumed ([`Rebind`]: its TSI, TOI and
//! digests from there on, fetched before the stream starts). Either way the output is the
//! same bytes as without the loss.

use std::net::UdpSocket;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

use super::keepalive::{keepalive_via, Keepalive, Owner, Reported};
use super::setup::SourceFilter;
use crate::control::{ControlClient, Opened, Placement, SessionInfoExt};
use crate::digests::DigestRows;
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
        /// Another copy of the object (another TSI or TOI): what the receive core is to
        /// re-bind to at the codeword resumed. None: the same stream.
        rebind: Option<Rebind>,
    },
    /// This server could not be reached, refused, or serves another stream: the next one
    /// of the list is to be tried at once.
    TryNext,
    /// Every server of the list failed in this round: try again after a back-off.
    NotYet,
}

/// A new session carrying another copy of the same origin version: the receive core
/// takes its packets from the codeword resumed on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Rebind {
    /// The copy's TSI.
    pub tsi: u32,
    /// The copy's TOI.
    pub toi: u32,
    /// Its packet digests from the codeword resumed on (at least that codeword's; empty
    /// when packets are not authenticated), fetched before its stream started.
    pub digests: DigestRows,
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
    /// session must carry too (or another copy of its origin version).
    pub stream: Stream,
    /// Codewords of packet digests fetched from a new copy's server before its stream
    /// starts (the receive window); None when packets are not authenticated.
    pub digests_window: Option<u32>,
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
    /// Why the last server refused, when one did since the last resume (another stream
    /// or version of the object): what the client says if it ends without a server.
    pub refused: Option<String>,
}

/// What identifies the stream a session carries: its parameters and, for a copy filled
/// from an origin, the origin's ETag of the version it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Stream {
    /// TSI, TOI, length and codeword layout (its start codeword aside).
    pub params: SessionParams,
    /// The origin's ETag (None: ingested locally, or an ETag that is empty or longer than
    /// [`isnode_proto::MAX_ORIGIN_ETAG_LEN`]).
    pub origin_etag: Option<String>,
}

impl Stream {
    /// The stream of a session answer (checked).
    pub(super) fn of(info: &isnode_proto::SessionInfo) -> anyhow::Result<Stream> {
        Ok(Stream {
            params: info.params()?,
            origin_etag: info
                .origin_etag
                .clone()
                .filter(|e| !e.is_empty() && e.len() <= isnode_proto::MAX_ORIGIN_ETAG_LEN),
        })
    }
}

/// How a server's session carries the stream the client receives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Carries {
    /// The very stream: same TSI and TOI (and digests, when compared).
    SameStream,
    /// Another copy of the same origin version: another TSI or TOI, the same non-empty
    /// origin ETag, length and codeword layout (so the same symbols in every codeword).
    OtherCopy,
}

/// Why a server's session is not the stream the client receives.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(super) enum StreamMismatch {
    /// Its length or codeword layout (symbol size, source block length, repair symbols)
    /// differ.
    #[error("it serves another stream of the object: {field} is {theirs}, not {ours}")]
    Params {
        /// The first field that differs.
        field: &'static str,
        /// The value received so far.
        ours: u64,
        /// The server's.
        theirs: u64,
    },
    /// Another copy (TSI or TOI differ) without an origin version on both sides that says
    /// it holds the same bytes.
    #[error(
        "it serves another stream of the object: {field} is {theirs}, not {ours}, and no \
         origin ETag of both says it is the same version"
    )]
    Unidentified {
        /// `tsi` or `toi`.
        field: &'static str,
        /// The value received so far.
        ours: u64,
        /// The server's.
        theirs: u64,
    },
    /// Another version of the object at the origin.
    #[error("it serves another version of the object: origin ETag {theirs}, not {ours}")]
    OtherVersion {
        /// The ETag of the version received so far.
        ours: String,
        /// The server's.
        theirs: String,
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

/// Checks that a session starting at `theirs.params.start_codeword` (asked at `from`)
/// carries the stream `ours` or another copy of its origin version, and, on the same
/// stream, that its digests of codeword `from` (if fetched) equal those the client holds
/// (`booked`). Pure.
pub(super) fn same_stream(
    ours: &Stream,
    theirs: &Stream,
    from: u32,
    digests: Option<(&[u8], &[u8])>,
) -> Result<Carries, StreamMismatch> {
    let (a, b) = (&ours.params, &theirs.params);
    let layout: [(&'static str, u64, u64); 4] = [
        ("transfer_length", a.transfer_length, b.transfer_length),
        ("symbol_len", a.symbol_len.into(), b.symbol_len.into()),
        (
            "max_source_block_len",
            a.max_source_block_len.into(),
            b.max_source_block_len.into(),
        ),
        (
            "repair_symbols",
            a.repair_symbols.into(),
            b.repair_symbols.into(),
        ),
    ];
    if let Some((field, ours, theirs)) = layout.into_iter().find(|(_, x, y)| x != y) {
        return Err(StreamMismatch::Params {
            field,
            ours,
            theirs,
        });
    }
    if b.start_codeword != from {
        return Err(StreamMismatch::Start {
            asked: from,
            theirs: b.start_codeword,
        });
    }
    if let (Some(x), Some(y)) = (&ours.origin_etag, &theirs.origin_etag) {
        if x != y {
            return Err(StreamMismatch::OtherVersion {
                ours: x.clone(),
                theirs: y.clone(),
            });
        }
    }
    let ids: [(&'static str, u64, u64); 2] = [
        ("tsi", a.tsi.into(), b.tsi.into()),
        ("toi", a.toi.into(), b.toi.into()),
    ];
    if let Some((field, ours_id, theirs_id)) = ids.into_iter().find(|(_, x, y)| x != y) {
        return match (&ours.origin_etag, &theirs.origin_etag) {
            (Some(_), Some(_)) => Ok(Carries::OtherCopy),
            _ => Err(StreamMismatch::Unidentified {
                field,
                ours: ours_id,
                theirs: theirs_id,
            }),
        };
    }
    match digests {
        Some((booked, got)) if booked != got => Err(StreamMismatch::Digests { sbn: from }),
        _ => Ok(Carries::SameStream),
    }
}

/// What [`SessionResumer::finish`] leaves.
pub(super) struct Finished {
    /// The session held last and the client of its server (for the final delete).
    pub held: Option<(isnode_proto::SessionInfo, Arc<ControlClient>)>,
    /// The keepalives' loss reports.
    pub reported: Reported,
    /// Why the last server refused since the last resume, if one did.
    pub refused: Option<String>,
}

impl SessionResumer<'_> {
    /// Stops the held session's keepalives; its id and secret, and the client of its
    /// server, for the final delete; the keepalives' reports; why the last server refused
    /// since the last resume, if one did.
    pub(super) fn finish(mut self) -> Finished {
        let mut reported = self.reported;
        let held = self.held.take().and_then(|h| {
            reported.merge(h.keepalive.stop());
            let control = self.servers.get(h.server)?.control.clone();
            Some((h.info, control))
        });
        Finished {
            held,
            reported,
            refused: self.refused.take(),
        }
    }

    /// Opens the session on server `at`, checks that it carries the same stream (or
    /// another copy of its version: then fetches that copy's digests), validates it and
    /// moves the keepalives to it. Its id, and what to re-bind to for another copy.
    fn reopen(
        &mut self,
        at: usize,
        from: u32,
        booked: Option<&[u8]>,
    ) -> anyhow::Result<(String, Option<Rebind>)> {
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
        let (theirs, rebind) = match self.check(&control, &info, from, booked) {
            Ok(v) => v,
            Err(e) => {
                if let Err(d) = control.delete_session(&info.id, &info.secret) {
                    tracing::warn!("could not delete session {}: {d:#}", info.id);
                }
                return Err(e.context("refusing the server's session"));
            }
        };
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
        self.stream = theirs;
        self.held = Some(Held {
            info: *info,
            keepalive,
            server: at,
        });
        Ok((id, rebind))
    }

    /// [`same_stream`] of a new session `info` on `control`'s server: its stream, and for
    /// another copy of the version what to re-bind to.
    fn check(
        &self,
        control: &ControlClient,
        info: &isnode_proto::SessionInfo,
        from: u32,
        booked: Option<&[u8]>,
    ) -> anyhow::Result<(Stream, Option<Rebind>)> {
        let theirs = Stream::of(info)?;
        if same_stream(&self.stream, &theirs, from, None)? == Carries::OtherCopy {
            let rebind = self.rebind_to(control, &theirs.params, from)?;
            return Ok((theirs, Some(rebind)));
        }
        let Some(booked) = booked else {
            return Ok((theirs, None));
        };
        let partition = theirs.params.partition()?;
        let symbols = crate::digest_fetch::symbols_of(partition, theirs.params.repair_symbols);
        let rows = control
            .digests(&self.object, from, 1, symbols)
            .context("fetching the new session's packet digests")?;
        let got = rows
            .iter()
            .find(|(sbn, _)| *sbn == from)
            .map(|(_, d)| &d[..])
            .context("the server has no packet digests of that codeword")?;
        same_stream(&self.stream, &theirs, from, Some((booked, got)))?;
        Ok((theirs, None))
    }

    /// What the receive core re-binds to for the copy `theirs` from codeword `from`: its
    /// identifiers and, when packets are authenticated, its digests of the receive window
    /// (fetched now, before its stream starts, so that its first packets are not dropped
    /// as unverified; the digest fetcher asks for the rest).
    fn rebind_to(
        &self,
        control: &ControlClient,
        theirs: &SessionParams,
        from: u32,
    ) -> anyhow::Result<Rebind> {
        let digests = match self.digests_window {
            None => Vec::new(),
            Some(window) => {
                let partition = theirs.partition()?;
                let symbols = crate::digest_fetch::symbols_of(partition, theirs.repair_symbols);
                let rows = crate::digest_fetch::fetch_now(
                    control,
                    &self.object,
                    from,
                    window.max(1),
                    partition.blocks(),
                    &symbols,
                )
                .context("fetching the new copy's packet digests")?;
                anyhow::ensure!(
                    rows.first().is_some_and(|(sbn, _)| *sbn == from),
                    "the server has no packet digests of codeword {from}"
                );
                rows
            }
        };
        Ok(Rebind {
            tsi: theirs.tsi,
            toi: theirs.toi,
            digests,
        })
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
            Ok((id, rebind)) => {
                let server = self
                    .servers
                    .get(at)
                    .map(|s| s.base.clone())
                    .unwrap_or_default();
                match &rebind {
                    None => {
                        tracing::info!(session = %id, codeword = from, %server, "resumed the stream")
                    }
                    Some(r) => tracing::info!(
                        session = %id, codeword = from, %server, tsi = r.tsi, toi = r.toi,
                        "resumed on another copy of the same origin version"
                    ),
                }
                self.failed_in_round = 0;
                self.refused = None;
                Resumed::NewSession {
                    id,
                    server,
                    moved: if at == before {
                        Moved::SameServer
                    } else {
                        Moved::OtherServer
                    },
                    rebind,
                }
            }
            Err(e) => {
                let base = self.servers.get(at).map_or("", |s| s.base.as_str());
                if let Some(why) = e.downcast_ref::<StreamMismatch>() {
                    tracing::warn!("resuming at codeword {from} on {base}: {e:#}");
                    self.refused = Some(format!("{base}: {why}"));
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
    use proptest::prelude::*;

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

    fn stream(start: u32, etag: Option<&str>) -> Stream {
        Stream {
            params: params(start),
            origin_etag: etag.map(str::to_string),
        }
    }

    /// Another edge's copy: another TSI and TOI.
    fn copy(start: u32, etag: Option<&str>) -> Stream {
        let mut s = stream(start, etag);
        s.params.tsi = 99;
        s.params.toi = 4;
        s
    }

    #[test]
    fn the_same_stream_at_the_codeword_asked_is_taken() {
        let d = [1u8; 32];
        let ours = stream(0, None);
        assert_eq!(
            same_stream(&ours, &stream(5, None), 5, None),
            Ok(Carries::SameStream)
        );
        assert_eq!(
            same_stream(&ours, &stream(5, None), 5, Some((&d, &d))),
            Ok(Carries::SameStream)
        );
        let tagged = stream(0, Some("\"e1\""));
        assert_eq!(
            same_stream(&tagged, &stream(5, Some("\"e1\"")), 5, Some((&d, &d))),
            Ok(Carries::SameStream)
        );
    }

    #[test]
    fn another_copy_of_the_same_origin_version_is_taken_to_re_bind() {
        let e = Some("\"9b2cf535f27731c974343645a3985328\"");
        assert_eq!(
            same_stream(&stream(0, e), &copy(5, e), 5, None),
            Ok(Carries::OtherCopy)
        );
        // Only the TOI differs (the same volume filled the object again).
        let mut refilled = stream(5, e);
        refilled.params.toi = 2;
        assert_eq!(
            same_stream(&stream(0, e), &refilled, 5, None),
            Ok(Carries::OtherCopy)
        );
    }

    #[test]
    fn another_stream_is_refused_naming_why() {
        let mut other = stream(5, None);
        other.params.tsi = 8;
        assert_eq!(
            same_stream(&stream(0, None), &other, 5, None),
            Err(StreamMismatch::Unidentified {
                field: "tsi",
                ours: 7,
                theirs: 8
            })
        );
        let msg = StreamMismatch::Unidentified {
            field: "tsi",
            ours: 7,
            theirs: 8,
        }
        .to_string();
        assert!(msg.contains("another stream"), "{msg}");
        let mut longer = stream(5, None);
        longer.params.transfer_length += 1;
        assert!(matches!(
            same_stream(&stream(0, None), &longer, 5, None),
            Err(StreamMismatch::Params {
                field: "transfer_length",
                ..
            })
        ));
        assert_eq!(
            same_stream(&stream(0, None), &stream(4, None), 5, None),
            Err(StreamMismatch::Start {
                asked: 5,
                theirs: 4
            })
        );
        let (a, mut b) = ([1u8; 32], [1u8; 32]);
        b[31] ^= 1;
        assert_eq!(
            same_stream(&stream(0, None), &stream(5, None), 5, Some((&a, &b))),
            Err(StreamMismatch::Digests { sbn: 5 })
        );
        // The same TSI and TOI with the same ETag: the digests still decide.
        let e = Some("e");
        assert_eq!(
            same_stream(&stream(0, e), &stream(5, e), 5, Some((&a, &b))),
            Err(StreamMismatch::Digests { sbn: 5 })
        );
    }

    #[test]
    fn another_version_or_a_copy_without_identity_is_refused() {
        let (e1, e2) = (Some("\"v1\""), Some("\"v2\""));
        assert_eq!(
            same_stream(&stream(0, e1), &copy(5, e2), 5, None),
            Err(StreamMismatch::OtherVersion {
                ours: "\"v1\"".into(),
                theirs: "\"v2\"".into()
            })
        );
        // Even on the same TSI and TOI, with equal digests of the codeword compared.
        let d = [3u8; 32];
        assert!(matches!(
            same_stream(&stream(0, e1), &stream(5, e2), 5, Some((&d, &d))),
            Err(StreamMismatch::OtherVersion { .. })
        ));
        for (ours, theirs) in [(None, None), (e1, None), (None, e1)] {
            assert!(
                matches!(
                    same_stream(&stream(0, ours), &copy(5, theirs), 5, None),
                    Err(StreamMismatch::Unidentified { field: "tsi", .. })
                ),
                "{ours:?} {theirs:?}"
            );
        }
        // The same version in another layout is another stream.
        let mut other = copy(5, e1);
        other.params.symbol_len = 1400;
        assert!(matches!(
            same_stream(&stream(0, e1), &other, 5, None),
            Err(StreamMismatch::Params {
                field: "symbol_len",
                ..
            })
        ));
    }

    #[test]
    fn an_empty_or_overlong_etag_is_no_identity() {
        let info = |etag: &str| -> isnode_proto::SessionInfo {
            let mut v: serde_json::Value = serde_json::from_str(
                r#"{"id": "a", "secret": "b", "validate_timeout_ms": 1, "destination": "x",
                    "object": {"name": "m", "size_bytes": 1000000, "bitrate_bps": 1,
                               "duration_s": 1.0, "symbol_size": 1428, "source_symbols": 101,
                               "repair_symbols": 8, "codewords": 7, "tsi": 7, "toi": 1},
                    "start_codeword": 0, "send_rate_bps": 1, "keepalive_interval_ms": 1,
                    "session_timeout_ms": 1, "fdt_xml": "",
                    "fec": {"encoding_id": 5, "symbol_size": 1428,
                            "max_source_block_length": 101, "max_encoding_symbols": 109}}"#,
            )
            .unwrap();
            v["origin_etag"] = etag.into();
            serde_json::from_value(v).unwrap()
        };
        assert_eq!(
            Stream::of(&info("\"e\"")).unwrap().origin_etag.as_deref(),
            Some("\"e\"")
        );
        assert_eq!(Stream::of(&info("")).unwrap().origin_etag, None);
        let long = "e".repeat(isnode_proto::MAX_ORIGIN_ETAG_LEN + 1);
        assert_eq!(Stream::of(&info(&long)).unwrap().origin_etag, None);
    }

    proptest! {
        /// A new copy is taken (to re-bind) exactly when both sides carry the same ETag and
        /// the layout and start agree; the same TSI and TOI never re-bind; nothing else
        /// is taken.
        #[test]
        fn a_copy_is_taken_only_with_the_same_version_and_layout(
            tsi in 0u32..3, toi in 0u32..3,
            ours_etag in proptest::option::of(0u8..3),
            theirs_etag in proptest::option::of(0u8..3),
            len_delta in 0u64..2, e_delta in 0u32..2, b_delta in 0u32..2, m_delta in 0u32..2,
            start in 4u32..7,
        ) {
            let tag = |t: Option<u8>| t.map(|t| format!("\"etag-{t}\""));
            let ours = Stream { params: params(0), origin_etag: tag(ours_etag) };
            let mut theirs = Stream { params: params(start), origin_etag: tag(theirs_etag) };
            let p = &mut theirs.params;
            p.tsi += tsi;
            p.toi += toi;
            p.transfer_length += len_delta;
            p.symbol_len += e_delta;
            p.max_source_block_len += b_delta;
            p.repair_symbols += m_delta;
            let got = same_stream(&ours, &theirs, 5, None);
            let layout_same = len_delta + u64::from(e_delta + b_delta + m_delta) == 0;
            let same_ids = tsi == 0 && toi == 0;
            let etags_clash = matches!((ours_etag, theirs_etag), (Some(a), Some(b)) if a != b);
            let same_version = matches!((ours_etag, theirs_etag), (Some(a), Some(b)) if a == b);
            let want = if !layout_same || start != 5 || etags_clash {
                None
            } else if same_ids {
                Some(Carries::SameStream)
            } else if same_version {
                Some(Carries::OtherCopy)
            } else {
                None
            };
            prop_assert_eq!(got.ok(), want);
        }
    }
}
