//! The bodies of the broadcast routes (`docs/protocol.md`, "Broadcasts"): a stored title
//! repeated on multicast channels by a periodic broadcast scheme.
//!
//! A receiver needs no more than [`BroadcastInfo`]: the plan's inputs (the title's
//! codeword geometry, the scheme, its parameters and the maximum wait) let it recompute
//! the same plan with `isnode-broadcast` (planning is deterministic); `elapsed_s` places
//! it in the timetable; `channels` says where each channel's source and repair packets go.

use serde::{Deserialize, Serialize};

use crate::{FecInfo, ObjectInfo};

/// `POST /v1/broadcasts`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CreateBroadcast {
    /// The stored object to broadcast.
    pub object: String,
    /// The scheme, by the name `isnode broadcast plan` shows (`cautious-harmonic`, ...).
    pub scheme: String,
    /// The longest start-up wait allowed, seconds.
    pub max_wait_s: f64,
    /// Skyscraper's width cap W (default 52).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<u64>,
    /// Quasi-harmonic's and polyharmonic's m (default 4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub m: Option<u32>,
    /// Groups for the channels' source packets (default: free ones of the server's range);
    /// channel c uses `source_groups[c % len]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub source_groups: Vec<String>,
    /// Groups for the channels' repair packets (as many as `source_groups`; default: free
    /// ones of the server's range).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repair_groups: Vec<String>,
    /// UDP port of channel 0; channel c uses `port + c` (default: the server's
    /// `--broadcast-port`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// 4 or 6: the family of the allocated groups (default 4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_version: Option<u8>,
    /// Stop at this unix time, seconds. At most one of `until`, `duration_s` and `cycles`;
    /// with none, the server's default duration (`--broadcast-default-duration-s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<u64>,
    /// Stop this long after the start, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<f64>,
    /// Stop after this many cycles of the plan (a cycle: its longest channel period).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycles: Option<u64>,
}

/// The plan as the server made it (after codeword rounding).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PlanSummary {
    /// The title's codewords (the plan's unit: one codeword's airtime at the bitrate is τ).
    pub codewords: u64,
    /// Source bytes per codeword (k × symbol length).
    pub codeword_payload_bytes: u64,
    /// The title's bitrate.
    pub bitrate_bps: u64,
    /// The scheme's slot, codewords.
    pub slot_codewords: u64,
    /// Server bandwidth, bits per second of source payload (all channels).
    pub server_rate_bps: f64,
    /// The client's longest wait, seconds.
    pub worst_wait_s: f64,
    /// Most channels a client listens to at once.
    pub max_channels: usize,
    /// Most bytes a client holds ahead of playback.
    pub peak_buffer_bytes: u64,
}

/// One channel: its rate and where its packets go.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct BroadcastChannel {
    /// Index in the plan.
    pub index: usize,
    /// Rate, bits per second of source payload.
    pub rate_bps: f64,
    /// Rate on the wire (UDP payload: headers and all stored repair symbols), bits per
    /// second, while it sends (what admission reserves).
    pub send_rate_bps: u64,
    /// Its wire rate averaged over a cycle (below `send_rate_bps` where a cycle has idle
    /// time: codeword rounding can leave a channel's last slots empty).
    pub mean_send_rate_bps: u64,
    /// Group and port of its source packets (`ip:port`, `[ip]:port` for IPv6).
    pub source: String,
    /// Group and port of its repair packets.
    pub repair: String,
}

/// `201` of `POST /v1/broadcasts`, `GET /v1/broadcasts/{id}`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct BroadcastInfo {
    /// Identifier (the path of its routes).
    pub id: String,
    /// The object broadcast.
    pub object: ObjectInfo,
    /// The scheme's name.
    pub scheme: String,
    /// The maximum wait asked for, seconds.
    pub max_wait_s: f64,
    /// Skyscraper's width, if that is the scheme.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<u64>,
    /// Quasi-harmonic's or polyharmonic's m, if that is the scheme.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub m: Option<u32>,
    /// The plan's figures.
    pub plan: PlanSummary,
    /// The channels.
    pub channels: Vec<BroadcastChannel>,
    /// Wire rate of all channels, bits per second (what admission counts).
    pub send_rate_bps: u64,
    /// Time since the timetable's origin (τ = 0) when this answer was made, seconds.
    pub elapsed_s: f64,
    /// Time left until it stops by itself, seconds (absent for an automatic broadcast,
    /// which stops once its viewers are done).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remaining_s: Option<f64>,
    /// TTL (IPv4) or hop limit (IPv6) of the packets.
    pub ttl: u8,
    /// The FDT instance sent on every channel's source group.
    pub fdt_xml: String,
    /// FEC parameters.
    pub fec: FecInfo,
    /// Packets sent on all channels so far.
    pub packets_sent: u64,
    /// UDP payload bytes sent on all channels so far.
    pub bytes_sent: u64,
    /// Started by the server for demand (`--broadcast auto`), not by a request.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub automatic: bool,
    /// Session requests answered with this broadcast so far (the viewers the server knows of).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub viewers_redirected: u64,
    /// The title and rung this broadcast sends, when it is one rung of a title's broadcast
    /// (`POST /v1/broadcasts` naming a title with renditions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rung: Option<BroadcastRung>,
}

/// One rung of a title's broadcast: which title, which rendition and what it carries.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct BroadcastRung {
    /// The title's name.
    pub title: String,
    /// The rendition's index in the title (the `i` of its object `TITLE@i`).
    pub rendition: u32,
    /// The rendition's average bitrate, bits per second.
    pub bitrate_bps: u64,
    /// Video width in pixels (none for an audio-only rendition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<u32>,
    /// Video height in pixels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub height: Option<u32>,
    /// RFC 6381 codecs.
    #[serde(default)]
    pub codecs: String,
}

/// `201` of `POST /v1/broadcasts` naming a title with renditions: one broadcast per
/// rendition (its own plan, channels and groups: no group is shared between rungs).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TitleBroadcastInfo {
    /// The title's name.
    pub title: String,
    /// Each rendition's broadcast, in the title's order (each with its `rung`).
    pub rungs: Vec<BroadcastInfo>,
    /// Wire rate of all rungs' channels together, bits per second (what admission counts).
    pub send_rate_bps: u64,
    /// Mean wire rate of all rungs' channels over their cycles, bits per second (the
    /// server's egress for the title, whatever the number of receivers).
    pub mean_send_rate_bps: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// `GET /v1/broadcasts`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct BroadcastList {
    /// The running broadcasts.
    pub broadcasts: Vec<BroadcastInfo>,
}

/// `200` of `POST /v1/sessions` when the server serves the title by broadcast (`isnode
/// serve --broadcast auto`): no session was made; the client tunes in to the broadcast.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SessionRedirect {
    /// The broadcast that carries the title.
    pub broadcast: BroadcastInfo,
}
