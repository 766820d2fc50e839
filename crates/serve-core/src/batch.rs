//! How early a burst may leave, so that each wake-up of a data-plane thread sends a batch.
//!
//! A thread sends every burst due within the *pacing slack* of its wake-up time, then sleeps
//! until the next burst is due. A wake-up costs the same whatever it sends (a context switch,
//! and at low load a cold cache and an idle exit), so at low load, when few bursts are due
//! within a fixed slack, the cost per byte rises. [`BatchWindow`] sizes the slack from the
//! thread's measured burst rate: [`KNEE_BURSTS_PER_WAKE`] bursts per wake-up at
//! [`KNEE_BURSTS_PER_S`], more below that rate and fewer above it (the slack goes with the
//! square of the burst interval), between [`MIN_SLACK_NS`] (the fixed slack measured best at
//! 200 streams and up) and [`MAX_SLACK_NS`] (a burst leaves at most that early: a few tens of
//! kilobytes of a client's buffer of a second or more). Pure: the caller gives the clock and
//! the counts.
//!
//! Why the square (`bench load`, sendfile, 8 titles of 30 s at 10 Mbit/s behind veth, the same
//! binary with 16 bursts per wake-up and 32 ms at most, against 32 bursts and 48 ms, twice in
//! one run, s per title GB): 50 streams 0.470 / 0.332 → 0.355 / 0.309 (larger batches pay), 100
//! streams 0.370 / 0.293 → 0.328 / 0.349 (even), 200 streams 0.289 / 0.274 → 0.351 / 0.311
//! (they cost). At 50 streams a thread sends about 680 bursts a second: 32 per wake-up is a
//! 47 ms slack; at 100, 1 360: 16; at 200 the minimum.

/// The slack at high load (and before anything was measured), ns.
pub const MIN_SLACK_NS: u64 = 8_000_000;
/// The largest slack, ns: at 10 Mbit/s a burst leaving this early is 60 KB ahead, within
/// one 64 KiB datagram of the client's buffer of a second or more (100 ms saved more at 50
/// streams but 2 of 86 streams fell short of a 1 s window).
pub const MAX_SLACK_NS: u64 = 48_000_000;
/// The burst rate of one thread (per second) at which a wake-up should find
/// [`KNEE_BURSTS_PER_WAKE`] bursts: 50 sessions of 10 Mbit/s.
const KNEE_BURSTS_PER_S: u64 = 1_360;
/// Bursts a wake-up should find at [`KNEE_BURSTS_PER_S`].
const KNEE_BURSTS_PER_WAKE: u64 = 16;
/// The burst rate is measured over windows of this length, ns.
const WINDOW_NS: u64 = 200_000_000;

/// The pacing slack of one data-plane thread, from its measured burst rate.
#[derive(Clone, Debug)]
pub struct BatchWindow {
    /// Start of the current measuring window, ns.
    window_start_ns: u64,
    /// Bursts sent in the current window.
    bursts: u64,
    /// The slack in force, ns.
    slack_ns: u64,
}

impl BatchWindow {
    /// A window starting at `now_ns`, at the minimum slack.
    pub fn new(now_ns: u64) -> BatchWindow {
        BatchWindow {
            window_start_ns: now_ns,
            bursts: 0,
            slack_ns: MIN_SLACK_NS,
        }
    }

    /// The slack in force, ns.
    #[inline]
    pub fn slack_ns(&self) -> u64 {
        self.slack_ns
    }

    /// Counts `bursts` sent at `now_ns`; at the end of a window, sets the slack from the
    /// window's burst rate.
    #[inline]
    pub fn record(&mut self, bursts: u64, now_ns: u64) {
        self.bursts = self.bursts.saturating_add(bursts);
        let elapsed_ns = now_ns.saturating_sub(self.window_start_ns);
        if elapsed_ns < WINDOW_NS {
            return;
        }
        self.slack_ns = slack_for(self.bursts, elapsed_ns);
        self.window_start_ns = now_ns;
        self.bursts = 0;
    }
}

/// The slack when `bursts` were sent in `elapsed_ns`: `KNEE_BURSTS_PER_WAKE ×
/// KNEE_BURSTS_PER_S / rate²` seconds for a rate of `bursts / elapsed` per second, within
/// [`MIN_SLACK_NS`]..=[`MAX_SLACK_NS`]. No bursts: the minimum (an idle thread sleeps anyway,
/// and the first sessions of a quiet server start at once).
fn slack_for(bursts: u64, elapsed_ns: u64) -> u64 {
    if bursts == 0 {
        return MIN_SLACK_NS;
    }
    // = K × 1e9 / rate² with rate = bursts × 1e9 / elapsed, in integers.
    let k = u128::from(KNEE_BURSTS_PER_WAKE * KNEE_BURSTS_PER_S);
    let elapsed = u128::from(elapsed_ns);
    let b = u128::from(bursts);
    let wanted = k.saturating_mul(elapsed).saturating_mul(elapsed)
        / b.saturating_mul(b).saturating_mul(1_000_000_000);
    let wanted = u64::try_from(wanted).unwrap_or(u64::MAX);
    wanted.clamp(MIN_SLACK_NS, MAX_SLACK_NS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn high_load_keeps_the_minimum() {
        // 10 000 bursts a second, and 2 700 (200 sessions of 10 Mbit/s on a thread: 3 ms).
        assert_eq!(slack_for(2_000, WINDOW_NS), MIN_SLACK_NS);
        assert_eq!(slack_for(540, WINDOW_NS), MIN_SLACK_NS);
    }

    #[test]
    fn low_load_grows_with_the_square_up_to_the_cap() {
        // At the knee, 1 360 bursts a second: 16 come within 11.8 ms.
        let s = slack_for(272, WINDOW_NS);
        assert!((11_700_000..11_900_000).contains(&s), "{s}");
        // Half the rate: four times the slack, 32 bursts per wake-up.
        let s = slack_for(136, WINDOW_NS);
        assert!((47_000_000..=48_000_000).contains(&s), "{s}");
        // 50 bursts a second: capped.
        assert_eq!(slack_for(10, WINDOW_NS), MAX_SLACK_NS);
        assert_eq!(slack_for(0, WINDOW_NS), MIN_SLACK_NS);
    }

    #[test]
    fn the_window_sets_the_slack_at_its_end_only() {
        let mut w = BatchWindow::new(1_000);
        w.record(10, 1_000 + WINDOW_NS / 2);
        assert_eq!(w.slack_ns(), MIN_SLACK_NS);
        w.record(0, 1_000 + WINDOW_NS);
        assert_eq!(w.slack_ns(), MAX_SLACK_NS);
        // The next window starts empty: a busy one brings the minimum back.
        w.record(100_000, 1_000 + 2 * WINDOW_NS);
        assert_eq!(w.slack_ns(), MIN_SLACK_NS);
    }

    proptest! {
        #[test]
        fn always_within_bounds(bursts in any::<u64>(), elapsed in any::<u64>()) {
            let s = slack_for(bursts, elapsed);
            prop_assert!((MIN_SLACK_NS..=MAX_SLACK_NS).contains(&s));
        }

        #[test]
        fn never_grows_with_load(a in 1u64..1_000_000, b in 1u64..1_000_000) {
            let (lo, hi) = (a.min(b), a.max(b));
            prop_assert!(slack_for(hi, WINDOW_NS) <= slack_for(lo, WINDOW_NS));
        }
    }
}
