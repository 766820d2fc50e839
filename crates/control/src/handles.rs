//! [`Control`]: the handles the session and broadcast policy decide and act with. Built
//! once by the server's start; the API holds it beside its own handles, the policy
//! functions take it by reference.

use std::sync::Arc;

use isnode_plane::Plane;
use isnode_pool::cache::Cache;
use isnode_pool::objects::Objects;
use isnode_serve_config::{ConfigCell, EngineKind, ServeConfig};
use isnode_sys::clock::Clock;

use crate::broadcast::Broadcasts;
use crate::counters::ControlCounters;
use crate::registry::Registry;
use crate::uploads::Uploads;

/// The control half's handles.
pub struct Control {
    /// The configuration in force (swapped whole by a reload).
    pub config: ConfigCell,
    /// The server's clock.
    pub clock: Clock,
    /// The catalog and its open objects.
    pub objects: Arc<Objects>,
    /// The pool (its size bounds admission with the pool-backed engines).
    pub cache: Cache,
    /// The session table.
    pub sessions: Arc<Registry>,
    /// The running broadcasts.
    pub broadcasts: Arc<Broadcasts>,
    /// The data plane: new streams go to it, control requests wake it.
    pub plane: Arc<Plane>,
    /// The engine in use.
    pub engine: EngineKind,
    /// Most sessions the `sendfile` engine may hold a socket for (`None`: another engine).
    pub sendfile_sessions: Option<u64>,
    /// The quota room held by the uploads under way.
    pub uploads: Arc<Uploads>,
    /// The descriptors a new object may take (what the start's budget keeps for the API's
    /// connections and the sessions stays free).
    pub descriptors: isnode_sys::fds::DescriptorRoom,
    /// What this crate counts.
    pub counters: Arc<ControlCounters>,
    /// Told when a session is registered or a broadcast starts: the reaper, asleep while
    /// there is nothing to forget, looks again.
    pub reap: Arc<tokio::sync::Notify>,
}

impl Control {
    /// The configuration in force (cheap: an atomic load; hold it only briefly).
    pub fn config(&self) -> arc_swap::Guard<Arc<ServeConfig>> {
        self.config.load()
    }

    /// Nanoseconds on the server's clock.
    pub fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }
}
