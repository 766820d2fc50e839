//! `GET /v1/status`: a snapshot of everything the status page (`GET /`) and `isnode
//! status` show.

use serde::{Deserialize, Serialize};

use crate::ObjectStatus;

/// `200` of `GET /v1/status`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct StatusBody {
    /// The server's version.
    pub version: String,
    /// Seconds since the server started.
    pub uptime_s: u64,
    /// The send engine in use.
    pub engine: String,
    /// Every object of the volume, by name.
    pub titles: Vec<StatusTitle>,
    /// Unicast sessions in the session table (streaming, or done and not yet forgotten).
    pub sessions: Vec<StatusSession>,
    /// Running broadcasts.
    pub broadcasts: Vec<StatusBroadcast>,
    /// The volume's members.
    pub members: Vec<StatusMember>,
    /// The block cache.
    pub cache: StatusCache,
    /// Seconds each egress sample covers.
    pub egress_interval_s: u32,
    /// Egress over the last minutes, oldest first (at most 300 samples).
    pub egress: Vec<EgressSample>,
    /// Totals since the start.
    pub totals: StatusTotals,
    /// The background scrub (`scrub_rate_bps`); absent from older servers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scrub: Option<StatusScrub>,
    /// Fills from the origin, counted apart from the bytes served; absent from older
    /// servers and without an origin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fills: Option<StatusFills>,
    /// The live streams' playback slack (what paces background work); absent from older
    /// servers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub playback: Option<StatusPlayback>,
}

/// Fills from the origin (`origin`), counted apart from the bytes served.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct StatusFills {
    /// The origin (`s3://BUCKET at ENDPOINT`, `file:///DIR`; never a credential).
    pub origin: String,
    /// Bytes read from the origin.
    pub fill_bytes: u64,
    /// Requests made to the origin.
    pub origin_requests: u64,
    /// Fills running now.
    pub active: u64,
    /// Fills started since the server started.
    pub started: u64,
    /// Fills finished (complete objects).
    pub done: u64,
    /// Failed origin requests.
    pub errors: u64,
    /// Titles evicted to keep the volume within `cache_max_bytes`.
    pub titles_evicted: u64,
}

/// The live streams' playback slack: how far ahead of its playback deadline each stream
/// is (the nominal schedule plus 100 ms), the smallest of them, and how many are late.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct StatusPlayback {
    /// Live streams (sessions streaming and not paused, broadcast channels).
    pub streams: u32,
    /// Streams at or past their playback deadline.
    pub late_streams: u32,
    /// The smallest slack, milliseconds (`null` without streams; 0 or less: late).
    pub min_slack_ms: Option<i64>,
}

/// The background scrub's progress and findings.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct StatusScrub {
    /// Whether it is on (`scrub_rate_bps` above 0).
    pub enabled: bool,
    /// The rate in force now, paced by the viewers, bits per second.
    pub rate_bps: u64,
    /// Passes finished over the whole volume.
    pub passes: u64,
    /// Bytes of the pass in progress read so far.
    pub pass_done_bytes: u64,
    /// Bytes the pass in progress reads in all.
    pub pass_total_bytes: u64,
    /// Bytes read, in all.
    pub bytes_read: u64,
    /// Bad blocks found, in all passes.
    pub bad_blocks: u64,
    /// Bad packets found, in all passes.
    pub bad_packets: u64,
    /// Objects with damage in the last finished pass.
    pub damaged_objects: u64,
}

/// One title.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct StatusTitle {
    /// Object name.
    pub name: String,
    /// Length in bytes.
    pub size_bytes: u64,
    /// Playing time, seconds.
    pub duration_s: f64,
    /// Media bitrate, bits per second.
    pub bitrate_bps: u64,
    /// MIME type (empty if unknown).
    pub content_type: String,
    /// `ok`, or `bad` when its catalog rows are impossible (never served).
    pub status: ObjectStatus,
    /// Why a `bad` title is bad.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// Streaming unicast sessions of it now.
    pub sessions: u64,
}

/// One unicast session.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct StatusSession {
    /// Session id.
    pub id: String,
    /// The title it streams.
    pub title: String,
    /// `streaming` or `done`.
    pub state: String,
    /// Paused by its client, or waiting for its destination to echo the token.
    pub paused: bool,
    /// Playing position of the next codeword to send, seconds.
    pub position_s: f64,
    /// Send rate, bits per second.
    pub rate_bps: u64,
    /// The client's last reported loss rate in [0, 1] (absent before any report).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_rate: Option<f64>,
    /// Where its packets go (`ip:port`).
    pub peer: String,
    /// UDP payload bytes sent.
    pub bytes_sent: u64,
    /// Seconds since it was created.
    pub age_s: f64,
}

/// One broadcast.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct StatusBroadcast {
    /// Broadcast id.
    pub id: String,
    /// The title broadcast.
    pub title: String,
    /// The scheme's name.
    pub scheme: String,
    /// Number of channels.
    pub channels: u64,
    /// Session requests answered with it so far.
    pub viewers: u64,
    /// Started by the server for demand, not by a request.
    pub automatic: bool,
    /// Wire rate of all channels, bits per second.
    pub send_rate_bps: u64,
    /// The title and rung, when it is one rung of a title's broadcast.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rung: Option<crate::broadcast::BroadcastRung>,
}

/// Whether a member serves.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum MemberHealth {
    /// Serving.
    Ok,
    /// Its reads are slower than the server's hedging bound (`hedge_after_ms`): streams
    /// rebuild its symbols from the others rather than wait.
    Slow,
    /// Marked failed after repeated read errors: not read any more, its symbols rebuilt
    /// from the others (streams go on).
    Failed,
}

/// One member of the volume.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct StatusMember {
    /// Member index.
    pub member: u32,
    /// Its health.
    pub health: MemberHealth,
    /// Failed block reads.
    pub read_errors: u64,
    /// The catalog's state of the member: `ok`, `failed` or `rebuilding` (absent from older
    /// servers, or when the catalog could not be read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// `failed`: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `rebuilding`: bytes rebuilt so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebuilt_bytes: Option<u64>,
}

/// The block cache.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct StatusCache {
    /// Lookups served from memory.
    pub hits: u64,
    /// Lookups that read a block.
    pub misses: u64,
    /// Blocks evicted.
    pub evictions: u64,
    /// hits / (hits + misses); absent before the first lookup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hit_ratio: Option<f64>,
    /// Bytes of the pool holding blocks.
    pub bytes: u64,
    /// Size of the pool.
    pub pool_bytes: u64,
}

/// One egress sample.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct EgressSample {
    /// Seconds since the server started, at the end of the interval.
    pub t_s: u64,
    /// UDP payload rate of sessions and broadcasts, bits per second.
    pub udp_bps: u64,
    /// HTTP body rate of content and repair answers, bits per second.
    pub http_bps: u64,
}

/// Totals since the start.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct StatusTotals {
    /// Sessions admitted.
    pub sessions_started: u64,
    /// Session requests refused by admission control.
    pub sessions_refused: u64,
    /// Broadcasts started.
    pub broadcasts_started: u64,
    /// UDP payload bytes sent.
    pub udp_bytes_sent: u64,
    /// HTTP body bytes of content and repair answers.
    pub http_bytes_sent: u64,
}
