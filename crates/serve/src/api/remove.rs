//! `DELETE /v1/objects/{name}` (docs/protocol.md, "Delete"): refused (`409`) while
//! sessions or broadcasts use the object, unless `?force=true` ends them first.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use isnode_store::StoreError;
use serde::Deserialize;

use super::{blocking, error, store_error, Sh};
use crate::api::state::ApiState;
use isnode_control::registry::{Closing, SessionState};

/// The query of a delete.
#[derive(Debug, Default, Deserialize)]
pub(super) struct DeleteQuery {
    /// End the sessions and broadcasts of the object first.
    #[serde(default)]
    force: bool,
}

/// The broadcasts of object `toi` now.
fn broadcasts_of(sh: &ApiState, toi: u32) -> Vec<String> {
    sh.control
        .broadcasts
        .list()
        .into_iter()
        .filter(|b| b.object.rec.toi == toi)
        .map(|b| b.id.clone())
        .collect()
}

/// The refusal (`409`) of a delete of object `name` (TOI `toi`, closed to new sessions by
/// `closing`, which found its sessions) while sessions or broadcasts use it, unless
/// `force`, which ends them (`None`: the delete may go on).
pub(super) fn end_users(
    sh: &ApiState,
    name: &str,
    toi: u32,
    closing: &Closing<'_>,
    force: bool,
) -> Option<Response> {
    let broadcasts = broadcasts_of(sh, toi);
    if closing.users.is_empty() && broadcasts.is_empty() {
        return None;
    }
    if !force {
        return Some(error(
            StatusCode::CONFLICT,
            format!(
                "object {name:?} is in use by {} session(s) and {} broadcast(s); \
                 ?force=true ends them first",
                closing.users.len(),
                broadcasts.len()
            ),
        ));
    }
    tracing::info!(
        %name,
        sessions = closing.users.len(),
        broadcasts = broadcasts.len(),
        "ending the users of a deleted object"
    );
    let now = sh.now_ns();
    for s in &closing.users {
        sh.control.sessions.remove(&s.id);
        s.end(SessionState::Deleted, now);
    }
    for id in broadcasts {
        sh.control.broadcasts.remove(&id, now);
    }
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
    // Closed to new sessions from before the check of its users until it is gone: a
    // session cannot start on it between the check and the delete.
    let closing = toi.map(|toi| (toi, sh.control.sessions.close_object(toi)));
    if let Some((toi, closing)) = &closing {
        if let Some(r) = end_users(&sh, &name, *toi, closing, q.force) {
            return r;
        }
    }
    let gone = name.clone();
    match blocking(&sh, move |sh| sh.control.objects.delete(&gone)).await {
        Ok(Ok(toi)) => {
            drop(closing);
            tracing::info!(%name, toi, "object deleted");
            StatusCode::NO_CONTENT.into_response()
        }
        Ok(Err(e)) => store_error(e),
        Err(r) => r,
    }
}
