//! What the data plane counts (read by the metrics' exposition through
//! [`PlaneCounters::snapshot`]): packets and bytes per engine, send errors, repair
//! packets, late bursts, rebuilt and skipped symbols, sessions ended, held and expired.

use std::sync::atomic::{AtomicU64, Ordering};

use isnode_serve_config::{EngineKind, ENGINES};
use serde::Serialize;

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

/// A point-in-time copy of [`PlaneCounters`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PlaneSnapshot {
    /// Packets sent per engine.
    pub packets: [u64; ENGINES],
    /// Bytes sent per engine.
    pub bytes: [u64; ENGINES],
    /// Packets sent on broadcast channels.
    pub broadcast_packets: u64,
    /// Bytes sent on broadcast channels.
    pub broadcast_bytes: u64,
    /// Sends the kernel refused.
    pub send_errors: u64,
    /// `uring-zc` sends completed.
    pub zc_sends: u64,
    /// `uring-zc` sends copied.
    pub zc_copied: u64,
    /// Stored repair packets sent.
    pub repair_sent: u64,
    /// Stored repair packets skipped.
    pub repair_skipped: u64,
    /// Late bursts.
    pub bursts_late: u64,
    /// Symbols rebuilt.
    pub symbols_rebuilt: u64,
    /// Packets skipped.
    pub packets_skipped: u64,
    /// Sessions that expired.
    pub sessions_expired: u64,
    /// Sessions held at a fill front.
    pub sessions_held: u64,
}

impl PlaneCounters {
    /// Counts `packets` and `bytes` sent by `engine`.
    pub fn sent(&self, engine: EngineKind, packets: u64, bytes: u64) {
        self.packets[engine.index()].fetch_add(packets, Ordering::Relaxed);
        self.bytes[engine.index()].fetch_add(bytes, Ordering::Relaxed);
    }

    /// The counters now.
    pub fn snapshot(&self) -> PlaneSnapshot {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        PlaneSnapshot {
            packets: std::array::from_fn(|i| load(&self.packets[i])),
            bytes: std::array::from_fn(|i| load(&self.bytes[i])),
            broadcast_packets: load(&self.broadcast_packets),
            broadcast_bytes: load(&self.broadcast_bytes),
            send_errors: load(&self.send_errors),
            zc_sends: load(&self.zc_sends),
            zc_copied: load(&self.zc_copied),
            repair_sent: load(&self.repair_sent),
            repair_skipped: load(&self.repair_skipped),
            bursts_late: load(&self.bursts_late),
            symbols_rebuilt: load(&self.symbols_rebuilt),
            packets_skipped: load(&self.packets_skipped),
            sessions_expired: load(&self.sessions_expired),
            sessions_held: load(&self.sessions_held),
        }
    }
}
