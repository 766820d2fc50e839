//! The media playlist of a fragmented MP4 (CMAF) object behind `index.m3u8`, the I-frame
//! playlist of it or of an MPEG-TS object (`GET /v1/objects/{name}/iframes.m3u8`), and the
//! catalog read of an object's descriptor and fragment index that it and the manifests of
//! [`super::renditions`] need.

use std::sync::Arc;

use axum::extract::{ConnectInfo, Path, RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use isnode_pool::objects::ObjectInfo;
use isnode_store::MediaDetail;

use super::media::{complete_object, NeedsWhole};
use super::{blocking, manifests, store_error, ApiError, Asker, Sh};
use crate::api::state::ApiState;

/// The MIME type of HLS playlists.
const M3U8: &str = "application/vnd.apple.mpegurl";

/// The descriptor and fragment index of `obj` (a catalog read, off the runtime).
pub(super) async fn detail(sh: &Arc<ApiState>, obj: &ObjectInfo) -> Result<MediaDetail, Response> {
    let (toi, size) = (obj.rec.toi, obj.rec.size_bytes);
    let read = blocking(sh, move |sh| {
        sh.control
            .objects
            .with_volume(|v| v.catalog().media_detail(toi, size))
    });
    match read.await {
        Ok(Ok(d)) => Ok(d),
        Ok(Err(e)) => Err(store_error(e)),
        Err(r) => Err(r),
    }
}

/// The media playlist of `obj` when it is a fragmented MP4 with a fragment index (`None`
/// otherwise: the caller answers as before), its segments at `content?isnode_version=TOI&ext=.mp4` with the
/// request's token (the version: [`super::media::segment_uri`]); `key_line` (a CENC `cbcs`
/// object's `#EXT-X-KEY`) before its `#EXT-X-MAP`.
pub(super) async fn fmp4_playlist(
    sh: &Arc<ApiState>,
    obj: &ObjectInfo,
    query: Option<&str>,
    key_line: Option<&str>,
) -> Option<Response> {
    let d = match detail(sh, obj).await {
        Ok(d) => d,
        Err(r) => return Some(r),
    };
    let f = d.fragments.filter(|f| !f.fragments.is_empty())?;
    let text = manifests::cmaf_playlist(&content_uri(query, obj.rec.toi), &f);
    let text = match key_line {
        Some(k) => super::protected::with_key_line(&text, k),
        None => text,
    };
    let r = ([(header::CONTENT_TYPE, M3U8)], text).into_response();
    Some(super::common::private_if_token(r, query))
}

/// The `content` URI of a fragmented MP4's playlists of version `toi` (the title's, as
/// [`super::media::segment_uri`] has it), with the request's token.
fn content_uri(query: Option<&str>, toi: u32) -> String {
    match super::roles::carried_token(query) {
        Some(t) => format!("content?token={t}&isnode_version={toi}&ext=.mp4"),
        None => format!("content?isnode_version={toi}&ext=.mp4"),
    }
}

/// `GET /v1/objects/{name}/iframes.m3u8`: the I-frame playlist of a fragmented MP4 object
/// whose fragments' key frame extents are known, or of an MPEG-TS object whose key frames
/// were indexed at ingest (`404` otherwise: encrypted TS, objects ingested before).
pub(super) async fn get_iframes(
    _: super::roles::Viewer,
    State(sh): Sh,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let asker = Asker::Viewer(peer.ip());
    let obj = match complete_object(&sh, asker, name.clone(), NeedsWhole::Index).await {
        Ok(o) => o,
        Err(r) => return r,
    };
    // A CENC cbcs object: its I-frames are ciphertext, under the same key line.
    let key_line = match super::protected::cbcs_key_line(&sh, obj.rec.toi).await {
        Ok(k) => k,
        Err(r) => return r,
    };
    let d = match detail(&sh, &obj).await {
        Ok(d) => d,
        Err(r) => return r,
    };
    let text = match (d.fragments, d.key_frames) {
        (Some(f), _) => manifests::iframe_playlist(&content_uri(query.as_deref(), obj.rec.toi), &f),
        (None, Some(k)) => manifests::ts_iframe_playlist(
            &super::media::segment_uri(query.as_deref(), obj.rec.toi),
            &k,
            obj.rec.duration_s,
        ),
        (None, None) => None,
    }
    .map(|t| match &key_line {
        Some(k) => super::protected::with_key_line(&t, k),
        None => t,
    });
    let Some(text) = text else {
        return ApiError::new(
            StatusCode::NOT_FOUND,
            format!(
                "{name:?} has no I-frame playlist: fragmented MP4 (CMAF) objects whose \
                 fragments start with a key frame of known extent have one, and MPEG-TS \
                 objects whose key frames were indexed at ingest (not encrypted ones)"
            ),
        )
        .into_response();
    };
    let r = ([(header::CONTENT_TYPE, M3U8)], text).into_response();
    super::common::private_if_token(r, query.as_deref())
}
