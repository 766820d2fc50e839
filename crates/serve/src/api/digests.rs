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

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::{blocking, error, store_error, Sh};

/// Most codewords one request returns (about 1 MiB of digests at 255 symbols).
pub(crate) const MAX_DIGEST_CODEWORDS: u32 = 256;
/// Codewords returned without `count`.
const DEFAULT_DIGEST_CODEWORDS: u32 = 64;

/// The query string.
#[derive(Deserialize)]
pub(super) struct DigestQuery {
    from: Option<u32>,
    count: Option<u32>,
}

pub(super) async fn digests(
    _: super::roles::Viewer,
    State(sh): Sh,
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
    let found = blocking(&sh, move |sh| {
        let obj = sh.objects.get(&name)?;
        let rows = sh.objects.digests(&obj, from, count)?;
        Ok::<_, isnode_store::StoreError>((obj, rows))
    });
    let (obj, rows) = match found.await {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => return store_error(e),
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
    let mut body = Vec::new();
    for (sbn, digests) in rows {
        let n = obj.layout.encoding_symbols(sbn);
        if digests.len() != n as usize * isnode_wire::digest::DIGEST_LEN {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!(
                    "{}: the catalog's digests of codeword {sbn} are damaged",
                    obj.rec.name
                ),
            );
        }
        body.extend_from_slice(&sbn.to_be_bytes());
        body.extend_from_slice(&(n as u16).to_be_bytes());
        body.extend_from_slice(&digests);
    }
    (
        [(header::CONTENT_TYPE, "application/octet-stream")],
        Body::from(body),
    )
        .into_response()
}
