//! `isnode play`: receive one object from a server, repair it, and play it out.
//!
//! The shell around [`Receiver`]: it binds a UDP socket, asks the server for a session
//! (`POST /v1/sessions`), keeps it alive from a thread, receives with `recvmmsg`, optionally
//! impairs what it receives ([`crate::impair`]), feeds the receive core, hands the in-order
//! output to the playout thread ([`crate::playout`]), and deletes the session at the end.
//!
//! The session ends when every codeword is decoded or declared lost; when the last codeword
//! has been seen and no datagram came for a second (or `--timeout-s`, if shorter); when no
//! datagram came for `--timeout-s`; or after `--max-seconds`. Whatever is still undecoded
//! then is reported unrecoverable and written as zeros.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use isnode_wire::DATA_HEADER_LEN;

use crate::control::{ControlClient, SessionInfo, SessionInfoExt};
use crate::impair::{ImpairConfig, ImpairStats, Impairer, Verdict};
use crate::net::{grow_recv_buffer, set_poll_timeout, Batch};
use crate::playout::{self, PlayoutConfig};
use crate::receiver::{
    verify_fdt, FdtCheck, Receiver, ReceiverConfig, ReceiverStats, SessionParams,
};

/// Arguments of `isnode play`.
#[derive(clap::Args, Debug, Clone)]
#[command(after_help = "\
Lossy relay between processes: the server sends to the HTTP peer's address at the port the \
session names, so point the session at a relay and let the relay forward to this client:

  isnode relay --listen 127.0.0.1:7001 --to 127.0.0.1:7002 --loss 0.05 --burst 3
  isnode play movie.ts --port 7002 --session-port 7001 --out movie.out

The client receives on --port 7002 and asks the server to stream to port 7001 (the relay).")]
pub struct PlayArgs {
    /// Name of the object to play.
    pub name: String,

    /// Base URL of the server's control API.
    #[arg(long, default_value = "http://127.0.0.1:7878")]
    pub server: String,

    /// Write the object's bytes to FILE (`-` for stdout); without it they are only counted.
    /// Unrecoverable codewords are written as zeros: the output always keeps its length.
    #[arg(long, value_name = "FILE|-")]
    pub out: Option<PathBuf>,

    /// Also write the statistics as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub stats_json: Option<PathBuf>,

    /// Injected loss and corruption.
    #[command(flatten)]
    pub impair: ImpairConfig,

    /// Write the output as soon as it is decoded instead of pacing it at the object's bitrate.
    #[arg(long)]
    pub as_fast_as_possible: bool,

    /// UDP port to receive on (0: an ephemeral port).
    #[arg(long, default_value_t = 0)]
    pub port: u16,

    /// Local address to receive on; default: 127.0.0.1 if the server is on IPv4 loopback,
    /// else the unspecified address of the server's family (`[::]` is dual-stack).
    #[arg(long, value_name = "IP")]
    pub bind: Option<IpAddr>,

    /// Ask the server to stream to this UDP port instead of the receive port, e.g. the
    /// `--listen` port of an `isnode relay` whose `--to` is this client's `--port`.
    #[arg(long, value_name = "PORT")]
    pub session_port: Option<u16>,

    /// First codeword to ask for (the output then starts at that codeword's first byte).
    #[arg(long, default_value_t = 0)]
    pub start_codeword: u32,

    /// End the session after this many seconds without a datagram.
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0)]
    pub timeout_s: f64,

    /// End the session after this many seconds in any case.
    #[arg(long, value_name = "SECONDS", default_value_t = 86_400.0)]
    pub max_seconds: f64,

    /// Paced playout starts this long after the first codeword is ready; default: one
    /// codeword's playing time.
    #[arg(long, value_name = "MS")]
    pub prebuffer_ms: Option<u64>,

    /// Declare a codeword unrecoverable once packets of a codeword more than this many
    /// codewords later arrive.
    #[arg(long, value_name = "CODEWORDS", default_value_t = 2)]
    pub loss_horizon: u32,
}

impl PlayArgs {
    /// Arguments with every option at its default, for `name`.
    pub fn new(name: impl Into<String>) -> PlayArgs {
        PlayArgs {
            name: name.into(),
            server: "http://127.0.0.1:7878".into(),
            out: None,
            stats_json: None,
            impair: ImpairConfig {
                seed: 1,
                ..ImpairConfig::default()
            },
            as_fast_as_possible: false,
            port: 0,
            bind: None,
            session_port: None,
            start_codeword: 0,
            timeout_s: 5.0,
            max_seconds: 86_400.0,
            prebuffer_ms: None,
            loss_horizon: 2,
        }
    }
}

/// A codeword that could not be recovered and the byte range of the output it zeroed.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LostRange {
    /// Source Block Number.
    pub sbn: u32,
    /// Byte offset in the object.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

/// Why the session ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// Every codeword was decoded or declared lost while the stream ran.
    Complete,
    /// The last codeword had been seen and the stream went quiet.
    EndOfStream,
    /// No datagram for `--timeout-s`.
    Timeout,
    /// `--max-seconds` elapsed.
    MaxDuration,
}

/// Statistics of one `play`.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct PlayStats {
    /// Object name.
    pub object: String,
    /// Server session id (None for a preset session).
    pub session_id: Option<String>,
    /// FLUTE TSI and TOI of the stream.
    pub tsi: u32,
    /// FLUTE TOI of the object.
    pub toi: u32,
    /// Object size in bytes.
    pub size_bytes: u64,
    /// Object bitrate in bit/s.
    pub bitrate_bps: u64,
    /// Encoding symbol length E.
    pub symbol_size: u32,
    /// Source symbols B of a full codeword.
    pub source_symbols: u32,
    /// Repair symbols m per codeword.
    pub repair_symbols: u32,
    /// First codeword of the session.
    pub start_codeword: u32,
    /// Datagrams received from the socket (before injected loss).
    pub packets_received: u64,
    /// Distinct valid symbols of the object received.
    pub packets_valid: u64,
    /// Symbols known to be missing: expected − valid − corrupt, never below 0, where a
    /// codeword decoded before its end is expected up to the highest ESI seen (repair
    /// packets after that were never waited for, so an injected loss there is counted in
    /// `injected_lost` but not here).
    pub packets_lost: u64,
    /// Datagrams that failed the parse or the CRC32C check (includes injected corruption).
    pub packets_corrupt: u64,
    /// Symbols received more than once.
    pub packets_duplicate: u64,
    /// Valid datagrams of another session, or out of the object's range.
    pub packets_foreign: u64,
    /// Valid FDT packets.
    pub packets_fdt: u64,
    /// Datagrams dropped by the injected loss.
    pub injected_lost: u64,
    /// Datagrams corrupted by the injected corruption.
    pub injected_corrupt: u64,
    /// Source symbols rebuilt by the Reed-Solomon decoder.
    pub symbols_repaired: u64,
    /// Codewords of the session.
    pub codewords_total: u32,
    /// Codewords decoded.
    pub codewords_decoded: u32,
    /// Codewords that could not be recovered.
    pub codewords_unrecoverable: u32,
    /// Their SBNs and byte ranges (written as zeros).
    pub unrecoverable: Vec<LostRange>,
    /// FDT received in the stream, checked against the session.
    pub fdt_stream: FdtCheck,
    /// FDT of the session answer, checked against the session.
    pub fdt_session: FdtCheck,
    /// From the session request to the first byte played out, in ms.
    pub startup_delay_ms: Option<u64>,
    /// From the session request to the first valid symbol, in ms.
    pub first_packet_ms: Option<u64>,
    /// Bytes written to the output (data and zeros).
    pub bytes_written: u64,
    /// Bytes the output must have: the object from the start codeword to its end.
    pub bytes_expected: u64,
    /// Bits played out in each second since playout started (the last may be partial).
    pub per_second_bitrate_bps: Vec<u64>,
    /// Playout underruns (a piece later than its due time), paced playout only.
    pub underruns: u64,
    /// Total playout stall, in ms.
    pub stall_ms: u64,
    /// Whether the output was paced at the bitrate.
    pub paced: bool,
    /// From the session request to the end of playout, in seconds.
    pub duration_s: f64,
    /// Why the session ended.
    pub end_reason: EndReason,
}

impl PlayStats {
    /// True if every codeword was decoded and the output has its full length.
    pub fn is_clean(&self) -> bool {
        self.codewords_unrecoverable == 0
            && self.codewords_decoded == self.codewords_total
            && self.bytes_written == self.bytes_expected
    }

    /// A short human summary, several lines.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let verdict = if self.is_clean() {
            "complete".to_string()
        } else {
            format!("{} codewords unrecoverable", self.codewords_unrecoverable)
        };
        s.push_str(&format!(
            "played {} ({} bytes) in {:.1} s: {verdict} ({:?})\n",
            self.object, self.bytes_written, self.duration_s, self.end_reason
        ));
        s.push_str(&format!(
            "packets: {} received, {} valid, {} lost, {} corrupt, {} duplicate, {} foreign, {} FDT \
             (injected: {} lost, {} corrupt)\n",
            self.packets_received,
            self.packets_valid,
            self.packets_lost,
            self.packets_corrupt,
            self.packets_duplicate,
            self.packets_foreign,
            self.packets_fdt,
            self.injected_lost,
            self.injected_corrupt
        ));
        s.push_str(&format!(
            "codewords: {}/{} decoded, {} symbols repaired, {} unrecoverable\n",
            self.codewords_decoded,
            self.codewords_total,
            self.symbols_repaired,
            self.codewords_unrecoverable
        ));
        for r in self.unrecoverable.iter().take(10) {
            s.push_str(&format!(
                "  lost codeword {}: bytes {}..{} written as zeros\n",
                r.sbn,
                r.offset,
                r.offset + r.len
            ));
        }
        if self.unrecoverable.len() > 10 {
            s.push_str(&format!(
                "  ... and {} more\n",
                self.unrecoverable.len() - 10
            ));
        }
        let ms = |v: Option<u64>| v.map_or("-".to_string(), |v| format!("{v} ms"));
        s.push_str(&format!(
            "start-up delay {} (first packet {}), {} underruns ({} ms stalled), FDT: stream {}, session {}\n",
            ms(self.startup_delay_ms),
            ms(self.first_packet_ms),
            self.underruns,
            self.stall_ms,
            fdt_word(&self.fdt_stream),
            fdt_word(&self.fdt_session),
        ));
        let rates: Vec<String> = self
            .per_second_bitrate_bps
            .iter()
            .map(|b| format!("{:.2}", *b as f64 / 1e6))
            .collect();
        s.push_str(&format!(
            "bitrate per second (Mbit/s, object {:.2}{}): [{}]\n",
            self.bitrate_bps as f64 / 1e6,
            if self.paced { ", paced" } else { ", unpaced" },
            rates.join(" ")
        ));
        s
    }
}

fn fdt_word(c: &FdtCheck) -> String {
    match c {
        FdtCheck::NotReceived => "not received".into(),
        FdtCheck::Verified => "verified".into(),
        FdtCheck::Mismatch(r) => format!("MISMATCH ({r})"),
    }
}

/// A session as the receive loop needs it: from the server's answer, or preset (tests, demos).
#[derive(Clone, Debug, PartialEq)]
pub struct SessionSetup {
    /// Object name (for the statistics).
    pub object: String,
    /// Server session id, if any.
    pub session_id: Option<String>,
    /// Receiver parameters.
    pub params: SessionParams,
    /// The object's bitrate, for pacing.
    pub bitrate_bps: u64,
    /// The FDT check of the session answer.
    pub fdt_session: FdtCheck,
}

impl SessionSetup {
    /// From the server's session answer (checked).
    pub fn from_info(info: &SessionInfo) -> anyhow::Result<SessionSetup> {
        let params = info.params()?;
        let fdt_session = if info.fdt_xml.is_empty() {
            FdtCheck::NotReceived
        } else {
            match verify_fdt(info.fdt_xml.as_bytes(), &params) {
                Ok(()) => FdtCheck::Verified,
                Err(r) => FdtCheck::Mismatch(r),
            }
        };
        Ok(SessionSetup {
            object: info.object.name.clone(),
            session_id: Some(info.id.clone()),
            params,
            bitrate_bps: info.object.bitrate_bps,
            fdt_session,
        })
    }
}

/// Plays `args.name` from `args.server`: binds the receive socket (`--bind`, `--port`) and
/// runs [`play_on`]. Writes `--stats-json` if asked; the caller prints [`PlayStats::summary`].
pub fn play(args: &PlayArgs) -> anyhow::Result<PlayStats> {
    let control = ControlClient::new(&args.server, Duration::from_secs(10));
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
pub fn play_on(args: &PlayArgs, socket: UdpSocket) -> anyhow::Result<PlayStats> {
    // Check everything local before asking the server for anything.
    Impairer::new(&args.impair)?;
    let out = open_output(args.out.as_deref())?;
    let local = socket.local_addr()?;
    let port = args.session_port.unwrap_or(local.port());
    let control = Arc::new(ControlClient::new(&args.server, Duration::from_secs(10)));
    let requested = Instant::now();
    let info = control.create_session(&args.name, port, args.start_codeword)?;
    tracing::info!(
        session = %info.id, destination = %info.destination, receive = %local,
        "session opened for {}", info.object.name
    );
    let keepalive = Keepalive::start(
        control.clone(),
        info.id.clone(),
        Duration::from_millis(info.keepalive_interval_ms.clamp(50, 60_000)),
    );
    let result = SessionSetup::from_info(&info)
        .and_then(|setup| run_session(args, &socket, &setup, out, requested));
    keepalive.stop();
    if let Err(e) = control.delete_session(&info.id) {
        tracing::warn!("could not delete session {}: {e:#}", info.id);
    }
    let stats = result?;
    write_stats_json(args, &stats)?;
    Ok(stats)
}

/// Receives a preset session on `socket` without any control traffic (tests, demos, a
/// sender started by other means). Honours every option of `args` but `server`,
/// `session_port`, `start_codeword` (taken from `setup`), `port` and `bind`.
pub fn play_session(
    args: &PlayArgs,
    socket: &UdpSocket,
    setup: &SessionSetup,
) -> anyhow::Result<PlayStats> {
    let out = open_output(args.out.as_deref())?;
    let stats = run_session(args, socket, setup, out, Instant::now())?;
    write_stats_json(args, &stats)?;
    Ok(stats)
}

fn write_stats_json(args: &PlayArgs, stats: &PlayStats) -> anyhow::Result<()> {
    if let Some(path) = &args.stats_json {
        let json = serde_json::to_string_pretty(stats)?;
        std::fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn open_output(out: Option<&Path>) -> anyhow::Result<Box<dyn Write + Send>> {
    Ok(match out {
        None => Box::new(io::sink()),
        Some(p) if p.as_os_str() == "-" => {
            Box::new(BufWriter::with_capacity(1 << 16, io::stdout()))
        }
        Some(p) => Box::new(BufWriter::with_capacity(
            1 << 20,
            File::create(p).with_context(|| format!("creating {}", p.display()))?,
        )),
    })
}

/// Sends keepalives from a thread until stopped.
struct Keepalive {
    stop: mpsc::Sender<()>,
    handle: std::thread::JoinHandle<()>,
}

impl Keepalive {
    fn start(control: Arc<ControlClient>, id: String, interval: Duration) -> Keepalive {
        let (stop, stopped) = mpsc::channel::<()>();
        let handle = std::thread::spawn(move || {
            while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(interval) {
                match control.keepalive(&id) {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::debug!("session {id} is gone: keepalives stop");
                        return;
                    }
                    Err(e) => tracing::warn!("keepalive of session {id}: {e:#}"),
                }
            }
        });
        Keepalive { stop, handle }
    }

    fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.handle.join();
    }
}

fn secs(v: f64, what: &str) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(v).map_err(|_| anyhow::anyhow!("{what} must be >= 0, got {v}"))
}

/// The receive loop of one session.
fn run_session(
    args: &PlayArgs,
    socket: &UdpSocket,
    setup: &SessionSetup,
    out: Box<dyn Write + Send>,
    requested: Instant,
) -> anyhow::Result<PlayStats> {
    let idle_timeout = secs(args.timeout_s, "--timeout-s")?;
    let max_duration = secs(args.max_seconds, "--max-seconds")?;
    let tail_idle = idle_timeout.min(Duration::from_secs(1));
    let mut impairer = Impairer::new(&args.impair)?;
    let transparent = args.impair.is_transparent();
    let mut rx = Receiver::new(
        setup.params.clone(),
        ReceiverConfig {
            loss_horizon: args.loss_horizon,
        },
    )?;
    let p = &setup.params;
    let part = *rx.partition();
    let codeword_time = if setup.bitrate_bps > 0 {
        Duration::from_secs_f64(
            part.a_large as f64 * f64::from(p.symbol_len) * 8.0 / setup.bitrate_bps as f64,
        )
    } else {
        Duration::ZERO
    };
    let prebuffer = args
        .prebuffer_ms
        .map_or(codeword_time, Duration::from_millis);
    let paced = !args.as_fast_as_possible && setup.bitrate_bps > 0;
    let (tx, pieces) = mpsc::channel();
    let writer = playout::spawn(
        out,
        PlayoutConfig {
            bitrate_bps: setup.bitrate_bps,
            paced,
            prebuffer,
        },
        pieces,
    )?;

    grow_recv_buffer(socket, 8 << 20);
    set_poll_timeout(socket, Duration::from_millis(50))?;
    // FDT packets may be a little longer than data packets: leave room.
    let slot = (DATA_HEADER_LEN + p.symbol_len as usize + 256).max(2048);
    let mut batch = Batch::new(32, slot);
    let mut received: u64 = 0;
    let start = Instant::now();
    let mut last_datagram = start;
    let mut writer_gone = false;
    let end_reason = loop {
        if rx.is_complete() {
            break EndReason::Complete;
        }
        let now = Instant::now();
        let idle = now - last_datagram;
        if now - start >= max_duration {
            break EndReason::MaxDuration;
        }
        if idle >= idle_timeout {
            break EndReason::Timeout;
        }
        if rx.saw_last_codeword() && idle >= tail_idle {
            break EndReason::EndOfStream;
        }
        let n = batch.recv(socket).context("receiving")?;
        if n > 0 {
            last_datagram = Instant::now();
        }
        let at = last_datagram - requested;
        for i in 0..n {
            received += 1;
            let (packet, _truncated) = batch.packet_mut(i);
            // A truncated datagram fails the CRC check: the core counts it corrupt.
            if !transparent && impairer.apply(packet) == Verdict::Drop {
                continue;
            }
            rx.push(packet, at);
        }
        while let Some(piece) = rx.poll_output() {
            if tx.send(piece).is_err() {
                writer_gone = true;
                break;
            }
        }
        if writer_gone {
            break EndReason::Complete;
        }
    };
    if !rx.is_complete() {
        // The stream is over: whatever is not decoded now never will be.
        rx.finish();
    }
    while let Some(piece) = rx.poll_output() {
        if tx.send(piece).is_err() {
            break;
        }
    }
    drop(tx);
    let playout = match writer.join() {
        Ok(r) => r.context("writing the output")?,
        Err(_) => bail!("the playout thread panicked"),
    };
    let core = rx.stats();
    let (first_symbol, _) = rx.symbol_times();
    Ok(assemble(
        setup,
        &rx,
        core,
        impairer.stats(),
        received,
        playout,
        PlayTimes {
            requested,
            first_symbol,
            paced,
            end_reason,
        },
    ))
}

struct PlayTimes {
    requested: Instant,
    first_symbol: Option<Duration>,
    paced: bool,
    end_reason: EndReason,
}

fn assemble(
    setup: &SessionSetup,
    rx: &Receiver,
    core: ReceiverStats,
    injected: ImpairStats,
    received: u64,
    playout: playout::PlayoutStats,
    t: PlayTimes,
) -> PlayStats {
    let p = &setup.params;
    let part = rx.partition();
    let unrecoverable: Vec<LostRange> = core
        .codewords_unrecoverable
        .iter()
        .map(|&sbn| LostRange {
            sbn,
            offset: part.block_offset(sbn),
            len: part.block_bytes(sbn),
        })
        .collect();
    PlayStats {
        object: setup.object.clone(),
        session_id: setup.session_id.clone(),
        tsi: p.tsi,
        toi: p.toi,
        size_bytes: p.transfer_length,
        bitrate_bps: setup.bitrate_bps,
        symbol_size: p.symbol_len,
        source_symbols: p.max_source_block_len,
        repair_symbols: p.repair_symbols,
        start_codeword: p.start_codeword,
        packets_received: received,
        packets_valid: core.packets_valid,
        packets_lost: core.packets_lost,
        packets_corrupt: core.packets_corrupt,
        packets_duplicate: core.packets_duplicate,
        packets_foreign: core.packets_foreign,
        packets_fdt: core.packets_fdt,
        injected_lost: injected.dropped,
        injected_corrupt: injected.corrupted,
        symbols_repaired: core.symbols_repaired,
        codewords_total: core.codewords_total,
        codewords_decoded: core.codewords_decoded,
        codewords_unrecoverable: unrecoverable.len() as u32,
        unrecoverable,
        fdt_stream: rx.fdt_check().clone(),
        fdt_session: setup.fdt_session.clone(),
        startup_delay_ms: playout
            .started_at
            .map(|s| s.saturating_duration_since(t.requested).as_millis() as u64),
        first_packet_ms: t.first_symbol.map(|d| d.as_millis() as u64),
        bytes_written: playout.bytes_written,
        bytes_expected: rx.output_len(),
        per_second_bitrate_bps: playout.per_second_bitrate_bps,
        underruns: playout.underruns,
        stall_ms: playout.stall_ms,
        paced: t.paced,
        duration_s: t.requested.elapsed().as_secs_f64(),
        end_reason: t.end_reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Args, Command, FromArgMatches};

    fn parse(argv: &[&str]) -> PlayArgs {
        let cmd = PlayArgs::augment_args(Command::new("play"));
        cmd.clone().debug_assert();
        let m = cmd.try_get_matches_from(argv).unwrap();
        PlayArgs::from_arg_matches(&m).unwrap()
    }

    #[test]
    fn cli_defaults_match_new() {
        let a = parse(&["play", "movie.ts"]);
        let b = PlayArgs::new("movie.ts");
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
    }

    #[test]
    fn cli_options() {
        let a = parse(&[
            "play",
            "m",
            "--server",
            "http://[::1]:9",
            "--out",
            "-",
            "--stats-json",
            "s.json",
            "--loss",
            "0.1",
            "--burst",
            "3",
            "--corrupt",
            "0.01",
            "--seed",
            "7",
            "--as-fast-as-possible",
            "--port",
            "7002",
            "--bind",
            "127.0.0.1",
            "--session-port",
            "7001",
            "--start-codeword",
            "4",
            "--timeout-s",
            "2.5",
            "--prebuffer-ms",
            "300",
            "--loss-horizon",
            "3",
            "--max-seconds",
            "60",
        ]);
        assert_eq!(a.session_port, Some(7001));
        assert_eq!(a.port, 7002);
        assert_eq!(a.impair.burst, Some(3.0));
        assert!(a.as_fast_as_possible);
        assert_eq!(a.out.as_deref(), Some(Path::new("-")));
        let help = PlayArgs::augment_args(Command::new("play"))
            .render_long_help()
            .to_string();
        assert!(help.contains("--session-port"), "{help}");
        assert!(help.contains("isnode relay --listen"), "{help}");
    }

    #[test]
    fn relay_cli() {
        use crate::relay::RelayArgs;
        let cmd = RelayArgs::augment_args(Command::new("relay"));
        cmd.clone().debug_assert();
        let m = cmd
            .try_get_matches_from([
                "relay",
                "--listen",
                "127.0.0.1:7001",
                "--to",
                "127.0.0.1:7002",
                "--loss",
                "0.05",
                "--burst",
                "2",
            ])
            .unwrap();
        let r = RelayArgs::from_arg_matches(&m).unwrap();
        assert_eq!(r.to.port(), 7002);
        assert_eq!(r.impair.loss, 0.05);
        assert!(RelayArgs::augment_args(Command::new("relay"))
            .try_get_matches_from(["relay", "--listen", "127.0.0.1:1"])
            .is_err());
    }
}
