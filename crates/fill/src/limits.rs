//! What strangers may ask of the origin: waits on fills bounded per client and in total,
//! and titles the origin lacks remembered for a while. Pure counting under a lock; the
//! caps come from the configuration in force at each call (a reload applies at once).
//!
//! A client is an IPv4 address or an IPv6 /64 (one host's privacy addresses, or one
//! customer's prefix, count as one client).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Titles remembered as missing at the origin, at most (oldest forgotten first).
const MAX_MISSES: usize = 10_000;

/// One client for the limits: an IPv4 address, or the /64 of an IPv6 address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ClientKey(u128);

impl ClientKey {
    /// The client of address `ip` (IPv4-mapped IPv6 addresses count as IPv4).
    pub fn of(ip: IpAddr) -> ClientKey {
        match ip {
            IpAddr::V4(v4) => ClientKey(u128::from(u32::from(v4))),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => ClientKey(u128::from(u32::from(v4))),
                None => ClientKey((u128::from(v6) >> 64) << 64 | 1 << 63),
            },
        }
    }
}

/// Why a wait was not allowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitRefused {
    /// `fill_max_waiters` requests wait already.
    Total(u32),
    /// `fill_max_waiters_per_client` requests of this client wait already.
    PerClient(u32),
}

impl std::fmt::Display for WaitRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WaitRefused::Total(n) => {
                write!(f, "{n} requests wait on fills already (fill_max_waiters)")
            }
            WaitRefused::PerClient(n) => write!(
                f,
                "{n} requests of this client wait on fills already (fill_max_waiters_per_client)"
            ),
        }
    }
}

#[derive(Debug, Default)]
struct Counts {
    total: u32,
    by_client: HashMap<ClientKey, u32>,
}

/// The requests waiting on fills now.
#[derive(Debug, Default)]
pub struct Waiters {
    counts: Arc<Mutex<Counts>>,
}

/// A wait allowed: counted until dropped (a request that ends, or whose client hangs up,
/// drops it).
#[derive(Debug)]
pub struct WaitPermit {
    counts: Arc<Mutex<Counts>>,
    client: ClientKey,
}

fn lock(c: &Mutex<Counts>) -> MutexGuard<'_, Counts> {
    c.lock().unwrap_or_else(|e| e.into_inner())
}

impl Waiters {
    /// Lets `client` wait if fewer than `max_total` requests wait and fewer than
    /// `max_per_client` of its own.
    pub fn enter(
        &self,
        client: ClientKey,
        (max_total, max_per_client): (u32, u32),
    ) -> Result<WaitPermit, WaitRefused> {
        let mut c = lock(&self.counts);
        if c.total >= max_total {
            return Err(WaitRefused::Total(max_total));
        }
        let mine = c.by_client.entry(client).or_insert(0);
        if *mine >= max_per_client {
            return Err(WaitRefused::PerClient(max_per_client));
        }
        *mine += 1;
        c.total += 1;
        Ok(WaitPermit {
            counts: self.counts.clone(),
            client,
        })
    }

    /// Requests waiting now.
    pub fn waiting(&self) -> u32 {
        lock(&self.counts).total
    }
}

impl Drop for WaitPermit {
    fn drop(&mut self) {
        let mut c = lock(&self.counts);
        c.total = c.total.saturating_sub(1);
        if let Some(n) = c.by_client.get_mut(&self.client) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                c.by_client.remove(&self.client);
            }
        }
    }
}

/// Titles the origin answered "not found" for, and when.
#[derive(Debug, Default)]
pub struct Misses {
    at: Mutex<HashMap<String, Instant>>,
}

impl Misses {
    /// Remembers that the origin lacks `name` now.
    pub fn remember(&self, name: &str, now: Instant) {
        let mut at = self.at.lock().unwrap_or_else(|e| e.into_inner());
        if at.len() >= MAX_MISSES && !at.contains_key(name) {
            let oldest = at.iter().min_by_key(|(_, t)| **t).map(|(n, _)| n.clone());
            if let Some(n) = oldest {
                at.remove(&n);
            }
        }
        at.insert(name.to_string(), now);
    }

    /// Whether the origin lacked `name` less than `ttl` ago (0: never remembered).
    pub fn recent(&self, name: &str, ttl: Duration, now: Instant) -> bool {
        let mut at = self.at.lock().unwrap_or_else(|e| e.into_inner());
        match at.get(name) {
            Some(t) if now.saturating_duration_since(*t) < ttl => true,
            Some(_) => {
                at.remove(name);
                false
            }
            None => false,
        }
    }

    /// Forgets `name` (it was found, or uploaded).
    pub fn forget(&self, name: &str) {
        let mut at = self.at.lock().unwrap_or_else(|e| e.into_inner());
        at.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(s: &str) -> ClientKey {
        ClientKey::of(s.parse().unwrap())
    }

    #[test]
    fn an_ipv6_64_is_one_client_and_v4_mapped_is_v4() {
        assert_eq!(key("2001:db8:1:2::1"), key("2001:db8:1:2:ffff::9"));
        assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
        assert_eq!(key("::ffff:192.0.2.7"), key("192.0.2.7"));
        assert_ne!(key("192.0.2.7"), key("192.0.2.8"));
        // An IPv6 /64 whose top bits equal an IPv4 address is still another client.
        assert_ne!(key("::"), key("0.0.0.0"));
    }

    #[test]
    fn waits_are_capped_in_total_and_per_client_and_given_back() {
        let w = Waiters::default();
        let a = key("192.0.2.1");
        let b = key("192.0.2.2");
        let p1 = w.enter(a, (3, 2)).unwrap();
        let _p2 = w.enter(a, (3, 2)).unwrap();
        assert_eq!(w.enter(a, (3, 2)).unwrap_err(), WaitRefused::PerClient(2));
        let _p3 = w.enter(b, (3, 2)).unwrap();
        assert_eq!(w.enter(b, (3, 2)).unwrap_err(), WaitRefused::Total(3));
        drop(p1);
        assert_eq!(w.waiting(), 2);
        assert!(w.enter(a, (3, 2)).is_ok());
    }

    #[test]
    fn a_miss_is_remembered_for_its_ttl_only() {
        let m = Misses::default();
        let t0 = Instant::now();
        m.remember("a.ts", t0);
        let ttl = Duration::from_secs(60);
        assert!(m.recent("a.ts", ttl, t0 + Duration::from_secs(59)));
        assert!(!m.recent("a.ts", ttl, t0 + Duration::from_secs(60)));
        assert!(!m.recent("a.ts", ttl, t0), "forgotten once expired");
        m.remember("b.ts", t0);
        assert!(!m.recent("b.ts", Duration::ZERO, t0), "0: never remembered");
        m.forget("b.ts");
        assert!(!m.recent("b.ts", ttl, t0));
    }

    proptest! {
        /// However permits are taken and dropped, the counts equal the permits held and
        /// never pass the caps.
        #[test]
        fn counts_match_the_permits_held(ops in proptest::collection::vec((0u8..4, any::<bool>()), 1..200)) {
            let w = Waiters::default();
            let mut held: Vec<WaitPermit> = Vec::new();
            for (client, take) in ops {
                if take {
                    if let Ok(p) = w.enter(ClientKey(u128::from(client)), (5, 2)) {
                        held.push(p);
                    }
                } else if !held.is_empty() {
                    held.remove(0);
                }
                prop_assert_eq!(w.waiting() as usize, held.len());
                prop_assert!(held.len() <= 5);
                for c in 0..4u128 {
                    prop_assert!(held.iter().filter(|p| p.client == ClientKey(c)).count() <= 2);
                }
            }
        }
    }
}
