//! Failed authentications slow their client down (sans-IO: the caller gives the time).
//!
//! Each client (an IPv4 address, an IPv6 /64) has a bucket of [`BURST`] failures that
//! refills at one per [`REFILL_NS`]. A failure takes one; a client whose bucket is empty is
//! answered `429` with `Retry-After` until one has come back, before its token is even
//! looked at. The table holds at most [`MAX_CLIENTS`] clients: when full, the client
//! whose bucket is fullest (the least suspect) is forgotten, so an attacker spreading over
//! many addresses cannot make the server forget the ones it is slowing down.

use std::collections::HashMap;
use std::net::IpAddr;

/// Failures a client may make in a burst before it is slowed down.
pub const BURST: u32 = 10;
/// One failure comes back per this many nanoseconds (one a second).
pub const REFILL_NS: u64 = 1_000_000_000;
/// Most clients remembered.
pub const MAX_CLIENTS: usize = 4096;

/// A client's bucket: failures left at `at_ns`.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    /// Failures left, in units of 1/[`REFILL_NS`] of a failure (so refill is exact).
    left_ns: u64,
    /// When `left_ns` was last brought up to date.
    at_ns: u64,
}

impl Bucket {
    fn full(now_ns: u64) -> Bucket {
        Bucket {
            left_ns: u64::from(BURST) * REFILL_NS,
            at_ns: now_ns,
        }
    }

    fn refill(&mut self, now_ns: u64) {
        let grown = self
            .left_ns
            .saturating_add(now_ns.saturating_sub(self.at_ns));
        self.left_ns = grown.min(u64::from(BURST) * REFILL_NS);
        self.at_ns = self.at_ns.max(now_ns);
    }
}

/// The failure buckets of the clients.
#[derive(Debug, Default)]
pub struct Throttle {
    clients: HashMap<IpAddr, Bucket>,
}

impl Throttle {
    /// `None` if `client` may try now; else the whole seconds it must wait (at least 1).
    pub fn wait_s(&mut self, client: IpAddr, now_ns: u64) -> Option<u64> {
        let b = self.clients.get_mut(&client)?;
        b.refill(now_ns);
        if b.left_ns >= REFILL_NS {
            return None;
        }
        let missing_ns = REFILL_NS - b.left_ns;
        Some(missing_ns.div_ceil(1_000_000_000).max(1))
    }

    /// Counts a failure of `client`.
    pub fn failed(&mut self, client: IpAddr, now_ns: u64) {
        if !self.clients.contains_key(&client) && self.clients.len() >= MAX_CLIENTS {
            self.forget_least_suspect(now_ns);
        }
        let b = self
            .clients
            .entry(client)
            .or_insert_with(|| Bucket::full(now_ns));
        b.refill(now_ns);
        b.left_ns = b.left_ns.saturating_sub(REFILL_NS);
        debug_assert!(self.clients.len() <= MAX_CLIENTS);
    }

    /// Forgets every client (tests that make many failures on purpose).
    pub fn clear(&mut self) {
        self.clients.clear();
    }

    /// Clients remembered.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.clients.len()
    }

    fn forget_least_suspect(&mut self, now_ns: u64) {
        let fullest = self
            .clients
            .iter_mut()
            .map(|(ip, b)| {
                b.refill(now_ns);
                (*ip, b.left_ns)
            })
            .max_by_key(|&(_, left)| left)
            .map(|(ip, _)| ip);
        if let Some(ip) = fullest {
            self.clients.remove(&ip);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn ip(n: u32) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(n))
    }

    #[test]
    fn a_burst_then_one_a_second() {
        let mut t = Throttle::default();
        let c = ip(1);
        for i in 0..BURST {
            assert_eq!(t.wait_s(c, 0), None, "failure {i}");
            t.failed(c, 0);
        }
        assert_eq!(t.wait_s(c, 0), Some(1));
        assert_eq!(t.wait_s(c, REFILL_NS / 2), Some(1));
        assert_eq!(t.wait_s(c, REFILL_NS), None);
        t.failed(c, REFILL_NS);
        assert_eq!(t.wait_s(c, REFILL_NS), Some(1));
        // Other clients are not slowed by it.
        assert_eq!(t.wait_s(ip(2), 0), None);
    }

    #[test]
    fn the_table_is_bounded_and_keeps_the_suspects() {
        let mut t = Throttle::default();
        let suspect = ip(7);
        for _ in 0..BURST {
            t.failed(suspect, 0);
        }
        for n in 100..100 + 2 * MAX_CLIENTS as u32 {
            t.failed(ip(n), 0);
            assert!(t.len() <= MAX_CLIENTS);
        }
        assert_eq!(t.wait_s(suspect, 0), Some(1), "the suspect was forgotten");
    }

    proptest::proptest! {
        #[test]
        fn never_more_than_the_burst_plus_the_refill(
            times in proptest::collection::vec(0u64..20_000_000_000, 1..200)
        ) {
            let mut sorted = times;
            sorted.sort_unstable();
            let mut t = Throttle::default();
            let c = ip(9);
            let mut allowed = 0u64;
            for &now in &sorted {
                if t.wait_s(c, now).is_none() {
                    allowed += 1;
                    t.failed(c, now);
                }
            }
            let span = sorted.last().copied().unwrap_or(0) - sorted[0];
            proptest::prop_assert!(allowed <= u64::from(BURST) + span / REFILL_NS + 1);
        }
    }
}
