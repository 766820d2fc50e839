//! The command line of `isnode play`.

use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::str::FromStr;

use crate::impair::ImpairConfig;

/// Arguments of `isnode play`.
#[derive(clap::Args, Debug, Clone)]
#[command(after_help = "\
Lossy relay between processes: the server sends to the HTTP peer's address at the port the \
session names, so point the session at a relay and let the relay forward to this client:

  isnode relay --listen 127.0.0.1:7001 --to 127.0.0.1:7002 --loss 0.05 --burst 3
  isnode play movie.ts --port 7002 --session-port 7001 --out movie.out

The client receives on --port 7002 and asks the server to stream to port 7001 (the relay). \
It accepts datagrams from the server's IP address only: a relay on the server's host sends \
from it too; for a relay on another host, add --accept-from RELAY_IP.")]
pub struct PlayArgs {
    /// Name of the object to play.
    pub name: String,

    /// Base URL of the server's control API.
    #[arg(long, default_value = "http://127.0.0.1:7878")]
    pub server: String,

    /// Trust the certificates of this PEM file (instead of the public roots) for an
    /// `https://` server: a self-signed server's certificate (`isnode cert`).
    #[arg(long, value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,

    /// Write the object's bytes to FILE (`-` for stdout); without it they are only counted.
    /// Unrecoverable codewords are written as zeros; a session cut short (server gone,
    /// --max-seconds) ends the output after what was received (see --keep-length).
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

    /// Accept datagrams only from this IP address, any port (`any`: from every address).
    /// Default: the server's address (the host of `--server`), which is also the source of an
    /// `isnode relay` on the server's host; give the relay's address if it runs elsewhere.
    #[arg(long, value_name = "IP|any")]
    pub accept_from: Option<AcceptFrom>,

    /// First codeword to ask for (the output then starts at that codeword's first byte).
    #[arg(long, default_value_t = 0)]
    pub start_codeword: u32,

    /// Start playing at this time (seconds from the title's start): the server starts at
    /// the last random-access point at or before it (from the index made at ingest; by
    /// bitrate for an object without one), and the output starts exactly there.
    #[arg(long, value_name = "SECONDS", conflicts_with = "start_codeword")]
    pub start_at: Option<f64>,

    /// After this many seconds without a datagram the server is taken for gone: the client
    /// stops with an error, the output ending after what was received.
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0)]
    pub timeout_s: f64,

    /// Stop after this many seconds (wall clock, from the start) in any case, output and
    /// --http linger included; the output ends there unless --keep-length.
    #[arg(long, value_name = "SECONDS", default_value_t = 86_400.0)]
    pub max_seconds: f64,

    /// When the session is cut short (server gone, --max-seconds), pad the output with
    /// zeros to the announced length (written unpaced) instead of ending it after what was
    /// received; the server-gone error then becomes a lossy end.
    #[arg(long)]
    pub keep_length: bool,

    /// Refuse a server that announces an object larger than this (bytes).
    #[arg(long, value_name = "BYTES", default_value_t = crate::limits::DEFAULT_MAX_OBJECT_BYTES)]
    pub max_object_bytes: u64,

    /// Refuse a server that announces a bitrate below this (bit/s).
    #[arg(long, value_name = "BPS", default_value_t = crate::limits::DEFAULT_MIN_BITRATE_BPS)]
    pub min_bitrate_bps: u64,

    /// Refuse a server that announces a bitrate above this (bit/s).
    #[arg(long, value_name = "BPS", default_value_t = crate::limits::DEFAULT_MAX_BITRATE_BPS)]
    pub max_bitrate_bps: u64,

    /// Refuse a server whose announced size and bitrate give a playing time longer than
    /// this (seconds).
    #[arg(long, value_name = "SECONDS", default_value_t = crate::limits::DEFAULT_MAX_TITLE_S)]
    pub max_title_s: f64,

    /// Bound of the queue between the receive loop and the playout (bytes): it holds four
    /// seconds of media or four codewords, at most this; when it is full the receive core
    /// holds its output back, and a server sending faster than the playout drains loses
    /// codewords (erasures, repaired or zero-filled) instead of growing memory.
    #[arg(long, value_name = "BYTES", default_value_t = crate::limits::DEFAULT_MAX_QUEUE_BYTES)]
    pub max_queue_bytes: u64,

    /// Paced playout starts this long after the first byte is ready; default: 0 with
    /// `--release instant` (the lead against a codeword that must be decoded comes from the
    /// server's start-up burst), one codeword's playing time with `--release codeword`.
    #[arg(long, value_name = "MS")]
    pub prebuffer_ms: Option<u64>,

    /// Declare a codeword unrecoverable once packets of a codeword more than this many
    /// codewords later arrive.
    #[arg(long, value_name = "CODEWORDS", default_value_t = 2)]
    pub loss_horizon: u32,

    /// Collect codewords up to this many ahead of the next one to play out; packets of
    /// codewords further ahead are taken for strays (at least --loss-horizon + 2).
    #[arg(long, value_name = "CODEWORDS", default_value_t = 16)]
    pub window_codewords: u32,

    /// Do not fetch what the FEC could not repair over HTTP (unicast repair: a codeword the
    /// code cannot decode is otherwise completed with stored packets from the server).
    #[arg(long)]
    pub no_repair: bool,

    /// Check every packet against the server's digests (`on`, the default, when the object
    /// has them): a forged or damaged packet becomes an erasure. `off` trusts the CRC32C
    /// alone (for measuring what verification costs).
    #[arg(long, value_enum, default_value_t = VerifyDigests::On)]
    pub verify_digests: VerifyDigests,

    /// Each repair request waits a random back-off, uniform in [0, MS) (3GPP TS 26.346 §9
    /// style: spreads the requests of many receivers).
    #[arg(long, value_name = "MS", default_value_t = 20)]
    pub repair_backoff_ms: u64,

    /// Serve the decoded stream to a local player over HTTP on ADDR (e.g. 127.0.0.1:8090,
    /// then `mpv http://127.0.0.1:8090/`): progressive, with Range for what has arrived.
    /// With --out FILE the stream is also kept there (not with --out -).
    #[arg(long, value_name = "ADDR")]
    pub http: Option<std::net::SocketAddr>,

    /// Receive the title from its periodic broadcast on the server (`GET /v1/broadcasts`)
    /// instead of asking for a session: joins and leaves the broadcast's multicast groups as
    /// its plan says (docs/protocol.md, "Broadcasts").
    #[arg(long)]
    pub broadcast: bool,

    /// With --broadcast: when to join a channel's repair group (auto: once a packet of it
    /// went missing).
    #[arg(long, value_enum, default_value_t = crate::broadcast::RepairGroups::Auto)]
    pub broadcast_repair: crate::broadcast::RepairGroups,

    /// With --http: after the session, keep serving until no request has been active for
    /// this long.
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0)]
    pub http_linger_s: f64,
    /// When source symbols go out: `instant` (as soon as they and all before them are in;
    /// a codeword's decode is waited for only when one of its source symbols is missing) or
    /// `codeword` (whole codewords once decoded, the behaviour before instant start).
    #[arg(long, value_enum, default_value_t = ReleaseArg::Instant)]
    pub release: ReleaseArg,

    /// Ask the server not to send the start-up burst (the first codewords faster than the
    /// stream's rate): for before/after measurements.
    #[arg(long)]
    pub no_start_burst: bool,
}

/// Whether packets are checked against the server's digests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum VerifyDigests {
    /// Check them when the object has digests.
    On,
    /// Trust the CRC32C alone.
    Off,
}
/// What the output becomes when a session is cut short (the server gone, `--max-seconds`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CutShort {
    /// It ends after the last codeword received (default).
    Truncate,
    /// It is padded with zeros to the announced length (`--keep-length`).
    KeepLength,
}

/// The value of `--release`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReleaseArg {
    /// [`crate::receiver::Release::Instant`].
    Instant,
    /// [`crate::receiver::Release::Codeword`].
    Codeword,
}

impl From<ReleaseArg> for crate::receiver::Release {
    fn from(r: ReleaseArg) -> Self {
        match r {
            ReleaseArg::Instant => crate::receiver::Release::Instant,
            ReleaseArg::Codeword => crate::receiver::Release::Codeword,
        }
    }
}

impl PlayArgs {
    /// The limits on what a server announces (`--max-object-bytes` and the like).
    pub fn announce_limits(&self) -> crate::limits::AnnounceLimits {
        crate::limits::AnnounceLimits {
            max_object_bytes: self.max_object_bytes,
            min_bitrate_bps: self.min_bitrate_bps,
            max_bitrate_bps: self.max_bitrate_bps,
            max_title_s: self.max_title_s,
        }
    }

    /// What happens to the output when the session is cut short (`--keep-length`).
    pub fn cut_short(&self) -> CutShort {
        if self.keep_length {
            CutShort::KeepLength
        } else {
            CutShort::Truncate
        }
    }

    /// The TLS settings of the HTTPS requests (`--ca-cert`).
    pub fn tls(&self) -> anyhow::Result<ureq::tls::TlsConfig> {
        crate::control::tls_config(self.ca_cert.as_deref())
    }

    /// A client of `--server`'s control API trusting `--ca-cert`.
    pub fn control(
        &self,
        timeout: std::time::Duration,
    ) -> anyhow::Result<crate::control::ControlClient> {
        Ok(crate::control::ControlClient::with_tls(
            &self.server,
            timeout,
            self.tls()?,
        ))
    }

    /// Arguments with every option at its default, for `name`.
    pub fn new(name: impl Into<String>) -> PlayArgs {
        PlayArgs {
            name: name.into(),
            server: "http://127.0.0.1:7878".into(),
            ca_cert: None,
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
            accept_from: None,
            start_codeword: 0,
            start_at: None,
            timeout_s: 5.0,
            max_seconds: 86_400.0,
            keep_length: false,
            max_object_bytes: crate::limits::DEFAULT_MAX_OBJECT_BYTES,
            min_bitrate_bps: crate::limits::DEFAULT_MIN_BITRATE_BPS,
            max_bitrate_bps: crate::limits::DEFAULT_MAX_BITRATE_BPS,
            max_title_s: crate::limits::DEFAULT_MAX_TITLE_S,
            max_queue_bytes: crate::limits::DEFAULT_MAX_QUEUE_BYTES,
            prebuffer_ms: None,
            loss_horizon: 2,
            window_codewords: 16,
            no_repair: false,
            verify_digests: VerifyDigests::On,
            repair_backoff_ms: 20,
            http: None,
            http_linger_s: 5.0,
            broadcast: false,
            broadcast_repair: crate::broadcast::RepairGroups::Auto,
            release: ReleaseArg::Instant,
            no_start_burst: false,
        }
    }
}

/// The value of `--accept-from`: an IP address, or `any`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcceptFrom {
    /// Datagrams from every address.
    Any,
    /// Datagrams from this IP address only.
    Ip(IpAddr),
}

impl FromStr for AcceptFrom {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.eq_ignore_ascii_case("any") {
            return Ok(AcceptFrom::Any);
        }
        s.parse()
            .map(AcceptFrom::Ip)
            .map_err(|_| format!("{s:?} is neither an IP address nor `any`"))
    }
}

impl fmt::Display for AcceptFrom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AcceptFrom::Any => f.write_str("any"),
            AcceptFrom::Ip(ip) => ip.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Args, Command, FromArgMatches};
    use std::path::Path;

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
            "--accept-from",
            "10.0.0.7",
            "--start-codeword",
            "4",
            "--timeout-s",
            "2.5",
            "--prebuffer-ms",
            "300",
            "--loss-horizon",
            "3",
            "--window-codewords",
            "32",
            "--max-seconds",
            "60",
        ]);
        assert_eq!(a.session_port, Some(7001));
        assert_eq!(a.port, 7002);
        assert_eq!(
            a.accept_from,
            Some(AcceptFrom::Ip("10.0.0.7".parse().unwrap()))
        );
        assert_eq!(a.window_codewords, 32);
        assert_eq!(a.impair.burst, Some(3.0));
        assert!(a.as_fast_as_possible);
        assert_eq!(a.out.as_deref(), Some(Path::new("-")));
        let help = PlayArgs::augment_args(Command::new("play"))
            .render_long_help()
            .to_string();
        assert!(help.contains("--session-port"), "{help}");
        assert!(help.contains("isnode relay --listen"), "{help}");
        assert!(help.contains("--accept-from RELAY_IP"), "{help}");
    }

    #[test]
    fn accept_from_values() {
        assert_eq!(
            parse(&["play", "m", "--accept-from", "ANY"]).accept_from,
            Some(AcceptFrom::Any)
        );
        let v6 = parse(&["play", "m", "--accept-from", "::1"]).accept_from;
        assert_eq!(v6, Some(AcceptFrom::Ip("::1".parse().unwrap())));
        let cmd = PlayArgs::augment_args(Command::new("play"));
        assert!(cmd
            .try_get_matches_from(["play", "m", "--accept-from", "relay"])
            .is_err());
        assert_eq!(AcceptFrom::Any.to_string(), "any");
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
