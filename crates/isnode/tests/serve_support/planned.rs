//! What a broadcast's plan says the server sends: the exact UDP payload bytes of its
//! channels' stored packets between two times of its timetable (each codeword's n packets
//! spread evenly over its airtime, as `isnode serve` paces them), for egress checks.

use isnode_broadcast::Ratio;
use isnode_proto::broadcast::BroadcastInfo;
use serde_json::Value;

/// Bytes of one stored packet's header (docs/wire.md).
const HEADER_BYTES: u64 = isnode_wire::DATA_HEADER_LEN as u64;

/// RFC 5052 §9.1 block partitioning of an object of `len` bytes into codewords of at most
/// `k` symbols of `e` bytes: (source symbols of codeword `sbn`, symbols before it).
pub(crate) fn partition(len: u64, k: u64, e: u64, sbn: u64) -> (u64, u64) {
    let t = len.div_ceil(e);
    let n = t.div_ceil(k).max(1);
    let (large, small) = (t.div_ceil(n), t / n);
    let large_blocks = t - small * n;
    if sbn < large_blocks {
        (large, sbn * large)
    } else {
        (small, large_blocks * large + (sbn - large_blocks) * small)
    }
}

/// The data-packet bytes the broadcast `info` (its JSON description) sends from `t0_s` to
/// `t1_s` seconds after its start, all channels together.
pub(crate) fn planned_bytes(info: &Value, t0_s: f64, t1_s: f64) -> f64 {
    let info: BroadcastInfo = serde_json::from_value(info.clone()).expect("a description");
    let plan = isnode_recv::broadcast::tune::plan_of(&info).expect("the plan");
    let tau_s = plan.title.codeword_airtime_s();
    let (len, e) = (info.object.size_bytes, u64::from(info.fec.symbol_size));
    let (k, m) = (
        u64::from(info.fec.max_source_block_length),
        u64::from(info.object.repair_symbols),
    );
    let mut total = 0.0;
    for c in 0..plan.channels.len() {
        let mut t = Ratio::ZERO;
        for _ in 0..1_000_000 {
            let Some(tx) = plan.next_transmission(c, t) else {
                break;
            };
            let (s, a) = (tx.start.to_f64() * tau_s, tx.airtime.to_f64() * tau_s);
            if s >= t1_s {
                break;
            }
            let packets = partition(len, k, e, tx.codeword).0 + m;
            let overlap = ((s + a).min(t1_s) - s.max(t0_s)).max(0.0) / a;
            total += (packets * (e + HEADER_BYTES)) as f64 * overlap;
            t = tx.start + tx.airtime;
        }
    }
    total
}
