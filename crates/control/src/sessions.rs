//! Session policy, with no HTTP in it: a new session's pacer, its admission over a snapshot
//! of the streaming sessions (the core's pure `admit`, with the limits of `admit.rs`), its
//! registration with a re-check and hand-over to the data plane, and its start at its
//! token's echo. The API's handlers (`api/create.rs`, `api/owner.rs`) parse, call these,
//! and render [`SessionError`] as HTTP.
//!
//! A session that must wait for its token's echo takes no bitrate budget, pool nor
//! start-up burst headroom until then: at creation it is checked against the limits of such
//! sessions (`admit_unvalidated`) and against what the streaming sessions leave (so that a
//! refusal comes early), and admitted for real, with its burst, at the echo ([`start`]).

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use isnode_plane::stream::Control as StreamControl;
use isnode_plane::NewSession;
use isnode_pool::objects::{ObjectInfo, SessionFdt};
use isnode_serve_config::ValidateDestination;
use isnode_serve_core::admission::{
    admit, admit_unvalidated, start_burst_factor, Demand, Refusal, UnvalidatedLimits,
};
use isnode_serve_core::pacer::{Pacer, PacerConfig, PacerError, StartBurst};

use crate::admit::{demand, limits};
use crate::handles::Control;
use crate::registry::{Expiry, NewStreamShared, RegisterError, SessionState, Snapshot};
use isnode_plane::stream::StreamShared;

/// The FDT is repeated before every this many codewords.
const FDT_EVERY: u32 = 8;
/// Admissions retried when other sessions were registered meanwhile.
const REGISTER_ATTEMPTS: usize = 16;

/// What a new session asks for.
pub struct Ask {
    /// Where its packets go (always the asking client's own address).
    pub dest: SocketAddr,
    /// The codeword it starts from.
    pub start_codeword: u32,
    /// The client asked for no start-up burst.
    pub no_start_burst: bool,
}

/// Why a session was not created or started.
#[derive(Debug)]
pub enum SessionError {
    /// Admission refused it: the limit, its value and why.
    Refused(Refusal),
    /// The data plane's queue is full: try again.
    Busy,
    /// Its object is being deleted.
    Deleted,
}

/// The pacer of a session of `obj` from `start_codeword`.
pub fn pacer(sh: &Control, obj: &ObjectInfo, start_codeword: u32) -> Result<Pacer, PacerError> {
    let cfg = PacerConfig {
        layout: obj.layout.clone(),
        bitrate_bps: obj.rec.bitrate_bps,
        start_codeword,
        max_burst: obj.max_burst(),
        fdt_every: FDT_EVERY,
    };
    Pacer::new(cfg, sh.now_ns())
}

/// Whether `s` streams (or waits for nothing): what admission counts.
fn is_validated(s: &StreamShared) -> bool {
    s.validated.load(Ordering::Acquire)
}

/// The sessions and broadcast channels admission counts at `now`: those validated, and
/// the extra rate of their bursts in progress.
fn counted(sh: &Control, snap: &Snapshot, now: u64) -> (Vec<Arc<StreamShared>>, u64) {
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
fn wanted_factor(sh: &Control, no_start_burst: bool) -> u32 {
    if no_start_burst || sh.config().start_burst_ms == 0 {
        1
    } else {
        sh.config().start_burst_factor
    }
}

/// Admits session `s` at its token's echo over the streaming sessions; its start-up burst
/// factor (1: none).
fn admit_at_echo(sh: &Control, s: &StreamShared) -> Result<u32, Refusal> {
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
fn admit_over(sh: &Control, snap: &Snapshot, req: &Ask, obj: &ObjectInfo) -> Result<u32, Refusal> {
    let now = sh.now_ns();
    // Broadcast channels draw on the same budget and pool; sessions awaiting their echo
    // do not (they have limits of their own).
    let (streaming, bursting) = counted(sh, snap, now);
    let active: Vec<Demand> = streaming.iter().map(|s| demand(s)).collect();
    if sh.config().validate_destination == ValidateDestination::Token {
        let waiting: Vec<IpAddr> = snap
            .sessions
            .iter()
            .filter(|s| !is_validated(s) && s.state() == SessionState::Streaming)
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
    sh: &Control,
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
pub fn admit_and_register(
    sh: &Control,
    req: &Ask,
    obj: &Arc<ObjectInfo>,
    fdt: &SessionFdt,
    pacer: Pacer,
) -> Result<Arc<StreamShared>, SessionError> {
    for _ in 0..REGISTER_ATTEMPTS {
        let snap = sh.sessions.snapshot();
        let factor = admit_over(sh, &snap, req, obj).map_err(SessionError::Refused)?;
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
                sh.reap.notify_one();
                if burst.is_some_and(|(_, until)| until > 0) {
                    sh.counters.start_bursts.fetch_add(1, Ordering::Relaxed);
                }
                return Ok(s);
            }
            Err(RegisterError::Stale) => continue,
            Err(RegisterError::HandOver(())) => break,
            Err(RegisterError::Closed) => return Err(SessionError::Deleted),
        }
    }
    Err(SessionError::Busy)
}

/// Admits `s` at its token's echo (its bitrate, pool and burst counted from now) and
/// starts its stream; the refusal naming the limit otherwise (the session still waits:
/// the client may echo again until the validation timeout).
pub fn start(sh: &Control, s: &StreamShared) -> Result<(), SessionError> {
    let factor = admit_at_echo(sh, s).map_err(SessionError::Refused)?;
    let burst = StartBurst {
        media_ms: sh.config().start_burst_ms,
        factor,
    };
    if !s.push_control(StreamControl::Start(burst)) {
        return Err(SessionError::Busy);
    }
    s.validated.store(true, Ordering::Release);
    if factor >= 2 {
        // An upper bound of the burst's end (the rest of the title may be shorter).
        let media_ns = sh.config().start_burst_ms.saturating_mul(1_000_000);
        let until = sh.now_ns().saturating_add(media_ns / u64::from(factor));
        s.start_burst(s.send_rate_bps.saturating_mul(u64::from(factor)), until);
        sh.counters.start_bursts.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}
