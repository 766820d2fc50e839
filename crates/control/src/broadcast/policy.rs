//! The broadcasts' admission and hybrid-serving rules, pure: the broadcasts' own share of
//! the bitrate budget, when a title's unicast demand calls for an automatic broadcast, and
//! the claim that lets only one request at a time start a title's automatic broadcast.

use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard};

use isnode_proto::Limit;
use isnode_serve_core::admission::Refusal;

/// The broadcasts' share of a bitrate budget: `percent` of it.
pub fn broadcast_budget_bps(bitrate_budget_bps: u64, percent: u32) -> u64 {
    let share = u128::from(bitrate_budget_bps) * u128::from(percent.min(100)) / 100;
    u64::try_from(share).unwrap_or(u64::MAX)
}

/// Admits a broadcast of `new_bps` beside running broadcasts of `running_bps` together
/// under the broadcasts' budget `budget_bps`, or says that the budget refuses it.
pub fn admit_broadcast(budget_bps: u64, running_bps: u64, new_bps: u64) -> Result<(), Refusal> {
    if running_bps.saturating_add(new_bps) <= budget_bps {
        return Ok(());
    }
    Err(Refusal {
        limit: Limit::BroadcastBudgetBps,
        value: budget_bps,
        reason: format!(
            "broadcast budget exhausted ({running_bps} of {budget_bps} bit/s in use by \
             broadcasts, {new_bps} more needed; --broadcast-budget-percent)"
        ),
    })
}

/// Whether a title should go out by broadcast: its unicast demand with one more viewer,
/// `(streaming + 1) × send_rate_bps`, would exceed the broadcast's cost `cost_bps`.
pub fn worth_broadcasting(streaming: u64, send_rate_bps: u64, cost_bps: u64) -> bool {
    streaming.saturating_add(1).saturating_mul(send_rate_bps) > cost_bps
}

/// The titles (by TOI) whose automatic broadcast a request is starting now: one request
/// at a time per title holds the claim, so concurrent first requests start one broadcast.
#[derive(Default)]
pub struct AutoStarts {
    starting: Mutex<HashSet<u32>>,
}

/// The claim to start title `toi`'s automatic broadcast; released on drop.
pub struct AutoClaim<'a> {
    starts: &'a AutoStarts,
    toi: u32,
}

impl AutoStarts {
    fn lock(&self) -> MutexGuard<'_, HashSet<u32>> {
        self.starting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The claim for `toi`, `None` while another request holds it.
    pub fn claim(&self, toi: u32) -> Option<AutoClaim<'_>> {
        // The lock is released before a claim exists (its drop takes the lock).
        let fresh = self.lock().insert(toi);
        fresh.then(|| AutoClaim { starts: self, toi })
    }
}

impl Drop for AutoClaim<'_> {
    fn drop(&mut self) {
        self.starts.lock().remove(&self.toi);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_a_share_of_the_bitrate_budget() {
        assert_eq!(broadcast_budget_bps(900_000_000, 50), 450_000_000);
        assert_eq!(broadcast_budget_bps(900, 0), 0);
        assert_eq!(broadcast_budget_bps(u64::MAX, 100), u64::MAX);
        assert_eq!(broadcast_budget_bps(1000, 250), 1000, "at most all of it");
        assert!(admit_broadcast(100, 60, 40).is_ok());
        let r = admit_broadcast(100, 60, 41).unwrap_err();
        assert_eq!((r.limit, r.value), (Limit::BroadcastBudgetBps, 100));
        assert!(r.reason.contains("broadcast budget"), "{}", r.reason);
        assert!(admit_broadcast(0, 0, 1).is_err());
        assert!(
            admit_broadcast(u64::MAX - 1, u64::MAX - 1, 2).is_err(),
            "no overflow"
        );
    }

    #[test]
    fn a_title_is_broadcast_when_unicast_would_cost_more() {
        assert!(!worth_broadcasting(0, 10, 10));
        assert!(worth_broadcasting(1, 10, 19));
        assert!(!worth_broadcasting(2, 10, 30));
        assert!(worth_broadcasting(u64::MAX, 2, u64::MAX - 1));
    }

    #[test]
    fn one_claim_per_title_at_a_time() {
        let s = AutoStarts::default();
        let a = s.claim(7).expect("the first claim");
        assert!(s.claim(7).is_none(), "held");
        let b = s.claim(8).expect("another title");
        drop(a);
        let again = s.claim(7).expect("released on drop");
        drop((b, again));
        assert!(s.lock().is_empty());
    }
}
