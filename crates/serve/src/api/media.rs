//! The time index of the objects over HTTP: `GET /v1/objects/{name}/index` (the
//! random-access points as JSON), `GET /v1/objects/{name}/index.m3u8` (an HLS VOD playlist
//! of byte ranges of the content, MPEG-TS only), and the mapping of a time to a place to
//! start from ([`locate`]), shared by session creation and seek.

use axum::extract::{ConnectInfo, Path, RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use isnode_proto::SeekBy;
use isnode_store::Layout;

use super::{ApiError, Asker, Sh};
pub(crate) use isnode_media::segments::{segments, Segment};
use isnode_pool::objects::ObjectInfo;

/// The segment URI of a playlist of version `toi` of a title: the content, relative to the
/// playlist's URL, with the version (`isnode_version`: the content answers `410` once the title has been
/// replaced, rather than splice another version's bytes into an old playlist). The query
/// gives the URI an extension too: ffmpeg's HLS demuxer refuses a segment URL that has none
/// of its known media extensions (so `ext=.ts` stays last). A playlist asked for with
/// `?token=` (`query` is the playlist request's) carries the token onto its segments, which
/// a player fetches without headers, so that a server closed to anonymous viewers still
/// plays. A token that is not plain hexadecimal is not one the server knows and is not
/// echoed.
pub(crate) fn segment_uri(query: Option<&str>, toi: u32) -> String {
    match super::roles::carried_token(query) {
        Some(t) => format!("content?token={t}&isnode_version={toi}&ext=.ts"),
        None => format!("content?isnode_version={toi}&ext=.ts"),
    }
}
/// The container name the catalog records for MPEG-TS.
const MPEG_TS: &str = "mpeg-ts";

/// Where a time maps to in an object.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Located {
    /// The codeword holding `offset_bytes`.
    pub codeword: u32,
    /// The byte playback starts at.
    pub offset_bytes: u64,
    /// The time of that byte, seconds.
    pub time_s: f64,
    /// How it was found.
    pub by: SeekBy,
}

/// The codeword holding byte `offset` (the last one for an offset past the end; 0 when
/// the object has no codeword).
pub(crate) fn codeword_of(layout: &Layout, offset: u64) -> u32 {
    let n = layout.codewords();
    let (mut lo, mut hi) = (0u32, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if layout.codeword_offset(mid) <= offset {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo.saturating_sub(1)
}

/// Maps `at_s` (seconds from the title's start) to the last random-access point at or
/// before it (the first point for a time before it), or, for an object without an index
/// or points, to the first byte of the codeword holding byte `at_s × bitrate / 8`.
/// Refuses a time that is not finite, negative, or past the duration.
pub(crate) fn locate(obj: &ObjectInfo, at_s: f64) -> Result<Located, String> {
    let duration_s = obj.rec.duration_s;
    if !at_s.is_finite() || at_s < 0.0 {
        return Err(format!("time {at_s} s is not a time in the title"));
    }
    if at_s > duration_s {
        return Err(format!(
            "time {at_s} s is past the end of {:?} (duration {duration_s:.3} s)",
            obj.rec.name
        ));
    }
    let points = obj.media.as_ref().map_or(&[][..], |m| &m.points[..]);
    let after = points.partition_point(|p| p.0 <= at_s);
    if let Some(&(time_s, offset_bytes)) = points.get(after.saturating_sub(1)) {
        return Ok(Located {
            codeword: codeword_of(&obj.layout, offset_bytes),
            offset_bytes,
            time_s,
            by: SeekBy::Index,
        });
    }
    let rate = obj.rec.bitrate_bps.max(1) as f64;
    let byte = (at_s * rate / 8.0).floor() as u64;
    let codeword = codeword_of(&obj.layout, byte.min(obj.rec.size_bytes.saturating_sub(1)));
    let offset_bytes = if obj.layout.codewords() == 0 {
        0
    } else {
        obj.layout.codeword_offset(codeword)
    };
    Ok(Located {
        codeword,
        offset_bytes,
        time_s: offset_bytes as f64 * 8.0 / rate,
        by: SeekBy::Bitrate,
    })
}

/// The HLS VOD playlist (RFC 8216, version 4 for `EXT-X-BYTERANGE`) of `segments` of the
/// resource at `uri` (relative to the playlist). The target duration is the longest
/// segment rounded to the nearest second (RFC 8216 §4.3.3.1), at least 1.
pub(crate) fn playlist(uri: &str, segments: &[Segment]) -> String {
    render(uri, segments, PlaylistType::Vod)
}

/// The type of a playlist.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PlaylistType {
    /// The whole title (`VOD`, ended by `#EXT-X-ENDLIST`).
    Vod,
    /// The part filled so far (`EVENT`: segments are only appended; no end yet).
    Event,
}

fn render(uri: &str, segments: &[Segment], kind: PlaylistType) -> String {
    let target = segments
        .iter()
        .map(|s| s.duration_s.round() as u64)
        .max()
        .unwrap_or(1)
        .max(1);
    let mut m = format!(
        "#EXTM3U\n#EXT-X-VERSION:4\n#EXT-X-TARGETDURATION:{target}\n\
         #EXT-X-PLAYLIST-TYPE:{}\n#EXT-X-MEDIA-SEQUENCE:0\n",
        match kind {
            PlaylistType::Vod => "VOD",
            PlaylistType::Event => "EVENT",
        }
    );
    for s in segments {
        m.push_str(&format!(
            "#EXTINF:{:.3},\n#EXT-X-BYTERANGE:{}@{}\n{uri}\n",
            s.duration_s, s.len_bytes, s.offset_bytes
        ));
    }
    if kind == PlaylistType::Vod {
        m.push_str("#EXT-X-ENDLIST\n");
    }
    m
}

/// The `EVENT` playlist of the part of an MPEG-TS title filled so far (its segments cut at
/// the random-access points found, the last one ending at the last point before the
/// readable front); `None` when the object is not filling, not MPEG-TS, or no whole
/// segment is readable yet.
fn filling_playlist(obj: &ObjectInfo, uri: &str) -> Option<String> {
    let front = obj.fill.as_ref()?;
    if front.state() != isnode_pool::front::FrontState::Filling {
        return None;
    }
    let readable = front.readable();
    let end_bytes = match readable >= obj.layout.codewords() {
        true => obj.rec.size_bytes,
        false => obj.layout.codeword_offset(readable),
    };
    let points = front.points_before(end_bytes)?;
    let &(last_t, last_o) = points.last()?;
    let segs = segments(&points, last_o, last_t);
    if segs.is_empty() || last_o == 0 {
        return None;
    }
    Some(render(uri, &segs, PlaylistType::Event))
}

/// The object's playlist with segments at `uri`, or why it has none (a 4xx).
fn object_playlist(obj: &ObjectInfo, uri: &str) -> Result<String, ApiError> {
    let name = &obj.rec.name;
    let Some(media) = &obj.media else {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("{name:?} has no media index (ingested before indexes existed): ingest it again for HLS"),
        ));
    };
    if media.container != MPEG_TS {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!(
                "HLS is served for MPEG-TS titles only; {name:?} is {} (use GET /v1/objects/{{name}}/content)",
                media.container
            ),
        ));
    }
    let segs = segments(&media.points, obj.rec.size_bytes, obj.rec.duration_s);
    Ok(playlist(uri, &segs))
}

/// How long a playlist or index request waits for a fill from the origin to complete (the
/// time index is made from the whole object).
const INDEX_FILL_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// What needs a whole object, as a `503` during its fill says it.
#[derive(Clone, Copy, Debug)]
pub(super) enum NeedsWhole {
    /// The time index (playlist, index).
    Index,
    /// A broadcast (it sends every codeword in a loop).
    Broadcast,
}

/// The complete object `name` (its time index, a broadcast): a fill from the origin is
/// started or joined and waited for (bounded: `503` with `Retry-After` past
/// [`INDEX_FILL_WAIT`], the fill going on).
pub(super) async fn complete_object(
    sh: &std::sync::Arc<crate::api::state::ApiState>,
    asker: Asker,
    name: String,
    need: NeedsWhole,
) -> Result<std::sync::Arc<isnode_pool::objects::ObjectInfo>, Response> {
    let obj = super::lookup(sh, asker, name.clone()).await?;
    if obj.fill.is_none() {
        return Ok(obj);
    }
    if let Some(job) = sh.fills.job(&name) {
        let deadline = tokio::time::Instant::now() + INDEX_FILL_WAIT;
        super::fill_wait::until_ended(sh, asker, &job, deadline).await?;
    }
    let obj = super::lookup(sh, asker, name.clone()).await?;
    if obj.fill.is_none() {
        return Ok(obj);
    }
    let why = match need {
        NeedsWhole::Index => "its time index comes when it completes",
        NeedsWhole::Broadcast => {
            "a broadcast sends the whole title in a loop and can start once it is complete"
        }
    };
    let mut r = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        format!(
            "{name:?} is still being filled from the origin ({} of {} codewords): {why}; retry",
            obj.fill.as_ref().map_or(0, |f| f.readable()),
            obj.rec.codewords
        ),
    )
    .into_response();
    r.headers_mut().insert(
        header::RETRY_AFTER,
        axum::http::HeaderValue::from_static("5"),
    );
    Err(r)
}

/// `GET /v1/objects/{name}/index.m3u8` (its `?token=`, if any, carried onto the segments).
pub(super) async fn get_playlist(
    _: super::roles::Viewer,
    State(sh): Sh,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    // A title being filled: the playlist of its filled part, when it has a whole segment.
    let asker = Asker::Viewer(peer.ip());
    let filling = match super::lookup(&sh, asker, name.clone()).await {
        Ok(o) => filling_playlist(&o, &segment_uri(query.as_deref(), o.rec.toi)),
        Err(r) => return r,
    };
    if let Some(text) = filling {
        return playlist_answer(text, query.as_deref());
    }
    let obj = match complete_object(&sh, asker, name, NeedsWhole::Index).await {
        Ok(o) => o,
        Err(r) => return r,
    };
    // An encrypted title (issue 32): an MPEG-TS title's AES-128 playlist of the
    // ciphertext; a CENC cbcs CMAF title's `EXT-X-MAP` playlist with its SAMPLE-AES key line.
    let mut key_line = None;
    match super::protected::protection_of(&sh, obj.rec.toi).await {
        Ok(Some(rec)) if rec.method == isnode_store::protection::METHOD_CENC_CBCS => {
            key_line = Some(super::protected::sample_aes_key_line(&rec.key_id));
        }
        Ok(Some(rec)) => {
            let key = super::protected::key_uri(query.as_deref());
            let uri = segment_uri(query.as_deref(), obj.rec.toi);
            let text = super::protected::playlist(&rec, &uri, &key);
            return playlist_answer(text, query.as_deref());
        }
        Ok(None) => {}
        Err(r) => return r,
    }
    // A fragmented MP4 (CMAF) with a fragment index: its `EXT-X-MAP` playlist.
    if obj.media.as_ref().is_some_and(|m| m.container != MPEG_TS) {
        let k = key_line.as_deref();
        if let Some(r) = super::cmaf::fmp4_playlist(&sh, &obj, query.as_deref(), k).await {
            return r;
        }
    }
    match object_playlist(&obj, &segment_uri(query.as_deref(), obj.rec.toi)) {
        Ok(text) => playlist_answer(text, query.as_deref()),
        Err(e) => e.into_response(),
    }
}

/// A playlist's answer: one that carries the viewer's token onto its segments is that
/// viewer's alone (`Cache-Control: private, no-store`: no shared cache keeps it).
fn playlist_answer(text: String, query: Option<&str>) -> Response {
    super::common::private_if_token(
        (
            [(header::CONTENT_TYPE, "application/vnd.apple.mpegurl")],
            text,
        )
            .into_response(),
        query,
    )
}

/// `GET /v1/objects/{name}/index`.
pub(super) async fn get_index(
    _: super::roles::Viewer,
    State(sh): Sh,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    Path(name): Path<String>,
) -> Response {
    let asker = Asker::Viewer(peer.ip());
    let obj = match complete_object(&sh, asker, name, NeedsWhole::Index).await {
        Ok(o) => o,
        Err(r) => return r,
    };
    let Some(media) = &obj.media else {
        return ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "{:?} has no media index (ingested before indexes existed)",
                obj.rec.name
            ),
        )
        .into_response();
    };
    Json(isnode_proto::MediaIndex {
        object: obj.rec.name.clone(),
        container: media.container.clone(),
        moov_at_front: media.moov_at_front,
        points: media
            .points
            .iter()
            .map(|&(time_s, offset_bytes)| isnode_proto::AccessPoint {
                time_s,
                offset_bytes,
                codeword: codeword_of(&obj.layout, offset_bytes),
            })
            .collect(),
    })
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_the_cuts_as_byte_ranges() {
        let points: Vec<(f64, u64)> = (0..10).map(|i| (i as f64 * 2.0, 564 + i * 1000)).collect();
        let segs = segments(&points, 10_500, 20.0);
        let text = playlist("content", &segs);
        assert!(text.starts_with("#EXTM3U\n#EXT-X-VERSION:4\n#EXT-X-TARGETDURATION:2\n"));
        assert!(text.contains("#EXT-X-PLAYLIST-TYPE:VOD\n"));
        assert!(text.contains("#EXTINF:2.000,\n#EXT-X-BYTERANGE:1564@0\ncontent\n"));
        assert!(text.contains("#EXT-X-BYTERANGE:1000@1564\n"));
        assert!(text.ends_with("#EXT-X-ENDLIST\n"));
        let long: Vec<(f64, u64)> = vec![(0.0, 0), (2.0, 100), (11.0, 200), (13.0, 300)];
        assert!(playlist("c", &segments(&long, 400, 15.0)).contains("#EXT-X-TARGETDURATION:9\n"));
    }

    #[test]
    fn a_playlist_asked_for_with_a_token_carries_it_onto_its_segments() {
        let t = "0f".repeat(32);
        let plain = "content?isnode_version=7&ext=.ts";
        assert_eq!(segment_uri(None, 7), plain);
        assert_eq!(segment_uri(Some("x=1"), 7), plain);
        let uri = segment_uri(Some(&format!("x=1&token={t}")), 7);
        assert_eq!(uri, format!("content?token={t}&isnode_version=7&ext=.ts"));
        // The extension stays last (ffmpeg's check), and nothing else is echoed.
        assert!(uri.ends_with(".ts"));
        assert_eq!(segment_uri(Some("token=%0A%23EXT"), 7), plain);
        assert_eq!(segment_uri(Some("token="), 7), plain);
        let segs = segments(&[], 1000, 4.0);
        assert!(playlist(&uri, &segs)
            .contains(&format!("\ncontent?token={t}&isnode_version=7&ext=.ts\n")));
    }
}
