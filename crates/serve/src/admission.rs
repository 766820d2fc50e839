//! Admission control: whether one more session fits, decided by a pure function over a
//! snapshot of the streaming sessions and the configured limits.

use std::collections::HashSet;
use std::net::IpAddr;

use isnode_store::Layout;

use crate::metrics::Limit;
use crate::session::blocks_of;

/// The limits a new session is admitted under.
#[derive(Clone, Debug)]
pub(crate) struct Limits {
    /// Most streaming sessions per client IP address.
    pub max_sessions_per_client: u32,
    /// Most total send rate of the streaming sessions, bits per second.
    pub max_bitrate_bps: u64,
    /// The block pool's bound on working sets (`None`: the engine does not use the pool).
    pub pool: Option<PoolLimit>,
}

/// The block pool as admission sees it.
#[derive(Clone, Debug)]
pub(crate) struct PoolLimit {
    /// Blocks the pool holds.
    pub slots: usize,
    /// Slots kept free beyond the working sets (rebuilds, in-flight sends).
    pub reserve_slots: usize,
    /// Codewords (the current one included) whose blocks a session keeps in the pool.
    pub lookahead_codewords: u32,
    /// The configured pool size (the `value` of a refusal).
    pub cache_size_bytes: u64,
}

/// What one session asks of the server.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Demand<'a> {
    /// The client's address.
    pub peer_ip: IpAddr,
    /// The session's send rate.
    pub send_rate_bps: u64,
    /// The object's TOI (sessions of one object share its blocks).
    pub toi: u32,
    /// The object's layout.
    pub layout: &'a Layout,
    /// The codeword the session is at (or starts from).
    pub codeword: u32,
}

/// Why a session was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// The limit that was hit.
    pub limit: Limit,
    /// Its configured value.
    pub value: u64,
    /// Human-readable detail.
    pub reason: String,
}

/// Admits `new` beside the streaming sessions `active`, or says which limit refuses it.
/// Checked in order: sessions per client, bitrate, block pool.
pub(crate) fn admit(
    limits: &Limits,
    active: &[Demand<'_>],
    new: &Demand<'_>,
) -> Result<(), Refusal> {
    let mine = active.iter().filter(|s| s.peer_ip == new.peer_ip).count();
    if mine >= limits.max_sessions_per_client as usize {
        return Err(Refusal {
            limit: Limit::MaxSessionsPerClient,
            value: u64::from(limits.max_sessions_per_client),
            reason: format!("{} already has {mine} sessions", new.peer_ip),
        });
    }
    let used = active
        .iter()
        .fold(0u64, |sum, s| sum.saturating_add(s.send_rate_bps));
    if used.saturating_add(new.send_rate_bps) > limits.max_bitrate_bps {
        return Err(Refusal {
            limit: Limit::MaxBitrateBps,
            value: limits.max_bitrate_bps,
            reason: format!(
                "bitrate budget exhausted ({used} of {} bit/s in use, {} more needed)",
                limits.max_bitrate_bps, new.send_rate_bps
            ),
        });
    }
    if let Some(pool) = &limits.pool {
        let blocks = working_set(pool.lookahead_codewords, active.iter().chain([new]));
        if blocks.saturating_add(pool.reserve_slots) > pool.slots {
            return Err(Refusal {
                limit: Limit::CacheSizeBytes,
                value: pool.cache_size_bytes,
                reason: format!(
                    "the block pool ({} blocks) cannot hold the {blocks} blocks the sessions need",
                    pool.slots
                ),
            });
        }
    }
    Ok(())
}

/// Distinct blocks the sessions keep in the pool: each its next `lookahead` codewords.
fn working_set<'a>(lookahead: u32, sessions: impl Iterator<Item = &'a Demand<'a>>) -> usize {
    let mut blocks: HashSet<(u32, u32, u64)> = HashSet::new();
    for s in sessions {
        let range = s.codeword..s.codeword.saturating_add(lookahead);
        for (m, b) in blocks_of(s.layout, range) {
            blocks.insert((s.toi, m, b));
        }
    }
    blocks.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn layout(codewords: u64) -> Layout {
        let p = crate::test_params();
        Layout::new(p, codewords * 20 * 1024).unwrap()
    }

    fn unlimited() -> Limits {
        Limits {
            max_sessions_per_client: u32::MAX,
            max_bitrate_bps: u64::MAX,
            pool: None,
        }
    }

    fn demand(l: &Layout, peer: u8, rate: u64, toi: u32, codeword: u32) -> Demand<'_> {
        Demand {
            peer_ip: IpAddr::from([10, 0, 0, peer]),
            send_rate_bps: rate,
            toi,
            layout: l,
            codeword,
        }
    }

    #[test]
    fn refusals_name_their_limit() {
        let l = layout(10);
        let a = [demand(&l, 1, 600, 1, 0), demand(&l, 1, 300, 1, 0)];
        let limits = Limits {
            max_sessions_per_client: 2,
            ..unlimited()
        };
        let r = admit(&limits, &a, &demand(&l, 1, 1, 1, 0)).unwrap_err();
        assert_eq!((r.limit, r.value), (Limit::MaxSessionsPerClient, 2));
        assert!(admit(&limits, &a, &demand(&l, 2, 1, 1, 0)).is_ok());
        let limits = Limits {
            max_bitrate_bps: 1000,
            ..unlimited()
        };
        assert!(admit(&limits, &a, &demand(&l, 2, 100, 1, 0)).is_ok());
        let r = admit(&limits, &a, &demand(&l, 2, 101, 1, 0)).unwrap_err();
        assert_eq!((r.limit, r.value), (Limit::MaxBitrateBps, 1000));
        assert!(r.reason.contains("900 of 1000"), "{}", r.reason);
    }

    #[test]
    fn viewers_of_one_position_share_the_pool() {
        let l = layout(10);
        let need = working_set(3, [demand(&l, 1, 1, 1, 0)].iter());
        assert!(need > 0);
        let limits = Limits {
            pool: Some(PoolLimit {
                slots: need + 2,
                reserve_slots: 2,
                lookahead_codewords: 3,
                cache_size_bytes: 12345,
            }),
            ..unlimited()
        };
        let a = [demand(&l, 1, 1, 1, 0)];
        assert!(admit(&limits, &[], &a[0]).is_ok());
        // Same object, same position: no more blocks.
        assert!(admit(&limits, &a, &demand(&l, 2, 1, 1, 0)).is_ok());
        // Another object: its blocks do not fit.
        let r = admit(&limits, &a, &demand(&l, 2, 1, 2, 0)).unwrap_err();
        assert_eq!((r.limit, r.value), (Limit::CacheSizeBytes, 12345));
    }

    proptest! {
        /// With only the per-client and bitrate limits, admission is exactly "fewer than
        /// max sessions of this client, and the rates fit".
        #[test]
        fn per_client_and_bitrate_are_exact(
            active in prop::collection::vec((0u8..4, 0u64..1000), 0..40),
            new in (0u8..4, 0u64..1000),
            max_per_client in 0u32..20,
            max_bitrate in 0u64..40_000,
        ) {
            let l = layout(4);
            let act: Vec<Demand> = active.iter().map(|&(p, r)| demand(&l, p, r, 1, 0)).collect();
            let nd = demand(&l, new.0, new.1, 1, 0);
            let limits = Limits { max_sessions_per_client: max_per_client, max_bitrate_bps: max_bitrate, pool: None };
            let mine = active.iter().filter(|(p, _)| *p == new.0).count();
            let used: u64 = active.iter().map(|(_, r)| r).sum();
            let expect = mine < max_per_client as usize && used + new.1 <= max_bitrate;
            prop_assert_eq!(admit(&limits, &act, &nd).is_ok(), expect);
        }

        /// Admission is monotone: whatever is admitted beside some sessions is admitted
        /// beside any subset of them (ending sessions never causes a refusal).
        #[test]
        fn fewer_sessions_never_refuse_more(
            active in prop::collection::vec((0u8..3, 0u64..1000, 1u32..4, 0u32..12), 0..24),
            keep in prop::collection::vec(any::<bool>(), 24),
            new in (0u8..3, 0u64..1000, 1u32..4, 0u32..12),
            max_per_client in 1u32..10,
            max_bitrate in 0u64..20_000,
            slots in 0usize..200,
        ) {
            let l = layout(12);
            let act: Vec<Demand> = active.iter().map(|&(p, r, t, c)| demand(&l, p, r, t, c)).collect();
            let sub: Vec<Demand> = act.iter().zip(&keep).filter(|(_, k)| **k).map(|(d, _)| *d).collect();
            let nd = demand(&l, new.0, new.1, new.2, new.3);
            let limits = Limits {
                max_sessions_per_client: max_per_client,
                max_bitrate_bps: max_bitrate,
                pool: Some(PoolLimit { slots, reserve_slots: 2, lookahead_codewords: 3, cache_size_bytes: 1 }),
            };
            if admit(&limits, &act, &nd).is_ok() {
                prop_assert!(admit(&limits, &sub, &nd).is_ok());
            }
        }
    }
}
