//! `POST /v1/sessions`: parse the request, look the object up (off the runtime), and ask
//! the session policy (`isnode_control::sessions`: admission over a snapshot of the sessions,
//! registration with a re-check); render what it decides.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use isnode_proto::auth::key_hex;
use isnode_proto::{CreateSession, FecInfo, SessionInfo};

use super::common::{object_and_fdt, session_error};
use super::media::{locate, Located};
use super::{ApiError, Sh};
use crate::api::state::ApiState;
use isnode_control::sessions::{admit_and_register, pacer, Ask};
use isnode_plane::stream::StreamShared;
use isnode_pool::objects::SessionFdt;

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

fn created(
    sh: &ApiState,
    s: &StreamShared,
    fdt: SessionFdt,
    at: Option<Located>,
    output: Output,
) -> Response {
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
        encrypted: output != Output::Stored,
        clear_output_bytes: match output {
            Output::Decrypted(n) => Some(n),
            Output::Stored | Output::DecryptedUnknown => None,
        },
    };
    (StatusCode::CREATED, Json(body)).into_response()
}

/// What a session's output is, once the client has done its part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Output {
    /// The stored bytes (a clear title).
    Stored,
    /// The clear media of an encrypted title, this many bytes.
    Decrypted(u64),
    /// The clear media of a CENC `cbcs` title from a later fragment: its length is not
    /// recorded (the clear fragments' lengths are not in its row).
    DecryptedUnknown,
}

/// The output of a session of an object protected by `p` (`None`: clear) from object
/// byte `start`: an AES-128 title's clear bytes in the segments from the one starting at
/// or after `start` to the end; a `cbcs` title's whole clear length from its start.
fn output_from(p: Option<&isnode_store::ProtectionRecord>, start: u64) -> Output {
    match p {
        None => Output::Stored,
        Some(p) if p.method == isnode_store::protection::METHOD_CENC_CBCS && start > 0 => {
            Output::DecryptedUnknown
        }
        Some(p) => Output::Decrypted(
            p.segments
                .iter()
                .filter(|s| s.offset_bytes >= start)
                .map(|s| s.clear_length)
                .sum(),
        ),
    }
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
    let (obj, fdt) = match object_and_fdt(&sh, super::Asker::Viewer(peer.ip()), &req.object).await {
        Ok(v) => v,
        Err(resp) => return resp,
    };
    if let Some(redirect) = super::hybrid::hybrid(&sh, &obj, &fdt).await {
        return redirect;
    }
    // An object still filling has no key row (an encrypted fill is served once complete).
    let protection = match obj.fill.is_some() {
        true => None,
        false => match super::protected::protection_of(&sh, obj.rec.toi).await {
            Ok(p) => p,
            Err(r) => return r,
        },
    };
    let at = match req.start_at_s.map(|t| locate(&obj, t)).transpose() {
        Ok(at) => at,
        Err(e) => return ApiError::new(StatusCode::BAD_REQUEST, e).into_response(),
    };
    if let Some(at) = at {
        req.start_codeword = at.codeword;
    }
    let pacer = match pacer(&sh.control, &obj, req.start_codeword) {
        Ok(p) => p,
        Err(e) => return ApiError::new(StatusCode::BAD_REQUEST, e).into_response(),
    };
    let ask = Ask {
        dest: req.dest,
        start_codeword: req.start_codeword,
        no_start_burst: req.no_start_burst,
    };
    match admit_and_register(&sh.control, &ask, &obj, &fdt, pacer) {
        Ok(s) => {
            sh.control
                .counters
                .sessions_started
                .fetch_add(1, Ordering::Relaxed);
            sh.metrics.titles.started(&obj.rec.name);
            tracing::info!(id = %s.id, object = %obj.rec.name, dest = %s.dest, "session created");
            tokio::spawn(super::owner::send_tokens(sh.clone(), s.clone()));
            let start_byte = at.map_or_else(
                || obj.layout.codeword_offset(s.start_codeword),
                |a| a.offset_bytes,
            );
            let output = output_from(protection.as_ref(), start_byte);
            created(&sh, &s, fdt, at, output)
        }
        Err(e) => session_error(&sh, e).into_response(),
    }
}
