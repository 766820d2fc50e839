//! `PUT /v1/objects/{name}`: an upload into the same crash-safe ingest as `isnode ingest`
//! (docs/protocol.md, "Upload").
//!
//! The body (`Content-Length` or chunked) is read here, on the runtime, at the client's
//! pace and under its own progress timeout ([`Pace`]); its chunks go through a bounded
//! channel to a blocking thread that spools them ([`isnode_store::spool`]: an anonymous
//! file, gone if the server dies), probes the spool and ingests it. The object is visible
//! only once the ingest commits; a body that ends early, is cut or stalls leaves nothing
//! (the spool has no name, and the ingest removes its rows and files on error, or the
//! next open does after a crash).
//!
//! No fuzz target covers this route yet (the fuzz targets are kept apart, in `fuzz/`).

use std::io::Read;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use isnode_store::{ObjectRecord, StoreError};
use serde::Deserialize;
use tokio::sync::mpsc;

use super::{blocking, error, ApiError, Sh};
use crate::api::state::ApiState;
use crate::metrics::UploadFailure;
use isnode_control::upload_ingest::{ingest_upload, precheck, Existing, Upload};

/// Body chunks queued for the ingest thread (a few MiB at most: hyper's chunks are small).
const QUEUED_CHUNKS: usize = 64;

/// The query of an upload.
#[derive(Debug, Default, Deserialize)]
pub(super) struct PutQuery {
    /// Overrides the probed bitrate.
    bitrate_bps: Option<u64>,
    /// Overrides the probed content type.
    content_type: Option<String>,
    /// `on`: store it encrypted; `off`: clear (absent: the configuration's `encrypt`).
    encrypt: Option<isnode_serve_config::EncryptDefault>,
}

/// Counts an upload whose request ended before its answer (the client went away, or
/// the connection was reset, and the request was dropped) as `disconnected`.
struct Unanswered<'a> {
    sh: &'a ApiState,
    answered: bool,
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.sh.metrics.upload_failure(UploadFailure::Disconnected);
        }
    }
}

/// `PUT /v1/objects/{name}`; counted in `isnode_upload_bytes_total` and, when nothing
/// was stored, `isnode_upload_failures_total{reason}`.
pub(super) async fn put_object(
    _: super::roles::Operator,
    state: Sh,
    name: Path<String>,
    q: Query<PutQuery>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let sh = state.0.clone();
    let mut watch = Unanswered {
        sh: &sh,
        answered: false,
    };
    let r = store_upload(state, name, q, headers, body).await;
    watch.answered = true;
    let failure = match r.status() {
        _ if r.extensions().get::<Disconnected>().is_some() => Some(UploadFailure::Disconnected),
        s if s.is_success() => None,
        StatusCode::REQUEST_TIMEOUT => Some(UploadFailure::TooSlow),
        StatusCode::INSUFFICIENT_STORAGE => Some(UploadFailure::NoSpace),
        StatusCode::PRECONDITION_FAILED | StatusCode::CONFLICT => Some(UploadFailure::Conflict),
        s if s.is_client_error() => Some(UploadFailure::Invalid),
        _ => Some(UploadFailure::Internal),
    };
    if let Some(reason) = failure {
        sh.metrics.upload_failure(reason);
    }
    r
}

async fn store_upload(
    State(sh): Sh,
    Path(name): Path<String>,
    Query(q): Query<PutQuery>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let up = match parse(name, q, &headers) {
        Ok(up) => up,
        Err(e) => return e.into_response(),
    };
    let pre = up.clone();
    let room = match blocking(&sh, move |sh| precheck(&sh.control, &pre)).await {
        Ok(Ok(room)) => room,
        Ok(Err(e)) => return upload_error(e),
        Err(r) => return r,
    };
    let (tx, rx) = mpsc::channel(QUEUED_CHUNKS);
    let job = {
        let (sh, up) = (sh.clone(), up.clone());
        // The room is given back as the ingest ends (its object then counts itself).
        tokio::task::spawn_blocking(move || {
            ingest_upload(&sh.control, &up, ChunkReader::new(rx), room)
        })
    };
    let fed = feed(body, tx, Pace::of(&sh)).await;
    // The ingest has cleaned up (or committed) before anything is answered.
    let done = job.await;
    match (fed, done) {
        (Fed::Cut(status, why), _) => cut(&up, status, why),
        (Fed::Gone(why), _) => {
            let mut r = cut(&up, StatusCode::BAD_REQUEST, why);
            r.extensions_mut().insert(Disconnected);
            r
        }
        (_, Ok(Ok(rec))) => {
            sh.metrics.upload_bytes(rec.size_bytes);
            created(&sh, rec).await
        }
        (_, Ok(Err(e))) => {
            tracing::info!(name = %up.name, "upload refused, nothing kept: {e}");
            upload_error(e)
        }
        (_, Err(e)) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the upload's ingest failed: {e}"),
        ),
    }
}

/// Marks the answer to an upload whose body broke off (`disconnected` in the metrics).
#[derive(Clone, Copy, Debug)]
struct Disconnected;

/// The answer to an upload cut before its end: nothing was kept, the connection closes.
fn cut(up: &Upload, status: StatusCode, why: String) -> Response {
    tracing::info!(name = %up.name, "upload cut, nothing kept: {why}");
    let mut r = error(status, why);
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}

/// The upload asked for by the path, query and headers, or the `4xx` answer.
pub(super) fn parse(name: String, q: PutQuery, headers: &HeaderMap) -> Result<Upload, ApiError> {
    isnode_store::validate::validate_name(&name)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e))?;
    if q.bitrate_bps == Some(0) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bitrate_bps must be at least 1",
        ));
    }
    let existing = match headers.get(header::IF_NONE_MATCH).map(|v| v.as_bytes()) {
        None => Existing::Replace,
        Some(b"*") => Existing::Refuse,
        Some(_) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "If-None-Match: only `*` is understood (refuse to replace an existing object)",
            ))
        }
    };
    let len = match headers.get(header::CONTENT_LENGTH) {
        None => None,
        Some(v) => Some(
            v.to_str()
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or_else(|| ApiError::new(StatusCode::BAD_REQUEST, "bad Content-Length"))?,
        ),
    };
    Ok(Upload {
        name,
        len,
        existing,
        bitrate_bps: q.bitrate_bps,
        content_type: q.content_type,
        encrypt: q.encrypt,
    })
}

/// `201 Created` with the object's JSON and its `Location`.
async fn created(sh: &Arc<ApiState>, rec: ObjectRecord) -> Response {
    let name = rec.name.clone();
    tracing::info!(name = %rec.name, toi = rec.toi, size_bytes = rec.size_bytes, "object uploaded");
    match blocking(sh, move |sh| sh.control.objects.get(&name)).await {
        Ok(Ok(o)) => {
            let mut r = (StatusCode::CREATED, Json(o.json())).into_response();
            let path = format!("/v1/objects/{}", super::common::path_segment(&o.rec.name));
            if let Ok(v) = HeaderValue::from_str(&path) {
                r.headers_mut().insert(header::LOCATION, v);
            }
            r
        }
        Ok(Err(e)) => super::store_error(e),
        Err(r) => r,
    }
}

/// The answer to an upload the store refused.
fn upload_error(e: StoreError) -> Response {
    let status = match &e {
        e if e.is_no_room() => StatusCode::INSUFFICIENT_STORAGE,
        StoreError::NameExists(name) => {
            return error(
                StatusCode::PRECONDITION_FAILED,
                format!("an object named {name:?} exists (If-None-Match: *)"),
            )
        }
        StoreError::BadName { .. } | StoreError::BadParams(_) | StoreError::Truncated { .. } => {
            StatusCode::BAD_REQUEST
        }
        StoreError::Media { .. } => {
            return error(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("{} (give it: ?bitrate_bps=)", chain(&e)),
            )
        }
        StoreError::SpoolFull { .. } => StatusCode::PAYLOAD_TOO_LARGE,
        StoreError::Io { source, .. } if source.kind() == std::io::ErrorKind::UnexpectedEof => {
            StatusCode::BAD_REQUEST
        }
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    error(status, chain(&e))
}

/// An error and its sources, `: `-joined (an I/O error's reason is its source).
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        if !s.contains(&text) {
            s = format!("{s}: {text}");
        }
        next = cause.source();
    }
    s
}

/// The progress an upload body must make.
#[derive(Clone, Copy, Debug)]
struct Pace {
    /// No byte for this long: cut. Also the window of the rate.
    stall: Duration,
    /// Fewest bits per second over a window.
    min_rate_bps: u64,
}

impl Pace {
    fn of(sh: &ApiState) -> Pace {
        Pace {
            stall: Duration::from_millis(sh.config().upload_stall_timeout_ms.max(1)),
            min_rate_bps: sh.config().upload_min_rate_bps,
        }
    }

    /// Whether `bytes` brought in `waited` (one full window) are too few.
    fn too_slow(&self, bytes: u64, waited: Duration) -> bool {
        let bits = u128::from(bytes) * 8 * 1000;
        bits < u128::from(self.min_rate_bps) * waited.as_millis()
    }
}

/// How feeding the body ended.
#[derive(Debug)]
enum Fed {
    /// The whole body went to the ingest.
    Complete,
    /// The ingest stopped taking chunks (it failed: its error is the answer).
    Stopped,
    /// The body stalled or trickled: cut, with this answer.
    Cut(StatusCode, String),
    /// The body broke off (the client went away, the connection was reset): why.
    Gone(String),
}

/// A message to the ingest thread.
enum Chunk {
    Data(Bytes),
    /// The body ended whole.
    End,
}

/// Reads the body at the client's pace into the channel; time spent waiting for the
/// ingest (a full channel) does not count against the client.
async fn feed(mut body: Body, tx: mpsc::Sender<Chunk>, pace: Pace) -> Fed {
    let (mut window_bytes, mut waited) = (0u64, Duration::ZERO);
    loop {
        let t0 = Instant::now();
        let next = std::future::poll_fn(|cx| http_body::Body::poll_frame(Pin::new(&mut body), cx));
        let frame = match tokio::time::timeout(pace.stall, next).await {
            Err(_) => {
                return Fed::Cut(
                    StatusCode::REQUEST_TIMEOUT,
                    format!(
                        "the upload brought no byte for {} ms (upload_stall_timeout_ms)",
                        pace.stall.as_millis()
                    ),
                )
            }
            Ok(None) => {
                return match tx.send(Chunk::End).await {
                    Ok(()) => Fed::Complete,
                    Err(_) => Fed::Stopped,
                }
            }
            Ok(Some(Err(e))) => return Fed::Gone(format!("reading the upload: {e}")),
            Ok(Some(Ok(frame))) => frame,
        };
        waited += t0.elapsed();
        let Ok(data) = frame.into_data() else {
            continue;
        };
        window_bytes += data.len() as u64;
        if waited >= pace.stall {
            if pace.too_slow(window_bytes, waited) {
                return Fed::Cut(
                    StatusCode::REQUEST_TIMEOUT,
                    format!(
                        "the upload brought {window_bytes} bytes in {} ms, less than {} bit/s \
                         (upload_min_rate_bps)",
                        waited.as_millis(),
                        pace.min_rate_bps
                    ),
                );
            }
            (window_bytes, waited) = (0, Duration::ZERO);
        }
        if tx.send(Chunk::Data(data)).await.is_err() {
            return Fed::Stopped;
        }
    }
}

/// The body's chunks as a blocking [`Read`]: an error if the channel closes before
/// [`Chunk::End`] (the body was cut, or the request dropped).
struct ChunkReader {
    rx: mpsc::Receiver<Chunk>,
    current: Bytes,
    ended: bool,
}

impl ChunkReader {
    fn new(rx: mpsc::Receiver<Chunk>) -> ChunkReader {
        ChunkReader {
            rx,
            current: Bytes::new(),
            ended: false,
        }
    }

    /// Copies from the current chunk and those already queued, without waiting.
    fn drain_into(&mut self, buf: &mut [u8]) -> usize {
        let mut n = 0;
        loop {
            let take = self.current.len().min(buf.len() - n);
            buf[n..n + take].copy_from_slice(&self.current.split_to(take));
            n += take;
            if n == buf.len() || self.ended {
                return n;
            }
            match self.rx.try_recv() {
                Ok(Chunk::Data(b)) => self.current = b,
                Ok(Chunk::End) => self.ended = true,
                Err(_) => return n,
            }
        }
    }
}

impl Read for ChunkReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            if buf.is_empty() {
                return Ok(0);
            }
            if !self.current.is_empty() {
                return Ok(self.drain_into(buf));
            }
            if self.ended {
                return Ok(0);
            }
            match self.rx.blocking_recv() {
                Some(Chunk::Data(b)) => self.current = b,
                Some(Chunk::End) => self.ended = true,
                None => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "the upload was cut before its end",
                    ))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_gives_the_chunks_then_the_end_or_the_cut() {
        let (tx, rx) = mpsc::channel(8);
        for part in [&b"abc"[..], b"", b"defg"] {
            tx.try_send(Chunk::Data(Bytes::copy_from_slice(part)))
                .unwrap();
        }
        tx.try_send(Chunk::End).unwrap();
        let mut out = Vec::new();
        ChunkReader::new(rx).read_to_end(&mut out).unwrap();
        assert_eq!(out, b"abcdefg");

        let (tx, rx) = mpsc::channel(8);
        tx.try_send(Chunk::Data(Bytes::from_static(b"xy"))).unwrap();
        drop(tx);
        let mut out = Vec::new();
        let err = ChunkReader::new(rx).read_to_end(&mut out).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn the_pace_cuts_a_trickle_not_a_flow() {
        let pace = Pace {
            stall: Duration::from_secs(1),
            min_rate_bps: 8000,
        };
        assert!(pace.too_slow(999, Duration::from_secs(1)));
        assert!(!pace.too_slow(1000, Duration::from_secs(1)));
        let none = Pace {
            min_rate_bps: 0,
            ..pace
        };
        assert!(!none.too_slow(0, Duration::from_secs(5)));
    }
}
