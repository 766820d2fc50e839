//! `POST /v1/sessions/{id}/control`: seek (to a time or a codeword), pause or resume a
//! live session. The request is checked whole here, then queued on the session for its
//! data-plane thread, which is woken (`ApiState::wake_data_plane`) and applies it
//! to the session's pacer on its next turn.

use std::sync::atomic::Ordering;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use isnode_proto::{ControlAnswer, SessionControl};

use super::media::locate;
use super::{ApiError, Sh};
use isnode_control::registry::Control;
use isnode_plane::stream::StreamShared;

/// What a valid request does, and what the answer says of a seek.
struct Checked {
    control: Control,
    codeword: Option<u32>,
    offset_bytes: Option<u64>,
    seek_by: Option<isnode_proto::SeekBy>,
}

/// Checks `req` against session `s`; nothing is changed.
fn check(s: &StreamShared, req: SessionControl) -> Result<Checked, ApiError> {
    let bad = |msg: String| ApiError::new(StatusCode::BAD_REQUEST, msg);
    let plain = |control| Checked {
        control,
        codeword: None,
        offset_bytes: None,
        seek_by: None,
    };
    let obj = &s.object;
    match req {
        SessionControl::Pause => Ok(plain(Control::Pause)),
        SessionControl::Resume => Ok(plain(Control::Resume)),
        SessionControl::Seek {
            at_s: Some(t),
            codeword: None,
        } => {
            let at = locate(obj, t).map_err(bad)?;
            if at.codeword >= obj.layout.codewords() {
                return Err(bad(format!(
                    "{:?} has no codeword to seek to",
                    obj.rec.name
                )));
            }
            Ok(Checked {
                control: Control::Seek(at.codeword),
                codeword: Some(at.codeword),
                offset_bytes: Some(at.offset_bytes),
                seek_by: Some(at.by),
            })
        }
        SessionControl::Seek {
            at_s: None,
            codeword: Some(c),
        } => {
            let codewords = obj.layout.codewords();
            if c >= codewords {
                return Err(bad(format!(
                    "codeword {c} is out of range: {:?} has {codewords} codewords",
                    obj.rec.name
                )));
            }
            Ok(Checked {
                control: Control::Seek(c),
                codeword: Some(c),
                offset_bytes: Some(obj.layout.codeword_offset(c)),
                seek_by: None,
            })
        }
        SessionControl::Seek { .. } => Err(bad(
            "a seek names exactly one of at_s (seconds) and codeword".into(),
        )),
    }
}

/// `POST /v1/sessions/{id}/control`: by the session's creator, with its secret.
pub(super) async fn control_session(
    super::owner::OwnedSession(s): super::owner::OwnedSession,
    State(sh): Sh,
    body: Bytes,
) -> Response {
    if !s.validated.load(Ordering::Acquire) {
        return ApiError::new(
            StatusCode::CONFLICT,
            "the session waits for its token's echo (POST /v1/sessions/{id}/validate)",
        )
        .into_response();
    }
    let req: SessionControl = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return ApiError::new(StatusCode::BAD_REQUEST, format!("malformed request: {e}"))
                .into_response()
        }
    };
    let c = match check(&s, req) {
        Ok(c) => c,
        Err(e) => return e.into_response(),
    };
    if !s.push_control(c.control) {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many control requests waiting for this session, try again",
        )
        .into_response();
    }
    sh.wake_data_plane();
    match c.control {
        Control::Pause => s.paused.store(true, Ordering::Release),
        Control::Resume => s.paused.store(false, Ordering::Release),
        Control::Start(_) => {}
        Control::Seek(_) => {}
    }
    tracing::info!(id = %s.id, control = ?c.control, "session control");
    Json(ControlAnswer {
        id: s.id.clone(),
        paused: s.paused.load(Ordering::Acquire),
        codeword: c.codeword,
        offset_bytes: c.offset_bytes,
        seek_by: c.seek_by,
    })
    .into_response()
}
