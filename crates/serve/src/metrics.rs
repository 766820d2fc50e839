//! Server counters, their Prometheus exposition ([`expose`], with `prometheus-client`),
//! the per-title counters ([`titles`]) and the egress samples of the status page
//! ([`egress`]).
//!
//! The data plane's hot counters are plain atomics (one relaxed add each); the families
//! that carry labels chosen at run time (auth failures, upload failures, the start-up
//! latency histogram) are `prometheus-client` metrics, atomics as well.

pub(crate) mod egress;
pub(crate) mod expose;
pub(crate) mod titles;

use std::sync::atomic::AtomicU64;

use serde::Serialize;

use isnode_serve_config::ENGINES;

pub use expose::{AuthFailure, UploadFailure};
pub use isnode_fill::FillSnapshot;
pub use isnode_proto::Limit;

/// The control API's live counters (content, repair, authentication, uploads, titles,
/// egress); the control half's are `isnode_control::counters`, the data plane's
/// `isnode_plane::counters`.
#[derive(Debug)]
pub(crate) struct Metrics {
    pub forbidden: AtomicU64,
    pub http_content_requests: AtomicU64,
    pub http_range_requests: AtomicU64,
    pub http_bytes: AtomicU64,
    pub http_readers_active: AtomicU64,
    pub http_readers_refused: AtomicU64,
    pub http_readers_refused_memory: AtomicU64,
    pub repair_requests: AtomicU64,
    pub repair_packets: AtomicU64,
    /// The labelled families (auth, upload, start-up latency).
    pub families: expose::Families,
    /// Sessions and bytes per title (a bounded label set).
    pub titles: titles::Titles,
    /// Egress over the last minutes, sampled by the API's sampler task.
    pub egress: egress::EgressRing,
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
    /// Refusals per limit: `max_bitrate_bps`, `cache_size_bytes`, `max_sessions_per_client`.
    pub sessions_refused: [u64; Limit::ALL.len()],
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
    /// Content and repair requests refused for memory (`503`: the memory cgroup's
    /// headroom would be spent).
    pub http_readers_refused_memory: u64,
    /// Bytes the HTTP mirror holds (codewords gathered once, sent with `sendfile`).
    pub http_mirror_bytes: u64,
    /// Content frames sent from the HTTP mirror.
    pub http_mirror_frames: u64,
    /// Codewords gathered into the HTTP mirror.
    pub http_mirror_fills: u64,
    /// Content frames copied without the mirror (their codeword being filled by another
    /// response, or no room).
    pub http_mirror_bypasses: u64,
    /// Unicast repair requests answered.
    pub repair_requests: u64,
    /// Stored packets sent in repair answers.
    pub repair_packets: u64,
    /// Blocks evicted from the pool.
    pub cache_evictions: u64,
    /// Per member: whether it is marked failed (after `member_fail_errors` read errors
    /// in a row; not read any more, rebuilt from the others).
    pub member_failed: Vec<bool>,
    /// Per member: whether its reads are slow now (longer than `hedge_after_ms`).
    pub member_slow: Vec<bool>,
    /// Bursts whose codeword was rebuilt from the other members instead of waiting for a
    /// slow member's read (hedged reads).
    pub reads_hedged: u64,
    /// Bursts sent more than 100 ms after their due time.
    pub bursts_late: u64,
    /// The background scrub (`scrub_rate_bps`).
    pub scrub: crate::scrub::ScrubSnapshot,
    /// Fills from the origin (counted apart from the bytes served).
    pub fill: FillSnapshot,
    /// Failed members read again (their catalog state ok again, or a probe succeeded).
    pub members_revived: u64,
    /// The live streams' playback slack (the data plane's pacing signal).
    pub playback: isnode_serve_core::slack::PlaybackSlack,
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
    pub(crate) fn new() -> Metrics {
        Metrics {
            forbidden: AtomicU64::new(0),
            http_content_requests: AtomicU64::new(0),
            http_range_requests: AtomicU64::new(0),
            http_bytes: AtomicU64::new(0),
            http_readers_active: AtomicU64::new(0),
            http_readers_refused: AtomicU64::new(0),
            http_readers_refused_memory: AtomicU64::new(0),
            repair_requests: AtomicU64::new(0),
            repair_packets: AtomicU64::new(0),
            families: expose::Families::new(),
            titles: titles::Titles::new(titles::LABELLED_TITLES),
            egress: egress::EgressRing::new(egress::SAMPLES),
        }
    }

    /// Counts a failed authentication (`isnode_auth_failures_total{reason}`).
    pub(crate) fn auth_failure(&self, reason: AuthFailure) {
        self.families.auth_failure(reason);
    }

    /// Failed authentications of `reason` so far.
    #[cfg(test)]
    pub(crate) fn auth_failures(&self, reason: AuthFailure) -> u64 {
        self.families.auth_failures(reason)
    }

    /// Counts body bytes stored by an upload (`isnode_upload_bytes_total`).
    pub(crate) fn upload_bytes(&self, bytes: u64) {
        self.families.upload_bytes.inc_by(bytes);
    }

    /// Counts an upload that stored nothing (`isnode_upload_failures_total{reason}`).
    pub(crate) fn upload_failure(&self, reason: UploadFailure) {
        self.families.upload_failure(reason);
    }

    /// Records a unicast session's first packet, `latency_ns` after its creation: the
    /// start-up latency, validation included.
    pub(crate) fn session_first_packet(&self, latency_ns: u64) {
        let s = latency_ns as f64 / 1e9;
        self.families.session_start.observe(s);
    }
}
