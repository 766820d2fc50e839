//! The isnode volume store.
//!
//! A volume is a directory with a transactional catalog (`catalog.sqlite`)
//! and M member directories, one per disk. Every object is stored as the
//! finished ALC/LCT packets of its Reed-Solomon codewords, spread so that no
//! member holds more symbols of a codeword than the code can rebuild
//! ([`layout`]). Ingest ([`ingest`]) writes them once; reading ([`read`])
//! verifies every packet's CRC32C and decodes around missing or damaged
//! ones; [`check`] verifies and repairs. A title filled from an origin is written
//! incrementally with a durable fill front ([`fill`]), and the volume keeps the
//! bookkeeping of a cache of that origin ([`cache`]).
//!
//! On-disk format: `docs/format.md`.

pub mod cache;
pub mod catalog;
pub mod check;
pub mod codeword;
mod crash;
pub mod crc_shift;
pub mod fill;
mod fill_rows;
#[cfg(test)]
mod fill_tests;
pub mod ingest;
pub mod io;
pub mod key_frames;
pub use isnode_layout::layout;
pub(crate) mod lock;
mod media_records;
pub mod members;
pub mod pace;
pub use isnode_layout::params;
mod prefab;
pub mod prefetch;
#[cfg(test)]
mod prefetch_tests;
pub mod probe;
pub mod protection;
pub mod read;
pub mod rebuild;
mod records;
#[cfg(test)]
mod recovery_tests;
pub mod renditions;
pub mod rows;
pub mod scrub;
mod segment;
pub mod spool;
pub mod validate;
pub mod verify;
pub mod viewer_pace;
pub mod volume;
mod write_behind;

pub use cache::EvictionCandidate;
pub use check::{check, CheckOptions, CheckReport};
pub use codeword::{BlockError, BlockSource, Readiness, SymbolCheck, Want};
pub use fill::{verify_fill_block, Fill, FillSpec, FillingObject};
pub use fill_rows::OriginRecord;
pub use ingest::{ingest, ingest_protected, ingest_then_describe, IngestOptions, Protected};
pub use isnode_layout::VolumeParams;
pub use isnode_layout::{Layout, SymbolLocation};
pub use members::MemberState;
pub use protection::{ProtectedSegment, ProtectionRecord};
pub use read::{DiskBlocks, ObjectReader, ReadOrder, ReadStats};
pub use rebuild::{rebuild_member, RebuildReport};
pub use records::{MediaIndexRecord, ObjectRecord, ObjectState};
pub use renditions::{rendition_name, MediaDetail, TitleRecord, TitleRendition};
pub use rows::{BadObject, CatalogEntry};
pub use scrub::{scrub, ScrubReport};
pub use volume::Volume;

/// Everything that can go wrong in the store, with enough context to act on.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Parameters that break a rule, with the reason.
    #[error("invalid parameters: {0}")]
    BadParams(String),
    /// An object name that cannot be used.
    #[error("invalid object name {name:?}: {why}")]
    BadName {
        /// The name given.
        name: String,
        /// Why it is refused.
        why: &'static str,
    },
    /// An object of that name exists and replacing was not asked for.
    #[error("an object named {0:?} already exists (use --replace to replace it)")]
    NameExists(String),
    /// Another fill (in this or another process) holds the filling object of that name.
    #[error("object {0:?} is being filled by another fill")]
    FillBusy(String),
    /// No complete object of that name.
    #[error("no object named {0:?}")]
    NotFound(String),
    /// The object's catalog rows break an invariant: it is listed, never served.
    #[error("object {name:?} is bad (its catalog row is impossible: {problem}); `isnode volume check` reports it")]
    BadObject {
        /// Object name.
        name: String,
        /// The invariant its rows break.
        problem: String,
    },
    /// No volume at the path.
    #[error("no volume at {0} (create one with `isnode volume create`)")]
    NoVolume(String),
    /// A volume exists already at the path.
    #[error("a volume already exists at {0}")]
    VolumeExists(String),
    /// The input ended before its announced length.
    #[error("input is truncated: got {got} of {expected} bytes")]
    Truncated {
        /// Bytes received.
        got: u64,
        /// Bytes expected.
        expected: u64,
    },
    /// A spool would pass its bound (nothing was stored).
    #[error("{}", spool_full_message(*bytes, bound, *when))]
    SpoolFull {
        /// Bytes announced or brought.
        bytes: u64,
        /// The bound and what sets it.
        bound: spool::SpoolBound,
        /// Whether this was known before reading.
        when: spool::SpoolStage,
    },
    /// The object would not fit the volume (nothing was stored).
    #[error("the object needs {needed_bytes} bytes, more than {limit} ({available_bytes} bytes); nothing was stored")]
    NoRoom {
        /// Bytes the object (and its spool) would take.
        needed_bytes: u64,
        /// Bytes there are.
        available_bytes: u64,
        /// What limits them.
        limit: spool::RoomLimit,
    },
    /// An object is already a rendition of another title (an object belongs to one title:
    /// a delete of either would take it from the other).
    #[error("{object:?} is a rendition of title {title:?}: an object belongs to one title")]
    InOtherTitle {
        /// The object.
        object: String,
        /// The title it belongs to.
        title: String,
    },
    /// The server's open files limit leaves no descriptors for another object (each keeps
    /// its segment files open): the reason, with the figures.
    #[error("{0}; nothing was stored")]
    NoDescriptors(String),
    /// Probing the input failed (container or bitrate unknown, or unreadable).
    #[error("{context}")]
    Media {
        /// What was being done.
        context: String,
        /// Why it failed.
        #[source]
        source: isnode_media::MediaError,
    },
    /// A codeword lost more symbols than the code can rebuild.
    #[error(
        "object {name:?} codeword {sbn}: only {have} of the {need} symbols needed are readable"
    )]
    Unrecoverable {
        /// Object name.
        name: String,
        /// Source block number.
        sbn: u32,
        /// Good symbols found.
        have: u32,
        /// Symbols needed (k).
        need: u32,
    },
    /// Stored data contradicts the catalog in a way the code cannot fix.
    #[error("corrupt volume: {0}")]
    Corrupt(String),
    /// A file-system operation failed.
    #[error("{context}")]
    Io {
        /// What was being done, on which path.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A catalog (SQLite) operation failed.
    #[error("catalog, {context}")]
    Catalog {
        /// What was being done.
        context: String,
        /// The SQLite error.
        #[source]
        source: rusqlite::Error,
    },
    /// The FEC codec refused an operation.
    #[error("FEC: {0}")]
    Fec(#[from] isnode_fec::FecError),
    /// Packet framing failed.
    #[error("packet framing: {0}")]
    Wire(#[from] isnode_wire::WireError),
}

impl From<isnode_layout::ParamsError> for StoreError {
    fn from(e: isnode_layout::ParamsError) -> StoreError {
        StoreError::BadParams(e.0)
    }
}

fn spool_full_message(bytes: u64, bound: &spool::SpoolBound, when: spool::SpoolStage) -> String {
    match when {
        spool::SpoolStage::Announced => format!(
            "the announced size {bytes} is more than the spool may hold ({}): {}",
            bound.bytes,
            bound.reason.explain()
        ),
        spool::SpoolStage::Midway => format!(
            "the input brought more than {} bytes: {} (nothing was stored)",
            bound.bytes,
            bound.reason.explain()
        ),
    }
}

impl StoreError {
    /// Whether the error means the volume has no room for the object: its free space or
    /// quota (checked before, or a spool bound), a file system full while writing, or no
    /// descriptors left to keep it open.
    pub fn is_no_room(&self) -> bool {
        match self {
            StoreError::NoRoom { .. } | StoreError::NoDescriptors(_) => true,
            StoreError::SpoolFull { bound, .. } => matches!(
                bound.reason,
                spool::SpoolLimit::FreeSpace | spool::SpoolLimit::Quota
            ),
            StoreError::Io { source, .. } => matches!(
                source.raw_os_error(),
                Some(libc::ENOSPC) | Some(libc::EDQUOT)
            ),
            _ => false,
        }
    }

    /// Wraps an I/O error with what was being done.
    pub fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> StoreError {
        let context = context.into();
        move |source| StoreError::Io { context, source }
    }
}
