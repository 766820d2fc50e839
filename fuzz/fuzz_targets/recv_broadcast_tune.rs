//! Fuzz what a broadcast client does with a server's description (`GET /v1/broadcasts`, or
//! the `200` answer of a session request): recompute the plan, make this arrival's schedule.
//! A hostile or broken description must give an error, never a panic, and an accepted
//! schedule must only name channels the description has, with sane times.
//!
//! The input is either a whole description (JSON) or, since random bytes seldom are JSON,
//! the fields that steer the planner (scheme, its parameters, title geometry, wait, elapsed
//! time, channels) read from the bytes into a well-formed description.
#![no_main]

use isnode_proto::broadcast::BroadcastInfo;
use isnode_recv::broadcast::tune::{plan_of, tune};
use libfuzzer_sys::fuzz_target;
use serde_json::json;

/// A scheme's name by index (one past the known names: an unknown one).
fn scheme_name(i: u64) -> &'static str {
    let names = isnode_broadcast::Scheme::NAMES;
    names
        .get((i % (names.len() as u64 + 1)) as usize)
        .copied()
        .unwrap_or("nonsense")
}

/// A description whose planner inputs come from `d`.
fn from_bytes(d: &[u8]) -> Option<BroadcastInfo> {
    let b = |i: usize| u64::from(*d.get(i).unwrap_or(&0));
    let word = |i: usize| b(i) << 8 | b(i + 1);
    let channels: Vec<_> = (0..b(0) % 48)
        .map(|c| {
            json!({"index": c, "rate_bps": 1.0, "send_rate_bps": 1, "mean_send_rate_bps": 1,
                   "source": format!("239.255.0.1:{}", 30000 + c),
                   "repair": format!("239.255.0.2:{}", 30000 + c)})
        })
        .collect();
    let v = json!({
        "id": "f", "scheme": scheme_name(b(1)),
        "max_wait_s": word(2) as f64 / 100.0,
        "width": (b(4) % 3 == 0).then_some(b(5)), "m": (b(6) % 3 == 0).then_some(b(7)),
        "object": {"name": "t", "size_bytes": (word(8) % 512) * 223 * 1408, "bitrate_bps": word(10) * 1000,
                   "duration_s": 1.0, "content_type": "video/mp2t", "symbol_size": 1408,
                   "source_symbols": 223, "repair_symbols": 32, "codewords": word(8) % 512,
                   "tsi": 1, "toi": 1},
        "plan": {"codewords": word(8) % 512, "codeword_payload_bytes": 223 * 1408,
                 "bitrate_bps": word(10) * 1000, "slot_codewords": b(12),
                 "server_rate_bps": word(13) as f64 * 1000.0, "worst_wait_s": 1.0,
                 "max_channels": 1, "peak_buffer_bytes": 1},
        "channels": channels, "send_rate_bps": 1, "elapsed_s": word(15) as f64 / 10.0,
        "ttl": 1, "fdt_xml": "", "packets_sent": 0, "bytes_sent": 0,
        "fec": {"encoding_id": 5, "symbol_size": 1408, "max_source_block_length": 223,
                "max_encoding_symbols": 255}
    });
    serde_json::from_value(v).ok()
}

/// Makes the description's plan figures those of the plan its inputs give (as a server
/// would), so that the client's own plan agrees and its schedule is exercised.
fn consistent(mut info: BroadcastInfo) -> BroadcastInfo {
    use isnode_broadcast::{plan_with, Figures, PlanRequest, Scheme, SchemeParams, Title};
    let params = SchemeParams::from_options(info.width, info.m);
    let (Ok(scheme), Ok(title)) = (
        Scheme::parse(&info.scheme, params),
        Title::new(
            info.plan.codewords,
            info.plan.codeword_payload_bytes,
            info.plan.bitrate_bps,
        ),
    ) else {
        return info;
    };
    let req = PlanRequest {
        title,
        max_wait_s: info.max_wait_s,
        scheme,
        client_cap_bps: None,
    };
    if let Ok(p) = plan_with(&req, Figures::TimetableOnly) {
        info.plan.server_rate_bps = p.server_rate_bps;
        info.plan.slot_codewords = p.slot_codewords;
        let template = info.channels.first().cloned();
        if let Some(t) = template {
            info.channels = (0..p.channels.len().min(4096))
                .map(|c| {
                    let mut ch = t.clone();
                    ch.index = c;
                    ch
                })
                .collect();
        }
    }
    info
}

fuzz_target!(|data: &[u8]| {
    let info = match serde_json::from_slice::<BroadcastInfo>(data) {
        Ok(info) => info,
        Err(_) => match from_bytes(data) {
            Some(info) if info.plan.codewords <= 512 => consistent(info),
            _ => return,
        },
    };
    // Keep each run short: long titles are planned in the tests, not here.
    if info.plan.codewords > 4096 {
        return;
    }
    let Ok(plan) = plan_of(&info) else { return };
    let Ok(tp) = tune(&plan, &info, info.elapsed_s, 0.25) else {
        return;
    };
    for l in &tp.listens {
        assert!(l.channel < info.channels.len());
        assert!(l.join_s >= 0.0 && l.join_s <= l.leave_s, "{l:?}");
    }
    assert!(tp.playback_start_s.is_finite() && tp.playback_start_s >= -1e-9);
});
