//! Starting a fill, or joining the one that runs: one fill per title, on its own thread;
//! and, at the server's start, resuming the fills the volume holds.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::fills::Fills;
use crate::job::{FillJob, FillKind};
use crate::limits::ClientKey;
use crate::status::FillStatus;

/// Who asks for a fill.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Starter {
    /// A viewer's request from this client: a new fill is refused past `fill_max_active`
    /// fills running, or `fill_max_per_client` of this client's.
    Client(ClientKey),
    /// An operator (a pre-fill) or the server (a resume): never refused for the caps.
    Operator,
}

/// Starts the fill of `name` unless one runs (then joins it: one fill per title); the job.
/// An error without an origin (`409`), past the caps (`503`), or without a thread.
pub fn start_or_join(
    fills: &Arc<Fills>,
    name: &str,
    kind: FillKind,
    starter: Starter,
) -> Result<Arc<FillJob>, (FillStatus, String)> {
    if fills.origin.is_none() {
        return Err((FillStatus::Conflict, "no origin is configured".into()));
    }
    let mut jobs = fills.lock_jobs();
    if let Some(j) = jobs.get(name) {
        j.join(kind);
        return Ok(j.clone());
    }
    if fills.draining() {
        return Err(busy("the server is draining".into()));
    }
    let client = match starter {
        Starter::Client(c) => {
            let cfg = fills.env.config.load();
            let active = jobs.len() as u64;
            let mine = jobs.values().filter(|j| j.starter == Some(c)).count() as u64;
            if active >= u64::from(cfg.fill_max_active) {
                return Err(busy(format!(
                    "{active} fills run already (fill_max_active)"
                )));
            }
            if mine >= u64::from(cfg.fill_max_per_client) {
                return Err(busy(format!(
                    "{mine} fills this client started run already (fill_max_per_client)"
                )));
            }
            Some(c)
        }
        Starter::Operator => None,
    };
    let job = Arc::new(FillJob::started_by(name, kind, client));
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
        return Err((
            FillStatus::Internal,
            format!("starting the fill thread: {e}"),
        ));
    }
    Ok(job)
}

/// A refusal for the caps: `503`, the fills going on.
fn busy(why: String) -> (FillStatus, String) {
    (
        FillStatus::Unavailable,
        format!("too many fills from the origin: {why}; retry"),
    )
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
        if let Err((_, e)) = start_or_join(fills, &name, FillKind::Demand, Starter::Operator) {
            tracing::warn!(title = %name, "resuming the fill: {e}");
        }
    }
}
