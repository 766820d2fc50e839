//! The command line of `isnode play`: clap's view of [`isnode_recv::PlayConfig`], which is
//! all the library sees.

use std::net::IpAddr;
use std::path::PathBuf;

use isnode_recv::config::{AcceptFrom, ReleaseArg, RepairGroups, VerifyDigests};
use isnode_recv::impair::{ImpairConfig, LossStep};
use isnode_recv::RelayArgs;

use crate::choice::ChoiceParser;
use isnode_recv::PlayConfig;

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
pub(crate) struct PlayArgs {
    /// Name of the object to play.
    pub(crate) name: String,

    /// Base URL of the server's control API; a comma-separated list `A,B,...` names
    /// replicas: a session whose server is lost resumes on the same server or the next one
    /// of the list, round robin (each must serve the same stream: docs/protocol.md,
    /// "Resuming on another server").
    #[arg(
        long,
        value_name = "URL[,URL...]",
        value_delimiter = ',',
        num_args = 1,
        default_value = "http://127.0.0.1:7878"
    )]
    pub(crate) server: Vec<String>,

    /// Trust the certificates of this PEM file (instead of the public roots) for an
    /// `https://` server: a self-signed server's certificate (`isnode cert`).
    #[arg(long, value_name = "FILE")]
    pub(crate) ca_cert: Option<PathBuf>,

    /// Role token sent with every request (`Authorization: Bearer TOKEN`): a server closed
    /// to anonymous viewers needs one with the viewer role (`isnode token add`).
    #[arg(long, env = "ISNODE_TOKEN", hide_env_values = true)]
    pub(crate) token: Option<String>,

    /// Write the object's bytes to FILE (`-` for stdout); without it they are only counted.
    /// Unrecoverable codewords are written as zeros; a session cut short (server gone,
    /// --max-seconds) ends the output after what was received (see --keep-length).
    #[arg(long, value_name = "FILE|-")]
    pub(crate) out: Option<PathBuf>,

    /// Also write the statistics as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub(crate) stats_json: Option<PathBuf>,

    /// Injected loss and corruption.
    #[command(flatten)]
    pub(crate) impair: ImpairFlags,

    /// From SECONDS after play's start on, lose received packets at rate LOSS (repeatable:
    /// e.g. `--loss-step 4:0.3 --loss-step 9:0` for a loss that rises, then ends; a title
    /// with renditions follows one schedule across its rungs).
    #[arg(long, value_name = "SECONDS:LOSS")]
    pub(crate) loss_step: Vec<LossStep>,

    /// Write the output as soon as it is decoded instead of pacing it at the object's bitrate.
    #[arg(long)]
    pub(crate) as_fast_as_possible: bool,

    /// UDP port to receive on (0: an ephemeral port).
    #[arg(long, default_value_t = 0)]
    pub(crate) port: u16,

    /// Local address to receive on; default: 127.0.0.1 if the server is on IPv4 loopback,
    /// else the unspecified address of the server's family (`[::]` is dual-stack).
    #[arg(long, value_name = "IP")]
    pub(crate) bind: Option<IpAddr>,

    /// Ask the server to stream to this UDP port instead of the receive port, e.g. the
    /// `--listen` port of an `isnode relay` whose `--to` is this client's `--port`.
    #[arg(long, value_name = "PORT")]
    pub(crate) session_port: Option<u16>,

    /// Accept datagrams only from this IP address, any port (`any`: from every address).
    /// Default: the server's address (the host of `--server`), which is also the source of an
    /// `isnode relay` on the server's host; give the relay's address if it runs elsewhere.
    #[arg(long, value_name = "IP|any")]
    pub(crate) accept_from: Option<AcceptFrom>,

    /// First codeword to ask for (the output then starts at that codeword's first byte).
    #[arg(long, default_value_t = 0)]
    pub(crate) start_codeword: u32,

    /// Start playing at this time (seconds from the title's start): the server starts at
    /// the last random-access point at or before it (from the index made at ingest; by
    /// bitrate for an object without one), and the output starts exactly there.
    #[arg(long, value_name = "SECONDS", conflicts_with = "start_codeword")]
    pub(crate) start_at: Option<f64>,

    /// After this many seconds without a datagram the server is taken for gone: the client
    /// stops with an error, the output ending after what was received.
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0)]
    pub(crate) timeout_s: f64,

    /// After this many milliseconds without a datagram (at once after the server's
    /// goodbye), ask the server whether it still streams the session; if not (restarted,
    /// unreachable), open a new session at the first codeword not delivered, on it or the
    /// next of --server A,B, with back-off and jitter, until --timeout-s (0: never).
    #[arg(long, value_name = "MS", default_value_t = isnode_recv::config::DEFAULT_RESUME_AFTER_MS)]
    pub(crate) resume_after_ms: u64,

    /// Stop after this many seconds (wall clock, from the start) in any case, output and
    /// --http linger included; the output ends there unless --keep-length.
    #[arg(long, value_name = "SECONDS", default_value_t = 86_400.0)]
    pub(crate) max_seconds: f64,

    /// When the session is cut short (server gone, --max-seconds), pad the output with
    /// zeros to the announced length (written unpaced) instead of ending it after what was
    /// received; the server-gone error then becomes a lossy end.
    #[arg(long)]
    pub(crate) keep_length: bool,

    /// Refuse a server that announces an object larger than this (bytes).
    #[arg(long, value_name = "BYTES", default_value_t = isnode_recv::limits::DEFAULT_MAX_OBJECT_BYTES)]
    pub(crate) max_object_bytes: u64,

    /// Refuse a server that announces a bitrate below this (bit/s).
    #[arg(long, value_name = "BPS", default_value_t = isnode_recv::limits::DEFAULT_MIN_BITRATE_BPS)]
    pub(crate) min_bitrate_bps: u64,

    /// Refuse a server that announces a bitrate above this (bit/s); a title with
    /// renditions plays no rung above it.
    #[arg(long, alias = "max-bitrate", value_name = "BPS", default_value_t = isnode_recv::limits::DEFAULT_MAX_BITRATE_BPS)]
    pub(crate) max_bitrate_bps: u64,

    /// Play rung N of a title with renditions only (0: the lowest bitrate), never
    /// switching; with --broadcast, that rung's broadcast.
    #[arg(long, value_name = "N")]
    pub(crate) rung: Option<usize>,

    /// Refuse a server whose announced size and bitrate give a playing time longer than
    /// this (seconds).
    #[arg(long, value_name = "SECONDS", default_value_t = isnode_recv::limits::DEFAULT_MAX_TITLE_S)]
    pub(crate) max_title_s: f64,

    /// Bound of the queue between the receive loop and the playout (bytes): it holds four
    /// seconds of media or four codewords, at most this; when it is full the receive core
    /// holds its output back, and a server sending faster than the playout drains loses
    /// codewords (erasures, repaired or zero-filled) instead of growing memory.
    #[arg(long, value_name = "BYTES", default_value_t = isnode_recv::limits::DEFAULT_MAX_QUEUE_BYTES)]
    pub(crate) max_queue_bytes: u64,

    /// Paced playout starts this long after the first byte is ready; default: 0 with
    /// `--release instant` (the lead against a codeword that must be decoded comes from the
    /// server's start-up burst), one codeword's playing time with `--release codeword`.
    #[arg(long, value_name = "MS")]
    pub(crate) prebuffer_ms: Option<u64>,

    /// Declare a codeword unrecoverable once packets of a codeword more than this many
    /// codewords later arrive.
    #[arg(long, value_name = "CODEWORDS", default_value_t = 2)]
    pub(crate) loss_horizon: u32,

    /// Collect codewords up to this many ahead of the next one to play out; packets of
    /// codewords further ahead are taken for strays (at least --loss-horizon + 2).
    #[arg(long, value_name = "CODEWORDS", default_value_t = 16)]
    pub(crate) window_codewords: u32,

    /// Do not fetch what the FEC could not repair over HTTP (unicast repair: a codeword the
    /// code cannot decode is otherwise completed with stored packets from the server).
    #[arg(long)]
    pub(crate) no_repair: bool,

    /// Check every packet against the server's digests (`on`, the default, when the object
    /// has them): a forged or damaged packet becomes an erasure. `off` trusts the CRC32C
    /// alone (for measuring what verification costs).
    #[arg(long, value_parser = ChoiceParser::new(VerifyDigests::CHOICES), default_value = "on")]
    pub(crate) verify_digests: VerifyDigests,

    /// Each repair request waits a random back-off, uniform in [0, MS) (3GPP TS 26.346 §9
    /// style: spreads the requests of many receivers).
    #[arg(long, value_name = "MS", default_value_t = 20)]
    pub(crate) repair_backoff_ms: u64,

    /// Serve the decoded stream to a local player over HTTP on ADDR (e.g. 127.0.0.1:8090,
    /// then `mpv http://127.0.0.1:8090/`): progressive, with Range for what has arrived.
    /// With --out FILE the stream is also kept there (not with --out -).
    #[arg(long, value_name = "ADDR")]
    pub(crate) http: Option<std::net::SocketAddr>,

    /// Receive the title from its periodic broadcast on the server (`GET /v1/broadcasts`)
    /// instead of asking for a session: joins and leaves the broadcast's multicast groups as
    /// its plan says (docs/protocol.md, "Broadcasts").
    #[arg(long)]
    pub(crate) broadcast: bool,

    /// With --broadcast: when to join a channel's repair group (auto: once a packet of it
    /// went missing).
    #[arg(long, value_parser = ChoiceParser::new(RepairGroups::CHOICES), default_value = "auto")]
    pub(crate) broadcast_repair: RepairGroups,

    /// With --http: after the session, keep serving until no request has been active for
    /// this long.
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0)]
    pub(crate) http_linger_s: f64,
    /// When source symbols go out: `instant` (as soon as they and all before them are in;
    /// a codeword's decode is waited for only when one of its source symbols is missing) or
    /// `codeword` (whole codewords once decoded, the behaviour before instant start).
    #[arg(long, value_parser = ChoiceParser::new(ReleaseArg::CHOICES), default_value = "instant")]
    pub(crate) release: ReleaseArg,

    /// Ask the server not to send the start-up burst (the first codewords faster than the
    /// stream's rate): for before/after measurements.
    #[arg(long)]
    pub(crate) no_start_burst: bool,
}

impl PlayArgs {
    /// The client's configuration.
    pub(crate) fn into_config(self) -> PlayConfig {
        let mut servers = self.server.into_iter().filter(|s| !s.trim().is_empty());
        let server = servers.next().unwrap_or_default();
        PlayConfig {
            name: self.name,
            server,
            failover_servers: servers.collect(),
            ca_cert: self.ca_cert,
            token: self.token,
            token_scope: None,
            out: self.out,
            stats_json: self.stats_json,
            impair: self.impair.into(),
            loss_steps: self.loss_step,
            play_started: None,
            as_fast_as_possible: self.as_fast_as_possible,
            port: self.port,
            bind: self.bind,
            session_port: self.session_port,
            accept_from: self.accept_from,
            start_codeword: self.start_codeword,
            start_at: self.start_at,
            timeout_s: self.timeout_s,
            resume_after_ms: self.resume_after_ms,
            max_seconds: self.max_seconds,
            keep_length: self.keep_length,
            max_object_bytes: self.max_object_bytes,
            min_bitrate_bps: self.min_bitrate_bps,
            max_bitrate_bps: self.max_bitrate_bps,
            rung: self.rung,
            max_title_s: self.max_title_s,
            max_queue_bytes: self.max_queue_bytes,
            prebuffer_ms: self.prebuffer_ms,
            loss_horizon: self.loss_horizon,
            window_codewords: self.window_codewords,
            no_repair: self.no_repair,
            verify_digests: self.verify_digests,
            repair_backoff_ms: self.repair_backoff_ms,
            http: self.http,
            broadcast: self.broadcast,
            broadcast_repair: self.broadcast_repair,
            http_linger_s: self.http_linger_s,
            release: self.release,
            no_start_burst: self.no_start_burst,
        }
    }
}

/// The `--loss/--burst/--corrupt/--seed` flags of `isnode play` (injected on receive) and
/// `isnode relay` (injected on forwarding): an [`ImpairConfig`].
#[derive(Clone, Copy, Debug, PartialEq, clap::Args)]
pub(crate) struct ImpairFlags {
    /// Average loss rate P in `[0, 1]` (Gilbert-Elliott).
    #[arg(long, value_name = "P", default_value_t = 0.0)]
    pub(crate) loss: f64,
    /// Mean length of a loss burst, in packets (>= 1); default: independent losses.
    #[arg(long, value_name = "LEN")]
    pub(crate) burst: Option<f64>,
    /// Probability in `[0, 1]` that a packet that is not lost gets one byte flipped.
    #[arg(long, value_name = "P", default_value_t = 0.0)]
    pub(crate) corrupt: f64,
    /// Seed of the injected loss and corruption.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub(crate) seed: u64,
}

impl From<ImpairFlags> for ImpairConfig {
    fn from(f: ImpairFlags) -> ImpairConfig {
        ImpairConfig {
            loss: f.loss,
            burst: f.burst,
            corrupt: f.corrupt,
            seed: f.seed,
        }
    }
}

/// Arguments of `isnode relay`: a [`RelayArgs`].
#[derive(clap::Args, Debug, Clone)]
#[command(after_help = "\
Use with `isnode play --port TO_PORT --session-port LISTEN_PORT`: the server streams to the \
relay, the relay forwards what survives to the client.")]
pub(crate) struct RelayFlags {
    /// Address to receive on (port 0: an ephemeral port, logged at start).
    #[arg(long, value_name = "ADDR")]
    pub(crate) listen: std::net::SocketAddr,

    /// Address to forward to.
    #[arg(long, value_name = "ADDR")]
    pub(crate) to: std::net::SocketAddr,

    /// Injected loss and corruption.
    #[command(flatten)]
    pub(crate) impair: ImpairFlags,

    /// Stop after this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 3600.0)]
    pub(crate) max_seconds: f64,

    /// Stop after this many seconds without a datagram, once one has arrived.
    #[arg(long, value_name = "SECONDS")]
    pub(crate) idle_exit_s: Option<f64>,

    /// From SECONDS after the first datagram on, lose packets at rate LOSS (repeatable:
    /// e.g. `--loss-step 8:0.25 --loss-step 18:0` for a loss that rises, then ends).
    #[arg(long, value_name = "SECONDS:LOSS")]
    pub(crate) loss_step: Vec<LossStep>,
}

impl From<RelayFlags> for RelayArgs {
    fn from(f: RelayFlags) -> RelayArgs {
        RelayArgs {
            listen: f.listen,
            to: f.to,
            impair: f.impair.into(),
            max_seconds: f.max_seconds,
            idle_exit_s: f.idle_exit_s,
            loss_steps: f.loss_step,
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
        let b = PlayConfig::new("movie.ts");
        assert_eq!(format!("{:?}", a.into_config()), format!("{b:?}"));
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
            "--loss-step",
            "9:0",
            "--loss-step",
            "4:0.3",
        ]);
        assert_eq!(
            a.loss_step,
            [
                LossStep {
                    after_s: 9.0,
                    loss: 0.0
                },
                LossStep {
                    after_s: 4.0,
                    loss: 0.3
                }
            ]
        );
        assert_eq!(a.session_port, Some(7001));
        assert_eq!(a.port, 7002);
        assert_eq!(
            a.accept_from,
            Some(AcceptFrom::Ip("10.0.0.7".parse().unwrap()))
        );
        assert_eq!(a.window_codewords, 32);
        assert_eq!(a.server, ["http://[::1]:9"]);
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
    fn server_lists_split_into_the_first_and_the_failovers() {
        let c = parse(&["play", "m", "--server", "http://a:1,http://b:2,c:3"]).into_config();
        assert_eq!(c.server, "http://a:1");
        assert_eq!(c.failover_servers, ["http://b:2", "c:3"]);
        let c = parse(&["play", "m", "--server", "http://a:1"]).into_config();
        assert!(c.failover_servers.is_empty());
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
        let cmd = RelayFlags::augment_args(Command::new("relay"));
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
        let r = RelayArgs::from(RelayFlags::from_arg_matches(&m).unwrap());
        assert_eq!(r.to.port(), 7002);
        assert_eq!(r.impair.loss, 0.05);
        assert!(RelayFlags::augment_args(Command::new("relay"))
            .try_get_matches_from(["relay", "--listen", "127.0.0.1:1"])
            .is_err());
    }
}
