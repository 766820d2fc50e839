//! Adaptive repair: how many of a codeword's m stored repair symbols a session sends, from
//! the loss its client reports in its keepalives. A pure function; the data plane applies it
//! to the pacer ([`crate::pacer::Pacer::set_repair_limit`]), so only fewer stored packets
//! are sent: parity is never computed while serving.
//!
//! The rule ([`repair_symbols`]):
//!
//! - No report yet (the first keepalive comes after about a second, or the client does not
//!   report): all m.
//! - Otherwise the loss the code must cover is the reported rate with a margin,
//!   `p = 1.5 · reported + 0.1 %` (the report is an average over the client's window, about
//!   4 s; the absolute part keeps a little repair on a clean network against a loss the
//!   window has not seen yet). Loss is taken to come in bursts of [`ASSUMED_BURST_LEN`]
//!   packets (a bursty channel has a fatter tail than independent losses of the same rate):
//!   a codeword of k + r packets sees loss bursts at rate p / 2 per packet, and r is the
//!   fewest repair symbols, from 0 to m, such that more than r / 2 bursts (more than r lost
//!   packets) happen with probability at most [`TARGET_FAILURE`] (10⁻³); m if none does.
//!
//! With k = 223, m = 32: a clean client (0 % reported) gets 4 repair symbols per codeword
//! (1.8 % overhead instead of 14.3 %), 1 % gets 14, 2 % gets 22, 5 % and more all 32.

use isnode_proto::keepalive::LossReport;

/// Largest probability that a codeword has more losses than the repair symbols sent.
pub const TARGET_FAILURE: f64 = 1e-3;
/// Relative margin on the reported loss.
pub const LOSS_MARGIN_FACTOR: f64 = 1.5;
/// Absolute margin on the reported loss.
pub const LOSS_MARGIN_ABS: f64 = 0.001;
/// Packets per loss burst the policy assumes.
pub const ASSUMED_BURST_LEN: u32 = 2;

/// Repair symbols (0..=m) to send per codeword of k source symbols for the client's last
/// loss report (`None`: no report yet, all m). See the module documentation.
pub fn repair_symbols(report: Option<LossReport>, k: u32, m: u32) -> u32 {
    let Some(report) = report else {
        return m;
    };
    let p = (report.rate() * LOSS_MARGIN_FACTOR + LOSS_MARGIN_ABS).min(1.0);
    (0..=m)
        .find(|&r| codeword_failure(k, r, p) <= TARGET_FAILURE)
        .unwrap_or(m)
}

/// The chance that a codeword of k + r packets loses more than r of them, losses coming
/// in bursts of [`ASSUMED_BURST_LEN`] at a packet loss rate `p`.
fn codeword_failure(k: u32, r: u32, p: f64) -> f64 {
    let b = ASSUMED_BURST_LEN;
    failure_probability(k + r, r / b, p / f64::from(b))
}

/// P(X > r) for X ~ Binomial(n, p): the chance that more than r of n packets are lost.
fn failure_probability(n: u32, r: u32, p: f64) -> f64 {
    if p <= 0.0 {
        return 0.0;
    }
    if p >= 1.0 {
        return if n > r { 1.0 } else { 0.0 };
    }
    // P(X <= r) by the pmf recurrence pmf(i+1) = pmf(i) · (n−i)/(i+1) · p/(1−p).
    let q = 1.0 - p;
    let mut pmf = q.powi(n as i32);
    let mut cdf = pmf;
    for i in 0..r.min(n) {
        pmf *= f64::from(n - i) / f64::from(i + 1) * p / q;
        cdf += pmf;
    }
    (1.0 - cdf).max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn at(units: u16) -> Option<LossReport> {
        LossReport::from_units(units)
    }

    #[test]
    fn the_documented_figures() {
        assert_eq!(repair_symbols(None, 223, 32), 32, "all m before a report");
        assert_eq!(repair_symbols(at(0), 223, 32), 4);
        assert_eq!(repair_symbols(at(100), 223, 32), 14);
        assert_eq!(repair_symbols(at(200), 223, 32), 22);
        assert_eq!(repair_symbols(at(500), 223, 32), 32);
        assert_eq!(repair_symbols(at(10_000), 223, 32), 32);
        assert_eq!(repair_symbols(at(0), 223, 0), 0);
    }

    #[test]
    fn binomial_tail() {
        assert_eq!(failure_probability(10, 10, 0.5), 0.0);
        assert!((failure_probability(1, 0, 0.25) - 0.25).abs() < 1e-12);
        // P(X > 1) for n = 2, p = 0.5 is 0.25.
        assert!((failure_probability(2, 1, 0.5) - 0.25).abs() < 1e-12);
        assert_eq!(failure_probability(5, 1, 0.0), 0.0);
        assert_eq!(failure_probability(5, 1, 1.0), 1.0);
    }

    proptest! {
        /// Within 0..=m, monotone in the loss, and enough: unless it is m, the chosen r
        /// meets the target at the margin's loss, and r − 1 would not.
        #[test]
        fn bounded_monotone_and_enough(units in 0u16..=10_000, more in 0u16..=10_000, k in 1u32..240, m in 0u32..32) {
            let m = m.min(255 - k);
            let r = repair_symbols(at(units), k, m);
            prop_assert!(r <= m);
            let hi = units.saturating_add(more).min(10_000);
            prop_assert!(repair_symbols(at(hi), k, m) >= r);
            let p = (f64::from(units) / 1e4 * LOSS_MARGIN_FACTOR + LOSS_MARGIN_ABS).min(1.0);
            if r < m {
                prop_assert!(codeword_failure(k, r, p) <= TARGET_FAILURE);
            }
            if r > 0 {
                prop_assert!(codeword_failure(k, r - 1, p) > TARGET_FAILURE);
            }
        }
    }
}
