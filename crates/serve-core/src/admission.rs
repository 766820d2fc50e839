//! Admission control: whether one more session fits, decided by a pure function over a
//! snapshot of the streaming sessions and the configured limits ([`admit`]); the server
//! reads those from its state for the session and broadcast routes (`isnode-serve`'s
//! `admit.rs`).
//!
//! Start-up bursts: sessions are admitted against the bitrate budget at their plain send
//! rate (all m repair symbols, even when adaptive repair sends fewer: a client's loss may
//! rise at any moment and an admitted stream keeps its rate), so a burst never causes a
//! refusal. A burst's extra rate, `(factor − 1) ×` the send rate until it ends, draws on the
//! headroom above the budget ([`Limits::burst_headroom_bps`]: 10/90 of the budget, i.e. the
//! egress capacity less the default budget); a new session's factor is the largest one up
//! to the configured factor whose extra rate fits in what the sessions bursting now leave of
//! it ([`start_burst_factor`]), and below 2 it gets no burst. So what the admitted sessions
//! may send at any moment stays within the budget plus that headroom (the egress capacity at
//! the default budget).

use std::collections::HashSet;
use std::net::{IpAddr, Ipv6Addr};

use isnode_layout::Layout;

use isnode_proto::Limit;

use crate::pacer::blocks_of;

pub mod disk;
pub mod memory;

/// The limits a new session is admitted under.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Most streaming sessions per client IP address.
    pub max_sessions_per_client: u32,
    /// Most total send rate of the streaming sessions, bits per second.
    pub max_bitrate_bps: u64,
    /// Most total extra rate of the start-up bursts in progress, bits per second.
    pub burst_headroom_bps: u64,
    /// The block pool's bound on working sets (`None`: the engine does not use the pool).
    pub pool: Option<PoolLimit>,
    /// Most sessions in all (`sendfile`: the sockets the descriptor budget holds).
    pub max_sessions: Option<u64>,
}

/// The block pool as admission sees it.
#[derive(Clone, Debug)]
pub struct PoolLimit {
    /// Blocks the pool holds.
    pub slots: usize,
    /// Slots kept free beyond the working sets (rebuilds, in-flight sends).
    pub reserve_slots: usize,
    /// Codewords (the current one included) whose blocks a session keeps in the pool.
    pub lookahead_codewords: u32,
    /// The configured pool size (the `value` of a refusal).
    pub cache_size_bytes: u64,
    /// The disks' sustained read rate, bits per second (`None`: not checked): what the
    /// sessions read beyond what the pool shares between them must fit ([`disk`]).
    pub disk_read_bps: Option<u64>,
}

/// What one session asks of the server.
#[derive(Clone, Copy, Debug)]
pub struct Demand<'a> {
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
pub struct Refusal {
    /// The limit that was hit.
    pub limit: Limit,
    /// Its configured value.
    pub value: u64,
    /// Human-readable detail.
    pub reason: String,
}

/// The client a per-client limit counts an address against: an IPv4 address itself, an
/// IPv6 address's /64 (one subscriber's prefix: its hosts may take any address in it).
pub fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                IpAddr::V6(Ipv6Addr::from(prefix))
            }
        },
        v4 => v4,
    }
}

/// The limits of sessions whose destination has not echoed its token yet.
#[derive(Clone, Copy, Debug)]
pub struct UnvalidatedLimits {
    /// Most such sessions in all.
    pub max_sessions: u32,
    /// Most such sessions per client ([`client_key`]).
    pub max_per_client: u32,
}

/// Admits one more session awaiting its echo from `new` beside the clients of those
/// awaiting theirs (`waiting`), or says which limit refuses it. Such sessions take no
/// bitrate budget nor pool (they are admitted against those at the echo): only these.
pub fn admit_unvalidated(
    limits: &UnvalidatedLimits,
    waiting: &[IpAddr],
    new: IpAddr,
) -> Result<(), Refusal> {
    if waiting.len() >= limits.max_sessions as usize {
        return Err(Refusal {
            limit: Limit::MaxUnvalidatedSessions,
            value: u64::from(limits.max_sessions),
            reason: format!(
                "{} sessions already await their token's echo",
                waiting.len()
            ),
        });
    }
    let key = client_key(new);
    let mine = waiting.iter().filter(|ip| client_key(**ip) == key).count();
    if mine >= limits.max_per_client as usize {
        return Err(Refusal {
            limit: Limit::MaxUnvalidatedPerClient,
            value: u64::from(limits.max_per_client),
            reason: format!("{key} already has {mine} sessions awaiting their token's echo"),
        });
    }
    Ok(())
}

/// Admits `new` beside the streaming sessions `active`, or says which limit refuses it.
/// Checked in order: sessions per client ([`client_key`]), total sessions, bitrate, block
/// pool, disk reads (pool engines with `disk_read_bps` set: [`disk`]).
pub fn admit(limits: &Limits, active: &[Demand<'_>], new: &Demand<'_>) -> Result<(), Refusal> {
    let key = client_key(new.peer_ip);
    let mine = active
        .iter()
        .filter(|s| client_key(s.peer_ip) == key)
        .count();
    if mine >= limits.max_sessions_per_client as usize {
        return Err(Refusal {
            limit: Limit::MaxSessionsPerClient,
            value: u64::from(limits.max_sessions_per_client),
            reason: format!("{key} already has {mine} sessions"),
        });
    }
    if let Some(max) = limits.max_sessions {
        if active.len() as u64 >= max {
            return Err(Refusal {
                limit: Limit::MaxSendfileSessions,
                value: max,
                reason: format!(
                    "{} sessions already: the sendfile engine's socket budget \
                     (--max-sendfile-sessions)",
                    active.len()
                ),
            });
        }
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
        if let Some(max) = pool.disk_read_bps {
            admit_disk(pool, max, blocks, active, new)?;
        }
    }
    Ok(())
}

/// The disk check of [`admit`]: `new` is refused when the reads the sessions would need
/// with it ([`disk::disk_rate_bps`], the pool's room beyond the `blocks` of the working
/// sets keeping intervals) exceed `max_bps` and are more than they need without it (a
/// follower the pool serves is admitted even on a busy disk).
fn admit_disk(
    pool: &PoolLimit,
    max_bps: u64,
    blocks: usize,
    active: &[Demand<'_>],
    new: &Demand<'_>,
) -> Result<(), Refusal> {
    let room = |blocks: usize| pool.slots.saturating_sub(blocks + pool.reserve_slots);
    let with = disk::disk_rate_bps(active.iter().chain([new]), room(blocks));
    if with <= max_bps {
        return Ok(());
    }
    let before = working_set(pool.lookahead_codewords, active.iter());
    let without = disk::disk_rate_bps(active.iter(), room(before));
    if with <= without {
        return Ok(());
    }
    Err(Refusal {
        limit: Limit::DiskReadBps,
        value: max_bps,
        reason: format!(
            "the disks cannot sustain the reads: the sessions would need {with} bit/s beyond \
             what the block pool shares, of {max_bps}"
        ),
    })
}

/// Pool slots kept free beyond the sessions' working sets (rebuilds, in-flight sends).
pub const CACHE_RESERVE_SLOTS: usize = 2;

/// Codewords (current one included) whose blocks a session keeps in the pool.
pub const LOOKAHEAD_CODEWORDS: u32 = 3;

/// The burst headroom of a bitrate budget: the share of the egress capacity the default
/// budget leaves free (10 %), relative to the budget (10/90 of it).
pub fn burst_headroom_bps(budget_bps: u64) -> u64 {
    let pct = isnode_serve_config::EGRESS_BUDGET_PERCENT;
    let h = u128::from(budget_bps) * u128::from(100 - pct) / u128::from(pct);
    u64::try_from(h).unwrap_or(u64::MAX)
}

/// The start-up burst factor of a new session of `send_rate_bps`, beside bursts in progress
/// whose extra rates sum to `bursting_extra_bps`: the largest factor up to `wanted` whose
/// extra rate `(factor − 1) × send_rate_bps` fits in what they leave of the headroom; 1 (no
/// burst) if not even 2 fits.
pub fn start_burst_factor(
    limits: &Limits,
    bursting_extra_bps: u64,
    send_rate_bps: u64,
    wanted: u32,
) -> u32 {
    if wanted < 2 || send_rate_bps == 0 {
        return 1;
    }
    let left = limits.burst_headroom_bps.saturating_sub(bursting_extra_bps);
    let extra = u32::try_from(left / send_rate_bps).unwrap_or(u32::MAX);
    match extra.saturating_add(1).min(wanted) {
        f if f >= 2 => f,
        _ => 1,
    }
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
        let p = isnode_layout::VolumeParams::SMALL;
        Layout::new(p, codewords * 20 * 1024).unwrap()
    }

    fn unlimited() -> Limits {
        Limits {
            max_sessions_per_client: u32::MAX,
            max_bitrate_bps: u64::MAX,
            burst_headroom_bps: u64::MAX,
            pool: None,
            max_sessions: None,
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
    fn per_client_limits_count_an_ipv6_64_as_one_client() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(client_key(a), client_key(b));
        assert_ne!(client_key(a), client_key(c));
        let v4: IpAddr = "10.0.0.1".parse().unwrap();
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(client_key(mapped), v4);
        assert_ne!(client_key("10.0.0.2".parse().unwrap()), client_key(v4));
        // Sessions of one /64 count together (issue 21: one /64 held the whole budget).
        let l = layout(10);
        let mut s1 = demand(&l, 1, 1, 1, 0);
        s1.peer_ip = a;
        let mut new = demand(&l, 1, 1, 1, 0);
        new.peer_ip = b;
        let limits = Limits {
            max_sessions_per_client: 1,
            ..unlimited()
        };
        let r = admit(&limits, &[s1], &new).unwrap_err();
        assert_eq!(r.limit, Limit::MaxSessionsPerClient);
        new.peer_ip = c;
        assert!(admit(&limits, &[s1], &new).is_ok());
    }

    #[test]
    fn sessions_awaiting_their_echo_have_limits_of_their_own() {
        let limits = UnvalidatedLimits {
            max_sessions: 3,
            max_per_client: 2,
        };
        let a: IpAddr = "2001:db8::1".parse().unwrap();
        let a2: IpAddr = "2001:db8::2".parse().unwrap();
        let b: IpAddr = "10.0.0.1".parse().unwrap();
        assert!(admit_unvalidated(&limits, &[a], a2).is_ok());
        let r = admit_unvalidated(&limits, &[a, a2], a).unwrap_err();
        assert_eq!((r.limit, r.value), (Limit::MaxUnvalidatedPerClient, 2));
        assert!(admit_unvalidated(&limits, &[a, a2], b).is_ok());
        let r = admit_unvalidated(&limits, &[a, a2, b], b).unwrap_err();
        assert_eq!((r.limit, r.value), (Limit::MaxUnvalidatedSessions, 3));
    }

    #[test]
    fn the_sendfile_socket_budget_bounds_the_sessions() {
        let l = layout(10);
        let a = [demand(&l, 1, 1, 1, 0), demand(&l, 2, 1, 1, 0)];
        let limits = Limits {
            max_sessions: Some(2),
            ..unlimited()
        };
        let r = admit(&limits, &a, &demand(&l, 3, 1, 1, 0)).unwrap_err();
        assert_eq!((r.limit, r.value), (Limit::MaxSendfileSessions, 2));
        assert!(admit(&limits, &a[..1], &demand(&l, 3, 1, 1, 0)).is_ok());
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
    fn the_headroom_is_what_the_default_budget_leaves() {
        assert_eq!(burst_headroom_bps(900_000_000), 100_000_000);
        assert_eq!(burst_headroom_bps(u64::MAX), u64::MAX / 9);
        let limits = Limits {
            burst_headroom_bps: 100,
            ..unlimited()
        };
        // 100 of headroom, 30 of it in use: a rate-20 session bursts at 1 + 70/20 = 4.
        assert_eq!(start_burst_factor(&limits, 30, 20, 8), 4);
        assert_eq!(start_burst_factor(&limits, 30, 20, 3), 3);
        assert_eq!(start_burst_factor(&limits, 90, 20, 8), 1, "no room for 2");
        assert_eq!(start_burst_factor(&limits, 0, 20, 1), 1);
    }

    #[test]
    fn the_disk_admits_what_the_pool_shares_and_refuses_new_reads() {
        let l = layout(400);
        let limits = Limits {
            pool: Some(PoolLimit {
                slots: 200,
                reserve_slots: 2,
                lookahead_codewords: 3,
                cache_size_bytes: 1,
                // Room for two readers of 1 000 bit/s.
                disk_read_bps: Some(2_500),
            }),
            ..unlimited()
        };
        let a = [demand(&l, 1, 1_000, 1, 300), demand(&l, 2, 1_000, 2, 0)];
        // A third title reads from disk: refused.
        let r = admit(&limits, &a, &demand(&l, 3, 1_000, 3, 0)).unwrap_err();
        assert_eq!((r.limit, r.value), (Limit::DiskReadBps, 2_500));
        // A viewer at a title's position shares its blocks: admitted.
        assert!(admit(&limits, &a, &demand(&l, 3, 1_000, 1, 300)).is_ok());
        // A viewer a little behind one: its interval fits in the pool's room.
        assert!(admit(&limits, &a, &demand(&l, 3, 1_000, 1, 290)).is_ok());
        // Far behind (the interval does not fit beside the working sets): refused.
        let far = demand(&l, 3, 1_000, 1, 0);
        assert!(disk::interval_blocks(&l, 0, 300) > 200);
        assert_eq!(
            admit(&limits, &a, &far).unwrap_err().limit,
            Limit::DiskReadBps
        );
        // Not checked when unset.
        let mut off = limits.clone();
        if let Some(p) = off.pool.as_mut() {
            p.disk_read_bps = None;
        }
        assert!(admit(&off, &a, &far).is_ok());
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
                disk_read_bps: None,
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
            let limits = Limits { max_sessions_per_client: max_per_client, max_bitrate_bps: max_bitrate, burst_headroom_bps: 0, pool: None, max_sessions: None };
            let mine = active.iter().filter(|(p, _)| *p == new.0).count();
            let used: u64 = active.iter().map(|(_, r)| r).sum();
            let expect = mine < max_per_client as usize && used + new.1 <= max_bitrate;
            prop_assert_eq!(admit(&limits, &act, &nd).is_ok(), expect);
        }

        /// The burst factor is within 1..=wanted, its extra rate fits in the headroom the
        /// bursts in progress leave, and one more step would not fit (unless at `wanted`).
        #[test]
        fn burst_fits_the_headroom(
            bursting in 0u64..20_000,
            rate in 0u64..1000,
            wanted in 0u32..10,
            headroom in 0u64..40_000,
        ) {
            let limits = Limits { burst_headroom_bps: headroom, ..unlimited() };
            let f = start_burst_factor(&limits, bursting, rate, wanted);
            prop_assert!(f >= 1 && (f <= wanted || f == 1));
            if f >= 2 {
                prop_assert!(bursting + u64::from(f - 1) * rate <= headroom);
            }
            if f < wanted && rate > 0 && wanted >= 2 {
                prop_assert!(bursting + u64::from(f) * rate > headroom);
            }
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
                burst_headroom_bps: 0,
                pool: Some(PoolLimit { slots, reserve_slots: 2, lookahead_codewords: 3, cache_size_bytes: 1, disk_read_bps: None }),
                max_sessions: None,
            };
            if admit(&limits, &act, &nd).is_ok() {
                prop_assert!(admit(&limits, &sub, &nd).is_ok());
            }
        }
    }
}
