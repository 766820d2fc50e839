//! `POST /v1/sessions`: parse the request, look the object up (off the runtime), admit
//! over a snapshot of the sessions (the pure [`admit`]), register with a re-check.
//!
//! A session that must wait for its token's echo takes no bitrate budget, pool nor
//! start-up burst headroom until then: at creation it is checked against the limits of
//! such sessions ([`admit_unvalidated`]) and against what the streaming sessions leave (so
//! that a refusal comes early), and admitted for real, with its burst, at the echo
//! ([`admit_at_echo`]). The data plane reads nothing for it before.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use isnode_proto::auth::key_hex;
use isnode_proto::{CreateSession, FecInfo, SessionInfo};

use super::common::{object_and_fdt, refuse};
use super::media::{locate, Located};
use super::{ApiError, Sh};
use crate::admit::{demand, limits};
use crate::registry::{Expiry, NewStreamShared, RegisterError, Snapshot};
use crate::{Shared, StreamShared};
use isnode_plane::NewSession;
use isnode_pool::objects::{ObjectInfo, SessionFdt};
use isnode_serve_config::ValidateDestination;
use isnode_serve_core::admission::{
    admit, admit_unvalidated, start_burst_factor, Demand, Refusal, UnvalidatedLimits,
};
use isnode_serve_core::pacer::{Pacer, PacerConfig, StartBurst};

/// The FDT is repeated before every this many codewords.
pub(crate) const FDT_EVERY: u32 = 8;
/// Admissions retried when other sessions were registered meanwhile.
const REGISTER_ATTEMPTS: usize = 16;

/// A well-formed request.
pub(super) struct Request {
    object: String,
    /// Always the HTTP peer's own address.
    pub(super) dest: SocketAddr,
    pub(super) start_codeword: u32,
    /// `start_at_s`, checked finite and not negative; mapped once the object is known.
    pub(super) start_at_s: Option<f64>,
    /// The client asked for no start-up burst.
    no_start_burst: bool,
}

/// Parses the body; packets only ever go to the HTTP peer's own address, at a port not
/// below `min_port`.
pub(super) fn parse(body: &[u8], peer: SocketAddr, min_port: u16) -> Result<Request, ApiError> {
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

/// The pacer of a session of `obj` from `start_codeword`.
fn pacer(sh: &Shared, obj: &ObjectInfo, start_codeword: u32) -> Result<Pacer, ApiError> {
    let cfg = PacerConfig {
        layout: obj.layout.clone(),
        bitrate_bps: obj.rec.bitrate_bps,
        start_codeword,
        max_burst: obj.max_burst(),
        fdt_every: FDT_EVERY,
    };
    Pacer::new(cfg, sh.now_ns()).map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e))
}

/// Whether `s` streams (or waits for nothing): what admission counts.
fn is_validated(s: &StreamShared) -> bool {
    s.validated.load(Ordering::Acquire)
}

/// The sessions and broadcast channels admission counts at `now`: those validated, and
/// the extra rate of their bursts in progress.
fn counted(sh: &Shared, snap: &Snapshot, now: u64) -> (Vec<Arc<StreamShared>>, u64) {
    let streaming: Vec<Arc<StreamShared>> = snap
        .sessions
        .iter()
        .filter(|s| is_validated(s))
        .cloned()
        .chain(sh.broadcasts.channels())
        .collect();
    let bursting = streaming
        .iter()
        .fold(0u64, |sum, s| sum.saturating_add(s.burst_extra_bps(now)));
    (streaming, bursting)
}

/// The start-up burst factor a client wants (1: none).
fn wanted_factor(sh: &Shared, no_start_burst: bool) -> u32 {
    if no_start_burst || sh.config().start_burst_ms == 0 {
        1
    } else {
        sh.config().start_burst_factor
    }
}

/// Admits session `s` at its token's echo over the streaming sessions; its start-up burst
/// factor (1: none).
pub(super) fn admit_at_echo(sh: &Shared, s: &StreamShared) -> Result<u32, Refusal> {
    let now = sh.now_ns();
    let snap = sh.sessions.snapshot();
    let (streaming, bursting) = counted(sh, &snap, now);
    let active: Vec<Demand> = streaming
        .iter()
        .filter(|o| o.id != s.id)
        .map(|o| demand(o))
        .collect();
    let limits = limits(sh);
    admit(&limits, &active, &demand(s))?;
    Ok(start_burst_factor(
        &limits,
        bursting,
        s.send_rate_bps,
        s.wanted_burst_factor(),
    ))
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
    // Broadcast channels draw on the same budget and pool; sessions awaiting their echo
    // do not (they have limits of their own).
    let (streaming, bursting) = counted(sh, snap, now);
    let active: Vec<Demand> = streaming.iter().map(|s| demand(s)).collect();
    if sh.config().validate_destination == ValidateDestination::Token {
        let waiting: Vec<IpAddr> = snap
            .sessions
            .iter()
            .filter(|s| !is_validated(s) && s.state() == crate::SessionState::Streaming)
            .map(|s| s.peer_ip)
            .collect();
        let ulimits = UnvalidatedLimits {
            max_sessions: sh.config().max_unvalidated_sessions,
            max_per_client: sh.config().max_unvalidated_per_client,
        };
        admit_unvalidated(&ulimits, &waiting, req.dest.ip())?;
    }
    let new = Demand {
        peer_ip: req.dest.ip(),
        send_rate_bps: obj.send_rate_bps,
        toi: obj.rec.toi,
        layout: &obj.layout,
        codeword: req.start_codeword,
    };
    let limits = limits(sh);
    admit(&limits, &active, &new)?;
    let wanted = wanted_factor(sh, req.no_start_burst);
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
        media_ms: sh.config().start_burst_ms,
        factor,
    };
    let p = pacer.clone().with_start_burst(burst);
    let record = p
        .burst_end_ns()
        .map(|end| (send_rate_bps.saturating_mul(u64::from(factor)), end));
    (p, record)
}

/// Admits and registers the session and hands it to a data-plane thread.
fn admit_and_register(
    sh: &Shared,
    req: &Request,
    obj: &Arc<ObjectInfo>,
    fdt: &SessionFdt,
    pacer: Pacer,
) -> Result<Arc<StreamShared>, ApiError> {
    for _ in 0..REGISTER_ATTEMPTS {
        let snap = sh.sessions.snapshot();
        let factor = admit_over(sh, &snap, req, obj).map_err(|r| refuse(sh, r))?;
        let validate = sh.config().validate_destination == ValidateDestination::Token;
        let (mut pacer, burst) = match validate {
            false => with_burst(sh, &pacer, obj.send_rate_bps, factor),
            // Nothing is sent until the destination echoes the token (`owner.rs`); the
            // burst is decided and counted then (its wanted rate kept, not counted).
            true => {
                let wanted = wanted_factor(sh, req.no_start_burst);
                let rate = obj.send_rate_bps.saturating_mul(u64::from(wanted));
                (pacer.clone(), Some((rate, 0)))
            }
        };
        if validate {
            pacer.pause(sh.now_ns());
        }
        let mut pacer = Some(pacer);
        let make = |id| {
            Arc::new(StreamShared::new(NewStreamShared {
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
                owner: Some(crate::registry::random_owner()),
                validated: !validate,
            }))
        };
        let new_id = || format!("{:016x}", rand::random::<u64>());
        let hand_over = |s: &Arc<StreamShared>| {
            let pacer = pacer.take().ok_or(())?;
            let ns = NewSession {
                shared: s.clone(),
                pacer: isnode_serve_core::schedule::Schedule::Session(pacer),
            };
            sh.plane.submit(ns).map_err(|_| ())
        };
        match sh.sessions.register(&snap, make, new_id, hand_over) {
            Ok(s) => {
                sh.wakes.reap.notify_one();
                if burst.is_some_and(|(_, until)| until > 0) {
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

fn created(sh: &Shared, s: &StreamShared, fdt: SessionFdt, at: Option<Located>) -> Response {
    let obj = &s.object;
    let secret = s.owner.map(|o| key_hex(&o.secret)).unwrap_or_default();
    let body = SessionInfo {
        id: s.id.clone(),
        secret,
        validate_timeout_ms: sh.config().validate_timeout_ms,
        destination: s.dest.to_string(),
        object: obj.json(),
        start_codeword: s.start_codeword,
        send_rate_bps: s.send_rate_bps,
        keepalive_interval_ms: isnode_proto::DEFAULT_KEEPALIVE_INTERVAL_MS,
        keepalive_port: Some(sh.keepalive_port),
        keepalive_version: Some(isnode_proto::keepalive::KEEPALIVE_VERSION),
        session_timeout_ms: sh.config().session_timeout_ms,
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
        origin_etag: obj.origin_etag.clone(),
    };
    (StatusCode::CREATED, Json(body)).into_response()
}

pub(super) async fn create_session(
    _: super::roles::Viewer,
    State(sh): Sh,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    body: Bytes,
) -> Response {
    let mut req = match parse(&body, peer, sh.config().min_dest_port.max(1)) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let (obj, fdt) = match object_and_fdt(&sh, &req.object).await {
        Ok(v) => v,
        Err(resp) => return resp,
    };
    if let Some(redirect) = super::hybrid::hybrid(&sh, &obj, &fdt).await {
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
            sh.metrics.titles.started(&obj.rec.name);
            tracing::info!(id = %s.id, object = %obj.rec.name, dest = %s.dest, "session created");
            tokio::spawn(super::owner::send_tokens(sh.clone(), s.clone()));
            created(&sh, &s, fdt, at)
        }
        Err(e) => e.into_response(),
    }
}
