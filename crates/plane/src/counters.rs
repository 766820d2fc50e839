//! What the data plane counts (read by the metrics' exposition through
//! `MetricsSnapshot`): packets and bytes per engine, send errors, repair
//! packets, late bursts, rebuilt and skipped symbols, sessions ended, held and expired.

use std::sync::atomic::{AtomicU64, Ordering};

use isnode_serve_config::{EngineKind, ENGINES};

/// The data plane's counters (atomics shared by its threads).
#[derive(Debug, Default)]
pub struct PlaneCounters {
    /// Packets sent per engine ([`EngineKind::index`]).
    pub packets: [AtomicU64; ENGINES],
    /// UDP payload bytes sent per engine.
    pub bytes: [AtomicU64; ENGINES],
    /// Packets sent on broadcast channels (also in `packets`).
    pub broadcast_packets: AtomicU64,
    /// Bytes sent on broadcast channels (also in `bytes`).
    pub broadcast_bytes: AtomicU64,
    /// Sends the kernel refused.
    pub send_errors: AtomicU64,
    /// `uring-zc` sends completed.
    pub zc_sends: AtomicU64,
    /// `uring-zc` sends the kernel had to copy.
    pub zc_copied: AtomicU64,
    /// Stored repair packets sent.
    pub repair_sent: AtomicU64,
    /// Stored repair packets skipped by adaptive repair.
    pub repair_skipped: AtomicU64,
    /// Bursts sent later than `LATE_BURST_NS` after their due time.
    pub bursts_late: AtomicU64,
    /// Symbols rebuilt from the other members.
    pub symbols_rebuilt: AtomicU64,
    /// Packets not sent (unreadable and not rebuilt).
    pub packets_skipped: AtomicU64,
    /// Streams a data-plane thread dropped (ended, expired, done).
    pub sessions_ended: AtomicU64,
    /// Sessions that ended because no keepalive came in time.
    pub sessions_expired: AtomicU64,
    /// Times a session caught up with a fill front and was held there.
    pub sessions_held: AtomicU64,
}

impl PlaneCounters {
    /// Counts `packets` and `bytes` sent by `engine`.
    #[inline]
    pub fn sent(&self, engine: EngineKind, packets: u64, bytes: u64) {
        self.packets[engine.index()].fetch_add(packets, Ordering::Relaxed);
        self.bytes[engine.index()].fetch_add(bytes, Ordering::Relaxed);
    }
}
