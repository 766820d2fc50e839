//! Titles with renditions over HTTP (issue 31): `GET /v1/objects/{name}/master.m3u8` (the
//! HLS multivariant playlist), `GET /v1/objects/{name}/manifest.mpd` (a static DASH MPD of
//! CMAF renditions), and the media playlist of a fragmented MP4 rendition behind
//! `index.m3u8`. `{name}` is a title (its renditions) or a single object (one variant).
//! Rendering is in [`super::manifests`]; the `?token=` of the request is carried onto
//! every URL as [`super::media`]'s playlists do.

use std::sync::Arc;

use axum::extract::{ConnectInfo, Path, RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use isnode_pool::objects::ObjectInfo;

use super::common::{path_segment, private_if_token};
use super::manifests::{self, Variant};
use super::media::{complete_object, NeedsWhole};
use super::{blocking, store_error, ApiError, Asker, Sh};
use crate::api::state::ApiState;

/// The MIME type of HLS playlists.
const M3U8: &str = "application/vnd.apple.mpegurl";
/// The MIME type of DASH MPDs.
const MPD: &str = "application/dash+xml";

/// `?token=T` when the request carried a token playlists carry on, else nothing.
fn token_query(query: Option<&str>) -> String {
    super::roles::carried_token(query).map_or(String::new(), |t| format!("?token={t}"))
}

/// What a manifest is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Manifest {
    Hls,
    Dash,
}

/// One variant of object `obj`, its URL `uri_of(obj)`.
async fn variant(sh: &Arc<ApiState>, obj: &ObjectInfo, uri: String) -> Result<Variant, Response> {
    let d = super::cmaf::detail(sh, obj).await?;
    let rec = &obj.rec;
    let peak = match (&d.fragments, &obj.media) {
        (Some(f), _) => manifests::peak_bps(
            manifests::cmaf_segments(f)
                .iter()
                .map(|s| (s.len, s.ticks as f64 / f64::from(f.timescale))),
        ),
        (None, Some(m)) => manifests::peak_bps(
            super::media::segments(&m.points, rec.size_bytes, rec.duration_s)
                .iter()
                .map(|s| (s.len_bytes, s.duration_s)),
        ),
        (None, None) => rec.bitrate_bps,
    };
    Ok(Variant {
        uri,
        peak_bps: peak,
        average_bps: rec.bitrate_bps,
        descriptor: d.descriptor,
        fragments: d.fragments,
        key_frames: d.key_frames,
        duration_s: rec.duration_s,
        protection: None,
    })
}

/// The scheme and authority the request was made to (`http://HOST`), for absolute URLs in
/// a manifest (a Clear Key licence URL is resolved by players against their page, not the
/// manifest); `None` without a usable `Host`.
fn origin_of(sh: &ApiState, headers: &HeaderMap) -> Option<String> {
    let host = headers.get(header::HOST)?.to_str().ok()?;
    let ok = !host.is_empty()
        && host.len() <= 255
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b));
    let scheme = match sh.config().tls_cert.is_some() {
        true => "https",
        false => "http",
    };
    ok.then(|| format!("{scheme}://{host}"))
}

/// What the manifest says of `obj`'s encryption: a CENC `cbcs` object in an MPD names its
/// key id and licence URL; an HLS master says nothing (the `SAMPLE-AES` key line of a
/// `cbcs` object, like an MPEG-TS title's AES-128 ones, lives in its `index.m3u8`).
async fn protection(
    sh: &Arc<ApiState>,
    obj: &ObjectInfo,
    kind: Manifest,
    origin: &str,
    tok: &str,
) -> Result<Option<manifests::Protection>, Response> {
    let Some(rec) = super::protected::protection_of(sh, obj.rec.toi).await? else {
        return Ok(None);
    };
    let cbcs = rec.method == isnode_store::protection::METHOD_CENC_CBCS;
    match (kind, cbcs) {
        (Manifest::Dash, true) => Ok(Some(manifests::Protection {
            key_id: rec.key_id,
            licence_url: format!(
                "{origin}/v1/objects/{}/license{tok}",
                path_segment(&obj.rec.name)
            ),
        })),
        (Manifest::Hls, true) | (_, false) => Ok(None),
    }
}

/// The variants of `name`: a title's renditions in order, or the object itself.
async fn variants(
    sh: &Arc<ApiState>,
    asker: Asker,
    name: String,
    kind: Manifest,
    query: Option<&str>,
    origin: &str,
) -> Result<Vec<Variant>, Response> {
    let title_name = name.clone();
    let title = match blocking(sh, move |sh| {
        sh.control
            .objects
            .with_volume(|v| v.catalog().title(&title_name))
    })
    .await?
    {
        Ok(t) => t,
        Err(e) => return Err(store_error(e)),
    };
    let tok = token_query(query);
    let objects: Vec<String> = match &title {
        Some(t) => t.renditions.iter().map(|r| r.object.clone()).collect(),
        None => vec![name],
    };
    let mut out = Vec::with_capacity(objects.len());
    for object in objects {
        let obj = complete_object(sh, asker, object, NeedsWhole::Index).await?;
        let enc = path_segment(&obj.rec.name);
        let uri = match (kind, title.is_some()) {
            (Manifest::Hls, true) => format!("../{enc}/index.m3u8{tok}"),
            (Manifest::Hls, false) => format!("index.m3u8{tok}"),
            (Manifest::Dash, _) => format!("../../../o/{enc}{tok}"),
        };
        let mut v = variant(sh, &obj, uri).await?;
        v.protection = protection(sh, &obj, kind, origin, &tok).await?;
        out.push(v);
    }
    Ok(out)
}

/// `GET /v1/objects/{name}/master.m3u8`.
pub(super) async fn get_master(
    _: super::roles::Viewer,
    State(sh): Sh,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let asker = Asker::Viewer(peer.ip());
    match variants(&sh, asker, name, Manifest::Hls, query.as_deref(), "").await {
        Ok(v) => private_if_token(
            (
                [(header::CONTENT_TYPE, M3U8)],
                manifests::master_playlist(&v),
            )
                .into_response(),
            query.as_deref(),
        ),
        Err(r) => r,
    }
}

/// `GET /v1/objects/{name}/manifest.mpd`: CMAF renditions only.
pub(super) async fn get_mpd(
    _: super::roles::Viewer,
    State(sh): Sh,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let asker = Asker::Viewer(peer.ip());
    let origin = origin_of(&sh, &headers).unwrap_or_default();
    let q = query.as_deref();
    let v = match variants(&sh, asker, name.clone(), Manifest::Dash, q, &origin).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    if v.iter().any(|v| v.fragments.is_none()) {
        return ApiError::new(
            StatusCode::BAD_REQUEST,
            format!(
                "DASH is served for fragmented MP4 (CMAF) renditions only; {name:?} is not \
                 (use GET /v1/objects/{{name}}/master.m3u8)"
            ),
        )
        .into_response();
    }
    private_if_token(
        ([(header::CONTENT_TYPE, MPD)], manifests::mpd(&v)).into_response(),
        query.as_deref(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_one_encoded_path_segment_and_tokens_carry_on() {
        assert_eq!(path_segment("movie@0"), "movie%400");
        assert_eq!(path_segment("a b/?#.ts"), "a%20b%2F%3F%23.ts");
        let t = "0f".repeat(16);
        assert_eq!(
            token_query(Some(&format!("token={t}"))),
            format!("?token={t}")
        );
        assert_eq!(token_query(Some("token=%0A")), "");
        assert_eq!(token_query(None), "");
    }
}
