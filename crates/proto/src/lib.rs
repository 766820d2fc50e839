//! The JSON bodies of isnode's HTTP control API (`docs/protocol.md`), shared by the
//! server (`isnode-serve`) and the client (`isnode-recv`).
//!
//! Serde types only: no I/O, no HTTP. Every type here has at least one example in
//! `docs/protocol.md`, and a test (`tests/doc_examples.rs`) parses each example into its
//! type and serializes it back unchanged, so the document and the code cannot drift.
//!
//! | Request                          | Body                | Answer                         |
//! |----------------------------------|---------------------|--------------------------------|
//! | `GET /v1/objects`                | —                   | `200` [`ObjectList`]           |
//! | `GET /v1/objects/{name}`         | —                   | `200` [`ObjectInfo`]           |
//! | `POST /v1/sessions`              | [`CreateSession`]   | `201` [`SessionInfo`]          |
//! | `GET /v1/sessions/{id}`          | —                   | `200` [`SessionStatus`]        |
//! | `POST /v1/sessions/{id}/validate` | [`auth::ValidateSession`] | `204` (the stream starts) |
//! | `POST /v1/sessions/{id}/keepalive` | —                 | `204`                          |
//! | `POST /v1/sessions/{id}/control` | [`SessionControl`]  | `200` [`ControlAnswer`]        |
//! | `GET /v1/objects/{name}/index`   | —                   | `200` [`MediaIndex`]           |
//! | `GET /v1/objects/{name}/index.m3u8` | —                | `200` HLS playlist (text)      |
//! | `DELETE /v1/sessions/{id}`       | —                   | `204`                          |
//! | `GET /v1/objects/{name}/content` | —                   | `200`/`206` the bytes ([`range`]) |
//! | `GET /v1/objects/{name}/codewords/{sbn}/packets?esi=...` | — | `200` stored packets |
//! | `GET /v1/objects/{name}/digests?from=SBN&count=N` | — | `200` packet digests (binary) |
//! | `POST /v1/broadcasts`            | [`broadcast::CreateBroadcast`] | `201` [`broadcast::BroadcastInfo`] |
//! | `GET /v1/broadcasts`             | —                   | `200` [`broadcast::BroadcastList`] |
//! | `GET /v1/broadcasts/{id}`        | —                   | `200` [`broadcast::BroadcastInfo`] |
//! | `DELETE /v1/broadcasts/{id}`     | —                   | `204`                          |
//! | `GET /v1/status`                 | —                   | `200` [`status::StatusBody`]   |
//! | any error                        | —                   | `4xx`/`5xx` [`ErrorBody`]      |

//!
//! The one binary message, the UDP keepalive datagram, is in [`keepalive`]; the `Range`
//! header of the content route and its validators are in [`range`].

#![deny(missing_docs)]

pub mod auth;
pub mod broadcast;
pub mod goodbye;
pub mod keepalive;
pub mod range;
pub mod status;

use serde::{Deserialize, Serialize};

/// FEC Encoding ID of Reed-Solomon over GF(2^8) (RFC 5510), the only one isnode uses.
pub const FEC_ENCODING_ID_RS28: u8 = 5;

/// Keepalive period the server recommends, milliseconds.
pub const DEFAULT_KEEPALIVE_INTERVAL_MS: u64 = 1000;

/// An object as `GET /v1/objects/{name}` (and the session answer) describe it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ObjectInfo {
    /// Object name (FLUTE Content-Location).
    pub name: String,
    /// Length of the object in bytes (FLUTE transfer length).
    pub size_bytes: u64,
    /// Media bitrate, bits per second.
    pub bitrate_bps: u64,
    /// Playing time, seconds.
    pub duration_s: f64,
    /// MIME type (empty if unknown).
    #[serde(default)]
    pub content_type: String,
    /// Encoding symbol length E, bytes.
    pub symbol_size: u32,
    /// Source symbols B of a full codeword.
    pub source_symbols: u32,
    /// Repair symbols m of every codeword.
    pub repair_symbols: u32,
    /// Number of codewords (source blocks).
    pub codewords: u32,
    /// FLUTE TSI of the volume.
    pub tsi: u32,
    /// FLUTE TOI of the object.
    pub toi: u32,
    /// MP4 only: `true` when the `moov` box comes before the media data (a player can
    /// start at once), `false` when it is at the end (a player must fetch the end first).
    /// Absent for other containers and for objects ingested before the media index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moov_at_front: Option<bool>,
    /// The digest algorithm of the object's packet digests (`sha256-128`), served by
    /// `GET /v1/objects/{name}/digests`; absent for an object ingested before digests
    /// (its packets cannot be authenticated, only checked by their CRC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packet_digests: Option<String>,
    /// Whether the object can be served: `bad` when its catalog rows are impossible
    /// (absent, meaning `ok`, for an object that is served).
    #[serde(default, skip_serializing_if = "ObjectStatus::is_ok")]
    pub status: ObjectStatus,
    /// Why a `bad` object is bad (absent for `ok` objects).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// A `filling` object's fill front: its leading codewords committed (durable and
    /// served), of `codewords` (absent for other objects).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub front_codewords: Option<u32>,
}

/// Whether an object can be served.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ObjectStatus {
    /// Its catalog rows are valid: it is served.
    #[default]
    Ok,
    /// Its catalog rows break an invariant (`docs/format.md`): listed with its problem,
    /// never served (sessions, content and HLS for it answer `409`); its other fields are
    /// the stored values as well as they convert, not to be trusted.
    Bad,
    /// Being filled from the origin (issue 19): served up to its `front_codewords`,
    /// complete once the fill ends.
    Filling,
}

impl ObjectStatus {
    /// True for [`ObjectStatus::Ok`].
    pub fn is_ok(&self) -> bool {
        *self == ObjectStatus::Ok
    }
}

/// The `200` answer to `GET /v1/objects`: every complete object, by TOI, bad ones
/// included (with their `status` and `problem`), then every object being filled from the
/// origin (`status` `filling`, with its `front_codewords`).
pub type ObjectList = Vec<ObjectInfo>;

/// The body of `POST /v1/sessions`. The destination is always the HTTP peer's own
/// address: no field can name another one.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CreateSession {
    /// Name of the object to stream.
    pub object: String,
    /// UDP port of the client to send to (not 0).
    pub port: u16,
    /// First codeword to send (default 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub start_codeword: u32,
    /// Start playing at this time, seconds from the title's start (0 ≤ t ≤ duration;
    /// not with a non-zero `start_codeword`): the session starts at the codeword holding
    /// the last random-access point at or before it ([`SessionInfo::start_offset_bytes`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at_s: Option<f64>,
    /// Do not send the start-up burst (the first codewords faster than the stream's rate);
    /// default false. For before/after measurements.
    #[serde(default, skip_serializing_if = "is_false")]
    pub no_start_burst: bool,
}

/// The optional JSON body of `POST /v1/sessions/{id}/keepalive` (an empty body is a plain
/// keepalive): the client's loss report for adaptive repair.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct KeepaliveBody {
    /// The client's measured loss rate over its recent window, in [0, 1].
    pub loss_rate: f64,
}

/// How a time was turned into a position in the object.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SeekBy {
    /// From the object's index of random-access points (made at ingest): the offset is
    /// the start of a random-access point at or before the time.
    Index,
    /// The object has no index (not MPEG-TS or MP4 with a video track, or ingested before
    /// indexes existed): offset = time × bitrate / 8, rounded down to its codeword's
    /// first byte; not necessarily a place a decoder can start.
    Bitrate,
}

/// The body of `POST /v1/sessions/{id}/control`: seek (to a time or a codeword), pause
/// or resume a live session.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum SessionControl {
    /// Continue from another place: exactly one of `at_s` (seconds, mapped like
    /// [`CreateSession::start_at_s`]) and `codeword`.
    Seek {
        /// Time to seek to, seconds from the title's start.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        at_s: Option<f64>,
        /// Codeword to seek to.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        codeword: Option<u32>,
    },
    /// Stop sending (keepalives are still needed) until `resume`.
    Pause,
    /// Send again, from where the session paused.
    Resume,
}

/// The `200` answer to `POST /v1/sessions/{id}/control`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ControlAnswer {
    /// Session id.
    pub id: String,
    /// Whether the session is paused after this request.
    pub paused: bool,
    /// A seek: the codeword the session continues from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub codeword: Option<u32>,
    /// A seek: the byte where playback continues (the random-access point, or the
    /// codeword's first byte).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset_bytes: Option<u64>,
    /// A seek to a time: how the time was mapped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seek_by: Option<SeekBy>,
}

/// One random-access point of an object's index.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct AccessPoint {
    /// Seconds from the title's start.
    pub time_s: f64,
    /// Byte offset in the object where decoding can start.
    pub offset_bytes: u64,
    /// The codeword holding that byte.
    pub codeword: u32,
}

/// The `200` answer to `GET /v1/objects/{name}/index`: the object's time index.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MediaIndex {
    /// Object name.
    pub object: String,
    /// Container found at ingest: `mpeg-ts`, `mp4` or `unknown`.
    pub container: String,
    /// MP4 only: whether `moov` precedes the media data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moov_at_front: Option<bool>,
    /// The random-access points, in increasing time and offset.
    pub points: Vec<AccessPoint>,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

/// FEC parameters of a session (the FEC Object Transmission Information).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct FecInfo {
    /// FEC Encoding ID ([`FEC_ENCODING_ID_RS28`]).
    pub encoding_id: u8,
    /// Encoding symbol length E, bytes.
    pub symbol_size: u32,
    /// Maximum source block length B.
    pub max_source_block_length: u32,
    /// Maximum number of encoding symbols per codeword, B + m.
    pub max_encoding_symbols: u32,
}

/// The `201 Created` answer to `POST /v1/sessions`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SessionInfo {
    /// Session id.
    pub id: String,
    /// The session's secret ([`auth`]): 32 lowercase hexadecimal digits. Keepalives,
    /// controls, validation and `DELETE` must carry it and come from the creating address.
    pub secret: String,
    /// The stream starts once the client has echoed the token datagram sent to its port
    /// ([`auth`], return routability); the server waits this long for the echo before
    /// ending the session, milliseconds.
    pub validate_timeout_ms: u64,
    /// Where the server sends the stream (`ip:port`).
    pub destination: String,
    /// The object streamed.
    pub object: ObjectInfo,
    /// First codeword sent.
    pub start_codeword: u32,
    /// UDP payload rate, bits per second (bitrate plus parity and header overhead).
    pub send_rate_bps: u64,
    /// How often the client should send keepalives, milliseconds.
    pub keepalive_interval_ms: u64,
    /// UDP port on the server's control address that takes keepalive datagrams
    /// ([`keepalive`]), the cheaper alternative to the HTTP keepalive; absent if the
    /// server takes HTTP keepalives only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keepalive_port: Option<u16>,
    /// The keepalive datagram version the keepalive port takes
    /// ([`keepalive::KEEPALIVE_VERSION`], MAC and counter); absent from servers that took
    /// version 3 (the secret in clear) or earlier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keepalive_version: Option<u8>,
    /// A session without keepalive for this long ends by itself, milliseconds.
    pub session_timeout_ms: u64,
    /// Whether the server takes loss reports (keepalive datagram version 2, the HTTP
    /// keepalive's JSON body) and adapts the repair symbols it sends to them.
    #[serde(default)]
    pub loss_reports: bool,
    /// The session's FDT instance (XML), as also sent in-band on TOI 0.
    pub fdt_xml: String,
    /// FEC parameters.
    pub fec: FecInfo,
    /// With `start_at_s`: the byte at which playback starts (the random-access point, at
    /// or after the first byte of `start_codeword`). A client drops the codeword's bytes
    /// before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_offset_bytes: Option<u64>,
    /// With `start_at_s`: the time of that point, seconds from the title's start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time_s: Option<f64>,
    /// With `start_at_s`: how the time was mapped (the index, or bitrate arithmetic
    /// for an object without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seek_by: Option<SeekBy>,
    /// The origin's ETag of the version this server's copy holds, when the copy was
    /// filled from an origin (at most [`MAX_ORIGIN_ETAG_LEN`] bytes); absent for an
    /// object ingested locally. Two edges' copies of one origin version carry the same
    /// ETag (and the same bytes and codeword layout), not the same TSI and TOI: a client
    /// resuming on another edge takes such a copy's stream from the codeword it resumes at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin_etag: Option<String>,
    /// The object is encrypted (HLS AES-128, issue 32): its bytes are the ciphertexts of
    /// the segments of `GET /v1/objects/{name}/index.m3u8`, whose key
    /// (`GET /v1/objects/{name}/key`) needs a viewer token. Absent: stored in the clear.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub encrypted: bool,
    /// An encrypted object: bytes of clear media the session's output carries once
    /// decrypted (its segments' clear lengths from the one it starts at to the end), what
    /// `play --http` announces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clear_output_bytes: Option<u64>,
}

/// Longest [`SessionInfo::origin_etag`] a client takes as an identity, bytes (a longer
/// one is as if absent).
pub const MAX_ORIGIN_ETAG_LEN: usize = 1024;

/// Lifecycle of a session as the API reports it.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    /// Packets are being sent.
    Streaming,
    /// The last codeword has been sent (or the session otherwise ended).
    Done,
}

/// The `200` answer to `GET /v1/sessions/{id}`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct SessionStatus {
    /// Session id.
    pub id: String,
    /// Name of the object streamed.
    pub object: String,
    /// Where the server sends the stream (`ip:port`).
    pub destination: String,
    /// First codeword sent.
    pub start_codeword: u32,
    /// Next codeword the server will send.
    pub next_codeword: u32,
    /// Packets sent so far.
    pub packets_sent: u64,
    /// UDP payload bytes sent so far.
    pub bytes_sent: u64,
    /// Streaming or done.
    pub state: SessionState,
    /// Stored repair packets sent (adaptive repair).
    #[serde(default)]
    pub repair_packets_sent: u64,
    /// Stored repair packets skipped: the client's reported loss did not need them.
    #[serde(default)]
    pub repair_packets_skipped: u64,
    /// The client's last loss report in units of 1/10 000, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported_loss_units: Option<u16>,
    /// Paused by `POST /v1/sessions/{id}/control` (omitted when not).
    #[serde(default, skip_serializing_if = "is_false")]
    pub paused: bool,
    /// The server waits for the client to echo its token before it streams ([`auth`];
    /// omitted once validated).
    #[serde(default, skip_serializing_if = "is_false")]
    pub awaiting_validation: bool,
}

fn is_false(v: &bool) -> bool {
    !*v
}

/// The admission limits a session can be refused for (`limit` of a `503` answer, and the
/// `limit` label of `isnode_sessions_refused_total`).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// The sum of admitted sessions' send rates (`--max-bitrate-bps`, by default a fraction
    /// of `--egress-capacity-bps`).
    MaxBitrateBps,
    /// The block pool (`--cache-size-bytes`) cannot hold every session's working set.
    CacheSizeBytes,
    /// Concurrent sessions per client (`--max-sessions-per-client`; an IPv4 address, an
    /// IPv6 /64).
    MaxSessionsPerClient,
    /// The broadcasts' share of the bitrate budget (`--broadcast-budget-percent`), in bits
    /// per second: broadcasts cannot take the unicast sessions' part.
    BroadcastBudgetBps,
    /// Sessions in all under the `sendfile` engine, one socket each
    /// (`--max-sendfile-sessions`, by default from the open files limit).
    MaxSendfileSessions,
    /// Sessions awaiting their token's echo, in all (`--max-unvalidated-sessions`).
    MaxUnvalidatedSessions,
    /// Sessions awaiting their token's echo per client (`--max-unvalidated-per-client`;
    /// an IPv4 address, an IPv6 /64).
    MaxUnvalidatedPerClient,
    /// The disks' sustained read rate (`--disk-read-bps`), in bits per second: the reads the
    /// sessions need beyond what the block pool shares between them.
    DiskReadBps,
}

impl Limit {
    /// All limits, in metrics order.
    pub const ALL: [Limit; 8] = [
        Limit::MaxBitrateBps,
        Limit::CacheSizeBytes,
        Limit::MaxSessionsPerClient,
        Limit::MaxSendfileSessions,
        Limit::MaxUnvalidatedSessions,
        Limit::MaxUnvalidatedPerClient,
        Limit::BroadcastBudgetBps,
        Limit::DiskReadBps,
    ];

    /// The name used in the API and in metrics.
    pub fn name(self) -> &'static str {
        match self {
            Limit::MaxBitrateBps => "max_bitrate_bps",
            Limit::CacheSizeBytes => "cache_size_bytes",
            Limit::MaxSessionsPerClient => "max_sessions_per_client",
            Limit::BroadcastBudgetBps => "broadcast_budget_bps",
            Limit::MaxSendfileSessions => "max_sendfile_sessions",
            Limit::MaxUnvalidatedSessions => "max_unvalidated_sessions",
            Limit::MaxUnvalidatedPerClient => "max_unvalidated_per_client",
            Limit::DiskReadBps => "disk_read_bps",
        }
    }

    /// Position in [`Limit::ALL`].
    pub fn index(self) -> usize {
        match self {
            Limit::MaxBitrateBps => 0,
            Limit::CacheSizeBytes => 1,
            Limit::MaxSessionsPerClient => 2,
            Limit::MaxSendfileSessions => 3,
            Limit::MaxUnvalidatedSessions => 4,
            Limit::MaxUnvalidatedPerClient => 5,
            Limit::BroadcastBudgetBps => 6,
            Limit::DiskReadBps => 7,
        }
    }
}

/// The body of every error answer. Admission refusals (`503`) add the limit that was hit
/// and its configured value.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ErrorBody {
    /// Human-readable reason.
    pub error: String,
    /// The admission limit that refused the session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<Limit>,
    /// The configured value of that limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<u64>,
}

impl ErrorBody {
    /// An error without a limit.
    pub fn new(error: impl Into<String>) -> ErrorBody {
        ErrorBody {
            error: error.into(),
            limit: None,
            value: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_names_match_serde_and_index() {
        for (i, l) in Limit::ALL.iter().enumerate() {
            assert_eq!(l.index(), i);
            let s = serde_json::to_string(l).unwrap();
            assert_eq!(s, format!("\"{}\"", l.name()));
        }
    }

    #[test]
    fn start_codeword_defaults_to_zero_and_is_omitted() {
        let r: CreateSession = serde_json::from_str(r#"{"object":"a","port":9}"#).unwrap();
        assert_eq!(r.start_codeword, 0);
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"object":"a","port":9}"#
        );
        assert!(serde_json::from_str::<CreateSession>(r#"{"object":"a","port":70000}"#).is_err());
    }
}
