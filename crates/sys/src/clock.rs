//! The server's clock: nanoseconds since it started, read by the threads that act on time
//! (the data plane, keepalives, the API) and passed as `now` into the sans-IO core.

use std::time::Instant;

/// Nanoseconds since a fixed start (monotonic). Cheap to copy.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    epoch: Instant,
}

impl Clock {
    /// A clock that starts now.
    pub fn start() -> Clock {
        Clock {
            epoch: Instant::now(),
        }
    }

    /// The instant the clock started at.
    pub fn epoch(&self) -> Instant {
        self.epoch
    }

    /// Nanoseconds since the start (saturating at `u64::MAX`, after 584 years).
    #[inline]
    pub fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}
