//! The object a request names, filled from the origin when the volume lacks it: the one
//! lookup of every route that reads a title (sessions, content, playlists, digests).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::status::FillStatus;
use isnode_store::StoreError;

use crate::fills::{Fills, FIRST_BYTES_WAIT};
use crate::job::{FillJob, FillKind, JobFailure};
use crate::start::{start_or_join, Starter};
use isnode_pool::objects::ObjectInfo;

/// Why a request gets no object.
#[derive(Debug)]
pub enum LookupError {
    /// The catalog's answer (no origin, or not a fill matter).
    Store(StoreError),
    /// The fill failed: the status (`404`, `409`, `502`, ...) and why.
    Fill(FillStatus, String),
    /// The fill's first codewords did not come in time (`503`).
    Slow(String),
}

/// What a request finds for a title.
pub enum Found {
    /// The object to serve (complete, or a fill whose first codewords may be read).
    Ready(Arc<ObjectInfo>),
    /// A fill started or joined, its first codewords not yet readable: wait on the job
    /// ([`FillJob::first_readable`]) under a permit of [`Fills::waiters`].
    Filling(Arc<FillJob>),
}

/// The object `name` to serve: a fill under way (joined), the complete object (its origin
/// ETag checked at most every `origin_check_interval_s`: a changed one is filled again and
/// served from the new fill), or a new fill when the volume lacks it and an origin is
/// configured (refused past the caps of `starter`; `404` at once for a title the origin
/// lacked within `origin_miss_ttl_s`). Blocks (catalog, origin HEAD) but never waits on a
/// fill: call it off the runtime, and wait on a [`Found::Filling`] without a thread.
pub fn find(fills: &Arc<Fills>, name: &str, starter: Starter) -> Result<Found, LookupError> {
    // A job that is done but not yet forgotten holds the object as it was while filling:
    // the catalog has it complete.
    if let Some(job) = fills.job(name).filter(|j| !j.is_done()) {
        job.join(FillKind::Demand);
        return ready_or_filling(job);
    }
    match fills.env.objects.get(name) {
        Ok(o) => {
            touched(fills, name);
            match changed_at_origin(fills, name) {
                true => fill(fills, name, starter),
                false => Ok(Found::Ready(o)),
            }
        }
        Err(StoreError::NotFound(_)) if fills.origin().is_some() => {
            isnode_store::ingest::validate_name(name).map_err(LookupError::Store)?;
            let ttl = Duration::from_secs(fills.env.config.load().origin_miss_ttl_s);
            if fills.misses.recent(name, ttl, Instant::now()) {
                return Err(LookupError::Fill(
                    FillStatus::NotFound,
                    format!(
                        "{name:?} is not at the origin (asked less than {} s ago)",
                        ttl.as_secs()
                    ),
                ));
            }
            fill(fills, name, starter)
        }
        Err(e) => Err(LookupError::Store(e)),
    }
}

/// What a wait for a fill's first codewords ended with, as the request's answer.
pub fn first_answer(
    job: &FillJob,
    waited: Option<Result<Arc<ObjectInfo>, JobFailure>>,
) -> Result<Arc<ObjectInfo>, LookupError> {
    match waited {
        Some(Ok(info)) => Ok(info),
        Some(Err(f)) => {
            let (status, msg) = f.answer();
            Err(LookupError::Fill(status, msg))
        }
        None => Err(LookupError::Slow(format!(
            "{:?} is being filled from the origin; its first bytes did not come within {} s",
            job.name,
            FIRST_BYTES_WAIT.as_secs()
        ))),
    }
}

/// Starts or joins the fill of `name`.
fn fill(fills: &Arc<Fills>, name: &str, starter: Starter) -> Result<Found, LookupError> {
    let job = start_or_join(fills, name, FillKind::Demand, starter)
        .map_err(|(status, why)| LookupError::Fill(status, why))?;
    ready_or_filling(job)
}

/// The job's object if its first codewords may be read already, or its failure (no
/// wait); else the job to wait on.
fn ready_or_filling(job: Arc<FillJob>) -> Result<Found, LookupError> {
    match job.first() {
        Some(r) => first_answer(&job, Some(r)).map(Found::Ready),
        None => Ok(Found::Filling(job)),
    }
}

/// Whether the complete object `name`, filled from the origin, has another ETag there now
/// (checked at most every `origin_check_interval_s`; an origin error keeps the local copy).
fn changed_at_origin(fills: &Fills, name: &str) -> bool {
    let interval = Duration::from_secs(fills.env.config.load().origin_check_interval_s);
    if !fills.check_due(name, interval) {
        return false;
    }
    let Ok(Some(local)) = fills.env.objects.with_volume(|v| v.origin_etag(name)) else {
        return false; // ingested locally, or the catalog failed: nothing to compare
    };
    let Some((origin, rt)) = fills.origin() else {
        return false;
    };
    fills
        .counters
        .origin_requests
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    match rt.block_on(origin.head(name)) {
        Ok(meta) if meta.etag == local => {
            let now = isnode_pool::objects::system_clock_s() as i64;
            let r = fills
                .env
                .objects
                .with_volume_mut(|v| v.set_origin_checked(name, now));
            if let Err(e) = r {
                tracing::warn!(title = %name, "recording the origin check: {e}");
            }
            false
        }
        Ok(_) => {
            tracing::info!(title = %name, "changed at the origin: filling it again");
            true
        }
        Err(e) => {
            fills.counters.error(e.class());
            tracing::warn!(title = %name, "checking the origin: {e}; serving the local copy");
            false
        }
    }
}

impl LookupError {
    /// The answer a client gets.
    pub fn status_and_message(&self) -> (FillStatus, String) {
        match self {
            LookupError::Store(e) => (store_status(e), e.to_string()),
            LookupError::Fill(s, m) => (*s, m.clone()),
            LookupError::Slow(m) => (FillStatus::Unavailable, m.clone()),
        }
    }
}

/// The status of a catalog error (as the API's other routes answer it).
fn store_status(e: &StoreError) -> FillStatus {
    match e {
        StoreError::NotFound(_) | StoreError::BadName { .. } => FillStatus::NotFound,
        StoreError::BadObject { .. } => FillStatus::Conflict,
        _ => FillStatus::Internal,
    }
}

/// Records a use of `name` (only with a cache capacity; at most every `TOUCH_EVERY`).
fn touched(fills: &Fills, name: &str) {
    if fills.env.config.load().cache_max_bytes == 0 || !fills.touches.due(name) {
        return;
    }
    if let Err(e) = fills.env.objects.with_volume_mut(|v| v.touch(name)) {
        tracing::warn!(title = %name, "recording a use: {e}");
    }
}
