//! The sans-IO pacing core of one session.
//!
//! Given the layout of an object, its bitrate and the caller's clock (nanoseconds on any
//! monotonic time line), a [`Pacer`] says what to send next and when: the FDT instance at
//! the start and before every `fdt_every`-th codeword, then every codeword's n packets
//! (source then repair, member run by member run) spread evenly over the codeword's
//! playing time `k·E·8 / bitrate`, in bursts that never cross a member run or a block
//! boundary and never exceed `max_burst` packets (so one burst is one GSO send from one
//! cached block).
//!
//! The schedule is exact integer arithmetic from the session start: no drift, and a
//! caller that falls behind catches up (every step becomes due at once) without changing
//! what is sent.

use std::ops::Range;

use isnode_store::Layout;

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
        };
        p.settle();
        Ok(p)
    }

    /// The configuration.
    pub fn config(&self) -> &PacerConfig {
        &self.cfg
    }

    /// The codeword being sent (or the object's codeword count when done).
    pub fn codeword(&self) -> u32 {
        self.sbn
    }

    /// True once everything has been sent.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Moves the cursor onto the next step and computes when it is due.
    fn settle(&mut self) {
        self.settle_cursor();
        self.due_ns = self.compute_next_due();
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
                self.source_before += u64::from(layout.source_symbols(self.sbn));
                self.sbn += 1;
                self.member = 0;
                self.sent_in_codeword = 0;
                self.esi = 0;
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
            if self.esi >= run.esis.end {
                self.member += 1;
                self.esi = 0;
                continue;
            }
            return;
        }
    }

    /// The time (ns) at which the next step is due, or `None` when done.
    pub fn next_due(&self) -> Option<u64> {
        self.due_ns
    }

    fn compute_next_due(&self) -> Option<u64> {
        if self.done {
            return None;
        }
        let layout = &self.cfg.layout;
        let e = u128::from(layout.params().symbol_len);
        let rate = u128::from(self.cfg.bitrate_bps);
        if self.sbn >= layout.codewords() {
            return Some(self.start_ns);
        }
        let k = u128::from(layout.source_symbols(self.sbn));
        let n = u128::from(layout.encoding_symbols(self.sbn));
        let sent = u128::from(self.sent_in_codeword);
        // codeword start + T_c * sent / n, with T_c = k * E * 8 / rate seconds.
        let num = (u128::from(self.source_before) * n + k * sent) * e * 8 * 1_000_000_000;
        let offset = num / (rate * n);
        Some(
            self.start_ns
                .saturating_add(u64::try_from(offset).unwrap_or(u64::MAX)),
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
        let count = (run.esis.end - self.esi)
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
        if self.done {
            return;
        }
        match self.current() {
            Step::Fdt { .. } => self.fdt_pending = false,
            Step::Burst(b) => {
                self.esi = b.esis.end;
                self.sent_in_codeword += b.len();
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
    use isnode_store::VolumeParams;
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
}
