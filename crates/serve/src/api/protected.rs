//! Encrypted titles over HTTP (issue 32; docs/protocol.md, "Encrypted titles"): the HLS
//! playlist of an MPEG-TS title stored as HLS AES-128 (`#EXT-X-KEY` with each segment's
//! IV, byte ranges of the stored ciphertext), and `GET /v1/objects/{name}/key`, the
//! content key's 16 bytes for a request holding a viewer token.
//!
//! Segments are the object's content and stay as public as the content route (nginx-vod's
//! model): only the key needs a token. The key is unwrapped here, per request, with the
//! node key read from its file (`node_key_file`, else `node.key` in the volume); its bytes
//! go to the answer's body and nowhere else (no log, error or metric carries them).

use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use isnode_store::ProtectionRecord;

use super::{blocking, ApiError, Sh};
use crate::api::state::ApiState;

/// The protection record of object `toi` (`None`: stored in the clear).
pub(super) async fn protection_of(
    sh: &Arc<ApiState>,
    toi: u32,
) -> Result<Option<ProtectionRecord>, Response> {
    match blocking(sh, move |sh| {
        sh.control
            .objects
            .with_volume(|v| v.catalog().protection(toi))
    })
    .await?
    {
        Ok(p) => Ok(p),
        Err(e) => {
            tracing::error!(toi, "reading an object's key row: {e}");
            Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the key row of object TOI {toi} is unreadable (the log says why)"),
            )
            .into_response())
        }
    }
}

/// The `#EXT-X-KEY` line of a CENC `cbcs` CMAF playlist: `METHOD=SAMPLE-AES` with W3C
/// Clear Key (`KEYFORMAT="org.w3.clearkey"`), its URI a `data:` URI of the key id (base64),
/// which is what hls.js reads the key id from (it then asks the licence URL it is
/// configured with: `drmSystems["org.w3.clearkey"].licenseUrl`, our licence route). The
/// line carries the key id only, never the key.
pub(super) fn sample_aes_key_line(key_id: &[u8; 16]) -> String {
    // Standard base64 (hls.js decodes it with `atob`): the URL-safe form, its two
    // characters mapped back, padded (16 bytes: 22 characters and `==`).
    let b64: String = isnode_keys::b64url::encode(key_id)
        .chars()
        .map(|c| match c {
            '-' => '+',
            '_' => '/',
            c => c,
        })
        .collect();
    format!(
        "#EXT-X-KEY:METHOD=SAMPLE-AES,URI=\"data:text/plain;base64,{b64}==\",\
         KEYFORMAT=\"org.w3.clearkey\",KEYFORMATVERSIONS=\"1\"\n"
    )
}

/// `playlist` with `key_line` before its `#EXT-X-MAP` (the key applies to the
/// initialization segment and every segment after it).
pub(super) fn with_key_line(playlist: &str, key_line: &str) -> String {
    match playlist.find("#EXT-X-MAP:") {
        Some(at) => {
            let (head, tail) = playlist.split_at(at);
            format!("{head}{key_line}{tail}")
        }
        None => playlist.to_string(),
    }
}

/// The key line of object `toi`'s CMAF playlists: `Some` for a CENC `cbcs` object,
/// `None` for a clear one; an MPEG-TS object in HLS AES-128 is the caller's.
pub(super) async fn cbcs_key_line(
    sh: &Arc<ApiState>,
    toi: u32,
) -> Result<Option<String>, Response> {
    Ok(protection_of(sh, toi)
        .await?
        .filter(|rec| rec.method == isnode_store::protection::METHOD_CENC_CBCS)
        .map(|rec| sample_aes_key_line(&rec.key_id)))
}

/// The HLS VOD playlist (version 4) of an encrypted object: each segment's byte range of
/// the ciphertext at `segment_uri`, preceded by its `#EXT-X-KEY` (method AES-128, the key
/// at `key_uri`, its IV).
pub(super) fn playlist(rec: &ProtectionRecord, segment_uri: &str, key_uri: &str) -> String {
    let target = rec
        .segments
        .iter()
        .map(|s| s.duration_s.round() as u64)
        .max()
        .unwrap_or(1)
        .max(1);
    let mut m = format!(
        "#EXTM3U\n#EXT-X-VERSION:4\n#EXT-X-TARGETDURATION:{target}\n\
         #EXT-X-PLAYLIST-TYPE:VOD\n#EXT-X-MEDIA-SEQUENCE:0\n"
    );
    for s in &rec.segments {
        m.push_str(&format!(
            "#EXT-X-KEY:METHOD=AES-128,URI=\"{key_uri}\",IV=0x{}\n\
             #EXTINF:{:.3},\n#EXT-X-BYTERANGE:{}@{}\n{segment_uri}\n",
            isnode_keys::hex(&s.iv),
            s.duration_s,
            s.length_bytes,
            s.offset_bytes
        ));
    }
    m.push_str("#EXT-X-ENDLIST\n");
    m
}

/// The key URI of a playlist asked for with `query` (its token carried on, as onto the
/// segments).
pub(super) fn key_uri(query: Option<&str>) -> String {
    match super::roles::carried_token(query) {
        Some(t) => format!("key?token={t}"),
        None => "key".to_string(),
    }
}

/// The node key file the server reads.
fn node_key_path(sh: &ApiState) -> PathBuf {
    let named = sh.config().node_key_file.clone();
    named.unwrap_or_else(|| sh.control.objects.root().join(isnode_keys::NODE_KEY_FILE))
}

/// `GET /v1/objects/{name}/key`: the 16 bytes of the object's content key, to a request
/// holding a viewer token (`401` without one, whatever `anonymous_viewers` says).
pub(super) async fn get_key(
    token: super::roles::ViewerToken,
    State(sh): Sh,
    Path(name): Path<String>,
) -> Response {
    let expiry = super::roles::key_expiry(&sh, &token);
    match content_key(&sh, name).await {
        Ok((_, bytes)) => {
            let mut r = (
                [
                    (header::CONTENT_TYPE, "application/octet-stream"),
                    (header::CACHE_CONTROL, "private, no-store"),
                ],
                bytes.to_vec(),
            )
                .into_response();
            with_expiry(&mut r, expiry);
            r
        }
        Err(r) => r,
    }
}

/// The header saying when a key or licence handed out stops being good.
pub(super) const KEY_EXPIRES_HEADER: &str = "isnode-key-expires";

/// Adds [`KEY_EXPIRES_HEADER`] (seconds since the Unix epoch) to `r` when there is an
/// expiry.
pub(super) fn with_expiry(r: &mut Response, expiry: Option<u64>) {
    if let Some(e) = expiry {
        r.headers_mut().insert(
            header::HeaderName::from_static(KEY_EXPIRES_HEADER),
            header::HeaderValue::from(e),
        );
    }
}

/// The protection record of complete object `name` and its content key, unwrapped with the
/// node key (the handlers that call this hold a viewer token).
pub(super) async fn content_key(
    sh: &Arc<ApiState>,
    name: String,
) -> Result<(ProtectionRecord, [u8; 16]), Response> {
    // The catalog only: a key request never starts a fill (an encrypted fill's key is
    // there once the fill is complete).
    let wanted = name.clone();
    let toi = match blocking(sh, move |sh| {
        sh.control
            .objects
            .with_volume(|v| v.catalog().complete_toi(&wanted))
    })
    .await
    {
        Ok(Ok(Some(toi))) => u32::try_from(toi).unwrap_or(u32::MAX),
        Ok(Ok(None)) => {
            return Err(
                ApiError::new(StatusCode::NOT_FOUND, format!("no object {name:?} here"))
                    .into_response(),
            )
        }
        Ok(Err(e)) => return Err(super::store_error(e)),
        Err(r) => return Err(r),
    };
    let rec = match protection_of(sh, toi).await? {
        Some(rec) => rec,
        None => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                format!("{name:?} is not encrypted: it has no key"),
            )
            .into_response())
        }
    };
    let wrapped = rec.wrapped_key;
    let unwrapped = blocking(sh, move |sh| {
        let path = node_key_path(sh);
        isnode_keys::node_key::NodeKey::load(&path)
            .and_then(|node| node.unwrap(&wrapped))
            .map(|k| *k.expose())
    })
    .await?;
    match unwrapped {
        Ok(bytes) => Ok((rec, bytes)),
        Err(e) => {
            // The error names files and ids, never key bytes (isnode-keys' errors carry none).
            tracing::error!(object = %name, "the key of an encrypted title: {e}");
            Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the key of {name:?} cannot be unwrapped on this node (the log says why)"),
            )
            .into_response())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use isnode_store::ProtectedSegment;

    #[test]
    fn each_segment_has_its_key_line_and_iv() {
        let seg = |o: u64, l: u64, iv: u8| ProtectedSegment {
            offset_bytes: o,
            length_bytes: l,
            clear_offset: o,
            clear_length: l - 1,
            start_s: 0.0,
            duration_s: 2.0,
            iv: [iv; 16],
        };
        let rec = ProtectionRecord {
            method: "aes-128".into(),
            key_id: [0; 16],
            wrap: "aes-kw-256".into(),
            wrapped_key: [0; 24],
            node_key_id: [0; 8],
            segments: vec![seg(0, 32, 1), seg(32, 16, 2)],
        };
        let t = "0f".repeat(32);
        let q = format!("token={t}");
        let text = playlist(&rec, "content?ext=.ts", &key_uri(Some(&q)));
        assert!(text.contains(&format!(
            "#EXT-X-KEY:METHOD=AES-128,URI=\"key?token={t}\",IV=0x{}\n#EXTINF:2.000,\n\
             #EXT-X-BYTERANGE:32@0\ncontent?ext=.ts\n",
            "01".repeat(16)
        )));
        assert!(text.contains(&format!(
            "IV=0x{}\n#EXTINF:2.000,\n#EXT-X-BYTERANGE:16@32\n",
            "02".repeat(16)
        )));
        assert!(text.ends_with("#EXT-X-ENDLIST\n"));
        assert_eq!(key_uri(Some("token=%22,x")), "key");
    }
}
