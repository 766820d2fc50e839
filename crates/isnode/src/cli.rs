//! Command-line definitions.

use std::path::PathBuf;

use crate::choice::ChoiceParser;
use clap::{Args, Parser, Subcommand};

/// Intermediate storage node for media-on-demand: stores media as prefabricated
/// ALC/FLUTE packets protected by one Reed-Solomon code across disks and network.
#[derive(Parser, Debug)]
#[command(name = "isnode", version, about, propagate_version = true)]
pub(crate) struct Cli {
    /// Volume directory.
    #[arg(
        long,
        global = true,
        default_value = "./isnode-data",
        env = "ISNODE_VOLUME"
    )]
    pub volume: PathBuf,
    /// Whether `--volume` was given (set after parsing; `serve --config` keeps the file's
    /// `volume` otherwise).
    #[arg(skip = crate::serve_flags::VolumeFlag::Default)]
    pub volume_flag: crate::serve_flags::VolumeFlag,
    /// Log lines on stderr as text or as one JSON object per line (levels: ISNODE_LOG).
    #[arg(
        long,
        global = true,
        value_enum,
        default_value_t = LogFormat::Text,
        env = "ISNODE_LOG_FORMAT"
    )]
    pub log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// How log lines are written.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line (timestamp, level, fields, target).
    Json,
}

/// Subcommands.
#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Create, check and repair volumes.
    #[command(subcommand)]
    Volume(VolumeCommand),
    /// Store a file (or stdin) as prefabricated packets.
    Ingest(IngestArgs),
    /// List stored objects.
    Ls(LsArgs),
    /// Write an object's original bytes to stdout, rebuilding lost parts.
    Cat(CatArgs),
    /// Delete an object (its catalog rows, digests and segment files), locally or on a
    /// server (`--server`).
    Rm(RmArgs),
    /// Write a constant-bitrate MPEG-TS test stream.
    GenTs(GenTsArgs),
    /// Serve stored objects: HTTP control API and paced UDP streams of prefabricated packets.
    Serve(Box<crate::serve_flags::ServeFlags>),
    /// Check a configuration file, or print the commented default one.
    #[command(subcommand)]
    Config(crate::serve_flags::ConfigCommand),
    /// Receive an object from a server, repair loss with FEC, write the original bytes.
    Play(crate::play_flags::PlayArgs),
    /// Upload a file to an S3-compatible origin (`--origin s3://BUCKET/KEY`), multipart for
    /// a large file: the titles an origin-backed edge fills from.
    Publish(crate::commands::publish::PublishArgs),
    /// A lossy UDP relay for tests (this kernel has no netem).
    Relay(crate::play_flags::RelayFlags),
    /// Periodic broadcast of popular titles: plans per scheme.
    #[command(subcommand)]
    Broadcast(BroadcastCommand),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Make a self-signed certificate and key (PEM) for `serve --tls-cert/--tls-key` and
    /// `play --ca-cert` (tests and demos; use a real CA's certificate in production).
    Cert(CertArgs),
    /// Role tokens of `serve` (the token file: `tokens.json` in the volume by default).
    #[command(subcommand)]
    Token(TokenCommand),
    /// Show the whole path in a temporary volume of its own (yours is not touched): generate,
    /// ingest, lose a member, serve through lossy relays, repair.
    Demo(DemoArgs),
    /// Show a server's titles, sessions, broadcasts, members, cache and egress (`GET
    /// /v1/status`).
    Status(StatusArgs),
    /// Pre-fill titles from a server's origin ahead of demand, at a capped rate
    /// (`POST /v1/fills`).
    Fill(FillArgs),
}

/// `fill`.
#[derive(Args, Debug)]
pub(crate) struct FillArgs {
    /// Titles: their keys at the server's origin.
    #[arg(required = true)]
    pub titles: Vec<String>,
    /// Read the origin at most this fast, bits per second (the server's prefill_rate_bps
    /// caps it too).
    #[arg(long)]
    pub rate_bps: Option<u64>,
    /// Follow the fills until each ends; exit 1 if one failed.
    #[arg(long)]
    pub wait: bool,
    /// With --wait: give up after this many seconds.
    #[arg(long, default_value_t = 3600)]
    pub wait_timeout_s: u64,
    /// The server (default http://127.0.0.1:7878), operator token and CA.
    #[command(flatten)]
    pub remote: RemoteArgs,
}

/// `status`.
#[derive(Args, Debug)]
pub(crate) struct StatusArgs {
    /// Control API of the server.
    #[arg(long, default_value = "http://127.0.0.1:7878")]
    pub server: String,
    /// Token with the metrics role (sent as `Authorization: Bearer`).
    #[arg(long, env = "ISNODE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Redraw every second until interrupted.
    #[arg(long)]
    pub watch: bool,
    /// PEM certificate to trust for an `https://` server (e.g. made by `isnode cert`).
    #[arg(long)]
    pub ca_cert: Option<PathBuf>,
}

/// Volume administration.
#[derive(Subcommand, Debug)]
pub(crate) enum VolumeCommand {
    /// Create a volume.
    Create(CreateArgs),
    /// Verify every block and packet; exit non-zero while damage remains.
    Check(CheckArgs),
    /// Read everything and verify every block's CRC32C, every packet's CRC32C and digest,
    /// and every codeword's parity; report per member and per object; exit 1 on damage.
    Scrub(ScrubArgs),
    /// Rebuild a replaced (empty or new) member from the others; resumable after a crash,
    /// and safe while `serve` runs on the volume.
    Rebuild(RebuildArgs),
    /// Rewrap every encrypted title's content key under a new node key (the titles are not
    /// re-encrypted): a new key made beside the current file and put in its place, or
    /// `--new-key-file` (the server's `node_key_file` must then name it).
    Rekey(RekeyArgs),
}

/// `volume rekey`.
#[derive(Args, Debug)]
pub(crate) struct RekeyArgs {
    /// The current node key file (default: `node.key` in the volume).
    #[arg(long)]
    pub node_key_file: Option<PathBuf>,
    /// An existing key file (64 hexadecimal digits, mode 0600) to wrap under instead of a
    /// new random key put in place of the current file.
    #[arg(long)]
    pub new_key_file: Option<PathBuf>,
}

/// `volume scrub`.
#[derive(Args, Debug)]
pub(crate) struct ScrubArgs {
    /// Read at most this many bits per second from the members (default: as fast as they
    /// go). Beside an `isnode serve` on the volume, the scrub also yields to its viewers
    /// (VOLUME/run/viewer-pace.json): slower as their playback slack falls, stopped while
    /// a stream is late (from this rate, or 1 Gbit/s without one).
    #[arg(long)]
    pub rate_bps: Option<u64>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `volume rebuild`.
#[derive(Args, Debug)]
pub(crate) struct RebuildArgs {
    /// The member to rebuild (its index, as `volume create` printed).
    #[arg(long)]
    pub member: u32,
    /// Read at most this many bits per second from the other members (default: as fast as
    /// they go). Beside an `isnode serve` on the volume, the rebuild also yields to its
    /// viewers (VOLUME/run/viewer-pace.json): slower as their playback slack falls, stopped
    /// while a stream is late (from this rate, or 1 Gbit/s without one), but never below
    /// --min-rate-bps.
    #[arg(long)]
    pub rate_bps: Option<u64>,
    /// Beside a server, never read slower than this, however its viewers fare: the member
    /// being rebuilt is what makes their reads costly (default: 1/32 of --rate-bps, or of
    /// 1 Gbit/s without one; 0: the viewers may stop the rebuild).
    #[arg(long)]
    pub min_rate_bps: Option<u64>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `volume create`.
#[derive(Args, Debug)]
pub(crate) struct CreateArgs {
    /// Number of members (disks): M-1 hold source symbols, one holds repair symbols.
    #[arg(long, default_value_t = isnode_store::params::DEFAULT_MEMBERS)]
    pub members: u32,
    /// Member directories, comma-separated (default: VOLUME/members/0 .. M-1).
    #[arg(long, value_delimiter = ',')]
    pub member_dirs: Option<Vec<PathBuf>>,
    /// Encoding symbol size in bytes (the payload of one packet).
    #[arg(long, default_value_t = isnode_store::params::DEFAULT_SYMBOL_LEN)]
    pub symbol_size: u32,
    /// Source symbols per codeword (k).
    #[arg(long, default_value_t = isnode_store::params::DEFAULT_SOURCE_SYMBOLS)]
    pub source_symbols: u32,
    /// Repair symbols per codeword (m).
    #[arg(long, default_value_t = isnode_store::params::DEFAULT_REPAIR_SYMBOLS)]
    pub repair_symbols: u32,
    /// Block size of segment files in bytes (a multiple of 4096).
    #[arg(long, default_value_t = isnode_store::params::DEFAULT_BLOCK_LEN)]
    pub block_size: u32,
}

/// `volume check`.
#[derive(Args, Debug)]
pub(crate) struct CheckArgs {
    /// Rewrite damaged symbols from the rest of their codewords.
    #[arg(long)]
    pub repair: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Default of `ingest --max-spool-bytes`: 64 GiB.
pub(crate) const DEFAULT_MAX_SPOOL_BYTES: u64 = 64 << 30;

/// `ingest`.
#[derive(Args, Debug)]
pub(crate) struct IngestArgs {
    /// File to ingest, or `-` for stdin.
    pub file: PathBuf,
    /// More files: with them, `--name NAME` makes one title whose renditions are the files
    /// (stored as objects `NAME@0`, `NAME@1`, ... in this order; key frames must align).
    pub renditions: Vec<PathBuf>,
    /// Object name (default: the file's name; required for stdin).
    #[arg(long)]
    pub name: Option<String>,
    /// Bitrate in bits per second (detected from MPEG-TS PCR or MP4 duration when not given).
    #[arg(long)]
    pub bitrate: Option<u64>,
    /// MIME type (default: from the detected container).
    #[arg(long)]
    pub content_type: Option<String>,
    /// Replace an existing object of the same name.
    #[arg(long)]
    pub replace: bool,
    /// Expected size in bytes: a shorter or longer upload is refused.
    #[arg(long)]
    pub size: Option<u64>,
    /// Stdin (`-`) only: the most bytes spooled before ingest (default 64 GiB); the spool
    /// is also refused past half the free space of the volume's file system.
    #[arg(long, default_value_t = DEFAULT_MAX_SPOOL_BYTES)]
    pub max_spool_bytes: u64,
    /// Encrypt the title under a content key of its own, kept wrapped by the node key:
    /// MPEG-TS as HLS AES-128 (each segment cut at key frames, its own IV; the key at
    /// `GET /v1/objects/NAME/key`), fragmented MP4 / CMAF (and a title of CMAF renditions)
    /// as CENC cbcs (the MPD names the W3C Clear Key licence,
    /// `POST /v1/objects/NAME/license`). Keys and licences need a viewer token.
    #[arg(long)]
    pub encrypt: bool,
    /// The node key file that wraps content keys (default: `node.key` in the volume, made
    /// on first use with mode 0600). Must be the server's `node_key_file`.
    #[arg(long)]
    pub node_key_file: Option<PathBuf>,
    /// Upload to a server instead of the local volume.
    #[command(flatten)]
    pub remote: RemoteArgs,
}

/// Where a command sends its request when it works on a server's volume.
#[derive(Args, Debug, Clone, Default)]
pub(crate) struct RemoteArgs {
    /// Work on this server's volume over HTTP (`PUT` / `DELETE /v1/objects/NAME`), e.g.
    /// `http://127.0.0.1:7878`, instead of the local `--volume`.
    #[arg(long)]
    pub server: Option<String>,
    /// Operator token, sent as `Authorization: Bearer TOKEN` (used with `--server` only).
    #[arg(long, env = "ISNODE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Trust only this CA certificate (PEM) for an `https://` server (`isnode cert`).
    #[arg(long, requires = "server")]
    pub ca_cert: Option<PathBuf>,
}

/// `rm`.
#[derive(Args, Debug)]
pub(crate) struct RmArgs {
    /// Object name.
    pub name: String,
    /// With `--server`: end the sessions and broadcasts of the object first (without it,
    /// a server refuses to delete an object in use).
    #[arg(long, requires = "server")]
    pub force: bool,
    /// Delete on a server instead of the local volume.
    #[command(flatten)]
    pub remote: RemoteArgs,
}

/// `ls`.
#[derive(Args, Debug)]
pub(crate) struct LsArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// List a server's objects (`GET /v1/objects`: complete, bad and filling ones) instead
    /// of the local volume's.
    #[command(flatten)]
    pub remote: RemoteArgs,
}

/// `cat`.
#[derive(Args, Debug)]
pub(crate) struct CatArgs {
    /// Object name.
    pub name: String,
}

/// `gen-ts`.
#[derive(Args, Debug)]
pub(crate) struct GenTsArgs {
    /// Bitrate in bits per second.
    #[arg(long)]
    pub bitrate: u64,
    /// Duration in seconds.
    #[arg(long)]
    pub duration: f64,
    /// Seed of the pseudo-random payload.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output file (`-` for stdout).
    pub out: PathBuf,
}

/// Benchmarks.
#[derive(Subcommand, Debug)]
pub(crate) enum BenchCommand {
    /// Reed-Solomon encode and worst-case decode throughput, per core.
    Codec(CodecBenchArgs),
    /// The send engines side by side: server CPU per delivered GB.
    Serve(ServeBenchArgs),
    /// isnode's engines and nginx under the same Zipf/Poisson load of paced clients: the
    /// most valid streams each holds, server CPU per delivered GB.
    Load(LoadBenchArgs),
    /// Start-up delay of `isnode play` (session request to first byte out), p50/p99 over
    /// many sessions on loopback, instant start against the classic start in one run.
    Startup(StartupBenchArgs),
    /// What packet authentication costs the client: digest vs CRC32C per packet, and
    /// `isnode play` CPU per title GB with and without `--verify-digests`, in one run.
    Verify(VerifyBenchArgs),
    /// An upload over HTTP (`ingest --server`, loopback) against a local `ingest` of the
    /// same file, side by side: throughput of each and their ratio.
    Upload(UploadBenchArgs),
    /// A seeded simulation of a cluster of edges under a Zipf workload (no network): the load
    /// balance of rendezvous placement with replicated hot titles, origin traffic, and the
    /// titles a failure, a return and a join move against the ideal 1/N.
    Placement(PlacementBenchArgs),
    /// A long run of churn against one server (clients start, seek, pause, stop and time out;
    /// titles are uploaded and deleted; broadcasts start and stop): the server's RSS, open
    /// descriptors and threads every second, their drift, and the errors (root: it runs in a
    /// network namespace of its own).
    Soak(SoakBenchArgs),
    /// Paced clients beside background work on a disk-bound volume: the server and the
    /// background work in a cgroup that throttles reads of the volume's disk and limits
    /// memory; valid streams and late bursts alone, during a scrub and during a rebuild,
    /// and the rebuild's rate while serving and alone (root: cgroups).
    Background(BackgroundBenchArgs),
    /// Rung timelines recorded by test runs (JSON files, `ISNODE_TIMELINES_DIR`) drawn as
    /// one SVG figure: each player's rung against time.
    Timelines(TimelinesBenchArgs),
}

/// `bench timelines`.
#[derive(Args, Debug)]
pub(crate) struct TimelinesBenchArgs {
    /// The recorded timelines (one JSON file each), drawn in this order.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// The SVG to write.
    #[arg(long)]
    pub out: PathBuf,
    /// The figure's title.
    #[arg(long, default_value = "Rung against time")]
    pub title: String,
    /// The label of the y axis (the rungs' unit).
    #[arg(long, default_value = "video height, px")]
    pub y_label: String,
}

/// `bench background`.
#[derive(Args, Debug)]
pub(crate) struct BackgroundBenchArgs {
    /// Paced clients (one title each) of the first level.
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    /// The most clients: the clients alone double from --clients while every stream is
    /// valid, up to this, then bisect; the phases run at the most clients valid alone (no
    /// ramp when at most --clients).
    #[arg(long, default_value_t = 0)]
    pub max_clients: usize,
    /// Bisection steps after the first level with an invalid stream.
    #[arg(long, default_value_t = 3)]
    pub bisect_steps: usize,
    /// Bitrate of each title.
    #[arg(long, default_value_t = 4_000_000)]
    pub bitrate: u64,
    /// Playing time of each title, seconds.
    #[arg(long, default_value_t = 30)]
    pub title_seconds: u64,
    /// Block sizes of the volume, bytes, comma-separated: the whole benchmark once per
    /// size, on a volume of its own (default: `volume create`'s).
    #[arg(long, value_delimiter = ',')]
    pub block_sizes: Vec<u32>,
    /// Also run the phases beside one busy thread (a competing CPU load of one core).
    #[arg(long)]
    pub cpu_load: bool,
    /// Where the node and the clients run: split (the server, its background work, the
    /// busy thread and the benchmark on one core, the clients, standing in for players on
    /// other machines, on the others) or shared (wherever the kernel runs them).
    #[arg(long, value_enum, default_value = "split")]
    pub cores: CoresArg,
    /// What each client buffers before its paced playout starts, ms (`play
    /// --prebuffer-ms`): a player's start-up buffer, as `bench load --startup-buffer 1`.
    #[arg(long, default_value_t = 1000)]
    pub prebuffer_ms: u64,
    /// The clients' nice value (they stand in for players on other machines: the
    /// machine's other work competes with the server, not with them; below 0 needs root).
    #[arg(long, default_value_t = -10, allow_negative_numbers = true)]
    pub client_nice: i32,
    /// The background work's CPU and I/O priority: low (as isnode runs it: nice 19, the
    /// lowest best-effort I/O level) or normal (the server's own, as before).
    #[arg(long, value_enum, default_value = "low")]
    pub background_priority: BackgroundPriorityArg,
    /// Run the server and the rebuild from this isnode binary instead of this one (the
    /// clients stay this one's): before/after runs.
    #[arg(long)]
    pub server_exe: Option<PathBuf>,
    /// Most bytes per second the server and the background work read from the volume's disk.
    #[arg(long, default_value_t = 12_000_000)]
    pub disk_read_limit: u64,
    /// Most memory of the server and the background work, page cache included, bytes.
    #[arg(long, default_value_t = 256 << 20)]
    pub memory_limit: u64,
    /// The server's block pool, bytes (default: what admission asks of each client for the
    /// volume's block size, and 16 MiB, within the memory limit less 64 MiB; each client
    /// plays its own title, so every block is read from the disk once whatever the pool).
    #[arg(long)]
    pub cache_size_bytes: Option<u64>,
    /// The background scrub's rate cap, bits per second.
    #[arg(long, default_value_t = 800_000_000)]
    pub scrub_rate_bps: u64,
    /// A directory on the disk to throttle, where the volume is made (default /var/tmp).
    #[arg(long, default_value = "/var/tmp")]
    pub dir: PathBuf,
    /// Seed of the titles.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Also write the report as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// A short run (2 clients of 2 Mbit/s, 8 s titles); exit 1 when any output differs.
    #[arg(long)]
    pub check: bool,
}

/// `bench background --cores`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CoresArg {
    /// The node on one core, the clients on the others.
    Split,
    /// Everything wherever the kernel runs it.
    Shared,
}

/// `bench background --background-priority`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BackgroundPriorityArg {
    /// nice 19 and the lowest best-effort I/O level.
    Low,
    /// The server's own priority.
    Normal,
}

/// `bench soak`.
#[derive(Args, Debug)]
pub(crate) struct SoakBenchArgs {
    /// Length of the run, minutes (fractions allowed).
    #[arg(long, default_value_t = 30.0)]
    pub minutes: f64,
    /// Clients kept running.
    #[arg(long, default_value_t = 20)]
    pub sessions: usize,
    /// Titles ingested before the start.
    #[arg(long, default_value_t = 4)]
    pub titles: usize,
    /// Playing time of each title, seconds.
    #[arg(long, default_value_t = 60)]
    pub title_seconds: u64,
    /// Bitrate of each title.
    #[arg(long, default_value_t = 2_000_000)]
    pub bitrate: u64,
    /// Seed of the churn.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Also write the report (every sample) as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Also draw the samples as SVGs (soak-rss.svg, soak-fds.svg) into this directory.
    #[arg(long)]
    pub plots: Option<PathBuf>,
    /// The server's block pool, bytes (default: the server's, 256 MiB). Its pages become
    /// resident as slots are first used: a short run with a large pool measures that warm-up.
    #[arg(long)]
    pub cache_size_bytes: Option<u64>,
    /// Exit 1 when the run had errors or its drift exceeded the bounds.
    #[arg(long)]
    pub check: bool,
}

/// `bench placement`.
#[derive(Args, Debug)]
pub(crate) struct PlacementBenchArgs {
    /// Cluster sizes to simulate (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = vec![10, 100, 1000])]
    pub nodes: Vec<usize>,
    /// Most replicas of a hot title to try (comma-separated; 1 = the owner alone).
    #[arg(long, value_delimiter = ',', default_values_t = vec![1, 4, 16, 64])]
    pub max_replicas: Vec<usize>,
    /// Requests per node (the run's requests: this × nodes).
    #[arg(long, default_value_t = 1000)]
    pub requests_per_node: u64,
    /// Titles per node (at least 1000 titles in all).
    #[arg(long, default_value_t = 100)]
    pub titles_per_node: usize,
    /// A title is hot past this fraction of one node's fair share of the requests.
    #[arg(long, default_value_t = 0.25)]
    pub hot_share_of_node: f64,
    /// Load bound: a node past this multiple of the mean load passes requests on down the
    /// title's ranking (consistent hashing with bounded loads); 0 switches it off.
    #[arg(long, default_value_t = 1.1)]
    pub load_bound: f64,
    /// Seed of the simulation.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Also draw max/mean against the cluster size as an SVG to this file.
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

/// `bench upload`.
#[derive(Args, Debug)]
pub(crate) struct UploadBenchArgs {
    /// Bitrate of the title.
    #[arg(long, default_value_t = 40_000_000)]
    pub bitrate: u64,
    /// Playing time of the title, seconds (its size: bitrate × seconds / 8).
    #[arg(long, default_value_t = 40)]
    pub seconds: u64,
    /// Rounds per side (alternating).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// `bench verify`.
#[derive(Args, Debug)]
pub(crate) struct VerifyBenchArgs {
    /// Bitrate of the title (the server paces at it).
    #[arg(long, default_value_t = 40_000_000)]
    pub bitrate: u64,
    /// Playing time of the title, seconds (each round takes about this long).
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Rounds per mode (alternating).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Seed of the title's bytes.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Rounds of the player comparison: `curl --limit-rate` and `isnode play` (paced, no
    /// loss and each of `--player-loss`) at the title's rate (0: skip it).
    #[arg(long, default_value_t = 3)]
    pub player_rounds: usize,
    /// Injected loss rates of the player comparison besides no loss.
    #[arg(long, value_delimiter = ',', default_value = "0.01,0.05")]
    pub player_loss: Vec<f64>,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// `bench startup`.
#[derive(Args, Debug)]
pub(crate) struct StartupBenchArgs {
    /// The server's send engine.
    #[arg(long, default_value = "gso")]
    pub engine: String,
    /// Bitrates of the titles (one per bitrate).
    #[arg(long, value_delimiter = ',', default_value = "4000000,20000000")]
    pub bitrates: Vec<u64>,
    /// Start-up modes: instant (the defaults: instant release, no prebuffer, start-up
    /// burst), classic (`play --release codeword --no-start-burst`: before instant start).
    #[arg(long, value_delimiter = ',', default_value = "instant,classic")]
    pub modes: Vec<String>,
    /// Sessions per bitrate and mode.
    #[arg(long, default_value_t = 40)]
    pub sessions: usize,
    /// Sessions at a time.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// Seed of the titles' bytes.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Run the clients from this isnode binary instead of this one (the server stays this
    /// one): an older client's start-up side by side with this one's.
    #[arg(long)]
    pub client_exe: Option<PathBuf>,
}

/// `bench load`.
#[derive(Args, Debug)]
pub(crate) struct LoadBenchArgs {
    /// isnode engines to load, in order (empty: none); `ENGINE@PATH` loads that engine of
    /// another isnode binary (before/after in one run); `ENGINE/BYTES` serves a volume of
    /// that block length (default: a new volume's, 64 KiB; e.g. `gso/1048576`). `http`
    /// loads isnode's content path (`GET /o/NAME`) with the paced TCP readers nginx gets;
    /// `hls`, HLS players (the playlist, then its segments' byte ranges on one kept-alive
    /// connection); `https` and `hls-tls`, the same over HTTPS (a self-signed certificate
    /// made for the run). `ENGINE+enc` (e.g. `gso+enc`) serves the same titles encrypted at
    /// ingest (HLS AES-128); the table then gives each such row's server CPU per GB over its
    /// clear row's (pair them as `gso,gso+enc,gso+enc,gso` to alternate the order).
    /// `HTTP_ENGINE+huge` (e.g. `http+huge`) keeps the server's HTTP mirror in huge pages:
    /// a tmpfs mounted with `huge=within_size` for it (`serve --http-mirror-dir`; root).
    #[arg(long, value_delimiter = ',', default_value = "gso,uring-zc")]
    pub engines: Vec<String>,
    /// nginx variants to load after the engines: sendfile, aio (sendfile in `aio threads`),
    /// directio, tls (sendfile as deployed, over HTTPS with the run's certificate) (empty:
    /// none). Ratios are taken to the best variant of the run.
    #[arg(long, value_delimiter = ',', default_value = "sendfile")]
    pub nginx: Vec<String>,
    /// Number of titles (MPEG-TS made by gen-ts).
    #[arg(long, default_value_t = 20)]
    pub titles: usize,
    /// Bitrate of every title.
    #[arg(long, default_value_t = 10_000_000)]
    pub bitrate: u64,
    /// Length of every title, seconds.
    #[arg(long, default_value_t = 60.0)]
    pub title_seconds: f64,
    /// Seconds of load per level.
    #[arg(long, default_value_t = 20.0)]
    pub seconds: f64,
    /// Concurrent streams of the first level.
    #[arg(long, default_value_t = 50)]
    pub streams: usize,
    /// Highest level: the load doubles from --streams while levels pass, up to this, then
    /// bisects (no ramp when at most --streams).
    #[arg(long, default_value_t = 1600)]
    pub max_streams: usize,
    /// Bisection steps after the first failing level.
    #[arg(long, default_value_t = 2)]
    pub bisect_steps: usize,
    /// Smallest share of valid streams for a level to pass.
    #[arg(long, default_value_t = 0.99)]
    pub pass_fraction: f64,
    /// Seconds of the stream a client buffers before playing.
    #[arg(long, default_value_t = 1.0)]
    pub startup_buffer: f64,
    /// isnode's block cache size in bytes.
    #[arg(long, default_value_t = 512 << 20)]
    pub cache_size: u64,
    /// Seed of the schedules.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Where the clients run: veth (a network namespace of the benchmark's own behind a veth
    /// pair; needs root and iproute2) or loopback (the root namespace; no root needed).
    #[arg(long, value_enum, default_value = "veth")]
    pub net: LoadNet,
    /// Runs every server (isnode and nginx alike) in a memory cgroup of this many bytes, page
    /// cache included, each started cold (a library larger than memory: the titles must add
    /// up to at least 4 times the limit; isnode's pool gets the limit less 48 MiB when
    /// --cache-size is larger). Several values, comma-separated, run the whole benchmark once
    /// per limit and draw load_memory_valid.svg and load_memory_disk.svg. Root is needed.
    #[arg(long, value_delimiter = ',')]
    pub memory_limit: Vec<u64>,
    /// Throttles every server's reads of the disk holding the titles to this many bytes per
    /// second (blkio/io cgroup; a disk that is the bottleneck). Root is needed.
    #[arg(long)]
    pub disk_read_limit: Option<u64>,
    /// Tell isnode's servers this percent of the disk read limit as the disks' read rate
    /// (`serve --disk-read-bps`, 8 × the bytes per second × PERCENT / 100), so that
    /// admission refuses sessions whose reads it cannot sustain.
    #[arg(long, requires = "disk_read_limit", value_name = "PERCENT",
          value_parser = clap::value_parser!(u32).range(1..=100))]
    pub disk_admission: Option<u32>,
    /// Also write the figures (load_max_valid.svg, load_cpu_per_gb.svg, load_startup.svg,
    /// load_valid.svg) into this directory.
    #[arg(long)]
    pub plots: Option<PathBuf>,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Where `bench load`'s clients run.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LoadNet {
    /// A network namespace of their own behind a veth pair (root and iproute2 needed).
    Veth,
    /// The root namespace, over loopback (no root needed; no device in between).
    Loopback,
}

/// Where `bench serve` sends its streams.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sink {
    /// Real receivers on loopback (measures the whole system).
    Loopback,
    /// An ifb device in a network namespace made for the run (measures the server's send path).
    Ifb,
}

/// `bench serve`.
#[derive(Args, Debug)]
pub(crate) struct ServeBenchArgs {
    /// Engines to compare, in order. `http-progressive` and `http-range` are rows of paced
    /// HTTP readers of the content route (whole-object GETs, random 1 MiB ranges; loopback
    /// sink only) next to the UDP engines.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "gso,uring-zc,sendmmsg,traditional"
    )]
    pub engines: Vec<String>,
    /// Concurrent sessions per engine.
    #[arg(long, default_value_t = 50)]
    pub streams: usize,
    /// Bitrate of each stream's object.
    #[arg(long, default_value_t = 8_000_000)]
    pub bitrate: u64,
    /// Measured seconds per engine (after 1 s of warm-up).
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Distinct objects the sessions are spread over.
    #[arg(long, default_value_t = 4)]
    pub objects: usize,
    /// Server block cache size in bytes.
    #[arg(long, default_value_t = 512 << 20)]
    pub cache_size: u64,
    /// Where the packets go.
    #[arg(long, value_enum, default_value_t = Sink::Loopback)]
    pub sink: Sink,
    /// With `--sink ifb`: keep the sink's UDP segmentation offload on, as a NIC with USO
    /// (default: off, so GSO runs are segmented in software).
    #[arg(long)]
    pub device_segmentation: bool,
    /// Each engine also serves the same titles encrypted (HLS AES-128), in a row of its own
    /// (`ENGINE+enc`) right after the clear one, with the ratio of their CPU per GB.
    #[arg(long)]
    pub encrypted: bool,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// `bench codec`.
#[derive(Args, Debug)]
pub(crate) struct CodecBenchArgs {
    /// Source symbols per codeword.
    #[arg(long, default_value_t = 223)]
    pub k: usize,
    /// Repair symbols per codeword.
    #[arg(long, default_value_t = 32)]
    pub m: usize,
    /// Symbol size in bytes.
    #[arg(long, default_value_t = 1408)]
    pub symbol_size: usize,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 2.0)]
    pub seconds: f64,
    /// Seed for data and loss positions.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Also write the report as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Compare, in the same run on the same data, our codec with every kernel the CPU
    /// supports and the peer codecs (reed-solomon-erasure, reed-solomon-simd, flute, ISA-L).
    #[arg(long)]
    pub compare: bool,
}

/// `cert`.
#[derive(Args, Debug)]
pub(crate) struct CertArgs {
    /// Directory to write `cert.pem` and `key.pem` into (created if absent).
    #[arg(long)]
    pub out: PathBuf,
    /// Host names and IP addresses the certificate is for (repeatable; default:
    /// localhost, 127.0.0.1 and ::1).
    #[arg(long = "name")]
    pub names: Vec<String>,
}

/// `token`.
#[derive(Subcommand, Debug)]
pub(crate) enum TokenCommand {
    /// Make a new token and print it (once: only its hash is kept).
    Add(TokenAddArgs),
    /// Show the tokens: names, roles, creation and last use.
    List(TokenFileArgs),
    /// Remove a token (a running server refuses it after its reload, SIGHUP).
    Revoke(TokenRevokeArgs),
}

/// Where the token file is.
#[derive(Args, Debug)]
pub(crate) struct TokenFileArgs {
    /// The token file (default: `tokens.json` in the volume directory).
    #[arg(long)]
    pub tokens_file: Option<PathBuf>,
}

/// `token add`.
#[derive(Args, Debug)]
pub(crate) struct TokenAddArgs {
    /// A role of the token (repeatable).
    #[arg(long = "role", value_parser = ChoiceParser::new(isnode_auth::Role::CHOICES), required = true)]
    pub roles: Vec<isnode_auth::Role>,
    /// The token's name (default: `token-` and its creation time).
    #[arg(long)]
    pub name: Option<String>,
    /// The token stops being accepted this many seconds from now (default: never); the
    /// keys and licences handed to it say so (`Isnode-Key-Expires`, `expires_unix_s`).
    #[arg(long)]
    pub expires_in_s: Option<u64>,
    /// Where the token file is.
    #[command(flatten)]
    pub file: TokenFileArgs,
}

/// `token revoke`.
#[derive(Args, Debug)]
pub(crate) struct TokenRevokeArgs {
    /// The token's name.
    pub name: String,
    /// Where the token file is.
    #[command(flatten)]
    pub file: TokenFileArgs,
}

/// `demo`.
#[derive(Args, Debug)]
pub(crate) struct DemoArgs {
    /// Length of the generated test stream in seconds.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Bitrate of the generated test stream.
    #[arg(long, default_value_t = 4_000_000)]
    pub bitrate: u64,
}

/// Periodic broadcast.
#[derive(Subcommand, Debug)]
pub(crate) enum BroadcastCommand {
    /// Plan a title's periodic broadcast: server bandwidth, wait, client channels and buffer
    /// for every scheme (or one), after codeword rounding, proved by a virtual-clock client.
    Plan(BroadcastPlanArgs),
    /// Plot server bandwidth against the maximum wait for every scheme (SVG), with the
    /// lower bound b*ln(1 + D/w).
    Plot(BroadcastPlotArgs),
}

/// The title a broadcast command plans for: a stored one, or a duration and a bitrate.
#[derive(Args, Debug)]
pub(crate) struct BroadcastTitleArgs {
    /// A stored title (its codewords, codeword size and bitrate come from the catalog).
    pub title: Option<String>,
    /// Duration of a title that is not stored, seconds.
    #[arg(long, conflicts_with = "title", requires = "bitrate")]
    pub duration: Option<f64>,
    /// Bitrate of a title that is not stored, bits per second.
    #[arg(long, conflicts_with = "title", requires = "duration")]
    pub bitrate: Option<u64>,
    /// Source bytes per codeword of a title that is not stored (k x symbol size).
    #[arg(long, default_value_t = u64::from(isnode_store::params::DEFAULT_SOURCE_SYMBOLS)
        * u64::from(isnode_store::params::DEFAULT_SYMBOL_LEN))]
    pub codeword_bytes: u64,
    /// Skyscraper's width cap W.
    #[arg(long, default_value_t = isnode_broadcast::DEFAULT_SKYSCRAPER_WIDTH)]
    pub width: u64,
    /// Quasi-harmonic's m (sub-slots per slot).
    #[arg(long, default_value_t = isnode_broadcast::DEFAULT_QUASI_HARMONIC_M)]
    pub quasi_m: u32,
    /// Polyharmonic's m (slots waited).
    #[arg(long, default_value_t = isnode_broadcast::DEFAULT_POLYHARMONIC_M)]
    pub poly_m: u32,
}

/// `broadcast plan`.
#[derive(Args, Debug)]
pub(crate) struct BroadcastPlanArgs {
    /// The title.
    #[command(flatten)]
    pub title: BroadcastTitleArgs,
    /// Longest start-up wait allowed, seconds.
    #[arg(long, default_value_t = 5.0)]
    pub max_wait: f64,
    /// Plan only this scheme (staggered, pyramid, skyscraper, fast, pagoda, harmonic,
    /// cautious-harmonic, quasi-harmonic, polyharmonic); with --json, the whole plan.
    #[arg(long)]
    pub scheme: Option<String>,
    /// The most a client can receive, bits per second.
    #[arg(long)]
    pub client_cap: Option<u64>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `broadcast plot`.
#[derive(Args, Debug)]
pub(crate) struct BroadcastPlotArgs {
    /// The title.
    #[command(flatten)]
    pub title: BroadcastTitleArgs,
    /// Maximum waits to plan for, seconds.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,2,3,4,5,7.5,10,15,20,30,45,60"
    )]
    pub waits: Vec<f64>,
    /// Schemes to draw (staggered, ⌈D/w⌉ channels, is off the scale of the others).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "pyramid,skyscraper,fast,pagoda,harmonic,cautious-harmonic,quasi-harmonic,polyharmonic"
    )]
    pub schemes: Vec<String>,
    /// The SVG file to write.
    #[arg(long)]
    pub out: std::path::PathBuf,
}
