//! The API's waits on fills from the origin, bounded: a viewer's request that finds its
//! title being filled waits without a thread (a task on the API's runtime, which stops
//! waiting when its client hangs up and the connection drops it), under a permit of
//! `fill_max_waiters` in total and `fill_max_waiters_per_client` per client; past either it
//! is answered `503` with `Retry-After` at once. The catalog lookup and a fill's start
//! still run on tokio's blocking pool, briefly: they never wait on a fill there.

use std::net::IpAddr;
use std::sync::Arc;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use isnode_fill::limits::{ClientKey, WaitPermit, WaitRefused};
use isnode_fill::{FillJob, FillStatus, Found, LookupError, Starter};
use isnode_pool::objects::ObjectInfo;

use super::{error, fill_status};
use crate::api::state::ApiState;

/// Who a lookup is for: the fill limits apply to viewers; operators' requests (a
/// broadcast's start) are neither capped nor counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Asker {
    /// A viewer's request from this address.
    Viewer(IpAddr),
    /// An operator's request.
    Operator,
}

impl Asker {
    fn starter(self) -> Starter {
        match self {
            Asker::Viewer(ip) => Starter::Client(ClientKey::of(ip)),
            Asker::Operator => Starter::Operator,
        }
    }
}

/// The object `name` to serve, filled from the origin if the volume lacks it (the lookup
/// and the start off the runtime; the wait for its first codewords on it, bounded); the
/// error answer otherwise.
pub(super) async fn lookup(
    sh: &Arc<ApiState>,
    asker: Asker,
    name: String,
) -> Result<Arc<ObjectInfo>, Response> {
    let found = super::blocking(sh, move |sh| {
        isnode_fill::find(&sh.fills, &name, asker.starter())
    })
    .await?;
    match found {
        Ok(Found::Ready(o)) => Ok(o),
        Ok(Found::Filling(job)) => {
            let _permit = permit(sh, asker).map_err(refused)?;
            let deadline = tokio::time::Instant::now() + isnode_fill::FIRST_BYTES_WAIT;
            let waited = job.first_readable(deadline).await;
            isnode_fill::first_answer(&job, waited).map_err(|e| lookup_error(e, asker))
        }
        Err(e) => Err(lookup_error(e, asker)),
    }
}

/// A lookup's error as the answer. A viewer is not told what the origin said (its
/// endpoint, bucket, key or message): the log and `GET /v1/fills` tell the operator.
fn lookup_error(e: LookupError, asker: Asker) -> Response {
    let (status, msg) = e.status_and_message();
    let msg = match (asker, status) {
        (Asker::Viewer(_), FillStatus::BadGateway | FillStatus::Internal) => {
            tracing::info!("a fill failed for a viewer: {msg}");
            "filling this title from the origin failed; the operator's log says why".to_string()
        }
        _ => msg,
    };
    match status {
        // The caps, a drain, a slow origin: try again shortly.
        FillStatus::Unavailable => busy(msg),
        _ => error(fill_status(status), msg),
    }
}

/// A permit to wait on a fill for `asker` (none needed by an operator), or why not.
fn permit(sh: &ApiState, asker: Asker) -> Result<Option<WaitPermit>, WaitRefused> {
    let Asker::Viewer(ip) = asker else {
        return Ok(None);
    };
    let caps = {
        let c = sh.config();
        (c.fill_max_waiters, c.fill_max_waiters_per_client)
    };
    sh.fills.waiters.enter(ClientKey::of(ip), caps).map(Some)
}

/// A wait refused, as the `503`.
fn refused(why: WaitRefused) -> Response {
    busy(format!("not waiting for a fill from the origin: {why}"))
}

/// `503` with `Retry-After: 5`.
pub(super) fn busy(msg: String) -> Response {
    let mut r = error(StatusCode::SERVICE_UNAVAILABLE, msg).into_response();
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
    r
}

/// Waits, bounded, until the fill `job` ends (`deadline` at most); the permit's refusal
/// otherwise.
pub(super) async fn until_ended(
    sh: &ApiState,
    asker: Asker,
    job: &FillJob,
    deadline: tokio::time::Instant,
) -> Result<(), Response> {
    let _permit = permit(sh, asker).map_err(refused)?;
    job.ended(deadline).await;
    Ok(())
}

/// Waits, bounded, until codeword `sbn` of `obj` (being filled) may be read; the answer
/// if it cannot be (the fill failed or stalled: `503`, or the permit's refusal).
pub(super) async fn until_at_front(
    sh: &ApiState,
    asker: Asker,
    obj: &ObjectInfo,
    sbn: u32,
) -> Result<(), Response> {
    let Some(front) = &obj.fill else {
        return Ok(());
    };
    if front.has(sbn) {
        return Ok(());
    }
    let Some(job) = sh.fills.job(&obj.rec.name) else {
        // The fill ended: it reached `sbn` or failed.
        return match front.has(sbn) {
            true => Ok(()),
            false => Err(unreached(obj, sbn)),
        };
    };
    let _permit = permit(sh, asker).map_err(refused)?;
    let deadline = tokio::time::Instant::now() + isnode_fill::FRONT_WAIT;
    match job.reached(front, sbn, deadline).await {
        isnode_pool::front::Wait::Ready => Ok(()),
        _ => Err(unreached(obj, sbn)),
    }
}

fn unreached(obj: &ObjectInfo, sbn: u32) -> Response {
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        format!(
            "the fill of {:?} from the origin did not reach codeword {sbn}",
            obj.rec.name
        ),
    )
}
