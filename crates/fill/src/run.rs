//! The fill thread of one title: HEAD, probe (or the filling object's own record when
//! resuming), then the ranged GETs in order into the store's [`Fill`], committed as they
//! come; retries from the durable front, restarts on a new version.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::status::FillStatus;
use bytes::Bytes;
use isnode_store::{Fill, FillSpec, StoreError, Volume};

use crate::content_check::ContentCheck;
use crate::fills::Fills;
use crate::job::{FillJob, JobFailure};
use crate::origin::{ErrorClass, Origin, OriginError, OriginMeta};
use isnode_pool::front::readable_codewords;
use isnode_pool::objects::ObjectInfo;

/// Commits at least this often while bytes come (the front moves for the viewers).
const COMMIT_EVERY: Duration = Duration::from_millis(100);
/// Attempts of one fill after origin errors (each from the durable front).
const MAX_ATTEMPTS: u32 = 6;
/// New versions met during one fill before it gives up (an object rewritten non-stop).
const MAX_VERSIONS: u32 = 4;
/// The first backoff after an origin error (doubled each time).
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// Longest sleep of the rate cap between two checks (a lifted cap applies at once).
pub(crate) const THROTTLE_STEP: Duration = Duration::from_millis(50);

/// Why an attempt stopped.
enum Stop {
    /// An origin error (retried unless it is a missing object).
    Origin(OriginError),
    /// The object changed at the origin: abandoned, started again.
    Changed,
    /// The server is stopping: the filling object stays, resumed at the next start.
    Shutdown,
    /// Cannot go on.
    Fatal(JobFailure),
}

impl From<OriginError> for Stop {
    fn from(e: OriginError) -> Stop {
        match e {
            OriginError::Changed(_) => Stop::Changed,
            e => Stop::Origin(e),
        }
    }
}

impl From<StoreError> for Stop {
    fn from(e: StoreError) -> Stop {
        let status = match e {
            _ if e.is_no_room() => FillStatus::InsufficientStorage,
            _ => FillStatus::Internal,
        };
        Stop::Fatal(JobFailure::Other {
            status,
            msg: format!("filling from the origin: {e}"),
        })
    }
}

impl From<crate::probe::ProbeError> for Stop {
    fn from(e: crate::probe::ProbeError) -> Stop {
        match e {
            crate::probe::ProbeError::Origin(e) => e.into(),
            e @ crate::probe::ProbeError::Media(_) => Stop::Fatal(JobFailure::Other {
                status: FillStatus::BadGateway,
                msg: e.to_string(),
            }),
        }
    }
}

/// Runs the fill of `job` to its end (done, failed, or the server stopping).
pub(super) fn run(fills: &Arc<Fills>, job: &Arc<FillJob>) {
    let Some((origin, rt)) = fills.origin() else {
        job.fail_with("no origin is configured".into(), Some(FillStatus::NotFound));
        return;
    };
    let origin = origin.clone();
    if fills.env.config.load().encrypt == isnode_serve_config::EncryptDefault::On {
        return crate::protected::run(fills, job, (&origin, &rt));
    }
    let (mut attempts, mut versions, mut fresh) = (0u32, 0u32, false);
    let mut backoff = FIRST_BACKOFF;
    // The MD5 of the bytes pushed, kept across attempts (a resume re-reads what it lacks).
    let mut check: Option<ContentCheck> = None;
    loop {
        let stop = match attempt(fills, job, (&origin, &rt), fresh, &mut check) {
            Ok(()) => {
                fills.mark_checked(&job.name);
                job.done();
                fills.counters.fills_done.fetch_add(1, Ordering::Relaxed);
                tracing::info!(title = %job.name, "fill complete");
                return;
            }
            Err(stop) => stop,
        };
        attempts += 1;
        fresh = false;
        match stop {
            Stop::Shutdown => return,
            Stop::Changed if versions < MAX_VERSIONS => {
                versions += 1;
                fresh = true;
                tracing::warn!(title = %job.name, "the object changed at the origin: fill started again");
            }
            Stop::Changed => {
                let e =
                    OriginError::Changed(format!("{:?} kept changing during its fill", job.name));
                job.fail(JobFailure::Origin(e));
                return;
            }
            Stop::Origin(e)
                if e.is_retryable() && attempts < MAX_ATTEMPTS && job.front().readable() > 0 =>
            {
                tracing::warn!(title = %job.name, "fill interrupted ({e}); retrying in {} ms from its front", backoff.as_millis());
                job.retrying();
                if sleep_unless_shutdown(fills, backoff) {
                    return;
                }
                backoff = (backoff * 2).min(Duration::from_secs(8));
            }
            Stop::Origin(e) => {
                tracing::warn!(title = %job.name, "fill failed: {e}");
                job.fail(JobFailure::Origin(e));
                return;
            }
            Stop::Fatal(f) => {
                tracing::warn!(title = %job.name, "fill failed: {}", f.answer().1);
                job.fail(f);
                return;
            }
        }
    }
}

/// Sleeps `d` unless the server stops first (true then).
pub(crate) fn sleep_unless_shutdown(fills: &Fills, d: Duration) -> bool {
    let end = Instant::now() + d;
    while Instant::now() < end {
        if fills.env.stop.is_stopped() {
            return true;
        }
        std::thread::sleep(THROTTLE_STEP.min(end.saturating_duration_since(Instant::now())));
    }
    fills.env.stop.is_stopped()
}

/// Counts one origin request of `job` and its outcome.
pub(crate) fn counted<T>(
    fills: &Fills,
    job: &FillJob,
    r: Result<T, OriginError>,
    bytes: impl Fn(&T) -> u64,
) -> Result<T, OriginError> {
    let c = &fills.counters;
    c.origin_requests.fetch_add(1, Ordering::Relaxed);
    job.origin_requests.fetch_add(1, Ordering::Relaxed);
    match &r {
        Ok(v) => {
            let n = bytes(v);
            c.fill_bytes.fetch_add(n, Ordering::Relaxed);
            job.fetched_bytes.fetch_add(n, Ordering::Relaxed);
        }
        Err(e) => c.error(e.class()),
    }
    r
}

/// One attempt: from the durable front (or zero) to the complete object; `check`: the
/// content check of the version (made here for a plain MD5 ETag).
fn attempt(
    fills: &Arc<Fills>,
    job: &Arc<FillJob>,
    (origin, rt): (&Arc<Origin>, &tokio::runtime::Handle),
    fresh: bool,
    check: &mut Option<ContentCheck>,
) -> Result<(), Stop> {
    let mut f = open_attempt(fills, job, (origin, rt), fresh, check)?;
    let mut p = Pipeline::new(
        fills,
        job,
        origin,
        rt,
        &f.spec,
        f.range_bytes,
        f.fill.next_byte_offset(),
    );
    if let Some(h) = f.head.take().filter(|_| f.fill.next_byte_offset() == 0) {
        p.queue.push_back(Pending::ready(0..h.len() as u64, h));
        p.next_request = p
            .next_request
            .max(p.queue.back().map_or(0, |x| x.range.end));
    }
    copy_ranges(fills, job, &mut p, &mut f, check)?;
    finish_attempt(fills, job, f, check)
}

/// An attempt's fill, opened: where it writes and what it fills.
struct Attempt {
    vol: Volume,
    fill: Fill,
    spec: FillSpec,
    /// The first bytes, read with the HEAD's probe (if any).
    head: Option<bytes::Bytes>,
    layout: isnode_store::Layout,
    range_bytes: u64,
}

/// Asks the origin for the version, makes room, and opens (or resumes) the fill: its
/// filling object is published, readable up to its durable front.
fn open_attempt(
    fills: &Arc<Fills>,
    job: &Arc<FillJob>,
    (origin, rt): (&Arc<Origin>, &tokio::runtime::Handle),
    fresh: bool,
    check: &mut Option<ContentCheck>,
) -> Result<Attempt, Stop> {
    let meta = counted(fills, job, rt.block_on(origin.head(&job.name)), |_| 0)?;
    if check.as_ref().map(ContentCheck::etag) != Some(meta.etag.as_str()) {
        *check = ContentCheck::for_etag(&meta.etag);
    }
    if meta.size_bytes == 0 {
        return Err(Stop::Fatal(JobFailure::Origin(OriginError::Garbled(
            format!("{:?} is empty at the origin", job.name),
        ))));
    }
    job.begin_attempt(meta.size_bytes, fresh);
    let mut vol = Volume::open(fills.env.objects.root())?;
    crate::evict::make_room(fills, &mut vol, &job.name, meta.size_bytes)?;
    let range_bytes = fills.env.config.load().fill_range_bytes;
    let (spec, head) = spec_for(fills, job, &vol, origin, rt, &meta, range_bytes)?;
    let fill = Fill::begin_or_resume(&mut vol, &spec)?;
    let front = job.front();
    if let Some(c) = check.as_mut() {
        catch_up(&vol, &fill, c)?;
    }
    let info = Arc::new(ObjectInfo::filling(&vol, fill.record().clone(), front)?);
    let layout = info.layout.clone();
    job.publish(info);
    publish_points(job, &fill);
    job.progress(
        fill.next_byte_offset(),
        held_back(check, &layout, fill.front_codewords()),
    );
    Ok(Attempt {
        vol,
        fill,
        spec,
        head,
        layout,
        range_bytes,
    })
}

/// Writes the origin's ranges into the fill as they come, committing the front at the
/// first codeword and every [`COMMIT_EVERY`]; stops (committed) when the server does.
fn copy_ranges(
    fills: &Fills,
    job: &FillJob,
    p: &mut Pipeline<'_>,
    f: &mut Attempt,
    check: &mut Option<ContentCheck>,
) -> Result<(), Stop> {
    let (vol, fill) = (&mut f.vol, &mut f.fill);
    let mut last_commit = Instant::now();
    while let Some((range, bytes)) = p.next()? {
        let at = fill.next_byte_offset();
        let skip = usize::try_from(at.saturating_sub(range.start)).unwrap_or(usize::MAX);
        let Some(new) = bytes.get(skip..) else {
            return Err(Stop::Fatal(JobFailure::Other {
                status: FillStatus::Internal,
                msg: format!(
                    "fill of {:?}: range {range:?} is before the front {at}",
                    job.name
                ),
            }));
        };
        fill.push(vol, new)?;
        if let Some(c) = check.as_mut() {
            c.update(new);
        }
        let first = job.front().readable() == 0;
        if first
            || last_commit.elapsed() >= COMMIT_EVERY
            || fill.next_byte_offset() >= f.spec.size_bytes
        {
            let committed = fill.commit(vol)?;
            last_commit = Instant::now();
            publish_points(job, fill);
            job.progress(
                fill.next_byte_offset(),
                held_back(check, &f.layout, committed),
            );
        }
        if fills.env.stop.is_stopped() {
            let _ = fill.commit(vol);
            return Err(Stop::Shutdown);
        }
    }
    Ok(())
}

/// Completes the fill if the origin gave every byte and the content check (if any) holds;
/// a version that fails its check is abandoned.
fn finish_attempt(
    fills: &Fills,
    job: &FillJob,
    f: Attempt,
    check: &mut Option<ContentCheck>,
) -> Result<(), Stop> {
    let Attempt {
        mut vol,
        mut fill,
        spec,
        ..
    } = f;
    let vol = &mut vol;
    if fill.next_byte_offset() < spec.size_bytes {
        return Err(Stop::Origin(OriginError::Garbled(format!(
            "{:?}: the origin's ranges ended at byte {} of {}",
            job.name,
            fill.next_byte_offset(),
            spec.size_bytes
        ))));
    }
    if let Some(Err(why)) = check.as_ref().map(ContentCheck::verdict) {
        // Never complete: the filling object goes, its readers stop, waiters get 502.
        fill.abandon(vol)?;
        *check = None;
        fills.counters.error(ErrorClass::Garbled);
        return Err(Stop::Fatal(JobFailure::Origin(OriginError::Garbled(
            format!("{:?}: {why}", job.name),
        ))));
    }
    fill.commit(vol)?;
    match fill.finish(vol) {
        Err(StoreError::NameExists(name)) => {
            // Uploaded or ingested here while the fill ran: the local object stays.
            vol.delete_filling(&name)?;
            Err(Stop::Fatal(JobFailure::Other {
                status: FillStatus::Conflict,
                msg: format!("{name:?} was uploaded here while it was filled: the upload is kept"),
            }))
        }
        other => other.map(|_| ()).map_err(Stop::from),
    }
}

/// Records an MPEG-TS fill's random-access points so far on its front (the playlist of the
/// filled part is cut at them).
fn publish_points(job: &FillJob, fill: &Fill) {
    if let Some(points) = fill.ts_points() {
        job.front().add_points(points);
    }
}

/// The codewords readers may have of `committed`: with a content check, never the last one
/// before the check passed (it is made readable when the fill completes): no reader gets
/// the whole of an object whose MD5 turns out wrong.
fn held_back(check: &Option<ContentCheck>, layout: &isnode_store::Layout, committed: u32) -> u32 {
    let readable = readable_codewords(layout, committed);
    match check {
        Some(_) => readable.min(layout.codewords().saturating_sub(1)),
        None => readable,
    }
}

/// Brings `check` to where `fill` goes on ([`Fill::next_byte_offset`]: the end of its
/// committed codewords after a resume) when it is not there: the committed codewords read
/// back from the volume (as the store's resume reads them, not through the serve pool,
/// which must never hold a block the front still cuts) and hashed again, after a resume
/// from a restart or from a front behind the bytes already hashed.
fn catch_up(vol: &Volume, fill: &Fill, check: &mut ContentCheck) -> Result<(), Stop> {
    let at = fill.next_byte_offset();
    if check.hashed_bytes() == at {
        return Ok(());
    }
    check.restart();
    let mut reader = isnode_store::ObjectReader::for_record(
        vol,
        fill.record().clone(),
        isnode_store::ReadOrder::Any,
    )?;
    let mut sbn = 0u32;
    while check.hashed_bytes() < at && sbn < fill.front_codewords() {
        reader.read_codeword(sbn, isnode_store::Want::Source)?;
        let bytes = reader.source(sbn);
        let left = usize::try_from(at - check.hashed_bytes()).unwrap_or(usize::MAX);
        check.update(bytes.get(..left.min(bytes.len())).unwrap_or(bytes));
        sbn += 1;
    }
    Ok(())
}

/// The fill's spec: the filling object's own (resuming the same version: no probe), or a
/// probe of the first range, which is then pushed rather than fetched again.
fn spec_for(
    fills: &Fills,
    job: &FillJob,
    vol: &Volume,
    origin: &Origin,
    rt: &tokio::runtime::Handle,
    meta: &OriginMeta,
    range_bytes: u64,
) -> Result<(FillSpec, Option<Bytes>), Stop> {
    if let Some(spec) = crate::resume::resumable_spec(vol, &job.name, meta)? {
        return Ok((spec, None));
    }
    let head_end = range_bytes.min(meta.size_bytes);
    let head = counted(
        fills,
        job,
        rt.block_on(origin.get_range(&job.name, 0..head_end, &meta.etag)),
        |b| b.len() as u64,
    )?;
    let probed = crate::probe::probe(rt, origin, &job.name, (meta.size_bytes, &meta.etag), &head);
    if let Ok(p) = &probed {
        let (requests, bytes) = p.fetched;
        for _ in 0..requests {
            let _ = counted(fills, job, Ok::<_, OriginError>(()), |_| 0);
        }
        fills
            .counters
            .fill_bytes
            .fetch_add(bytes, Ordering::Relaxed);
        job.fetched_bytes.fetch_add(bytes, Ordering::Relaxed);
    }
    let probed = probed?;
    let spec = FillSpec {
        name: job.name.clone(),
        size_bytes: meta.size_bytes,
        bitrate_bps: probed.bitrate_bps,
        content_type: probed.content_type,
        origin_etag: meta.etag.clone(),
    };
    Ok((spec, Some(head)))
}

/// One ranged GET, fetched or under way.
struct Pending {
    range: Range<u64>,
    ready: Option<Bytes>,
    task: Option<tokio::task::JoinHandle<Result<Bytes, OriginError>>>,
}

impl Pending {
    fn ready(range: Range<u64>, bytes: Bytes) -> Pending {
        Pending {
            range,
            ready: Some(bytes),
            task: None,
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(t) = &self.task {
            t.abort();
        }
    }
}

/// The ranged GETs of one attempt: at most `fill_parallel_ranges` in flight, handed out
/// in order, started no faster than the job's rate cap.
struct Pipeline<'a> {
    fills: &'a Arc<Fills>,
    job: &'a Arc<FillJob>,
    origin: &'a Arc<Origin>,
    rt: &'a tokio::runtime::Handle,
    etag: String,
    size: u64,
    range_bytes: u64,
    next_request: u64,
    queue: VecDeque<Pending>,
    /// The rate cap's clock: when, and from which byte, it started counting.
    paced_from: (Instant, u64),
}

impl<'a> Pipeline<'a> {
    fn new(
        fills: &'a Arc<Fills>,
        job: &'a Arc<FillJob>,
        origin: &'a Arc<Origin>,
        rt: &'a tokio::runtime::Handle,
        spec: &FillSpec,
        range_bytes: u64,
        from: u64,
    ) -> Pipeline<'a> {
        // Ranges are aligned to the range size (the origin's blocks).
        let aligned = from - from % range_bytes.max(1);
        Pipeline {
            fills,
            job,
            origin,
            rt,
            etag: spec.origin_etag.clone(),
            size: spec.size_bytes,
            range_bytes,
            next_request: aligned,
            queue: VecDeque::new(),
            paced_from: (Instant::now(), aligned),
        }
    }

    /// The next range in order with its bytes; `None` once every range was handed out.
    fn next(&mut self) -> Result<Option<(Range<u64>, Bytes)>, Stop> {
        self.fill_queue()?;
        let Some(mut p) = self.queue.pop_front() else {
            return Ok(None);
        };
        let bytes = match (p.ready.take(), p.task.take()) {
            (Some(b), _) => b,
            (None, Some(task)) => match self.rt.block_on(task) {
                Ok(r) => r?,
                Err(e) => {
                    return Err(Stop::Origin(OriginError::Unreachable(format!(
                        "origin request lost: {e}"
                    ))))
                }
            },
            (None, None) => {
                return Err(Stop::Origin(OriginError::Unreachable(
                    "no origin request".into(),
                )))
            }
        };
        Ok(Some((p.range.clone(), bytes)))
    }

    /// Starts ranged GETs until `fill_parallel_ranges` are in flight (rate cap allowing).
    fn fill_queue(&mut self) -> Result<(), Stop> {
        let parallel = self.fills.env.config.load().fill_parallel_ranges.max(1) as usize;
        while self.queue.len() < parallel && self.next_request < self.size {
            if !self.queue.is_empty() && !self.may_start() {
                break;
            }
            if self.queue.is_empty() {
                self.wait_for_cap()?;
            }
            let start = self.next_request;
            let end = (start + self.range_bytes).min(self.size);
            self.next_request = end;
            let (origin, name, etag) = (
                self.origin.clone(),
                self.job.name.clone(),
                self.etag.clone(),
            );
            let (fills, job) = (self.fills.clone(), self.job.clone());
            let task = self.rt.spawn(async move {
                let r = origin.get_range(&name, start..end, &etag).await;
                counted(&fills, &job, r, |b| b.len() as u64)
            });
            self.queue.push_back(Pending {
                range: start..end,
                ready: None,
                task: Some(task),
            });
        }
        Ok(())
    }

    /// Whether the rate cap lets the next range start now.
    fn may_start(&self) -> bool {
        let cap = self.job.rate_cap_bps();
        if cap == 0 {
            return true;
        }
        let (t0, b0) = self.paced_from;
        let bits = (self.next_request - b0) as f64 * 8.0;
        t0.elapsed().as_secs_f64() >= bits / cap as f64
    }

    /// Waits until the rate cap lets the next range start (the server stopping ends it).
    fn wait_for_cap(&self) -> Result<(), Stop> {
        while !self.may_start() {
            if sleep_unless_shutdown(self.fills, THROTTLE_STEP) {
                return Err(Stop::Shutdown);
            }
        }
        Ok(())
    }
}
