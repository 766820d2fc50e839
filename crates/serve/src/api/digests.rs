//! `GET /v1/objects/{name}/digests?from=SBN&count=N`: the packet digests of codewords
//! `from..from + count` (`isnode_wire::digest`), for a client to tell authentic packets
//! from forged ones. Binary (`application/octet-stream`), per codeword in SBN order:
//!
//! | length | field |
//! |-------:|-------|
//! | 4 | SBN, big-endian |
//! | 2 | n, the codeword's encoding symbols, big-endian |
//! | 16 × n | the digests of its packets, in ESI order |
//!
//! `count` defaults to 64 and is at most [`MAX_DIGEST_CODEWORDS`]; a range past the end
//! is cut at the end. `404` for an object without digests (ingested before them).
//!
//! The answer (up to about 1 MiB) is never held whole: it is read from the catalog and
//! sent [`CHUNK_CODEWORDS`] codewords at a time, the next chunk read only once the
//! connection has taken the previous one, so a client that does not read holds one chunk
//! (about 32 KiB) until the write timeout drops it.

use std::future::Future;
use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tokio::task::JoinHandle;

use super::{blocking, error, Asker, Sh};
use crate::api::state::ApiState;
use isnode_pool::objects::ObjectInfo;

/// Most codewords one request returns (about 1 MiB of digests at 255 symbols).
pub(crate) const MAX_DIGEST_CODEWORDS: u32 = 256;
/// Codewords returned without `count`.
const DEFAULT_DIGEST_CODEWORDS: u32 = 64;
/// Codewords read from the catalog and sent at once (about 32 KiB at 255 symbols).
const CHUNK_CODEWORDS: u32 = 8;

/// The query string.
#[derive(Deserialize)]
pub(super) struct DigestQuery {
    from: Option<u32>,
    count: Option<u32>,
}

pub(super) async fn digests(
    _: super::roles::Viewer,
    State(sh): Sh,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    Path(name): Path<String>,
    Query(q): Query<DigestQuery>,
) -> Response {
    let from = q.from.unwrap_or(0);
    let count = q.count.unwrap_or(DEFAULT_DIGEST_CODEWORDS);
    if count == 0 || count > MAX_DIGEST_CODEWORDS {
        return error(
            StatusCode::BAD_REQUEST,
            format!("count must be 1 to {MAX_DIGEST_CODEWORDS}, got {count}"),
        );
    }
    let asker = Asker::Viewer(peer.ip());
    let obj = match super::lookup(&sh, asker, name).await {
        Ok(o) => o,
        Err(r) => return r,
    };
    let codewords = obj.layout.codewords();
    if from >= codewords {
        return error(
            StatusCode::NOT_FOUND,
            format!(
                "{} has no codeword {from} (it has {codewords})",
                obj.rec.name
            ),
        );
    }
    if !obj.has_digests {
        return error(
            StatusCode::NOT_FOUND,
            format!(
                "{} has no packet digests (ingested before them)",
                obj.rec.name
            ),
        );
    }
    let mut range = from..from.saturating_add(count).min(codewords);
    if let Some(front) = obj.fill.clone() {
        // A title still filling: its digests up to the front (at least codeword `from`,
        // waited for); the client asks again for the rest.
        if let Err(r) = super::fill_wait::until_at_front(&sh, asker, &obj, from).await {
            return r;
        }
        if front.state() != isnode_pool::front::FrontState::Complete {
            range.end = range.end.min(front.readable().max(from + 1));
        }
    }
    // The first chunk before the answer: a damaged catalog is a 500, not a cut body.
    let first_end = range.end.min(from.saturating_add(CHUNK_CODEWORDS));
    let (sh2, obj2) = (sh.clone(), obj.clone());
    let first = match blocking(&sh, move |_| chunk(&sh2, &obj2, from..first_end)).await {
        Ok(Ok(c)) => c,
        Ok(Err(why)) => return error(StatusCode::INTERNAL_SERVER_ERROR, why),
        Err(r) => return r,
    };
    let len = answer_len(&obj, range.clone());
    let stream = DigestStream {
        sh: sh.clone(),
        obj,
        next: first_end..range.end,
        ready: Some(first),
        reading: None,
    };
    (
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (header::CONTENT_LENGTH, len.to_string()),
        ],
        Body::from_stream(stream),
    )
        .into_response()
}

/// Bytes of the answer for codewords `range` (every row present).
fn answer_len(obj: &ObjectInfo, range: Range<u32>) -> u64 {
    range
        .map(|sbn| row_len(obj.layout.encoding_symbols(sbn)))
        .sum()
}

/// Bytes of one codeword's row: its header and `n` digests.
fn row_len(n: u32) -> u64 {
    6 + u64::from(n) * isnode_wire::digest::DIGEST_LEN as u64
}

/// The rows of codewords `range`, read from the catalog (blocking); an error if one is
/// missing or damaged.
fn chunk(sh: &ApiState, obj: &ObjectInfo, range: Range<u32>) -> Result<Bytes, String> {
    let count = range.end - range.start;
    if let Some(last) = range.end.checked_sub(1) {
        super::content::wait_at_front(obj, last)?;
    }
    let rows = sh
        .control
        .objects
        .digests(obj, range.start, count)
        .map_err(|e| e.to_string())?;
    let mut body = Vec::new();
    let mut expect = range.clone();
    for (sbn, digests) in rows {
        if expect.next() != Some(sbn) {
            break;
        }
        let n = obj.layout.encoding_symbols(sbn);
        if digests.len() != n as usize * isnode_wire::digest::DIGEST_LEN {
            return Err(format!(
                "{}: the catalog's digests of codeword {sbn} are damaged",
                obj.rec.name
            ));
        }
        body.extend_from_slice(&sbn.to_be_bytes());
        body.extend_from_slice(&(n as u16).to_be_bytes());
        body.extend_from_slice(&digests);
    }
    let have = body.len() as u64;
    if have != answer_len(obj, range.clone()) {
        return Err(format!(
            "{}: the catalog lacks digests of codewords {range:?} (run `isnode volume check`)",
            obj.rec.name
        ));
    }
    Ok(Bytes::from(body))
}

/// The answer's chunks: the one ready, then each next one read on the blocking pool only
/// when the connection asks for it.
struct DigestStream {
    sh: Arc<ApiState>,
    obj: Arc<ObjectInfo>,
    /// Codewords not read yet.
    next: Range<u32>,
    ready: Option<Bytes>,
    reading: Option<JoinHandle<Result<Bytes, String>>>,
}

impl futures_core::Stream for DigestStream {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if let Some(b) = this.ready.take() {
            return Poll::Ready(Some(Ok(b)));
        }
        if this.reading.is_none() {
            if this.next.is_empty() {
                return Poll::Ready(None);
            }
            let end = this
                .next
                .end
                .min(this.next.start.saturating_add(CHUNK_CODEWORDS));
            let range = this.next.start..end;
            this.next.start = end;
            let (sh, obj) = (this.sh.clone(), this.obj.clone());
            this.reading = Some(tokio::task::spawn_blocking(move || chunk(&sh, &obj, range)));
        }
        let Some(handle) = this.reading.as_mut() else {
            return Poll::Ready(None);
        };
        let done = std::task::ready!(Pin::new(handle).poll(cx));
        this.reading = None;
        let item = match done {
            Ok(Ok(b)) => Ok(b),
            Ok(Err(why)) => {
                tracing::warn!("digest answer cut: {why}");
                this.next = this.next.end..this.next.end;
                Err(std::io::Error::other(why))
            }
            Err(e) => {
                this.next = this.next.end..this.next.end;
                Err(std::io::Error::other(format!("reading digests: {e}")))
            }
        };
        Poll::Ready(Some(item))
    }
}
