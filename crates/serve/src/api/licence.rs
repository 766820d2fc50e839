//! The W3C Clear Key licence route of CENC `cbcs` titles (issue 32; docs/protocol.md,
//! "Encrypted titles"): `POST /v1/objects/{name}/license`, a viewer token required.
//!
//! The request is the Clear Key licence request of Encrypted Media Extensions §9.1.3
//! (`{"kids":["B64URL",...],"type":"temporary"}`); the answer is the JSON Web Key set of the
//! key ids asked that name the title's key (`{"keys":[{"kty":"oct","kid":...,"k":...}],
//! "type":"temporary"}`, with `"expires_unix_s"` and an `Isnode-Key-Expires` header when
//! the token or `licence_ttl_s` bounds it), `Cache-Control: private, no-store`. A request naming none of the
//! title's key ids is `404`. The key's bytes go to the answer and nowhere else.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use isnode_keys::b64url;

use super::{ApiError, Sh};

/// Largest licence request body, bytes.
pub(super) const MAX_REQUEST_BYTES: usize = 4096;
/// Most key ids one request may name.
const MAX_KIDS: usize = 16;

/// A Clear Key licence request.
#[derive(serde::Deserialize)]
struct LicenceRequest {
    kids: Vec<String>,
    #[serde(rename = "type", default)]
    kind: Option<String>,
}

/// The key ids of a licence request `body` and its session type; `Err` says what is wrong.
fn parse(body: &[u8]) -> Result<(Vec<Vec<u8>>, String), String> {
    if body.len() > MAX_REQUEST_BYTES {
        return Err(format!("a licence request over {MAX_REQUEST_BYTES} bytes"));
    }
    let req: LicenceRequest = serde_json::from_slice(body)
        .map_err(|e| format!("not a Clear Key licence request ({{\"kids\":[...]}}): {e}"))?;
    if req.kids.is_empty() || req.kids.len() > MAX_KIDS {
        return Err(format!("{} key ids (1 to {MAX_KIDS})", req.kids.len()));
    }
    let kids = req
        .kids
        .iter()
        .map(|k| b64url::decode(k).filter(|v| v.len() == 16))
        .collect::<Option<Vec<_>>>()
        .ok_or("a key id that is not 16 bytes of base64url")?;
    let kind = match req.kind.as_deref() {
        None | Some("temporary") => "temporary",
        Some("persistent-license") => "persistent-license",
        Some(other) => return Err(format!("session type {other:?}")),
    };
    Ok((kids, kind.to_string()))
}

/// The JSON Web Key set answering `kids` with `key` under `key_id` (the ids asked that are
/// not the title's are left out).
fn jwk_set(
    kids: &[Vec<u8>],
    (key_id, key): (&[u8; 16], &[u8; 16]),
    kind: &str,
    expires_unix_s: Option<u64>,
) -> Option<String> {
    if !kids.iter().any(|k| k.as_slice() == key_id) {
        return None;
    }
    let mut set = serde_json::json!({
        "keys": [{"kty": "oct", "kid": b64url::encode(key_id), "k": b64url::encode(key)}],
        "type": kind,
    });
    if let Some(e) = expires_unix_s {
        set["expires_unix_s"] = e.into();
    }
    Some(set.to_string())
}

/// `POST /v1/objects/{name}/license`.
pub(super) async fn post_licence(
    token: super::roles::ViewerToken,
    State(sh): Sh,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
    let (kids, kind) = match parse(&body) {
        Ok(v) => v,
        Err(why) => return ApiError::new(StatusCode::BAD_REQUEST, why).into_response(),
    };
    let expiry = super::roles::key_expiry(&sh, &token);
    let (rec, key) = match super::protected::content_key(&sh, name.clone()).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    if rec.method != isnode_store::protection::METHOD_CENC_CBCS {
        return ApiError::new(
            StatusCode::NOT_FOUND,
            format!("{name:?} is HLS AES-128: its key is GET /v1/objects/{{name}}/key"),
        )
        .into_response();
    }
    match jwk_set(&kids, (&rec.key_id, &key), &kind, expiry) {
        Some(json) => {
            let mut r = (
                [
                    (header::CONTENT_TYPE, "application/json"),
                    (header::CACHE_CONTROL, "private, no-store"),
                ],
                json,
            )
                .into_response();
            super::protected::with_expiry(&mut r, expiry);
            r
        }
        None => ApiError::new(
            StatusCode::NOT_FOUND,
            format!("none of the key ids asked is {name:?}'s"),
        )
        .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_for_the_titles_kid_gets_its_jwk() {
        let kid = [7u8; 16];
        let key = [9u8; 16];
        let body = format!(
            "{{\"kids\":[\"{}\",\"{}\"],\"type\":\"temporary\"}}",
            b64url::encode(&[1; 16]),
            b64url::encode(&kid)
        );
        let (kids, kind) = parse(body.as_bytes()).unwrap();
        let set: serde_json::Value =
            serde_json::from_str(&jwk_set(&kids, (&kid, &key), &kind, None).unwrap()).unwrap();
        assert_eq!(set["type"], "temporary");
        assert_eq!(set["keys"][0]["kty"], "oct");
        assert_eq!(set["keys"][0]["kid"], b64url::encode(&kid));
        assert_eq!(set["keys"][0]["k"], b64url::encode(&key));
        assert_eq!(set["keys"].as_array().unwrap().len(), 1);
        // Another title's id only: nothing.
        assert!(jwk_set(&kids[..1], (&kid, &key), &kind, None).is_none());
        assert!(set.get("expires_unix_s").is_none());
        let timed: serde_json::Value =
            serde_json::from_str(&jwk_set(&kids, (&kid, &key), &kind, Some(77)).unwrap()).unwrap();
        assert_eq!(timed["expires_unix_s"], 77);
        // Malformed requests.
        assert!(parse(b"{\"kids\":[]}").is_err());
        assert!(parse(b"{\"kids\":[\"AAAA\"]}").is_err());
        assert!(parse(b"[1]").is_err());
        assert!(parse(&vec![b' '; MAX_REQUEST_BYTES + 1]).is_err());
    }
}
