//! The Prometheus exposition of the counters, with `prometheus-client`: every family is
//! described once (name, help, type) and registered once in the registry of a scrape;
//! label sets are typed structs.
//!
//! The counters kept as atomics by the data plane are read into a [`MetricsSnapshot`]
//! and encoded by a [`Collector`]; the labelled families chosen at run time live in
//! [`Families`] and are registered as they are.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::titles::TitleCount;
use super::{Limit, MetricsSnapshot};
use isnode_serve_config::EngineKind;

/// The `Content-Type` of `GET /metrics` (Prometheus text format 0.0.4).
pub(crate) const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Why a request's credentials were refused (`isnode_auth_failures_total{reason}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AuthFailure {
    /// No token where one is needed (`401`).
    Missing,
    /// A token that is not in the token file (`401`).
    Unknown,
    /// A known token without the route's role (`403`).
    WrongRole,
    /// A known token past its expiry (`401`).
    Expired,
    /// Refused because the address failed too often (`429`).
    Throttled,
}

impl AuthFailure {
    /// Every reason, in label order.
    pub const ALL: [AuthFailure; 5] = [
        AuthFailure::Missing,
        AuthFailure::Unknown,
        AuthFailure::WrongRole,
        AuthFailure::Expired,
        AuthFailure::Throttled,
    ];

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            AuthFailure::Missing => "missing",
            AuthFailure::Unknown => "unknown",
            AuthFailure::WrongRole => "wrong_role",
            AuthFailure::Expired => "expired",
            AuthFailure::Throttled => "throttled",
        }
    }
}

/// Why an upload stored nothing (`isnode_upload_failures_total{reason}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UploadFailure {
    /// The client went away or the connection was reset mid-body.
    Disconnected,
    /// The body stalled or trickled below the minimum rate.
    TooSlow,
    /// The volume's free space or its quota would be exceeded (`507`).
    NoSpace,
    /// The name exists and `If-None-Match: *` was sent (`412`), or it is in use.
    Conflict,
    /// The body is not a valid object (probing, index or a bad name).
    Invalid,
    /// A local error while storing it (I/O, catalog).
    Internal,
}

impl UploadFailure {
    /// Every reason, in label order.
    pub const ALL: [UploadFailure; 6] = [
        UploadFailure::Disconnected,
        UploadFailure::TooSlow,
        UploadFailure::NoSpace,
        UploadFailure::Conflict,
        UploadFailure::Invalid,
        UploadFailure::Internal,
    ];

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            UploadFailure::Disconnected => "disconnected",
            UploadFailure::TooSlow => "too_slow",
            UploadFailure::NoSpace => "no_space",
            UploadFailure::Conflict => "conflict",
            UploadFailure::Invalid => "invalid",
            UploadFailure::Internal => "internal",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClassLabels {
    class: &'static str,
}

/// The classes of `isnode_fill_errors_total`, in the order of `FillSnapshot::fill_errors`.
const FILL_ERROR_CLASSES: [&str; 5] = ["not_found", "changed", "unreachable", "refused", "garbled"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EngineLabels {
    engine: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitLabels {
    limit: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MemberLabels {
    member: u32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TitleLabels {
    title: String,
}

/// The labelled families whose values are counted where they happen.
#[derive(Debug)]
pub(crate) struct Families {
    auth_failures: Family<ReasonLabels, Counter>,
    pub upload_bytes: Counter,
    upload_failures: Family<ReasonLabels, Counter>,
    /// Seconds from a unicast session's creation to its first packet.
    pub session_start: Histogram,
}

impl Families {
    pub(crate) fn new() -> Families {
        let f = Families {
            auth_failures: Family::default(),
            upload_bytes: Counter::default(),
            upload_failures: Family::default(),
            // 1 ms to 8 s.
            session_start: Histogram::new(exponential_buckets(0.001, 2.0, 14)),
        };
        // Every reason is exported from the start (at 0), so that rates and dashboards
        // see the series before the first failure.
        for r in AuthFailure::ALL {
            let _ = f
                .auth_failures
                .get_or_create(&ReasonLabels { reason: r.name() });
        }
        for r in UploadFailure::ALL {
            let _ = f
                .upload_failures
                .get_or_create(&ReasonLabels { reason: r.name() });
        }
        f
    }

    pub(crate) fn auth_failure(&self, reason: AuthFailure) {
        self.auth_failures
            .get_or_create(&ReasonLabels {
                reason: reason.name(),
            })
            .inc();
    }

    #[cfg(test)]
    pub(crate) fn auth_failures(&self, reason: AuthFailure) -> u64 {
        self.auth_failures
            .get_or_create(&ReasonLabels {
                reason: reason.name(),
            })
            .get()
    }

    pub(crate) fn upload_failure(&self, reason: UploadFailure) {
        self.upload_failures
            .get_or_create(&ReasonLabels {
                reason: reason.name(),
            })
            .inc();
    }

    fn register(&self, reg: &mut Registry) {
        reg.register(
            "isnode_auth_failures",
            "Requests refused for their credentials, by reason",
            self.auth_failures.clone(),
        );
        reg.register(
            "isnode_upload_bytes",
            "Body bytes stored by uploads",
            self.upload_bytes.clone(),
        );
        reg.register(
            "isnode_upload_failures",
            "Uploads that stored nothing, by reason",
            self.upload_failures.clone(),
        );
        reg.register(
            "isnode_session_start_seconds",
            "Time from a unicast session's creation to its first packet (validation included)",
            self.session_start.clone(),
        );
    }
}

/// What the scrape reads besides the snapshot: per-title counts.
pub(crate) struct Scrape {
    pub snapshot: MetricsSnapshot,
    pub titles: Vec<TitleCount>,
}

/// Renders the counters in the Prometheus text exposition format (0.0.4).
pub(crate) fn render(scrape: Scrape, families: &Families) -> String {
    let mut reg = Registry::default();
    families.register(&mut reg);
    reg.register_collector(Box::new(SnapshotCollector(scrape)));
    let mut out = String::new();
    // Writing to a String cannot fail; a failing encoder would only truncate.
    if prometheus_client::encoding::prometheus_text::encode(&mut out, &reg).is_err() {
        tracing::error!("encoding the metrics failed");
    }
    out
}

/// A family without labels: its name (without `_total`: the encoder adds it to
/// counters), help, type and value.
struct Scalar {
    name: &'static str,
    help: &'static str,
    kind: MetricType,
    get: fn(&MetricsSnapshot) -> u64,
}

const fn counter(
    name: &'static str,
    help: &'static str,
    get: fn(&MetricsSnapshot) -> u64,
) -> Scalar {
    Scalar {
        name,
        help,
        kind: MetricType::Counter,
        get,
    }
}

const fn gauge(name: &'static str, help: &'static str, get: fn(&MetricsSnapshot) -> u64) -> Scalar {
    Scalar {
        name,
        help,
        kind: MetricType::Gauge,
        get,
    }
}

/// Every family without labels, once.
const SCALARS: &[Scalar] = &[
    gauge(
        "isnode_sessions_active",
        "Sessions currently streaming",
        |s| s.sessions_active,
    ),
    counter("isnode_sessions_started", "Sessions admitted", |s| {
        s.sessions_started
    }),
    gauge("isnode_broadcasts_active", "Broadcasts running", |s| {
        s.broadcasts_active
    }),
    counter("isnode_broadcasts_started", "Broadcasts started", |s| {
        s.broadcasts_started
    }),
    counter(
        "isnode_broadcast_redirects",
        "Session requests answered with a broadcast (--broadcast auto)",
        |s| s.broadcast_redirects,
    ),
    counter(
        "isnode_broadcast_packets_sent",
        "Packets sent on broadcast channels (part of isnode_packets_sent_total)",
        |s| s.broadcast_packets_sent,
    ),
    counter(
        "isnode_broadcast_bytes_sent",
        "UDP payload bytes sent on broadcast channels (part of isnode_bytes_sent_total)",
        |s| s.broadcast_bytes_sent,
    ),
    counter(
        "isnode_sessions_expired",
        "Sessions ended for lack of keepalive",
        |s| s.sessions_expired,
    ),
    counter(
        "isnode_keepalives_udp",
        "Keepalive datagrams that kept a session alive",
        |s| s.keepalives_udp,
    ),
    counter(
        "isnode_keepalives_refused",
        "Datagrams on the keepalive port that kept nothing alive",
        |s| s.keepalives_refused,
    ),
    counter(
        "isnode_tokens_sent",
        "Token datagrams sent to new sessions' destinations (return routability)",
        |s| s.tokens_sent,
    ),
    counter(
        "isnode_sessions_unvalidated",
        "Sessions ended because their destination never echoed the token",
        |s| s.sessions_unvalidated,
    ),
    counter(
        "isnode_forbidden",
        "Requests refused 403: not the session's creator, or a wrong secret or token",
        |s| s.forbidden,
    ),
    counter(
        "isnode_cache_hits",
        "Block lookups served from the pool",
        |s| s.cache_hits,
    ),
    counter(
        "isnode_cache_misses",
        "Block lookups that read from disk",
        |s| s.cache_misses,
    ),
    counter(
        "isnode_cache_evictions",
        "Blocks evicted from the pool",
        |s| s.cache_evictions,
    ),
    gauge(
        "isnode_cache_bytes",
        "Bytes of the pool holding blocks",
        |s| s.cache_bytes,
    ),
    gauge("isnode_cache_pool_bytes", "Size of the block pool", |s| {
        s.cache_pool_bytes
    }),
    counter(
        "isnode_cache_read_bytes",
        "Bytes read from the members into the pool",
        |s| s.cache_read_bytes,
    ),
    counter(
        "isnode_symbols_rebuilt",
        "Symbols rebuilt from the other members and sent",
        |s| s.symbols_rebuilt,
    ),
    counter(
        "isnode_packets_skipped",
        "Packets neither readable nor rebuilt",
        |s| s.packets_skipped,
    ),
    counter(
        "isnode_reads_hedged",
        "Bursts rebuilt from the other members instead of waiting for a slow member",
        |s| s.reads_hedged,
    ),
    counter(
        "isnode_members_revived",
        "Failed members read again: their catalog state ok again (rebuilt), or a probe succeeded",
        |s| s.members_revived,
    ),
    counter(
        "isnode_bursts_late",
        "Bursts sent more than 100 ms after their due time",
        |s| s.bursts_late,
    ),
    counter(
        "isnode_scrub_passes",
        "Background scrub passes finished over the whole volume",
        |s| s.scrub.passes,
    ),
    counter(
        "isnode_scrub_read_bytes",
        "Bytes the background scrub read from the members",
        |s| s.scrub.bytes_read,
    ),
    gauge(
        "isnode_scrub_pass_done_bytes",
        "Bytes of the background scrub's pass in progress read so far",
        |s| s.scrub.pass_done_bytes,
    ),
    gauge(
        "isnode_scrub_pass_total_bytes",
        "Bytes the background scrub's pass in progress reads in all",
        |s| s.scrub.pass_total_bytes,
    ),
    gauge(
        "isnode_scrub_rate_bps",
        "The background scrub's rate now, paced by the viewers (bits per second)",
        |s| s.scrub.rate_bps,
    ),
    counter(
        "isnode_scrub_bad_blocks",
        "Blocks the background scrub found failing their checksum or unreadable",
        |s| s.scrub.bad_blocks,
    ),
    counter(
        "isnode_scrub_bad_packets",
        "Packets the background scrub found missing, corrupt, or differing from digest or parity",
        |s| s.scrub.bad_packets,
    ),
    gauge(
        "isnode_scrub_damaged_objects",
        "Objects with damage in the background scrub's last finished pass",
        |s| s.scrub.damaged_objects,
    ),
    counter(
        "isnode_fill_bytes",
        "Bytes read from the origin by fills (apart from the bytes served)",
        |s| s.fill.fill_bytes,
    ),
    counter(
        "isnode_origin_requests",
        "Requests made to the origin (HEAD and ranged GET)",
        |s| s.fill.origin_requests,
    ),
    gauge(
        "isnode_fills_active",
        "Fills from the origin running",
        |s| s.fill.fills_active,
    ),
    counter(
        "isnode_fills_started",
        "Fills from the origin started (one per title however many requests share it)",
        |s| s.fill.fills_started,
    ),
    counter(
        "isnode_fills_done",
        "Fills from the origin finished (complete objects)",
        |s| s.fill.fills_done,
    ),
    counter(
        "isnode_fill_holds",
        "Times a session caught up with its title's fill front and was held there",
        |s| s.fill.sessions_held,
    ),
    counter(
        "isnode_titles_evicted",
        "Titles evicted to keep the volume within cache_max_bytes",
        |s| s.fill.titles_evicted,
    ),
    counter("isnode_send_errors", "Failed send calls", |s| s.send_errors),
    counter(
        "isnode_zerocopy_sends",
        "io_uring zero-copy sends completed",
        |s| s.zc_sends,
    ),
    counter(
        "isnode_zerocopy_copied",
        "io_uring zero-copy sends the kernel reported as copied",
        |s| s.zc_copied,
    ),
    counter(
        "isnode_repair_packets_sent",
        "Stored repair packets sent",
        |s| s.repair_packets_sent,
    ),
    counter(
        "isnode_repair_packets_skipped",
        "Stored repair packets not sent: not needed by the client's reported loss",
        |s| s.repair_packets_skipped,
    ),
    counter(
        "isnode_loss_reports",
        "Loss reports taken from keepalives (datagram version 2 or HTTP body)",
        |s| s.loss_reports,
    ),
    counter(
        "isnode_start_bursts",
        "Sessions admitted with a start-up burst",
        |s| s.start_bursts,
    ),
    gauge(
        "isnode_catalog_lookups_active",
        "Catalog lookups of the control API in progress",
        |s| s.catalog_lookups_active,
    ),
    counter(
        "isnode_http_content_requests",
        "Content GET/HEAD requests answered 200 or 206",
        |s| s.http_content_requests,
    ),
    counter(
        "isnode_http_range_requests",
        "Content range requests (206)",
        |s| s.http_range_requests,
    ),
    counter(
        "isnode_http_bytes",
        "Body bytes of content and repair answers",
        |s| s.http_bytes,
    ),
    gauge(
        "isnode_http_readers_active",
        "Content bodies and repair answers being produced",
        |s| s.http_readers_active,
    ),
    counter(
        "isnode_http_readers_refused",
        "Content and repair requests refused by --max-content-readers",
        |s| s.http_readers_refused,
    ),
    counter(
        "isnode_http_readers_refused_memory",
        "Content and repair requests refused because the memory cgroup's headroom would be spent",
        |s| s.http_readers_refused_memory,
    ),
    gauge(
        "isnode_http_mirror_bytes",
        "Bytes the HTTP mirror holds (codewords gathered once, sent with sendfile)",
        |s| s.http_mirror_bytes,
    ),
    counter(
        "isnode_http_mirror_frames",
        "Content frames sent from the HTTP mirror",
        |s| s.http_mirror_frames,
    ),
    counter(
        "isnode_http_mirror_fills",
        "Codewords gathered into the HTTP mirror",
        |s| s.http_mirror_fills,
    ),
    counter(
        "isnode_http_mirror_bypasses",
        "Content frames copied without the mirror (codeword being filled, or no room)",
        |s| s.http_mirror_bypasses,
    ),
    counter(
        "isnode_repair_requests",
        "Unicast repair requests answered",
        |s| s.repair_requests,
    ),
    counter(
        "isnode_repair_packets",
        "Stored packets sent in repair answers",
        |s| s.repair_packets,
    ),
];

/// Encodes a [`Scrape`] on each scrape.
#[derive(Debug)]
struct SnapshotCollector(Scrape);

impl std::fmt::Debug for Scrape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scrape").finish_non_exhaustive()
    }
}

impl Collector for SnapshotCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = &self.0.snapshot;
        for m in SCALARS {
            let v = (m.get)(s);
            let e = enc.encode_descriptor(m.name, m.help, None, m.kind)?;
            match m.kind {
                MetricType::Gauge => ConstGauge::new(v as i64).encode(e)?,
                _ => ConstCounter::new(v).encode(e)?,
            }
        }
        let refused = Limit::ALL.iter().zip(&s.sessions_refused);
        labelled_counters(
            &mut enc,
            (
                "isnode_sessions_refused",
                "Sessions refused by admission control, by limit",
            ),
            refused.map(|(l, v)| (LimitLabels { limit: l.name() }, *v)),
        )?;
        let engines = || {
            EngineKind::ALL
                .iter()
                .map(|e| EngineLabels { engine: e.name() })
        };
        labelled_counters(
            &mut enc,
            ("isnode_packets_sent", "UDP datagrams sent"),
            engines().zip(s.packets_sent.iter().copied()),
        )?;
        labelled_counters(
            &mut enc,
            ("isnode_bytes_sent", "UDP payload bytes sent"),
            engines().zip(s.bytes_sent.iter().copied()),
        )?;
        labelled_counters(
            &mut enc,
            (
                "isnode_fill_errors",
                "Failed origin requests of fills, by class",
            ),
            FILL_ERROR_CLASSES
                .iter()
                .zip(s.fill.fill_errors.iter().copied())
                .map(|(c, v)| (ClassLabels { class: c }, v)),
        )?;
        self.encode_members(&mut enc)?;
        self.encode_playback(&mut enc)?;
        self.encode_titles(&mut enc)
    }
}

impl SnapshotCollector {
    /// The live streams' playback slack (its smallest only while there are streams).
    fn encode_playback(&self, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let p = &self.0.snapshot.playback;
        let gauges = [
            (
                "isnode_playback_streams",
                "Live streams whose playback slack is measured (streaming, not paused)",
                i64::from(p.streams),
            ),
            (
                "isnode_playback_late_streams",
                "Live streams whose next step is more than 100 ms past its playback deadline",
                i64::from(p.late_streams),
            ),
        ];
        for (name, help, v) in gauges {
            ConstGauge::new(v).encode(enc.encode_descriptor(
                name,
                help,
                None,
                MetricType::Gauge,
            )?)?;
        }
        if let Some(ms) = p.min_slack_ms {
            let e = enc.encode_descriptor(
                "isnode_playback_slack_min_ms",
                "The smallest playback slack among the live streams, milliseconds (0 or less: late)",
                None,
                MetricType::Gauge,
            )?;
            ConstGauge::new(ms).encode(e)?;
        }
        Ok(())
    }

    fn encode_members(&self, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = &self.0.snapshot;
        let member = |m: usize| MemberLabels {
            member: u32::try_from(m).unwrap_or(u32::MAX),
        };
        labelled_counters(
            enc,
            ("isnode_member_errors", "Failed block reads per member"),
            s.member_errors
                .iter()
                .enumerate()
                .map(|(m, v)| (member(m), *v)),
        )?;
        let mut fam = enc.encode_descriptor(
            "isnode_member_healthy",
            "1 while the member serves, 0 once marked failed after repeated read errors",
            None,
            MetricType::Gauge,
        )?;
        for (m, failed) in s.member_failed.iter().enumerate() {
            let labels = member(m);
            ConstGauge::new(i64::from(!*failed)).encode(fam.encode_family(&labels)?)?;
        }
        let mut fam = enc.encode_descriptor(
            "isnode_member_slow",
            "1 while the member's reads are slower than hedge_after_ms (its reads are hedged)",
            None,
            MetricType::Gauge,
        )?;
        for (m, slow) in s.member_slow.iter().enumerate() {
            let labels = member(m);
            ConstGauge::new(i64::from(*slow)).encode(fam.encode_family(&labels)?)?;
        }
        Ok(())
    }

    fn encode_titles(&self, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let titles = &self.0.titles;
        let label = |t: &TitleCount| TitleLabels {
            title: t.label.clone(),
        };
        labelled_counters(
            enc,
            (
                "isnode_title_sessions",
                "Unicast sessions admitted per title (the first titles served, then other)",
            ),
            titles.iter().map(|t| (label(t), t.sessions)),
        )?;
        labelled_counters(
            enc,
            (
                "isnode_title_bytes_sent",
                "UDP payload bytes of unicast sessions per title (the first titles served, then other)",
            ),
            titles.iter().map(|t| (label(t), t.bytes)),
        )
    }
}

/// Encodes one counter family from its samples.
fn labelled_counters<L: EncodeLabelSet>(
    enc: &mut DescriptorEncoder,
    (name, help): (&'static str, &'static str),
    samples: impl Iterator<Item = (L, u64)>,
) -> Result<(), std::fmt::Error> {
    let mut fam = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, v) in samples {
        let e = fam.encode_family(&labels)?;
        ConstCounter::new(v).encode(e)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::metrics::titles::Titles;

    fn scrape() -> String {
        let snapshot = MetricsSnapshot {
            sessions_started: 7,
            member_errors: vec![0, 2],
            member_failed: vec![false, true],
            member_slow: vec![true, false],
            ..MetricsSnapshot::default()
        };
        let titles = Titles::new(1);
        titles.started("a \"quoted\" title");
        titles.started("b");
        let families = Families::new();
        families.auth_failure(AuthFailure::WrongRole);
        families.upload_failure(UploadFailure::NoSpace);
        families.upload_bytes.inc_by(100);
        families.session_start.observe(0.003);
        let scrape = Scrape {
            snapshot,
            titles: titles.counts(std::iter::empty()),
        };
        render(scrape, &families)
    }

    #[test]
    fn every_family_once_with_help_and_type_and_every_sample_in_one() {
        let text = scrape();
        let mut typed = BTreeSet::new();
        let mut helped = BTreeSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let name = rest.split(' ').next().unwrap_or_default();
                assert!(typed.insert(name.to_string()), "two TYPE lines for {name}");
            } else if let Some(rest) = line.strip_prefix("# HELP ") {
                let name = rest.split(' ').next().unwrap_or_default();
                assert!(helped.insert(name.to_string()), "two HELP lines for {name}");
            }
        }
        assert_eq!(typed, helped);
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split(['{', ' ']).next().unwrap_or_default();
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s).filter(|f| typed.contains(*f)))
                .unwrap_or(name);
            assert!(typed.contains(family), "sample without a family: {line}");
        }
    }

    #[test]
    fn values_and_labels() {
        let text = scrape();
        for want in [
            "isnode_sessions_started_total 7",
            "isnode_member_errors_total{member=\"1\"} 2",
            "isnode_member_healthy{member=\"0\"} 1",
            "isnode_member_healthy{member=\"1\"} 0",
            "isnode_member_slow{member=\"0\"} 1",
            "isnode_member_slow{member=\"1\"} 0",
            "isnode_auth_failures_total{reason=\"wrong_role\"} 1",
            "isnode_auth_failures_total{reason=\"missing\"} 0",
            "isnode_upload_failures_total{reason=\"no_space\"} 1",
            "isnode_upload_bytes_total 100",
            "isnode_session_start_seconds_bucket{le=\"0.004\"} 1",
            "isnode_session_start_seconds_count 1",
            "isnode_title_sessions_total{title=\"a \\\"quoted\\\" title\"} 1",
            "isnode_title_sessions_total{title=\"other\"} 1",
            "isnode_sessions_refused_total{limit=\"max_bitrate_bps\"} 0",
            "isnode_bytes_sent_total{engine=\"gso\"} 0",
            "# TYPE isnode_sessions_active gauge",
            "# TYPE isnode_sessions_started_total counter",
        ] {
            assert!(text.contains(want), "missing {want:?} in:\n{text}");
        }
    }
}
