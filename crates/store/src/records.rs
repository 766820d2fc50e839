//! The records the catalog stores and hands out: objects, their blocks' checksums and
//! their time index, with the choice made when a committed name is taken. Plain data, a
//! leaf of the crate: [`crate::catalog`] reads and writes them, [`crate::rows`] validates
//! them, and every reader and writer of objects passes them around.

use serde::Serialize;

/// The time index of an object as the catalog keeps it (`media_meta` + `media_index`).
#[derive(Clone, Debug, PartialEq)]
pub struct MediaIndexRecord {
    /// The container found at ingest: `mpeg-ts`, `mp4` or `unknown`.
    pub container: String,
    /// MP4 only: whether `moov` comes before the first `mdat`.
    pub moov_at_front: Option<bool>,
    /// Random-access points `(time_s, offset_bytes)`, in increasing order of both.
    pub points: Vec<(f64, u64)>,
    /// The descriptor and fragment index found at ingest, written with the index (the
    /// rendition tables); not read back with it: [`crate::catalog::Catalog::media_detail`] reads
    /// them (`None` here after a read).
    pub detail: Option<crate::media_records::MediaDetail>,
}

/// What committing an object does when a complete object of the same name exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnNameTaken {
    /// Fail with [`StoreError::NameExists`](crate::StoreError::NameExists) (the ingest did not ask to replace).
    Fail,
    /// Replace it (`--replace`), whichever object it is by then.
    Replace,
}

/// State of an object in the catalog.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ObjectState {
    /// Ingest in progress (or crashed: removed at the next open).
    Writing,
    /// Being filled from the origin ([`crate::fill`]): the codewords before its durable
    /// fill front are valid and may be served; kept across a crash and resumed.
    Filling,
    /// Fully written, durable and visible.
    Complete,
}

/// One object as recorded in the catalog.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ObjectRecord {
    /// Transport object identifier (FLUTE TOI), unique forever in this volume.
    pub toi: u32,
    /// Object name (FLUTE Content-Location).
    pub name: String,
    /// Catalog state.
    pub state: ObjectState,
    /// Length of the original bytes.
    pub size_bytes: u64,
    /// Nominal bitrate, bits per second.
    pub bitrate_bps: u64,
    /// Playing time in seconds (size * 8 / bitrate).
    pub duration_s: f64,
    /// MIME type of the content.
    pub content_type: String,
    /// Encoding symbol length E.
    pub symbol_len: u32,
    /// Maximum source symbols per codeword (B).
    pub source_symbols: u32,
    /// Repair symbols per codeword (m).
    pub repair_symbols: u32,
    /// Number of codewords.
    pub codewords: u32,
    /// CRC32C of the whole original content.
    pub content_crc32c: u32,
    /// Creation time, seconds since the Unix epoch.
    pub created_unix: i64,
    /// TOI of the object this one replaces on commit (`--replace`).
    #[serde(skip)]
    pub replaces: Option<u32>,
}

/// The checksum record of one block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockRecord {
    /// Member index.
    pub member: u32,
    /// Block index in the segment file.
    pub block: u64,
    /// Packets stored in the block.
    pub packets: u32,
    /// CRC32C of the whole block as written.
    pub crc32c: u32,
}
