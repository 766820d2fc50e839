//! `isnode serve`: the house's front door and its API. It starts the house (`server.rs`:
//! the configuration cell, the stop signal, the pool and the data plane of `isnode-plane`,
//! the control half of `isnode-control`, the fills of `isnode-fill`, the background threads,
//! each with the handles it uses) and runs the control API:
//!
//! - `api`: the control API's routes (HTTP/JSON, `docs/protocol.md`) on `isnode-http`'s
//!   connection loop: each handler extracts, calls a service of `isnode-control` (or the
//!   pool, the fills) and renders; among them the original bytes over HTTP (`Range`), HLS
//!   and the unicast repair route, read from the shared pool on tokio's blocking pool. The
//!   handlers hold `ApiState` (`api/state.rs`).
//! - `scrub`, `viewer_pace`: background work paced by the viewers.
//! - `metrics`: the API's counters and the exposition of every crate's counters.
//! - `lifecycle`: signals, SIGHUP reload, drain.
//!
//! Embedding: [`start`] runs a server in-process and returns a [`ServerHandle`];
//! [`run`] does the same and blocks until SIGINT or SIGTERM.

#![deny(missing_docs)]

mod api;
mod fd_budget;
mod lifecycle;
pub mod metrics;
pub mod scrub;
mod server;
mod viewer_pace;
mod wake;

#[doc(hidden)]
pub use api::fuzzing;
pub use fd_budget::DEFAULT_MAX_SENDFILE_SESSIONS;
pub use isnode_control::broadcast;
pub use isnode_control::cluster::{ClusterStatus, NodeStatus};
/// One edge of a cluster's node list (`nodes` in the configuration).
pub use isnode_edge::placement::Node as ClusterNode;
pub use isnode_http::limits::{MAX_BODY_BYTES, MAX_HEADER_BYTES, MAX_URI_BYTES};
pub use isnode_serve_config::{
    BroadcastMode, ConfigError, Degraded, EncryptDefault, EngineKind, ReadIo, Secret, ServeConfig,
    ValidateDestination, DEFAULT_API_HEADER_TIMEOUT_MS, DEFAULT_API_IDLE_TIMEOUT_MS,
    DEFAULT_API_MAX_CONNECTIONS, DEFAULT_BROADCAST_GROUPS, DEFAULT_BROADCAST_MAX_GROUPS,
    DEFAULT_BROADCAST_MAX_WAIT_S, DEFAULT_BROADCAST_PORT, DEFAULT_BROADCAST_SCHEME,
    DEFAULT_CACHE_SIZE_BYTES, DEFAULT_EGRESS_CAPACITY_BPS, DEFAULT_MAX_CONTENT_READERS,
    DEFAULT_MAX_SESSIONS_PER_CLIENT, DEFAULT_SHUTDOWN_GRACE_S, EGRESS_BUDGET_PERCENT, ENGINES,
};
pub use isnode_serve_config::{
    DEFAULT_API_WRITE_TIMEOUT_MS, DEFAULT_MAX_UNVALIDATED_PER_CLIENT,
    DEFAULT_MAX_UNVALIDATED_SESSIONS,
};
pub use isnode_serve_core::slack::PlaybackSlack;
pub use lifecycle::{run, Drained};
pub use metrics::{Limit, MetricsSnapshot};
pub use server::{cluster_tls_check, start, ServeError, ServerHandle};

/// The small volume of the unit tests (`VolumeParams::SMALL`).
#[cfg(test)]
pub(crate) fn test_params() -> isnode_store::VolumeParams {
    isnode_store::VolumeParams::SMALL
}

const _: () = assert!(isnode_proto::FEC_ENCODING_ID_RS28 == isnode_wire::FEC_ENCODING_ID_RS28);
