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
//! | `POST /v1/sessions/{id}/keepalive` | —                 | `204`                          |
//! | `DELETE /v1/sessions/{id}`       | —                   | `204`                          |
//! | any error                        | —                   | `4xx`/`5xx` [`ErrorBody`]      |

//!
//! The one binary message, the UDP keepalive datagram, is in [`keepalive`].

#![deny(missing_docs)]

pub mod keepalive;

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
}

/// The `200` answer to `GET /v1/objects`: every complete object, by TOI.
pub type ObjectList = Vec<ObjectInfo>;

/// The body of `POST /v1/sessions`. The destination is always the HTTP peer's own
/// address: no field can name another one.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct CreateSession {
    /// Name of the object to stream.
    pub object: String,
    /// UDP port of the client to send to (not 0).
    pub port: u16,
    /// First codeword to send (default 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub start_codeword: u32,
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
    /// A session without keepalive for this long ends by itself, milliseconds.
    pub session_timeout_ms: u64,
    /// The session's FDT instance (XML), as also sent in-band on TOI 0.
    pub fdt_xml: String,
    /// FEC parameters.
    pub fec: FecInfo,
}

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
    /// Concurrent sessions per client IP address (`--max-sessions-per-client`).
    MaxSessionsPerClient,
}

impl Limit {
    /// All limits, in metrics order.
    pub const ALL: [Limit; 3] = [
        Limit::MaxBitrateBps,
        Limit::CacheSizeBytes,
        Limit::MaxSessionsPerClient,
    ];

    /// The name used in the API and in metrics.
    pub fn name(self) -> &'static str {
        match self {
            Limit::MaxBitrateBps => "max_bitrate_bps",
            Limit::CacheSizeBytes => "cache_size_bytes",
            Limit::MaxSessionsPerClient => "max_sessions_per_client",
        }
    }

    /// Position in [`Limit::ALL`].
    pub fn index(self) -> usize {
        match self {
            Limit::MaxBitrateBps => 0,
            Limit::CacheSizeBytes => 1,
            Limit::MaxSessionsPerClient => 2,
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
