//! Origin fills over the API (docs/protocol.md, "Origin fills"): `POST /v1/fills` pre-fills
//! titles ahead of demand at a capped rate, `GET /v1/fills` reports every fill, and
//! `POST`/`DELETE /v1/objects/{name}/pin` keep a title from eviction. Operator role.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Json;
use serde::{Deserialize, Serialize};

use super::{blocking, error, Sh};
use isnode_fill::{FillKind, FillReport};

/// Most titles one pre-fill request names.
const MAX_PREFILL_TITLES: usize = 1000;

/// The fill routes.
pub(super) fn routes(r: super::Routes) -> super::Routes {
    r.route("/v1/fills", post(prefill).get(list_fills))
        .route("/v1/objects/{name}/pin", post(pin).delete(unpin))
}

/// `POST /v1/fills`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PrefillRequest {
    /// The titles (keys at the origin).
    titles: Vec<String>,
    /// A rate cap below the server's `prefill_rate_bps` (bits per second).
    #[serde(default)]
    rate_bps: Option<u64>,
}

/// One title of a pre-fill's answer.
#[derive(Debug, Serialize)]
struct Prefilled {
    name: String,
    /// `filling` (started or joined), `present` (complete already) or `refused`.
    state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// `GET /v1/fills`.
#[derive(Debug, Serialize)]
struct FillList {
    /// Running fills and the last ones finished.
    fills: Vec<FillReport>,
    /// Pinned titles.
    pins: Vec<String>,
}

/// The rate cap of a pre-fill: the lower of the request's and `prefill_rate_bps` (0: none).
fn prefill_rate(asked: Option<u64>, server_bps: u64) -> u64 {
    match (asked.filter(|&r| r > 0), server_bps) {
        (Some(a), 0) => a,
        (Some(a), s) => a.min(s),
        (None, s) => s,
    }
}

async fn prefill(
    _: super::roles::Operator,
    State(sh): Sh,
    body: Result<Json<PrefillRequest>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let Ok(Json(req)) = body else {
        return error(
            StatusCode::BAD_REQUEST,
            "the body must be {\"titles\": [\"NAME\", ...], \"rate_bps\": N}",
        );
    };
    if req.titles.is_empty() || req.titles.len() > MAX_PREFILL_TITLES {
        let why = format!("name 1 to {MAX_PREFILL_TITLES} titles");
        return error(StatusCode::BAD_REQUEST, why);
    }
    if sh.fills.origin().is_none() {
        return error(
            StatusCode::CONFLICT,
            "no origin is configured (origin = ...)",
        );
    }
    let rate_bps = prefill_rate(req.rate_bps, sh.config().prefill_rate_bps);
    let sh2 = sh.clone();
    let answer = blocking(&sh, move |_| {
        req.titles
            .iter()
            .map(|name| prefill_one(&sh2, name, rate_bps))
            .collect::<Vec<_>>()
    })
    .await;
    match answer {
        Ok(list) => (StatusCode::ACCEPTED, Json(list)).into_response(),
        Err(r) => r,
    }
}

fn prefill_one(
    sh: &std::sync::Arc<crate::api::state::ApiState>,
    name: &str,
    rate_bps: u64,
) -> Prefilled {
    let answer = |state, error| Prefilled {
        name: name.to_string(),
        state,
        error,
    };
    if let Err(e) = isnode_store::ingest::validate_name(name) {
        return answer("refused", Some(e.to_string()));
    }
    if sh.fills.job(name).is_none() && sh.control.objects.get(name).is_ok() {
        return answer("present", None);
    }
    let kind = FillKind::Prefill { rate_bps };
    match isnode_fill::start_or_join(&sh.fills, name, kind, isnode_fill::Starter::Operator) {
        Ok(_) => answer("filling", None),
        Err((_, e)) => answer("refused", Some(e)),
    }
}

async fn list_fills(_: super::roles::Operator, State(sh): Sh) -> Response {
    let pins = blocking(&sh, |sh| sh.control.objects.with_volume(|v| v.pins())).await;
    match pins {
        Ok(Ok(pins)) => Json(FillList {
            fills: sh.fills.reports(),
            pins,
        })
        .into_response(),
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
        Err(r) => r,
    }
}

async fn pin(_: super::roles::Operator, State(sh): Sh, Path(name): Path<String>) -> Response {
    if let Err(e) = isnode_store::ingest::validate_name(&name) {
        return error(StatusCode::BAD_REQUEST, e);
    }
    match blocking(&sh, move |sh| {
        sh.control.objects.with_volume_mut(|v| v.pin(&name))
    })
    .await
    {
        Ok(Ok(())) => StatusCode::NO_CONTENT.into_response(),
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
        Err(r) => r,
    }
}

async fn unpin(_: super::roles::Operator, State(sh): Sh, Path(name): Path<String>) -> Response {
    match blocking(&sh, move |sh| {
        sh.control.objects.with_volume_mut(|v| v.unpin(&name))
    })
    .await
    {
        Ok(Ok(true)) => StatusCode::NO_CONTENT.into_response(),
        Ok(Ok(false)) => error(StatusCode::NOT_FOUND, "not pinned"),
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
        Err(r) => r,
    }
}

#[cfg(test)]
mod tests {
    use super::prefill_rate;

    #[test]
    fn the_lower_cap_wins() {
        assert_eq!(prefill_rate(None, 0), 0);
        assert_eq!(prefill_rate(Some(5), 0), 5);
        assert_eq!(prefill_rate(None, 7), 7);
        assert_eq!(prefill_rate(Some(5), 7), 5);
        assert_eq!(prefill_rate(Some(9), 7), 7);
        assert_eq!(prefill_rate(Some(0), 7), 7);
    }
}
