//! What the control half counts: sessions, broadcasts, keepalives, tokens and refusals.
//! Plain atomics (one relaxed add each); the exposition (`isnode-serve`'s metrics) reads
//! them into its snapshot.

use std::sync::atomic::{AtomicU64, Ordering};

use isnode_proto::Limit;

/// The control half's counters.
#[derive(Debug, Default)]
pub struct ControlCounters {
    /// Sessions admitted since start.
    pub sessions_started: AtomicU64,
    /// Broadcasts started since start.
    pub broadcasts_started: AtomicU64,
    /// Session requests answered with a broadcast (`--broadcast auto`).
    pub broadcast_redirects: AtomicU64,
    /// Keepalive datagrams that kept a session alive.
    pub keepalives_udp: AtomicU64,
    /// Datagrams on the keepalive port that kept nothing alive.
    pub keepalives_refused: AtomicU64,
    /// Token datagrams sent to new sessions' destinations.
    pub tokens_sent: AtomicU64,
    /// Sessions that ended because their destination never echoed the token.
    pub sessions_unvalidated: AtomicU64,
    /// Refusals per limit, in [`Limit::ALL`]'s order.
    pub refused: [AtomicU64; Limit::ALL.len()],
    /// Loss reports taken from keepalives.
    pub loss_reports: AtomicU64,
    /// Sessions admitted with a start-up burst.
    pub start_bursts: AtomicU64,
}

impl ControlCounters {
    /// Counts a refusal by `limit`.
    pub fn refused(&self, limit: Limit) {
        self.refused[limit.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Refusals per limit so far.
    pub fn refusals(&self) -> [u64; Limit::ALL.len()] {
        std::array::from_fn(|i| self.refused[i].load(Ordering::Relaxed))
    }
}
