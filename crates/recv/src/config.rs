//! The configuration of a client (`isnode play`): one plain value built by the command
//! line (or by an embedding program) and read by the unicast and the broadcast receivers.

use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Instant;

use crate::impair::{ImpairConfig, LossStep};

/// Default `resume_after_ms`.
pub const DEFAULT_RESUME_AFTER_MS: u64 = 1000;

/// How to play a title: every option of `isnode play`, as a value.
#[derive(Debug, Clone)]
pub struct PlayConfig {
    /// Name of the object to play.
    pub name: String,

    /// Base URL of the server's control API.
    pub server: String,

    /// Further servers (the rest of `--server A,B,...`): a session whose server is lost
    /// resumes on the same server or the next of the list, round robin; each must serve the
    /// same stream (same TSI, TOI, parameters and packet digests), else it is refused.
    pub failover_servers: Vec<String>,

    /// Trust the certificates of this PEM file (instead of the public roots) for an
    /// `https://` server: a self-signed server's certificate (`isnode cert`).
    pub ca_cert: Option<PathBuf>,

    /// Role token sent with every request to the server (`Authorization: Bearer`): a
    /// server closed to anonymous viewers needs one with the viewer role.
    pub token: Option<String>,

    /// Where the token may go (`None`: the servers of `--server`; after a cluster's
    /// redirects and ranking, those and the `https://` nodes named over HTTPS:
    /// [`crate::control::TokenScope`]).
    pub token_scope: Option<crate::control::TokenScope>,

    /// Write the object's bytes to FILE (`-` for stdout); without it they are only counted.
    /// Unrecoverable codewords are written as zeros; a session cut short (server gone,
    /// --max-seconds) ends the output after what was received (see --keep-length).
    pub out: Option<PathBuf>,

    /// Also write the statistics as JSON to FILE.
    pub stats_json: Option<PathBuf>,

    /// Injected loss and corruption.
    pub impair: ImpairConfig,

    /// Steps of the injected loss (`--loss-step SECONDS:LOSS`): from SECONDS after
    /// [`PlayConfig::play_started`] on, packets are lost at rate LOSS (burst length,
    /// corruption and seed those of `impair`).
    pub loss_steps: Vec<LossStep>,

    /// When play started, the time `loss_steps` count from (None: the session's request, or
    /// the broadcast's description). A title's play sets it to its own start, so that every
    /// rung's session or reception follows one schedule.
    pub play_started: Option<Instant>,

    /// Write the output as soon as it is decoded instead of pacing it at the object's bitrate.
    pub as_fast_as_possible: bool,

    /// UDP port to receive on (0: an ephemeral port).
    pub port: u16,

    /// Local address to receive on; default: 127.0.0.1 if the server is on IPv4 loopback,
    /// else the unspecified address of the server's family (`[::]` is dual-stack).
    pub bind: Option<IpAddr>,

    /// Ask the server to stream to this UDP port instead of the receive port, e.g. the
    /// `--listen` port of an `isnode relay` whose `--to` is this client's `--port`.
    pub session_port: Option<u16>,

    /// Accept datagrams only from this IP address, any port (`any`: from every address).
    /// Default: the server's address (the host of `--server`), which is also the source of an
    /// `isnode relay` on the server's host; give the relay's address if it runs elsewhere.
    pub accept_from: Option<AcceptFrom>,

    /// First codeword to ask for (the output then starts at that codeword's first byte).
    pub start_codeword: u32,

    /// Start playing at this time (seconds from the title's start): the server starts at
    /// the last random-access point at or before it (from the index made at ingest; by
    /// bitrate for an object without one), and the output starts exactly there.
    pub start_at: Option<f64>,

    /// After this many seconds without a datagram the server is taken for gone: the client
    /// stops with an error, the output ending after what was received.
    pub timeout_s: f64,

    /// After this many milliseconds without a datagram (before the last codeword; at once
    /// after the server's goodbye), ask the server whether it still streams the session,
    /// and if not (restarted, unreachable) open a new session at the first codeword not
    /// delivered, on it or the next of `failover_servers` (0: never; the session then ends
    /// after `timeout_s`).
    pub resume_after_ms: u64,

    /// Stop after this many seconds (wall clock, from the start) in any case, output and
    /// --http linger included; the output ends there unless --keep-length.
    pub max_seconds: f64,

    /// When the session is cut short (server gone, --max-seconds), pad the output with
    /// zeros to the announced length (written unpaced) instead of ending it after what was
    /// received; the server-gone error then becomes a lossy end.
    pub keep_length: bool,

    /// Refuse a server that announces an object larger than this (bytes).
    pub max_object_bytes: u64,

    /// Refuse a server that announces a bitrate below this (bit/s).
    pub min_bitrate_bps: u64,

    /// Refuse a server that announces a bitrate above this (bit/s).
    pub max_bitrate_bps: u64,

    /// A title with renditions plays this rung only (its ladder's index, 0 the lowest
    /// bitrate), never switching (None: the rung decision picks and switches).
    pub rung: Option<usize>,

    /// Refuse a server whose announced size and bitrate give a playing time longer than
    /// this (seconds).
    pub max_title_s: f64,

    /// Bound of the queue between the receive loop and the playout (bytes): it holds four
    /// seconds of media or four codewords, at most this; when it is full the receive core
    /// holds its output back, and a server sending faster than the playout drains loses
    /// codewords (erasures, repaired or zero-filled) instead of growing memory.
    pub max_queue_bytes: u64,

    /// Paced playout starts this long after the first byte is ready; default: 0 with
    /// `--release instant` (the lead against a codeword that must be decoded comes from the
    /// server's start-up burst), one codeword's playing time with `--release codeword`.
    pub prebuffer_ms: Option<u64>,

    /// Declare a codeword unrecoverable once packets of a codeword more than this many
    /// codewords later arrive.
    pub loss_horizon: u32,

    /// Collect codewords up to this many ahead of the next one to play out; packets of
    /// codewords further ahead are taken for strays (at least --loss-horizon + 2).
    pub window_codewords: u32,

    /// Do not fetch what the FEC could not repair over HTTP (unicast repair: a codeword the
    /// code cannot decode is otherwise completed with stored packets from the server).
    pub no_repair: bool,

    /// Check every packet against the server's digests (`on`, the default, when the object
    /// has them): a forged or damaged packet becomes an erasure. `off` trusts the CRC32C
    /// alone (for measuring what verification costs).
    pub verify_digests: VerifyDigests,

    /// Each repair request waits a random back-off, uniform in [0, MS) (3GPP TS 26.346 §9
    /// style: spreads the requests of many receivers).
    pub repair_backoff_ms: u64,

    /// Serve the decoded stream to a local player over HTTP on ADDR (e.g. 127.0.0.1:8090,
    /// then `mpv http://127.0.0.1:8090/`): progressive, with Range for what has arrived.
    /// With --out FILE the stream is also kept there (not with --out -).
    pub http: Option<std::net::SocketAddr>,

    /// Receive the title from its periodic broadcast on the server (`GET /v1/broadcasts`)
    /// instead of asking for a session: joins and leaves the broadcast's multicast groups as
    /// its plan says (docs/protocol.md, "Broadcasts").
    pub broadcast: bool,

    /// With --broadcast: when to join a channel's repair group (auto: once a packet of it
    /// went missing).
    pub broadcast_repair: RepairGroups,

    /// With --http: after the session, keep serving until no request has been active for
    /// this long.
    pub http_linger_s: f64,
    /// When source symbols go out: `instant` (as soon as they and all before them are in;
    /// a codeword's decode is waited for only when one of its source symbols is missing) or
    /// `codeword` (whole codewords once decoded, the behaviour before instant start).
    pub release: ReleaseArg,

    /// Ask the server not to send the start-up burst (the first codewords faster than the
    /// stream's rate): for before/after measurements.
    pub no_start_burst: bool,
}

/// Whether packets are checked against the server's digests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerifyDigests {
    /// Check them when the object has digests.
    On,
    /// Trust the CRC32C alone.
    Off,
}

impl VerifyDigests {
    /// Every value with its name (`--verify-digests`) and a line of help.
    pub const CHOICES: &'static [(Self, &'static str, &'static str)] = &[
        (
            VerifyDigests::On,
            "on",
            "Check them when the object has digests",
        ),
        (VerifyDigests::Off, "off", "Trust the CRC32C alone"),
    ];
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReleaseArg {
    /// [`crate::receiver::Release::Instant`].
    Instant,
    /// [`crate::receiver::Release::Codeword`].
    Codeword,
}

impl ReleaseArg {
    /// Every value with its name (`--release`) and a line of help.
    pub const CHOICES: &'static [(Self, &'static str, &'static str)] = &[
        (
            ReleaseArg::Instant,
            "instant",
            "[`crate::receiver::Release::Instant`]",
        ),
        (
            ReleaseArg::Codeword,
            "codeword",
            "[`crate::receiver::Release::Codeword`]",
        ),
    ];
}

impl From<ReleaseArg> for crate::receiver::Release {
    fn from(r: ReleaseArg) -> Self {
        match r {
            ReleaseArg::Instant => crate::receiver::Release::Instant,
            ReleaseArg::Codeword => crate::receiver::Release::Codeword,
        }
    }
}

impl PlayConfig {
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
        Ok(
            crate::control::ControlClient::with_tls(&self.server, timeout, self.tls()?)
                .with_token(self.token.as_deref())
                .with_scope(self.scope()),
        )
    }

    /// Every server of `--server`, the first one first.
    pub fn servers(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.server.as_str())
            .chain(self.failover_servers.iter().map(String::as_str))
    }

    /// A client of `server` (one of [`PlayConfig::servers`]) trusting `--ca-cert`.
    pub fn control_of(
        &self,
        server: &str,
        timeout: std::time::Duration,
    ) -> anyhow::Result<crate::control::ControlClient> {
        Ok(
            crate::control::ControlClient::with_tls(server, timeout, self.tls()?)
                .with_token(self.token.as_deref())
                .with_scope(self.scope()),
        )
    }

    /// Where the role token may go ([`PlayConfig::token_scope`]).
    pub fn scope(&self) -> crate::control::TokenScope {
        self.token_scope
            .clone()
            .unwrap_or_else(|| crate::control::TokenScope::given(self.servers()))
    }

    /// The role token for requests to `url`: `--token` when the scope allows `url`.
    pub fn token_for(&self, url: &str) -> Option<&str> {
        self.token.as_deref().filter(|_| self.scope().allows(url))
    }

    /// The configuration with every option at its default, for `name`.
    pub fn new(name: impl Into<String>) -> PlayConfig {
        PlayConfig {
            name: name.into(),
            server: "http://127.0.0.1:7878".into(),
            failover_servers: Vec::new(),
            ca_cert: None,
            token: None,
            token_scope: None,
            out: None,
            stats_json: None,
            impair: ImpairConfig {
                seed: 1,
                ..ImpairConfig::default()
            },
            loss_steps: Vec::new(),
            play_started: None,
            as_fast_as_possible: false,
            port: 0,
            bind: None,
            session_port: None,
            accept_from: None,
            start_codeword: 0,
            start_at: None,
            timeout_s: 5.0,
            resume_after_ms: DEFAULT_RESUME_AFTER_MS,
            max_seconds: 86_400.0,
            keep_length: false,
            max_object_bytes: crate::limits::DEFAULT_MAX_OBJECT_BYTES,
            min_bitrate_bps: crate::limits::DEFAULT_MIN_BITRATE_BPS,
            max_bitrate_bps: crate::limits::DEFAULT_MAX_BITRATE_BPS,
            rung: None,
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
            broadcast_repair: RepairGroups::Auto,
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

/// When a broadcast channel's repair group is joined.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RepairGroups {
    /// When a source packet of the channel went missing.
    #[default]
    Auto,
    /// With the source group.
    Always,
    /// Never (loss is left to the next broadcast of the codeword).
    Never,
}

impl RepairGroups {
    /// Every value with its name (`--broadcast-repair`) and a line of help.
    pub const CHOICES: &'static [(Self, &'static str, &'static str)] = &[
        (
            RepairGroups::Auto,
            "auto",
            "When a source packet of the channel went missing",
        ),
        (RepairGroups::Always, "always", "With the source group"),
        (
            RepairGroups::Never,
            "never",
            "Never (loss is left to the next broadcast of the codeword)",
        ),
    ];
}
