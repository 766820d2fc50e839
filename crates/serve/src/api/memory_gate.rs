//! The memory gate of content readers: under a memory cgroup's limit, a new body (content
//! or repair) is refused with `503` when the readers' floors or what the group really
//! holds would leave less free than its headroom, and the HTTP mirror's budget gives way to
//! what is held outside it (`isnode_serve_core::admission::memory` decides both), so that a
//! node under a memory limit turns players away instead of being ended, with all of them,
//! by the kernel's OOM killer. The group (named by `/proc/self/cgroup`, so a process moved
//! into a group later is judged by it) is read every [`WATCH_EVERY`] (the mirror's budget
//! follows the readers' buffers as they grow) and at an admission when the last reading is
//! older than [`READ_EVERY`] or refuses a reader after others were admitted since; readers
//! admitted between two readings are counted at a share each. Without a limit every reader
//! passes and the mirror keeps its configured budget.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use isnode_serve_core::admission::memory::{
    admit_reader, mirror_budget_bytes, Reading, Short, Verdict,
};
use isnode_sys::memory::Cgroup;

use crate::api::mirror::Mirror;
use crate::api::state::ApiState;

/// How long a reading stands for admissions (five small reads of `/proc` and sysfs).
const READ_EVERY: Duration = Duration::from_millis(100);

/// How often the group is read without admissions.
const WATCH_EVERY: Duration = Duration::from_millis(250);

/// The gate: what it weighs readers against, and its last reading.
pub(crate) struct MemoryGate {
    /// The block pool's size.
    pool_bytes: u64,
    /// The HTTP mirror and its configured budget.
    mirror: Option<(Arc<Mirror>, u64)>,
    last: Mutex<Last>,
}

/// The last reading: when, what it said (`None`: no limit), the mirror's budget it set,
/// and the readers admitted since.
#[derive(Clone, Copy)]
struct Last {
    at: Option<Instant>,
    reading: Option<(Reading, u64)>,
    admitted_since: u64,
}

impl MemoryGate {
    /// The gate of a server with a pool of `pool_bytes` and `mirror` (with its configured
    /// budget).
    pub(crate) fn new(pool_bytes: u64, mirror: Option<(Arc<Mirror>, u64)>) -> MemoryGate {
        MemoryGate {
            pool_bytes,
            mirror,
            last: Mutex::new(Last {
                at: None,
                reading: None,
                admitted_since: 0,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Last> {
        self.last.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether reader number `readers` (counting it) fits now.
    pub(crate) fn admit(&self, readers: u64) -> Verdict {
        let now = Instant::now();
        let mut last = self.lock();
        if last
            .at
            .is_none_or(|at| now.duration_since(at) >= READ_EVERY)
        {
            *last = self.read(now);
        }
        let mut verdict = self.decide(&last, readers);
        if matches!(
            verdict,
            Verdict::Refuse {
                why: Short::Held { .. },
                ..
            }
        ) && last.admitted_since > 0
        {
            // What the readers since then really took, and the mirror's room given them.
            *last = self.read(now);
            verdict = self.decide(&last, readers);
        }
        if verdict == Verdict::Admit {
            last.admitted_since += 1;
        }
        verdict
    }

    /// Reads the group now (and sets the mirror's budget), without an admission.
    pub(crate) fn refresh(&self) {
        let mut last = self.lock();
        *last = self.read(Instant::now());
    }

    fn decide(&self, last: &Last, readers: u64) -> Verdict {
        match last.reading {
            None => Verdict::Admit,
            Some((reading, budget)) => admit_reader(
                reading,
                budget,
                last.admitted_since,
                (self.pool_bytes, readers),
            ),
        }
    }

    /// Reads what the group holds, and sets the mirror's budget by it.
    fn read(&self, now: Instant) -> Last {
        let usage = Cgroup::own().and_then(|g| g.usage());
        let reading = usage.map(|u| {
            let mirror_bytes = self.mirror.as_ref().map_or(0, |(m, _)| m.held_bytes());
            let reading = Reading {
                limit_bytes: u.limit_bytes,
                held_bytes: u.held_bytes,
                mirror_bytes,
            };
            let budget = self.mirror.as_ref().map_or(0, |(mirror, configured)| {
                let budget = mirror_budget_bytes(reading, *configured);
                mirror.set_budget(budget);
                budget
            });
            (reading, budget)
        });
        if let (None, Some((mirror, configured))) = (reading, &self.mirror) {
            mirror.set_budget(*configured); // no limit (any more): the configured budget
        }
        Last {
            at: Some(now),
            reading,
            admitted_since: 0,
        }
    }
}

/// Reads the memory group every [`WATCH_EVERY`] while the API runs.
pub(crate) async fn watch(sh: Arc<ApiState>) {
    let mut tick = tokio::time::interval(WATCH_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        sh.memory_gate.refresh();
    }
}
