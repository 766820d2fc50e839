//! What a failed fill or lookup means for the request that waited on it, as a kind the
//! API maps to its HTTP status (this crate knows no HTTP).

/// The kind of a fill's or lookup's failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FillStatus {
    /// Not at the origin, or not a valid name (`404`).
    NotFound,
    /// Changed at the origin, or a damaged object (`409`).
    Conflict,
    /// The origin failed or answered garbage (`502`).
    BadGateway,
    /// The volume has no room (`507`).
    InsufficientStorage,
    /// Not in time (`503`).
    Unavailable,
    /// Anything else (`500`).
    Internal,
}
