//! Server counters and their Prometheus text rendering.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use serde::Serialize;

use crate::config::ENGINES;
use crate::EngineKind;

pub use isnode_proto::Limit;

/// Live counters, shared by the data plane and the control API.
#[derive(Debug)]
pub(crate) struct Metrics {
    pub sessions_started: AtomicU64,
    pub broadcasts_started: AtomicU64,
    pub broadcast_redirects: AtomicU64,
    pub broadcast_packets: AtomicU64,
    pub broadcast_bytes: AtomicU64,
    pub sessions_ended: AtomicU64,
    pub sessions_expired: AtomicU64,
    pub keepalives_udp: AtomicU64,
    pub keepalives_refused: AtomicU64,
    pub tokens_sent: AtomicU64,
    pub sessions_unvalidated: AtomicU64,
    pub forbidden: AtomicU64,
    pub auth_failures: [AtomicU64; AUTH_FAILURE_REASONS.len()],
    pub refused: [AtomicU64; 3],
    pub packets: [AtomicU64; ENGINES],
    pub bytes: [AtomicU64; ENGINES],
    pub send_errors: AtomicU64,
    pub member_errors: Vec<AtomicU64>,
    pub member_logged: Vec<AtomicBool>,
    pub symbols_rebuilt: AtomicU64,
    pub packets_skipped: AtomicU64,
    pub zc_sends: AtomicU64,
    pub zc_copied: AtomicU64,
    pub http_content_requests: AtomicU64,
    pub http_range_requests: AtomicU64,
    pub http_bytes: AtomicU64,
    pub http_readers_active: AtomicU64,
    pub http_readers_refused: AtomicU64,
    pub repair_requests: AtomicU64,
    pub repair_packets: AtomicU64,
    pub repair_sent: AtomicU64,
    pub repair_skipped: AtomicU64,
    pub loss_reports: AtomicU64,
    pub start_bursts: AtomicU64,
}

/// A point-in-time copy of the server's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MetricsSnapshot {
    /// Sessions currently streaming.
    pub sessions_active: u64,
    /// Sessions admitted since start.
    pub sessions_started: u64,
    /// Broadcasts running.
    pub broadcasts_active: u64,
    /// Broadcasts started since start.
    pub broadcasts_started: u64,
    /// Session requests answered with a broadcast (`--broadcast auto`).
    pub broadcast_redirects: u64,
    /// Packets sent on broadcast channels (also counted in `packets_sent`).
    pub broadcast_packets_sent: u64,
    /// UDP payload bytes sent on broadcast channels (also counted in `bytes_sent`).
    pub broadcast_bytes_sent: u64,
    /// Sessions that ended because no keepalive came in time.
    pub sessions_expired: u64,
    /// Keepalive datagrams that kept a session alive.
    pub keepalives_udp: u64,
    /// Datagrams on the keepalive port that kept nothing alive (malformed, unknown or
    /// ended session, or not from the session's destination IP).
    pub keepalives_refused: u64,
    /// Token datagrams sent to new sessions' destinations (return routability).
    pub tokens_sent: u64,
    /// Sessions that ended because their destination never echoed the token.
    pub sessions_unvalidated: u64,
    /// Requests refused `403`: not the session's creator, or without its secret or token.
    pub forbidden: u64,
    /// Role-token refusals per reason, in [`AUTH_FAILURE_REASONS`]' order.
    pub auth_failures: [u64; AUTH_FAILURE_REASONS.len()],
    /// Refusals per limit: `max_bitrate_bps`, `cache_size_bytes`, `max_sessions_per_client`.
    pub sessions_refused: [u64; 3],
    /// Packets sent per engine, in [`EngineKind::ALL`]'s order: gso, uring-zc, sendmmsg,
    /// traditional, sendfile.
    pub packets_sent: [u64; ENGINES],
    /// UDP payload bytes sent per engine (same order).
    pub bytes_sent: [u64; ENGINES],
    /// Send calls that failed.
    pub send_errors: u64,
    /// Cache lookups served from memory.
    pub cache_hits: u64,
    /// Cache lookups that read a block.
    pub cache_misses: u64,
    /// Bytes of the pool holding blocks.
    pub cache_bytes: u64,
    /// Size of the pool.
    pub cache_pool_bytes: u64,
    /// Bytes read from disk into the pool.
    pub cache_read_bytes: u64,
    /// Failed block reads per member.
    pub member_errors: Vec<u64>,
    /// Symbols rebuilt from the other members and sent.
    pub symbols_rebuilt: u64,
    /// Packets not sent because they could neither be read nor rebuilt (or by `send-available`).
    pub packets_skipped: u64,
    /// io_uring zero-copy sends completed.
    pub zc_sends: u64,
    /// Of those, sends the kernel reported as copied (not zero-copy).
    pub zc_copied: u64,
    /// Stored repair packets sent (adaptive repair).
    pub repair_packets_sent: u64,
    /// Stored repair packets not sent because the client's reported loss did not need them.
    pub repair_packets_skipped: u64,
    /// Loss reports taken from keepalives.
    pub loss_reports: u64,
    /// Sessions admitted with a start-up burst.
    pub start_bursts: u64,
    /// Catalog lookups of the control API waiting for or reading the catalog now.
    pub catalog_lookups_active: u64,
    /// `GET`/`HEAD` requests of content answered `200` or `206`.
    pub http_content_requests: u64,
    /// Of those, range requests (`206`).
    pub http_range_requests: u64,
    /// Body bytes of content and repair answers.
    pub http_bytes: u64,
    /// Content bodies and repair answers being produced now.
    pub http_readers_active: u64,
    /// Content and repair requests refused by `--max-content-readers` (`503`).
    pub http_readers_refused: u64,
    /// Unicast repair requests answered.
    pub repair_requests: u64,
    /// Stored packets sent in repair answers.
    pub repair_packets: u64,
}

/// Reasons of role-token refusals (the `reason` label of `isnode_auth_failures_total`).
pub const AUTH_FAILURE_REASONS: [&str; 3] = ["missing", "unknown", "wrong_role"];

impl Metrics {
    /// Counts a role-token refusal of reason `i` (an index into [`AUTH_FAILURE_REASONS`]).
    pub(crate) fn count_auth_failure(&self, i: usize) {
        if let Some(c) = self.auth_failures.get(i) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl MetricsSnapshot {
    /// Packets sent by all engines.
    pub fn total_packets(&self) -> u64 {
        self.packets_sent.iter().sum()
    }

    /// Bytes sent by all engines.
    pub fn total_bytes(&self) -> u64 {
        self.bytes_sent.iter().sum()
    }
}

impl Metrics {
    pub(crate) fn new(members: u32) -> Metrics {
        Metrics {
            sessions_started: AtomicU64::new(0),
            broadcasts_started: AtomicU64::new(0),
            broadcast_redirects: AtomicU64::new(0),
            broadcast_packets: AtomicU64::new(0),
            broadcast_bytes: AtomicU64::new(0),
            sessions_ended: AtomicU64::new(0),
            sessions_expired: AtomicU64::new(0),
            keepalives_udp: AtomicU64::new(0),
            keepalives_refused: AtomicU64::new(0),
            tokens_sent: AtomicU64::new(0),
            sessions_unvalidated: AtomicU64::new(0),
            forbidden: AtomicU64::new(0),
            auth_failures: Default::default(),
            refused: Default::default(),
            packets: Default::default(),
            bytes: Default::default(),
            send_errors: AtomicU64::new(0),
            member_errors: (0..members).map(|_| AtomicU64::new(0)).collect(),
            member_logged: (0..members).map(|_| AtomicBool::new(false)).collect(),
            symbols_rebuilt: AtomicU64::new(0),
            packets_skipped: AtomicU64::new(0),
            zc_sends: AtomicU64::new(0),
            zc_copied: AtomicU64::new(0),
            http_content_requests: AtomicU64::new(0),
            http_range_requests: AtomicU64::new(0),
            http_bytes: AtomicU64::new(0),
            http_readers_active: AtomicU64::new(0),
            http_readers_refused: AtomicU64::new(0),
            repair_requests: AtomicU64::new(0),
            repair_packets: AtomicU64::new(0),
            repair_sent: AtomicU64::new(0),
            repair_skipped: AtomicU64::new(0),
            loss_reports: AtomicU64::new(0),
            start_bursts: AtomicU64::new(0),
        }
    }

    pub(crate) fn sent(&self, engine: EngineKind, packets: u64, bytes: u64) {
        self.packets[engine.index()].fetch_add(packets, Ordering::Relaxed);
        self.bytes[engine.index()].fetch_add(bytes, Ordering::Relaxed);
    }

    pub(crate) fn refused(&self, limit: Limit) {
        self.refused[limit.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a failed read on `member`; logs the first one of each member.
    pub(crate) fn member_error(&self, member: u32, why: &str) {
        if let Some(c) = self.member_errors.get(member as usize) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(l) = self.member_logged.get(member as usize) {
            if !l.swap(true, Ordering::Relaxed) {
                tracing::error!(
                    member,
                    "member failed while serving, streams continue from the other members: {why}"
                );
            }
        }
    }
}

/// Renders a snapshot in the Prometheus text exposition format.
pub(crate) fn render(s: &MetricsSnapshot) -> String {
    let mut o = String::new();
    let mut one = |name: &str, kind: &str, help: &str, v: u64| {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}");
    };
    one(
        "isnode_sessions_active",
        "gauge",
        "Sessions currently streaming.",
        s.sessions_active,
    );
    one(
        "isnode_sessions_started_total",
        "counter",
        "Sessions admitted.",
        s.sessions_started,
    );
    one(
        "isnode_broadcasts_active",
        "gauge",
        "Broadcasts running.",
        s.broadcasts_active,
    );
    one(
        "isnode_broadcasts_started_total",
        "counter",
        "Broadcasts started.",
        s.broadcasts_started,
    );
    one(
        "isnode_broadcast_redirects_total",
        "counter",
        "Session requests answered with a broadcast (--broadcast auto).",
        s.broadcast_redirects,
    );
    one(
        "isnode_broadcast_packets_sent_total",
        "counter",
        "Packets sent on broadcast channels (part of isnode_packets_sent_total).",
        s.broadcast_packets_sent,
    );
    one(
        "isnode_broadcast_bytes_sent_total",
        "counter",
        "UDP payload bytes sent on broadcast channels (part of isnode_bytes_sent_total).",
        s.broadcast_bytes_sent,
    );
    one(
        "isnode_sessions_expired_total",
        "counter",
        "Sessions ended for lack of keepalive.",
        s.sessions_expired,
    );
    one(
        "isnode_keepalives_udp_total",
        "counter",
        "Keepalive datagrams that kept a session alive.",
        s.keepalives_udp,
    );
    one(
        "isnode_keepalives_refused_total",
        "counter",
        "Datagrams on the keepalive port that kept nothing alive.",
        s.keepalives_refused,
    );
    one(
        "isnode_tokens_sent_total",
        "counter",
        "Token datagrams sent to new sessions' destinations (return routability).",
        s.tokens_sent,
    );
    one(
        "isnode_sessions_unvalidated_total",
        "counter",
        "Sessions ended because their destination never echoed the token.",
        s.sessions_unvalidated,
    );
    one(
        "isnode_forbidden_total",
        "counter",
        "Requests refused 403: not the session's creator, or a wrong secret or token.",
        s.forbidden,
    );
    one(
        "isnode_cache_hits_total",
        "counter",
        "Block lookups served from the pool.",
        s.cache_hits,
    );
    one(
        "isnode_cache_misses_total",
        "counter",
        "Block lookups that read from disk.",
        s.cache_misses,
    );
    one(
        "isnode_cache_bytes",
        "gauge",
        "Bytes of the pool holding blocks.",
        s.cache_bytes,
    );
    one(
        "isnode_cache_pool_bytes",
        "gauge",
        "Size of the block pool.",
        s.cache_pool_bytes,
    );
    one(
        "isnode_cache_read_bytes_total",
        "counter",
        "Bytes read from the members into the pool.",
        s.cache_read_bytes,
    );
    one(
        "isnode_symbols_rebuilt_total",
        "counter",
        "Symbols rebuilt from the other members and sent.",
        s.symbols_rebuilt,
    );
    one(
        "isnode_packets_skipped_total",
        "counter",
        "Packets neither readable nor rebuilt.",
        s.packets_skipped,
    );
    one(
        "isnode_send_errors_total",
        "counter",
        "Failed send calls.",
        s.send_errors,
    );
    one(
        "isnode_zerocopy_sends_total",
        "counter",
        "io_uring zero-copy sends completed.",
        s.zc_sends,
    );
    one(
        "isnode_zerocopy_copied_total",
        "counter",
        "io_uring zero-copy sends the kernel reported as copied.",
        s.zc_copied,
    );
    one(
        "isnode_repair_packets_sent_total",
        "counter",
        "Stored repair packets sent.",
        s.repair_packets_sent,
    );
    one(
        "isnode_repair_packets_skipped_total",
        "counter",
        "Stored repair packets not sent: not needed by the client's reported loss.",
        s.repair_packets_skipped,
    );
    one(
        "isnode_loss_reports_total",
        "counter",
        "Loss reports taken from keepalives (datagram version 2 or HTTP body).",
        s.loss_reports,
    );
    one(
        "isnode_start_bursts_total",
        "counter",
        "Sessions admitted with a start-up burst.",
        s.start_bursts,
    );
    one(
        "isnode_catalog_lookups_active",
        "gauge",
        "Catalog lookups of the control API in progress.",
        s.catalog_lookups_active,
    );
    for (name, kind, help, v) in [
        (
            "isnode_http_content_requests_total",
            "counter",
            "Content GET/HEAD requests answered 200 or 206.",
            s.http_content_requests,
        ),
        (
            "isnode_http_range_requests_total",
            "counter",
            "Content range requests (206).",
            s.http_range_requests,
        ),
        (
            "isnode_http_bytes_total",
            "counter",
            "Body bytes of content and repair answers.",
            s.http_bytes,
        ),
        (
            "isnode_http_readers_active",
            "gauge",
            "Content bodies and repair answers being produced.",
            s.http_readers_active,
        ),
        (
            "isnode_http_readers_refused_total",
            "counter",
            "Content and repair requests refused by --max-content-readers.",
            s.http_readers_refused,
        ),
        (
            "isnode_repair_requests_total",
            "counter",
            "Unicast repair requests answered.",
            s.repair_requests,
        ),
        (
            "isnode_repair_packets_total",
            "counter",
            "Stored packets sent in repair answers.",
            s.repair_packets,
        ),
    ] {
        one(name, kind, help, v);
    }
    let _ = writeln!(
        o,
        "# HELP isnode_sessions_refused_total Sessions refused by admission control.\n# TYPE isnode_sessions_refused_total counter"
    );
    for (l, v) in Limit::ALL.iter().zip(s.sessions_refused) {
        let _ = writeln!(
            o,
            "isnode_sessions_refused_total{{limit=\"{}\"}} {v}",
            l.name()
        );
    }
    let _ = writeln!(
        o,
        "# HELP isnode_auth_failures_total Requests refused for a missing, unknown or too weak role token.\n# TYPE isnode_auth_failures_total counter"
    );
    for (reason, v) in AUTH_FAILURE_REASONS.iter().zip(s.auth_failures) {
        let _ = writeln!(o, "isnode_auth_failures_total{{reason=\"{reason}\"}} {v}");
    }
    for (name, help, vals) in [
        (
            "isnode_packets_sent_total",
            "UDP datagrams sent.",
            &s.packets_sent,
        ),
        (
            "isnode_bytes_sent_total",
            "UDP payload bytes sent.",
            &s.bytes_sent,
        ),
    ] {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} counter");
        for (e, v) in EngineKind::ALL.iter().zip(vals) {
            let _ = writeln!(o, "{name}{{engine=\"{}\"}} {v}", e.name());
        }
    }
    let _ = writeln!(
        o,
        "# HELP isnode_member_errors_total Failed block reads per member.\n# TYPE isnode_member_errors_total counter"
    );
    for (m, v) in s.member_errors.iter().enumerate() {
        let _ = writeln!(o, "isnode_member_errors_total{{member=\"{m}\"}} {v}");
    }
    o
}
