//! What the catalog keeps of a rendition besides its time index (issue 31): its descriptor
//! (codecs, resolution, frame rate), the fragment index of a fragmented MP4, and the titles
//! that group renditions. Plain data, a leaf of the crate: [`crate::renditions`] reads and
//! writes them (schema in docs/format.md, "Rendition tables").

use serde::{Deserialize, Serialize};

/// Most fragments kept per object (as [`isnode_media::fmp4::MAX_FRAGMENTS`]).
pub const MAX_FRAGMENT_ROWS: usize = isnode_media::fmp4::MAX_FRAGMENTS;
/// Most renditions a title groups.
pub const MAX_TITLE_RENDITIONS: usize = 32;
/// Longest codecs string kept, bytes.
pub const MAX_CODECS_LEN: usize = 255;

/// A rendition's descriptor (`media_descriptor`), read from the media at ingest.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DescriptorRecord {
    /// RFC 6381 codecs, video then audio, comma-separated (the HLS `CODECS` value); empty
    /// when none is known.
    pub codecs: String,
    /// Video width in pixels.
    pub width: Option<u32>,
    /// Video height in pixels.
    pub height: Option<u32>,
    /// Video frame rate as `(num, den)` frames per second.
    pub frame_rate: Option<(u32, u32)>,
}

impl DescriptorRecord {
    /// The frame rate in frames per second.
    pub fn fps(&self) -> Option<f64> {
        self.frame_rate
            .filter(|&(_, d)| d > 0)
            .map(|(n, d)| f64::from(n) / f64::from(d))
    }
}

/// One fragment of a fragmented MP4 (`media_fragments`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FragmentRecord {
    /// First byte (of its `moof`).
    pub offset_bytes: u64,
    /// Bytes (the `moof` and the `mdat`s right after it).
    pub length_bytes: u64,
    /// Decode time of its first sample, ticks of the timescale.
    pub decode_start: u64,
    /// Duration, ticks.
    pub duration: u64,
    /// Whether its first sample is a sync sample.
    pub sync: bool,
    /// Bytes from its first byte to the end of its first sample (the `moof` and the key
    /// frame of a fragment that starts with one: an HLS I-frame segment); `None` when not
    /// known (no `trun` data offset, or indexed before it was kept).
    pub key_length_bytes: Option<u64>,
}

/// The fragment index of a fragmented MP4 (`media_fragments_meta` + `media_fragments`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FragmentsRecord {
    /// The reference (video) track.
    pub track_id: u32,
    /// Its timescale, ticks per second (> 0).
    pub timescale: u32,
    /// The init segment: `(offset, length)`, offset 0.
    pub init: (u64, u64),
    /// The first `sidx`, `(offset, length)`, if any.
    pub index_range: Option<(u64, u64)>,
    /// Whether every fragment was listed.
    pub complete: bool,
    /// The fragments in file order (offsets increasing, none overlapping).
    pub fragments: Vec<FragmentRecord>,
}

/// One key frame of an MPEG-TS rendition (`media_key_frames`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KeyFrameRecord {
    /// Its time from the start of the title, seconds.
    pub time_s: f64,
    /// The first byte of the packet that starts its PES.
    pub offset_bytes: u64,
    /// Bytes to the end of the last video packet of that PES.
    pub length_bytes: u64,
}

/// The key frames of an MPEG-TS rendition (`media_ts_init` + `media_key_frames`): an HLS
/// I-frame playlist's segments.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KeyFramesRecord {
    /// The PAT + PMT (`(offset, length)`, the playlist's `EXT-X-MAP`), when found.
    pub init: Option<(u64, u64)>,
    /// The key frames in file order (times increasing, extents not overlapping).
    pub frames: Vec<KeyFrameRecord>,
}

/// The descriptor, fragment index and key frames of one object, as written at ingest.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MediaDetail {
    /// Its descriptor (`None`: nothing known, e.g. an unknown container).
    pub descriptor: Option<DescriptorRecord>,
    /// Its fragment index (fragmented MP4 only).
    pub fragments: Option<FragmentsRecord>,
    /// Its key frames (MPEG-TS only; `None` for an object ingested before they were kept).
    pub key_frames: Option<KeyFramesRecord>,
}

/// One rendition of a title (`title_renditions`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TitleRendition {
    /// The object holding it (`TITLE@N`, see [`rendition_name`]).
    pub object: String,
    /// Its average bitrate, bits per second (the object's).
    pub bitrate_bps: u64,
    /// Video width in pixels.
    pub width: Option<u32>,
    /// Video height in pixels.
    pub height: Option<u32>,
    /// RFC 6381 codecs.
    pub codecs: String,
}

/// A title with renditions (`titles` + `title_renditions`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TitleRecord {
    /// The title's name (never an object's name at the same time).
    pub name: String,
    /// When it was made, seconds since the Unix epoch.
    pub created_unix: i64,
    /// Its renditions in the order given at ingest.
    pub renditions: Vec<TitleRendition>,
}

/// The object name of rendition `index` of title `title`: `TITLE@INDEX` (`movie@0`,
/// `movie@1`, ...). `@` is a valid object-name byte (no `/`: it would split the
/// `/v1/objects/{name}/...` routes and the member paths), a plain URL path character
/// (RFC 3986 `pchar`), and a valid S3 key character, so the same rule names one file per
/// rung at an origin.
pub fn rendition_name(title: &str, index: usize) -> String {
    format!("{title}@{index}")
}
