//! The original bytes over HTTP (`GET`/`HEAD /v1/objects/{name}/content`, and `/o/{name}`
//! for players) with `Range` (RFC 9110), and the unicast repair route
//! (`GET /v1/objects/{name}/codewords/{sbn}/packets?esi=...`): docs/protocol.md,
//! "Content over HTTP" and "Unicast repair".
//!
//! The bytes come from the shared block pool through [`PoolRead`] on tokio's blocking pool;
//! a body is streamed through a channel of two chunks (each at most one codeword), so a
//! reader holds at most about three codewords whatever it asked for, and at most
//! `--max-content-readers` bodies are produced at once.

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
use isnode_proto::range::{
    http_date, if_none_match, if_range_matches, object_etag, parse_range, RangeRequest,
};
use isnode_proto::ErrorBody;
use tokio::sync::mpsc;

use super::pool_read::PoolRead;
use super::{error, ApiError, Asker, Sh};
use crate::api::state::ApiState;
use isnode_pool::objects::ObjectInfo;

/// Chunks queued between the reading thread and the connection.
const BODY_QUEUE_CHUNKS: usize = 2;

/// `GET`/`HEAD` of an object's original bytes.
pub(super) async fn content(
    _: super::roles::Viewer,
    State(sh): Sh,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    method: Method,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    let obj = match super::lookup(&sh, Asker::Viewer(peer.ip()), name).await {
        Ok(o) => o,
        Err(r) => return r,
    };
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
    let (tx, rx) = mpsc::channel(BODY_QUEUE_CHUNKS);
    let sh2 = sh.clone();
    tokio::task::spawn_blocking(move || {
        let _slot = slot;
        produce(&sh2, &obj, &plan, &tx);
    });
    (status, base, Body::from_stream(ChunkStream(rx))).into_response()
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

/// One of the `--max-content-readers` places of a body being produced (freed on drop).
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
        Ok(ReaderPermit(sh.clone()))
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

type Chunk = Result<Bytes, io::Error>;

/// Produces the body of `plan` into `tx`, one codeword slice at a time; stops when the
/// client goes away. A codeword that cannot be read nor rebuilt ends the body with an error
/// (the connection is cut: the client sees a short body, never wrong bytes).
fn produce(sh: &Arc<ApiState>, obj: &Arc<ObjectInfo>, plan: &Plan, tx: &mpsc::Sender<Chunk>) {
    let mut read = PoolRead::new(sh, obj);
    let send = |bytes: Vec<u8>| -> bool {
        let n = bytes.len() as u64;
        let ok = tx.blocking_send(Ok(Bytes::from(bytes))).is_ok();
        if ok {
            sh.metrics.http_bytes.fetch_add(n, Ordering::Relaxed);
        }
        ok
    };
    for (i, r) in plan.ranges.iter().enumerate() {
        let head = plan.part_head(i);
        if !head.is_empty() && !send(head) {
            return;
        }
        if let Err(why) = produce_range(obj, &mut read, r.clone(), &send) {
            tracing::warn!(object = %obj.rec.name, "content body cut: {why}");
            let _ = tx.blocking_send(Err(io::Error::other(why)));
            return;
        }
    }
    let tail = plan.tail();
    if !tail.is_empty() {
        send(tail);
    }
}

/// Sends the bytes `r` of the object, codeword by codeword. `Ok` also when the client left.
fn produce_range(
    obj: &ObjectInfo,
    read: &mut PoolRead,
    r: Range<u64>,
    send: &dyn Fn(Vec<u8>) -> bool,
) -> Result<(), String> {
    let layout = &obj.layout;
    let mut at = r.start;
    let mut sbn = codeword_at(obj, at);
    while at < r.end {
        wait_at_front(obj, sbn)?;
        let cw_start = layout.codeword_offset(sbn);
        let data = read.source(sbn)?;
        let from = usize::try_from(at - cw_start).map_err(|e| e.to_string())?;
        let to = usize::try_from(r.end.min(cw_start + data.len() as u64) - cw_start)
            .map_err(|e| e.to_string())?;
        let Some(piece) = data.get(from..to).filter(|p| !p.is_empty()) else {
            return Err(format!("codeword {sbn} does not hold byte {at}"));
        };
        at += piece.len() as u64;
        if !send(piece.to_vec()) {
            return Ok(());
        }
        sbn += 1;
    }
    Ok(())
}

/// Waits until codeword `sbn` of an object still filling is committed (bounded); an error
/// if the fill failed or stalled (the body is cut: never bytes of another version).
pub(super) fn wait_at_front(obj: &ObjectInfo, sbn: u32) -> Result<(), String> {
    let Some(front) = &obj.fill else {
        return Ok(());
    };
    let deadline = std::time::Instant::now() + isnode_fill::FRONT_WAIT;
    match front.wait_for(sbn, deadline) {
        isnode_pool::front::Wait::Ready => Ok(()),
        isnode_pool::front::Wait::Failed => Err(format!(
            "the fill of {:?} from the origin failed at codeword {sbn}",
            obj.rec.name
        )),
        isnode_pool::front::Wait::TimedOut => Err(format!(
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

/// The body's chunks as a stream (what `Body::from_stream` takes).
struct ChunkStream(mpsc::Receiver<Chunk>);

impl futures_core::Stream for ChunkStream {
    type Item = Chunk;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Chunk>> {
        self.0.poll_recv(cx)
    }
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
    let sh2 = sh.clone();
    let answer = tokio::task::spawn_blocking(move || {
        let _slot = slot;
        let mut out = Vec::new();
        wait_at_front(&obj, sbn)?;
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
