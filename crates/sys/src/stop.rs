//! The server's stop signal: one flag every loop looks at, one [`Event`] the sleeping
//! threads wait on, the first failure that stopped it, and what else must be woken (each
//! part of the server registers its own wake-up: the data plane's queues, the signal loop).

use std::ops::ControlFlow;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::event::Event;

/// A wake-up run when the server stops.
pub type OnStop = Box<dyn Fn() + Send + Sync>;

/// The stop signal (one per server, shared by `Arc`).
pub struct Stop {
    stopped: AtomicBool,
    event: Event,
    failure: OnceLock<String>,
    on_stop: Mutex<Vec<OnStop>>,
}

impl std::fmt::Debug for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stop")
            .field("stopped", &self.is_stopped())
            .field("failure", &self.failure.get())
            .finish()
    }
}

impl Stop {
    /// A signal not given yet.
    pub fn new() -> std::io::Result<Stop> {
        Ok(Stop {
            stopped: AtomicBool::new(false),
            event: Event::new()?,
            failure: OnceLock::new(),
            on_stop: Mutex::new(Vec::new()),
        })
    }

    /// Adds a wake-up to run at [`Stop::stop`] (at once if the server has stopped already).
    pub fn on_stop(&self, wake: OnStop) {
        if self.is_stopped() {
            wake();
        }
        self.on_stop
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(wake);
    }

    /// Stops: sets the flag, the event, and runs every registered wake-up.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        self.event.set();
        for wake in self
            .on_stop
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            wake();
        }
    }

    /// Records why the server failed (the first reason is kept) and stops it.
    pub fn fail(&self, why: String) {
        let _ = self.failure.set(why);
        self.stop();
    }

    /// Why the server failed, if it did.
    pub fn failure(&self) -> Option<&str> {
        self.failure.get().map(String::as_str)
    }

    /// Whether the server is stopping.
    #[inline]
    pub fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    /// Sleeps `d` unless the server stops meanwhile (`Break` then, at once).
    pub fn sleep_unless_stopped(&self, d: Duration) -> ControlFlow<()> {
        if self.is_stopped() || self.event.wait(d) {
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }
}

impl AsFd for Stop {
    /// The event set at the stop (to wait on beside other descriptors).
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.event.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;
    use std::sync::Arc;

    #[test]
    fn stop_wakes_sleepers_and_runs_every_wake_up_once() {
        let stop = Arc::new(Stop::new().unwrap());
        let woken = Arc::new(AtomicU32::new(0));
        let w = woken.clone();
        stop.on_stop(Box::new(move || {
            w.fetch_add(1, Ordering::Relaxed);
        }));
        assert!(stop.sleep_unless_stopped(Duration::ZERO).is_continue());
        stop.fail("a reason".into());
        stop.fail("another".into());
        assert!(stop.is_stopped());
        assert_eq!(stop.failure(), Some("a reason"));
        assert!(stop
            .sleep_unless_stopped(Duration::from_secs(30))
            .is_break());
        assert_eq!(woken.load(Ordering::Relaxed), 2, "once per stop call");
    }
}
