//! The configuration in force, swapped whole by a reload (SIGHUP): every part of the server
//! holds a [`ConfigCell`] and reads the settings it needs when it needs them.

use std::sync::Arc;

use crate::config::ServeConfig;

/// The configuration in force, shared (cheap to clone: one `Arc`).
#[derive(Clone, Debug)]
pub struct ConfigCell {
    inner: Arc<arc_swap::ArcSwap<ServeConfig>>,
}

impl ConfigCell {
    /// A cell holding `config`.
    pub fn new(config: ServeConfig) -> ConfigCell {
        ConfigCell {
            inner: Arc::new(arc_swap::ArcSwap::from_pointee(config)),
        }
    }

    /// The configuration in force (cheap: an atomic load; hold it only briefly).
    pub fn load(&self) -> arc_swap::Guard<Arc<ServeConfig>> {
        self.inner.load()
    }

    /// Puts `config` in force.
    pub fn store(&self, config: ServeConfig) {
        self.inner.store(Arc::new(config));
    }
}
