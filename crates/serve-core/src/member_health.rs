//! The health of each volume member as the data plane sees it, from its block reads (the
//! pure decisions; `isnode_pool::members` is the shell that logs, counts, writes the
//! catalog and probes):
//!
//! - **failed** after `member_fail_errors` read errors in a row on distinct blocks (I/O
//!   errors, checksum mismatches; a successful read of the member starts the count again;
//!   one rotten block read again is not a failing member). A failed member is not read
//!   any more: its symbols are rebuilt from the other members ([`read_or_rebuild`]).
//! - read again when its catalog state turns ok after being failed or rebuilding (a
//!   rebuild), or, failed by read errors alone, when a periodic probe succeeds and it
//!   missed no write ([`watch_decision`]); the shell then opens its files again (the
//!   rebuild's new files, not the dead ones).
//! - **slow** for [`SLOW_HOLD_NS`] after one of its reads took longer than
//!   `hedge_after_ms`, or a session waited that long for one of its blocks. While one
//!   member (and only one, none failed) is slow, a burst whose block of that member is not
//!   in memory is *hedged* ([`hedge_member`], [`read_or_rebuild`]): its codeword is
//!   rebuilt from the other members instead of waiting, and read-ahead keeps at most one
//!   read of it in flight per thread ([`may_read_ahead`]: a probe that tells when it is
//!   fast again).
//!
//! The state is atomics (shared by every data-plane thread), the decisions pure functions
//! of it and of the time given: the simulation (`tests/sim`) drives them on its clock.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use isnode_serve_config::Degraded;

/// How long a member stays slow after its last slow read (or wait).
pub const SLOW_HOLD_NS: u64 = 1_000_000_000;

/// A member's state in the data plane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberState {
    /// Read as usual.
    Ok,
    /// Its reads are slow: hedged ([`hedge_member`]).
    Slow,
    /// Not read: rebuilt from the others.
    Failed,
}

/// One member's counters.
#[derive(Debug, Default)]
struct Slot {
    errors_in_a_row: AtomicU32,
    failed: AtomicBool,
    /// Failed by this server's read errors (not by the catalog at start): may be probed.
    failed_by_reads: AtomicBool,
    slow_until_ns: AtomicU64,
    /// The block of the last failed read ([`block_id`]; 0: none since the last success):
    /// the same block failing again is one rotten block, not a failing member.
    last_failed_block: AtomicU64,
}

/// A block's identity for [`MemberHealth::read_failed`] (never 0).
pub fn block_id(toi: u32, block: u64) -> u64 {
    ((u64::from(toi) << 40) ^ block) | (1 << 63)
}

/// Every member's health (shared by the data-plane threads and the control API).
#[derive(Debug)]
pub struct MemberHealth {
    slots: Vec<Slot>,
    /// Bursts whose codeword was rebuilt instead of waiting for a slow member.
    pub hedged: AtomicU64,
    /// Failed members read again (probe or rebuild).
    pub revived: AtomicU64,
}

/// Whether `errors_in_a_row` read errors make a member failed (`threshold` 0: never).
pub fn fails_after(errors_in_a_row: u32, threshold: u32) -> bool {
    threshold > 0 && errors_in_a_row >= threshold
}

/// The member whose reads are hedged now, from every member's state: the one slow member
/// when exactly one is slow and none is failed (the code rebuilds one member's symbols; a
/// failed member already takes that margin, and several slow members mean a slow
/// machine, which rebuilding would only load more).
pub fn hedge_member(states: impl Iterator<Item = MemberState>) -> Option<u32> {
    let mut slow = None;
    for (m, s) in states.enumerate() {
        match s {
            MemberState::Failed => return None,
            MemberState::Slow if slow.is_some() => return None,
            MemberState::Slow => slow = Some(m as u32),
            MemberState::Ok => {}
        }
    }
    slow
}

impl MemberHealth {
    /// `members` members, all ok.
    pub fn new(members: u32) -> MemberHealth {
        MemberHealth {
            slots: (0..members).map(|_| Slot::default()).collect(),
            hedged: AtomicU64::new(0),
            revived: AtomicU64::new(0),
        }
    }

    /// Number of members.
    pub fn members(&self) -> usize {
        self.slots.len()
    }

    /// `member`'s state at `now_ns`.
    pub fn state(&self, member: u32, now_ns: u64) -> MemberState {
        let Some(s) = self.slots.get(member as usize) else {
            return MemberState::Failed;
        };
        if s.failed.load(Ordering::Acquire) {
            MemberState::Failed
        } else if s.slow_until_ns.load(Ordering::Relaxed) > now_ns {
            MemberState::Slow
        } else {
            MemberState::Ok
        }
    }

    /// Whether `member` is failed.
    pub fn is_failed(&self, member: u32) -> bool {
        self.state(member, 0) == MemberState::Failed
    }

    /// The member hedged now ([`hedge_member`]).
    pub fn hedged_member(&self, now_ns: u64) -> Option<u32> {
        hedge_member((0..self.slots.len() as u32).map(|m| self.state(m, now_ns)))
    }

    /// A read of `member` succeeded after `latency`; a latency above `hedge_after` (if
    /// hedging is on) makes it slow.
    pub fn read_ok(
        &self,
        member: u32,
        latency: Duration,
        hedge_after: Option<Duration>,
        now_ns: u64,
    ) {
        let Some(s) = self.slots.get(member as usize) else {
            return;
        };
        s.errors_in_a_row.store(0, Ordering::Relaxed);
        s.last_failed_block.store(0, Ordering::Relaxed);
        if hedge_after.is_some_and(|b| latency > b) {
            self.mark_slow(member, now_ns);
        }
    }

    /// `member` is slow from now on (for [`SLOW_HOLD_NS`]).
    pub fn mark_slow(&self, member: u32, now_ns: u64) {
        if let Some(s) = self.slots.get(member as usize) {
            s.slow_until_ns
                .fetch_max(now_ns.saturating_add(SLOW_HOLD_NS), Ordering::Relaxed);
        }
    }

    /// Marks `member` failed (the catalog says so at start); true if it was not before.
    pub fn mark_failed(&self, member: u32) -> bool {
        self.slots
            .get(member as usize)
            .is_some_and(|s| !s.failed.swap(true, Ordering::AcqRel))
    }

    /// A read of block `block` ([`block_id`]) of `member` failed; true if that made it
    /// failed (once per member). The block that failed last failing again does not count:
    /// a member fails by errors on distinct blocks, not by one rotten block read again.
    pub fn read_failed(&self, member: u32, block: u64, threshold: u32) -> bool {
        let Some(s) = self.slots.get(member as usize) else {
            return false;
        };
        if s.last_failed_block.swap(block, Ordering::Relaxed) == block {
            return false;
        }
        let in_a_row = s.errors_in_a_row.fetch_add(1, Ordering::Relaxed) + 1;
        let now_failed = fails_after(in_a_row, threshold) && !s.failed.swap(true, Ordering::AcqRel);
        if now_failed {
            s.failed_by_reads.store(true, Ordering::Release);
        }
        now_failed
    }

    /// Whether `member` is failed by read errors alone (may be probed).
    pub fn failed_by_reads(&self, member: u32) -> bool {
        self.slots.get(member as usize).is_some_and(|s| {
            s.failed.load(Ordering::Acquire) && s.failed_by_reads.load(Ordering::Acquire)
        })
    }

    /// `member` is read again: not failed, no error counted, not slow; true if it was failed.
    pub fn revive(&self, member: u32) -> bool {
        let Some(s) = self.slots.get(member as usize) else {
            return false;
        };
        s.errors_in_a_row.store(0, Ordering::Relaxed);
        s.last_failed_block.store(0, Ordering::Relaxed);
        s.slow_until_ns.store(0, Ordering::Relaxed);
        s.failed_by_reads.store(false, Ordering::Release);
        let was = s.failed.swap(false, Ordering::AcqRel);
        if was {
            self.revived.fetch_add(1, Ordering::Relaxed);
        }
        was
    }
}

/// What the catalog says of a member, as [`watch_decision`] needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CatalogState {
    /// Ok.
    Ok,
    /// Failed (by the data plane's reads, the operator, or at start).
    Failed,
    /// Being rebuilt.
    Rebuilding,
}

impl CatalogState {
    /// Whether the member must not be written or trusted (failed or being rebuilt).
    pub fn is_degraded(self) -> bool {
        self != CatalogState::Ok
    }
}

/// What the watch of failed members decides for one of them ([`watch_decision`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchDecision {
    /// Leave it failed.
    Keep,
    /// The catalog says ok again after saying otherwise (rebuilt): read it again.
    Rebuilt,
    /// Probe it now (failed by read errors alone, the catalog says failed, no write missed).
    Probe,
}

/// The decision for a failed member from the catalog's state, whether the catalog was seen
/// not ok since the member failed, whether it failed by read errors alone, whether it
/// missed writes, and whether its probe is due.
pub fn watch_decision(
    state: CatalogState,
    seen_degraded: bool,
    by_reads: bool,
    missed_writes: bool,
    probe_due: bool,
) -> WatchDecision {
    match state {
        CatalogState::Ok if seen_degraded => WatchDecision::Rebuilt,
        CatalogState::Failed if by_reads && !missed_writes && probe_due => WatchDecision::Probe,
        _ => WatchDecision::Keep,
    }
}

/// How a burst whose block is not in memory gets its packets ([`read_or_rebuild`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadOrRebuild {
    /// Read the block (or wait for its read).
    Read,
    /// The member is failed: rebuild from the others.
    Rebuild,
    /// The member is slow: rebuild from the others rather than wait.
    Hedge,
}

/// [`ReadOrRebuild`] at `now_ns` for a burst from `member` whose block is not in memory,
/// for a session that has waited `waited_ns` for it (0: not waiting). Waiting
/// `hedge_after` (`None`: hedging off) makes the member slow; the one slow member's bursts
/// are hedged, unless the server sends only what is available (`Degraded::SendAvailable`,
/// which would drop them instead).
pub fn read_or_rebuild(
    health: &MemberHealth,
    member: u32,
    (hedge_after, degraded): (Option<Duration>, Degraded),
    waited_ns: u64,
    now_ns: u64,
) -> ReadOrRebuild {
    if health.is_failed(member) {
        return ReadOrRebuild::Rebuild;
    }
    let Some(bound) = hedge_after else {
        return ReadOrRebuild::Read;
    };
    if degraded == Degraded::SendAvailable {
        return ReadOrRebuild::Read;
    }
    if u128::from(waited_ns) >= bound.as_nanos() {
        health.mark_slow(member, now_ns);
    }
    if health.hedged_member(now_ns) == Some(member) {
        ReadOrRebuild::Hedge
    } else {
        ReadOrRebuild::Read
    }
}

/// Whether read-ahead may start a read of `member` at `now_ns` with `in_flight` reads of
/// it in flight (on this thread): never for a failed member, and for the hedged (slow)
/// member only while none of its reads is in flight (one probe at a time tells when it is
/// fast again).
pub fn may_read_ahead(health: &MemberHealth, member: u32, now_ns: u64, in_flight: usize) -> bool {
    if health.is_failed(member) {
        return false;
    }
    health.hedged_member(now_ns) != Some(member) || in_flight == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use MemberState::*;

    #[test]
    fn a_member_fails_after_the_threshold_in_a_row() {
        assert!(!fails_after(4, 5));
        assert!(fails_after(5, 5));
        assert!(!fails_after(1000, 0), "0 turns it off");
        let h = MemberHealth::new(3);
        for b in 0..4 {
            assert!(!h.read_failed(1, block_id(7, b), 5));
        }
        // A success starts the count again.
        h.read_ok(1, Duration::ZERO, None, 0);
        for b in 0..4 {
            assert!(!h.read_failed(1, block_id(7, b), 5));
        }
        assert!(h.read_failed(1, block_id(7, 4), 5), "the fifth in a row");
        assert!(!h.read_failed(1, block_id(7, 5), 5), "failed once only");
        assert_eq!(h.state(1, 0), Failed);
        assert_eq!(h.state(0, 0), Ok);
        assert_eq!(h.state(9, 0), Failed, "no such member");
    }

    #[test]
    fn a_slow_read_makes_the_member_slow_for_a_while() {
        let h = MemberHealth::new(4);
        let bound = Some(Duration::from_millis(50));
        h.read_ok(2, Duration::from_millis(10), bound, 1_000);
        assert_eq!(h.state(2, 1_000), Ok);
        h.read_ok(2, Duration::from_millis(200), bound, 1_000);
        assert_eq!(h.state(2, 1_000), Slow);
        assert_eq!(h.hedged_member(1_000), Some(2));
        assert_eq!(h.state(2, 1_000 + SLOW_HOLD_NS), Ok, "no longer");
        h.read_ok(3, Duration::from_secs(9), None, 0);
        assert_eq!(h.state(3, 0), Ok, "hedging off");
    }

    #[test]
    fn only_a_single_slow_member_with_none_failed_is_hedged() {
        assert_eq!(hedge_member([Ok, Ok, Ok].into_iter()), None);
        assert_eq!(hedge_member([Ok, Slow, Ok].into_iter()), Some(1));
        assert_eq!(hedge_member([Slow, Slow, Ok].into_iter()), None);
        assert_eq!(hedge_member([Ok, Slow, Failed].into_iter()), None);
        assert_eq!(hedge_member([Failed, Ok].into_iter()), None);
    }

    #[test]
    fn a_failed_member_returns_after_a_rebuild_or_a_good_probe() {
        use CatalogState as S;
        let failed = S::Failed;
        let rebuilding = S::Rebuilding;
        // Ok after the catalog said otherwise: rebuilt; ok never seen degraded (the
        // failure not recorded yet): kept.
        assert_eq!(
            watch_decision(S::Ok, true, true, false, false),
            WatchDecision::Rebuilt
        );
        assert_eq!(
            watch_decision(S::Ok, false, true, false, true),
            WatchDecision::Keep
        );
        // Failed by reads, nothing missed, due: probed; otherwise kept.
        assert_eq!(
            watch_decision(failed, true, true, false, true),
            WatchDecision::Probe
        );
        assert_eq!(
            watch_decision(failed, true, true, false, false),
            WatchDecision::Keep
        );
        assert_eq!(
            watch_decision(failed, true, true, true, true),
            WatchDecision::Keep,
            "missed writes: rebuild it"
        );
        assert_eq!(
            watch_decision(failed, true, false, false, true),
            WatchDecision::Keep,
            "failed by the catalog"
        );
        assert_eq!(
            watch_decision(rebuilding, true, true, false, true),
            WatchDecision::Keep
        );
    }

    #[test]
    fn a_failed_member_is_rebuilt_and_the_one_slow_member_hedged() {
        let h = MemberHealth::new(3);
        let bound = (Some(Duration::from_millis(50)), Degraded::Rebuild);
        assert_eq!(read_or_rebuild(&h, 1, bound, 0, 0), ReadOrRebuild::Read);
        // Waiting the bound makes it slow, and hedged.
        assert_eq!(
            read_or_rebuild(&h, 1, bound, 50_000_000, 10),
            ReadOrRebuild::Hedge
        );
        assert!(!may_read_ahead(&h, 1, 10, 1) && may_read_ahead(&h, 1, 10, 0));
        let off = (None, Degraded::Rebuild);
        assert_eq!(
            read_or_rebuild(&h, 2, off, 9_000_000_000, 10),
            ReadOrRebuild::Read
        );
        let available = (bound.0, Degraded::SendAvailable);
        assert_eq!(
            read_or_rebuild(&h, 1, available, 0, 10),
            ReadOrRebuild::Read
        );
        assert!(h.mark_failed(0));
        assert_eq!(read_or_rebuild(&h, 0, bound, 0, 10), ReadOrRebuild::Rebuild);
        assert!(!may_read_ahead(&h, 0, 10, 0));
        // A failed member takes the code's margin: the slow one is read, not hedged.
        assert_eq!(read_or_rebuild(&h, 1, bound, 0, 10), ReadOrRebuild::Read);
    }

    #[test]
    fn a_revived_member_starts_afresh() {
        let h = MemberHealth::new(3);
        for b in 0..3 {
            h.read_failed(1, block_id(1, b), 3);
        }
        assert!(h.is_failed(1) && h.failed_by_reads(1));
        assert!(h.revive(1));
        assert!(!h.is_failed(1) && !h.failed_by_reads(1));
        assert_eq!(h.revived.load(Ordering::Relaxed), 1);
        assert!(!h.revive(1), "only once");
        // Its errors count from zero again; a catalog failure is not one by reads.
        h.read_failed(1, block_id(1, 0), 3);
        assert!(!h.is_failed(1));
        assert!(h.mark_failed(2) && !h.failed_by_reads(2));
    }

    #[test]
    fn one_rotten_block_read_again_does_not_fail_its_member() {
        let h = MemberHealth::new(3);
        for _ in 0..50 {
            assert!(!h.read_failed(2, block_id(9, 17), 5));
        }
        assert!(
            !h.is_failed(2),
            "one block failing again and again is one bad block"
        );
        // Distinct blocks failing between its retries still fail the member.
        for b in 0..5 {
            h.read_failed(2, block_id(9, b), 5);
            h.read_failed(2, block_id(9, 17), 5);
        }
        assert!(h.is_failed(2));
        assert_ne!(block_id(0, 0), 0);
        assert_ne!(block_id(1, 0), block_id(0, 1));
    }
}
