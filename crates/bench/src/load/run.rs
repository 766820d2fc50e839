//! One level of load against one server, and the ramp that finds the most valid streams.

use std::path::Path;
use std::time::{Duration, Instant};

use super::config::LoadBenchConfig;
use super::confine::DiskAdmission;
use super::isnode::IsnodeServer;
use super::net::Net;
use super::nginx::{NginxServer, NginxVariant};
use super::receivers::{Conn, Hls, ReceiverPool, Stream};
use super::report::{level_result, Judged, LevelResult, Measured, ServerIo, ServerResult, Tally};
use super::title::Title;
use super::tls::{TlsPair, Wire};
use super::validity::{judge, Nominal, StreamRecord};
use super::workload::{schedule, WorkloadConfig};
use crate::harness::process::{process_cpu_s, process_read_bytes, process_rss_bytes};
use crate::tmpfs::HugeTmpfs;

/// Receiver threads.
const RECEIVER_THREADS: usize = 2;
/// A window may fall short by this share of the rate (the receivers' timing).
const SLACK_FRACTION: f64 = 0.02;
/// Packets of the largest datagram isnode sends (a `gso` send joins the due burst with the
/// start of the session's next ones, up to one 64 KiB datagram of 45 packets: that many may
/// leave before their window).
const ISNODE_BURST_PACKETS: f64 = 45.0;
/// Seconds between two levels (sessions end, sockets close).
const PAUSE_S: f64 = 1.0;

/// The `--engines` kind that loads isnode's HTTP content path (`GET /o/NAME`) with the
/// paced TCP readers nginx gets, instead of UDP sessions.
pub(crate) const HTTP_ENGINE: &str = "http";
/// The `--engines` kind of HLS players: the playlist, then its segments' byte ranges on
/// one kept-alive connection, read by the same paced readers.
pub(crate) const HLS_ENGINE: &str = "hls";
/// The `--engines` kind of `http` over TLS (the server started with the run's certificate).
pub(crate) const HTTPS_ENGINE: &str = "https";
/// The `--engines` kind of `hls` over TLS.
pub(crate) const HLS_TLS_ENGINE: &str = "hls-tls";
/// The UDP engine an `http` or `hls` server runs (it streams nothing in that run).
const HTTP_SERVER_ENGINE: &str = "gso";
/// `--max-content-readers` of an `http` server: more than any level asks, so that the
/// level measures the content path, not its admission.
const HTTP_MAX_READERS: &str = "100000";

/// A server under test.
enum Sut<'a> {
    Isnode(&'a IsnodeServer),
    /// isnode's content over HTTP, read by the paced TCP readers as `Player` does.
    IsnodeHttp(&'a IsnodeServer, Player),
    Nginx(&'a NginxServer),
}

/// How an HTTP client of isnode asks for a title.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Player {
    /// One `GET /o/NAME` of the whole title (a progressive download).
    Progressive,
    /// An HLS player (its playlist, then its segments' byte ranges).
    Hls,
}

/// A stream the server accepted.
struct Accepted {
    conn: Conn,
    nominal: Nominal,
    /// Title bytes per byte the receiver counts.
    title_per_counted: f64,
    /// The isnode session to end.
    session: Option<String>,
}

impl Sut<'_> {
    fn pids(&self) -> Vec<u32> {
        match self {
            Sut::Isnode(s) | Sut::IsnodeHttp(s, _) => vec![s.child.0.id()],
            Sut::Nginx(s) => s.pids(),
        }
    }

    fn open(&self, title: &Title, cfg: &LoadBenchConfig) -> anyhow::Result<Accepted> {
        match self {
            Sut::Isnode(s) => {
                let rate = title.bitrate_bps as f64 / 8.0;
                let o = s.open(&title.name)?;
                let wire = o.send_rate_bps as f64 / 8.0;
                Ok(Accepted {
                    conn: o.conn,
                    nominal: Nominal {
                        rate_bytes_per_s: wire,
                        startup_buffer_s: cfg.startup_buffer_s,
                        slack_bytes: SLACK_FRACTION * wire
                            + ISNODE_BURST_PACKETS * o.packet_bytes as f64,
                    },
                    title_per_counted: rate / wire.max(1.0),
                    session: Some(o.id),
                })
            }
            Sut::IsnodeHttp(s, Player::Progressive) => {
                Ok(http_accepted(s.get(&title.name)?, None, title, cfg))
            }
            Sut::IsnodeHttp(s, Player::Hls) => {
                let (stream, hls) = s.hls(&title.name)?;
                Ok(http_accepted(stream, Some(hls), title, cfg))
            }
            Sut::Nginx(s) => Ok(http_accepted(s.get(&title.name)?, None, title, cfg)),
        }
    }

    fn close(&self, id: &str) {
        if let Sut::Isnode(s) = self {
            s.close(id);
        }
    }

    /// The server's own counters now (isnode's `/metrics`; nothing for nginx).
    fn counters(&self) -> Option<super::isnode::Counters> {
        match self {
            Sut::Isnode(s) | Sut::IsnodeHttp(s, _) => s.counters().ok(),
            Sut::Nginx(_) => None,
        }
    }
}

/// A paced HTTP reader of `title` on `stream` (its first request sent; `hls`: the segments
/// an HLS player asks for next): the same client for nginx and for isnode's content path.
fn http_accepted(stream: Wire, hls: Option<Hls>, title: &Title, cfg: &LoadBenchConfig) -> Accepted {
    let rate = title.bitrate_bps as f64 / 8.0;
    Accepted {
        conn: Conn::Http {
            stream,
            title: title.bytes.clone(),
            head: Some(Vec::new()),
            body_bytes: 0,
            rate_bytes_per_s: rate,
            startup_bytes: rate * cfg.startup_buffer_s,
            cap_bytes: rate * cfg.startup_buffer_s * 2.0,
            playing_since: None,
            hls,
        },
        nominal: Nominal {
            rate_bytes_per_s: rate,
            startup_buffer_s: cfg.startup_buffer_s,
            slack_bytes: SLACK_FRACTION * rate,
        },
        title_per_counted: 1.0,
        session: None,
    }
}

/// How a player's bytes travel: whether an engine kind needs the run's certificate.
pub(crate) fn engine_needs_tls(kind: &str) -> bool {
    matches!(kind, HTTPS_ENGINE | HLS_TLS_ENGINE)
}

/// Ramps isnode with `engine` on the volume `vol`. `ENGINE@PATH` runs that engine of
/// another `isnode` binary (a before/after comparison in one run); `ENGINE/BYTES` (the
/// volume's block length, [`EngineSpec`]) is for the caller, which chose `vol`. `https`
/// and `hls-tls` serve over TLS with `tls`, the run's certificate.
pub(crate) fn ramp_isnode(
    cfg: &LoadBenchConfig,
    (net, tls): (&Net, Option<&TlsPair>),
    vol: &Path,
    engine: &str,
    titles: &[Title],
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<ServerResult> {
    progress(&format!("{engine}: starting isnode serve"));
    let spec = EngineSpec::parse(engine)?;
    let exe = spec.exe.unwrap_or(cfg.isnode_exe.as_path());
    let kind = spec.kind;
    // Declared before the server, so the group outlives the server's processes.
    let group = cfg.confine.group_for(&spec.label(), vol)?;
    let pool = cfg.confine.isnode_pool_bytes(cfg.cache_size_bytes)?;
    let disk_bps = match (cfg.disk_admission, cfg.confine.disk_read_limit_bps) {
        (DiskAdmission::AtReadLimit { percent }, Some(bytes_per_s)) => {
            Some((bytes_per_s.saturating_mul(8) / 100 * u64::from(percent)).to_string())
        }
        _ => None,
    };
    let mut extra: Vec<&str> = match &disk_bps {
        Some(bps) => vec!["--disk-read-bps", bps],
        None => Vec::new(),
    };
    let player = match kind {
        HTTP_ENGINE | HTTPS_ENGINE => Some(Player::Progressive),
        HLS_ENGINE | HLS_TLS_ENGINE => Some(Player::Hls),
        _ => None,
    };
    let (pool, mirror) = http_memory(pool, player, cfg.confine.memory_limit_bytes);
    let mirror = mirror.map(|m| m.to_string());
    let tls = match (engine_needs_tls(kind), tls) {
        (true, Some(t)) => Some(t),
        (true, None) => anyhow::bail!("engine {engine}: no certificate made for the run"),
        (false, _) => None,
    };
    if let Some(m) = &mirror {
        extra.extend(["--http-mirror-bytes", m]);
    }
    // Declared before the server, so that it is unmounted after the server stops.
    let huge = huge_mirror(&spec, player.is_some(), vol, mirror.as_deref())?;
    let huge_dir = huge
        .as_ref()
        .map(|t| t.dir().to_string_lossy().into_owned());
    if let Some(d) = &huge_dir {
        extra.extend(["--http-mirror-dir", d]);
    }
    let serve_engine = if player.is_some() {
        extra.extend(["--max-content-readers", HTTP_MAX_READERS]);
        HTTP_SERVER_ENGINE
    } else {
        kind
    };
    let server = IsnodeServer::start(
        vol,
        exe,
        (serve_engine, pool),
        &extra,
        net,
        group.as_ref(),
        tls,
    )?;
    // The server runs in the root namespace; the clients (this thread from here on, the
    // sockets and threads it makes) on the other side.
    let _inside = net.enter()?;
    let sut = match player {
        Some(p) => Sut::IsnodeHttp(&server, p),
        None => Sut::Isnode(&server),
    };
    ramp(cfg, &sut, engine, titles, progress)
}

/// The pool and HTTP mirror of an HTTP server under a memory limit: the room the limit
/// leaves, less [`HTTP_HEADROOM_BYTES`], split a quarter to the pool (blocks only pass
/// through it on their way into the mirror) and three quarters to the mirror (what players
/// are sent from); `None` for the mirror (its default) without a limit, none (0) for a
/// UDP engine under one (nothing reads the mirror there: its budget is not the server's).
fn http_memory(pool: u64, player: Option<Player>, limit: Option<u64>) -> (u64, Option<u64>) {
    match (player, limit) {
        (Some(_), Some(_)) => {
            let room = pool.saturating_sub(HTTP_HEADROOM_BYTES).max(16 << 20);
            let pool_share = (room / 4).max(8 << 20).min(room);
            (pool_share, Some(room - pool_share))
        }
        (None, Some(_)) => (pool, Some(0)),
        (_, None) => (pool, None),
    }
}

/// What an HTTP server needs beside the headroom every server gets: its connections'
/// buffers and tasks. Measured: with 38 readers under a 128 MiB limit the server held 45 MB
/// of anonymous memory with a 26 MiB pool, and the kernel's OOM killer ended it once the
/// mirror (the other 78 MiB) filled; its level then delivered nothing.
const HTTP_HEADROOM_BYTES: u64 = 16 << 20;

/// Whether an engine serves the titles clear or encrypted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Titles {
    /// As generated.
    Clear,
    /// Encrypted at ingest (HLS AES-128, as `ingest --encrypt`): the same titles' ciphertext.
    Encrypted,
}

/// The suffix of an engine that serves the titles encrypted.
pub(crate) const ENCRYPTED_SUFFIX: &str = "+enc";

/// The suffix of an HTTP engine whose server keeps its HTTP mirror in huge pages.
pub(crate) const HUGE_SUFFIX: &str = "+huge";

/// Where an HTTP server's mirror keeps its files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MirrorPages {
    /// `memfd`s (the server's default).
    Memfd,
    /// A tmpfs with huge pages the benchmark mounts for the server (`--http-mirror-dir`).
    Huge,
}

/// The tmpfs of a `+huge` HTTP server beside volume `vol` (`None` for the others): room for
/// its mirror's budget (`mirror`, bytes; the server's default 256 MiB) and 64 MiB more (an
/// object's last huge page is partly used).
fn huge_mirror(
    spec: &EngineSpec<'_>,
    http: bool,
    vol: &Path,
    mirror: Option<&str>,
) -> anyhow::Result<Option<HugeTmpfs>> {
    match (spec.mirror, http) {
        (MirrorPages::Memfd, _) => Ok(None),
        (MirrorPages::Huge, false) => {
            anyhow::bail!("engine {}: +huge is for HTTP engines", spec.kind)
        }
        (MirrorPages::Huge, true) => {
            let dir = vol.with_file_name(format!("mirror-{}", std::process::id()));
            let budget = mirror
                .and_then(|m| m.parse::<u64>().ok())
                .unwrap_or(256 << 20);
            Ok(Some(HugeTmpfs::mount(&dir, budget + (64 << 20))?))
        }
    }
}

/// One `--engines` entry: `ENGINE[+enc][+huge][/BLOCK_BYTES][@PATH]`: the engine, whether it
/// serves the titles encrypted, whether its HTTP mirror is in huge pages, the block length
/// of the volume it serves (default: the store's), and the `isnode` binary (default: this
/// one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EngineSpec<'a> {
    /// The `--engine` of `isnode serve`.
    pub(crate) kind: &'a str,
    /// Clear or encrypted titles.
    pub(crate) titles: Titles,
    /// Where its HTTP mirror keeps its files.
    pub(crate) mirror: MirrorPages,
    /// The volume's block length in bytes, if not the default.
    pub(crate) block_len: Option<u32>,
    /// Another `isnode` binary.
    pub(crate) exe: Option<&'a Path>,
}

impl<'a> EngineSpec<'a> {
    /// Parses `ENGINE[+enc][+huge][/BLOCK_BYTES][@PATH]` (the suffixes in either order).
    pub(crate) fn parse(engine: &'a str) -> anyhow::Result<EngineSpec<'a>> {
        let (head, exe) = match engine.split_once('@') {
            Some((head, exe)) => (head, Some(Path::new(exe))),
            None => (engine, None),
        };
        let (kind, block_len) = match head.split_once('/') {
            Some((kind, block)) => {
                let b: u32 = block.parse().map_err(|e| {
                    anyhow::anyhow!("engine {engine:?}: block length {block:?}: {e}")
                })?;
                (kind, Some(b))
            }
            None => (head, None),
        };
        let (mut kind, mut titles, mut mirror) = (kind, Titles::Clear, MirrorPages::Memfd);
        for _ in 0..2 {
            if let Some(k) = kind.strip_suffix(ENCRYPTED_SUFFIX) {
                (kind, titles) = (k, Titles::Encrypted);
            }
            if let Some(k) = kind.strip_suffix(HUGE_SUFFIX) {
                (kind, mirror) = (k, MirrorPages::Huge);
            }
        }
        Ok(EngineSpec {
            kind,
            titles,
            mirror,
            block_len,
            exe,
        })
    }

    /// A name fit for a cgroup directory: the engine and the block length.
    pub(crate) fn label(&self) -> String {
        let enc = match self.titles {
            Titles::Clear => "",
            Titles::Encrypted => "-enc",
        };
        match self.block_len {
            Some(b) => format!("{}{enc}-{b}", self.kind),
            None => format!("{}{enc}", self.kind),
        }
    }
}

/// Ramps nginx serving the titles under `dir` (`tls`: the run's certificate, for
/// [`NginxVariant::Tls`]).
pub(crate) fn ramp_nginx(
    cfg: &LoadBenchConfig,
    (net, tls): (&Net, Option<&TlsPair>),
    dir: &Path,
    variant: NginxVariant,
    titles: &[Title],
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<ServerResult> {
    let name = variant.name();
    progress(&format!("{name}: starting nginx"));
    let group = cfg.confine.group_for(name, dir)?;
    let server = NginxServer::start(dir, variant, net, group.as_ref(), tls)?;
    let _inside = net.enter()?;
    ramp(cfg, &Sut::Nginx(&server), name, titles, progress)
}

/// Doubles the load from `cfg.streams` while levels pass (up to `cfg.max_streams`), then
/// bisects between the last passing and the first failing level.
fn ramp(
    cfg: &LoadBenchConfig,
    sut: &Sut<'_>,
    name: &str,
    titles: &[Title],
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<ServerResult> {
    let mut levels: Vec<LevelResult> = Vec::new();
    let (mut good, mut bad): (Option<usize>, Option<usize>) = (None, None);
    let mut n = cfg.streams.max(1);
    let mut bisections = 0;
    loop {
        let r = level(cfg, sut, name, n, titles, progress)?;
        if r.passed {
            good = Some(good.map_or(n, |g| g.max(n)));
        } else {
            bad = Some(bad.map_or(n, |b| b.min(n)));
        }
        levels.push(r);
        std::thread::sleep(Duration::from_secs_f64(PAUSE_S));
        n = match bad {
            None if n < cfg.max_streams => (n * 2).min(cfg.max_streams),
            None => break,
            Some(b) => {
                let lo = good.unwrap_or(0);
                if bisections >= cfg.bisect_steps || b - lo <= (b / 16).max(1) {
                    break;
                }
                bisections += 1;
                (lo + b) / 2
            }
        };
    }
    Ok(ServerResult::new(name, levels))
}

/// Runs one level of `n` concurrent streams against `sut`.
fn level(
    cfg: &LoadBenchConfig,
    sut: &Sut<'_>,
    name: &str,
    n: usize,
    titles: &[Title],
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<LevelResult> {
    let mut wl = WorkloadConfig::new(titles.len(), cfg.title_s, n, cfg.seconds);
    wl.seed = cfg.seed;
    let plans = schedule(&wl);
    let pids = sut.pids();
    let me = std::process::id();
    let mut pool = ReceiverPool::start(RECEIVER_THREADS);
    let counters0 = sut.counters();
    let read0 = read_of(&pids);
    let cpu0 = cpu_of(&pids);
    let me0 = process_cpu_s(me)?;
    let t0 = Instant::now();
    let horizon = t0 + Duration::from_secs_f64(cfg.seconds);
    let mut tally = Tally::new(plans.len());
    let mut closes: Vec<(Instant, String)> = Vec::new();
    for (i, p) in plans.iter().enumerate() {
        wait_until(t0 + Duration::from_secs_f64(p.start_s), &mut closes, sut);
        progress(&format!(
            "{name}: {n} streams, {:.0}/{:.0} s, {} sessions",
            t0.elapsed().as_secs_f64(),
            cfg.seconds,
            i + 1
        ));
        let Some(title) = titles.get(p.title) else {
            continue;
        };
        let requested = Instant::now();
        let end = (requested + Duration::from_secs_f64(p.length_s)).min(horizon);
        match sut.open(title, cfg) {
            Ok(a) => {
                tally.accept(i, a.nominal, a.title_per_counted);
                if let Some(id) = a.session {
                    closes.push((end, id));
                }
                pool.add(Stream::new(i, requested, end, a.conn));
            }
            Err(e) => tally.refuse(format!("{e:#}")),
        }
    }
    wait_until(horizon, &mut closes, sut);
    let seconds = t0.elapsed().as_secs_f64();
    let cpu = cpu_of(&pids) - cpu0;
    let proc_read_bytes = read_of(&pids).zip(read0).map(|(b, a)| b.saturating_sub(a));
    let counters = sut.counters().zip(counters0).map(|(b, a)| b.since(&a));
    let rss: u64 = pids.iter().filter_map(|&p| process_rss_bytes(p).ok()).sum();
    let records = pool.stop();
    let receivers_cpu = process_cpu_s(me)? - me0;
    for (_, id) in closes {
        sut.close(&id);
    }
    let m = Measured {
        streams: n,
        pass_fraction: cfg.pass_fraction,
        seconds,
        server_cpu_s: cpu,
        receivers_cpu_s: receivers_cpu,
        server_rss_bytes: rss,
        io: ServerIo {
            cache_hits: counters.map(|c| c.cache_hits),
            cache_misses: counters.map(|c| c.cache_misses),
            cache_read_bytes: counters.map(|c| c.cache_read_bytes),
            proc_read_bytes,
        },
    };
    Ok(level_result(&m, &tally, judged(&tally, records)))
}

/// Judges every record against its stream's nominal, with the bytes each counted.
fn judged(tally: &Tally, records: Vec<(usize, StreamRecord)>) -> Vec<Judged> {
    records
        .into_iter()
        .filter_map(|(i, rec)| {
            let (nominal, per) = tally.of(i)?;
            let bytes: u64 = rec.tick_bytes.iter().sum();
            Some(Judged {
                verdict: judge(&rec, &nominal),
                title_bytes: bytes as f64 * per,
                wire_bytes: bytes,
                packets: rec.packets,
                receives: rec.receives,
            })
        })
        .collect()
}

/// Sleeps until `at`, ending the isnode sessions whose time has come meanwhile.
fn wait_until(at: Instant, closes: &mut Vec<(Instant, String)>, sut: &Sut<'_>) {
    loop {
        let now = Instant::now();
        let mut i = 0;
        while i < closes.len() {
            if closes.get(i).is_some_and(|(t, _)| *t <= now) {
                let (_, id) = closes.swap_remove(i);
                sut.close(&id);
            } else {
                i += 1;
            }
        }
        if now >= at {
            return;
        }
        let next = closes.iter().map(|(t, _)| *t).min().unwrap_or(at).min(at);
        std::thread::sleep(
            next.saturating_duration_since(now)
                .min(Duration::from_millis(50)),
        );
    }
}

fn cpu_of(pids: &[u32]) -> f64 {
    pids.iter().filter_map(|&p| process_cpu_s(p).ok()).sum()
}

/// Bytes the processes caused to be read from storage (None if /proc did not say, for any).
fn read_of(pids: &[u32]) -> Option<u64> {
    pids.iter().map(|&p| process_read_bytes(p).ok()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_specs_name_the_engine_block_length_and_binary() {
        let s = EngineSpec::parse("gso/65536@/tmp/old/isnode").unwrap();
        assert_eq!(s.kind, "gso");
        assert_eq!(s.block_len, Some(65536));
        assert_eq!(s.exe, Some(Path::new("/tmp/old/isnode")));
        assert_eq!(s.label(), "gso-65536");
        let s = EngineSpec::parse("sendfile").unwrap();
        assert_eq!((s.kind, s.block_len, s.exe), ("sendfile", None, None));
        assert_eq!(s.label(), "sendfile");
        assert_eq!(s.titles, Titles::Clear);
        let s = EngineSpec::parse("gso+enc/65536").unwrap();
        assert_eq!((s.kind, s.titles), ("gso", Titles::Encrypted));
        assert_eq!(s.label(), "gso-enc-65536");
        for e in ["http+huge+enc@/x", "http+enc+huge"] {
            let s = EngineSpec::parse(e).unwrap();
            assert_eq!(
                (s.kind, s.titles, s.mirror),
                ("http", Titles::Encrypted, MirrorPages::Huge)
            );
        }
        assert_eq!(
            EngineSpec::parse("http").unwrap().mirror,
            MirrorPages::Memfd
        );
        assert!(EngineSpec::parse("gso/64k").is_err());
    }

    #[test]
    fn an_http_server_under_a_limit_keeps_its_headroom() {
        let pool = 104 << 20;
        let (p, m) = http_memory(pool, Some(Player::Progressive), Some(128 << 20));
        let m = m.expect("a mirror budget");
        assert_eq!(p + m + HTTP_HEADROOM_BYTES, pool);
        assert_eq!((p, m), (22 << 20, 66 << 20));
        assert_eq!(http_memory(pool, None, Some(128 << 20)), (pool, Some(0)));
        assert_eq!(http_memory(pool, Some(Player::Hls), None), (pool, None));
    }
}
