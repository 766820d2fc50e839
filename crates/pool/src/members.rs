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
//! The state and the decisions are sans-IO, in [`isnode_serve_core::member_health`]
//! (re-exported here; the simulation drives them); this module is their shell: the log,
//! the error counters, the catalog writes and the probes.

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use std::path::Path;
use std::sync::Mutex;

use isnode_serve_config::ConfigCell;
use isnode_serve_core::block::BlockKey;
pub use isnode_serve_core::member_health::{
    block_id, fails_after, hedge_member, watch_decision, CatalogState, MemberHealth, MemberState,
    WatchDecision, SLOW_HOLD_NS,
};
use isnode_sys::clock::Clock;
use isnode_sys::event::{Event, IDLE_WAIT};
use isnode_sys::stop::Stop;

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
                match record_failed(root, member, reason) {
                    // The catalog says failed or rebuilding now: an ok seen later is a rebuild
                    // (or an operator's word), however soon it comes.
                    Ok(()) => watch.saw_degraded(member),
                    Err(e) => {
                        tracing::warn!("recording member {member} as failed in the catalog: {e}")
                    }
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

/// Writes `member` failed into the catalog, unless it says failed or rebuilding already:
/// either way the catalog calls it degraded afterwards.
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

/// The catalog's state of a member as [`watch_decision`] takes it.
pub fn catalog_state(state: &isnode_store::MemberState) -> CatalogState {
    match state {
        isnode_store::MemberState::Ok => CatalogState::Ok,
        isnode_store::MemberState::Failed { .. } => CatalogState::Failed,
        isnode_store::MemberState::Rebuilding { .. } => CatalogState::Rebuilding,
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

    /// The catalog was seen failed or rebuilding for `member` (its failure was written there,
    /// or found there already).
    fn saw_degraded(&mut self, member: u32) {
        if let Some(seen) = self.seen_degraded.get_mut(member as usize) {
            *seen = true;
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
            match watch_decision(
                catalog_state(state),
                *seen,
                health.failed_by_reads(m),
                missed,
                probe_due,
            ) {
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
