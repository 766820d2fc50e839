//! `DELETE /v1/objects/{name}` (docs/protocol.md, "Delete"): refused (`409`) while
//! sessions or broadcasts use the object, unless `?force=true` ends them first.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use isnode_store::StoreError;
use serde::Deserialize;

use super::{blocking, error, store_error, Sh};
use crate::api::state::ApiState;
use isnode_control::registry::{SessionState, StreamShared};

/// The query of a delete.
#[derive(Debug, Default, Deserialize)]
pub(super) struct DeleteQuery {
    /// End the sessions and broadcasts of the object first.
    #[serde(default)]
    force: bool,
}

/// What uses an object now.
struct Users {
    sessions: Vec<Arc<StreamShared>>,
    broadcasts: Vec<String>,
}

impl Users {
    fn of(sh: &ApiState, toi: u32) -> Users {
        let sessions = sh
            .lock_sessions()
            .values()
            .filter(|s| s.object.rec.toi == toi && s.state() == SessionState::Streaming)
            .cloned()
            .collect();
        let broadcasts = sh
            .control
            .broadcasts
            .list()
            .into_iter()
            .filter(|b| b.object.rec.toi == toi)
            .map(|b| b.id.clone())
            .collect();
        Users {
            sessions,
            broadcasts,
        }
    }

    fn is_empty(&self) -> bool {
        self.sessions.is_empty() && self.broadcasts.is_empty()
    }

    /// Ends every session and broadcast.
    fn end(self, sh: &ApiState) {
        let now = sh.now_ns();
        for s in self.sessions {
            sh.control.sessions.remove(&s.id);
            s.end(SessionState::Deleted, now);
        }
        for id in self.broadcasts {
            sh.control.broadcasts.remove(&id, now);
        }
    }
}

/// The refusal (`409`) of a delete of object `name` (TOI `toi`) while sessions or
/// broadcasts use it, unless `force`, which ends them (`None`: the delete may go on).
pub(super) fn end_users(sh: &ApiState, name: &str, toi: u32, force: bool) -> Option<Response> {
    let users = Users::of(sh, toi);
    if users.is_empty() {
        return None;
    }
    if !force {
        return Some(error(
            StatusCode::CONFLICT,
            format!(
                "object {name:?} is in use by {} session(s) and {} broadcast(s); \
                 ?force=true ends them first",
                users.sessions.len(),
                users.broadcasts.len()
            ),
        ));
    }
    tracing::info!(
        %name,
        sessions = users.sessions.len(),
        broadcasts = users.broadcasts.len(),
        "ending the users of a deleted object"
    );
    users.end(sh);
    None
}

/// `DELETE /v1/objects/{name}[?force=true]` (an object, or a title with its renditions:
/// [`super::titles::delete_title`]): `204` once the row, digests and segment
/// files are gone.
pub(super) async fn delete_object(
    _: super::roles::Operator,
    State(sh): Sh,
    Path(name): Path<String>,
    Query(q): Query<DeleteQuery>,
) -> Response {
    if let Some(r) = super::titles::delete_title(&sh, &name, q.force).await {
        return r;
    }
    let lookup = name.clone();
    let toi = match blocking(&sh, move |sh| sh.control.objects.get(&lookup)).await {
        Ok(Ok(o)) => Some(o.rec.toi),
        // An object whose rows are impossible has no user: it can go. Nor has a partial
        // fill no fill writes (not served): the volume deletes it, or answers 404.
        Ok(Err(StoreError::BadObject { .. } | StoreError::NotFound(_))) => None,
        Ok(Err(e)) => return store_error(e),
        Err(r) => return r,
    };
    if let Some(toi) = toi {
        if let Some(r) = end_users(&sh, &name, toi, q.force) {
            return r;
        }
    }
    let gone = name.clone();
    match blocking(&sh, move |sh| sh.control.objects.delete(&gone)).await {
        Ok(Ok(toi)) => {
            tracing::info!(%name, toi, "object deleted");
            StatusCode::NO_CONTENT.into_response()
        }
        Ok(Err(e)) => store_error(e),
        Err(r) => r,
    }
}
