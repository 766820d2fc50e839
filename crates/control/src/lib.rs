//! The server's control half, with no HTTP in it: decisions that keep state. Each service
//! returns a typed error; the API (`isnode-serve`'s `api/`) parses requests, calls these
//! and maps the errors to HTTP statuses.
//!
//! - [`handles`]: [`Control`], the handles the session and broadcast policy use (the
//!   configuration cell, the clock, the catalog, the session table, the broadcasts, the
//!   data plane's submit queue, this crate's counters).
//! - [`registry`]: the session table; [`admit`]: the limits and demands the core's pure
//!   admission decides over; [`sessions`]: a session's pacer, admission, registration,
//!   hand-over to the data plane and start at its token's echo.
//! - [`broadcast`]: broadcasts and their channels, their start, durability and the
//!   automatic (hybrid) policy.
//! - [`uploads`], [`upload_ingest`]: the quota room of the uploads under way, and an
//!   upload's check, spool and ingest over any `Read`.
//! - [`keepalive`]: the keepalive datagrams' thread.
//! - [`cluster`]: this edge's peers (the sans-IO placement of `isnode-edge`) and the task
//!   that probes them.
//! - [`counters`]: what this crate counts.

pub mod admit;
pub mod broadcast;
pub mod cluster;
pub mod counters;
pub mod handles;
pub mod keepalive;
pub mod registry;
pub mod sessions;
pub mod upload_ingest;
mod upload_protect;
pub mod uploads;

pub use handles::Control;

/// The small volume of the unit tests (`VolumeParams::SMALL`).
#[cfg(test)]
pub fn test_params() -> isnode_store::VolumeParams {
    isnode_store::VolumeParams::SMALL
}
