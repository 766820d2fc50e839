//! The server's configuration: one typed value ([`ServeConfig`]) that the command line and a
//! TOML file both produce (`packaging/isnode.toml` shows every key), validated once at start;
//! the API and the data plane read it, never the command line.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::groups::GroupRange;

/// Default egress capacity the bitrate budget is derived from: 1 Gbit/s.
pub const DEFAULT_EGRESS_CAPACITY_BPS: u64 = 1_000_000_000;
/// Share of the egress capacity admitted sessions may use together, in percent
/// (the rest is headroom for bursts, the FDT, retransmitted keepalives and other traffic).
pub const EGRESS_BUDGET_PERCENT: u64 = 90;
/// Default most concurrent sessions per client IP address.
pub const DEFAULT_MAX_SESSIONS_PER_CLIENT: u32 = 16;
/// Default size of the block pool, bytes.
pub const DEFAULT_CACHE_SIZE_BYTES: u64 = 256 << 20;

/// Default most HTTP bodies of content or repair packets produced at once: as many as the
/// API's default connection cap (which the descriptor budget may lower further). A content
/// body holds no thread and about one 64 KiB chunk while its player reads (issue 33); only
/// a codeword read from disk or rebuilt takes a blocking thread, for that codeword.
pub const DEFAULT_MAX_CONTENT_READERS: u64 = DEFAULT_API_MAX_CONNECTIONS as u64;
/// Default size of the HTTP mirror, bytes: as large as the default block pool.
pub const DEFAULT_HTTP_MIRROR_BYTES: u64 = 256 << 20;
/// Default `--api-header-timeout-ms`: a request head must be whole within 10 s.
pub const DEFAULT_API_HEADER_TIMEOUT_MS: u64 = 10_000;
/// Default `--api-idle-timeout-ms`: a kept-alive connection without a request for 60 s
/// is closed.
pub const DEFAULT_API_IDLE_TIMEOUT_MS: u64 = 60_000;
/// Most control API connections by default (fewer if the open files limit leaves fewer).
pub const DEFAULT_API_MAX_CONNECTIONS: usize = 4096;
/// Default playing time of the start-up burst, milliseconds.
pub const DEFAULT_START_BURST_MS: u64 = 1000;
/// Default speed-up of the start-up burst.
pub const DEFAULT_START_BURST_FACTOR: u32 = 4;

/// Number of send engines (the length of the per-engine metrics arrays).
pub const ENGINES: usize = 5;

/// The send engine of the data plane.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Degraded {
    /// Rebuild the missing symbols from the other members and send them.
    Rebuild,
    /// Send what can be read; the client's FEC repairs the rest.
    SendAvailable,
}

/// Whether a new session waits for its destination to prove that it listens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReadIo {
    /// io_uring `READ_FIXED` (O_DIRECT, registered pool buffers) without blocking the
    /// thread's other sessions; falls back to `Sync` where io_uring is unavailable.
    Uring,
    /// A synchronous `pread` (O_DIRECT where allowed) on the data-plane thread.
    Sync,
}

/// Whether uploads and fills are stored encrypted when an upload does not say (issue 32).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EncryptDefault {
    /// Stored clear (an upload may ask for encryption: `?encrypt=on`).
    #[default]
    Off,
    /// Uploads (unless one asks `?encrypt=off`) and fills from the origin are encrypted
    /// at ingest: MPEG-TS as HLS AES-128, CMAF as CENC `cbcs`; other media is refused.
    On,
}

/// Default `--validate-timeout-ms`: the token's round trip plus the client's start-up.
pub const DEFAULT_VALIDATE_TIMEOUT_MS: u64 = 3000;
/// Default `--min-dest-port`: the well-known ports are refused.
pub const DEFAULT_MIN_DEST_PORT: u16 = 1024;

/// Default `shutdown_grace_s`: how long SIGTERM lets sessions and broadcasts run on.
pub const DEFAULT_SHUTDOWN_GRACE_S: u64 = 30;
/// Most `shutdown_grace_s` accepted (an hour).
const MAX_SHUTDOWN_GRACE_S: u64 = 3600;
/// Default `session_timeout_ms`: a session without keepalive for this long ends.
const DEFAULT_SESSION_TIMEOUT_MS: u64 = 5000;

/// The configuration of `isnode serve`: built once from a TOML file
/// ([`ServeConfig::from_toml`]) and/or the command line, checked by
/// [`ServeConfig::validate`], then handed to `isnode_serve::start` as a value.
///
/// Every key is optional in the file; a missing key takes its default
/// ([`ServeConfig::default`]); an unknown key is an error. Names end in their unit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServeConfig {
    /// The volume directory (default: `--volume`, `ISNODE_VOLUME` or `./isnode-data`; the
    /// command line wins when it names one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume: Option<PathBuf>,
    /// Address of the HTTP control API.
    pub listen: SocketAddr,
    /// Send engine.
    pub engine: EngineKind,
    /// Size of the block pool in bytes (allocated at start; bounds the sessions at
    /// distinct positions: each needs about one block per member).
    pub cache_size_bytes: u64,
    /// Egress capacity of the server, bits per second. Unless `max_bitrate_bps` is set,
    /// admitted sessions may together send at most 90 % of it.
    pub egress_capacity_bps: u64,
    /// Bitrate budget: the sum of admitted sessions' send rates, bits per second
    /// (default: 90 % of `egress_capacity_bps`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_bitrate_bps: Option<u64>,
    /// Most concurrent sessions per client IP address.
    pub max_sessions_per_client: u32,
    /// The disks' sustained read rate, bits per second (0: not checked). With a pool engine
    /// a session is refused when the reads the sessions would need beyond what the pool
    /// shares between viewers of a title (interval caching) exceed it.
    pub disk_read_bps: u64,
    /// Control API threads: every HTTP connection (players' content included) is served by
    /// one of them (default: one per core, at most 4).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_threads: Option<usize>,
    /// Data-plane threads (default: one per core).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threads: Option<usize>,
    /// What to send for a failed member's packets.
    pub degraded: Degraded,
    /// A member is marked failed (not read any more, rebuilt from the others) after this
    /// many block read errors in a row (0: never).
    pub member_fail_errors: u32,
    /// Hedged reads: a member read slower than this (milliseconds) makes the member slow,
    /// and a burst whose block is waited for this long is rebuilt from the other members
    /// instead (0: never hedge).
    pub hedge_after_ms: u64,
    /// A session without keepalive for this long ends by itself (milliseconds).
    pub session_timeout_ms: u64,
    /// A new session streams only once its destination has echoed the token datagram sent
    /// to it (return routability); not echoed within this long, it ends (milliseconds).
    pub validate_timeout_ms: u64,
    /// Return routability of new sessions' destinations.
    pub validate_destination: ValidateDestination,
    /// Lowest destination UDP port a session may ask for.
    pub min_dest_port: u16,
    /// How blocks are read into the pool (`uring` falls back to `sync` where io_uring is
    /// unavailable).
    pub read_io: ReadIo,
    /// Most HTTP content bodies and repair answers produced at once; more are refused
    /// with 503.
    pub max_content_readers: u64,
    /// Most bytes of the HTTP mirror: codewords players read, held once as contiguous
    /// bytes in memory and sent with `sendfile` (0: none; every response copies out of
    /// the pool). Fixed at start.
    pub http_mirror_bytes: u64,
    /// Where the HTTP mirror's files are made (unnamed, `O_TMPFILE`): a tmpfs mounted with
    /// `huge=within_size` (or `always`), so that they get huge pages and `sendfile` of them
    /// takes a folio at a time; memory is then taken and given back a huge page at a time.
    /// `None`: files in memory of their own (`memfd`), a page at a time.
    pub http_mirror_dir: Option<PathBuf>,
    /// Start-up burst: a session's first codewords go out this many times faster than its
    /// rate, within the headroom above the bitrate budget. 0 or 1: no burst.
    pub start_burst_factor: u32,
    /// Playing time of the media sent in the start-up burst, milliseconds (0: no burst).
    pub start_burst_ms: u64,
    /// Multicast groups broadcasts may use (`ADDRESS/PREFIX`, IPv4 and IPv6 ranges).
    pub broadcast_groups: Vec<GroupRange>,
    /// UDP port of a broadcast's channel 0 (channel c: this + c) unless the request names one.
    pub broadcast_port: u16,
    /// Most groups (source and repair together) one broadcast uses.
    pub broadcast_max_groups: u32,
    /// TTL (IPv4) and hop limit (IPv6) of broadcast packets.
    pub multicast_ttl: u8,
    /// Interface broadcasts are sent from, by name (default: the routing table's choice).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub multicast_if: Option<String>,
    /// Hybrid serving: `auto` starts a broadcast of a title when its unicast demand would
    /// cost more than the broadcast's plan.
    #[serde(rename = "broadcast")]
    pub broadcast_mode: BroadcastMode,
    /// The scheme of automatic broadcasts.
    pub broadcast_scheme: String,
    /// The maximum start-up wait of automatic broadcasts, seconds.
    pub broadcast_max_wait_s: f64,
    /// Most control API connections open at once (default: 4096, or fewer if the open
    /// files limit leaves fewer after the data plane's reserve).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_max_connections: Option<usize>,
    /// A request head must be whole within this many milliseconds.
    pub api_header_timeout_ms: u64,
    /// A kept-alive connection without a request for this many milliseconds is closed.
    pub api_idle_timeout_ms: u64,
    /// Serve the control API over HTTPS with this certificate chain (PEM; with `tls_key`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of `tls_cert` (PEM).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_key: Option<PathBuf>,
    /// Serve plain HTTP on a non-loopback `listen` address.
    pub plain_http: bool,
    /// On SIGTERM, sessions and broadcasts run on for at most this many seconds while
    /// nothing new is admitted; then the server exits.
    pub shutdown_grace_s: u64,
    /// How long a broadcast request that names no end (`until`, `duration_s` or `cycles`)
    /// runs, seconds.
    pub broadcast_default_duration_s: f64,
    /// The longest a requested broadcast may run, seconds: a request asking for more is
    /// refused (`400`).
    pub broadcast_max_duration_s: f64,
    /// The share of the bitrate budget the broadcasts may take together, percent: the rest
    /// stays for unicast sessions.
    pub broadcast_budget_percent: u32,
    /// Uploads (`PUT /v1/objects/{name}`): most bytes the stored objects' segment files may
    /// take in all (none: only the free space limits); an upload past it is refused (`507`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_volume_bytes: Option<u64>,
    /// Uploads: a body that brings no byte for this many milliseconds is cut; so is one
    /// that brings fewer than `upload_min_rate_bps` over such a window.
    pub upload_stall_timeout_ms: u64,
    /// Uploads: the slowest accepted body rate, bits per second, averaged over windows of
    /// `upload_stall_timeout_ms` (0: only stalls are cut).
    pub upload_min_rate_bps: u64,
    /// A response body that makes no progress (no byte taken by the client) for this many
    /// milliseconds is dropped with its connection, releasing what it held (a content
    /// reader's place). At the connection cap, a connection whose response has made no
    /// progress for the header timeout may be evicted.
    pub api_write_timeout_ms: u64,
    /// The send buffer of each control API connection (`SO_SNDBUF`; the kernel doubles it
    /// for its bookkeeping), 0: the kernel's autotuning. A content body sent with
    /// `sendfile` keeps the HTTP mirror's pages in the socket until the client has them:
    /// this bounds that memory per reader (autotuning lets each grow to `tcp_wmem`'s
    /// maximum, 4 MiB), which the mirror's budget does not see.
    pub api_send_buffer_bytes: u64,
    /// Most sessions at once under the `sendfile` engine, which holds a socket for each
    /// (default: half of the descriptors the open files limit leaves after the rest of the
    /// data plane, at most 4096). More: `503` with `limit: max_sendfile_sessions`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_sendfile_sessions: Option<u64>,
    /// Most sessions awaiting their token's echo, in all (they take no bitrate budget, pool
    /// nor disk reads until then). More: `503` with `limit: max_unvalidated_sessions`.
    pub max_unvalidated_sessions: u32,
    /// Most sessions awaiting their token's echo per client (an IPv4 address, an IPv6 /64).
    /// More: `503` with `limit: max_unvalidated_per_client`.
    pub max_unvalidated_per_client: u32,
    /// The role token file (default: `tokens.json` in the volume, made by `isnode token
    /// add`). Once it exists, operator and metrics routes need a token, on loopback too.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_file: Option<PathBuf>,
    /// The node key file that unwraps the content keys of encrypted titles (default:
    /// `node.key` in the volume, made by `isnode ingest --encrypt`); mode 0600, refused
    /// when its group or others may read it. Read at each key request (a rewrap needs no
    /// restart).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_key_file: Option<PathBuf>,
    /// Whether uploads and fills are encrypted when an upload does not say (`off`, `on`;
    /// issue 32). With `on` and an origin, `cluster_key_file` is needed.
    pub encrypt: EncryptDefault,
    /// The cluster key file (64 hexadecimal digits, mode 0600): the content key, key id and
    /// IVs of an encrypted fill are derived from it over the title's name and origin ETag,
    /// so that edges holding the same file write byte-identical ciphertext.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_key_file: Option<PathBuf>,
    /// How long a content key or Clear Key licence handed out is good for, seconds (0: no
    /// limit but the token's own expiry): the key route's `Isnode-Key-Expires` header and
    /// the licence's `expires_unix_s` say when it ends (the earlier of this and the token's
    /// expiry); `isnode play` refuses a key past it.
    pub licence_ttl_s: u64,
    /// Viewer routes answer requests without a token (`false`: a viewer token is needed,
    /// as `Authorization: Bearer` or `?token=` on content and HLS URLs).
    pub anonymous_viewers: bool,
    /// Serve operator and metrics routes without a token file on a non-loopback address
    /// (refused at start otherwise); logged with a warning.
    pub insecure_open_operator_routes: bool,
    /// Background scrub: the most bits per second it reads from the members, slowed down
    /// by the viewers (0: off). Passes run back to back, a minute apart.
    pub scrub_rate_bps: u64,
    /// The origin titles the volume lacks are filled from: `s3://BUCKET` or
    /// `file:///DIR` (empty: none, a missing title is `404`).
    pub origin: String,
    /// The S3 endpoint of the origin (`http://HOST:PORT` for Garage or MinIO; empty: AWS).
    pub origin_endpoint: String,
    /// The origin's SigV4 region (empty: `AWS_REGION`, else `us-east-1`).
    pub origin_region: String,
    /// The origin's access key id (absent: `AWS_ACCESS_KEY_ID`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin_access_key_id: Option<String>,
    /// The origin's secret key (absent: `AWS_SECRET_ACCESS_KEY`). Never printed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin_secret_access_key: Option<Secret>,
    /// Ranged GETs of one fill in flight at once.
    pub fill_parallel_ranges: u32,
    /// Bytes of one ranged GET (a multiple of 1 MiB: the origin's blocks).
    pub fill_range_bytes: u64,
    /// Most bytes the titles of the volume may take before a fill evicts (0: 90 % of
    /// `max_volume_bytes`, or of what the volume holds plus its free space); a fill first
    /// evicts the least recently used titles no session or broadcast uses and none pinned.
    pub cache_max_bytes: u64,
    /// A complete title's origin ETag is checked again at most this often, on a request
    /// (seconds; 0: never).
    pub origin_check_interval_s: u64,
    /// Viewers' requests waiting on fills at once, all clients together (past it: `503`).
    pub fill_max_waiters: u32,
    /// Viewers' requests waiting on fills at once from one client (an IPv4 address or an
    /// IPv6 /64).
    pub fill_max_waiters_per_client: u32,
    /// Fills a viewer's request may start while this many run (pre-fills and resumed
    /// fills count, and are not refused).
    pub fill_max_active: u32,
    /// Fills running that one client's requests started (an IPv4 address or an IPv6 /64).
    pub fill_max_per_client: u32,
    /// A title the origin lacks is answered `404` without asking it again for this long
    /// (seconds; 0: always ask).
    pub origin_miss_ttl_s: u64,
    /// Pre-fills (`POST /v1/fills`) read the origin at most this fast (bits per second;
    /// 0: unlimited); a request may ask for less.
    pub prefill_rate_bps: u64,
    /// A member failed by read errors alone is probed this often (one block read and its
    /// identity checked) and used again when the probe succeeds (milliseconds; 0: never).
    pub member_probe_interval_ms: u64,
    /// This node's name in `nodes` (required with a node list).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// A title requested more often than this (requests per second, as one node counts them)
    /// is served by `ceil(rate / replicate_above_rps)` nodes of its ranking (0: never).
    pub replicate_above_rps: f64,
    /// Every peer of the cluster is probed (`GET /v1/health`) this often, milliseconds.
    pub probe_interval_ms: u64,
    /// A probe not answered `200` within this long failed, milliseconds.
    pub probe_timeout_ms: u64,
    /// A peer is dead after this many failed probes in a row (live again at one answer).
    pub probe_failures_to_dead: u32,
    /// A node whose load (its share of its admission capacity, carried by its health
    /// answer) is above this multiple of the live nodes' mean, and above half its capacity,
    /// takes no new requests of its titles: they go to the next node of each title's
    /// ranking under the bound (0: loads are not used).
    pub load_bound: f64,
    /// The certificates (PEM) that the cluster's peers' HTTPS certificates must chain to
    /// when `nodes` name `https://` URLs: a private CA, or the nodes' self-signed
    /// certificates (default: the public web roots).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_ca_file: Option<PathBuf>,
    /// The edges of the cluster, this one included (docs/scale-out.md): each a table of
    /// `name`, `url` (its control API, `https://host:port`, or `http://host:port` in a
    /// cluster of plain-HTTP nodes) and `weight` (default 1). Empty:
    /// a single node that serves every title itself. Last in the file (an array of tables).
    pub nodes: Vec<isnode_edge::placement::Node>,
}

/// Default `replicate_above_rps`.
pub const DEFAULT_REPLICATE_ABOVE_RPS: f64 = 10.0;
/// Default `probe_interval_ms`.
pub const DEFAULT_PROBE_INTERVAL_MS: u64 = 1000;
/// Default `probe_timeout_ms`.
pub const DEFAULT_PROBE_TIMEOUT_MS: u64 = 500;
/// Default `probe_failures_to_dead`.
pub const DEFAULT_PROBE_FAILURES_TO_DEAD: u32 = 3;
/// Default `load_bound`.
pub const DEFAULT_LOAD_BOUND: f64 = 1.25;

/// A secret of the configuration: `Debug` and `to_toml` show `***`, never the value.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// A secret holding `value`.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value itself (to sign requests with; never to print).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

impl Serialize for Secret {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("***")
    }
}

/// Default `fill_parallel_ranges`.
pub const DEFAULT_FILL_PARALLEL_RANGES: u32 = 4;
/// Default `fill_range_bytes` (1 MiB: one block of Garage).
pub const DEFAULT_FILL_RANGE_BYTES: u64 = 1 << 20;
/// Default `origin_check_interval_s`.
pub const DEFAULT_ORIGIN_CHECK_INTERVAL_S: u64 = 300;
/// Default `fill_max_waiters`.
pub const DEFAULT_FILL_MAX_WAITERS: u32 = 256;
/// Default `fill_max_waiters_per_client`.
pub const DEFAULT_FILL_MAX_WAITERS_PER_CLIENT: u32 = 64;
/// Default `fill_max_active`.
pub const DEFAULT_FILL_MAX_ACTIVE: u32 = 16;
/// Default `fill_max_per_client`.
pub const DEFAULT_FILL_MAX_PER_CLIENT: u32 = 4;
/// Default `origin_miss_ttl_s`.
pub const DEFAULT_ORIGIN_MISS_TTL_S: u64 = 60;

/// Default of `member_fail_errors`: block read errors in a row that fail a member.
const DEFAULT_MEMBER_FAIL_ERRORS: u32 = 5;
/// Default of `member_probe_interval_ms`: a member failed by read errors is probed twice
/// a minute.
const DEFAULT_MEMBER_PROBE_INTERVAL_MS: u64 = 30_000;
/// Default of `hedge_after_ms`: a read slower than this is hedged (milliseconds).
const DEFAULT_HEDGE_AFTER_MS: u64 = 50;
/// The largest `disk_read_bps` (10 Tbit/s: past any disk array).
const MAX_DISK_READ_BPS: u64 = 10_000_000_000_000;

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            volume: None,
            listen: SocketAddr::from(([127, 0, 0, 1], 7878)),
            engine: EngineKind::Gso,
            cache_size_bytes: DEFAULT_CACHE_SIZE_BYTES,
            egress_capacity_bps: DEFAULT_EGRESS_CAPACITY_BPS,
            max_bitrate_bps: None,
            max_sessions_per_client: DEFAULT_MAX_SESSIONS_PER_CLIENT,
            disk_read_bps: 0,
            api_threads: None,
            threads: None,
            degraded: Degraded::Rebuild,
            member_fail_errors: DEFAULT_MEMBER_FAIL_ERRORS,
            hedge_after_ms: DEFAULT_HEDGE_AFTER_MS,
            session_timeout_ms: DEFAULT_SESSION_TIMEOUT_MS,
            validate_timeout_ms: DEFAULT_VALIDATE_TIMEOUT_MS,
            validate_destination: ValidateDestination::Token,
            min_dest_port: DEFAULT_MIN_DEST_PORT,
            read_io: ReadIo::Uring,
            max_content_readers: DEFAULT_MAX_CONTENT_READERS,
            http_mirror_bytes: DEFAULT_HTTP_MIRROR_BYTES,
            http_mirror_dir: None,
            start_burst_factor: DEFAULT_START_BURST_FACTOR,
            start_burst_ms: DEFAULT_START_BURST_MS,
            broadcast_groups: default_broadcast_groups(),
            broadcast_port: DEFAULT_BROADCAST_PORT,
            broadcast_max_groups: DEFAULT_BROADCAST_MAX_GROUPS,
            multicast_ttl: 1,
            multicast_if: None,
            broadcast_mode: BroadcastMode::Off,
            broadcast_scheme: DEFAULT_BROADCAST_SCHEME.into(),
            broadcast_max_wait_s: DEFAULT_BROADCAST_MAX_WAIT_S,
            api_max_connections: None,
            api_header_timeout_ms: DEFAULT_API_HEADER_TIMEOUT_MS,
            api_idle_timeout_ms: DEFAULT_API_IDLE_TIMEOUT_MS,
            tls_cert: None,
            tls_key: None,
            plain_http: false,
            shutdown_grace_s: DEFAULT_SHUTDOWN_GRACE_S,
            broadcast_default_duration_s: DEFAULT_BROADCAST_DURATION_S,
            broadcast_max_duration_s: DEFAULT_BROADCAST_MAX_DURATION_S,
            broadcast_budget_percent: DEFAULT_BROADCAST_BUDGET_PERCENT,
            max_volume_bytes: None,
            upload_stall_timeout_ms: DEFAULT_UPLOAD_STALL_TIMEOUT_MS,
            upload_min_rate_bps: DEFAULT_UPLOAD_MIN_RATE_BPS,
            api_write_timeout_ms: DEFAULT_API_WRITE_TIMEOUT_MS,
            api_send_buffer_bytes: DEFAULT_API_SEND_BUFFER_BYTES,
            max_sendfile_sessions: None,
            max_unvalidated_sessions: DEFAULT_MAX_UNVALIDATED_SESSIONS,
            max_unvalidated_per_client: DEFAULT_MAX_UNVALIDATED_PER_CLIENT,
            tokens_file: None,
            node_key_file: None,
            encrypt: EncryptDefault::Off,
            cluster_key_file: None,
            licence_ttl_s: 0,
            anonymous_viewers: true,
            insecure_open_operator_routes: false,
            scrub_rate_bps: 0,
            origin: String::new(),
            origin_endpoint: String::new(),
            origin_region: String::new(),
            origin_access_key_id: None,
            origin_secret_access_key: None,
            fill_parallel_ranges: DEFAULT_FILL_PARALLEL_RANGES,
            fill_range_bytes: DEFAULT_FILL_RANGE_BYTES,
            cache_max_bytes: 0,
            origin_check_interval_s: DEFAULT_ORIGIN_CHECK_INTERVAL_S,
            fill_max_waiters: DEFAULT_FILL_MAX_WAITERS,
            fill_max_waiters_per_client: DEFAULT_FILL_MAX_WAITERS_PER_CLIENT,
            fill_max_active: DEFAULT_FILL_MAX_ACTIVE,
            fill_max_per_client: DEFAULT_FILL_MAX_PER_CLIENT,
            origin_miss_ttl_s: DEFAULT_ORIGIN_MISS_TTL_S,
            prefill_rate_bps: 0,
            member_probe_interval_ms: DEFAULT_MEMBER_PROBE_INTERVAL_MS,
            node_name: None,
            replicate_above_rps: DEFAULT_REPLICATE_ABOVE_RPS,
            probe_interval_ms: DEFAULT_PROBE_INTERVAL_MS,
            probe_timeout_ms: DEFAULT_PROBE_TIMEOUT_MS,
            probe_failures_to_dead: DEFAULT_PROBE_FAILURES_TO_DEAD,
            load_bound: DEFAULT_LOAD_BOUND,
            cluster_ca_file: None,
            nodes: Vec::new(),
        }
    }
}

/// The largest `scrub_rate_bps` (1 Tbit/s: past any disk).
pub const MAX_SCRUB_RATE_BPS: u64 = 1_000_000_000_000;

/// Whether the server broadcasts popular titles by itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BroadcastMode {
    /// Only broadcasts asked for (`POST /v1/broadcasts`).
    Off,
    /// Also when a title's unicast demand would cost more than its broadcast.
    Auto,
}

/// Default `broadcast_groups`: organisation-local IPv4 and site-local IPv6 ranges.
pub const DEFAULT_BROADCAST_GROUPS: &str = "239.255.0.0/16,ff15::/64";
/// Default `broadcast_port`.
pub const DEFAULT_BROADCAST_PORT: u16 = 30000;
/// Default `broadcast_max_groups` (a receiver's socket joins at most 20 by default).
pub const DEFAULT_BROADCAST_MAX_GROUPS: u32 = 16;
/// Default `broadcast_default_duration_s`: one hour.
pub const DEFAULT_BROADCAST_DURATION_S: f64 = 3600.0;
/// Default `broadcast_max_duration_s`: one day.
pub const DEFAULT_BROADCAST_MAX_DURATION_S: f64 = 86_400.0;
/// Default `broadcast_budget_percent`.
pub const DEFAULT_BROADCAST_BUDGET_PERCENT: u32 = 50;
/// Default `api_write_timeout_ms`: a response body without progress for 30 s is dropped
/// (above the 10 s a body may wait for its blocks).
pub const DEFAULT_API_WRITE_TIMEOUT_MS: u64 = 30_000;
/// Default `api_send_buffer_bytes`: 256 KiB (512 KiB of queue once the kernel doubles it:
/// 40 Mbit/s to a reader 100 ms away). Measured: under a 128 MiB memory limit, 32 HTTP
/// readers with autotuned buffers held the mirror's pages past the limit and the kernel's
/// OOM killer ended the server; with 512 KiB of queue each, 33 of 37 played.
pub const DEFAULT_API_SEND_BUFFER_BYTES: u64 = 256 << 10;
/// Largest `api_send_buffer_bytes` (the kernel caps it at `wmem_max` anyway).
pub const MAX_API_SEND_BUFFER_BYTES: u64 = 64 << 20;
/// Default `max_unvalidated_sessions`.
pub const DEFAULT_MAX_UNVALIDATED_SESSIONS: u32 = 4096;
/// Default `max_unvalidated_per_client`.
pub const DEFAULT_MAX_UNVALIDATED_PER_CLIENT: u32 = 32;
/// Default `upload_stall_timeout_ms`.
pub const DEFAULT_UPLOAD_STALL_TIMEOUT_MS: u64 = 30_000;
/// Default `upload_min_rate_bps` (64 kbit/s).
pub const DEFAULT_UPLOAD_MIN_RATE_BPS: u64 = 64_000;
/// Default `broadcast_scheme`.
pub const DEFAULT_BROADCAST_SCHEME: &str = "cautious-harmonic";
/// Default `broadcast_max_wait_s`.
pub const DEFAULT_BROADCAST_MAX_WAIT_S: f64 = 5.0;

fn default_broadcast_groups() -> Vec<GroupRange> {
    DEFAULT_BROADCAST_GROUPS
        .split(',')
        .filter_map(|r| r.parse().ok())
        .collect()
}

/// A configuration that cannot be used: the file does not parse, or a value is out of range.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file is not valid TOML for [`ServeConfig`] (an unknown key, a value of the wrong
    /// type); the message names the key and its line.
    #[error("{0}")]
    Parse(String),
    /// A value is out of its range.
    #[error("{key}{}: {why}", line.map(|l| format!(" (line {l})")).unwrap_or_default())]
    Invalid {
        /// The offending key.
        key: &'static str,
        /// Its line in the file, when it came from one.
        line: Option<usize>,
        /// What is wrong.
        why: String,
    },
}

impl ServeConfig {
    /// Parses a TOML configuration (every key optional) and validates it. Errors name the
    /// key and its line.
    pub fn from_toml(text: &str) -> Result<ServeConfig, ConfigError> {
        let config: ServeConfig =
            toml::from_str(text).map_err(|e| ConfigError::Parse(e.to_string().trim().into()))?;
        config.validate().map_err(|e| match e {
            ConfigError::Invalid { key, why, .. } => ConfigError::Invalid {
                key,
                line: line_of(text, key),
                why,
            },
            e => e,
        })?;
        Ok(config)
    }

    /// This configuration as TOML (every key that has a value).
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_else(|e| format!("# cannot render: {e}\n"))
    }

    /// Checks every value's range and the combinations that cannot work together.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |key: &'static str, why: &str| {
            Err(ConfigError::Invalid {
                key,
                line: None,
                why: why.into(),
            })
        };
        if self.cache_size_bytes == 0 {
            return bad("cache_size_bytes", "must be above 0");
        }
        if self.egress_capacity_bps == 0 {
            return bad("egress_capacity_bps", "must be above 0");
        }
        if self.max_bitrate_bps == Some(0) {
            return bad("max_bitrate_bps", "must be above 0");
        }
        if self.max_sessions_per_client == 0 {
            return bad("max_sessions_per_client", "must be at least 1");
        }
        if self.disk_read_bps > MAX_DISK_READ_BPS {
            return bad(
                "disk_read_bps",
                "must be at most 10^13 (10 Tbit/s; 0: not checked)",
            );
        }
        if matches!(self.api_threads, Some(t) if !(1..=64).contains(&t)) {
            return bad("api_threads", "must be between 1 and 64");
        }
        if matches!(self.threads, Some(t) if !(1..=256).contains(&t)) {
            return bad("threads", "must be between 1 and 256");
        }
        if self.session_timeout_ms < 100 {
            return bad("session_timeout_ms", "must be at least 100");
        }
        if self.validate_timeout_ms == 0 {
            return bad("validate_timeout_ms", "must be above 0");
        }
        if self.max_content_readers == 0 {
            return bad("max_content_readers", "must be at least 1");
        }
        if self.member_fail_errors > 1_000_000 {
            return bad("member_fail_errors", "must be at most 1000000 (0: never)");
        }
        if self.hedge_after_ms > 60_000 {
            return bad("hedge_after_ms", "must be at most 60000 (0: never hedge)");
        }
        self.validate_broadcast()?;
        self.validate_api()?;
        self.validate_cluster()?;
        self.validate_origin()
    }

    fn validate_origin(&self) -> Result<(), ConfigError> {
        let bad = |key: &'static str, why: String| {
            Err(ConfigError::Invalid {
                key,
                line: None,
                why,
            })
        };
        if !self.origin.is_empty() {
            if let Err(why) = crate::origin::OriginKind::parse(&self.origin) {
                return bad("origin", why);
            }
        }
        let e = &self.origin_endpoint;
        if !(e.is_empty() || e.starts_with("http://") || e.starts_with("https://")) {
            return bad(
                "origin_endpoint",
                "must be an http:// or https:// URL".into(),
            );
        }
        if !(1..=64).contains(&self.fill_parallel_ranges) {
            return bad("fill_parallel_ranges", "must be 1 to 64".into());
        }
        let mib = DEFAULT_FILL_RANGE_BYTES;
        if self.fill_range_bytes == 0
            || self.fill_range_bytes % mib != 0
            || self.fill_range_bytes > 64 * mib
        {
            return bad(
                "fill_range_bytes",
                "must be a multiple of 1048576 (1 MiB), at most 64 MiB".into(),
            );
        }
        let limits = [
            ("fill_max_waiters", self.fill_max_waiters),
            (
                "fill_max_waiters_per_client",
                self.fill_max_waiters_per_client,
            ),
            ("fill_max_active", self.fill_max_active),
            ("fill_max_per_client", self.fill_max_per_client),
        ];
        for (key, v) in limits {
            if !(1..=100_000).contains(&v) {
                return bad(key, "must be 1 to 100000".into());
            }
        }
        if self.origin_miss_ttl_s > 86_400 {
            return bad(
                "origin_miss_ttl_s",
                "must be at most 86400 (0: always ask)".into(),
            );
        }
        if self.encrypt == EncryptDefault::On
            && !self.origin.is_empty()
            && self.cluster_key_file.is_none()
        {
            return bad(
                "cluster_key_file",
                "encrypt = \"on\" with an origin needs a cluster key file (edges derive the \
                 keys of a fill from it)"
                    .into(),
            );
        }
        if self.origin_access_key_id.is_some() != self.origin_secret_access_key.is_some() {
            return bad(
                "origin_access_key_id",
                "origin_access_key_id and origin_secret_access_key go together".into(),
            );
        }
        Ok(())
    }

    fn validate_cluster(&self) -> Result<(), ConfigError> {
        let bad = |key: &'static str, why: String| {
            Err(ConfigError::Invalid {
                key,
                line: None,
                why,
            })
        };
        if !(self.replicate_above_rps.is_finite() && self.replicate_above_rps >= 0.0) {
            return bad("replicate_above_rps", "must be 0 (never) or above".into());
        }
        if !(10..=3_600_000).contains(&self.probe_interval_ms) {
            return bad("probe_interval_ms", "must be between 10 and 3600000".into());
        }
        if !(1..=60_000).contains(&self.probe_timeout_ms) {
            return bad("probe_timeout_ms", "must be between 1 and 60000".into());
        }
        if !(1..=1000).contains(&self.probe_failures_to_dead) {
            return bad(
                "probe_failures_to_dead",
                "must be between 1 and 1000".into(),
            );
        }
        if !(self.load_bound == 0.0 || (1.0..=100.0).contains(&self.load_bound)) {
            return bad(
                "load_bound",
                "must be 0 (off) or between 1 and 100 (a multiple of the mean load)".into(),
            );
        }
        if self.nodes.is_empty() {
            return Ok(());
        }
        if let Err(e) = isnode_edge::cluster::check_nodes(&self.nodes) {
            return bad("nodes", e.to_string());
        }
        self.validate_node_urls()?;
        match &self.node_name {
            None => bad("node_name", "a node list needs this node's name".into()),
            Some(me) if !self.nodes.iter().any(|n| &n.name == me) => bad(
                "node_name",
                format!("{me:?} is not one of the names in `nodes`"),
            ),
            Some(me) => self.validate_own_scheme(me),
        }
    }

    /// Every node URL `http://` or `https://`, all of one scheme; a CA file that is there.
    fn validate_node_urls(&self) -> Result<(), ConfigError> {
        let bad = |key: &'static str, why: String| {
            Err(ConfigError::Invalid {
                key,
                line: None,
                why,
            })
        };
        let https = |u: &str| u.starts_with("https://");
        if let Some(n) = self
            .nodes
            .iter()
            .find(|n| !(https(&n.url) || n.url.starts_with("http://")))
        {
            return bad(
                "nodes",
                format!(
                    "node {:?}: its url {:?} must be https://host:port (or http://host:port in a cluster of plain-HTTP nodes)",
                    n.name, n.url
                ),
            );
        }
        let tls_nodes = self.nodes.iter().filter(|n| https(&n.url)).count();
        if tls_nodes != 0 && tls_nodes != self.nodes.len() {
            let plain = self.nodes.iter().find(|n| !https(&n.url));
            return bad(
                "nodes",
                format!(
                    "mixes https:// and http:// nodes ({:?} is plain HTTP): viewers' tokens never go to a plain-HTTP node, so its redirected viewers would be refused; give every node https:// (or every node http://)",
                    plain.map(|n| n.name.as_str()).unwrap_or_default()
                ),
            );
        }
        match &self.cluster_ca_file {
            Some(ca) if tls_nodes == 0 => bad(
                "cluster_ca_file",
                format!(
                    "{} is set but no node is https://: the probes would not use it",
                    ca.display()
                ),
            ),
            Some(ca) if !ca.is_file() => bad(
                "cluster_ca_file",
                format!("{} is not a readable file", ca.display()),
            ),
            _ => Ok(()),
        }
    }

    /// This node's own URL in `nodes` of the scheme it serves (`https://` with `tls_cert`).
    fn validate_own_scheme(&self, me: &str) -> Result<(), ConfigError> {
        let Some(own) = self.nodes.iter().find(|n| n.name == me) else {
            return Ok(());
        };
        let why = match (self.tls_cert.is_some(), own.url.starts_with("https://")) {
            (true, false) => format!(
                "this node serves HTTPS (tls_cert) but its url in `nodes` is {:?}: peers would probe and redirect to it over plain HTTP, which it does not speak; give the nodes https:// URLs (and cluster_ca_file if their certificates are self-signed)",
                own.url
            ),
            (false, true) => format!(
                "this node's url in `nodes` is {:?} but it serves plain HTTP (no tls_cert): give tls_cert and tls_key",
                own.url
            ),
            _ => return Ok(()),
        };
        Err(ConfigError::Invalid {
            key: "nodes",
            line: None,
            why,
        })
    }

    fn validate_broadcast(&self) -> Result<(), ConfigError> {
        let bad = |key: &'static str, why: String| {
            Err(ConfigError::Invalid {
                key,
                line: None,
                why,
            })
        };
        if !(self.broadcast_max_wait_s.is_finite() && self.broadcast_max_wait_s > 0.0) {
            return bad("broadcast_max_wait_s", "must be a number above 0".into());
        }
        if self.broadcast_max_groups < 2 {
            return bad(
                "broadcast_max_groups",
                "must be at least 2 (a source and a repair group)".into(),
            );
        }
        let positive = |v: f64| v.is_finite() && v > 0.0;
        if !positive(self.broadcast_default_duration_s) {
            return bad(
                "broadcast_default_duration_s",
                "must be a number above 0".into(),
            );
        }
        if !positive(self.broadcast_max_duration_s)
            || self.broadcast_max_duration_s < self.broadcast_default_duration_s
        {
            return bad(
                "broadcast_max_duration_s",
                "must be at least broadcast_default_duration_s".into(),
            );
        }
        if self.broadcast_budget_percent > 100 {
            return bad("broadcast_budget_percent", "must be 0 to 100".into());
        }
        if self.broadcast_groups.is_empty() {
            return bad("broadcast_groups", "must name at least one range".into());
        }
        let params = isnode_broadcast::SchemeParams::default();
        if let Err(e) = isnode_broadcast::Scheme::parse(&self.broadcast_scheme, params) {
            return bad("broadcast_scheme", e.to_string());
        }
        Ok(())
    }

    fn validate_api(&self) -> Result<(), ConfigError> {
        let bad = |key: &'static str, why: &str| {
            Err(ConfigError::Invalid {
                key,
                line: None,
                why: why.into(),
            })
        };
        if self.api_header_timeout_ms == 0 {
            return bad("api_header_timeout_ms", "must be above 0");
        }
        if self.api_idle_timeout_ms == 0 {
            return bad("api_idle_timeout_ms", "must be above 0");
        }
        if self.api_send_buffer_bytes > MAX_API_SEND_BUFFER_BYTES {
            return bad(
                "api_send_buffer_bytes",
                "must be at most 64 MiB (0: the kernel's)",
            );
        }
        if self.api_write_timeout_ms == 0 {
            return bad("api_write_timeout_ms", "must be above 0");
        }
        if self.max_sendfile_sessions == Some(0) {
            return bad("max_sendfile_sessions", "must be at least 1");
        }
        if self.api_max_connections == Some(0) {
            return bad("api_max_connections", "must be at least 1");
        }
        match (&self.tls_cert, &self.tls_key) {
            (Some(_), None) => return bad("tls_key", "tls_cert needs tls_key"),
            (None, Some(_)) => return bad("tls_cert", "tls_key needs tls_cert"),
            (Some(_), Some(_)) if self.plain_http => {
                return bad("plain_http", "cannot be set with tls_cert")
            }
            _ => {}
        }
        if self.upload_stall_timeout_ms == 0 {
            return bad("upload_stall_timeout_ms", "must be above 0");
        }
        if self.max_volume_bytes == Some(0) {
            return bad("max_volume_bytes", "must be above 0");
        }
        if self.shutdown_grace_s > MAX_SHUTDOWN_GRACE_S {
            return bad("shutdown_grace_s", "must be at most 3600");
        }
        if self.scrub_rate_bps > MAX_SCRUB_RATE_BPS {
            return bad("scrub_rate_bps", "must be at most 1000000000000 (1 Tbit/s)");
        }
        if self.member_probe_interval_ms != 0
            && !(1_000..=86_400_000).contains(&self.member_probe_interval_ms)
        {
            return bad(
                "member_probe_interval_ms",
                "must be 0 (never) or from 1000 to 86400000 (a day)",
            );
        }
        Ok(())
    }

    /// The bitrate budget in force: `max_bitrate_bps`, or [`EGRESS_BUDGET_PERCENT`] of
    /// `egress_capacity_bps`.
    pub fn bitrate_budget_bps(&self) -> u64 {
        self.max_bitrate_bps.unwrap_or_else(|| {
            let budget =
                u128::from(self.egress_capacity_bps) * u128::from(EGRESS_BUDGET_PERCENT) / 100;
            u64::try_from(budget).unwrap_or(u64::MAX)
        })
    }

    /// Gives `new` (just read) the running value of every setting that needs a restart, and
    /// returns the names of those whose value differed (a reload reports them).
    pub fn keep_restart_only(&self, new: &mut ServeConfig) -> Vec<&'static str> {
        let mut kept = Vec::new();
        macro_rules! keep {
            ($($field:ident),* $(,)?) => {
                $(
                    if self.$field != new.$field {
                        kept.push(stringify!($field));
                        new.$field.clone_from(&self.$field);
                    }
                )*
            };
        }
        keep!(
            volume,
            listen,
            engine,
            cache_size_bytes,
            threads,
            api_threads,
            read_io,
            api_max_connections,
            api_header_timeout_ms,
            api_idle_timeout_ms,
            api_write_timeout_ms,
            api_send_buffer_bytes,
            http_mirror_bytes,
            http_mirror_dir,
            max_sendfile_sessions,
            tokens_file,
            insecure_open_operator_routes,
            tls_cert,
            tls_key,
            plain_http,
            multicast_ttl,
            multicast_if,
            origin,
            origin_endpoint,
            origin_region,
            origin_access_key_id,
            origin_secret_access_key,
        );
        kept
    }
}

/// The 1-based line of `key = ...` in `text`, if it is there.
fn line_of(text: &str, key: &str) -> Option<usize> {
    text.lines()
        .position(|l| {
            l.trim_start()
                .strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with('='))
        })
        .map(|i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_file_is_the_default() {
        let c = ServeConfig::from_toml("").unwrap();
        assert_eq!(c, ServeConfig::default());
        assert_eq!(c.bitrate_budget_bps(), 900_000_000);
        assert_eq!(c.broadcast_groups.len(), 2);
    }

    #[test]
    fn the_default_round_trips_through_toml() {
        let d = ServeConfig::default();
        assert_eq!(ServeConfig::from_toml(&d.to_toml()).unwrap(), d);
    }

    #[test]
    fn an_unknown_key_names_the_key_and_its_line() {
        let e = ServeConfig::from_toml("listen = \"127.0.0.1:1\"\ncache_size = 5\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("cache_size") && e.contains("line 2"), "{e}");
    }

    #[test]
    fn a_bad_value_names_the_key_and_its_line() {
        let e = ServeConfig::from_toml("\n\nengine = \"warp\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("engine") && e.contains("line 3"), "{e}");
        let e = ServeConfig::from_toml("# c\nsession_timeout_ms = 3\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("session_timeout_ms (line 2)"), "{e}");
        let e = ServeConfig::from_toml("broadcast_groups = [\"10.0.0.0/8\"]")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("broadcast_groups") && e.contains("multicast"),
            "{e}"
        );
    }

    #[test]
    fn tls_needs_both_halves() {
        let e = ServeConfig::from_toml("tls_cert = \"c.pem\"").unwrap_err();
        assert!(e.to_string().contains("tls_key"), "{e}");
    }

    #[test]
    fn the_budget_follows_the_egress_capacity() {
        let c = ServeConfig {
            egress_capacity_bps: 10_000_000_000,
            ..ServeConfig::default()
        };
        assert_eq!(c.bitrate_budget_bps(), 9_000_000_000);
        let c = ServeConfig {
            egress_capacity_bps: u64::MAX,
            ..ServeConfig::default()
        };
        assert_eq!(
            c.bitrate_budget_bps(),
            (u128::from(u64::MAX) * 90 / 100) as u64
        );
        let c = ServeConfig {
            max_bitrate_bps: Some(7),
            ..ServeConfig::default()
        };
        assert_eq!(c.bitrate_budget_bps(), 7);
    }

    #[test]
    fn restart_only_settings_are_named() {
        let a = ServeConfig::default();
        let mut b = ServeConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 9)),
            max_sessions_per_client: 3,
            http_mirror_dir: Some("/run/m".into()),
            ..ServeConfig::default()
        };
        assert_eq!(
            a.keep_restart_only(&mut b),
            vec!["listen", "http_mirror_dir"]
        );
        assert_eq!(b.http_mirror_dir, None);
        assert_eq!(b.listen, a.listen, "the running value is kept");
        assert_eq!(b.max_sessions_per_client, 3, "a reloadable value applies");
    }

    /// A cluster of `a` and `b` with these URLs, as node `a`, with `extra` keys first.
    fn cluster(extra: &str, a: &str, b: &str) -> Result<ServeConfig, ConfigError> {
        ServeConfig::from_toml(&format!(
            "{extra}\nnode_name = \"a\"\n[[nodes]]\nname = \"a\"\nurl = \"{a}\"\n\
             [[nodes]]\nname = \"b\"\nurl = \"{b}\"\n"
        ))
    }

    /// A cluster over HTTPS passes; what cannot work is refused by name: a TLS node named
    /// `http://`, a plain node named `https://`, a mix of schemes, a missing CA file.
    #[test]
    fn cluster_urls_match_the_transport() {
        let tls = "tls_cert = \"c.pem\"\ntls_key = \"k.pem\"";
        assert!(cluster("", "http://h:1", "http://h:2").is_ok());
        let c = cluster(tls, "https://h:1", "https://h:2").unwrap();
        assert_eq!(c.nodes.len(), 2);
        let e = cluster(tls, "http://h:1", "http://h:2")
            .unwrap_err()
            .to_string();
        assert!(e.contains("serves HTTPS") && e.contains("nodes"), "{e}");
        let e = cluster("", "https://h:1", "https://h:2")
            .unwrap_err()
            .to_string();
        assert!(e.contains("plain HTTP"), "{e}");
        let e = cluster(tls, "https://h:1", "http://h:2")
            .unwrap_err()
            .to_string();
        assert!(e.contains("mixes https:// and http://"), "{e}");
        let e = cluster(tls, "ftp://h:1", "https://h:2")
            .unwrap_err()
            .to_string();
        assert!(e.contains("must be https://"), "{e}");
        let missing = format!("{tls}\ncluster_ca_file = \"/nonexistent/ca.pem\"");
        let e = cluster(&missing, "https://h:1", "https://h:2")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cluster_ca_file") && e.contains("/nonexistent/ca.pem"),
            "{e}"
        );
        let here = format!("cluster_ca_file = \"{}\"", file!());
        let e = cluster(&here, "http://h:1", "http://h:2")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no node is https://"), "{e}");
    }
}
