//! The media playlist of a fragmented MP4 (CMAF) object behind `index.m3u8`, and the
//! catalog read of an object's descriptor and fragment index that it and the manifests of
//! [`super::renditions`] need.

use std::sync::Arc;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use isnode_pool::objects::ObjectInfo;
use isnode_store::MediaDetail;

use super::{blocking, manifests, store_error};
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
/// request's token (the version: [`super::media::segment_uri`]).
pub(super) async fn fmp4_playlist(
    sh: &Arc<ApiState>,
    obj: &ObjectInfo,
    query: Option<&str>,
) -> Option<Response> {
    let d = match detail(sh, obj).await {
        Ok(d) => d,
        Err(r) => return Some(r),
    };
    let f = d.fragments.filter(|f| !f.fragments.is_empty())?;
    let toi = obj.rec.toi;
    let uri = match super::roles::carried_token(query) {
        Some(t) => format!("content?token={t}&isnode_version={toi}&ext=.mp4"),
        None => format!("content?isnode_version={toi}&ext=.mp4"),
    };
    let text = manifests::cmaf_playlist(&uri, &f);
    let r = ([(header::CONTENT_TYPE, M3U8)], text).into_response();
    Some(super::common::private_if_token(r, query))
}
