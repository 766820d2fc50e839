//! `isnode play`: receive one object from a server, repair it, and play it out.
//!
//! The shell around [`Receiver`](crate::receiver::Receiver): it binds a UDP socket, asks the
//! server for a session (`POST /v1/sessions`), fetches the packet digests of the first
//! codewords ([`crate::digests`]), echoes the token the server sent to the socket (return
//! routability: the stream starts then), keeps it alive from a thread (with the session's
//! secret), checks every packet against its digest, receives with
//! `recvmmsg` and `UDP_GRO` (a coalesced GSO run is split back into its packets), takes only
//! packets from the session's source ([`SourceFilter`]: the server's
//! IP address unless `--accept-from` says otherwise), optionally impairs what it receives
//! ([`crate::impair`]), feeds the receive core, hands the in-order output to the playout
//! thread ([`crate::playout`]), and deletes the session at the end.
//!
//! The session ends when every codeword is decoded or declared lost; when the last codeword
//! has been seen and no datagram came for a second (or `--timeout-s`, if shorter); when no
//! datagram came for `--timeout-s` (the server is gone: [`ServerGone`]); or at
//! `--max-seconds` (a hard wall-clock bound, playout included). Whatever is still
//! undecoded then is reported unrecoverable and written as zeros, unless the unicast repair
//! ([`crate::repair`]) fetches the missing symbols from the server first; a session cut
//! short (server gone, `--max-seconds`) ends its output after the last codeword received
//! unless `--keep-length`. What the server announces is checked against
//! [`crate::limits`] first; the queue to playout is bounded ([`crate::queue`]).
//!
//! A server lost mid-stream (quiet for `--resume-after-ms`, or its goodbye) is ridden
//! through by `resume`: a new session at the first codeword not delivered, on the same
//! server or the next of `--server A,B,...`, checked to carry the same stream.
//!
//! Inside: `args` (the command line, [`PlayConfig`]), `session` (the session as received,
//! [`SessionSetup`], and the receive loop), `stats` (what is reported, [`PlayStats`]),
//! `http` (`--http`: the stream served to a local player, [`HttpServe`]), `ladder` (a
//! title with renditions: one session per rung played, switched at segment boundaries by
//! the decision of [`crate::abr`]).

mod http;
mod keepalive;
pub(crate) mod ladder;
mod resume;
mod session;
mod setup;
mod stats;
mod ts_mark;

use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::control::{leading_skip_bytes, ControlClient};
use crate::impair::ScheduledImpairer;
use isnode_proto::keepalive::LossReport;

pub use crate::config::{AcceptFrom, CutShort, PlayConfig, ReleaseArg, VerifyDigests};
pub use http::{HttpListener, HttpOut, HttpServe};
pub(crate) use session::{Measured, Steer};
pub use setup::{SessionSetup, SourceFilter};
pub use stats::{EndReason, LostRange, PlayStats, RungChange, RungSession};

use keepalive::{keepalive_via, Keepalive, Owner, Reported};
use session::run_session;
use setup::RECV_BUFFER_BYTES;

/// `play` was answered with a broadcast: the caller follows it
/// ([`crate::broadcast::play_described`]).
#[derive(Debug)]
pub struct FollowBroadcast {
    /// The broadcast.
    pub info: Box<isnode_proto::broadcast::BroadcastInfo>,
    /// When the request was sent.
    pub asked: Instant,
    /// How long the answer took.
    pub rtt: Duration,
}

impl std::fmt::Display for FollowBroadcast {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the server serves the title by broadcast {}",
            self.info.id
        )
    }
}

impl std::error::Error for FollowBroadcast {}

/// Plays `args.name` from `args.server`: binds the receive socket (`--bind`, `--port`) and
/// runs [`play_on`]. Writes `--stats-json` if asked; the caller prints [`PlayStats::summary`].
pub fn play(args: &PlayConfig) -> anyhow::Result<PlayStats> {
    let control = args.control(Duration::from_secs(10))?;
    let ip = match args.bind {
        Some(ip) => ip,
        None => {
            let server = control.server_addr()?;
            match server.ip() {
                IpAddr::V4(ip) if ip.is_loopback() => IpAddr::V4(Ipv4Addr::LOCALHOST),
                IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                // Dual-stack: receives whether the HTTP connection went over IPv6 or IPv4.
                IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            }
        }
    };
    let addr = SocketAddr::new(ip, args.port);
    let socket = UdpSocket::bind(addr).with_context(|| format!("binding UDP {addr}"))?;
    play_on(args, socket)
}

/// Plays on an already bound socket (so that an embedding program, e.g. `isnode demo`, knows
/// the receive port before the session starts): opens the session on the server, receives,
/// keeps it alive, deletes it at the end.
pub fn play_on(args: &PlayConfig, socket: UdpSocket) -> anyhow::Result<PlayStats> {
    if let Some(title) = ladder::title_of(args) {
        return ladder::play_title(args, &socket, title);
    }
    let local = LocalSetup::check(args, &socket)?;
    play_with(args, &socket, local, None)
}

/// [`play_on`] with what this host prepared (`local`), its session steered by `steer`
/// (a rung of `isnode play TITLE`; None: to the end).
fn play_with(
    args: &PlayConfig,
    socket: &UdpSocket,
    mut local: LocalSetup,
    steer: Option<&mut dyn session::Steer>,
) -> anyhow::Result<PlayStats> {
    let requested = Instant::now();
    let (rotated, control, opened) = open_first(args, local.port)?;
    // From here on the server that answered is the first of the list.
    let args = &rotated;
    // A redirect or a ranking may have named servers the first filter did not know.
    let source = source_filter(args)?;
    let info = session_of(args, opened, requested)?;
    check_or_delete(args, &info, &control)?;
    let skip = leading_skip_bytes(&info)?;
    let protection = crate::decrypt::for_session(&control, &info).inspect_err(|_| {
        if let Err(d) = control.delete_session(&info.id, &info.secret) {
            tracing::warn!("could not delete session {}: {d:#}", info.id);
        }
    })?;
    log_opened(&info, local.addr, &source);
    let owner = Owner::of(&info)?;
    // The first digests come before the stream starts; the rest follow it.
    let auth = validate_or_delete(args, &info, &control, socket, &source)?;
    let loss = Arc::new(AtomicU32::new(NO_LOSS_MEASURED));
    let keepalive = start_keepalive(&info, socket, &control, owner, &loss);
    let resume_source = source.clone();
    let opening = Opening {
        info: &info,
        socket,
        source: &resume_source,
        port: local.port,
        loss: &loss,
    };
    let mut resumer = opening.resumer(args, auth.is_some(), keepalive)?;
    let mut served = None;
    let result = SessionSetup::from_info(&info, source).and_then(|setup| {
        let (out, server) = open_output(
            args,
            &mut local,
            (&setup, skip),
            (&info, &control),
            protection,
        )?;
        served = server;
        run_session(
            args,
            socket,
            &setup,
            skip_leading(out, skip),
            requested,
            session::Aids {
                loss: &loss,
                auth,
                resume: Some(&mut resumer),
                steer: match steer {
                    Some(s) => Some(&mut *s as &mut dyn session::Steer),
                    None => None,
                },
            },
        )
    });
    let finished = resumer.finish();
    delete_last(finished.held.as_ref(), &info, &control);
    finish_play(args, result, finished, (served, local.linger), requested)
}

/// The session's output (the local one, or `--http`'s with its length announced): an
/// encrypted title's decrypted, a clear CMAF title's started past its first byte with the
/// title's init segment first (`cmaf_init`).
fn open_output(
    args: &PlayConfig,
    local: &mut LocalSetup,
    (setup, skip): (&SessionSetup, u64),
    (info, control): (&isnode_proto::SessionInfo, &ControlClient),
    protection: Option<(crate::decrypt::Protection, u64)>,
) -> anyhow::Result<(Box<dyn Write + Send>, Option<HttpServe>)> {
    let init = match (&protection, local.init) {
        (None, InitBy::Play) => crate::cmaf_init::clear_init(control, info),
        _ => None,
    };
    // `--http` of an encrypted title announces the clear length its segments decrypt to.
    let len = match &protection {
        Some(_) => OutputLen::Clear(info.clear_output_bytes),
        None => OutputLen::Stored {
            init_bytes: init.as_ref().map_or(0, |i| i.len() as u64),
        },
    };
    let (mut out, server) = local.output(args, setup, skip, len)?;
    let out = match (protection, init) {
        (Some((p, start)), _) => p.writer(out, start, info.object.size_bytes)?,
        (None, Some(init)) => {
            out.write_all(&init).context("writing the init segment")?;
            out
        }
        (None, None) => out,
    };
    Ok((out, server))
}

/// After the session: the resumer's reports added to the stats, the stats written, a
/// stream served over `--http` left to linger (within the deadline), the end checked.
fn finish_play(
    args: &PlayConfig,
    result: anyhow::Result<PlayStats>,
    finished: resume::Finished,
    (served, linger): (Option<HttpServe>, Duration),
    requested: Instant,
) -> anyhow::Result<PlayStats> {
    let mut stats = result?;
    add_reported(&mut stats, finished.reported);
    write_stats_json(args, &stats)?;
    if let Some(server) = served {
        let deadline = session::deadline_after(requested, args.max_seconds)?;
        server.linger(linger.min(deadline.saturating_duration_since(Instant::now())));
    }
    check_end(args, &stats, finished.refused)?;
    Ok(stats)
}

/// What [`play_on`] checks and prepares on this host before it asks the server for anything.
struct LocalSetup {
    /// `--http-linger-s`.
    linger: Duration,
    /// `--http`: the listener the stream is served from (taken once the session is known).
    http: Option<HttpListener>,
    /// The output when the stream is not served over HTTP (`--out`, or nothing).
    out: Option<Box<dyn Write + Send>>,
    /// The receive socket's address.
    addr: SocketAddr,
    /// The port the server is asked to send to (`--session-port`, else the socket's).
    port: u16,
    /// Who writes a CMAF title's init segment before an output from a later point.
    init: InitBy,
}

/// Who writes a clear CMAF title's init segment before an output that starts past the
/// title's first byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum InitBy {
    /// The play, before the session's bytes (`cmaf_init`).
    Play,
    /// Its caller, into the output it gave (a rung of a ladder: `ladder::rung_output`).
    Caller,
}

impl LocalSetup {
    /// Checks everything local (the impairment, the HTTP linger and listener, the output,
    /// the source filter) and grows the socket's receive buffer.
    fn check(args: &PlayConfig, socket: &UdpSocket) -> anyhow::Result<LocalSetup> {
        // Check everything local before asking the server for anything.
        ScheduledImpairer::new(&args.impair, &args.loss_steps)?;
        let http = args.http.map(HttpListener::bind).transpose()?;
        let out = match http {
            None => Some(crate::playout::open_output(args.out.as_deref())?),
            Some(_) => None,
        };
        LocalSetup::with(args, socket, (http, out), InitBy::Play)
    }

    /// [`LocalSetup::check`] with the output (or HTTP listener) already open.
    fn with(
        args: &PlayConfig,
        socket: &UdpSocket,
        (http, out): (Option<HttpListener>, Option<Box<dyn Write + Send>>),
        init: InitBy,
    ) -> anyhow::Result<LocalSetup> {
        ScheduledImpairer::new(&args.impair, &args.loss_steps)?;
        let linger = secs_arg(args.http_linger_s, "--http-linger-s")?;
        let addr = socket.local_addr()?;
        let port = args.session_port.unwrap_or(addr.port());
        // Checked before anything is asked (made again below for the server that answers).
        source_filter(args)?;
        // The receive buffer is grown before the request: the server's start-up burst arrives
        // at once, faster than the stream's rate, before the receive loop runs.
        crate::net::grow_recv_buffer(socket, RECV_BUFFER_BYTES);
        Ok(LocalSetup {
            linger,
            http,
            out,
            addr,
            port,
            init,
        })
    }

    /// The playout's writer for `setup`: the output opened at the start, else the HTTP
    /// stream of `--http` (started here, the object's length known), with its server.
    fn output(
        &mut self,
        args: &PlayConfig,
        setup: &SessionSetup,
        skip: u64,
        len: OutputLen,
    ) -> anyhow::Result<(Box<dyn Write + Send>, Option<HttpServe>)> {
        Ok(match (self.out.take(), self.http.take()) {
            (Some(out), _) => (out, None),
            (None, listener) => {
                let listener = listener.context("no output")?;
                let len = match len {
                    OutputLen::Clear(Some(n)) => n,
                    OutputLen::Clear(None) => bail!(
                        "the server gave no clear length for this encrypted title from this \
                         point (a CMAF title's from a later fragment is not known before it \
                         arrives): --http plays it from its start only"
                    ),
                    OutputLen::Stored { init_bytes } => {
                        setup.output_len()?.saturating_sub(skip) + init_bytes
                    }
                };
                let (server, out) = listener.serve(&setup.object, len, args.out.as_deref())?;
                (Box::new(out), Some(server))
            }
        })
    }
}

/// How long a session's output is (what `--http` announces).
#[derive(Clone, Copy, Debug)]
enum OutputLen {
    /// The stored bytes from the start point (a clear title), after `init_bytes` of its
    /// init segment (a CMAF title from a later fragment).
    Stored {
        /// The init segment written first, bytes (0: none).
        init_bytes: u64,
    },
    /// The clear media of an encrypted title, as the server gave it (`None`: not known).
    Clear(Option<u64>),
}

/// The session of the server's answer; an answer naming a broadcast is the error
/// [`FollowBroadcast`].
fn session_of(
    args: &PlayConfig,
    opened: crate::control::Opened,
    requested: Instant,
) -> anyhow::Result<isnode_proto::SessionInfo> {
    match opened {
        crate::control::Opened::Session(info) => Ok(*info),
        crate::control::Opened::Broadcast(b) => {
            tracing::info!(broadcast = %b.id, "the server serves {} by broadcast", args.name);
            Err(FollowBroadcast {
                info: b,
                asked: requested,
                rtt: requested.elapsed(),
            }
            .into())
        }
    }
}

/// [`check_announced`], deleting the session on the server if it is refused.
fn check_or_delete(
    args: &PlayConfig,
    info: &isnode_proto::SessionInfo,
    control: &ControlClient,
) -> anyhow::Result<()> {
    if let Err(e) = check_announced(args, info) {
        if let Err(d) = control.delete_session(&info.id, &info.secret) {
            tracing::warn!("could not delete session {}: {d:#}", info.id);
        }
        return Err(e);
    }
    Ok(())
}

/// Logs the session just opened (and where it starts, if not at the title's start).
fn log_opened(info: &isnode_proto::SessionInfo, local: SocketAddr, source: &SourceFilter) {
    if let (Some(offset), Some(by)) = (info.start_offset_bytes, info.seek_by) {
        tracing::info!(
            "starting at byte {offset} ({:.3} s, found by {by:?}), codeword {}",
            info.start_time_s.unwrap_or(0.0),
            info.start_codeword
        );
    }
    tracing::info!(
        session = %info.id, destination = %info.destination, receive = %local,
        accept_from = ?source, "session opened for {}", info.object.name
    );
}

/// Fetches the first digests ([`prefetch_digests`]) and waits for the session's token on
/// `socket` (return routability); deletes the session on the server if either fails.
fn validate_or_delete(
    args: &PlayConfig,
    info: &isnode_proto::SessionInfo,
    control: &Arc<ControlClient>,
    socket: &UdpSocket,
    source: &SourceFilter,
) -> anyhow::Result<Option<session::Auth>> {
    let validated = prefetch_digests(args, info, control).and_then(|auth| {
        control.await_token_and_validate(info, socket, |from| source.accepts(Some(from)))?;
        Ok(auth)
    });
    validated.inspect_err(|_| {
        let _ = control.delete_session(&info.id, &info.secret);
    })
}

/// Starts the keepalives of the session `info` (carrying the measured `loss` if the server
/// takes loss reports).
fn start_keepalive(
    info: &isnode_proto::SessionInfo,
    socket: &UdpSocket,
    control: &Arc<ControlClient>,
    owner: Owner,
    loss: &Arc<AtomicU32>,
) -> Keepalive {
    let via = keepalive_via(info, socket, control);
    Keepalive::start(
        via,
        owner,
        Duration::from_millis(info.keepalive_interval_ms.clamp(50, 60_000)),
        info.loss_reports.then(|| loss.clone()),
    )
}

/// The first session as opened on the first server: what its resumer starts from.
struct Opening<'a> {
    /// The server's answer.
    info: &'a isnode_proto::SessionInfo,
    /// The receive socket.
    socket: &'a UdpSocket,
    /// Where datagrams may come from.
    source: &'a SourceFilter,
    /// The port the server sends to.
    port: u16,
    /// The measured loss, shared with the keepalives.
    loss: &'a Arc<AtomicU32>,
}

impl<'a> Opening<'a> {
    /// The resumer of the session (holding it with its `keepalive`) over the servers of
    /// `args`; `authenticated`: its packets are checked against their digests.
    fn resumer(
        &self,
        args: &PlayConfig,
        authenticated: bool,
        keepalive: Keepalive,
    ) -> anyhow::Result<resume::SessionResumer<'a>> {
        let first = 0;
        let servers = args
            .servers()
            .map(|base| {
                Ok(resume::Server {
                    base: base.to_string(),
                    control: Arc::new(args.control_of(base, RESUME_CONTROL_TIMEOUT)?),
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(resume::SessionResumer {
            servers,
            current: first,
            failed_in_round: 0,
            stream: resume::Stream::of(self.info)?,
            digests_window: authenticated.then(|| receive_window(args)),
            socket: self.socket,
            source: self.source,
            object: args.name.clone(),
            port: self.port,
            loss: self.info.loss_reports.then(|| self.loss.clone()),
            held: Some(resume::Held {
                info: self.info.clone(),
                keepalive,
                server: first,
            }),
            reported: Reported::default(),
            refused: None,
        })
    }
}

/// Deletes the session held last (`held`, else the first: `info` on `control`).
fn delete_last(
    held: Option<&(isnode_proto::SessionInfo, Arc<ControlClient>)>,
    info: &isnode_proto::SessionInfo,
    control: &Arc<ControlClient>,
) {
    let (last, last_control) = held.map_or((info, control), |(info, control)| (info, control));
    if let Err(e) = last_control.delete_session(&last.id, &last.secret) {
        tracing::warn!("could not delete session {}: {e:#}", last.id);
    }
}

/// Puts the keepalives' loss reports into the statistics.
fn add_reported(stats: &mut PlayStats, reported: Reported) {
    stats.loss_reports_sent = reported.sent;
    stats.reported_loss_rate = reported.last.map(LossReport::rate);
    stats.max_reported_loss_rate = reported.max.map(LossReport::rate);
}

/// The error a session that ended short is reported as: the server shut down
/// ([`ServerShuttingDown`]), or went quiet with `--cut-short truncate` ([`ServerGone`], with
/// why the last server `refused` a resume if one did); Ok otherwise.
fn check_end(args: &PlayConfig, stats: &PlayStats, refused: Option<String>) -> anyhow::Result<()> {
    if stats.end_reason == EndReason::ServerShutdown && !stats.is_clean() {
        return Err(ServerShuttingDown {
            bytes_written: stats.bytes_written,
            bytes_expected: stats.bytes_expected,
        }
        .into());
    }
    if stats.end_reason == EndReason::Timeout && args.cut_short() == CutShort::Truncate {
        let gone = anyhow::Error::new(ServerGone {
            timeout_s: args.timeout_s,
            bytes_written: stats.bytes_written,
            bytes_expected: stats.bytes_expected,
        });
        return Err(match refused {
            // A server answered, but with another stream or version of the object: say
            // so rather than only that the server went quiet.
            Some(why) => gone.context(format!(
                "no server serves the stream received any more (the last refused, {why})"
            )),
            None => gone,
        });
    }
    Ok(())
}

/// The digests of the session's first codewords when packets are to be authenticated (the
/// object has digests and `--verify-digests` is on); None otherwise.
fn prefetch_digests(
    args: &PlayConfig,
    info: &isnode_proto::SessionInfo,
    control: &Arc<ControlClient>,
) -> anyhow::Result<Option<session::Auth>> {
    if args.verify_digests == VerifyDigests::Off {
        return Ok(None);
    }
    if info.object.packet_digests.is_none() {
        tracing::warn!(
            "{} has no packet digests (ingested before them): packets are checked by their CRC only",
            info.object.name
        );
        return Ok(None);
    }
    use crate::control::SessionInfoExt;
    let params = info.params()?;
    let partition = params.partition()?;
    let window = receive_window(args);
    // The window's worth now (the stream cannot get further before the release point
    // moves); the receive loop's fetcher asks for the rest at once.
    let initial = crate::digest_fetch::fetch_now(
        control,
        &info.object.name,
        info.start_codeword,
        window,
        partition.blocks(),
        &crate::digest_fetch::symbols_of(partition, params.repair_symbols),
    )
    .context("fetching the packet digests")?;
    Ok(Some(session::Auth {
        control: control.clone(),
        initial,
    }))
}

/// The receive window of `args` in codewords (how many codewords' digests are fetched
/// before a stream starts).
fn receive_window(args: &PlayConfig) -> u32 {
    crate::receiver::ReceiverConfig {
        window_codewords: args.window_codewords,
        loss_horizon: args.loss_horizon,
        ..Default::default()
    }
    .effective_window_codewords()
}

/// The server ended the session before its end because it is shutting down (its grace
/// period ran out); the output ends after what was received.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error(
    "server shutting down: it ended the session before its end; the output ends after the \
     {bytes_written} bytes received of {bytes_expected} (--keep-length pads it with zeros)"
)]
pub struct ServerShuttingDown {
    /// Bytes written to the output.
    pub bytes_written: u64,
    /// Bytes the whole title would have had.
    pub bytes_expected: u64,
}

/// The session ended because no datagram came for `--timeout-s`: the server is gone (or
/// never sent), and the output ends after what was received.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error(
    "the server is gone: no datagram for {timeout_s} s (--timeout-s); the output ends after \
     the {bytes_written} bytes received of {bytes_expected} (--keep-length pads it with zeros)"
)]
pub struct ServerGone {
    /// `--timeout-s`.
    pub timeout_s: f64,
    /// Bytes written to the output.
    pub bytes_written: u64,
    /// Bytes the whole title would have had.
    pub bytes_expected: u64,
}

/// Checks a session answer against the limits of `args` (`--max-object-bytes` and the
/// like) before anything is allocated or written for it.
fn check_announced(args: &PlayConfig, info: &isnode_proto::SessionInfo) -> anyhow::Result<()> {
    let window = crate::receiver::ReceiverConfig {
        release: args.release.into(),
        loss_horizon: args.loss_horizon,
        window_codewords: args.window_codewords,
    }
    .effective_window_codewords();
    let announced = crate::limits::Announced::of(&info.object);
    args.announce_limits()
        .check(&announced, window)
        .with_context(|| format!("refusing the session {} for {}", info.id, info.object.name))
}

fn secs_arg(v: f64, what: &str) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(v).map_err(|_| anyhow::anyhow!("{what} must be >= 0, got {v}"))
}
/// The shared measured loss before any measurement (else [`LossReport::units`]).
pub(crate) const NO_LOSS_MEASURED: u32 = u32::MAX;

/// Receives a preset session on `socket` without any control traffic (tests, demos, a
/// sender started by other means). Honours every option of `args` but `server`,
/// `session_port`, `start_codeword` and `accept_from` (taken from `setup`), `port`, `bind`,
/// `http` (the stream goes to `--out` only) and the unicast repair (there is no server to
/// ask).
pub fn play_session(
    args: &PlayConfig,
    socket: &UdpSocket,
    setup: &SessionSetup,
) -> anyhow::Result<PlayStats> {
    let out = crate::playout::open_output(args.out.as_deref())?;
    let loss = AtomicU32::new(NO_LOSS_MEASURED);
    let aids = session::Aids {
        loss: &loss,
        auth: None,
        resume: None,
        steer: None,
    };
    let stats = run_session(args, socket, setup, out, Instant::now(), aids)?;
    write_stats_json(args, &stats)?;
    Ok(stats)
}

/// The sources a session takes datagrams from: `--accept-from`, by default the IPs of the
/// servers of `--server` (a session may resume on any of them; a failover server whose
/// address does not resolve now is left out, said in the log).
fn source_filter(args: &PlayConfig) -> anyhow::Result<SourceFilter> {
    Ok(match args.accept_from {
        Some(AcceptFrom::Any) => SourceFilter::Any,
        Some(AcceptFrom::Ip(ip)) => SourceFilter::ip(ip),
        None => {
            let first = args.control(RESUME_CONTROL_TIMEOUT)?.server_addr()?.ip();
            let mut ips = vec![first];
            for base in &args.failover_servers {
                match args.control_of(base, RESUME_CONTROL_TIMEOUT)?.server_addr() {
                    Ok(a) if !ips.contains(&a.ip()) => ips.push(a.ip()),
                    Ok(_) => {}
                    Err(e) => tracing::warn!("failover server {base}: {e:#}"),
                }
            }
            SourceFilter::Ips(ips)
        }
    })
}

/// Asks the servers of `--server` for the session, in order, until one answers (a server
/// unreachable or refusing is passed over when there are others): the index of the one
/// that answered first and the others after it in their round-robin order, its client, and
/// its answer.
fn open_first(
    args: &PlayConfig,
    port: u16,
) -> anyhow::Result<(PlayConfig, Arc<ControlClient>, crate::control::Opened)> {
    let req = isnode_proto::CreateSession {
        object: args.name.clone(),
        port,
        start_codeword: args.start_codeword,
        start_at_s: args.start_at,
        no_start_burst: args.no_start_burst,
    };
    let mut last = None;
    for (i, base) in args.servers().enumerate() {
        let control = args.control_of(base, Duration::from_secs(10))?;
        match control.open_placed(&req, crate::control::Placement::Follow) {
            Ok(followed) => {
                let mut all: Vec<String> = args.servers().map(str::to_string).collect();
                all.rotate_left(i);
                let rotated = placed(args, all, &followed);
                return Ok((rotated, Arc::new(followed.control), followed.opened));
            }
            Err(e) if args.failover_servers.is_empty() => return Err(e),
            Err(e) => {
                tracing::warn!("{base}: {e:#}");
                last = Some(e);
            }
        }
    }
    Err(last.unwrap_or_else(|| anyhow::anyhow!("no server")))
}

/// `args` with the server that answered first and the servers to fail over to after it:
/// the title's live ranking when the server sent one (a cluster of edges: the next nodes
/// of the ranking, in order), else the rest of `--server A,B,...` (`given`, rotated to
/// start at the server asked).
fn placed(
    args: &PlayConfig,
    given: Vec<String>,
    followed: &crate::control::Followed,
) -> PlayConfig {
    let answered = followed.control.base().to_string();
    let mut rotated = args.clone();
    rotated.failover_servers = if followed.ranking.is_empty() {
        given.into_iter().skip(1).collect()
    } else {
        let at = followed
            .ranking
            .iter()
            .position(|u| *u == answered)
            .unwrap_or(0);
        let mut r = followed.ranking.clone();
        r.rotate_left(at);
        r.into_iter().filter(|u| *u != answered).collect()
    };
    rotated.server = answered;
    // The token goes on to the servers given and the https:// nodes named over HTTPS.
    rotated.token_scope = Some(followed.control.scope().clone());
    rotated
}

/// `out` without the first `skip` bytes written to it (a start at an access point inside
/// the first codeword).
fn skip_leading(out: Box<dyn Write + Send>, skip: u64) -> Box<dyn Write + Send> {
    match skip {
        0 => out,
        n => Box::new(SkipWriter {
            skip: n,
            inner: out,
        }),
    }
}

fn write_stats_json(args: &PlayConfig, stats: &PlayStats) -> anyhow::Result<()> {
    if let Some(path) = &args.stats_json {
        let json = serde_json::to_string_pretty(stats)?;
        std::fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Drops the first `skip` bytes written, passes the rest on: the bytes of the start
/// codeword before the random-access point `--start-at` starts at.
struct SkipWriter {
    skip: u64,
    inner: Box<dyn Write + Send>,
}

impl Write for SkipWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let dropped = usize::try_from(self.skip)
            .unwrap_or(usize::MAX)
            .min(buf.len());
        self.skip -= dropped as u64;
        if dropped == buf.len() {
            return Ok(dropped);
        }
        Ok(dropped + self.inner.write(&buf[dropped..])?)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Timeout of the control requests of a resume: a server that does not answer at once is
/// tried again later (the receive loop must not wait on it).
const RESUME_CONTROL_TIMEOUT: Duration = Duration::from_millis(1000);
