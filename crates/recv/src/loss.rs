//! The client's measured loss, for the loss reports of its keepalives (adaptive repair).
//!
//! A [`LossMeter`] is fed the receive core's cumulative counters (symbols missing below the
//! highest ESI received of their codeword, corrupt ones included, and symbols received
//! valid) with the caller's clock, and gives the loss rate over
//! a sliding window: the last [`LossMeter::window`] of samples. Sans-IO: no clock of its own.

use std::collections::VecDeque;
use std::time::Duration;

/// Default window of the measured loss.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(4);
/// Samples are kept at most this often (bounds the memory to window / this).
const SAMPLE_EVERY: Duration = Duration::from_millis(100);
/// Fewest symbols expected over the window for a loss rate: fewer say too little (a report
/// of 0 % from a handful of packets would take the repair away).
pub const MIN_EXPECTED: u64 = 200;

/// Cumulative counters at one time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Sample {
    at: Duration,
    /// Symbols expected but missing or corrupt, so far.
    bad: u64,
    /// Symbols expected so far (valid + bad).
    expected: u64,
}

/// Loss over a sliding window (see the module documentation).
#[derive(Clone, Debug)]
pub struct LossMeter {
    window: Duration,
    samples: VecDeque<Sample>,
}

impl LossMeter {
    /// A meter over `window` (at least [`SAMPLE_EVERY`]).
    pub fn new(window: Duration) -> LossMeter {
        LossMeter {
            window: window.max(SAMPLE_EVERY),
            samples: VecDeque::new(),
        }
    }

    /// The window.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// Records the cumulative counters at `at`: `bad` symbols known missing or corrupt and
    /// `valid` symbols received intact. Samples closer than 100 ms to the last one replace it.
    pub fn record(&mut self, at: Duration, bad: u64, valid: u64) {
        let s = Sample {
            at,
            bad,
            expected: bad.saturating_add(valid),
        };
        let several = self.samples.len() > 1;
        match self.samples.back_mut() {
            Some(last) if several && at.saturating_sub(last.at) < SAMPLE_EVERY => *last = s,
            _ => self.samples.push_back(s),
        }
        // Keep one sample at or before the window's start, as the base of the difference.
        while self.samples.len() > 2
            && self
                .samples
                .get(1)
                .is_some_and(|b| at.saturating_sub(b.at) >= self.window)
        {
            self.samples.pop_front();
        }
    }

    /// The loss rate over the window, in [0, 1]; `None` while fewer than [`MIN_EXPECTED`]
    /// symbols were expected over it.
    pub fn loss_rate(&self) -> Option<f64> {
        let (first, last) = (self.samples.front()?, self.samples.back()?);
        // A single sample is measured from the start of the stream (counters at 0).
        let (bad, expected) = if self.samples.len() == 1 {
            (last.bad, last.expected)
        } else {
            (
                last.bad.saturating_sub(first.bad),
                last.expected.saturating_sub(first.expected),
            )
        };
        (expected >= MIN_EXPECTED).then(|| bad as f64 / expected as f64)
    }
}

impl Default for LossMeter {
    fn default() -> Self {
        LossMeter::new(DEFAULT_WINDOW)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn nothing_expected_no_rate() {
        let mut m = LossMeter::default();
        assert_eq!(m.loss_rate(), None);
        m.record(ms(0), 0, 0);
        assert_eq!(m.loss_rate(), None);
        m.record(ms(200), 5, 95);
        assert_eq!(m.loss_rate(), None, "100 symbols say too little");
        m.record(ms(400), 10, 190);
        assert_eq!(m.loss_rate(), Some(0.05));
    }

    #[test]
    fn old_loss_leaves_the_window() {
        let mut m = LossMeter::new(Duration::from_secs(1));
        // 10 % loss for the first second, then none.
        let (mut bad, mut valid) = (0u64, 0u64);
        for t in 0..30u64 {
            if t < 10 {
                bad += 10;
                valid += 90;
            } else {
                valid += 100;
            }
            m.record(ms(t * 100), bad, valid);
            if t == 9 {
                assert!(m.loss_rate().unwrap() > 0.09);
            }
        }
        assert_eq!(m.loss_rate(), Some(0.0));
        assert!(m.samples.len() <= 12, "{}", m.samples.len());
    }

    proptest! {
        /// A steady loss rate is measured as that rate, whatever the sample times.
        #[test]
        fn steady_rate_is_measured(per_mille in 0u64..1000, steps in proptest::collection::vec(1u64..400, 2..200)) {
            // 1000 symbols a step: always enough for a rate.
            let mut m = LossMeter::new(Duration::from_secs(2));
            let (mut t, mut n) = (0u64, 0u64);
            for dt in steps {
                t += dt;
                n += 1000;
                m.record(ms(t), n * per_mille / 1000, n - n * per_mille / 1000);
                let r = m.loss_rate().unwrap();
                prop_assert!((r - per_mille as f64 / 1000.0).abs() < 1e-9, "{r}");
            }
        }
    }
}
