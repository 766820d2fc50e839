//! `isnode bench serve`: the send engines side by side, in one run, on the same objects.
//!
//! For each engine a fresh `isnode serve` child process (of the binary given in
//! [`ServeBenchConfig::isnode_exe`]) is started on the same volume; the
//! sessions run for the measured seconds; the server's CPU time (user + sys,
//! from /proc) is divided by the bytes delivered, counted at the sink. Sinks:
//! - `loopback`: real UDP receivers in this process count what they receive
//!   (measures the whole system: on loopback the sender's system call also
//!   pays for delivery);
//! - `ifb`: a network namespace made for the run, where UDP to the client's
//!   address is routed into an `ifb` device that drops it (measures the
//!   server's send path alone). The device's own counters say what reached
//!   it. By default (and with `ethtool` present) its segmentation offload is
//!   turned off, so GSO runs are segmented in software as for a NIC without
//!   UDP segmentation offload.
//!
//! Every row also carries what the server's metrics say it sent ("sent by
//! the server"), a figure the server counts itself, not measured at the sink.

use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::harness::keepalive::{Datagrams, Live, Route};
use crate::harness::process::process_cpu_s;
use crate::harness::server::{self, ServerSpec};
use crate::harness::session::Sessions;
use crate::udp::{enable_gro, packets_in, recv_gro};
use isnode_store::{IngestOptions, Volume, VolumeParams};
use serde::{Deserialize, Serialize};

mod http;

/// Where the streams go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Sink {
    /// Real receivers on loopback in this process.
    Loopback,
    /// An ifb device in a network namespace made for the run.
    Ifb,
}

/// What to measure.
#[derive(Clone, Debug)]
pub struct ServeBenchConfig {
    /// The `isnode` binary to start servers from (and to re-run inside the namespace).
    pub isnode_exe: PathBuf,
    /// Engines to compare, in order.
    pub engines: Vec<String>,
    /// Concurrent sessions per engine.
    pub streams: usize,
    /// Bitrate of each object.
    pub bitrate_bps: u64,
    /// Measured seconds per engine, after 1 s of warm-up.
    pub seconds: f64,
    /// Distinct objects the sessions are spread over.
    pub objects: usize,
    /// Server block pool size.
    pub cache_size_bytes: u64,
    /// Where the packets go.
    pub sink: Sink,
    /// With the ifb sink: leave UDP segmentation offload on (GSO runs reach the sink whole).
    pub device_segmentation: bool,
    /// Whether each engine also serves encrypted copies of the titles.
    pub protection: Protection,
}

/// Which copies of the titles each engine serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protection {
    /// The clear titles only.
    Clear,
    /// The clear titles, then the same titles encrypted (`ingest --encrypt`: HLS AES-128),
    /// a row `ENGINE+enc` right after `ENGINE`'s, on the same server binary and volume.
    ClearAndEncrypted,
}

const NETNS_ENV: &str = "ISNODE_BENCH_NETNS";
/// The suffix of the rows of encrypted titles.
pub const ENCRYPTED_SUFFIX: &str = "+enc";
const REPORT_ENV: &str = "ISNODE_BENCH_REPORT";
/// How often the sessions are kept alive (the server's default period).
const KEEPALIVE_PERIOD: Duration = Duration::from_secs(1);
/// The client's address inside the benchmark namespace (never leaves it).
const NETNS_CLIENT_IP: &str = "10.77.0.2";

/// Per-engine results.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EngineResult {
    /// Engine name.
    pub engine: String,
    /// Concurrent sessions.
    pub streams: usize,
    /// Measured seconds.
    pub seconds: f64,
    /// UDP payload bytes delivered, measured at the sink (the loopback receivers,
    /// or the ifb device's counters less each frame's headers).
    pub delivered_bytes: u64,
    /// Packets delivered, measured at the sink. At the ifb sink these are the
    /// frames the device received: with device segmentation a whole GSO run is one frame.
    pub delivered_packets: u64,
    /// UDP payload bytes sent by the server, as its own metrics count them.
    pub sent_by_server_bytes: u64,
    /// Packets sent by the server, as its own metrics count them.
    pub sent_by_server_packets: u64,
    /// Server user + sys CPU seconds.
    pub server_cpu_s: f64,
    /// Server CPU seconds per GB (10^9 bytes) delivered at the sink.
    pub cpu_s_per_gb: f64,
    /// Server CPU seconds per GB of the title's bytes: the UDP rows' delivered bytes carry
    /// parity and headers, so their title bytes are what the streams' bitrate makes in the
    /// measured time (capped at the bytes delivered); the HTTP rows deliver title bytes.
    #[serde(default)]
    pub cpu_s_per_title_gb: f64,
    /// Delivered packets per second.
    pub packets_per_s: f64,
    /// Bits per second delivered at the sink.
    pub delivered_bps: f64,
    /// cpu_s_per_gb relative to the traditional engine's.
    pub ratio_to_traditional: Option<f64>,
}

/// The results of one `bench serve` run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServeBenchReport {
    /// Where the packets went.
    pub sink: Sink,
    /// Bitrate of each stream's object.
    pub bitrate_bps: u64,
    /// One row per engine, in the order run.
    pub results: Vec<EngineResult>,
}

/// Runs every engine of `cfg` in turn and returns their figures.
pub fn run(cfg: &ServeBenchConfig) -> anyhow::Result<ServeBenchReport> {
    if cfg.sink == Sink::Ifb && std::env::var_os(NETNS_ENV).is_none() {
        return run_in_netns(cfg);
    }
    let dir = tempfile::tempdir().context("creating a scratch volume")?;
    let vol_dir = dir.path().join("vol");
    let objects = prepare_volume(&vol_dir, cfg)?;
    let encrypted = match cfg.protection {
        Protection::Clear => None,
        Protection::ClearAndEncrypted => Some(prepare_encrypted(&vol_dir, cfg)?),
    };
    let (host, sink) = match cfg.sink {
        Sink::Ifb => (NETNS_CLIENT_IP, SinkCounter::Ifb(IfbSink::calibrate()?)),
        Sink::Loopback => ("127.0.0.1", SinkCounter::Receivers),
    };
    let mut results = Vec::new();
    for (i, engine) in cfg.engines.iter().enumerate() {
        eprintln!(
            "bench serve: engine {engine}, {} streams for {} s",
            cfg.streams, cfg.seconds
        );
        let clear = |results: &mut Vec<EngineResult>| -> anyhow::Result<()> {
            let r = run_engine(&vol_dir, host, &sink, engine, &objects, cfg)
                .with_context(|| format!("engine {engine}"))?;
            results.push(r);
            Ok(())
        };
        let Some(enc) = &encrypted else {
            clear(&mut results)?;
            continue;
        };
        let encrypted_row = |results: &mut Vec<EngineResult>| -> anyhow::Result<()> {
            eprintln!("bench serve: engine {engine}, the same titles encrypted");
            let mut r = run_engine(&vol_dir, host, &sink, engine, enc, cfg)
                .with_context(|| format!("engine {engine}, encrypted titles"))?;
            r.engine = format!("{engine}{ENCRYPTED_SUFFIX}");
            results.push(r);
            Ok(())
        };
        // Side by side, in alternating order (an engine named again runs the pair the
        // other way round): a drift of the machine's load weighs on both rows alike.
        match i % 2 {
            0 => {
                clear(&mut results)?;
                encrypted_row(&mut results)?;
            }
            _ => {
                encrypted_row(&mut results)?;
                clear(&mut results)?;
            }
        }
    }
    let trad = results
        .iter()
        .find(|r| r.engine == "traditional")
        .map(|r| r.cpu_s_per_gb);
    for r in &mut results {
        r.ratio_to_traditional = trad.filter(|t| *t > 0.0).map(|t| r.cpu_s_per_gb / t);
    }
    let report = ServeBenchReport {
        sink: cfg.sink,
        bitrate_bps: cfg.bitrate_bps,
        results,
    };
    if let Some(path) = std::env::var_os(REPORT_ENV) {
        std::fs::write(&path, serde_json::to_string(&report)?)
            .context("writing the report for the parent")?;
    }
    Ok(report)
}

/// The report as a table.
pub fn format_table(report: &ServeBenchReport) -> String {
    let mut s = format!(
        "{:<16} {:>8} {:>14} {:>14} {:>12} {:>10} {:>12} {:>14} {:>10} {:>8}\n",
        "engine",
        "streams",
        "delivered_MB",
        "server_sent_MB",
        "Mbit/s",
        "cpu_s",
        "cpu_s/GB",
        "cpu_s/title_GB",
        "kpkt/s",
        "vs_trad"
    );
    for r in &report.results {
        s.push_str(&format!(
            "{:<16} {:>8} {:>14.1} {:>14.1} {:>12.1} {:>10.3} {:>12.3} {:>14.3} {:>10.1} {:>8}\n",
            r.engine,
            r.streams,
            r.delivered_bytes as f64 / 1e6,
            r.sent_by_server_bytes as f64 / 1e6,
            r.delivered_bps / 1e6,
            r.server_cpu_s,
            r.cpu_s_per_gb,
            r.cpu_s_per_title_gb,
            r.packets_per_s / 1e3,
            r.ratio_to_traditional
                .map_or("-".into(), |x| format!("{x:.2}"))
        ));
    }
    let at = match report.sink {
        Sink::Loopback => "counted by the receivers",
        Sink::Ifb => "counted by the ifb device (UDP payload; kpkt/s: frames at the device)",
    };
    s.push_str(&format!(
        "delivered_MB, Mbit/s, cpu_s/GB, kpkt/s: at the sink, {at}; server_sent_MB: sent by the server, as its metrics count\n"
    ));
    for (engine, mut ratios) in encrypted_ratios(report) {
        let each: Vec<String> = ratios.iter().map(|r| format!("{r:.3}")).collect();
        ratios.sort_by(f64::total_cmp);
        let median = match ratios.len() % 2 {
            1 => ratios[ratios.len() / 2],
            _ => (ratios[ratios.len() / 2 - 1] + ratios[ratios.len() / 2]) / 2.0,
        };
        s.push_str(&format!(
            "{engine}: cpu_s/GB encrypted / clear, median of {} pairs = {median:.3} ({})\n",
            each.len(),
            each.join(", ")
        ));
    }
    if report
        .results
        .iter()
        .any(|r| http::Pattern::from_engine(&r.engine).is_some())
    {
        s.push_str(
            "http-* rows: paced HTTP readers of the content route; delivered_MB: response bodies \
             (the title's bytes, no parity, no headers); no packets counted\n",
        );
    }
    s
}

/// Each pair of rows run side by side, clear and encrypted (in either order), as (clear,
/// encrypted).
fn encrypted_pairs(report: &ServeBenchReport) -> Vec<(&EngineResult, &EngineResult)> {
    report
        .results
        .chunks(2)
        .filter_map(|pair| match pair {
            [a, b] if b.engine.strip_suffix(ENCRYPTED_SUFFIX) == Some(a.engine.as_str()) => {
                Some((a, b))
            }
            [a, b] if a.engine.strip_suffix(ENCRYPTED_SUFFIX) == Some(b.engine.as_str()) => {
                Some((b, a))
            }
            _ => None,
        })
        .collect()
}

/// Per engine, the ratios encrypted / clear of CPU per GB of its pairs, in order.
fn encrypted_ratios(report: &ServeBenchReport) -> Vec<(String, Vec<f64>)> {
    let mut out: Vec<(String, Vec<f64>)> = Vec::new();
    for (clear, enc) in encrypted_pairs(report) {
        let ratio = enc.cpu_s_per_gb / clear.cpu_s_per_gb.max(f64::MIN_POSITIVE);
        match out.iter_mut().find(|(e, _)| *e == clear.engine) {
            Some((_, v)) => v.push(ratio),
            None => out.push((clear.engine.clone(), vec![ratio])),
        }
    }
    out
}

/// Ingests the titles of [`prepare_volume`] again, encrypted (HLS AES-128 under a node key
/// made in the volume), as `bench-I-enc.ts`; their names.
fn prepare_encrypted(vol_dir: &Path, args: &ServeBenchConfig) -> anyhow::Result<Vec<String>> {
    let mut vol = Volume::open(vol_dir)?;
    let (node_key, _) =
        isnode_keys::node_key::NodeKey::load_or_create(&vol_dir.join(isnode_keys::NODE_KEY_FILE))?;
    let count = args.objects.clamp(1, args.streams.max(1));
    let mut names = Vec::new();
    for i in 0..count {
        let clear = title_bytes(args, i)?;
        let mut file = tempfile::tempfile_in(vol.tmp_dir()).context("a spool for the title")?;
        std::io::Write::write_all(&mut file, &clear).context("writing the spool")?;
        let name = format!("bench-{i}-enc.ts");
        let hints = isnode_protect::Hints {
            bitrate_bps: Some(args.bitrate_bps),
            content_type: Some("video/mp2t".into()),
        };
        let enc = isnode_protect::encrypt_file(
            &vol.tmp_dir(),
            (&file, clear.len() as u64),
            &hints,
            &node_key,
            isnode_protect::Keys::Random,
            &name,
        )?;
        isnode_protect::store(
            &mut vol,
            &name,
            isnode_protect::Existing::Refuse,
            enc,
            &mut |_| {},
        )?;
        names.push(name);
    }
    Ok(names)
}

/// The generated MPEG-TS of title `i`.
fn title_bytes(args: &ServeBenchConfig, i: usize) -> anyhow::Result<Vec<u8>> {
    let cfg = isnode_media::TsGenConfig {
        bitrate_bps: args.bitrate_bps,
        duration_s: args.seconds + 10.0,
        seed: i as u64 + 1,
    };
    let mut bytes = Vec::new();
    isnode_media::generate_ts(&cfg, &mut bytes)?;
    Ok(bytes)
}

fn prepare_volume(vol_dir: &Path, args: &ServeBenchConfig) -> anyhow::Result<Vec<String>> {
    let mut vol = Volume::create(vol_dir, VolumeParams::default(), None)?;
    let count = args.objects.clamp(1, args.streams.max(1));
    let mut names = Vec::new();
    for i in 0..count {
        let bytes = title_bytes(args, i)?;
        let name = format!("bench-{i}.ts");
        let opts = IngestOptions {
            name: name.clone(),
            bitrate_bps: args.bitrate_bps,
            content_type: "video/mp2t".into(),
            replace: false,
        };
        isnode_store::ingest(
            &mut vol,
            &opts,
            &mut bytes.as_slice(),
            bytes.len() as u64,
            &mut |_| {},
        )?;
        names.push(name);
    }
    Ok(names)
}

fn run_engine(
    vol_dir: &Path,
    host: &str,
    sink: &SinkCounter,
    engine: &str,
    objects: &[String],
    args: &ServeBenchConfig,
) -> anyhow::Result<EngineResult> {
    if let Some(pattern) = http::Pattern::from_engine(engine) {
        return run_http(vol_dir, engine, pattern, objects, args);
    }
    // The ifb sink swallows the token datagrams too: its sockets cannot echo them. The
    // token is a per-session cost; this benchmark measures the per-packet path.
    let (server, base) = server::start(&ServerSpec {
        extra: &["--validate-destination", "off"],
        ..ServerSpec::new(
            &args.isnode_exe,
            vol_dir,
            host,
            engine,
            args.cache_size_bytes,
        )
    })?;
    let receivers = Receivers::start(host, args.streams, sink)?;
    let sessions = Sessions::new(&base, KEEPALIVE_PERIOD);
    let ids = open_sessions(&sessions, host, &receivers.ports, objects)?;

    // Warm up, then measure.
    std::thread::sleep(Duration::from_secs(1));
    let pid = server.0.id();
    let cpu0 = process_cpu_s(pid)?;
    let sent0 = sent_by_server(&base)?;
    let at_sink0 = sink.read(&receivers)?;
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(args.seconds));
    let cpu1 = process_cpu_s(pid)?;
    let at_sink1 = sink.read(&receivers)?;
    let sent1 = sent_by_server(&base)?;
    let secs = t0.elapsed().as_secs_f64();

    for id in &ids {
        sessions.end(id);
    }
    drop(sessions);
    receivers.stop();
    drop(server);
    let delivered = at_sink1.since(at_sink0);
    let sent = sent1.since(sent0);
    let cpu = cpu1 - cpu0;
    let title_bytes = args.streams as f64 * args.bitrate_bps as f64 * secs / 8.0;
    if delivered.bytes == 0 {
        bail!(
            "nothing was delivered at the sink (the server counts {} bytes sent)",
            sent.bytes
        );
    }
    Ok(EngineResult {
        engine: engine.to_string(),
        streams: args.streams,
        seconds: secs,
        delivered_bytes: delivered.bytes,
        delivered_packets: delivered.packets,
        sent_by_server_bytes: sent.bytes,
        sent_by_server_packets: sent.packets,
        server_cpu_s: cpu,
        cpu_s_per_gb: cpu / (delivered.bytes as f64 / 1e9),
        cpu_s_per_title_gb: cpu / (title_bytes.min(delivered.bytes as f64) / 1e9),
        packets_per_s: delivered.packets as f64 / secs,
        delivered_bps: delivered.bytes as f64 * 8.0 / secs,
        ratio_to_traditional: None,
    })
}

/// An HTTP row: paced readers of the content route of a server (its UDP engine idle), the
/// server's CPU per GB of response bodies (loopback only: TCP does not go to the ifb sink).
fn run_http(
    vol_dir: &Path,
    engine: &str,
    pattern: http::Pattern,
    objects: &[String],
    args: &ServeBenchConfig,
) -> anyhow::Result<EngineResult> {
    if args.sink != Sink::Loopback {
        bail!("{engine} measures HTTP readers on loopback only (--sink loopback)");
    }
    let readers_limit = args.streams.max(1).to_string();
    let (server, base) = server::start(&ServerSpec {
        extra: &["--max-content-readers", &readers_limit],
        ..ServerSpec::new(
            &args.isnode_exe,
            vol_dir,
            "127.0.0.1",
            "gso",
            args.cache_size_bytes,
        )
    })?;
    let readers = http::Readers::start(&base, objects, args.streams, args.bitrate_bps, pattern)?;
    std::thread::sleep(Duration::from_secs(1));
    let pid = server.0.id();
    let (cpu0, bytes0, t0) = (process_cpu_s(pid)?, readers.bytes(), Instant::now());
    std::thread::sleep(Duration::from_secs_f64(args.seconds));
    let (cpu1, bytes1, secs) = (
        process_cpu_s(pid)?,
        readers.bytes(),
        t0.elapsed().as_secs_f64(),
    );
    readers.stop()?;
    drop(server);
    let (delivered, cpu) = (bytes1.saturating_sub(bytes0), cpu1 - cpu0);
    if delivered == 0 {
        bail!("the HTTP readers received nothing");
    }
    Ok(EngineResult {
        engine: engine.to_string(),
        streams: args.streams,
        seconds: secs,
        delivered_bytes: delivered,
        delivered_packets: 0,
        sent_by_server_bytes: delivered,
        sent_by_server_packets: 0,
        server_cpu_s: cpu,
        cpu_s_per_gb: cpu / (delivered as f64 / 1e9),
        cpu_s_per_title_gb: cpu / (delivered as f64 / 1e9),
        packets_per_s: 0.0,
        delivered_bps: delivered as f64 * 8.0 / secs,
        ratio_to_traditional: None,
    })
}

/// One UDP socket per stream; on loopback, with `UDP_GRO` set, two threads drain them and
/// count bytes and packets (a coalesced run counts each of its packets).
struct Receivers {
    ports: Vec<u16>,
    bytes: Arc<AtomicU64>,
    packets: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    /// Sockets nobody drains (ifb sink: the packets never reach them), kept bound.
    _idle: Vec<UdpSocket>,
}

impl Receivers {
    fn start(host: &str, streams: usize, sink: &SinkCounter) -> anyhow::Result<Receivers> {
        let sockets: Vec<UdpSocket> = (0..streams)
            .map(|_| {
                let s = UdpSocket::bind((host, 0))?;
                s.set_nonblocking(true)?;
                Ok(s)
            })
            .collect::<std::io::Result<_>>()?;
        let ports: Vec<u16> = sockets
            .iter()
            .map(|s| s.local_addr().map(|a| a.port()))
            .collect::<std::io::Result<_>>()?;
        let mut r = Receivers {
            ports,
            bytes: Arc::new(AtomicU64::new(0)),
            packets: Arc::new(AtomicU64::new(0)),
            stop: Arc::new(AtomicBool::new(false)),
            threads: Vec::new(),
            _idle: Vec::new(),
        };
        if !matches!(sink, SinkCounter::Receivers) {
            r._idle = sockets;
            return Ok(r);
        }
        // Whole GSO runs delivered as one datagram: what a real receiver would ask for.
        let refused = sockets.iter().filter(|s| !enable_gro(s)).count();
        if refused > 0 {
            eprintln!(
                "bench serve: UDP_GRO refused on {refused} receivers: they take plain datagrams"
            );
        }
        let per = sockets.len().div_ceil(2).max(1);
        let mut it = sockets.into_iter();
        loop {
            let chunk: Vec<UdpSocket> = it.by_ref().take(per).collect();
            if chunk.is_empty() {
                break;
            }
            let (bytes, packets, stop) = (r.bytes.clone(), r.packets.clone(), r.stop.clone());
            r.threads.push(std::thread::spawn(move || {
                drain(chunk, &bytes, &packets, &stop)
            }));
        }
        Ok(r)
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// The firewall mark of the keepalive datagrams: the ifb namespace routes them locally
/// (UDP to the client's address otherwise goes into the sink).
const KEEPALIVE_MARK: u32 = 0x15a;

/// Marks the keepalive socket's datagrams with [`KEEPALIVE_MARK`] (needs CAP_NET_ADMIN, as
/// the ifb sink does; without it the datagrams go unmarked, harmless on loopback).
fn mark(sock: &UdpSocket) {
    let v = libc::c_int::try_from(KEEPALIVE_MARK).unwrap_or(0);
    crate::udp::set_int_option(sock, libc::SOL_SOCKET, libc::SO_MARK, v);
}

/// Creates one session per receiver port, round robin over the objects, each kept alive
/// once a second (the server's default period); returns their ids. The keepalives are
/// datagrams from the clients' address (one socket, marked: the server checks the source
/// IP, not the port) when the server has a keepalive port, else HTTP over one persistent
/// connection; a server from before keepalive MACs (no `keepalive_version`) gets HTTP ones.
fn open_sessions(
    sessions: &Sessions,
    host: &str,
    ports: &[u16],
    objects: &[String],
) -> anyhow::Result<Vec<String>> {
    let mut socket = None;
    let mut ids = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        let (v, id) = sessions.create(&objects[i % objects.len()], *port)?;
        let secret = v["secret"].as_str().context("session secret")?.to_string();
        let key = isnode_proto::auth::parse_key_hex(&secret).context("session secret")?;
        let keepalive_port = v["keepalive_port"]
            .as_u64()
            .filter(|_| v["keepalive_version"].as_u64().is_some())
            .and_then(|p| u16::try_from(p).ok());
        let route = match keepalive_port {
            Some(port) => Route::Udp {
                socket: keepalive_socket(&mut socket, host)?,
                to: SocketAddr::new(crate::udp::server_ip(sessions.base())?, port),
            },
            None => Route::Http,
        };
        sessions.keep(Live {
            id: id.clone(),
            secret,
            datagrams: Datagrams::mac(key),
            route,
        });
        ids.push(id);
    }
    Ok(ids)
}

/// The keepalive socket of every session, bound to the clients' address and marked, made
/// by the first that needs it.
fn keepalive_socket(
    socket: &mut Option<Arc<UdpSocket>>,
    host: &str,
) -> anyhow::Result<Arc<UdpSocket>> {
    if let Some(s) = socket {
        return Ok(s.clone());
    }
    let sock = UdpSocket::bind((host, 0)).context("binding the keepalive socket")?;
    mark(&sock);
    Ok(socket.insert(Arc::new(sock)).clone())
}

/// Receives one datagram (a coalesced run or a plain datagram) into `buf`: its bytes and
/// the packets it holds.
fn recv_datagram(socket: &UdpSocket, buf: &mut [u8]) -> std::io::Result<Count> {
    let (len, segment_size) = recv_gro(socket, buf)?;
    Ok(Count {
        bytes: len as u64,
        packets: packets_in(len, segment_size),
    })
}

fn drain(sockets: Vec<UdpSocket>, bytes: &AtomicU64, packets: &AtomicU64, stop: &AtomicBool) {
    let mut buf = vec![0u8; 65536];
    while !stop.load(Ordering::Relaxed) {
        let mut any = false;
        for s in &sockets {
            // Bounded per socket per pass so every socket gets its turn.
            for _ in 0..256 {
                match recv_datagram(s, &mut buf) {
                    Ok(got) => {
                        bytes.fetch_add(got.bytes, Ordering::Relaxed);
                        packets.fetch_add(got.packets, Ordering::Relaxed);
                        any = true;
                    }
                    Err(_) => break,
                }
            }
        }
        if !any {
            std::thread::sleep(Duration::from_micros(500));
        }
    }
}

/// Bytes and packets, cumulative.
#[derive(Clone, Copy, Debug)]
struct Count {
    bytes: u64,
    packets: u64,
}

impl Count {
    /// What was added since `earlier` (counters never go back; saturating anyway).
    fn since(self, earlier: Count) -> Count {
        Count {
            bytes: self.bytes.saturating_sub(earlier.bytes),
            packets: self.packets.saturating_sub(earlier.packets),
        }
    }
}

/// Where delivered bytes are counted.
enum SinkCounter {
    /// By this process's loopback receivers.
    Receivers,
    /// By the ifb device inside the benchmark namespace.
    Ifb(IfbSink),
}

impl SinkCounter {
    /// UDP payload bytes and packets delivered at the sink so far.
    fn read(&self, receivers: &Receivers) -> anyhow::Result<Count> {
        match self {
            SinkCounter::Receivers => Ok(Count {
                bytes: receivers.bytes.load(Ordering::Relaxed),
                packets: receivers.packets.load(Ordering::Relaxed),
            }),
            SinkCounter::Ifb(ifb) => ifb.read(),
        }
    }
}

/// The ifb device's counters. Packets routed into an ifb device (rather than
/// redirected to it by tc) are counted as received (`rx_packets`, `rx_bytes`:
/// the whole frame, headers included) and dropped; its `tx_*` counters stay 0.
struct IfbSink {
    /// Bytes of headers (link, IP, UDP) the device counts per frame on top of the UDP payload.
    header_bytes: u64,
}

/// UDP payload of each calibration probe, and how many are sent.
const PROBE_PAYLOAD_BYTES: usize = 1000;
const PROBES: u64 = 8;

impl IfbSink {
    /// Learns the per-frame header bytes the device counts, from a few probe datagrams
    /// of known length sent to the client address before any server runs.
    fn calibrate() -> anyhow::Result<IfbSink> {
        let socket = UdpSocket::bind("0.0.0.0:0").context("binding the calibration socket")?;
        let raw0 = Self::raw()?;
        for _ in 0..PROBES {
            socket
                .send_to(&[0u8; PROBE_PAYLOAD_BYTES], (NETNS_CLIENT_IP, 9))
                .context("sending a calibration probe to the sink")?;
        }
        let d = Self::raw()?.since(raw0);
        if d.packets != PROBES {
            bail!(
                "the ifb sink counted {} frames for {PROBES} calibration probes; \
                 something else sends to it, so its counters cannot be trusted",
                d.packets
            );
        }
        let payload = PROBES * PROBE_PAYLOAD_BYTES as u64;
        let header_bytes = d
            .bytes
            .checked_sub(payload)
            .context("the ifb sink counted fewer bytes than the probes' payload")?
            / PROBES;
        eprintln!(
            "bench serve: ifb sink counts {header_bytes} header bytes per frame (calibrated)"
        );
        Ok(IfbSink { header_bytes })
    }

    /// The device's received frames and bytes (headers included).
    fn raw() -> anyhow::Result<Count> {
        let stat = |name: &str| -> anyhow::Result<u64> {
            let path = format!("/sys/class/net/{IFB_DEV}/statistics/{name}");
            let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
            text.trim()
                .parse()
                .with_context(|| format!("parsing {path}: {text:?}"))
        };
        Ok(Count {
            bytes: stat("rx_bytes")?,
            packets: stat("rx_packets")?,
        })
    }

    /// UDP payload bytes and frames that reached the device.
    fn read(&self) -> anyhow::Result<Count> {
        Ok(self.payload(Self::raw()?))
    }

    /// UDP payload in what the device counted: each frame less its headers.
    fn payload(&self, raw: Count) -> Count {
        Count {
            bytes: raw.bytes.saturating_sub(raw.packets * self.header_bytes),
            packets: raw.packets,
        }
    }
}

/// Bytes and packets the server says it sent (its /metrics): "sent by the server",
/// not a measurement at the sink.
fn sent_by_server(base: &str) -> anyhow::Result<Count> {
    let text = ureq::get(format!("{base}/metrics"))
        .call()?
        .body_mut()
        .read_to_string()?;
    let sum = |metric: &str| -> u64 {
        text.lines()
            .filter(|l| l.starts_with(metric) && !l.starts_with('#'))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    };
    Ok(Count {
        bytes: sum("isnode_bytes_sent_total"),
        packets: sum("isnode_packets_sent_total"),
    })
}

/// The sink device created inside the benchmark namespace.
const IFB_DEV: &str = "isnb0";

/// Sets up a namespace whose UDP to the client goes into an ifb sink, re-runs this command inside, and tears it down.
fn run_in_netns(cfg: &ServeBenchConfig) -> anyhow::Result<ServeBenchReport> {
    let ns = format!("isnode-bench-{}", std::process::id());
    let sh = |cmd: &str| -> anyhow::Result<()> {
        let status = Command::new("sh")
            .arg("-c")
            .arg(cmd)
            .status()
            .with_context(|| format!("running {cmd}"))?;
        if !status.success() {
            bail!("`{cmd}` failed ({status}); the ifb sink needs root and iproute2");
        }
        Ok(())
    };
    let x = format!("ip netns exec {ns}");
    sh(&format!("ip netns add {ns}"))?;
    let report_file = tempfile::NamedTempFile::new().context("creating the report file")?;
    let result = (|| -> anyhow::Result<ServeBenchReport> {
        sh(&format!("{x} ip link set lo up"))?;
        sh(&format!("{x} ip link add {IFB_DEV} type ifb"))?;
        // No IPv6 on the sink (router solicitations would add frames to its counters).
        let _ = sh(&format!(
            "{x} sh -c 'echo 1 > /proc/sys/net/ipv6/conf/{IFB_DEV}/disable_ipv6' 2>/dev/null"
        ));
        sh(&format!("{x} ip link set {IFB_DEV} up"))?;
        sh(&format!("{x} ip addr add {NETNS_CLIENT_IP}/32 dev lo"))?;
        sh(&format!(
            "{x} ip route add {NETNS_CLIENT_IP}/32 dev {IFB_DEV} table 100"
        ))?;
        // UDP to the client goes to the sink; everything else (the HTTP control, and the
        // keepalive datagrams, marked) stays local.
        sh(&format!(
            "{x} ip rule add pref 5 fwmark {KEEPALIVE_MARK} lookup local"
        ))?;
        sh(&format!(
            "{x} ip rule add pref 10 ipproto udp to {NETNS_CLIENT_IP} lookup 100"
        ))?;
        sh(&format!("{x} ip rule del pref 0"))?;
        sh(&format!("{x} ip rule add pref 100 lookup local"))?;
        let segmentation = if cfg.device_segmentation {
            "by the device (offload on: what a NIC with UDP segmentation offload costs)"
        } else if sh(&format!(
            "{x} ethtool -K {IFB_DEV} tx-udp-segmentation off >/dev/null 2>&1"
        ))
        .is_ok()
        {
            "in software (offload off: what a NIC without UDP segmentation offload costs)"
        } else {
            "by the device (ethtool missing, offload left on)"
        };
        eprintln!("bench serve: ifb sink in namespace {ns}; GSO runs segmented {segmentation}");
        // Re-run this same command inside the namespace; it reports through a file.
        let status = Command::new("ip")
            .args(["netns", "exec", &ns])
            .arg(&cfg.isnode_exe)
            .args(std::env::args_os().skip(1))
            .env(NETNS_ENV, &ns)
            .env(REPORT_ENV, report_file.path())
            .stdout(Stdio::null())
            .status()
            .context("running the benchmark inside the namespace")?;
        if !status.success() {
            bail!("the benchmark inside the namespace failed ({status})");
        }
        let text = std::fs::read_to_string(report_file.path()).context("reading the report")?;
        Ok(serde_json::from_str(&text)?)
    })();
    let _ = sh(&format!("ip netns del {ns}"));
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn a_coalesced_datagram_counts_its_packets() {
        assert_eq!(packets_in(32 * 1436, Some(1436)), 32);
        assert_eq!(
            packets_in(31 * 1436 + 500, Some(1436)),
            32,
            "a shorter last"
        );
        assert_eq!(packets_in(1436, Some(1436)), 1);
        assert_eq!(packets_in(1436, None), 1, "a plain datagram");
        assert_eq!(packets_in(0, None), 1, "an empty datagram");
        assert_eq!(packets_in(1436, Some(0)), 1);
    }

    #[test]
    fn loopback_receivers_count_each_packet_of_a_gso_run() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let gro = enable_gro(&rx);
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let size: libc::c_int = 1436;
        // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from a valid c_int (UDP_SEGMENT).
        #[allow(unsafe_code)]
        let gso = unsafe {
            libc::setsockopt(
                tx.as_raw_fd(),
                libc::SOL_UDP,
                103,
                (&raw const size).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        } == 0;
        let len = 20 * 1436 + 100;
        if gso {
            tx.send_to(&vec![7u8; len], rx.local_addr().unwrap())
                .unwrap();
        } else {
            for c in vec![7u8; len].chunks(1436) {
                tx.send_to(c, rx.local_addr().unwrap()).unwrap();
            }
        }
        let mut buf = vec![0u8; 65536];
        let mut total = Count {
            bytes: 0,
            packets: 0,
        };
        let mut datagrams = 0;
        for _ in 0..1000 {
            match recv_datagram(&rx, &mut buf) {
                Ok(c) => {
                    total.bytes += c.bytes;
                    total.packets += c.packets;
                    datagrams += 1;
                }
                Err(_) if total.packets < 21 => std::thread::sleep(Duration::from_millis(2)),
                Err(_) => break,
            }
        }
        assert_eq!((total.bytes, total.packets), (len as u64, 21));
        if gro && gso {
            assert!(
                datagrams < 21,
                "the run came coalesced ({datagrams} datagrams)"
            );
        }
    }

    #[test]
    fn ifb_payload_is_frames_less_their_headers() {
        // 10 datagrams of 1436 bytes, counted with 14 + 20 + 8 header bytes each.
        let sink = IfbSink { header_bytes: 42 };
        let raw = Count {
            bytes: 10 * (1436 + 42),
            packets: 10,
        };
        let got = sink.payload(raw);
        assert_eq!((got.bytes, got.packets), (14_360, 10));
    }

    #[test]
    fn the_table_says_where_each_figure_was_counted() {
        let row = EngineResult {
            engine: "gso".into(),
            streams: 2,
            seconds: 2.0,
            delivered_bytes: 1_000_000,
            delivered_packets: 700,
            sent_by_server_bytes: 1_100_000,
            sent_by_server_packets: 770,
            server_cpu_s: 0.01,
            cpu_s_per_gb: 10.0,
            cpu_s_per_title_gb: 11.0,
            packets_per_s: 350.0,
            delivered_bps: 4e6,
            ratio_to_traditional: None,
        };
        let table = format_table(&ServeBenchReport {
            sink: Sink::Ifb,
            bitrate_bps: 1_000_000,
            results: vec![row],
        });
        assert!(
            table.contains("server_sent_MB") && table.contains("1.1"),
            "{table}"
        );
        assert!(
            table.contains("at the sink, counted by the ifb device"),
            "{table}"
        );
        assert!(table.contains("sent by the server"), "{table}");
    }
}
