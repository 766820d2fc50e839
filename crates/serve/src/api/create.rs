//! `POST /v1/sessions`: parse the request, look the object up (off the runtime), admit
//! over a snapshot of the sessions (the pure [`admit`]), register with a re-check.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use isnode_proto::auth::key_hex;
use isnode_proto::{CreateSession, ErrorBody, FecInfo, SessionInfo};

use super::media::{locate, Located};
use super::{blocking, store_error, ApiError, Sh};
use crate::admission::{
    admit, burst_headroom_bps, start_burst_factor, Demand, Limits, PoolLimit, Refusal,
};
use crate::config::ValidateDestination;
use crate::objects::{ObjectInfo, SessionFdt};
use crate::plane::{NewSession, LOOKAHEAD_CODEWORDS};
use crate::registry::{Expiry, NewSessionShared, Owner, RegisterError, Snapshot};
use crate::session::{Pacer, PacerConfig, StartBurst};
use crate::{EngineKind, SessionShared, Shared};

/// The FDT is repeated before every this many codewords.
pub(crate) const FDT_EVERY: u32 = 8;
/// Pool slots kept free beyond the sessions' working sets (rebuilds, in-flight sends).
const CACHE_RESERVE_SLOTS: usize = 2;
/// Admissions retried when other sessions were registered meanwhile.
const REGISTER_ATTEMPTS: usize = 16;

/// A well-formed request.
struct Request {
    object: String,
    /// Always the HTTP peer's own address.
    dest: SocketAddr,
    start_codeword: u32,
    /// `start_at_s`, checked finite and not negative; mapped once the object is known.
    start_at_s: Option<f64>,
    /// The client asked for no start-up burst.
    no_start_burst: bool,
}

/// Parses the body; packets only ever go to the HTTP peer's own address, at a port not
/// below `min_port`.
fn parse(body: &[u8], peer: SocketAddr, min_port: u16) -> Result<Request, ApiError> {
    let req: CreateSession = serde_json::from_slice(body)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, format!("malformed request: {e}")))?;
    if req.port == 0 || req.port < min_port {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!(
                "port {} is not a destination: the lowest this server streams to is {min_port}",
                req.port
            ),
        ));
    }
    if let Some(t) = req.start_at_s {
        if !t.is_finite() || t < 0.0 {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("start_at_s {t} is not a time in the title"),
            ));
        }
        if req.start_codeword != 0 {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "give start_at_s or start_codeword, not both",
            ));
        }
    }
    let peer_ip = match peer.ip() {
        IpAddr::V6(v6) => v6.to_canonical(),
        v4 => v4,
    };
    Ok(Request {
        object: req.object,
        dest: SocketAddr::new(peer_ip, req.port),
        start_codeword: req.start_codeword,
        start_at_s: req.start_at_s,
        no_start_burst: req.no_start_burst,
    })
}

/// The largest burst of `obj`'s packets one send carries.
pub(super) fn max_burst(obj: &ObjectInfo) -> u32 {
    let packet_len = obj.layout.params().packet_len() as usize;
    (crate::net::MAX_SEND_BYTES / packet_len).clamp(1, crate::net::MAX_GSO_SEGMENTS) as u32
}

/// The pacer of a session of `obj` from `start_codeword`.
fn pacer(sh: &Shared, obj: &ObjectInfo, start_codeword: u32) -> Result<Pacer, ApiError> {
    let cfg = PacerConfig {
        layout: obj.layout.clone(),
        bitrate_bps: obj.rec.bitrate_bps,
        start_codeword,
        max_burst: max_burst(obj),
        fdt_every: FDT_EVERY,
    };
    Pacer::new(cfg, sh.now_ns()).map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e))
}

/// The configured limits.
pub(super) fn limits(sh: &Shared) -> Limits {
    Limits {
        max_sessions_per_client: sh.args.max_sessions_per_client,
        max_bitrate_bps: sh.args.bitrate_budget_bps(),
        burst_headroom_bps: burst_headroom_bps(sh.args.bitrate_budget_bps()),
        // The pool-backed engines only: `traditional` reads per session and `sendfile`
        // sends from the page cache (its pool backs the degraded path alone).
        pool: matches!(
            sh.engine,
            EngineKind::Gso | EngineKind::Sendmmsg | EngineKind::UringZc
        )
        .then(|| PoolLimit {
            slots: sh.cache.slots() as usize,
            reserve_slots: CACHE_RESERVE_SLOTS,
            lookahead_codewords: LOOKAHEAD_CODEWORDS,
            cache_size_bytes: sh.args.cache_size_bytes,
        }),
    }
}

pub(super) fn demand(s: &SessionShared) -> Demand<'_> {
    Demand {
        peer_ip: s.peer_ip,
        send_rate_bps: s.send_rate_bps,
        toi: s.object.rec.toi,
        layout: &s.object.layout,
        codeword: s.next_codeword.load(Ordering::Relaxed),
    }
}

/// Admits the session over `snap`, without any lock held; the start-up burst factor the
/// budget leaves it (1: none).
fn admit_over(
    sh: &Shared,
    snap: &Snapshot,
    req: &Request,
    obj: &ObjectInfo,
) -> Result<u32, Refusal> {
    let now = sh.now_ns();
    // Broadcast channels draw on the same budget and pool.
    let channels = sh.broadcasts.channels();
    let active: Vec<Demand> = snap
        .sessions
        .iter()
        .chain(channels.iter())
        .map(|s| demand(s))
        .collect();
    let bursting = snap
        .sessions
        .iter()
        .fold(0u64, |sum, s| sum.saturating_add(s.burst_extra_bps(now)));
    let new = Demand {
        peer_ip: req.dest.ip(),
        send_rate_bps: obj.send_rate_bps,
        toi: obj.rec.toi,
        layout: &obj.layout,
        codeword: req.start_codeword,
    };
    let limits = limits(sh);
    admit(&limits, &active, &new)?;
    let wanted = if req.no_start_burst || sh.args.start_burst_ms == 0 {
        1
    } else {
        sh.args.start_burst_factor
    };
    Ok(start_burst_factor(
        &limits,
        bursting,
        new.send_rate_bps,
        wanted,
    ))
}

/// The pacer with the start-up burst of `factor` (none below 2), and the burst's (rate,
/// end time) for the session's admission record.
fn with_burst(
    sh: &Shared,
    pacer: &Pacer,
    send_rate_bps: u64,
    factor: u32,
) -> (Pacer, Option<(u64, u64)>) {
    let burst = StartBurst {
        media_ms: sh.args.start_burst_ms,
        factor,
    };
    let p = pacer.clone().with_start_burst(burst);
    let record = p
        .burst_end_ns()
        .map(|end| (send_rate_bps.saturating_mul(u64::from(factor)), end));
    (p, record)
}

/// Counts the refusal; the `503` answer naming the limit.
pub(super) fn refuse(sh: &Shared, r: Refusal) -> ApiError {
    sh.metrics.refused(r.limit);
    ApiError {
        status: StatusCode::SERVICE_UNAVAILABLE,
        body: ErrorBody {
            error: format!("admission refused: {}", r.reason),
            limit: Some(r.limit),
            value: Some(r.value),
        },
    }
}

/// Admits and registers the session and hands it to a data-plane thread.
fn admit_and_register(
    sh: &Shared,
    req: &Request,
    obj: &Arc<ObjectInfo>,
    fdt: &SessionFdt,
    pacer: Pacer,
) -> Result<Arc<SessionShared>, ApiError> {
    for _ in 0..REGISTER_ATTEMPTS {
        let snap = sh.sessions.snapshot();
        let factor = admit_over(sh, &snap, req, obj).map_err(|r| refuse(sh, r))?;
        let (mut pacer, burst) = with_burst(sh, &pacer, obj.send_rate_bps, factor);
        let validate = sh.args.validate_destination == ValidateDestination::Token;
        if validate {
            // Nothing is sent until the destination echoes the token (`owner.rs`).
            pacer.pause(sh.now_ns());
        }
        let mut pacer = Some(pacer);
        let make = |id| {
            Arc::new(SessionShared::new(NewSessionShared {
                id,
                object: obj.clone(),
                fdt_packets: fdt.packets.clone(),
                dest: req.dest,
                repair_dest: None,
                expiry: Expiry::Keepalive,
                send_rate_bps: None,
                start_codeword: req.start_codeword,
                now_ns: sh.now_ns(),
                burst,
                owner: Some(Owner::random()),
                validated: !validate,
            }))
        };
        let new_id = || format!("{:016x}", rand::random::<u64>());
        let hand_over = |s: &Arc<SessionShared>| {
            let w = sh.next_worker.fetch_add(1, Ordering::Relaxed) % sh.workers.len().max(1);
            let pacer = pacer.take().ok_or(())?;
            let ns = NewSession {
                shared: s.clone(),
                pacer: crate::plane::Schedule::Session(pacer),
            };
            sh.workers
                .get(w)
                .ok_or(())?
                .try_send(crate::plane::PlaneMsg::New(Box::new(ns)))
                .map_err(|_| ())
        };
        match sh.sessions.register(&snap, make, new_id, hand_over) {
            Ok(s) => {
                if burst.is_some() {
                    sh.metrics.start_bursts.fetch_add(1, Ordering::Relaxed);
                }
                return Ok(s);
            }
            Err(RegisterError::Stale) => continue,
            Err(RegisterError::HandOver(())) => break,
        }
    }
    Err(ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "data plane busy, try again",
    ))
}

fn created(sh: &Shared, s: &SessionShared, fdt: SessionFdt, at: Option<Located>) -> Response {
    let obj = &s.object;
    let secret = s.owner.map(|o| key_hex(&o.secret)).unwrap_or_default();
    let body = SessionInfo {
        id: s.id.clone(),
        secret,
        validate_timeout_ms: sh.args.validate_timeout_ms,
        destination: s.dest.to_string(),
        object: obj.json(),
        start_codeword: s.start_codeword,
        send_rate_bps: s.send_rate_bps,
        keepalive_interval_ms: isnode_proto::DEFAULT_KEEPALIVE_INTERVAL_MS,
        keepalive_port: Some(sh.keepalive_port),
        session_timeout_ms: sh.args.session_timeout_ms,
        loss_reports: true,
        fdt_xml: fdt.xml,
        fec: FecInfo {
            encoding_id: isnode_wire::FEC_ENCODING_ID_RS28,
            symbol_size: obj.rec.symbol_len,
            max_source_block_length: obj.rec.source_symbols,
            max_encoding_symbols: obj.rec.source_symbols + obj.rec.repair_symbols,
        },
        start_offset_bytes: at.map(|a| a.offset_bytes),
        start_time_s: at.map(|a| a.time_s),
        seek_by: at.map(|a| a.by),
    };
    (StatusCode::CREATED, Json(body)).into_response()
}

/// The object called `name` and a fresh FDT instance of it (catalog lookups, off the
/// runtime); the error answer otherwise.
pub(super) async fn object_and_fdt(
    sh: &Arc<Shared>,
    name: &str,
) -> Result<(Arc<ObjectInfo>, SessionFdt), Response> {
    let name = name.to_string();
    let found = blocking(sh, move |sh| {
        let obj = sh.objects.get(&name)?;
        let fdt = sh.objects.session_fdt(&obj)?;
        Ok::<_, isnode_store::StoreError>((obj, fdt))
    });
    match found.await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(store_error(e)),
        Err(resp) => Err(resp),
    }
}

pub(super) async fn create_session(
    _: super::roles::Viewer,
    State(sh): Sh,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    body: Bytes,
) -> Response {
    let mut req = match parse(&body, peer, sh.args.min_dest_port.max(1)) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let (obj, fdt) = match object_and_fdt(&sh, &req.object).await {
        Ok(v) => v,
        Err(resp) => return resp,
    };
    if let Some(redirect) = super::broadcast::hybrid(&sh, &obj, &fdt).await {
        return redirect;
    }
    let at = match req.start_at_s.map(|t| locate(&obj, t)).transpose() {
        Ok(at) => at,
        Err(e) => return ApiError::new(StatusCode::BAD_REQUEST, e).into_response(),
    };
    if let Some(at) = at {
        req.start_codeword = at.codeword;
    }
    let pacer = match pacer(&sh, &obj, req.start_codeword) {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    match admit_and_register(&sh, &req, &obj, &fdt, pacer) {
        Ok(s) => {
            sh.metrics.sessions_started.fetch_add(1, Ordering::Relaxed);
            tracing::info!(id = %s.id, object = %obj.rec.name, dest = %s.dest, "session created");
            tokio::spawn(super::owner::send_tokens(sh.clone(), s.clone()));
            created(&sh, &s, fdt, at)
        }
        Err(e) => e.into_response(),
    }
}
