//! The health of each volume member as the data plane sees it, from its block reads:
//!
//! - **failed** after `member_fail_errors` read errors in a row (I/O errors, checksum
//!   mismatches; a successful read of the member starts the count again). A failed member
//!   is not read any more: its symbols are rebuilt from the other members
//!   (`plane/degraded.rs`). It becomes failed once, logged once (a warning naming the
//!   member), through [`Members::failed`]. It is read again ([`MemberWatch`]) when
//!   its catalog state turns ok again (after `isnode volume rebuild`), or, failed by read
//!   errors alone, when a periodic probe (`member_probe_interval_ms`: its identity and one
//!   block read back with its checksum) succeeds and it missed no write meanwhile.
//! - **slow** for [`SLOW_HOLD_NS`] after one of its reads took longer than
//!   `hedge_after_ms`, or a session waited that long for one of its blocks. While one
//!   member (and only one, none failed) is slow, a burst whose block of that member is not
//!   in memory is *hedged*: its codeword is rebuilt from the other members instead of
//!   waiting, and read-ahead keeps at most one read of it in flight per thread (a probe
//!   that tells when it is fast again).
//!
//! The decisions are pure functions ([`fails_after`], [`hedge_member`]) over a snapshot of
//! the states; the counters are atomics shared by every data-plane thread.

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use std::path::Path;
use std::sync::Mutex;

use isnode_serve_config::ConfigCell;
use isnode_serve_core::block::BlockKey;
use isnode_sys::clock::Clock;
use isnode_sys::event::{Event, IDLE_WAIT};
use isnode_sys::stop::Stop;

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
    fn read_failed(&self, member: u32, block: u64, threshold: u32) -> bool {
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

/// The members' health as the whole server shares it: the data plane's reads report to it,
/// the control API and the metrics read it, and its writer thread
/// ([`Members::record_failures`]) puts failures into the catalog and watches failed members.
pub struct Members {
    /// Each member's state from its reads.
    pub health: MemberHealth,
    /// Failed reads per member (`isnode_member_errors_total`).
    errors: Vec<AtomicU64>,
    /// Whether a member's first failed read was logged.
    logged: Vec<AtomicBool>,
    /// Members marked failed, waiting to be written into the catalog.
    failures: Mutex<Vec<(u32, String)>>,
    /// Set when a failure is queued: its writer wakes.
    queued: Event,
    config: ConfigCell,
    clock: Clock,
}

impl std::fmt::Debug for Members {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Members")
            .field("health", &self.health)
            .finish()
    }
}

impl Members {
    /// `members` members, all ok, with the thresholds of `config`.
    pub fn new(members: u32, config: ConfigCell, clock: Clock) -> std::io::Result<Members> {
        Ok(Members {
            health: MemberHealth::new(members),
            errors: (0..members).map(|_| AtomicU64::new(0)).collect(),
            logged: (0..members).map(|_| AtomicBool::new(false)).collect(),
            failures: Mutex::default(),
            queued: Event::new()?,
            config,
            clock,
        })
    }

    /// Failed reads of each member so far.
    pub fn errors(&self) -> Vec<u64> {
        self.errors
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect()
    }

    /// Counts a failed read on `member`; logs the first one of each member.
    pub fn count_error(&self, member: u32, why: &str) {
        if let Some(c) = self.errors.get(member as usize) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(l) = self.logged.get(member as usize) {
            if !l.swap(true, Ordering::Relaxed) {
                tracing::error!(
                    member,
                    "block read failed on member {member}, streams continue from the other members: {why}"
                );
            }
        }
    }

    /// A read of block `key` failed (`why`): counted, and past `member_fail_errors` in a
    /// row (on distinct blocks) the member is failed ([`Members::failed`]).
    pub fn read_failed(&self, key: &BlockKey, why: &str) {
        let member = key.member;
        self.count_error(member, why);
        let threshold = self.config.load().member_fail_errors;
        if self
            .health
            .read_failed(member, block_id(key.toi, key.block), threshold)
        {
            self.failed(member, why);
        }
    }

    /// A block read of `member` succeeded after `latency`.
    pub fn read_ok(&self, member: u32, latency: Duration) {
        let hedge_after = self.hedge_after();
        let now = self.clock.now_ns();
        self.health.read_ok(member, latency, hedge_after, now);
    }

    /// The hedging bound (`hedge_after_ms`; `None`: hedging off).
    pub fn hedge_after(&self) -> Option<Duration> {
        let ms = self.config.load().hedge_after_ms;
        (ms > 0).then(|| Duration::from_millis(ms))
    }

    /// The one place where a member becomes failed (called once per member): says so.
    /// Its reads stop and its symbols are rebuilt from the other members from now on. The
    /// catalog learns it too (so that `volume check`, `volume rebuild` and a restart know),
    /// written by [`Members::record_failures`], off the data plane.
    pub fn failed(&self, member: u32, why: &str) {
        let errors_in_a_row = self.config.load().member_fail_errors;
        tracing::warn!(
            member,
            errors_in_a_row,
            "member {member} marked failed after repeated read errors; its symbols are rebuilt \
             from the other members from now on (last error: {why})"
        );
        let reason = format!("{errors_in_a_row} read errors in a row: {why}");
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((member, reason));
        self.queued.set();
    }
}

/// How often the catalog's state of a failed member is looked at (and how long
/// [`Members::record_failures`] sleeps while a member is failed; without one it sleeps until
/// a failure is queued, the server stops, or `IDLE_WAIT` passes).
const CATALOG_EVERY: Duration = Duration::from_secs(1);

// The writer of members marked failed into the catalog (each once: marking is once per
// member), with a catalog connection of its own, so that no SQLite write happens on the
// data plane; it watches the failed members too ([`MemberWatch`]). A member the catalog
// already calls failed or rebuilding keeps that state (a rebuild under way records its
// own progress).
impl Members {
    /// The thread body that writes members marked failed into the catalog at `root`. Runs
    /// until `stop`, then writes what is left. `revived` is told each member that comes
    /// back (its files are to be opened again).
    pub fn record_failures(&self, root: &Path, stop: &Stop, revived: &dyn Fn(u32)) {
        let mut watch = MemberWatch::new(&self.health);
        loop {
            let stopping = stop.is_stopped();
            let pending: Vec<(u32, String)> =
                std::mem::take(&mut *self.failures.lock().unwrap_or_else(|e| e.into_inner()));
            for (member, reason) in pending {
                if let Err(e) = record_failed(root, member, reason) {
                    tracing::warn!("recording member {member} as failed in the catalog: {e}");
                }
            }
            if stopping {
                return;
            }
            let interval_ms = self.config.load().member_probe_interval_ms;
            if let Err(e) = watch.run(&self.health, (interval_ms, root), revived) {
                tracing::warn!("watching the failed members: {e}");
            }
            let health = &self.health;
            let wait = match (0..health.members() as u32).any(|m| health.is_failed(m)) {
                true => CATALOG_EVERY,
                false => IDLE_WAIT,
            };
            let events = [stop.as_fd(), self.queued.as_fd()];
            if isnode_sys::event::wait_any(&events, wait) == Some(1) {
                self.queued.clear();
            }
        }
    }
}

fn record_failed(root: &Path, member: u32, reason: String) -> Result<(), isnode_store::StoreError> {
    let mut vol = isnode_store::Volume::open(root)?;
    let states = vol.member_states()?;
    if matches!(
        states.get(member as usize),
        Some(isnode_store::MemberState::Ok)
    ) {
        vol.set_member_state(member, &isnode_store::MemberState::Failed { reason })?;
        tracing::info!(member, "member {member} recorded as failed in the catalog");
    }
    Ok(())
}

/// What [`MemberWatch`] decides for one failed member (pure: [`watch_decision`]).
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
/// missed writes (`missing_segments`), and whether its probe is due.
pub fn watch_decision(
    state: &isnode_store::MemberState,
    seen_degraded: bool,
    by_reads: bool,
    missed_writes: bool,
    probe_due: bool,
) -> WatchDecision {
    use isnode_store::MemberState as S;
    match state {
        S::Ok if seen_degraded => WatchDecision::Rebuilt,
        S::Failed { .. } if by_reads && !missed_writes && probe_due => WatchDecision::Probe,
        _ => WatchDecision::Keep,
    }
}

/// Watches the members the data plane failed: every `CATALOG_EVERY` while one is
/// failed, reads the catalog's states; a member whose state is ok again after being
/// failed or rebuilding there (`isnode volume rebuild` finished) is read again; a member
/// failed by read errors alone is probed every `member_probe_interval_ms`
/// ([`isnode_store::probe::probe_member`]) and, when the probe succeeds and it missed no
/// write, set ok in the catalog and read again. Each return is logged and counted
/// (`isnode_members_revived_total`).
pub struct MemberWatch {
    checked: Option<std::time::Instant>,
    /// Per member: the catalog was seen not ok since the member failed.
    seen_degraded: Vec<bool>,
    /// Per member: when it was last probed (or first seen failed).
    probed: Vec<Option<std::time::Instant>>,
}

impl MemberWatch {
    fn new(health: &MemberHealth) -> MemberWatch {
        let n = health.members();
        MemberWatch {
            checked: None,
            // Failed in the catalog at start: its state is not ok there.
            seen_degraded: (0..n as u32).map(|m| health.is_failed(m)).collect(),
            probed: vec![None; n],
        }
    }

    fn run(
        &mut self,
        health: &MemberHealth,
        (interval_ms, root): (u64, &Path),
        revived: &dyn Fn(u32),
    ) -> Result<(), isnode_store::StoreError> {
        let failed: Vec<u32> = (0..health.members() as u32)
            .filter(|&m| health.is_failed(m))
            .collect();
        let now = std::time::Instant::now();
        if failed.is_empty() || self.checked.is_some_and(|t| now - t < CATALOG_EVERY) {
            return Ok(());
        }
        self.checked = Some(now);
        let mut vol = isnode_store::Volume::open(root)?;
        let states = vol.member_states()?;
        for m in failed {
            let (Some(state), Some(seen), Some(probed)) = (
                states.get(m as usize),
                self.seen_degraded.get_mut(m as usize),
                self.probed.get_mut(m as usize),
            ) else {
                continue;
            };
            *seen |= state.is_degraded();
            let since = *probed.get_or_insert(now);
            let probe_due = interval_ms > 0 && now - since >= Duration::from_millis(interval_ms);
            let missed = !vol.catalog().missing_segments(m)?.is_empty();
            match watch_decision(state, *seen, health.failed_by_reads(m), missed, probe_due) {
                WatchDecision::Keep => {}
                WatchDecision::Rebuilt => {
                    if health.revive(m) {
                        revived(m);
                        tracing::warn!(
                            member = m,
                            "member {m} is ok in the catalog again (rebuilt): read again"
                        );
                    }
                    (*seen, *probed) = (false, None);
                }
                WatchDecision::Probe => {
                    *probed = Some(now);
                    match isnode_store::probe::probe_member(&vol, m) {
                        Ok(()) => {
                            vol.set_member_state(m, &isnode_store::MemberState::Ok)?;
                            if health.revive(m) {
                                revived(m);
                                tracing::warn!(member = m, "member {m} probed: identity and a block read back good; read again");
                            }
                            (*seen, *probed) = (false, None);
                        }
                        Err(why) => {
                            tracing::info!(member = m, "member {m} probed, still failed: {why}");
                        }
                    }
                }
            }
        }
        Ok(())
    }
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
        use isnode_store::MemberState as S;
        let failed = S::Failed {
            reason: "5 read errors in a row".into(),
        };
        let rebuilding = S::Rebuilding {
            done_toi: 3,
            done_bytes: 10,
        };
        // Ok after the catalog said otherwise: rebuilt; ok never seen degraded (the
        // failure not recorded yet): kept.
        assert_eq!(
            watch_decision(&S::Ok, true, true, false, false),
            WatchDecision::Rebuilt
        );
        assert_eq!(
            watch_decision(&S::Ok, false, true, false, true),
            WatchDecision::Keep
        );
        // Failed by reads, nothing missed, due: probed; otherwise kept.
        assert_eq!(
            watch_decision(&failed, true, true, false, true),
            WatchDecision::Probe
        );
        assert_eq!(
            watch_decision(&failed, true, true, false, false),
            WatchDecision::Keep
        );
        assert_eq!(
            watch_decision(&failed, true, true, true, true),
            WatchDecision::Keep,
            "missed writes: rebuild it"
        );
        assert_eq!(
            watch_decision(&failed, true, false, false, true),
            WatchDecision::Keep,
            "failed by the catalog"
        );
        assert_eq!(
            watch_decision(&rebuilding, true, true, false, true),
            WatchDecision::Keep
        );
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
