//! Titles with renditions over HTTP (issue 31; docs/protocol.md, "Titles over HTTP"):
//! `PUT /v1/titles/{name}` groups objects already uploaded (one `PUT /v1/objects/{name}`
//! per rendition, named `NAME@i` by `isnode ingest --server`) into a title once they are
//! renditions of one title (the checks of `isnode ingest --name`), and
//! `DELETE /v1/objects/{name}` of a title ([`delete_title`]) deletes the title with its
//! renditions; `GET /v1/titles` lists them.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use isnode_media::{check_aligned, AlignmentError, RenditionTiming, Tolerance};
use isnode_pool::objects::ObjectInfo;
use isnode_store::{StoreError, TitleRecord, TitleRendition};
use serde::Deserialize;

use super::{blocking, error, store_error, Sh};
use crate::api::state::ApiState;

/// How far an audio-only rendition's duration may be from the video's (as `isnode
/// ingest --name`: its last AAC frame and priming cut it off the video's frame grid).
const AUDIO_DURATION_TOLERANCE_S: f64 = 0.2;

/// The body of `PUT /v1/titles/{name}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PutTitle {
    /// The renditions' objects, in the title's order.
    renditions: Vec<String>,
    /// Replace a title of that name.
    #[serde(default)]
    replace: bool,
}

/// What the checks need of one rendition.
struct Member {
    obj: Arc<ObjectInfo>,
    descriptor: Option<isnode_store::renditions::DescriptorRecord>,
}

impl Member {
    fn audio_only(&self) -> bool {
        self.descriptor
            .as_ref()
            .is_some_and(super::manifests::audio_only_descriptor)
    }

    fn container(&self) -> &str {
        self.obj
            .media
            .as_ref()
            .map_or("unknown", |m| m.container.as_str())
    }
}

/// `GET /v1/titles`: `200` with every title and its renditions (`TitleRecord` JSON, by
/// name).
pub(super) async fn list_titles(_: super::roles::Viewer, State(sh): Sh) -> Response {
    let titles = blocking(&sh, |sh| {
        sh.control.objects.with_volume(|v| v.catalog().titles())
    })
    .await;
    match titles {
        Ok(Ok(t)) => Json(t).into_response(),
        Ok(Err(e)) => store_error(e),
        Err(r) => r,
    }
}

/// `PUT /v1/titles/{name}`: `201` with the title (`TitleRecord` JSON).
pub(super) async fn put_title(
    _: super::roles::Operator,
    State(sh): Sh,
    Path(name): Path<String>,
    Json(body): Json<PutTitle>,
) -> Response {
    if body.renditions.is_empty()
        || body.renditions.len() > isnode_store::renditions::MAX_TITLE_RENDITIONS
    {
        return error(
            StatusCode::BAD_REQUEST,
            format!(
                "a title has 1 to {} renditions",
                isnode_store::renditions::MAX_TITLE_RENDITIONS
            ),
        );
    }
    let mut members = Vec::with_capacity(body.renditions.len());
    for r in &body.renditions {
        let n = r.clone();
        let obj = match blocking(&sh, move |sh| sh.control.objects.get(&n)).await {
            Ok(Ok(o)) => o,
            Ok(Err(e)) => return store_error(e),
            Err(r) => return r,
        };
        let d = match super::cmaf::detail(&sh, &obj).await {
            Ok(d) => d,
            Err(r) => return r,
        };
        members.push(Member {
            obj,
            descriptor: d.descriptor,
        });
    }
    if let Err(why) = check_members(&members) {
        return error(StatusCode::UNPROCESSABLE_ENTITY, why);
    }
    let title = title_record(&name, &members);
    let t = title.clone();
    let replace = body.replace;
    match blocking(&sh, move |sh| {
        sh.control
            .objects
            .with_volume_mut(|v| v.put_title(&t, replace))
    })
    .await
    {
        Ok(Ok(())) => (StatusCode::CREATED, Json(title)).into_response(),
        Ok(Err(StoreError::NameExists(n))) => error(
            StatusCode::CONFLICT,
            format!("{n:?} exists (an object, or a title: \"replace\": true replaces a title)"),
        ),
        Ok(Err(e @ StoreError::InOtherTitle { .. })) => error(StatusCode::CONFLICT, e),
        Ok(Err(e @ StoreError::BadParams(_))) => error(StatusCode::BAD_REQUEST, e),
        Ok(Err(e)) => store_error(e),
        Err(r) => r,
    }
}

/// The title row of `members`.
fn title_record(name: &str, members: &[Member]) -> TitleRecord {
    let renditions = members
        .iter()
        .map(|m| TitleRendition {
            object: m.obj.rec.name.clone(),
            bitrate_bps: m.obj.rec.bitrate_bps,
            width: m.descriptor.as_ref().and_then(|d| d.width),
            height: m.descriptor.as_ref().and_then(|d| d.height),
            codecs: m
                .descriptor
                .as_ref()
                .map(|d| d.codecs.clone())
                .unwrap_or_default(),
        })
        .collect();
    TitleRecord {
        name: name.to_string(),
        created_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64),
        renditions,
    }
}

/// The checks of `isnode ingest --name`: one container (MPEG-TS, or fragmented MP4 with a
/// fragment index), audio-only renditions fragmented MP4 lasting as the video, the video
/// renditions' key frames and durations aligned. The error names the object.
fn check_members(members: &[Member]) -> Result<(), String> {
    let first = members.first().ok_or("no renditions")?;
    for m in members {
        if m.container() != first.container() || !matches!(m.container(), "mpeg-ts" | "mp4") {
            return Err(format!(
                "{:?} is {} and {:?} is {}: a title's renditions are all MPEG-TS or all \
                 fragmented MP4",
                m.obj.rec.name,
                m.container(),
                first.obj.rec.name,
                first.container()
            ));
        }
    }
    let (audio, video): (Vec<&Member>, Vec<&Member>) = members.iter().partition(|m| m.audio_only());
    let reference = video
        .first()
        .ok_or("a title needs a rendition with video: every object given is audio-only")?;
    for a in &audio {
        if a.container() != "mp4"
            || (a.obj.rec.duration_s - reference.obj.rec.duration_s).abs()
                > AUDIO_DURATION_TOLERANCE_S
        {
            return Err(format!(
                "{:?} (audio-only, {}, {:.3} s) is not the audio of {:?} ({:.3} s): it must be \
                 fragmented MP4 lasting as the video",
                a.obj.rec.name,
                a.container(),
                a.obj.rec.duration_s,
                reference.obj.rec.name,
                reference.obj.rec.duration_s
            ));
        }
    }
    let keys: Vec<Vec<f64>> = video
        .iter()
        .map(|m| {
            m.obj
                .media
                .as_ref()
                .map(|x| x.points.iter().map(|p| p.0).collect())
                .unwrap_or_default()
        })
        .collect();
    let timing: Vec<RenditionTiming<'_>> = keys
        .iter()
        .zip(&video)
        .map(|(k, m)| RenditionTiming {
            key_times_s: k,
            duration_s: m.obj.rec.duration_s,
        })
        .collect();
    let fps = video
        .iter()
        .filter_map(|m| m.descriptor.as_ref()?.fps())
        .fold(0.0f64, f64::max);
    check_aligned(&timing, Tolerance::for_frame_rate(fps))
        .map(|_| ())
        .map_err(|e| alignment_error(&video, e))
}

/// What an alignment error of the video renditions `video` says, naming the objects.
fn alignment_error(video: &[&Member], e: AlignmentError) -> String {
    let name = |i: usize| video.get(i).map_or("?".into(), |m| m.obj.rec.name.clone());
    match e {
        AlignmentError::Misaligned {
            rendition, time_s, ..
        } => format!(
            "{:?} is not aligned with {:?}: its key frames differ at {time_s:.3} s",
            name(rendition),
            name(0)
        ),
        AlignmentError::Duration {
            rendition,
            duration_s,
            expected_s,
        } => format!(
            "{:?} lasts {duration_s:.3} s but {:?} lasts {expected_s:.3} s",
            name(rendition),
            name(0)
        ),
        AlignmentError::NoKeyFrames { rendition } => {
            format!("{:?} has no key frame", name(rendition))
        }
        AlignmentError::NoRenditions => "no renditions".into(),
    }
}

/// `DELETE /v1/objects/{name}` of title `name` (no object has that name): each rendition
/// in use by sessions or broadcasts refuses it (`409`) unless `force`, which ends them;
/// then the title row goes, then each rendition object. `None` when `name` is no title.
pub(super) async fn delete_title(sh: &Arc<ApiState>, name: &str, force: bool) -> Option<Response> {
    let n = name.to_string();
    let title = match blocking(sh, move |sh| {
        sh.control.objects.with_volume(|v| v.catalog().title(&n))
    })
    .await
    {
        Ok(Ok(Some(t))) => t,
        Ok(Ok(None)) => return None,
        Ok(Err(e)) => return Some(store_error(e)),
        Err(r) => return Some(r),
    };
    // Each rendition closed to new sessions from the check of its users until it is gone.
    let mut closings = Vec::with_capacity(title.renditions.len());
    for r in &title.renditions {
        let n = r.object.clone();
        if let Ok(Ok(o)) = blocking(sh, move |sh| sh.control.objects.get(&n)).await {
            let closing = sh.control.sessions.close_object(o.rec.toi);
            if let Some(r) = super::remove::end_users(sh, &r.object, o.rec.toi, &closing, force) {
                return Some(r);
            }
            closings.push(closing);
        }
    }
    let t = title.clone();
    let gone = blocking(sh, move |sh| {
        sh.control
            .objects
            .with_volume_mut(|v| v.forget_title(&t.name))?;
        for r in &t.renditions {
            match sh.control.objects.delete(&r.object) {
                Ok(_) | Err(StoreError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    })
    .await;
    drop(closings);
    Some(match gone {
        Ok(Ok(())) => {
            tracing::info!(%name, renditions = title.renditions.len(), "title deleted");
            StatusCode::NO_CONTENT.into_response()
        }
        Ok(Err(e)) => store_error(e),
        Err(r) => r,
    })
}
