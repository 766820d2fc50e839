//! What the block cache's core and its shell share: a block's identity, why a block could
//! not be provided, and where the sessions are ([`Demand`], for eviction).

/// Identity of a cached block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockKey {
    /// Object (TOI).
    pub toi: u32,
    /// Member index.
    pub member: u32,
    /// Block index in the member's segment file.
    pub block: u64,
}

/// Why a block could not be provided.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum FetchError {
    /// The block could not be read or failed its checksum (just now); the string says why.
    #[error("block unreadable: {0}")]
    Failed(String),
    /// The block failed recently and is not retried yet.
    #[error("block unreadable (remembered): {0}")]
    Unavailable(String),
    /// A read of it is in flight: come back later.
    #[error("block is being read")]
    Busy,
    /// Every slot is pinned or loading.
    #[error("block cache full: every buffer is in use")]
    Full,
}

/// Where active sessions are, for eviction.
pub trait Demand {
    /// How far (in nanoseconds of stream time) the nearest active session is from needing
    /// block `block` of `member` of object `toi` (0: in use now), or `None` if no active
    /// session will need it again.
    fn next_use(&self, toi: u32, member: u32, block: u64) -> Option<u64>;
}

/// No demand information: plain LRU.
pub struct NoDemand;

impl Demand for NoDemand {
    fn next_use(&self, _: u32, _: u32, _: u64) -> Option<u64> {
        Some(0)
    }
}
