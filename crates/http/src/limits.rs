//! Request limits and JSON errors for everything the router answers: a request whose URI
//! or header bytes pass their limit is refused with `414` / `431` before routing, and any
//! error answer that is not JSON already (axum's own rejections: a body past
//! [`MAX_BODY_BYTES`], a path parameter that is not UTF-8, a JSON body of the wrong type
//! or shape) is rewritten as the documented [`isnode_proto::ErrorBody`] with the same status.

use crate::error::error;
use axum::body::to_bytes;
use axum::extract::Request;
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::Response;

/// Longest request target (path and query) accepted, bytes; longer: `414`.
pub const MAX_URI_BYTES: usize = 8 * 1024;
/// Most header bytes accepted (names, values and 4 bytes of `: ` and CRLF per field);
/// more: `431`.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;
/// Largest request body accepted, bytes; larger: `413`.
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// Most bytes of a non-JSON error body kept as the JSON message.
const MAX_REWRITTEN_BYTES: usize = 4 * 1024;

/// Bytes of a request's header fields as sent on the wire (`name: value\r\n`).
fn header_bytes(headers: &HeaderMap) -> usize {
    headers
        .iter()
        .map(|(n, v)| n.as_str().len() + v.len() + 4)
        .sum()
}

/// The limits, then the request, then its error (if any) as JSON.
pub async fn limits_and_json_errors(req: Request, next: Next) -> Response {
    let uri_bytes = req
        .uri()
        .path_and_query()
        .map_or(req.uri().path().len(), |pq| pq.as_str().len());
    if uri_bytes > MAX_URI_BYTES {
        return error(
            StatusCode::URI_TOO_LONG,
            format!("the request target is {uri_bytes} bytes, more than {MAX_URI_BYTES}"),
        );
    }
    let header_bytes = header_bytes(req.headers());
    if header_bytes > MAX_HEADER_BYTES {
        return error(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            format!(
                "the request header fields are {header_bytes} bytes, more than {MAX_HEADER_BYTES}"
            ),
        );
    }
    as_json_error(next.run(req).await).await
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"))
}

/// An error answer that is not JSON, rewritten as an [`isnode_proto::ErrorBody`] with the same status
/// and headers (its text, bounded, becomes the message); anything else unchanged.
async fn as_json_error(resp: Response) -> Response {
    let status = resp.status();
    if !(status.is_client_error() || status.is_server_error()) || is_json(resp.headers()) {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let text = match to_bytes(body, MAX_REWRITTEN_BYTES).await {
        Ok(b) => String::from_utf8_lossy(&b).trim().to_string(),
        Err(_) => String::new(),
    };
    let msg = if status == StatusCode::PAYLOAD_TOO_LARGE {
        format!("the request body is more than {MAX_BODY_BYTES} bytes")
    } else if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_string()
    } else {
        text
    };
    let mut out = error(status, msg);
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            out.headers_mut().append(name.clone(), value.clone());
        }
    }
    out
}
