//! Egress over the last minutes: a ring of per-second rates, filled by the control API's
//! sampler task (bounded memory: [`SAMPLES`] samples).

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};

use isnode_proto::status::EgressSample;

/// Samples kept: five minutes at one per second.
pub(crate) const SAMPLES: usize = 300;

#[derive(Debug, Default)]
struct Ring {
    samples: VecDeque<EgressSample>,
    /// The totals at the last sample: (time ns, UDP bytes, HTTP bytes).
    last: Option<(u64, u64, u64)>,
}

/// The ring of samples.
#[derive(Debug)]
pub(crate) struct EgressRing {
    capacity: usize,
    ring: Mutex<Ring>,
}

impl EgressRing {
    pub(crate) fn new(capacity: usize) -> EgressRing {
        EgressRing {
            capacity,
            ring: Mutex::new(Ring::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Ring> {
        self.ring.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the byte totals at `now_ns`; from the second call on, appends the rates
    /// since the previous call (dropping the oldest sample when full).
    pub(crate) fn sample(&self, now_ns: u64, udp_bytes: u64, http_bytes: u64) {
        let mut r = self.lock();
        if let Some((t0, u0, h0)) = r.last {
            let dt_ns = now_ns.saturating_sub(t0).max(1);
            let bps = |b1: u64, b0: u64| {
                let bits = u128::from(b1.saturating_sub(b0)) * 8 * 1_000_000_000;
                u64::try_from(bits / u128::from(dt_ns)).unwrap_or(u64::MAX)
            };
            let s = EgressSample {
                t_s: now_ns / 1_000_000_000,
                udp_bps: bps(udp_bytes, u0),
                http_bps: bps(http_bytes, h0),
            };
            if r.samples.len() >= self.capacity {
                r.samples.pop_front();
            }
            r.samples.push_back(s);
        }
        r.last = Some((now_ns, udp_bytes, http_bytes));
    }

    /// The samples, oldest first.
    pub(crate) fn samples(&self) -> Vec<EgressSample> {
        self.lock().samples.iter().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_from_totals_and_the_ring_is_bounded() {
        let r = EgressRing::new(2);
        r.sample(0, 0, 0);
        assert!(r.samples().is_empty());
        r.sample(1_000_000_000, 1000, 10);
        r.sample(2_000_000_000, 1500, 10);
        r.sample(4_000_000_000, 2500, 30);
        let s = r.samples();
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].t_s, s[0].udp_bps, s[0].http_bps), (2, 4000, 0));
        assert_eq!((s[1].t_s, s[1].udp_bps, s[1].http_bps), (4, 4000, 80));
    }
}
