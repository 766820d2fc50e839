//! The broadcast service's pure steps: the plan over an object, the groups of its channels,
//! their wire rates, and the description of a running broadcast (`docs/protocol.md`,
//! "Broadcasts"). [`super::start`] runs them against the server's state.

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::atomic::Ordering;

use isnode_broadcast::{Plan, PlanRequest, Scheme, Title};
use isnode_proto::broadcast::{BroadcastChannel, BroadcastInfo, PlanSummary};
use isnode_proto::FecInfo;

use super::groups::{allocate, assign, ChannelGroups, GroupRange};
use super::request::{Family, Request};
use super::{Broadcast, BroadcastError};
use isnode_plane::stream::StreamShared;
use isnode_pool::objects::ObjectInfo;
use isnode_serve_core::pacer::send_rate_bps;

/// The plan of `scheme` over the object. A codeword of the plan holds what the object's
/// first (largest) codeword holds: RFC 5052 partitioning may give every codeword fewer than
/// k source symbols, and a plan of k-symbol codewords would let playback outrun delivery.
pub fn make_plan(
    obj: &ObjectInfo,
    scheme: Scheme,
    max_wait_s: f64,
) -> Result<Plan, BroadcastError> {
    let bad = |e: String| BroadcastError::BadRequest(e);
    let p = obj.layout.params();
    let title = Title::new(
        u64::from(obj.layout.codewords()),
        u64::from(obj.layout.source_symbols(0)) * u64::from(p.symbol_len),
        obj.rec.bitrate_bps,
    )
    .map_err(|e| bad(e.to_string()))?;
    isnode_broadcast::plan(&PlanRequest {
        title,
        max_wait_s,
        scheme,
        client_cap_bps: None,
    })
    .map_err(|e| bad(e.to_string()))
}

/// The groups of `channels` channels: the request's, or free ones (not in `in_use`) of the
/// first of `ranges` of the request's family, at most `max_groups` in all.
pub fn channel_groups(
    req: &Request,
    ranges: &[GroupRange],
    max_groups: u32,
    in_use: &HashSet<IpAddr>,
    channels: usize,
) -> Result<Vec<ChannelGroups>, BroadcastError> {
    let (source, repair) = match &req.groups {
        Some((s, r)) => {
            if let Some(g) = s.iter().chain(r).find(|g| in_use.contains(g)) {
                return Err(BroadcastError::Conflict(format!(
                    "group {g} is used by another broadcast"
                )));
            }
            (s.clone(), r.clone())
        }
        None => {
            let per_kind = channels.min(max_groups as usize / 2).max(1);
            let range = ranges
                .iter()
                .find(|r| r.is_ipv4() == (req.family == Family::V4))
                .ok_or_else(|| {
                    BroadcastError::BadRequest(
                        "no --broadcast-groups range of that IP version".into(),
                    )
                })?;
            let got = allocate(range, in_use, per_kind * 2).ok_or_else(|| {
                BroadcastError::Unavailable(format!(
                    "no {} free groups left in {range}",
                    per_kind * 2
                ))
            })?;
            let (s, r) = got.split_at(per_kind);
            (s.to_vec(), r.to_vec())
        }
    };
    assign(channels, &source, &repair, req.port).ok_or_else(|| {
        BroadcastError::BadRequest(format!("ports {}+{channels} run past 65535", req.port))
    })
}

/// Each channel's wire rate (UDP payload with headers and every stored repair symbol).
pub fn channel_rates(obj: &ObjectInfo, plan: &Plan) -> Vec<u64> {
    plan.channels
        .iter()
        .map(|c| send_rate_bps(&obj.layout, c.rate_bps.ceil() as u64))
        .collect()
}

/// The description of a running broadcast at `now_ns` (server clock), sent with TTL `ttl`.
pub fn describe(b: &Broadcast, now_ns: u64, ttl: u8) -> BroadcastInfo {
    let rec = &b.object.rec;
    let plan = &b.plan;
    let channels = plan
        .channels
        .iter()
        .zip(&b.groups)
        .zip(&b.channels)
        .map(|((c, g), s)| BroadcastChannel {
            index: c.index,
            rate_bps: c.rate_bps,
            send_rate_bps: s.send_rate_bps,
            mean_send_rate_bps: send_rate_bps(&b.object.layout, c.mean_rate_bps.ceil() as u64),
            source: g.source.to_string(),
            repair: g.repair.to_string(),
        })
        .collect();
    let sum = |f: fn(&StreamShared) -> u64| b.channels.iter().map(|s| f(s)).sum();
    BroadcastInfo {
        id: b.id.clone(),
        object: b.object.json(),
        scheme: b.scheme.clone(),
        max_wait_s: b.max_wait_s,
        width: b.width,
        m: b.m,
        plan: summary(plan),
        channels,
        send_rate_bps: b.send_rate_bps,
        elapsed_s: b.elapsed_ns(now_ns) as f64 / 1e9,
        remaining_s: b.end_ns.map(|end| end.saturating_sub(now_ns) as f64 / 1e9),
        ttl,
        fdt_xml: b.fdt_xml.clone(),
        fec: FecInfo {
            encoding_id: isnode_wire::FEC_ENCODING_ID_RS28,
            symbol_size: rec.symbol_len,
            max_source_block_length: rec.source_symbols,
            max_encoding_symbols: rec.source_symbols + rec.repair_symbols,
        },
        packets_sent: sum(|s| s.packets_sent.load(Ordering::Relaxed)),
        bytes_sent: sum(|s| s.bytes_sent.load(Ordering::Relaxed)),
        automatic: b.automatic,
        viewers_redirected: b.viewers.load(Ordering::Relaxed),
        rung: b.rung.clone(),
    }
}

fn summary(plan: &Plan) -> PlanSummary {
    PlanSummary {
        codewords: plan.title.codewords,
        codeword_payload_bytes: plan.title.codeword_payload_bytes,
        bitrate_bps: plan.title.bitrate_bps,
        slot_codewords: plan.slot_codewords,
        server_rate_bps: plan.server_rate_bps,
        worst_wait_s: plan.client.worst_wait_s,
        max_channels: plan.client.max_channels,
        peak_buffer_bytes: plan.client.peak_buffer_bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broadcast::request::End;

    fn request(groups: Option<(Vec<IpAddr>, Vec<IpAddr>)>, family: Family) -> Request {
        Request {
            object: "a.ts".into(),
            scheme: Scheme::CautiousHarmonic,
            width: None,
            m: None,
            max_wait_s: 2.0,
            groups,
            family,
            port: 6000,
            end: End::Default,
            rung: None,
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn groups_are_allocated_free_and_of_the_family() {
        let ranges: Vec<GroupRange> = vec!["239.9.0.0/24".parse().unwrap()];
        let req = request(None, Family::V4);
        let none = HashSet::new();
        let g = channel_groups(&req, &ranges, 8, &none, 6).unwrap();
        assert_eq!(g.len(), 6);
        assert_eq!(g[0].source.port(), 6000);
        assert_eq!(g[5].source.port(), 6005);
        let used: HashSet<IpAddr> = g
            .iter()
            .flat_map(|c| [c.source.ip(), c.repair.ip()])
            .collect();
        assert_eq!(
            used.len(),
            8,
            "4 source and 4 repair groups shared by 6 channels"
        );
        let again = channel_groups(&req, &ranges, 8, &used, 2).unwrap();
        assert!(again.iter().all(|c| !used.contains(&c.source.ip())));
        let v6 = request(None, Family::V6);
        assert!(matches!(
            channel_groups(&v6, &ranges, 8, &none, 1),
            Err(BroadcastError::BadRequest(_))
        ));
    }

    #[test]
    fn named_groups_in_use_conflict() {
        let ranges: Vec<GroupRange> = vec!["239.9.0.0/24".parse().unwrap()];
        let named = Some((vec![ip("239.9.0.1")], vec![ip("239.9.0.2")]));
        let req = request(named, Family::V4);
        let g = channel_groups(&req, &ranges, 8, &HashSet::new(), 3).unwrap();
        assert!(g.iter().all(|c| c.source.ip() == ip("239.9.0.1")));
        let busy = HashSet::from([ip("239.9.0.2")]);
        assert!(matches!(
            channel_groups(&req, &ranges, 8, &busy, 3),
            Err(BroadcastError::Conflict(_))
        ));
        let full: HashSet<IpAddr> = (0..=255u8).map(|i| IpAddr::from([239, 9, 0, i])).collect();
        let free = request(None, Family::V4);
        assert!(matches!(
            channel_groups(&free, &ranges, 8, &full, 1),
            Err(BroadcastError::Unavailable(_))
        ));
    }
}
