//! Last uses of titles for the cache's LRU order: one durable catalog write per title at
//! most every [`TOUCH_EVERY`] (the store asks for no more).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Least time between two recorded uses of one title.
pub(crate) const TOUCH_EVERY: Duration = Duration::from_secs(5);

/// When each title's use was last recorded.
#[derive(Debug, Default)]
pub(crate) struct Touches(Mutex<HashMap<String, Instant>>);

impl Touches {
    /// Whether a use of `name` is due to be recorded now (marked recorded if so).
    pub(crate) fn due(&self, name: &str) -> bool {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if m.get(name)
            .is_some_and(|t| now.duration_since(*t) < TOUCH_EVERY)
        {
            return false;
        }
        if m.len() > 100_000 {
            m.clear();
        }
        m.insert(name.to_string(), now);
        true
    }
}
