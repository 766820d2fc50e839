//! The sans-IO pacing core of one session.
//!
//! Given the layout of an object, its bitrate and the caller's clock (nanoseconds on any
//! monotonic time line), a [`Pacer`] says what to send next and when: the FDT instance at
//! the start and before every `fdt_every`-th codeword, then every codeword's n packets
//! (source then repair, member run by member run) spread evenly over the codeword's
//! playing time `k·E·8 / bitrate`, in bursts that never cross a member run or a block
//! boundary and never exceed `max_burst` packets (so one burst is one GSO send from one
//! cached block). A sender may take a burst in pieces ([`Pacer::advance_packets`]) to join
//! the start of the next one to its send: the packets and their order stay the same.
//!
//! The schedule is exact integer arithmetic from the session start: no drift, and a
//! caller that falls behind catches up (every step becomes due at once) without changing
//! what is sent.
//!
//! Two additions, both off unless asked for:
//!
//! - **Start-up burst** ([`Pacer::with_start_burst`]): the first `media_ms` of media (from
//!   the start codeword) go out `factor` times faster than the stream's rate; the rest of
//!   the schedule is shifted earlier by what the burst gained (`T·(1 − 1/factor)`, the
//!   client's lead), so the
//!   long-run rate is unchanged and the session ends that much earlier. The burst's
//!   instantaneous rate is `factor ×` the send rate until [`Pacer::burst_end_ns`]:
//!   admission counts it so (see `crate::admission`).
//! - **Repair limit** ([`Pacer::set_repair_limit`], adaptive repair): a codeword started
//!   after the call sends only its first `r` stored repair symbols (ESIs `k..k+r`); the
//!   others are skipped, never sent, never computed. The codeword's slot keeps its length
//!   (its media time): its `k + r` packets are spread evenly over it, so the session's rate
//!   falls to `bitrate · (k + r)/k` of payload. Skipped and sent repair packets are counted
//!   ([`Pacer::repair_counts`]).

use std::ops::Range;

use isnode_layout::Layout;

/// How a session is to be paced.
#[derive(Clone, Debug)]
pub struct PacerConfig {
    /// The object's layout.
    pub layout: Layout,
    /// The object's media bitrate in bits per second (> 0).
    pub bitrate_bps: u64,
    /// First codeword to send.
    pub start_codeword: u32,
    /// Largest burst, in packets (>= 1).
    pub max_burst: u32,
    /// The FDT is repeated before every `fdt_every`-th codeword (counted from the start), >= 1.
    pub fdt_every: u32,
}

/// One burst: consecutive packets of one member's run of one codeword, all in one block.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Burst {
    /// Codeword (source block number).
    pub sbn: u32,
    /// Member holding the packets.
    pub member: u32,
    /// Encoding symbol IDs of the packets, consecutive.
    pub esis: Range<u32>,
    /// Block of the member's segment file holding them.
    pub block: u64,
    /// Index within the block of the first packet (not a pool slot).
    pub first_in_block: u32,
}

impl Burst {
    /// Number of packets.
    pub fn len(&self) -> u32 {
        self.esis.end - self.esis.start
    }

    /// Always false: a burst has at least one packet.
    pub fn is_empty(&self) -> bool {
        self.esis.is_empty()
    }
}

/// What to send next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// The FDT instance packets (sent before codeword `before_codeword`).
    Fdt {
        /// The codeword that follows.
        before_codeword: u32,
    },
    /// A burst of stored packets.
    Burst(Burst),
}

/// The pacing state machine of one session.
#[derive(Clone, Debug)]
pub struct Pacer {
    cfg: PacerConfig,
    start_ns: u64,
    /// Current codeword.
    sbn: u32,
    /// Current member within the codeword.
    member: u32,
    /// Next ESI to send within the current member's run.
    esi: u32,
    /// Packets of the current codeword already sent.
    sent_in_codeword: u32,
    /// Source symbols of the codewords from the start up to (excluding) the current one.
    source_before: u64,
    /// The FDT is due before the current codeword and not sent yet.
    fdt_pending: bool,
    done: bool,
    /// When the next step is due (computed once per step: the data plane asks often).
    due_ns: Option<u64>,
    /// Paused since this time (ns): nothing is due until [`Pacer::resume`].
    paused_at_ns: Option<u64>,
    /// The start-up burst, if any.
    burst: Option<BurstPlan>,
    /// Repair symbols a codeword started from now on sends (`None`: all m).
    repair_limit: Option<u32>,
    /// Repair symbols the current codeword sends (fixed when it starts).
    repair_now: u32,
    /// Repair packets sent and skipped so far.
    repair: RepairCounts,
}

/// The start-up burst of a session: the first `media_ms` of media at `factor` times the
/// stream's rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StartBurst {
    /// Playing time sent faster (from the start codeword), milliseconds; at most the rest
    /// of the object.
    pub media_ms: u64,
    /// How many times faster (>= 2 to have an effect).
    pub factor: u32,
}

/// A [`StartBurst`] as the schedule uses it.
#[derive(Clone, Copy, Debug)]
struct BurstPlan {
    factor: u32,
    /// Media time (ns from the start) the burst covers, at the stream's rate.
    media_ns: u128,
}

/// Repair packets of a session, sent and skipped by the repair limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RepairCounts {
    /// Stored repair packets sent.
    pub sent: u64,
    /// Stored repair packets skipped (not needed by the client's reported loss).
    pub skipped: u64,
}

/// Errors of the pacing core.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PacerError {
    /// The start codeword is past the object's end.
    #[error("start_codeword {start} is out of range: the object has {codewords} codewords")]
    BadStart {
        /// Requested start codeword.
        start: u32,
        /// Codewords of the object.
        codewords: u32,
    },
    /// Bitrate 0, burst 0 or FDT period 0.
    #[error("invalid pacing parameter: {0}")]
    BadParam(&'static str),
}

impl Pacer {
    /// A session starting at `start_ns`.
    pub fn new(cfg: PacerConfig, start_ns: u64) -> Result<Pacer, PacerError> {
        if cfg.bitrate_bps == 0 {
            return Err(PacerError::BadParam("bitrate is 0"));
        }
        if cfg.max_burst == 0 {
            return Err(PacerError::BadParam("max_burst is 0"));
        }
        if cfg.fdt_every == 0 {
            return Err(PacerError::BadParam("fdt_every is 0"));
        }
        let codewords = cfg.layout.codewords();
        // An empty object has no codeword: the session sends the FDT only.
        if cfg.start_codeword >= codewords && !(codewords == 0 && cfg.start_codeword == 0) {
            return Err(PacerError::BadStart {
                start: cfg.start_codeword,
                codewords,
            });
        }
        let sbn = cfg.start_codeword;
        let mut p = Pacer {
            cfg,
            start_ns,
            sbn,
            member: 0,
            esi: 0,
            sent_in_codeword: 0,
            source_before: 0,
            fdt_pending: true,
            done: false,
            due_ns: None,
            paused_at_ns: None,
            burst: None,
            repair_limit: None,
            repair_now: 0,
            repair: RepairCounts::default(),
        };
        p.repair_now = p.repair_for_current();
        p.settle();
        Ok(p)
    }

    /// Stops the schedule at `now_ns`: nothing is due until [`Pacer::resume`] (a no-op
    /// when already paused or done).
    pub fn pause(&mut self, now_ns: u64) {
        if self.paused_at_ns.is_none() && !self.done {
            self.paused_at_ns = Some(now_ns);
            self.due_ns = None;
        }
    }

    /// Goes on at `now_ns` from where [`Pacer::pause`] stopped, the whole schedule moved
    /// later by the pause (a no-op when not paused).
    pub fn resume(&mut self, now_ns: u64) {
        if let Some(at) = self.paused_at_ns.take() {
            self.start_ns = self.start_ns.saturating_add(now_ns.saturating_sub(at));
            self.settle();
        }
    }

    /// True between [`Pacer::pause`] and [`Pacer::resume`].
    #[inline]
    pub fn is_paused(&self) -> bool {
        self.paused_at_ns.is_some()
    }

    /// Continues from the first packet of `codeword` as a session started at `now_ns`
    /// would (the FDT first, then paced from there, without a start-up burst); a paused
    /// pacer stays paused there.
    pub fn seek(&mut self, codeword: u32, now_ns: u64) -> Result<(), PacerError> {
        let codewords = self.cfg.layout.codewords();
        if codeword >= codewords {
            return Err(PacerError::BadStart {
                start: codeword,
                codewords,
            });
        }
        self.cfg.start_codeword = codeword;
        self.start_ns = now_ns;
        self.sbn = codeword;
        self.member = 0;
        self.esi = 0;
        self.sent_in_codeword = 0;
        self.source_before = 0;
        self.fdt_pending = true;
        self.done = false;
        // No second start-up burst: admission accounted for one, at the session's start.
        self.burst = None;
        self.repair_now = self.repair_for_current();
        self.settle();
        if self.paused_at_ns.is_some() {
            self.paused_at_ns = Some(now_ns);
            self.due_ns = None;
        }
        Ok(())
    }

    /// The same session with a start-up burst (replacing any); a burst of 0 ms or a factor
    /// below 2 is none. Call before the first step.
    pub fn with_start_burst(mut self, burst: StartBurst) -> Pacer {
        let layout = &self.cfg.layout;
        let source: u64 = (self.cfg.start_codeword..layout.codewords())
            .map(|c| u64::from(layout.source_symbols(c)))
            .sum();
        let rest_ns =
            u128::from(source) * u128::from(layout.params().symbol_len) * 8 * 1_000_000_000
                / u128::from(self.cfg.bitrate_bps);
        let media_ns = rest_ns.min(u128::from(burst.media_ms) * 1_000_000);
        self.burst = (burst.factor >= 2 && media_ns > 0).then_some(BurstPlan {
            factor: burst.factor,
            media_ns,
        });
        self.due_ns = self.compute_next_due();
        self
    }

    /// When the start-up burst ends (ns on the caller's clock), or `None` without one.
    pub fn burst_end_ns(&self) -> Option<u64> {
        let b = self.burst?;
        let end = b.media_ns / u128::from(b.factor);
        Some(
            self.start_ns
                .saturating_add(u64::try_from(end).unwrap_or(u64::MAX)),
        )
    }

    /// The codewords started from now on send only `repair` of their stored repair symbols
    /// (at most m; `None`: all m). The current codeword keeps its count.
    pub fn set_repair_limit(&mut self, repair: Option<u32>) {
        self.repair_limit = repair;
    }

    /// Repair packets sent and skipped so far.
    #[inline]
    pub fn repair_counts(&self) -> RepairCounts {
        self.repair
    }

    /// Repair symbols the current codeword sends under the limit.
    fn repair_for_current(&self) -> u32 {
        let layout = &self.cfg.layout;
        if self.sbn >= layout.codewords() {
            return 0;
        }
        let m = layout.encoding_symbols(self.sbn) - layout.source_symbols(self.sbn);
        self.repair_limit.map_or(m, |r| r.min(m))
    }

    /// One past the last ESI the current codeword sends.
    fn esi_end(&self) -> u32 {
        self.cfg.layout.source_symbols(self.sbn) + self.repair_now
    }

    /// The configuration.
    pub fn config(&self) -> &PacerConfig {
        &self.cfg
    }

    /// The codeword being sent (or the object's codeword count when done).
    #[inline]
    pub fn codeword(&self) -> u32 {
        self.sbn
    }

    /// True once everything has been sent.
    #[inline]
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Moves the cursor onto the next step and computes when it is due (nothing is due
    /// while paused).
    fn settle(&mut self) {
        self.settle_cursor();
        self.due_ns = match self.paused_at_ns {
            Some(_) => None,
            None => self.compute_next_due(),
        };
    }

    /// Moves the cursor onto the next member run that has packets, or to the end.
    fn settle_cursor(&mut self) {
        let layout = &self.cfg.layout;
        let members = layout.params().members;
        loop {
            if self.sbn >= layout.codewords() {
                // The FDT of an empty object is still sent once.
                self.done = !self.fdt_pending;
                return;
            }
            if self.member >= members {
                let n = layout.encoding_symbols(self.sbn);
                self.repair.skipped += u64::from(n.saturating_sub(self.esi_end()));
                self.source_before += u64::from(layout.source_symbols(self.sbn));
                self.sbn += 1;
                self.member = 0;
                self.sent_in_codeword = 0;
                self.esi = 0;
                self.repair_now = self.repair_for_current();
                let rel = self.sbn - self.cfg.start_codeword;
                if self.sbn < layout.codewords() && rel % self.cfg.fdt_every == 0 {
                    self.fdt_pending = true;
                }
                continue;
            }
            let run = layout.member_run(self.sbn, self.member);
            if self.esi < run.esis.start {
                self.esi = run.esis.start;
            }
            if self.esi >= run.esis.end.min(self.esi_end()) {
                self.member += 1;
                self.esi = 0;
                continue;
            }
            return;
        }
    }

    /// The time (ns) at which the next step is due, or `None` when done.
    #[inline]
    pub fn next_due(&self) -> Option<u64> {
        self.due_ns
    }

    fn compute_next_due(&self) -> Option<u64> {
        let media = self.media_offset_ns()?;
        let offset = match self.burst {
            // The burst's media time goes `factor` times faster; what follows is shifted
            // earlier by what it gained.
            Some(b) if media < b.media_ns => media / u128::from(b.factor),
            Some(b) => media - b.media_ns + b.media_ns / u128::from(b.factor),
            None => media,
        };
        Some(
            self.start_ns
                .saturating_add(u64::try_from(offset).unwrap_or(u64::MAX)),
        )
    }

    /// The media time (ns from the start) of the next step on the nominal schedule
    /// (without the start-up burst), or `None` when done.
    fn media_offset_ns(&self) -> Option<u128> {
        if self.done {
            return None;
        }
        let layout = &self.cfg.layout;
        let e = u128::from(layout.params().symbol_len);
        let rate = u128::from(self.cfg.bitrate_bps);
        if self.sbn >= layout.codewords() {
            return Some(0);
        }
        let k = u128::from(layout.source_symbols(self.sbn));
        // The packets this codeword sends (k + its repair limit), spread over its slot.
        let n = u128::from(self.esi_end());
        let sent = u128::from(self.sent_in_codeword);
        // codeword start + T_c * sent / n, with T_c = k * E * 8 / rate seconds.
        let num = (u128::from(self.source_before) * n + k * sent) * e * 8 * 1_000_000_000;
        Some(num / (rate * n))
    }

    /// When the client plays the next step (ns on the caller's clock): the session's start
    /// plus the step's media time on the nominal schedule. A step sent at its due time
    /// leaves the start-up burst's gain ahead of it; `None` while paused or when done.
    #[inline]
    pub fn playback_deadline_ns(&self) -> Option<u64> {
        if self.paused_at_ns.is_some() {
            return None;
        }
        let media = self.media_offset_ns()?;
        Some(
            self.start_ns
                .saturating_add(u64::try_from(media).unwrap_or(u64::MAX)),
        )
    }

    /// The next step if it is due at `now_ns`. It stays the next step until [`Pacer::advance`].
    pub fn peek(&self, now_ns: u64) -> Option<Step> {
        let due = self.next_due()?;
        if due > now_ns {
            return None;
        }
        Some(self.current())
    }

    /// The next step, due or not (panics when done).
    fn current(&self) -> Step {
        assert!(!self.done, "no step after the end");
        if self.fdt_pending {
            return Step::Fdt {
                before_codeword: self.sbn,
            };
        }
        let layout = &self.cfg.layout;
        let run = layout.member_run(self.sbn, self.member);
        debug_assert!(run.esis.contains(&self.esi));
        let index = run.first_packet + u64::from(self.esi - run.esis.start);
        let (block, offset) = layout.packet_position(index);
        let per_block = layout.params().packets_per_block();
        let first_in_block = (offset / layout.params().packet_len() as usize) as u32;
        let count = (run.esis.end.min(self.esi_end()) - self.esi)
            .min(per_block - first_in_block)
            .min(self.cfg.max_burst);
        Step::Burst(Burst {
            sbn: self.sbn,
            member: self.member,
            esis: self.esi..self.esi + count,
            block,
            first_in_block,
        })
    }

    /// Marks the current step as sent (or deliberately skipped) and moves on.
    pub fn advance(&mut self) {
        self.advance_packets(u32::MAX);
    }

    /// Marks the first `packets` packets of the current burst as sent (all of it when
    /// `packets` is at least its length; an FDT step is sent whole): a sender that joins
    /// the start of the next burst to the one it sends moves the schedule past what it
    /// took, and the rest of that burst follows, due when its first packet is. The packets
    /// and their order are the same as with whole bursts.
    pub fn advance_packets(&mut self, packets: u32) {
        if self.done {
            return;
        }
        match self.current() {
            Step::Fdt { .. } => self.fdt_pending = false,
            Step::Burst(b) => {
                let end = b.esis.start + packets.clamp(1, b.len());
                let k = self.cfg.layout.source_symbols(b.sbn);
                self.repair.sent += u64::from(end.saturating_sub(b.esis.start.max(k)));
                self.sent_in_codeword += end - b.esis.start;
                self.esi = end;
            }
        }
        self.settle();
    }

    /// Next step (if due) and advance: for simple drivers and tests.
    pub fn poll(&mut self, now_ns: u64) -> Option<Step> {
        let s = self.peek(now_ns)?;
        self.advance();
        Some(s)
    }
}

/// The UDP payload rate of a session on an object, in bits per second (rounded up):
/// the media bitrate × (packet bytes per codeword / source bytes per codeword), taken on
/// the object's first (largest) codeword.
pub fn send_rate_bps(layout: &Layout, bitrate_bps: u64) -> u64 {
    if layout.codewords() == 0 {
        return bitrate_bps;
    }
    let k = u128::from(layout.source_symbols(0));
    let n = u128::from(layout.encoding_symbols(0));
    let e = u128::from(layout.params().symbol_len);
    let p = u128::from(layout.params().packet_len());
    let num = u128::from(bitrate_bps) * n * p;
    let den = k * e;
    u64::try_from(num.div_ceil(den)).unwrap_or(u64::MAX)
}

/// The blocks `(member, block)` holding the packets of codewords `sbns`, each once, in
/// send order: what a session needs in memory to send them.
pub fn blocks_of(layout: &Layout, sbns: Range<u32>) -> Vec<(u32, u64)> {
    let mut out: Vec<(u32, u64)> = Vec::new();
    let end = sbns.end.min(layout.codewords());
    for sbn in sbns.start..end {
        for member in 0..layout.params().members {
            let run = layout.member_run(sbn, member);
            if run.esis.is_empty() {
                continue;
            }
            let last = run.first_packet + (run.esis.len() as u64 - 1);
            let (b0, _) = layout.packet_position(run.first_packet);
            let (b1, _) = layout.packet_position(last);
            for b in b0..=b1 {
                if !out.contains(&(member, b)) {
                    out.push((member, b));
                }
            }
        }
    }
    out
}

/// The codewords that have packets in block `block` of `member`'s segment file
/// (an empty range if none; codewords with no symbol on `member` may be included).
pub fn codewords_in_block(layout: &Layout, member: u32, block: u64) -> Range<u32> {
    let per = u64::from(layout.params().packets_per_block());
    let first = block * per;
    let last = first + per; // exclusive
    let c = layout.codewords();
    // The first codeword whose run on `member` ends after `first`.
    let ends_after = |sbn: u32, at: u64| {
        let run = layout.member_run(sbn, member);
        run.first_packet + run.esis.len() as u64 > at
    };
    let lo = partition_point(c, |sbn| !ends_after(sbn, first));
    let hi = partition_point(c, |sbn| layout.member_run(sbn, member).first_packet < last);
    lo..hi.max(lo)
}

/// First index in `0..n` where `pred` turns false (pred is monotone: true then false).
fn partition_point(n: u32, pred: impl Fn(u32) -> bool) -> u32 {
    let (mut lo, mut hi) = (0u32, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if pred(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

#[cfg(test)]
mod tests {
    use super::*;
    use isnode_layout::VolumeParams;
    use proptest::prelude::*;
    use std::collections::HashSet;

    fn params(members: u32, block_len: u32) -> VolumeParams {
        VolumeParams {
            symbol_len: 100,
            source_symbols: 20,
            repair_symbols: 5,
            members,
            block_len,
        }
    }

    /// Drives a pacer with a virtual clock that advances by `step_ns` (0: jump to each due time).
    fn simulate(cfg: PacerConfig, step_ns: u64) -> Vec<(u64, Step)> {
        let mut p = Pacer::new(cfg, 1_000).unwrap();
        let mut now = 0u64;
        let mut out = Vec::new();
        for _ in 0..1_000_000 {
            let Some(due) = p.next_due() else { break };
            now = if step_ns == 0 {
                now.max(due)
            } else {
                now + step_ns
            };
            while let Some(s) = p.poll(now) {
                out.push((now, s));
            }
        }
        assert!(p.is_done());
        out
    }

    proptest! {
        #[test]
        fn every_packet_once_bounded_bursts_and_rate(
            len in 1u64..60_000,
            members in 5u32..8,
            blocks in 1u32..4,
            start_frac in 0.0f64..1.0,
            max_burst in 1u32..40,
            bitrate in 100_000u64..50_000_000,
            jitter in prop_oneof![Just(0u64), 1u64..3_000_000],
        ) {
            let p = params(members, 4096 * blocks);
            let layout = Layout::new(p, len).unwrap();
            let start = ((layout.codewords() as f64 * start_frac) as u32).min(layout.codewords() - 1);
            let cfg = PacerConfig { layout: layout.clone(), bitrate_bps: bitrate, start_codeword: start, max_burst, fdt_every: 8 };
            let steps = simulate(cfg, jitter);
            let mut seen = HashSet::new();
            let mut fdts = Vec::new();
            let packet_len = u64::from(p.packet_len());
            let mut sends: Vec<(u64, u64)> = Vec::new();
            for (t, s) in &steps {
                match s {
                    Step::Fdt { before_codeword } => fdts.push(*before_codeword),
                    Step::Burst(b) => {
                        prop_assert!(!b.is_empty() && b.len() <= max_burst);
                        prop_assert!(b.first_in_block + b.len() <= p.packets_per_block());
                        let run = layout.member_run(b.sbn, b.member);
                        prop_assert!(run.esis.start <= b.esis.start && b.esis.end <= run.esis.end);
                        let idx = run.first_packet + u64::from(b.esis.start - run.esis.start);
                        let (blk, off) = layout.packet_position(idx);
                        prop_assert_eq!(blk, b.block);
                        prop_assert_eq!(off as u64, u64::from(b.first_in_block) * packet_len);
                        for esi in b.esis.clone() {
                            prop_assert!(seen.insert((b.sbn, esi)), "sent twice");
                        }
                        sends.push((*t, u64::from(b.len()) * packet_len));
                    }
                }
            }
            let expected: u64 = (start..layout.codewords()).map(|c| u64::from(layout.encoding_symbols(c))).sum();
            prop_assert_eq!(seen.len() as u64, expected);
            let expect_fdt: Vec<u32> = (start..layout.codewords()).filter(|c| (c - start) % 8 == 0).collect();
            prop_assert_eq!(fdts, expect_fdt);
            // Rate: with an exact clock, every 1 s window after the start carries at least
            // the send rate less one burst, and never more than the send rate plus one burst.
            if jitter == 0 {
                let rate = send_rate_bps(&layout, bitrate) as f64 / 8.0;
                let small_k = layout.source_symbols(layout.codewords() - 1);
                let max_burst_bytes = (u64::from(max_burst.min(p.repair_symbols)) * packet_len) as f64;
                let end = sends.last().map(|s| s.0).unwrap_or(0);
                let mut w = 1_000u64;
                while w + 1_000_000_000 <= end {
                    let bytes: u64 = sends.iter().filter(|(t, _)| *t >= w && *t < w + 1_000_000_000).map(|s| s.1).sum();
                    let bytes = bytes as f64;
                    // The last (short) codeword may have a slightly higher parity ratio.
                    let hi = rate * f64::from(layout.source_symbols(0)) / f64::from(small_k.max(1)) * 1.0001;
                    prop_assert!(bytes >= rate - max_burst_bytes - 1.0, "window at {w}: {bytes} < {rate}");
                    prop_assert!(bytes <= hi + max_burst_bytes + 1.0, "window at {w}: {bytes} > {hi}");
                    w += 50_000_000;
                }
            }
        }

        #[test]
        fn codewords_in_block_matches_blocks_of(len in 1u64..60_000, members in 5u32..8) {
            let layout = Layout::new(params(members, 4096), len).unwrap();
            for sbn in 0..layout.codewords() {
                for (m, b) in blocks_of(&layout, sbn..sbn + 1) {
                    prop_assert!(codewords_in_block(&layout, m, b).contains(&sbn));
                }
            }
            for m in 0..members {
                for b in 0..layout.member_blocks(m) {
                    for sbn in codewords_in_block(&layout, m, b) {
                        // Codewords with no symbol on this member may be included.
                        prop_assert!(layout.member_run(sbn, m).esis.is_empty()
                            || blocks_of(&layout, sbn..sbn + 1).contains(&(m, b)));
                    }
                }
            }
        }
    }

    /// The (codeword, ESI) of every packet a pacer sends, in order, and its repair counts,
    /// taking `pieces[i]` packets of the i-th burst step at a time (the rest of a burst is
    /// the next step); due times never go back.
    fn packet_order(mut p: Pacer, pieces: &[u32]) -> (Vec<(u32, u32)>, RepairCounts) {
        let mut out = Vec::new();
        let mut last_due = 0;
        let mut i = 0;
        while let Some(due) = p.next_due() {
            assert!(due >= last_due, "due times never go back");
            last_due = due;
            match p.peek(u64::MAX) {
                Some(Step::Burst(b)) => {
                    let n = pieces
                        .get(i % pieces.len().max(1))
                        .map_or(b.len(), |&n| n.min(b.len()));
                    out.extend((b.esis.start..b.esis.start + n).map(|e| (b.sbn, e)));
                    p.advance_packets(n);
                    i += 1;
                }
                Some(Step::Fdt { .. }) => p.advance(),
                None => break,
            }
        }
        assert!(p.is_done());
        (out, p.repair_counts())
    }

    proptest! {
        /// Taking bursts in pieces (a sender joining the start of the next burst to the one
        /// it sends) sends the same packets in the same order, with the same repair counts.
        #[test]
        fn partial_advances_keep_the_packet_order(
            len in 1u64..40_000,
            members in 5u32..8,
            max_burst in 1u32..40,
            pieces in proptest::collection::vec(1u32..40, 1..16),
            repair in proptest::option::of(0u32..6),
        ) {
            let layout = Layout::new(params(members, 4096), len).unwrap();
            let cfg = PacerConfig { layout, bitrate_bps: 1_000_000, start_codeword: 0, max_burst, fdt_every: 8 };
            let pacer = || {
                let mut p = Pacer::new(cfg.clone(), 0).unwrap();
                p.set_repair_limit(repair);
                p
            };
            let whole = packet_order(pacer(), &[]);
            let split = packet_order(pacer(), &pieces);
            prop_assert!(!whole.0.is_empty());
            prop_assert_eq!(whole, split);
        }
    }

    /// Each burst step's time, per codeword: (first send time, ESIs sent).
    fn sent_by_codeword(steps: &[(u64, Step)]) -> std::collections::BTreeMap<u32, (u64, Vec<u32>)> {
        let mut by = std::collections::BTreeMap::new();
        for (t, s) in steps {
            if let Step::Burst(b) = s {
                let e = by.entry(b.sbn).or_insert((*t, Vec::new()));
                e.1.extend(b.esis.clone());
            }
        }
        by
    }

    proptest! {
        /// Start-up burst: the burst's codewords go out `factor` times faster, every later
        /// step is due exactly the burst's gain earlier than without a burst (the long-run
        /// rate is unchanged), and every packet is sent exactly once.
        #[test]
        fn start_burst_is_bounded_and_keeps_the_long_run_rate(
            len in 1u64..60_000,
            members in 5u32..8,
            media_ms in 0u64..3_000,
            factor in 1u32..8,
            bitrate in 100_000u64..5_000_000,
            start_frac in 0.0f64..1.0,
        ) {
            let p = params(members, 4096);
            let layout = Layout::new(p, len).unwrap();
            let start = ((layout.codewords() as f64 * start_frac) as u32).min(layout.codewords() - 1);
            let cfg = PacerConfig { layout: layout.clone(), bitrate_bps: bitrate, start_codeword: start, max_burst: 16, fdt_every: 8 };
            let plain = sent_by_codeword(&simulate(cfg.clone(), 0));
            let burst = StartBurst { media_ms, factor };
            let mut bp = Pacer::new(cfg.clone(), 1_000).unwrap().with_start_burst(burst);
            let end_ns = bp.burst_end_ns();
            let mut now = 0u64;
            let mut steps = Vec::new();
            while let Some(due) = bp.next_due() {
                now = now.max(due);
                while let Some(s) = bp.poll(now) {
                    steps.push((now, s));
                }
            }
            let bursty = sent_by_codeword(&steps);
            prop_assert_eq!(plain.keys().collect::<Vec<_>>(), bursty.keys().collect::<Vec<_>>());
            let rest: u64 = (start..layout.codewords()).map(|c| u64::from(layout.source_symbols(c))).sum::<u64>()
                * 100 * 8 * 1_000_000_000 / bitrate;
            let media_b = rest.min(media_ms * 1_000_000);
            let effective = factor >= 2 && media_b > 0;
            prop_assert_eq!(end_ns.is_some(), effective);
            for (sbn, (t_plain, esis)) in &plain {
                let (t, esis_b) = &bursty[sbn];
                prop_assert_eq!(esis, esis_b, "same packets, once each");
                let rel = t_plain - 1_000;
                let expect = if !effective {
                    rel
                } else if rel < media_b {
                    rel / u64::from(factor)
                } else {
                    rel - media_b + media_b / u64::from(factor)
                };
                let got = t - 1_000;
                prop_assert!(got.abs_diff(expect) <= 2, "codeword {sbn}: {got} vs {expect}");
            }
            if let Some(end) = end_ns {
                // The burst ends when its media time, sped up, has passed.
                prop_assert!((end - 1_000).abs_diff(media_b / u64::from(factor)) <= 1);
            }
        }

        /// Repair limit: a codeword sends its source symbols and the first r of its stored
        /// repair symbols, r fixed when it starts (the limit then in force, at most m); the
        /// rest are skipped and counted, each packet at most once.
        #[test]
        fn repair_limit_skips_exactly_the_unneeded_repair(
            len in 1u64..60_000,
            members in 5u32..8,
            limits in proptest::collection::vec((0usize..40, proptest::option::of(0u32..8)), 0..6),
        ) {
            let p = params(members, 4096);
            let layout = Layout::new(p, len).unwrap();
            let cfg = PacerConfig { layout: layout.clone(), bitrate_bps: 1_000_000, start_codeword: 0, max_burst: 7, fdt_every: 8 };
            let mut pacer = Pacer::new(cfg, 0).unwrap();
            let mut limit: Option<u32> = None;
            // The limit in force when each codeword started (its first step).
            let mut at_start: std::collections::BTreeMap<u32, Option<u32>> = Default::default();
            let mut sent: std::collections::BTreeMap<u32, Vec<u32>> = Default::default();
            let mut step = 0usize;
            at_start.insert(0, None);
            while !pacer.is_done() {
                for (at, l) in &limits {
                    if *at == step {
                        pacer.set_repair_limit(*l);
                        limit = *l;
                    }
                }
                let before = pacer.codeword();
                if let Some(Step::Burst(b)) = pacer.poll(u64::MAX) {
                    sent.entry(b.sbn).or_default().extend(b.esis.clone());
                }
                if pacer.codeword() != before {
                    // Moved on while advancing: the next codeword takes the limit now.
                    at_start.entry(pacer.codeword()).or_insert(limit);
                }
                step += 1;
            }
            let mut skipped = 0u64;
            let mut repair_sent = 0u64;
            for sbn in 0..layout.codewords() {
                let k = layout.source_symbols(sbn);
                let m = layout.encoding_symbols(sbn) - k;
                let r = at_start.get(&sbn).copied().flatten().map_or(m, |r| r.min(m));
                let mut got = sent.get(&sbn).cloned().unwrap_or_default();
                got.sort_unstable();
                prop_assert_eq!(got, (0..k + r).collect::<Vec<_>>(), "codeword {}", sbn);
                skipped += u64::from(m - r);
                repair_sent += u64::from(r);
            }
            prop_assert_eq!(pacer.repair_counts(), RepairCounts { sent: repair_sent, skipped });
        }
    }

    #[test]
    fn repair_limit_spreads_the_codeword_over_its_slot() {
        let p = params(6, 8192);
        let layout = Layout::new(p, 100 * 20 * 4).unwrap(); // 4 codewords of 20 + 5
        let cfg = PacerConfig {
            layout,
            bitrate_bps: 8 * 100 * 20, // one codeword per second
            start_codeword: 0,
            max_burst: 1,
            fdt_every: 100,
        };
        let mut pacer = Pacer::new(cfg, 0).unwrap();
        pacer.set_repair_limit(Some(0));
        let mut times = Vec::new();
        while let Some(due) = pacer.next_due() {
            if let Some(Step::Burst(b)) = pacer.poll(due) {
                times.push((due, b.sbn, b.esis.start));
            }
        }
        // Codeword 0 started before the limit: 25 packets, 40 ms apart; the next ones send
        // 20 packets each, 50 ms apart, and every codeword still starts on its second.
        assert_eq!(times.iter().filter(|t| t.1 == 0).count(), 25);
        assert_eq!(times[1].0, 40_000_000);
        let c1: Vec<_> = times.iter().filter(|t| t.1 == 1).collect();
        assert_eq!(c1.len(), 20);
        assert_eq!((c1[0].0, c1[1].0), (1_000_000_000, 1_050_000_000));
        assert_eq!(times.iter().filter(|t| t.1 == 3).count(), 20);
        assert_eq!(
            pacer.repair_counts(),
            RepairCounts {
                sent: 5,
                skipped: 15
            }
        );
    }

    #[test]
    fn timing_is_exact_and_starts_immediately() {
        let p = params(6, 8192);
        let layout = Layout::new(p, 100 * 20 * 10).unwrap(); // 10 full codewords
        let cfg = PacerConfig {
            layout: layout.clone(),
            bitrate_bps: 8 * 100 * 20, // one codeword per second
            start_codeword: 0,
            max_burst: 64,
            fdt_every: 8,
        };
        let steps = simulate(cfg, 0);
        assert_eq!(steps[0], (1_000, Step::Fdt { before_codeword: 0 }));
        assert!(matches!(&steps[1], (1_000, Step::Burst(b)) if b.sbn == 0 && b.esis.start == 0));
        // The last codeword starts 9 s after the first one.
        let first_of_last = steps
            .iter()
            .find(|(_, s)| matches!(s, Step::Burst(b) if b.sbn == 9))
            .unwrap();
        assert_eq!(first_of_last.0, 1_000 + 9_000_000_000);
        assert_eq!(send_rate_bps(&layout, 1000), 1000 * 25 * 128 / 2000);
    }

    #[test]
    fn pause_resume_and_seek() {
        let p = params(6, 8192);
        let layout = Layout::new(p, 100 * 20 * 10).unwrap(); // 10 full codewords
        let cfg = PacerConfig {
            layout,
            bitrate_bps: 8 * 100 * 20, // one codeword per second
            start_codeword: 0,
            max_burst: 64,
            fdt_every: 8,
        };
        let sec = 1_000_000_000u64;
        let mut p = Pacer::new(cfg, 0).unwrap();
        while let Some(s) = p.poll(sec / 2) {
            assert!(matches!(s, Step::Fdt { .. }) || matches!(&s, Step::Burst(b) if b.sbn == 0));
        }
        let due = p.next_due().unwrap();
        p.pause(sec);
        assert!(p.is_paused() && p.next_due().is_none() && p.poll(100 * sec).is_none());
        // Paused from 1 s to 4 s: everything comes 3 s later than it would have.
        p.resume(4 * sec);
        assert!(!p.is_paused());
        assert_eq!(p.next_due(), Some(due + 3 * sec));
        // Seek: the FDT and codeword 7 at once, codeword 8 one second later.
        p.seek(7, 10 * sec).unwrap();
        assert_eq!(p.poll(10 * sec), Some(Step::Fdt { before_codeword: 7 }));
        assert!(
            matches!(p.poll(10 * sec), Some(Step::Burst(b)) if b.sbn == 7 && b.esis.start == 0)
        );
        while p.poll(11 * sec - 1).is_some() {}
        assert_eq!(p.codeword(), 8);
        assert_eq!(p.next_due(), Some(11 * sec));
        // A seek while paused stays paused; out of range is refused and changes nothing.
        p.pause(12 * sec);
        p.seek(2, 13 * sec).unwrap();
        assert!(p.next_due().is_none());
        assert!(p.seek(10, 13 * sec).is_err());
        p.resume(15 * sec);
        assert_eq!(p.poll(15 * sec), Some(Step::Fdt { before_codeword: 2 }));
        // After the last codeword a seek back makes it live again.
        p.seek(9, 20 * sec).unwrap();
        while p.poll(100 * sec).is_some() {}
        assert!(p.is_done());
        p.seek(0, 200 * sec).unwrap();
        assert!(!p.is_done());
        assert_eq!(p.poll(200 * sec), Some(Step::Fdt { before_codeword: 0 }));
    }

    #[test]
    fn rejects_bad_config() {
        let layout = Layout::new(params(6, 8192), 5000).unwrap();
        let cfg = PacerConfig {
            layout,
            bitrate_bps: 1,
            start_codeword: 3,
            max_burst: 1,
            fdt_every: 1,
        };
        assert!(matches!(
            Pacer::new(cfg.clone(), 0),
            Err(PacerError::BadStart { .. })
        ));
        let cfg = PacerConfig {
            start_codeword: 0,
            bitrate_bps: 0,
            ..cfg
        };
        assert!(Pacer::new(cfg, 0).is_err());
    }

    /// The playback deadline is the nominal schedule: with a start-up burst the steps
    /// are due earlier than it by the burst's gain, without one at it; paused: none.
    #[test]
    fn playback_deadline_leads_by_the_burst_gain() {
        let layout = Layout::new(params(5, 4096), 2_000_000).unwrap();
        let cfg = PacerConfig {
            layout,
            bitrate_bps: 1_000_000,
            start_codeword: 0,
            max_burst: 8,
            fdt_every: 1_000,
        };
        let mut plain = Pacer::new(cfg.clone(), 1_000).unwrap();
        let mut burst = Pacer::new(cfg, 1_000)
            .unwrap()
            .with_start_burst(StartBurst {
                media_ms: 1_000,
                factor: 4,
            });
        let mut last_lead = 0;
        for _ in 0..2_000 {
            let (Some(pd), Some(bd)) = (plain.next_due(), burst.next_due()) else {
                break;
            };
            assert_eq!(plain.playback_deadline_ns(), Some(pd));
            let lead = burst.playback_deadline_ns().unwrap() - bd;
            assert!(lead >= last_lead && lead <= 750_000_000, "{lead}");
            last_lead = lead;
            plain.advance();
            burst.advance();
        }
        assert!(last_lead >= 740_000_000, "the burst's gain: {last_lead}");
        burst.pause(5);
        assert_eq!(burst.playback_deadline_ns(), None);
    }
}
