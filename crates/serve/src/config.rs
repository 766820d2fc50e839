//! The server's configuration: the flags of `isnode serve` and the enums they select.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Serialize;

use crate::broadcast::groups::GroupRange;

/// Default egress capacity the bitrate budget is derived from: 1 Gbit/s.
pub const DEFAULT_EGRESS_CAPACITY_BPS: u64 = 1_000_000_000;
/// Share of the egress capacity admitted sessions may use together, in percent
/// (the rest is headroom for bursts, the FDT, retransmitted keepalives and other traffic).
pub const EGRESS_BUDGET_PERCENT: u64 = 90;
/// Default most concurrent sessions per client IP address.
pub const DEFAULT_MAX_SESSIONS_PER_CLIENT: u32 = 16;
/// Default size of the block pool, bytes.
pub const DEFAULT_CACHE_SIZE_BYTES: u64 = 256 << 20;

/// Default most HTTP bodies of content or repair packets produced at once.
pub const DEFAULT_MAX_CONTENT_READERS: u64 = 32;
/// Default `--api-header-timeout-ms`: a request head must be whole within 10 s.
pub const DEFAULT_API_HEADER_TIMEOUT_MS: u64 = 10_000;
/// Default `--api-idle-timeout-ms`: a kept-alive connection without a request for 60 s
/// is closed.
pub const DEFAULT_API_IDLE_TIMEOUT_MS: u64 = 60_000;
/// Most control API connections by default (fewer if the open files limit leaves fewer).
pub const DEFAULT_API_MAX_CONNECTIONS: usize = 4096;
/// Default playing time of the start-up burst, milliseconds.
pub(crate) const DEFAULT_START_BURST_MS: u64 = 1000;
/// Default speed-up of the start-up burst.
pub(crate) const DEFAULT_START_BURST_FACTOR: u32 = 4;

/// Number of send engines (the length of the per-engine metrics arrays).
pub const ENGINES: usize = 5;

/// The send engine of the data plane.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EngineKind {
    /// `sendmsg` with `UDP_SEGMENT` (GSO) straight from the block pool: one call per run.
    Gso,
    /// io_uring `SEND_ZC` from the registered pool buffers, with socket-level GSO.
    UringZc,
    /// `sendmmsg` from the pool: one call per run, one datagram per packet in the kernel.
    Sendmmsg,
    /// The seeds' baseline: buffered reads into a per-session buffer, parity encoded at
    /// send time, headers built and payload copied per packet, one `sendto` per packet.
    Traditional,
    /// `sendfile(2)` of each run of stored packets from the page cache (buffered segment
    /// files) into a per-session connected UDP socket with `UDP_SEGMENT`: the kernel hands
    /// page-cache pages to the socket, no copy from user memory (the CDA seed's direct path
    /// behind the ordinary sendfile interface; what nginx does for HTTP).
    Sendfile,
}

impl EngineKind {
    /// Every engine, in metrics order.
    pub const ALL: [EngineKind; ENGINES] = [
        EngineKind::Gso,
        EngineKind::UringZc,
        EngineKind::Sendmmsg,
        EngineKind::Traditional,
        EngineKind::Sendfile,
    ];

    /// The engine's name on the command line and in metrics.
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Gso => "gso",
            EngineKind::UringZc => "uring-zc",
            EngineKind::Sendmmsg => "sendmmsg",
            EngineKind::Traditional => "traditional",
            EngineKind::Sendfile => "sendfile",
        }
    }

    /// Position in [`EngineKind::ALL`] (and in the metrics arrays).
    pub fn index(self) -> usize {
        match self {
            EngineKind::Gso => 0,
            EngineKind::UringZc => 1,
            EngineKind::Sendmmsg => 2,
            EngineKind::Traditional => 3,
            EngineKind::Sendfile => 4,
        }
    }
}

/// What to do with the packets of a failed member.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Degraded {
    /// Rebuild the missing symbols from the other members and send them.
    Rebuild,
    /// Send what can be read; the client's FEC repairs the rest.
    SendAvailable,
}

/// Whether a new session waits for its destination to prove that it listens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ValidateDestination {
    /// Send a token datagram to the destination; stream once the client echoes it
    /// (`isnode_proto::auth`).
    Token,
    /// Stream at once. Only for closed test rigs whose destinations cannot answer (the
    /// ifb sink of `bench serve`): any client can then aim a stream at any port of its
    /// own address.
    Off,
}

/// How the data plane reads blocks into the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReadIo {
    /// io_uring `READ_FIXED` (O_DIRECT, registered pool buffers) without blocking the
    /// thread's other sessions; falls back to `Sync` where io_uring is unavailable.
    Uring,
    /// A synchronous `pread` (O_DIRECT where allowed) on the data-plane thread.
    Sync,
}

/// Default `--validate-timeout-ms`: the token's round trip plus the client's start-up.
pub(crate) const DEFAULT_VALIDATE_TIMEOUT_MS: u64 = 3000;
/// Default `--min-dest-port`: the well-known ports are refused.
pub(crate) const DEFAULT_MIN_DEST_PORT: u16 = 1024;

/// Flags of `isnode serve`.
#[derive(clap::Args, Clone, Debug)]
pub struct ServeArgs {
    /// Address of the HTTP control API.
    #[arg(long, default_value = "127.0.0.1:7878")]
    pub listen: SocketAddr,
    /// Send engine.
    #[arg(long, value_enum, default_value_t = EngineKind::Gso)]
    pub engine: EngineKind,
    /// Size of the block pool in bytes (allocated at start; bounds the sessions at
    /// distinct positions: each needs about one block per member).
    #[arg(long, visible_alias = "cache-size", default_value_t = DEFAULT_CACHE_SIZE_BYTES)]
    pub cache_size_bytes: u64,
    /// Egress capacity of the server, bits per second. Unless `--max-bitrate-bps` is
    /// given, admitted sessions may together send at most 90 % of it.
    #[arg(long, default_value_t = DEFAULT_EGRESS_CAPACITY_BPS)]
    pub egress_capacity_bps: u64,
    /// Bitrate budget: the sum of admitted sessions' send rates, bits per second
    /// (default: 90 % of `--egress-capacity-bps`, i.e. 900 Mbit/s).
    #[arg(long, visible_alias = "max-bitrate")]
    pub max_bitrate_bps: Option<u64>,
    /// Most concurrent sessions per client IP address.
    #[arg(long, default_value_t = DEFAULT_MAX_SESSIONS_PER_CLIENT)]
    pub max_sessions_per_client: u32,
    /// Data-plane threads (default: one per core).
    #[arg(long)]
    pub threads: Option<usize>,
    /// What to send for a failed member's packets.
    #[arg(long, value_enum, default_value_t = Degraded::Rebuild)]
    pub degraded: Degraded,
    /// A session without keepalive for this long ends by itself (milliseconds).
    #[arg(long, default_value_t = 5000)]
    pub session_timeout_ms: u64,
    /// A new session streams only once its destination has echoed the token datagram sent
    /// to it (return routability); not echoed within this long, it ends (milliseconds).
    #[arg(long, default_value_t = DEFAULT_VALIDATE_TIMEOUT_MS)]
    pub validate_timeout_ms: u64,
    /// Return routability of new sessions' destinations.
    #[arg(long, value_enum, default_value_t = ValidateDestination::Token)]
    pub validate_destination: ValidateDestination,
    /// Lowest destination UDP port a session may ask for (ports below it are refused:
    /// well-known services listen there).
    #[arg(long, default_value_t = DEFAULT_MIN_DEST_PORT)]
    pub min_dest_port: u16,
    /// How blocks are read into the pool (`uring` falls back to `sync` where io_uring is
    /// unavailable).
    #[arg(long, value_enum, env = "ISNODE_READ_IO", default_value_t = ReadIo::Uring)]
    pub read_io: ReadIo,
    /// Most HTTP content bodies and repair answers produced at once (each holds about three
    /// codewords of memory); more are refused with 503.
    #[arg(long, default_value_t = DEFAULT_MAX_CONTENT_READERS)]
    pub max_content_readers: u64,
    /// Start-up burst: a session's first codewords go out this many times faster than its
    /// rate (gives the client a lead at once); the bursts' extra rate stays within the
    /// headroom above the bitrate budget (10/90 of it), admission lowering the factor to what
    /// is left, down to no burst. 0 or 1: no burst.
    #[arg(long, default_value_t = DEFAULT_START_BURST_FACTOR)]
    pub start_burst_factor: u32,
    /// Playing time of the media sent in the start-up burst, milliseconds (0: no burst).
    /// The client's lead is this × (1 − 1/factor).
    #[arg(long, default_value_t = DEFAULT_START_BURST_MS)]
    pub start_burst_ms: u64,
    /// Multicast groups broadcasts may use (`ADDRESS/PREFIX`, IPv4 and IPv6 ranges, comma
    /// separated); groups a broadcast request names must lie in one.
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_BROADCAST_GROUPS)]
    pub broadcast_groups: Vec<GroupRange>,
    /// UDP port of a broadcast's channel 0 (channel c: this + c) unless the request names one.
    #[arg(long, default_value_t = DEFAULT_BROADCAST_PORT)]
    pub broadcast_port: u16,
    /// Most groups (source and repair together) one broadcast uses: its channels share them.
    #[arg(long, default_value_t = DEFAULT_BROADCAST_MAX_GROUPS)]
    pub broadcast_max_groups: u32,
    /// TTL (IPv4) and hop limit (IPv6) of broadcast packets.
    #[arg(long, default_value_t = 1)]
    pub multicast_ttl: u8,
    /// Interface broadcasts are sent from, by name (default: the routing table's choice).
    #[arg(long)]
    pub multicast_if: Option<String>,
    /// Hybrid serving: `auto` starts a broadcast of a title when its unicast demand would
    /// cost more than the broadcast's plan, and answers its session requests with it.
    #[arg(long = "broadcast", value_enum, default_value_t = BroadcastMode::Off)]
    pub broadcast_mode: BroadcastMode,
    /// The scheme of automatic broadcasts.
    #[arg(long, default_value = "cautious-harmonic")]
    pub broadcast_scheme: String,
    /// The maximum start-up wait of automatic broadcasts, seconds.
    #[arg(long, default_value_t = 5.0)]
    pub broadcast_max_wait_s: f64,
    /// Most control API connections open at once (default: 4096, or fewer if the open
    /// files limit leaves fewer after the data plane's reserve; more than it leaves is
    /// refused at start). At the cap a new connection closes the oldest one that has no
    /// request in service.
    #[arg(long)]
    pub api_max_connections: Option<usize>,
    /// A request head must be whole within this many milliseconds (from the connection's
    /// accept, or from the first byte of a later request), or the connection is closed.
    #[arg(long, default_value_t = DEFAULT_API_HEADER_TIMEOUT_MS)]
    pub api_header_timeout_ms: u64,
    /// A kept-alive connection without a request for this many milliseconds is closed.
    #[arg(long, default_value_t = DEFAULT_API_IDLE_TIMEOUT_MS)]
    pub api_idle_timeout_ms: u64,
    /// Serve the control API over HTTPS with this certificate chain (PEM; with
    /// `--tls-key`). `isnode cert` makes a self-signed pair.
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of `--tls-cert` (PEM).
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Serve plain HTTP on a non-loopback `--listen` address (without it, such a server
    /// needs `--tls-cert` and `--tls-key`).
    #[arg(long, conflicts_with = "tls_cert")]
    pub plain_http: bool,
    /// The role token file (default: `tokens.json` in the volume, made by `isnode token
    /// add`). Once it exists, operator and metrics routes need a token, on loopback too.
    #[arg(long)]
    pub tokens_file: Option<PathBuf>,
    /// Viewer routes answer requests without a token (`false`: a viewer token is needed,
    /// as `Authorization: Bearer` or `?token=` on content and HLS URLs).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub anonymous_viewers: bool,
    /// Serve operator and metrics routes without a token file on a non-loopback address
    /// (refused at start otherwise); logged with a warning.
    #[arg(long)]
    pub insecure_open_operator_routes: bool,
}

/// Whether the server broadcasts popular titles by itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BroadcastMode {
    /// Only broadcasts asked for (`POST /v1/broadcasts`).
    Off,
    /// Also when a title's unicast demand would cost more than its broadcast.
    Auto,
}

/// Default `--broadcast-groups`: organisation-local IPv4 and site-local IPv6 ranges.
pub(crate) const DEFAULT_BROADCAST_GROUPS: &str = "239.255.0.0/16,ff15::/64";
/// Default `--broadcast-port`.
pub(crate) const DEFAULT_BROADCAST_PORT: u16 = 30000;
/// Default `--broadcast-max-groups` (a receiver's socket joins at most 20 by default).
pub(crate) const DEFAULT_BROADCAST_MAX_GROUPS: u32 = 16;

impl ServeArgs {
    /// The bitrate budget in force: `--max-bitrate-bps`, or [`EGRESS_BUDGET_PERCENT`] of
    /// `--egress-capacity-bps`.
    pub fn bitrate_budget_bps(&self) -> u64 {
        self.max_bitrate_bps.unwrap_or_else(|| {
            let budget =
                u128::from(self.egress_capacity_bps) * u128::from(EGRESS_BUDGET_PERCENT) / 100;
            u64::try_from(budget).unwrap_or(u64::MAX)
        })
    }
}

impl Default for ServeArgs {
    fn default() -> Self {
        ServeArgs {
            listen: SocketAddr::from(([127, 0, 0, 1], 7878)),
            engine: EngineKind::Gso,
            cache_size_bytes: DEFAULT_CACHE_SIZE_BYTES,
            egress_capacity_bps: DEFAULT_EGRESS_CAPACITY_BPS,
            max_bitrate_bps: None,
            max_sessions_per_client: DEFAULT_MAX_SESSIONS_PER_CLIENT,
            threads: None,
            degraded: Degraded::Rebuild,
            session_timeout_ms: 5000,
            validate_timeout_ms: DEFAULT_VALIDATE_TIMEOUT_MS,
            validate_destination: ValidateDestination::Token,
            min_dest_port: DEFAULT_MIN_DEST_PORT,
            read_io: ReadIo::Uring,
            max_content_readers: DEFAULT_MAX_CONTENT_READERS,
            start_burst_factor: DEFAULT_START_BURST_FACTOR,
            start_burst_ms: DEFAULT_START_BURST_MS,
            broadcast_groups: DEFAULT_BROADCAST_GROUPS
                .split(',')
                .filter_map(|r| r.parse().ok())
                .collect(),
            broadcast_port: DEFAULT_BROADCAST_PORT,
            broadcast_max_groups: DEFAULT_BROADCAST_MAX_GROUPS,
            multicast_ttl: 1,
            multicast_if: None,
            broadcast_mode: BroadcastMode::Off,
            broadcast_scheme: "cautious-harmonic".into(),
            broadcast_max_wait_s: 5.0,
            api_max_connections: None,
            api_header_timeout_ms: DEFAULT_API_HEADER_TIMEOUT_MS,
            api_idle_timeout_ms: DEFAULT_API_IDLE_TIMEOUT_MS,
            tls_cert: None,
            tls_key: None,
            plain_http: false,
            tokens_file: None,
            anonymous_viewers: true,
            insecure_open_operator_routes: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ServeArgs,
    }

    fn parse(flags: &[&str]) -> ServeArgs {
        let argv = std::iter::once("serve").chain(flags.iter().copied());
        Cli::try_parse_from(argv).map(|c| c.args).unwrap()
    }

    #[test]
    fn the_flags_default_like_default() {
        let a = parse(&[]);
        let d = ServeArgs::default();
        assert_eq!(a.cache_size_bytes, d.cache_size_bytes);
        assert_eq!(a.egress_capacity_bps, d.egress_capacity_bps);
        assert_eq!(a.max_bitrate_bps, d.max_bitrate_bps);
        assert_eq!(a.max_sessions_per_client, d.max_sessions_per_client);
        assert_eq!(a.max_content_readers, d.max_content_readers);
        assert_eq!(a.bitrate_budget_bps(), 900_000_000);
        assert_eq!(a.max_sessions_per_client, 16);
        assert_eq!(a.broadcast_groups, d.broadcast_groups);
        assert_eq!(a.broadcast_groups.len(), 2);
        assert_eq!(
            (a.start_burst_factor, a.start_burst_ms),
            (d.start_burst_factor, d.start_burst_ms)
        );
    }

    #[test]
    fn old_flag_names_still_work() {
        let a = parse(&["--cache-size", "1024", "--max-bitrate", "5"]);
        assert_eq!((a.cache_size_bytes, a.bitrate_budget_bps()), (1024, 5));
        let a = parse(&["--cache-size-bytes", "2048", "--max-bitrate-bps", "7"]);
        assert_eq!((a.cache_size_bytes, a.bitrate_budget_bps()), (2048, 7));
    }

    #[test]
    fn the_budget_follows_the_egress_capacity() {
        let a = parse(&["--egress-capacity-bps", "10000000000"]);
        assert_eq!(a.bitrate_budget_bps(), 9_000_000_000);
        let a = parse(&["--egress-capacity-bps", &u64::MAX.to_string()]);
        assert_eq!(
            a.bitrate_budget_bps(),
            (u128::from(u64::MAX) * 90 / 100) as u64
        );
    }
}
