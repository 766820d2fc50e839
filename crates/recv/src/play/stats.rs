//! What `isnode play` reports: [`PlayStats`], their human summary, and how they are put
//! together from the receive core, the impairer and the playout buffer.

use std::time::{Duration, Instant};

use crate::impair::ImpairStats;
use crate::playout::PlayoutStats;
use crate::queue::QueueStats;
use crate::receiver::{FdtCheck, Receiver, ReceiverStats};
use crate::repair::RepairStats;

use super::setup::SessionSetup;

/// A codeword that could not be recovered and the byte range of the output it zeroed
/// (the part of the codeword not released as data before: see [`crate::receiver`]).
pub use crate::receiver::LostRange;

/// Why the session ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// Every codeword was decoded or declared lost while the stream ran.
    Complete,
    /// The last codeword had been seen and the stream went quiet.
    EndOfStream,
    /// No datagram for `--timeout-s`.
    Timeout,
    /// `--max-seconds` elapsed.
    MaxDuration,
    /// The server ended the session: it is shutting down (its goodbye datagram).
    ServerShutdown,
    /// The output reached a rung switch (`isnode play TITLE`): the next rung's session
    /// goes on from there.
    Switched,
}

/// Statistics of one `play`.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct PlayStats {
    /// Object name.
    pub object: String,
    /// Server session id (None for a preset session).
    pub session_id: Option<String>,
    /// FLUTE TSI of the stream (of the copy streamed last, after a resume on another
    /// copy).
    pub tsi: u32,
    /// FLUTE TOI of the object (of the copy streamed last).
    pub toi: u32,
    /// Object size in bytes.
    pub size_bytes: u64,
    /// Object bitrate in bit/s.
    pub bitrate_bps: u64,
    /// Encoding symbol length E.
    pub symbol_size: u32,
    /// Source symbols B of a full codeword.
    pub source_symbols: u32,
    /// Repair symbols m per codeword.
    pub repair_symbols: u32,
    /// First codeword of the session.
    pub start_codeword: u32,
    /// Packets received from the socket, before injected loss (a datagram coalesced by
    /// `UDP_GRO` counts each of its packets).
    pub packets_received: u64,
    /// Distinct valid symbols of the object received.
    pub packets_valid: u64,
    /// Symbols known to be missing: expected − valid − corrupt, never below 0, where a
    /// codeword decoded before its end is expected up to the highest ESI seen (repair
    /// packets after that were never waited for, so an injected loss there is counted in
    /// `injected_lost` but not here).
    pub packets_lost: u64,
    /// Symbols missing below the highest ESI received of their codeword (corrupt ones
    /// included): the loss the client measures and reports, which does not count the repair
    /// symbols the server chose not to send (adaptive repair), unlike `packets_lost`.
    pub packets_missed: u64,
    /// Datagrams that failed the parse or the CRC32C check (includes injected corruption).
    pub packets_corrupt: u64,
    /// Symbols received more than once.
    pub packets_duplicate: u64,
    /// Valid datagrams of another session, out of the object's range, or too far ahead.
    pub packets_foreign: u64,
    /// Datagrams from an address the session does not accept (`--accept-from`), dropped
    /// before the checks above (counted in `packets_received`, not in the other counters).
    pub packets_wrong_source: u64,
    /// Valid FDT packets.
    pub packets_fdt: u64,
    /// Times the stream was resumed with a new session after the server went quiet
    /// (restarted or unreachable; `--resume-after-ms`).
    pub resumes: u32,
    /// The longest gap without a datagram that a resume bridged, milliseconds.
    pub longest_resume_gap_ms: u64,
    /// Each gap a resume bridged, milliseconds, in order (the first
    /// [`MAX_RESUME_GAPS`] of them).
    pub resume_gaps_ms: Vec<u64>,
    /// Of the resumes, those on another copy of the same origin version (another edge's
    /// fill of the object: another TSI and TOI, the same origin ETag and layout), where
    /// the receive core was re-bound to that copy's stream.
    pub resumes_on_other_copy: u32,
    /// Whether packets were checked against the server's digests (`isnode_wire::digest`).
    pub authenticated: bool,
    /// Packets whose digest did not match (forged, or corrupt past their CRC): dropped.
    pub packets_forged: u64,
    /// Packets dropped because their codeword's digests had not arrived yet.
    pub packets_unverified: u64,
    /// Datagrams dropped by the injected loss.
    pub injected_lost: u64,
    /// Datagrams corrupted by the injected corruption.
    pub injected_corrupt: u64,
    /// Source symbols rebuilt by the Reed-Solomon decoder.
    pub symbols_repaired: u64,
    /// Codewords of the session.
    pub codewords_total: u32,
    /// Codewords decoded.
    pub codewords_decoded: u32,
    /// Codewords that could not be recovered.
    pub codewords_unrecoverable: u32,
    /// Their SBNs and byte ranges (written as zeros).
    pub unrecoverable: Vec<LostRange>,
    /// FDT received in the stream, checked against the session.
    pub fdt_stream: FdtCheck,
    /// FDT of the session answer, checked against the session.
    pub fdt_session: FdtCheck,
    /// From the session request to the first byte played out, in ms.
    pub startup_delay_ms: Option<u64>,
    /// From the session request to the first valid symbol, in ms.
    pub first_packet_ms: Option<u64>,
    /// Bytes written to the output (data and zeros).
    pub bytes_written: u64,
    /// Bytes the output must have: the object from the start codeword to its end.
    pub bytes_expected: u64,
    /// Bits played out in each second since playout started (the last may be partial).
    pub per_second_bitrate_bps: Vec<u64>,
    /// Playout underruns (a piece later than its due time), paced playout only.
    pub underruns: u64,
    /// Total playout stall, in ms.
    pub stall_ms: u64,
    /// Whether the output was paced at the bitrate.
    pub paced: bool,
    /// From the session request to the end of playout, in seconds.
    pub duration_s: f64,
    /// Why the session ended.
    pub end_reason: EndReason,
    /// Unicast repair over HTTP of what the FEC could not decode.
    pub repair: RepairStats,
    /// Keepalives that carried a loss report (adaptive repair; 0 if the server takes none).
    pub loss_reports_sent: u64,
    /// The last loss rate reported to the server (measured over a sliding window of the
    /// symbols expected: missing or corrupt / expected), if any.
    pub reported_loss_rate: Option<f64>,
    /// The highest loss rate reported to the server, if any.
    pub max_reported_loss_rate: Option<f64>,
    /// The bounded queue between the receive loop and the playout.
    pub playout_queue: QueueStats,
    /// A title with renditions (`isnode play TITLE`): the rung played from the start and
    /// every switch, in order (empty for one object).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rung_timeline: Vec<RungChange>,
    /// A title with renditions: each rung's session, in order (the counters above are
    /// their sums).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rung_sessions: Vec<RungSession>,
    /// A title with renditions: the first estimate of the path's rate its first rung was
    /// chosen under (bit/s; absent when there was none: a pinned rung, a failed probe).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_estimate_bps: Option<u64>,
}

/// One entry of [`PlayStats::rung_timeline`].
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct RungChange {
    /// When the switch was decided, seconds from the start of play.
    pub decided_at_s: f64,
    /// When the new rung's session was asked for (the old one's output had reached the
    /// boundary), seconds from the start of play.
    pub at_s: f64,
    /// The boundary in the title where the output switches, seconds.
    pub media_s: f64,
    /// The rendition left (None: the first).
    pub from: Option<String>,
    /// Its bitrate.
    pub from_bitrate_bps: Option<u64>,
    /// The rendition played from here.
    pub to: String,
    /// Its bitrate.
    pub to_bitrate_bps: u64,
    /// Why.
    pub reason: crate::abr::Reason,
}

impl RungChange {
    /// The first rung, `object` from `media_s`; its bitrate is filled by the caller.
    pub(crate) fn start(object: &str, bitrate_bps: u64, media_s: f64) -> RungChange {
        RungChange {
            decided_at_s: 0.0,
            at_s: 0.0,
            media_s,
            from: None,
            from_bitrate_bps: None,
            to: object.to_string(),
            to_bitrate_bps: bitrate_bps,
            reason: crate::abr::Reason::Start,
        }
    }
}

/// One rung's session of a title with renditions ([`PlayStats::rung_sessions`]).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct RungSession {
    /// The rendition.
    pub object: String,
    /// Its bitrate.
    pub bitrate_bps: u64,
    /// Where in the title it started, seconds.
    pub media_start_s: f64,
    /// Why it ended (`switched`: at a rung switch).
    pub end_reason: EndReason,
    /// Bytes it wrote.
    pub bytes_written: u64,
    /// Its codewords that could not be recovered.
    pub codewords_unrecoverable: u32,
    /// Its datagrams dropped by the injected loss.
    pub injected_lost: u64,
    /// Symbols its decoder rebuilt.
    pub symbols_repaired: u64,
    /// Codewords repaired over HTTP.
    pub codewords_repaired_over_http: u32,
    /// The highest loss it reported to the server.
    pub max_reported_loss_rate: Option<f64>,
}

impl RungSession {
    /// The summary of the session `s`, started at `media_s` in the title.
    pub(super) fn of(s: &PlayStats, media_s: f64) -> RungSession {
        RungSession {
            object: s.object.clone(),
            bitrate_bps: s.bitrate_bps,
            media_start_s: media_s,
            end_reason: s.end_reason,
            bytes_written: s.bytes_written,
            codewords_unrecoverable: s.codewords_unrecoverable,
            injected_lost: s.injected_lost,
            symbols_repaired: s.symbols_repaired,
            codewords_repaired_over_http: s.repair.codewords_repaired,
            max_reported_loss_rate: s.max_reported_loss_rate,
        }
    }
}

/// The statistics of a title played over several rungs' sessions: the last session's
/// (`last`), named `title`, with the counters summed over `sessions` (whose sums it
/// recomputes from the per-session figures it has) and the timeline. A session that ended
/// at its switch was to write up to it: its codewords are those it reached.
pub(super) fn merge(
    title: &str,
    last: PlayStats,
    all: &[PlayStats],
    sessions: Vec<RungSession>,
    timeline: Vec<RungChange>,
) -> PlayStats {
    let mut m = last;
    m.object = title.to_string();
    let sum = |f: fn(&PlayStats) -> u64| all.iter().map(f).sum::<u64>();
    m.packets_received = sum(|s| s.packets_received);
    m.packets_valid = sum(|s| s.packets_valid);
    m.packets_lost = sum(|s| s.packets_lost);
    m.packets_missed = sum(|s| s.packets_missed);
    m.packets_corrupt = sum(|s| s.packets_corrupt);
    m.packets_duplicate = sum(|s| s.packets_duplicate);
    m.packets_foreign = sum(|s| s.packets_foreign);
    m.packets_wrong_source = sum(|s| s.packets_wrong_source);
    m.packets_fdt = sum(|s| s.packets_fdt);
    m.packets_forged = sum(|s| s.packets_forged);
    m.packets_unverified = sum(|s| s.packets_unverified);
    m.injected_lost = sum(|s| s.injected_lost);
    m.injected_corrupt = sum(|s| s.injected_corrupt);
    m.symbols_repaired = sum(|s| s.symbols_repaired);
    m.bytes_written = sum(|s| s.bytes_written);
    m.bytes_expected = sum(|s| {
        if s.end_reason == EndReason::Switched {
            s.bytes_written
        } else {
            s.bytes_expected
        }
    });
    m.underruns = sum(|s| s.underruns);
    m.stall_ms = sum(|s| s.stall_ms);
    m.loss_reports_sent = sum(|s| s.loss_reports_sent);
    let sum32 = |f: fn(&PlayStats) -> u32| all.iter().map(f).sum::<u32>();
    m.resumes = sum32(|s| s.resumes);
    m.codewords_decoded = sum32(|s| s.codewords_decoded);
    m.codewords_unrecoverable = sum32(|s| s.codewords_unrecoverable);
    m.codewords_total = sum32(|s| {
        if s.end_reason == EndReason::Switched {
            s.codewords_decoded + s.codewords_unrecoverable
        } else {
            s.codewords_total
        }
    });
    m.unrecoverable = all.iter().flat_map(|s| s.unrecoverable.clone()).collect();
    m.per_second_bitrate_bps = all
        .iter()
        .flat_map(|s| s.per_second_bitrate_bps.clone())
        .collect();
    m.startup_delay_ms = all.first().and_then(|s| s.startup_delay_ms);
    m.first_packet_ms = all.first().and_then(|s| s.first_packet_ms);
    m.max_reported_loss_rate = all
        .iter()
        .filter_map(|s| s.max_reported_loss_rate)
        .reduce(f64::max);
    m.repair.codewords_repaired = sum32(|s| s.repair.codewords_repaired);
    m.repair.codewords_failed = sum32(|s| s.repair.codewords_failed);
    m.repair.requests = sum(|s| s.repair.requests);
    m.repair.packets_fetched = sum(|s| s.repair.packets_fetched);
    m.repair.bytes_fetched = sum(|s| s.repair.bytes_fetched);
    m.rung_sessions = sessions;
    m.rung_timeline = timeline;
    m
}

impl PlayStats {
    /// True if every codeword was decoded and the output has its full length.
    pub fn is_clean(&self) -> bool {
        self.codewords_unrecoverable == 0
            && self.codewords_decoded == self.codewords_total
            && self.bytes_written == self.bytes_expected
    }

    /// A short human summary, several lines.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        self.summary_packets(&mut s);
        self.summary_losses(&mut s);
        self.summary_timing(&mut s);
        for c in &self.rung_timeline {
            s.push_str(&format!(
                "rung at {:.1} s (title {:.1} s): {} -> {} ({:.2} Mbit/s, {:?})\n",
                c.at_s,
                c.media_s,
                c.from.as_deref().unwrap_or("-"),
                c.to,
                c.to_bitrate_bps as f64 / 1e6,
                c.reason
            ));
        }
        s
    }

    /// The summary's lines on the object, its packets and its codewords.
    fn summary_packets(&self, s: &mut String) {
        let verdict = if self.is_clean() {
            "complete".to_string()
        } else {
            format!("{} codewords unrecoverable", self.codewords_unrecoverable)
        };
        s.push_str(&format!(
            "played {} ({} bytes) in {:.1} s: {verdict} ({:?})\n",
            self.object, self.bytes_written, self.duration_s, self.end_reason
        ));
        s.push_str(&format!(
            "packets: {} received, {} from elsewhere, {} valid, {} lost, {} corrupt, {} duplicate, \
             {} foreign, {} FDT, {} forged, {} unverified (injected: {} lost, {} corrupt)\n",
            self.packets_received,
            self.packets_wrong_source,
            self.packets_valid,
            self.packets_lost,
            self.packets_corrupt,
            self.packets_duplicate,
            self.packets_foreign,
            self.packets_fdt,
            self.packets_forged,
            self.packets_unverified,
            self.injected_lost,
            self.injected_corrupt
        ));
        s.push_str(&format!(
            "codewords: {}/{} decoded, {} symbols repaired, {} unrecoverable\n",
            self.codewords_decoded,
            self.codewords_total,
            self.symbols_repaired,
            self.codewords_unrecoverable
        ));
    }

    /// The summary's lines on what was lost (the first ten codewords), repaired over HTTP,
    /// and held up by a full queue to playout.
    fn summary_losses(&self, s: &mut String) {
        for r in self.unrecoverable.iter().take(10) {
            s.push_str(&format!(
                "  lost codeword {}: bytes {}..{} written as zeros\n",
                r.sbn,
                r.offset,
                r.offset + r.len
            ));
        }
        if self.unrecoverable.len() > 10 {
            s.push_str(&format!(
                "  ... and {} more\n",
                self.unrecoverable.len() - 10
            ));
        }
        let r = &self.repair;
        if r.requests > 0 {
            s.push_str(&format!(
                "unicast repair: {} codewords repaired, {} not, {} requests, {} packets ({} bytes) fetched\n",
                r.codewords_repaired, r.codewords_failed, r.requests, r.packets_fetched, r.bytes_fetched
            ));
        }
        let q = &self.playout_queue;
        if q.full_events > 0 {
            s.push_str(&format!(
                "the server sent faster than the playout drains (its announced bitrate): the \
                 queue to playout ({} bytes) was full {} times (codewords beyond the receive \
                 window are then given up)\n",
                q.limit_bytes, q.full_events
            ));
        }
    }

    /// The summary's lines on start-up, stalls, the FDT, the loss reported and the bitrate
    /// of each second.
    fn summary_timing(&self, s: &mut String) {
        let ms = |v: Option<u64>| v.map_or("-".to_string(), |v| format!("{v} ms"));
        s.push_str(&format!(
            "start-up delay {} (first packet {}), {} underruns ({} ms stalled), FDT: stream {}, session {}\n",
            ms(self.startup_delay_ms),
            ms(self.first_packet_ms),
            self.underruns,
            self.stall_ms,
            fdt_word(&self.fdt_stream),
            fdt_word(&self.fdt_session),
        ));
        let pct = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:.2}%", v * 100.0));
        s.push_str(&format!(
            "loss reported to the server: {} reports, last {}, max {}\n",
            self.loss_reports_sent,
            pct(self.reported_loss_rate),
            pct(self.max_reported_loss_rate)
        ));
        let rates: Vec<String> = self
            .per_second_bitrate_bps
            .iter()
            .map(|b| format!("{:.2}", *b as f64 / 1e6))
            .collect();
        s.push_str(&format!(
            "bitrate per second (Mbit/s, object {:.2}{}): [{}]\n",
            self.bitrate_bps as f64 / 1e6,
            if self.paced { ", paced" } else { ", unpaced" },
            rates.join(" ")
        ));
    }
}

fn fdt_word(c: &FdtCheck) -> String {
    match c {
        FdtCheck::NotReceived => "not received".into(),
        FdtCheck::Verified => "verified".into(),
        FdtCheck::Mismatch(r) => format!("MISMATCH ({r})"),
    }
}

/// The times and modes of a session that go into its [`PlayStats`].
pub(super) struct PlayTimes {
    pub(super) requested: Instant,
    pub(super) first_symbol: Option<Duration>,
    pub(super) paced: bool,
    pub(super) end_reason: EndReason,
}

/// Most gaps listed in [`PlayStats::resume_gaps_ms`].
pub(super) const MAX_RESUME_GAPS: usize = 64;

/// What the receive loop counted before the receive core.
#[derive(Clone, Debug, Default)]
pub(super) struct LoopCounts {
    /// Datagrams taken from the socket.
    pub(super) received: u64,
    /// Of those, datagrams from an address the session does not accept.
    pub(super) wrong_source: u64,
    /// New sessions opened after the server went quiet ([`super::resume`]).
    pub(super) resumes: u32,
    /// Of those, the resumes on another copy of the object (the core re-bound to it).
    pub(super) rebinds: u32,
    /// The longest time without a datagram that a resume bridged.
    pub(super) longest_gap: Duration,
    /// Each gap a resume bridged (the first [`MAX_RESUME_GAPS`]).
    pub(super) gaps: Vec<Duration>,
}

/// The statistics of a finished session.
pub(super) fn assemble(
    setup: &SessionSetup,
    rx: &Receiver,
    injected: ImpairStats,
    counts: LoopCounts,
    playout: PlayoutStats,
    t: PlayTimes,
) -> PlayStats {
    let core: ReceiverStats = rx.stats();
    let p = &setup.params;
    let unrecoverable: Vec<LostRange> = core.lost_ranges.clone();
    PlayStats {
        object: setup.object.clone(),
        session_id: setup.session_id.clone(),
        tsi: rx.params().tsi,
        toi: rx.params().toi,
        size_bytes: p.transfer_length,
        bitrate_bps: setup.bitrate_bps,
        symbol_size: p.symbol_len,
        source_symbols: p.max_source_block_len,
        repair_symbols: p.repair_symbols,
        start_codeword: p.start_codeword,
        packets_received: counts.received,
        packets_wrong_source: counts.wrong_source,
        resumes: counts.resumes,
        longest_resume_gap_ms: counts.longest_gap.as_millis() as u64,
        resume_gaps_ms: counts.gaps.iter().map(|g| g.as_millis() as u64).collect(),
        resumes_on_other_copy: counts.rebinds,
        packets_valid: core.packets_valid,
        packets_lost: core.packets_lost,
        packets_missed: core.packets_missed,
        packets_corrupt: core.packets_corrupt,
        packets_duplicate: core.packets_duplicate,
        packets_foreign: core.packets_foreign,
        packets_fdt: core.packets_fdt,
        authenticated: rx.is_authenticating(),
        packets_forged: core.packets_forged,
        packets_unverified: core.packets_unverified,
        injected_lost: injected.dropped,
        injected_corrupt: injected.corrupted,
        symbols_repaired: core.symbols_repaired,
        codewords_total: core.codewords_total,
        codewords_decoded: core.codewords_decoded,
        codewords_unrecoverable: unrecoverable.len() as u32,
        unrecoverable,
        fdt_stream: rx.fdt_check().clone(),
        fdt_session: setup.fdt_session.clone(),
        startup_delay_ms: playout
            .started_at
            .map(|s| s.saturating_duration_since(t.requested).as_millis() as u64),
        first_packet_ms: t.first_symbol.map(|d| d.as_millis() as u64),
        bytes_written: playout.bytes_written,
        bytes_expected: rx.output_len(),
        per_second_bitrate_bps: playout.per_second_bitrate_bps,
        underruns: playout.underruns,
        stall_ms: playout.stall_ms,
        paced: t.paced,
        duration_s: t.requested.elapsed().as_secs_f64(),
        end_reason: t.end_reason,
        repair: RepairStats::default(),
        loss_reports_sent: 0,
        reported_loss_rate: None,
        max_reported_loss_rate: None,
        playout_queue: QueueStats::default(),
        rung_timeline: Vec::new(),
        rung_sessions: Vec::new(),
        first_estimate_bps: None,
    }
}
