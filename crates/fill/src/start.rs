//! Starting a fill, or joining the one that runs: one fill per title, on its own thread;
//! and, at the server's start, resuming the fills the volume holds.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::fills::Fills;
use crate::job::{FillJob, FillKind};

/// Starts the fill of `name` unless one runs (then joins it: one fill per title); the job.
/// An error without an origin.
pub fn start_or_join(
    fills: &Arc<Fills>,
    name: &str,
    kind: FillKind,
) -> Result<Arc<FillJob>, String> {
    if fills.origin.is_none() {
        return Err("no origin is configured".into());
    }
    let mut jobs = fills.lock_jobs();
    if let Some(j) = jobs.get(name) {
        j.join(kind);
        return Ok(j.clone());
    }
    let job = Arc::new(FillJob::new(name, kind));
    jobs.insert(name.to_string(), job.clone());
    drop(jobs);
    fills.counters.fills_started.fetch_add(1, Ordering::Relaxed);
    let (f2, j2) = (fills.clone(), job.clone());
    let spawned = std::thread::Builder::new()
        .name("isnode-fill".into())
        .spawn(move || {
            crate::run::run(&f2, &j2);
            f2.finished(&j2);
        });
    if let Err(e) = spawned {
        job.fail_with(format!("starting the fill thread: {e}"), None);
        fills.finished(&job);
        return Err(format!("starting the fill thread: {e}"));
    }
    Ok(job)
}

/// Resumes, in the background, every fill the volume holds (a server stopped or killed
/// mid-fill); each goes on from its durable front. Nothing without an origin.
pub fn resume_all(fills: &Arc<Fills>) {
    if fills.origin().is_none() {
        return;
    }
    let names = fills.env.objects.with_volume(|vol| vol.filling_objects());
    let names = match names {
        Ok(f) => f,
        Err(e) => {
            tracing::warn!("listing the fills to resume: {e}");
            return;
        }
    };
    for f in names {
        let name = f.record.name;
        tracing::info!(title = %name, front_codewords = f.front_codewords, "resuming the fill");
        if let Err(e) = start_or_join(fills, &name, FillKind::Demand) {
            tracing::warn!(title = %name, "resuming the fill: {e}");
        }
    }
}
