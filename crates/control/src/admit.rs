//! The server's side of admission: the limits in force and the demand of each stream, read
//! from the running server for the pure decision (`isnode_serve_core::admission`).

use std::sync::atomic::Ordering;

use isnode_serve_core::admission::burst_headroom_bps;
use isnode_serve_core::admission::{
    Demand, Limits, PoolLimit, CACHE_RESERVE_SLOTS, LOOKAHEAD_CODEWORDS,
};

use crate::handles::Control;
use isnode_plane::stream::StreamShared;
use isnode_serve_config::EngineKind;

/// The configured limits.
pub fn limits(sh: &Control) -> Limits {
    Limits {
        max_sessions_per_client: sh.config().max_sessions_per_client,
        max_bitrate_bps: sh.config().bitrate_budget_bps(),
        burst_headroom_bps: burst_headroom_bps(sh.config().bitrate_budget_bps()),
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
            cache_size_bytes: sh.config().cache_size_bytes,
            disk_read_bps: Some(sh.config().disk_read_bps).filter(|bps| *bps > 0),
        }),
        max_sessions: sh.sendfile_sessions,
    }
}

/// The server's load: the share of its bitrate budget its validated streaming sessions and
/// broadcast channels hold (their send rates; the larger share of the session budget with the
/// `sendfile` engine), 1 = full (`GET /v1/health`, what the cluster's placement bounds).
pub fn load_share(sh: &Control) -> f64 {
    let snap = sh.sessions.snapshot();
    // A session awaiting its token's echo sends nothing and takes no budget (as admission
    // counts it): strangers' unvalidated sessions must not make the node look loaded.
    let validated: Vec<_> = snap
        .sessions
        .iter()
        .filter(|s| s.validated.load(Ordering::Acquire))
        .collect();
    let channels = sh.broadcasts.channels();
    let streams = validated.len() + channels.len();
    let used = validated
        .into_iter()
        .chain(channels.iter())
        .fold(0u64, |sum, s| sum.saturating_add(s.send_rate_bps));
    let budget = sh.config().bitrate_budget_bps().max(1);
    let by_rate = used as f64 / budget as f64;
    match sh.sendfile_sessions {
        Some(max) => by_rate.max(streams as f64 / max.max(1) as f64),
        None => by_rate,
    }
}

/// What a streaming session or broadcast channel asks of the server now.
pub fn demand(s: &StreamShared) -> Demand<'_> {
    Demand {
        peer_ip: s.peer_ip,
        send_rate_bps: s.send_rate_bps,
        toi: s.object.rec.toi,
        layout: &s.object.layout,
        codeword: s.next_codeword.load(Ordering::Relaxed),
    }
}
