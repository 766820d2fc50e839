//! What a data-plane thread holds: the handles it uses, and nothing of the rest of the
//! server (no session table, no API, no runtime).

use std::sync::Arc;

use isnode_pool::cache::Cache;
use isnode_pool::demand::PositionBoard;
use isnode_pool::members::Members;
use isnode_serve_config::{ConfigCell, EngineKind, ReadIo};
use isnode_serve_core::slack::SlackBoard;
use isnode_store::VolumeParams;
use isnode_sys::clock::Clock;
use isnode_sys::event::Event;
use isnode_sys::net::Multicast;
use isnode_sys::stop::Stop;

use crate::counters::PlaneCounters;

/// Told a unicast session's first packet, with how long after its creation it left
/// (nanoseconds, validation included): the start-up latency the metrics report.
pub type FirstPacket = Box<dyn Fn(u64) + Send + Sync>;

/// The data plane's handles, shared by its threads.
pub struct PlaneDeps {
    /// The block pool every session sends from.
    pub cache: Cache,
    /// The volume's parameters (buffers are sized from them).
    pub params: VolumeParams,
    /// The members' health: reads report to it, sends consult it.
    pub members: Arc<Members>,
    /// Where each thread's sessions are (eviction decisions).
    pub positions: Arc<PositionBoard>,
    /// Each thread's playback slack (pacing of background work).
    pub slack: Arc<SlackBoard>,
    /// Set when a thread takes its first stream: the viewer-pace writer samples at once.
    pub pace: Arc<Event>,
    /// What the data plane counts.
    pub counters: Arc<PlaneCounters>,
    /// The server's stop signal (a panicking thread fails the server through it).
    pub stop: Arc<Stop>,
    /// The server's clock.
    pub clock: Clock,
    /// The configuration in force (session timeout, degraded mode).
    pub config: ConfigCell,
    /// The send engine (after falling back where io_uring is unavailable).
    pub engine: EngineKind,
    /// The block reads (after falling back where io_uring is unavailable).
    pub read_io: ReadIo,
    /// The multicast options of every send socket.
    pub multicast: Multicast,
    /// The start-up latency's observer.
    pub first_packet: FirstPacket,
}
