//! The flags of `isnode serve` and `isnode config`: each serve flag overrides the key of the
//! same name in the configuration file (`--config`), which overrides the defaults. Only the
//! resulting [`isnode_serve::ServeConfig`] goes to the server.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::{Args, Subcommand};
use isnode_serve_config::{Choice, GroupRange};

use crate::choice::ChoiceParser;
use isnode_serve::{
    BroadcastMode, Degraded, EncryptDefault, EngineKind, ReadIo, ServeConfig, ValidateDestination,
};

/// The commented default configuration, as shipped in `packaging/isnode.toml`.
pub(crate) const DEFAULT_CONFIG_TOML: &str = include_str!("../../../packaging/isnode.toml");

/// Flags of `isnode serve`. Unset flags leave the file's (or the default) value.
#[derive(Args, Clone, Debug, Default)]
pub(crate) struct ServeFlags {
    /// Configuration file (TOML; `isnode config default` prints every key with its
    /// default). Flags override it; SIGHUP reads it again.
    #[arg(long, env = "ISNODE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Address of the HTTP control API (default 127.0.0.1:7878).
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Send engine (default gso).
    #[arg(long, value_parser = ChoiceParser::new(EngineKind::CHOICES))]
    pub engine: Option<EngineKind>,
    /// Size of the block pool in bytes (default 256 MiB).
    #[arg(long, visible_alias = "cache-size")]
    pub cache_size_bytes: Option<u64>,
    /// Egress capacity, bits per second (default 1 Gbit/s; the budget is 90 % of it).
    #[arg(long)]
    pub egress_capacity_bps: Option<u64>,
    /// Bitrate budget: the sum of admitted sessions' send rates, bits per second.
    #[arg(long, visible_alias = "max-bitrate")]
    pub max_bitrate_bps: Option<u64>,
    /// Most concurrent sessions per client IP address (default 16).
    #[arg(long)]
    pub max_sessions_per_client: Option<u32>,
    /// The disks' sustained read rate, bits per second: pool engines refuse a session whose
    /// reads would not fit (default 0: not checked).
    #[arg(long)]
    pub disk_read_bps: Option<u64>,
    /// Control API threads, serving every HTTP connection (default: one per core, at most 4).
    #[arg(long)]
    pub api_threads: Option<usize>,
    /// Data-plane threads (default: one per core).
    #[arg(long)]
    pub threads: Option<usize>,
    /// What to send for a failed member's packets (default rebuild).
    #[arg(long, value_parser = ChoiceParser::new(Degraded::CHOICES))]
    pub degraded: Option<Degraded>,
    /// Block read errors in a row that mark a member failed (default 5; 0: never).
    #[arg(long)]
    pub member_fail_errors: Option<u32>,
    /// Rebuild from the other members rather than wait for a read slower than this
    /// (milliseconds; default 50; 0: never hedge).
    #[arg(long)]
    pub hedge_after_ms: Option<u64>,
    /// A session without keepalive for this long ends (milliseconds; default 5000).
    #[arg(long)]
    pub session_timeout_ms: Option<u64>,
    /// A session not validated (token echo) within this long ends (milliseconds; default 3000).
    #[arg(long)]
    pub validate_timeout_ms: Option<u64>,
    /// Return routability of new sessions' destinations (default token).
    #[arg(long, value_parser = ChoiceParser::new(ValidateDestination::CHOICES))]
    pub validate_destination: Option<ValidateDestination>,
    /// Lowest destination UDP port a session may ask for (default 1024).
    #[arg(long)]
    pub min_dest_port: Option<u16>,
    /// How blocks are read into the pool (default uring).
    #[arg(long, value_parser = ChoiceParser::new(ReadIo::CHOICES), env = "ISNODE_READ_IO")]
    pub read_io: Option<ReadIo>,
    /// Most HTTP content bodies and repair answers produced at once (default 4096, the API's
    /// connection cap).
    #[arg(long)]
    pub max_content_readers: Option<u64>,
    /// Most bytes of the HTTP mirror, codewords players read held once as contiguous bytes
    /// and sent with `sendfile` (default 256 MiB; 0: none).
    #[arg(long)]
    pub http_mirror_bytes: Option<u64>,
    /// Make the HTTP mirror's files in this directory, a tmpfs mounted with
    /// `huge=within_size` so that they get huge pages (default: `memfd`s).
    #[arg(long)]
    pub http_mirror_dir: Option<PathBuf>,
    /// Speed-up of the start-up burst (default 4; 0 or 1: none).
    #[arg(long)]
    pub start_burst_factor: Option<u32>,
    /// Playing time sent in the start-up burst, milliseconds (default 1000; 0: none).
    #[arg(long)]
    pub start_burst_ms: Option<u64>,
    /// Multicast groups broadcasts may use (`ADDRESS/PREFIX`, comma separated).
    #[arg(long, value_delimiter = ',')]
    pub broadcast_groups: Option<Vec<GroupRange>>,
    /// UDP port of a broadcast's channel 0 (default 30000).
    #[arg(long)]
    pub broadcast_port: Option<u16>,
    /// Most groups one broadcast uses (default 16).
    #[arg(long)]
    pub broadcast_max_groups: Option<u32>,
    /// TTL and hop limit of broadcast packets (default 1).
    #[arg(long)]
    pub multicast_ttl: Option<u8>,
    /// Interface broadcasts are sent from, by name.
    #[arg(long)]
    pub multicast_if: Option<String>,
    /// Hybrid serving: `auto` broadcasts a title when that costs less than its unicast.
    #[arg(long = "broadcast", value_parser = ChoiceParser::new(BroadcastMode::CHOICES))]
    pub broadcast_mode: Option<BroadcastMode>,
    /// The scheme of automatic broadcasts (default cautious-harmonic).
    #[arg(long)]
    pub broadcast_scheme: Option<String>,
    /// The maximum start-up wait of automatic broadcasts, seconds (default 5).
    #[arg(long)]
    pub broadcast_max_wait_s: Option<f64>,
    /// Most control API connections open at once.
    #[arg(long)]
    pub api_max_connections: Option<usize>,
    /// A request head must be whole within this many milliseconds (default 10000).
    #[arg(long)]
    pub api_header_timeout_ms: Option<u64>,
    /// A kept-alive connection idle this long is closed (milliseconds; default 60000).
    #[arg(long)]
    pub api_idle_timeout_ms: Option<u64>,
    /// Serve the control API over HTTPS with this certificate chain (PEM).
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of `--tls-cert` (PEM).
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Serve plain HTTP on a non-loopback `--listen` address.
    #[arg(long, conflicts_with = "tls_cert")]
    pub plain_http: bool,
    /// On SIGTERM, let sessions run on for at most this many seconds (default 30).
    #[arg(long)]
    pub shutdown_grace_s: Option<u64>,
    /// How long a broadcast request that names no end runs, seconds (default 3600).
    #[arg(long)]
    pub broadcast_default_duration_s: Option<f64>,
    /// The longest a requested broadcast may run, seconds (default 86400).
    #[arg(long)]
    pub broadcast_max_duration_s: Option<f64>,
    /// The share of the bitrate budget broadcasts may take together, percent (default 50).
    #[arg(long)]
    pub broadcast_budget_percent: Option<u32>,
    /// Uploads: most bytes the stored objects may take in all (default: the free space).
    #[arg(long)]
    pub max_volume_bytes: Option<u64>,
    /// Uploads: a body silent this long is cut (milliseconds; default 30000).
    #[arg(long)]
    pub upload_stall_timeout_ms: Option<u64>,
    /// Uploads: the slowest accepted body rate, bits per second (default 64000; 0: any).
    #[arg(long)]
    pub upload_min_rate_bps: Option<u64>,
    /// A response the client stops reading for this long is dropped (milliseconds; default
    /// 30000).
    #[arg(long)]
    pub api_write_timeout_ms: Option<u64>,
    /// Each API connection's send buffer (bytes; 0: the kernel's autotuning; default
    /// 262144): bounds the HTTP mirror's pages a slow reader's socket holds.
    #[arg(long)]
    pub api_send_buffer_bytes: Option<u64>,
    /// Most sessions at once under the sendfile engine (one socket each; default from the
    /// open files limit).
    #[arg(long)]
    pub max_sendfile_sessions: Option<u64>,
    /// Most sessions awaiting their token's echo, in all (default 4096).
    #[arg(long)]
    pub max_unvalidated_sessions: Option<u32>,
    /// Most sessions awaiting their token's echo per client (IPv4 address, IPv6 /64;
    /// default 32).
    #[arg(long)]
    pub max_unvalidated_per_client: Option<u32>,
    /// The role token file (default: tokens.json in the volume; `isnode token add`).
    #[arg(long)]
    pub tokens_file: Option<PathBuf>,
    /// The node key file of encrypted titles (default: node.key in the volume).
    #[arg(long)]
    pub node_key_file: Option<PathBuf>,
    /// Store uploads and fills encrypted (`on`) or clear (`off`, default).
    #[arg(long, value_parser = ChoiceParser::new(EncryptDefault::CHOICES))]
    pub encrypt: Option<EncryptDefault>,
    /// The cluster key file encrypted fills derive their keys from.
    #[arg(long)]
    pub cluster_key_file: Option<PathBuf>,
    /// How long a content key or licence handed out is good for, seconds (0: no limit but
    /// the token's expiry).
    #[arg(long)]
    pub licence_ttl_s: Option<u64>,
    /// Whether viewer routes answer without a token (default true).
    #[arg(long, action = clap::ArgAction::Set)]
    pub anonymous_viewers: Option<bool>,
    /// Serve operator and metrics routes without a token file off loopback (logged).
    #[arg(long)]
    pub insecure_open_operator_routes: bool,
    /// Background scrub: most bits per second read from the members, paced by the
    /// viewers (default 0: off).
    #[arg(long)]
    pub scrub_rate_bps: Option<u64>,
    /// This node's name in the cluster's node list (`--nodes`).
    #[arg(long)]
    pub node_name: Option<String>,
    /// The cluster's edges, this one included: `NAME=URL` or `NAME*WEIGHT=URL`, comma
    /// separated (default: none, a single node).
    #[arg(long, value_delimiter = ',', value_parser = parse_node)]
    pub nodes: Option<Vec<isnode_serve::ClusterNode>>,
    /// A title requested more often than this (per second, as one node counts) is served by
    /// several nodes of its ranking (default 10; 0: never).
    #[arg(long)]
    pub replicate_above_rps: Option<f64>,
    /// Health probe of every peer this often, milliseconds (default 1000).
    #[arg(long)]
    pub probe_interval_ms: Option<u64>,
    /// A probe not answered within this long failed, milliseconds (default 500).
    #[arg(long)]
    pub probe_timeout_ms: Option<u64>,
    /// Failed probes in a row that make a peer dead (default 3).
    #[arg(long)]
    pub probe_failures_to_dead: Option<u32>,
    /// A node loaded above this multiple of the mean (and above half its capacity) sends
    /// new requests down each title's ranking (default 1.25; 0: off).
    #[arg(long)]
    pub load_bound: Option<f64>,
    /// The certificates (PEM) that `https://` peers' certificates must chain to (default:
    /// the public web roots).
    #[arg(long)]
    pub cluster_ca_file: Option<PathBuf>,
    /// Fill titles the volume lacks from this origin: s3://BUCKET or file:///DIR
    /// (credentials: the configuration file or AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY).
    #[arg(long)]
    pub origin: Option<String>,
    /// The origin's S3 endpoint (http://HOST:PORT for Garage; default: AWS).
    #[arg(long)]
    pub origin_endpoint: Option<String>,
    /// The origin's SigV4 region (default: AWS_REGION, else us-east-1).
    #[arg(long)]
    pub origin_region: Option<String>,
    /// Ranged GETs of one fill in flight at once (default 4).
    #[arg(long)]
    pub fill_parallel_ranges: Option<u32>,
    /// Bytes of one ranged GET, a multiple of 1 MiB (default 1048576).
    #[arg(long)]
    pub fill_range_bytes: Option<u64>,
    /// Most bytes the volume's titles may take before fills evict the least recently used
    /// unused, unpinned titles (default 0: 90 % of the volume).
    #[arg(long)]
    pub cache_max_bytes: Option<u64>,
    /// Check a complete title's origin ETag at most this often, seconds (default 300; 0: never).
    #[arg(long)]
    pub origin_check_interval_s: Option<u64>,
    /// Pre-fills read the origin at most this fast, bits per second (default 0: unlimited).
    #[arg(long)]
    pub prefill_rate_bps: Option<u64>,
    /// A member failed by read errors alone is probed this often and used again when the
    /// probe succeeds (milliseconds; default 30000; 0: never).
    #[arg(long)]
    pub member_probe_interval_ms: Option<u64>,
}

/// One `--nodes` entry: `NAME=URL` or `NAME*WEIGHT=URL`.
fn parse_node(s: &str) -> Result<isnode_serve::ClusterNode, String> {
    let (name, url) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not NAME=URL or NAME*WEIGHT=URL"))?;
    let (name, weight) = match name.split_once('*') {
        Some((n, w)) => (
            n,
            w.parse::<f64>()
                .map_err(|e| format!("weight {w:?} of {n:?}: {e}"))?,
        ),
        None => (name, 1.0),
    };
    if name.is_empty() || url.is_empty() {
        return Err(format!("{s:?} is not NAME=URL or NAME*WEIGHT=URL"));
    }
    Ok(isnode_serve::ClusterNode {
        name: name.to_string(),
        url: url.to_string(),
        weight,
    })
}

/// Sets each `config.$field` whose flag was given.
macro_rules! overlay {
    ($config:ident, $flags:ident; $($field:ident),* $(,)?) => {
        $( if let Some(v) = $flags.$field { $config.$field = v; } )*
    };
}

/// Sets each optional `config.$field` whose flag was given.
macro_rules! overlay_some {
    ($config:ident, $flags:ident; $($field:ident),* $(,)?) => {
        $( if $flags.$field.is_some() { $config.$field = $flags.$field; } )*
    };
}

impl ServeFlags {
    /// The configuration these flags describe: the file's (or the defaults), each given
    /// flag overriding its key; `volume` is the command line's when it named one
    /// ([`VolumeFlag::Given`]), else the file's, else `volume`. Validated.
    pub(crate) fn to_config(
        &self,
        volume: &Path,
        given: VolumeFlag,
    ) -> anyhow::Result<ServeConfig> {
        let mut config = match &self.config {
            Some(path) => read_config(path)?,
            None => ServeConfig::default(),
        };
        self.overlay(&mut config);
        if given == VolumeFlag::Given || config.volume.is_none() {
            config.volume = Some(volume.to_path_buf());
        }
        config.validate().context("the command line")?;
        Ok(config)
    }

    fn overlay(&self, config: &mut ServeConfig) {
        let flags = self.clone();
        overlay!(config, flags; listen, engine, cache_size_bytes, egress_capacity_bps,
            max_sessions_per_client, disk_read_bps, degraded, member_fail_errors,
            hedge_after_ms, session_timeout_ms, validate_timeout_ms,
            validate_destination, min_dest_port, read_io, max_content_readers,
            http_mirror_bytes,
            start_burst_factor, start_burst_ms, broadcast_groups, broadcast_port,
            broadcast_max_groups, multicast_ttl, broadcast_mode, broadcast_scheme,
            broadcast_max_wait_s, api_header_timeout_ms, api_idle_timeout_ms,
            shutdown_grace_s, broadcast_default_duration_s, broadcast_max_duration_s,
            broadcast_budget_percent, upload_stall_timeout_ms, upload_min_rate_bps,
            api_write_timeout_ms, api_send_buffer_bytes, max_unvalidated_sessions, max_unvalidated_per_client,
            anonymous_viewers, encrypt, licence_ttl_s, scrub_rate_bps, member_probe_interval_ms, origin,
            origin_endpoint, origin_region, fill_parallel_ranges, fill_range_bytes,
            cache_max_bytes, origin_check_interval_s, prefill_rate_bps, nodes,
            replicate_above_rps, probe_interval_ms, probe_timeout_ms, probe_failures_to_dead,
            load_bound);
        overlay_some!(config, flags; max_bitrate_bps, threads, api_threads, multicast_if, max_volume_bytes,
            max_sendfile_sessions, tokens_file, node_key_file, cluster_key_file,
            api_max_connections, tls_cert, tls_key, node_name, cluster_ca_file, http_mirror_dir);
        if flags.plain_http {
            config.plain_http = true;
        }
        if flags.insecure_open_operator_routes {
            config.insecure_open_operator_routes = true;
        }
    }
}

/// Whether `--volume` (or `ISNODE_VOLUME`) was given, or is the built-in default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum VolumeFlag {
    /// Named on the command line or in the environment: it wins over the file.
    Given,
    /// The built-in default: the file's `volume` wins.
    Default,
}

/// Reads and validates a configuration file; errors name the file, the key and its line.
pub(crate) fn read_config(path: &Path) -> anyhow::Result<ServeConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the configuration {}", path.display()))?;
    ServeConfig::from_toml(&text).with_context(|| format!("configuration {}", path.display()))
}

/// `isnode config`.
#[derive(Subcommand, Debug)]
pub(crate) enum ConfigCommand {
    /// Validate a configuration file: exit 0 and print the configuration in force, or exit 1
    /// naming the bad key and its line.
    Check(ConfigCheckArgs),
    /// Print the fully commented default configuration (`packaging/isnode.toml`).
    Default,
}

/// `config check`.
#[derive(Args, Debug)]
pub(crate) struct ConfigCheckArgs {
    /// The file to check.
    pub file: PathBuf,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        flags: ServeFlags,
    }

    fn flags(argv: &[&str]) -> ServeFlags {
        Cli::try_parse_from(std::iter::once("serve").chain(argv.iter().copied()))
            .map(|c| c.flags)
            .unwrap()
    }

    #[test]
    fn no_flag_no_file_is_the_default() {
        let c = flags(&[])
            .to_config(Path::new("v"), VolumeFlag::Default)
            .unwrap();
        let d = ServeConfig {
            volume: Some("v".into()),
            read_io: c.read_io, // ISNODE_READ_IO may be set by the test environment
            ..ServeConfig::default()
        };
        assert_eq!(c, d);
    }

    #[test]
    fn the_shipped_file_is_the_default_and_names_every_key() {
        let c = ServeConfig::from_toml(DEFAULT_CONFIG_TOML).unwrap();
        assert_eq!(c, ServeConfig::default());
        let every = ServeConfig {
            volume: Some("v".into()),
            max_bitrate_bps: Some(1),
            threads: Some(1),
            api_threads: Some(1),
            multicast_if: Some("lo".into()),
            api_max_connections: Some(1),
            tls_cert: Some("c".into()),
            tls_key: Some("k".into()),
            max_volume_bytes: Some(1),
            max_sendfile_sessions: Some(1),
            tokens_file: Some("t".into()),
            node_key_file: Some("nk".into()),
            cluster_key_file: Some("ck".into()),
            node_name: Some("n".into()),
            cluster_ca_file: Some("ca".into()),
            http_mirror_dir: Some("m".into()),
            origin_access_key_id: Some("k".into()),
            origin_secret_access_key: Some(isnode_serve::Secret::new("s")),
            ..ServeConfig::default()
        };
        let table: toml::Table = toml::from_str(&every.to_toml()).unwrap();
        for key in table.keys() {
            let named = DEFAULT_CONFIG_TOML.lines().any(|l| {
                let l = l.trim_start().trim_start_matches('#').trim_start();
                l.strip_prefix(key.as_str())
                    .is_some_and(|r| r.trim_start().starts_with('='))
            });
            assert!(named, "packaging/isnode.toml does not describe `{key}`");
        }
    }

    #[test]
    fn flags_override_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            "volume = \"/srv/v\"\nmax_sessions_per_client = 3\ncache_size_bytes = 1048576\n",
        )
        .unwrap();
        let p = path.to_str().unwrap();
        let c = flags(&["--config", p, "--cache-size-bytes", "2097152"])
            .to_config(Path::new("./isnode-data"), VolumeFlag::Default)
            .unwrap();
        assert_eq!(c.max_sessions_per_client, 3);
        assert_eq!(c.cache_size_bytes, 2 << 20);
        assert_eq!(c.volume.as_deref(), Some(Path::new("/srv/v")));
        let c = flags(&["--config", p])
            .to_config(Path::new("/other"), VolumeFlag::Given)
            .unwrap();
        assert_eq!(c.volume.as_deref(), Some(Path::new("/other")));
    }

    #[test]
    fn nodes_are_given_by_name_weight_and_url() {
        let c = flags(&[
            "--node-name",
            "b",
            "--nodes",
            "a=http://10.0.0.1:7878,b*2=http://10.0.0.2:7878",
        ])
        .to_config(Path::new("v"), VolumeFlag::Default)
        .unwrap();
        assert_eq!(c.nodes.len(), 2);
        assert_eq!(c.nodes[1].weight, 2.0);
        assert_eq!(c.nodes[0].url, "http://10.0.0.1:7878");
        let e = flags(&["--nodes", "a=http://10.0.0.1:7878"])
            .to_config(Path::new("v"), VolumeFlag::Default)
            .unwrap_err();
        assert!(format!("{e:#}").contains("node_name"), "{e:#}");
        assert!(parse_node("nourl").is_err());
        assert!(parse_node("a*x=http://h").is_err());
    }

    #[test]
    fn a_bad_flag_value_is_refused() {
        let e = flags(&["--session-timeout-ms", "1"])
            .to_config(Path::new("v"), VolumeFlag::Default)
            .unwrap_err();
        assert!(format!("{e:#}").contains("session_timeout_ms"), "{e:#}");
    }
}
