//! Events the server's threads sleep on, so that a thread with nothing to do blocks until
//! something happens (the server stops, work arrives) instead of waking in short steps to
//! look. Every wait still has a deadline: a long one ([`IDLE_WAIT`]) where nothing is due.
//!
//! On this kind of machine a sleep and its wake-up cost about 60 µs of CPU each, so an idle
//! thread that looked every 50 ms spent 1.2 ms of CPU a second doing nothing.
//!
//! An `Event` (`isnode_sys::event`) is an `eventfd`, so a thread can wait on it together
//! with a socket.

use isnode_sys::event::Event;

pub(crate) use isnode_sys::event::IDLE_WAIT;

/// What wakes the server's sleeping threads (one set per server).
#[derive(Debug)]
pub(crate) struct Wakes {
    /// Told at the server's stop (`isnode_sys::stop::Stop`): the signal loop
    /// (`lifecycle.rs`) sees a failed data plane at once.
    pub stop_notify: std::sync::Arc<tokio::sync::Notify>,
    /// Set when a data-plane thread takes its first stream: the viewer-pace writer, asleep
    /// while there are none, samples at once (`viewer_pace.rs`).
    pub pace: std::sync::Arc<Event>,
    /// Set by a reload of the configuration: the background scrub, asleep while it is off,
    /// looks at its rate again (`scrub.rs`).
    pub reloaded: std::sync::Arc<Event>,
    /// Told when a session is registered or a broadcast starts: the reaper (`api.rs`; the control half holds it too),
    /// asleep while there is nothing to forget, looks again.
    pub reap: std::sync::Arc<tokio::sync::Notify>,
    /// Told by a reload of the configuration: the cluster's prober, asleep without peers,
    /// looks at the node list again (`isnode_control::cluster::probe`).
    pub cluster: std::sync::Arc<tokio::sync::Notify>,
}

impl Wakes {
    /// A new set, nothing set or told.
    pub(crate) fn new() -> std::io::Result<Wakes> {
        Ok(Wakes {
            stop_notify: std::sync::Arc::new(tokio::sync::Notify::new()),
            pace: std::sync::Arc::new(Event::new()?),
            reloaded: std::sync::Arc::new(Event::new()?),
            reap: std::sync::Arc::new(tokio::sync::Notify::new()),
            cluster: std::sync::Arc::new(tokio::sync::Notify::new()),
        })
    }
}
