//! The original bytes over HTTP (`GET`/`HEAD /v1/objects/{name}/content`, and `/o/{name}`
//! for players) with `Range` (RFC 9110), and the unicast repair route
//! (`GET /v1/objects/{name}/codewords/{sbn}/packets?esi=...`): docs/protocol.md,
//! "Content over HTTP" and "Unicast repair".
//!
//! The bytes come from the shared block pool: a body ([`ContentBody`]) is produced as its
//! connection asks for it, on the runtime's threads, each chunk (at most 64 KiB, or one
//! codeword's slice when read from disk) copied once out of the stored packets of blocks
//! already in the pool (verified whole when they entered it); reads, a fill's front and
//! rebuilds go to tokio's blocking pool through [`PoolRead`]. A reader holds about one
//! chunk (and hyper's buffer) whatever it asked for, and at most `--max-content-readers`
//! bodies are produced at once.

use std::future::Future;
use std::io;
use std::ops::Range;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use http_body::Frame;
use isnode_proto::range::{
    http_date, if_none_match, if_range_matches, object_etag, parse_range, RangeRequest,
};
use isnode_proto::ErrorBody;

use super::mirror::{Filling, Held};
use super::pool_read::{gather_source, PoolRead};
use super::{error, ApiError, Asker, Sh};
use crate::api::state::{ApiState, DISK_READ_SLOT_WAIT};
use isnode_pool::cache::BlockKey;
use isnode_pool::front::Wait;
use isnode_pool::objects::ObjectInfo;
use isnode_serve_core::admission::memory::{headroom_bytes, Short, Verdict};

/// `GET`/`HEAD` of an object's original bytes.
pub(super) async fn content(
    _: super::roles::Viewer,
    State(sh): Sh,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    method: Method,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let obj = match super::lookup(&sh, Asker::Viewer(peer.ip()), name).await {
        Ok(o) => o,
        Err(r) => return r,
    };
    if let Some(r) = replaced_since(&obj, query.as_deref()) {
        return r;
    }
    let (status, base, plan) = match answer_plan(&obj, &headers) {
        Ok(a) => a,
        Err(r) => return *r,
    };
    let m = &sh.metrics;
    m.http_content_requests.fetch_add(1, Ordering::Relaxed);
    if status == StatusCode::PARTIAL_CONTENT {
        m.http_range_requests.fetch_add(1, Ordering::Relaxed);
    }
    if method == Method::HEAD || plan.body_len() == 0 {
        return (status, base, Body::empty()).into_response();
    }
    let slot = match ReaderPermit::take(&sh) {
        Ok(s) => s,
        Err(e) => return e.into_response(),
    };
    let body = ContentBody::new(sh.clone(), obj, &plan, slot);
    (status, base, Body::new(body)).into_response()
}

/// The `410` of a request whose version (`isnode_version`, as a playlist's segment URIs carry it: the
/// object's TOI) is not the object's: the title was replaced since the playlist was made,
/// and its segments' byte ranges are of the old version, not to be spliced with the new
/// one's bytes. `None` (go on) for the stored version, or a request without one.
fn replaced_since(obj: &ObjectInfo, query: Option<&str>) -> Option<Response> {
    let v = query.and_then(|q| {
        q.split('&')
            .find_map(|kv| kv.strip_prefix("isnode_version="))
    })?;
    if v.parse::<u32>().ok() == Some(obj.rec.toi) {
        return None;
    }
    Some(error(
        StatusCode::GONE,
        format!(
            "{:?} has been replaced since this playlist was made: fetch the playlist again",
            obj.rec.name
        ),
    ))
}

fn put(h: &mut HeaderMap, k: header::HeaderName, v: &str) {
    if let Ok(v) = HeaderValue::from_str(v) {
        h.insert(k, v);
    }
}

/// The status, headers and body plan of a content request (conditional requests and
/// `Range` decided), or the complete answer (`304`, `400`, `416`), boxed.
fn answer_plan(
    obj: &ObjectInfo,
    headers: &HeaderMap,
) -> Result<(StatusCode, HeaderMap, Plan), Box<Response>> {
    let len = obj.rec.size_bytes;
    let etag = object_etag(obj.rec.toi, obj.rec.content_crc32c);
    let mut base = HeaderMap::new();
    put(&mut base, header::ACCEPT_RANGES, "bytes");
    put(&mut base, header::ETAG, &etag);
    put(
        &mut base,
        header::LAST_MODIFIED,
        &http_date(obj.rec.created_unix),
    );
    if let Some(v) = headers.get(header::IF_NONE_MATCH) {
        if if_none_match(v.as_bytes(), &etag) {
            return Err(Box::new((StatusCode::NOT_MODIFIED, base).into_response()));
        }
    }
    let range_applies = headers
        .get(header::IF_RANGE)
        .is_none_or(|v| if_range_matches(v.as_bytes(), &etag));
    let range = headers
        .get(header::RANGE)
        .filter(|_| range_applies)
        .map(|v| v.as_bytes());
    let (ranges, status) = match parse_range(range, len) {
        RangeRequest::Full => (std::iter::once(0..len).collect(), StatusCode::OK),
        RangeRequest::Partial(r) => (r, StatusCode::PARTIAL_CONTENT),
        RangeRequest::Unsatisfiable => {
            put(&mut base, header::CONTENT_RANGE, &format!("bytes */{len}"));
            let body = ErrorBody::new(format!("no requested range lies within the {len} bytes"));
            let answer = (StatusCode::RANGE_NOT_SATISFIABLE, base, axum::Json(body));
            return Err(Box::new(answer.into_response()));
        }
        RangeRequest::Malformed => {
            return Err(Box::new(error(
                StatusCode::BAD_REQUEST,
                "malformed Range header",
            )))
        }
        RangeRequest::TooMany => {
            let max = isnode_proto::range::MAX_RANGES;
            let why = format!("too many ranges: at most {max} per request");
            return Err(Box::new(error(StatusCode::BAD_REQUEST, why)));
        }
    };
    let content_type = Some(obj.rec.content_type.as_str())
        .filter(|t| !t.is_empty())
        .unwrap_or("application/octet-stream");
    let plan = Plan::new(
        ranges,
        len,
        content_type,
        status == StatusCode::PARTIAL_CONTENT,
    );
    put(&mut base, header::CONTENT_TYPE, &plan.content_type);
    put(
        &mut base,
        header::CONTENT_LENGTH,
        &plan.body_len().to_string(),
    );
    if let Some(cr) = plan.single_content_range() {
        put(&mut base, header::CONTENT_RANGE, &cr);
    }
    Ok((status, base, plan))
}

/// One of the `--max-content-readers` places of a body being produced (freed on drop),
/// taken only if the memory gate admits one more reader (`api/memory_gate.rs`).
struct ReaderPermit(Arc<ApiState>);

impl ReaderPermit {
    fn take(sh: &Arc<ApiState>) -> Result<ReaderPermit, ApiError> {
        let m = &sh.metrics;
        let max = sh.config().max_content_readers;
        if m.http_readers_active.fetch_add(1, Ordering::AcqRel) >= max {
            m.http_readers_active.fetch_sub(1, Ordering::AcqRel);
            m.http_readers_refused.fetch_add(1, Ordering::Relaxed);
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("{max} content readers already (--max-content-readers): try again"),
            ));
        }
        let readers = m.http_readers_active.load(Ordering::Acquire);
        let permit = ReaderPermit(sh.clone());
        if let Verdict::Refuse { limit_bytes, why } = sh.memory_gate.admit(readers) {
            m.http_readers_refused_memory
                .fetch_add(1, Ordering::Relaxed);
            let (limit_mib, free_mib) = (limit_bytes >> 20, headroom_bytes(limit_bytes) >> 20);
            let what = match why {
                Short::Shares { most } => format!(
                    "the memory limit's {limit_mib} MiB holds {most} readers beside the pool"
                ),
                Short::Held { held_bytes } => format!(
                    "{} MiB of the memory limit's {limit_mib} MiB held, {free_mib} MiB kept free",
                    held_bytes >> 20
                ),
            };
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("out of memory for another reader: {what}: try again"),
            ));
        }
        Ok(permit)
    }
}

impl Drop for ReaderPermit {
    fn drop(&mut self) {
        self.0
            .metrics
            .http_readers_active
            .fetch_sub(1, Ordering::AcqRel);
    }
}

/// What a body is made of: the ranges, and for several of them the multipart framing.
struct Plan {
    ranges: Vec<Range<u64>>,
    len: u64,
    /// The part type (the object's type).
    part_type: String,
    /// The response's type (the object's, or `multipart/byteranges`).
    content_type: String,
    /// Multipart boundary, if there are several ranges.
    boundary: Option<String>,
    partial: bool,
}

impl Plan {
    fn new(ranges: Vec<Range<u64>>, len: u64, part_type: &str, partial: bool) -> Plan {
        let boundary = (ranges.len() > 1).then(|| format!("isnode-{:016x}", rand::random::<u64>()));
        let content_type = match &boundary {
            Some(b) => format!("multipart/byteranges; boundary={b}"),
            None => part_type.to_string(),
        };
        Plan {
            ranges,
            len,
            part_type: part_type.to_string(),
            content_type,
            boundary,
            partial,
        }
    }

    fn single_content_range(&self) -> Option<String> {
        match (self.partial, &self.boundary, self.ranges.first()) {
            (true, None, Some(r)) => Some(format!("bytes {}-{}/{}", r.start, r.end - 1, self.len)),
            _ => None,
        }
    }

    /// The head of part `i` of a multipart body.
    fn part_head(&self, i: usize) -> Vec<u8> {
        let (Some(b), Some(r)) = (&self.boundary, self.ranges.get(i)) else {
            return Vec::new();
        };
        let lead = if i == 0 { "" } else { "\r\n" };
        format!(
            "{lead}--{b}\r\nContent-Type: {}\r\nContent-Range: bytes {}-{}/{}\r\n\r\n",
            self.part_type,
            r.start,
            r.end - 1,
            self.len
        )
        .into_bytes()
    }

    fn tail(&self) -> Vec<u8> {
        match &self.boundary {
            Some(b) => format!("\r\n--{b}--\r\n").into_bytes(),
            None => Vec::new(),
        }
    }

    fn body_len(&self) -> u64 {
        let data: u64 = self.ranges.iter().map(|r| r.end - r.start).sum();
        let framing: usize = (0..self.ranges.len())
            .map(|i| self.part_head(i).len())
            .sum::<usize>()
            + self.tail().len();
        data + framing as u64
    }
}

/// The body of a content answer, produced as the connection asks for it, on the runtime's
/// threads: a slice of a codeword whose blocks are in the pool is copied once straight out
/// of its stored packets ([`gather_source`]: no CRC of blocks verified on their way in, no
/// decoder); only a codeword that needs a block read, a fill's front, or a rebuild goes to
/// the blocking pool ([`PoolRead::source_range`]). A codeword that cannot be read nor
/// rebuilt ends the body with an error (the connection is cut: the client sees a short
/// body, never wrong bytes).
struct ContentBody {
    sh: Arc<ApiState>,
    obj: Arc<ObjectInfo>,
    /// The body's pieces in order: multipart framing and byte ranges of the object.
    pieces: Vec<Piece>,
    /// The piece being produced.
    next: usize,
    /// The next byte of the object, in a [`Piece::Data`].
    at: u64,
    /// A codeword slice being read on the blocking pool.
    reading: Option<tokio::task::JoinHandle<Result<Bytes, String>>>,
    _permit: ReaderPermit,
}

/// A piece of a content body.
enum Piece {
    /// Multipart framing.
    Framing(Bytes),
    /// Bytes of the object.
    Data(Range<u64>),
}

impl ContentBody {
    fn new(sh: Arc<ApiState>, obj: Arc<ObjectInfo>, plan: &Plan, permit: ReaderPermit) -> Self {
        let mut pieces = Vec::new();
        for (i, r) in plan.ranges.iter().enumerate() {
            let head = plan.part_head(i);
            if !head.is_empty() {
                pieces.push(Piece::Framing(Bytes::from(head)));
            }
            pieces.push(Piece::Data(r.clone()));
        }
        let tail = plan.tail();
        if !tail.is_empty() {
            pieces.push(Piece::Framing(Bytes::from(tail)));
        }
        let at = plan.ranges.first().map_or(0, |r| r.start);
        ContentBody {
            sh,
            obj,
            pieces,
            next: 0,
            at,
            reading: None,
            _permit: permit,
        }
    }

    /// Moves on to the next piece.
    fn advance(&mut self) {
        self.next += 1;
        if let Some(Piece::Data(r)) = self.pieces.get(self.next) {
            self.at = r.start;
        }
    }

    /// The next chunk of the data piece ending at `end`: from the mirror or the pool now,
    /// or `None` with a read started on the blocking pool.
    fn data_chunk(&mut self, end: u64) -> Option<Bytes> {
        let layout = &self.obj.layout;
        let sbn = codeword_at(&self.obj, self.at);
        let cw_start = layout.codeword_offset(sbn);
        let cw_end = cw_start + layout.codeword_data_len(sbn);
        let from = usize::try_from(self.at - cw_start).unwrap_or(usize::MAX);
        let to = usize::try_from(end.min(cw_end) - cw_start).unwrap_or(usize::MAX);
        let want = Want { sbn, from, to };
        let held = match (&self.sh.mirror, &self.obj.fill) {
            (Some(mirror), None) => mirror.claim(&self.obj, sbn),
            _ => Held::Bypass,
        };
        match held {
            Held::Ready(region) => region.frame(from, to.min(from + MIRROR_FRAME_BYTES)),
            Held::Fill(filling) => self.fill_mirror(want, filling),
            Held::Bypass => self.copy_chunk(want),
        }
    }

    /// Bytes of `want` copied out of the pool's stored packets now (at most
    /// [`CHUNK_BYTES`]), or `None` with the read started on the blocking pool.
    fn copy_chunk(&mut self, want: Want) -> Option<Bytes> {
        let Want { sbn, from, to } = want;
        let quick_to = to.min(from.saturating_add(CHUNK_BYTES));
        let mut out = Vec::with_capacity(quick_to.saturating_sub(from));
        if self.gather_now(sbn, from, quick_to, &mut out) {
            return Some(Bytes::from(out));
        }
        self.read_later(want, None);
        None
    }

    /// Codeword `want.sbn` gathered whole into the mirror (by this response: others copy
    /// meanwhile), then its first frame; read on the blocking pool if its blocks are not
    /// all in the pool.
    fn fill_mirror(&mut self, want: Want, filling: Filling) -> Option<Bytes> {
        let mut data = Vec::with_capacity(filling.data_len());
        if self.gather_now(want.sbn, 0, filling.data_len(), &mut data) {
            return match filling.fill(&data) {
                Some(region) => {
                    region.frame(want.from, want.to.min(want.from + MIRROR_FRAME_BYTES))
                }
                None => data
                    .get(want.from..want.to.min(want.from + CHUNK_BYTES))
                    .map(Bytes::copy_from_slice),
            };
        }
        self.read_later(want, Some(filling));
        None
    }

    /// Appends bytes `from..to` of codeword `sbn` to `out` if its blocks are all in the
    /// pool (and its packets pass their checks).
    fn gather_now(&self, sbn: u32, from: usize, to: usize, out: &mut Vec<u8>) -> bool {
        if !self.obj.readable(sbn) {
            return false;
        }
        let cache = &self.sh.control.cache;
        let mut peek = |key: BlockKey| {
            let pin = cache.peek(&key)?;
            cache.stats().hits.fetch_add(1, Ordering::Relaxed);
            Some(pin)
        };
        gather_source(&self.obj, sbn, from, to, &mut peek, out)
    }

    /// Reads `want` (at most [`CHUNK_BYTES`] of it) on the blocking pool (the whole
    /// codeword into the mirror when `filling`), after a fill's front reached it.
    fn read_later(&mut self, want: Want, filling: Option<Filling>) {
        let (sh, obj) = (self.sh.clone(), self.obj.clone());
        // A codeword at a fill's front is waited for without a thread; only the read
        // itself takes one.
        self.reading = Some(tokio::spawn(async move {
            let Want { sbn, from, to } = want;
            at_front(&sh, &obj, sbn).await?;
            // A copy reads one chunk (its blocks stay in the pool for the next): a reader
            // holds a chunk, not the rest of a codeword, while its connection sends it.
            let (lo, hi) = match &filling {
                Some(f) => (0, f.data_len()),
                None => (from, to.min(from.saturating_add(CHUNK_BYTES))),
            };
            let wait = DISK_READ_SLOT_WAIT;
            let slot = tokio::time::timeout(wait, sh.disk_read_slots.acquire())
                .await
                .map_err(|_| format!("no disk read slot for codeword {sbn} within {wait:?}"))?
                .map_err(|e| format!("reading codeword {sbn}: {e}"))?;
            let sh = sh.clone();
            let read = tokio::task::spawn_blocking(move || {
                let mut out = Vec::with_capacity(hi.saturating_sub(lo));
                PoolRead::new(&sh, &obj).source_range(sbn, lo, hi, &mut out)?;
                Ok::<_, String>(out)
            });
            let data = read
                .await
                .map_err(|e| format!("reading codeword {sbn}: {e}"))??;
            drop(slot);
            let Some(filling) = filling else {
                return Ok(Bytes::from(data));
            };
            let frame = match filling.fill(&data) {
                Some(region) => region.frame(from, to.min(from + MIRROR_FRAME_BYTES)),
                None => None,
            };
            frame
                .or_else(|| {
                    data.get(from..to.min(from + CHUNK_BYTES))
                        .map(Bytes::copy_from_slice)
                })
                .ok_or_else(|| format!("codeword {sbn} does not hold bytes {from}..{to}"))
        }));
    }

    /// `bytes` as the body's next frame, counted.
    fn emit(&mut self, bytes: Bytes, data: bool) -> FramePoll {
        let n = bytes.len() as u64;
        if data {
            self.at += n;
        }
        self.sh.metrics.http_bytes.fetch_add(n, Ordering::Relaxed);
        Poll::Ready(Some(Ok(Frame::data(bytes))))
    }

    fn cut(&self, why: String) -> FramePoll {
        tracing::warn!(object = %self.obj.rec.name, "content body cut: {why}");
        Poll::Ready(Some(Err(io::Error::other(why))))
    }
}

/// What [`ContentBody`] answers a poll with.
type FramePoll = Poll<Option<Result<Frame<Bytes>, io::Error>>>;

/// Most bytes of one chunk copied out of the pool on the runtime's thread.
const CHUNK_BYTES: usize = 64 << 10;
/// Most bytes of one frame sent from the mirror (what a response pins while its
/// connection sends it).
const MIRROR_FRAME_BYTES: usize = 128 << 10;

/// Bytes `from..to` of codeword `sbn`'s data.
#[derive(Clone, Copy, Debug)]
struct Want {
    sbn: u32,
    from: usize,
    to: usize,
}

impl http_body::Body for ContentBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> FramePoll {
        let this = &mut *self;
        loop {
            if let Some(reading) = &mut this.reading {
                let done = std::task::ready!(Pin::new(reading).poll(cx));
                this.reading = None;
                return match done {
                    Ok(Ok(v)) if !v.is_empty() => this.emit(v, true),
                    Ok(Ok(_)) => this.cut(format!("no bytes at {}", this.at)),
                    Ok(Err(why)) => this.cut(why),
                    Err(e) => this.cut(format!("content read failed: {e}")),
                };
            }
            match this.pieces.get(this.next) {
                None => return Poll::Ready(None),
                Some(Piece::Framing(b)) => {
                    let b = b.clone();
                    this.advance();
                    return this.emit(b, false);
                }
                Some(Piece::Data(r)) if this.at >= r.end => this.advance(),
                Some(Piece::Data(r)) => {
                    let end = r.end;
                    if let Some(b) = this.data_chunk(end) {
                        return this.emit(b, true);
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.reading.is_none() && self.next >= self.pieces.len()
    }
}

/// Waits until codeword `sbn` of an object still filling is committed (bounded); an error
/// if the fill failed or stalled (the body is cut: never bytes of another version).
pub(super) fn wait_at_front(obj: &ObjectInfo, sbn: u32) -> Result<(), String> {
    let Some(front) = &obj.fill else {
        return Ok(());
    };
    let deadline = std::time::Instant::now() + isnode_fill::FRONT_WAIT;
    front_answer(obj, sbn, front.wait_for(sbn, deadline))
}

/// [`wait_at_front`] without a thread (a task waiting on the fill's job, dropped with its
/// request): until codeword `sbn` is committed, the fill fails, or [`isnode_fill::FRONT_WAIT`].
async fn at_front(sh: &ApiState, obj: &ObjectInfo, sbn: u32) -> Result<(), String> {
    let Some(front) = &obj.fill else {
        return Ok(());
    };
    let wait = match (front.has(sbn), sh.fills.job(&obj.rec.name)) {
        (true, _) => Wait::Ready,
        (false, Some(job)) => {
            let deadline = tokio::time::Instant::now() + isnode_fill::FRONT_WAIT;
            job.reached(front, sbn, deadline).await
        }
        // The fill ended short of `sbn` (or another version is filling).
        (false, None) => Wait::Failed,
    };
    front_answer(obj, sbn, wait)
}

/// What a wait at the front ended with.
fn front_answer(obj: &ObjectInfo, sbn: u32, wait: Wait) -> Result<(), String> {
    match wait {
        Wait::Ready => Ok(()),
        Wait::Failed => Err(format!(
            "the fill of {:?} from the origin failed at codeword {sbn}",
            obj.rec.name
        )),
        Wait::TimedOut => Err(format!(
            "the fill of {:?} from the origin did not reach codeword {sbn} in time",
            obj.rec.name
        )),
    }
}

/// The codeword holding byte `offset` of the object (`offset` < its length).
fn codeword_at(obj: &ObjectInfo, offset: u64) -> u32 {
    let layout = &obj.layout;
    let (mut lo, mut hi) = (0u32, layout.codewords());
    // The last codeword whose first byte is at or before `offset`.
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if layout.codeword_offset(mid) <= offset {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Most ESIs in one repair request (a codeword has at most 255 symbols).
const MAX_REPAIR_ESIS: usize = 255;

/// `GET /v1/objects/{name}/codewords/{sbn}/packets?esi=A,B,...`: stored packets of one
/// codeword, each prefixed by its 2-byte big-endian length.
pub(super) async fn packets(
    _: super::roles::Viewer,
    State(sh): Sh,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    Path((name, sbn)): Path<(String, String)>,
    RawQuery(query): RawQuery,
) -> Response {
    let Ok(sbn) = sbn.parse::<u32>() else {
        return error(
            StatusCode::BAD_REQUEST,
            format!("codeword {sbn:?} is not a number"),
        );
    };
    let esis = match parse_esis(query.as_deref().unwrap_or("")) {
        Ok(e) => e,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    let obj = match super::lookup(&sh, Asker::Viewer(peer.ip()), name).await {
        Ok(o) => o,
        Err(r) => return r,
    };
    if sbn >= obj.layout.codewords() {
        return error(
            StatusCode::NOT_FOUND,
            format!(
                "{} has no codeword {sbn} (it has {})",
                obj.rec.name,
                obj.layout.codewords()
            ),
        );
    }
    let n = obj.layout.encoding_symbols(sbn);
    if esis.len() > n as usize {
        return error(
            StatusCode::BAD_REQUEST,
            format!("{} ESIs asked of a codeword of {n} symbols", esis.len()),
        );
    }
    if let Some(bad) = esis.iter().find(|&&e| e >= n) {
        return error(
            StatusCode::BAD_REQUEST,
            format!("ESI {bad} is not below k+m = {n} for codeword {sbn}"),
        );
    }
    let slot = match ReaderPermit::take(&sh) {
        Ok(s) => s,
        Err(e) => return e.into_response(),
    };
    if let Err(why) = at_front(&sh, &obj, sbn).await {
        return error(StatusCode::SERVICE_UNAVAILABLE, why);
    }
    let sh2 = sh.clone();
    let answer = tokio::task::spawn_blocking(move || {
        let _slot = slot;
        let mut out = Vec::new();
        PoolRead::new(&sh2, &obj)
            .packets(sbn, &esis, &mut out)
            .map(|rebuilt| (out, rebuilt, esis.len() as u64))
    })
    .await;
    match answer {
        Ok(Ok((body, rebuilt, count))) => {
            let m = &sh.metrics;
            m.repair_requests.fetch_add(1, Ordering::Relaxed);
            m.repair_packets.fetch_add(count, Ordering::Relaxed);
            let rebuilt_symbols = &sh.plane_counters.symbols_rebuilt;
            rebuilt_symbols.fetch_add(u64::from(rebuilt), Ordering::Relaxed);
            m.http_bytes.fetch_add(body.len() as u64, Ordering::Relaxed);
            ([(header::CONTENT_TYPE, "application/octet-stream")], body).into_response()
        }
        Ok(Err(why)) => error(StatusCode::INTERNAL_SERVER_ERROR, why),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("repair read failed: {e}"),
        ),
    }
}

/// The ESIs of a repair query: `esi=` and a comma-separated list of distinct decimal ESIs.
pub(crate) fn parse_esis(query: &str) -> Result<Vec<u32>, String> {
    let list = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("esi="))
        .ok_or("the query must name the symbols: ?esi=1,5,9")?;
    let list = list.replace("%2C", ",").replace("%2c", ",");
    let mut esis: Vec<u32> = Vec::new();
    for item in list.split(',') {
        if esis.len() == MAX_REPAIR_ESIS {
            return Err(format!("more than {MAX_REPAIR_ESIS} ESIs"));
        }
        let esi = item
            .parse::<u32>()
            .map_err(|_| format!("ESI {item:?} is not a number"))?;
        if esis.contains(&esi) {
            return Err(format!("ESI {esi} asked twice"));
        }
        esis.push(esi);
    }
    Ok(esis)
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)] // a list of one byte range is what is meant
mod tests {
    use super::*;

    #[test]
    fn repair_queries() {
        assert_eq!(parse_esis("esi=1,5,9").unwrap(), [1, 5, 9]);
        assert_eq!(parse_esis("x=1&esi=0%2C3").unwrap(), [0, 3]);
        for bad in [
            "", "esi=", "esi=1,,2", "esi=1,1", "esi=-1", "esis=1", "esi=1;2",
        ] {
            assert!(parse_esis(bad).is_err(), "{bad}");
        }
        let many = (0..256)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",");
        assert!(parse_esis(&format!("esi={many}")).is_err());
    }

    #[test]
    fn multipart_length_is_exact() {
        let plan = Plan::new(vec![0..10, 20..25], 100, "video/mp2t", true);
        let mut body = Vec::new();
        for (i, r) in plan.ranges.iter().enumerate() {
            body.extend(plan.part_head(i));
            body.extend(std::iter::repeat_n(b'x', (r.end - r.start) as usize));
        }
        body.extend(plan.tail());
        assert_eq!(body.len() as u64, plan.body_len());
        let text = String::from_utf8(body).unwrap();
        assert!(text.starts_with("--isnode-"), "{text}");
        assert!(text.contains("Content-Range: bytes 20-24/100\r\n\r\nxxxxx\r\n--"));
        assert!(plan
            .content_type
            .starts_with("multipart/byteranges; boundary=isnode-"));
        let one = Plan::new(vec![5..7], 100, "video/mp2t", true);
        assert_eq!(one.single_content_range().as_deref(), Some("bytes 5-6/100"));
        assert_eq!(one.body_len(), 2);
    }
}
