//! A broadcast request checked against the server's settings, pure: its scheme, groups,
//! port and end (`docs/protocol.md`, "Broadcasts").

use std::collections::HashSet;
use std::net::IpAddr;

use isnode_broadcast::{Plan, Scheme, SchemeParams};
use isnode_proto::broadcast::{BroadcastRung, CreateBroadcast};

use super::groups::GroupRange;
use super::BroadcastError;

/// Groups a request names: (source, repair).
pub type NamedGroups = (Vec<IpAddr>, Vec<IpAddr>);

/// The server's settings a request is checked against.
#[derive(Clone, Copy, Debug)]
pub struct Settings<'a> {
    /// The ranges groups are taken from (`--broadcast-groups`).
    pub group_ranges: &'a [GroupRange],
    /// Most groups of one broadcast (`--broadcast-max-groups`).
    pub max_groups: u32,
    /// Port of channel 0 unless the request names one (`--broadcast-port`).
    pub port: u16,
    /// How long a request naming no end runs (`--broadcast-default-duration-s`).
    pub default_duration_s: f64,
    /// The longest a broadcast may run (`--broadcast-max-duration-s`).
    pub max_duration_s: f64,
}

/// When a requested broadcast ends, as asked.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum End {
    /// At this unix time, seconds.
    Until(u64),
    /// This long after it starts, seconds.
    Duration(f64),
    /// After this many cycles of its plan ([`cycle_s`]).
    Cycles(u64),
    /// Nothing asked: the server's default duration.
    Default,
}

/// A checked request.
#[derive(Clone, Debug)]
pub struct Request {
    /// The object's name.
    pub object: String,
    /// The broadcast scheme.
    pub scheme: Scheme,
    /// Skyscraper's width cap, if the scheme is skyscraper and the request gave one.
    pub width: Option<u64>,
    /// Quasi-/polyharmonic's m, if the scheme takes one and the request gave one.
    pub m: Option<u32>,
    /// The longest wait for the start of the title, seconds.
    pub max_wait_s: f64,
    /// Groups named by the request (source, repair), checked against the ranges.
    pub groups: Option<NamedGroups>,
    /// The family of the groups to allocate.
    pub family: Family,
    /// Port of channel 0.
    pub port: u16,
    /// When it ends.
    pub end: End,
    /// The title and rung it sends, when it is one rung of a title's broadcast.
    pub rung: Option<BroadcastRung>,
}

/// An IP family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// IPv4 groups.
    V4,
    /// IPv6 groups.
    V6,
}

fn bad(msg: impl std::fmt::Display) -> BroadcastError {
    BroadcastError::BadRequest(msg.to_string())
}

/// Parses and checks a `POST /v1/broadcasts` body.
pub fn parse(st: &Settings<'_>, body: &[u8]) -> Result<Request, BroadcastError> {
    let b: CreateBroadcast = serde_json::from_slice(body)
        .map_err(|e| bad(format!("malformed broadcast request: {e}")))?;
    if b.object.is_empty() {
        return Err(bad("object is empty"));
    }
    if !(b.max_wait_s.is_finite() && b.max_wait_s > 0.0) {
        return Err(bad(format!(
            "max_wait_s {} is not a positive number",
            b.max_wait_s
        )));
    }
    let params = SchemeParams::from_options(b.width, b.m);
    let scheme = Scheme::parse(&b.scheme, params).map_err(bad)?;
    let family = match b.ip_version {
        None | Some(4) => Family::V4,
        Some(6) => Family::V6,
        Some(v) => return Err(bad(format!("ip_version {v}: 4 or 6"))),
    };
    let groups = named_groups(st, &b)?;
    let family = match &groups {
        Some((s, _)) if s.iter().all(IpAddr::is_ipv4) => Family::V4,
        Some(_) => Family::V6,
        None => family,
    };
    let port = b.port.unwrap_or(st.port);
    if port == 0 {
        return Err(bad("port 0"));
    }
    Ok(Request {
        end: end(st, &b)?,
        object: b.object,
        width: matches!(scheme, Scheme::Skyscraper { .. })
            .then_some(b.width)
            .flatten(),
        m: matches!(
            scheme,
            Scheme::QuasiHarmonic { .. } | Scheme::Polyharmonic { .. }
        )
        .then_some(b.m)
        .flatten(),
        scheme,
        max_wait_s: b.max_wait_s,
        groups,
        family,
        port,
        rung: None,
    })
}

/// The end the request asks for: at most one of `until`, `duration_s` and `cycles`.
fn end(st: &Settings<'_>, b: &CreateBroadcast) -> Result<End, BroadcastError> {
    let end = match (b.until, b.duration_s, b.cycles) {
        (None, None, None) => End::Default,
        (Some(t), None, None) => End::Until(t),
        (None, Some(d), None) => {
            if !(d.is_finite() && d > 0.0) {
                return Err(bad(format!("duration_s {d} is not a positive number")));
            }
            End::Duration(d)
        }
        (None, None, Some(c)) => {
            if c == 0 {
                return Err(bad("cycles 0"));
            }
            End::Cycles(c)
        }
        _ => return Err(bad("give one of until, duration_s and cycles")),
    };
    if let End::Duration(d) = end {
        within_max(st, d)?;
    }
    Ok(end)
}

fn within_max(st: &Settings<'_>, duration_s: f64) -> Result<f64, BroadcastError> {
    if duration_s > st.max_duration_s {
        return Err(bad(format!(
            "a broadcast of {duration_s:.0} s: the most this server runs is {:.0} s \
             (--broadcast-max-duration-s)",
            st.max_duration_s
        )));
    }
    Ok(duration_s)
}

/// How long the broadcast of `plan` runs from `now_unix_s`, seconds: as the request's
/// `end` asks, the default without one; refused beyond the server's maximum or for an
/// `until` not in the future.
pub fn lifetime_s(
    st: &Settings<'_>,
    end: End,
    plan: &Plan,
    now_unix_s: f64,
) -> Result<f64, BroadcastError> {
    let d = match end {
        End::Default => st.default_duration_s.min(st.max_duration_s),
        End::Duration(d) => d,
        End::Until(t) => {
            let d = t as f64 - now_unix_s;
            if d <= 0.0 {
                return Err(bad(format!("until {t} is not in the future")));
            }
            d
        }
        End::Cycles(c) => c as f64 * cycle_s(plan) + phase_s(plan),
    };
    within_max(st, d)
}

/// Seconds of `t` units τ (a codeword's airtime at the title's bitrate).
fn tau_s(plan: &Plan, t: f64) -> f64 {
    let title = &plan.title;
    let tau = title.codeword_payload_bytes as f64 * 8.0 / (title.bitrate_bps.max(1)) as f64;
    t * tau
}

/// A cycle of the plan: its longest lane's period, seconds (in it every channel sends each
/// of its segments at least once).
pub fn cycle_s(plan: &Plan) -> f64 {
    let lanes = plan.channels.iter().flat_map(|c| &c.lanes);
    tau_s(plan, lanes.map(|l| l.period.to_f64()).fold(0.0, f64::max))
}

/// The latest start of a lane's first cycle, seconds.
fn phase_s(plan: &Plan) -> f64 {
    let lanes = plan.channels.iter().flat_map(|c| &c.lanes);
    tau_s(plan, lanes.map(|l| l.phase.to_f64()).fold(0.0, f64::max))
}

/// The groups the request names, if any: equally many source and repair groups, all of
/// one family, each in a configured range and named once.
fn named_groups(
    st: &Settings<'_>,
    b: &CreateBroadcast,
) -> Result<Option<NamedGroups>, BroadcastError> {
    if b.source_groups.is_empty() && b.repair_groups.is_empty() {
        return Ok(None);
    }
    if b.source_groups.len() != b.repair_groups.len() {
        return Err(bad("give as many repair_groups as source_groups"));
    }
    let max = st.max_groups as usize;
    if b.source_groups.len() * 2 > max {
        return Err(bad(format!(
            "more than {max} groups (--broadcast-max-groups)"
        )));
    }
    let parse_all = |v: &[String]| -> Result<Vec<IpAddr>, BroadcastError> {
        v.iter().map(|g| in_range(st, g)).collect()
    };
    let (s, r) = (parse_all(&b.source_groups)?, parse_all(&b.repair_groups)?);
    let all: HashSet<IpAddr> = s.iter().chain(&r).copied().collect();
    if all.len() != s.len() + r.len() {
        return Err(bad("a group is named twice"));
    }
    if !(all.iter().all(IpAddr::is_ipv4) || all.iter().all(IpAddr::is_ipv6)) {
        return Err(bad("groups of both IPv4 and IPv6"));
    }
    Ok(Some((s, r)))
}

/// Group `g`, if it lies in a configured range.
fn in_range(st: &Settings<'_>, g: &str) -> Result<IpAddr, BroadcastError> {
    let ip: IpAddr = g.parse().map_err(|e| bad(format!("group {g:?}: {e}")))?;
    if !st.group_ranges.iter().any(|r| r.contains(ip)) {
        return Err(bad(format!(
            "group {ip} is outside the server's --broadcast-groups ({})",
            ranges(st.group_ranges)
        )));
    }
    Ok(ip)
}

/// The ranges as a list for messages (`239.1.0.0/16, ff15::/64`).
pub fn ranges(r: &[GroupRange]) -> String {
    r.iter()
        .map(|g| g.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranges() -> Vec<GroupRange> {
        vec![
            "239.1.0.0/16".parse().unwrap(),
            "ff15::/64".parse().unwrap(),
        ]
    }

    fn settings(r: &[GroupRange]) -> Settings<'_> {
        Settings {
            group_ranges: r,
            max_groups: 8,
            port: 5000,
            default_duration_s: 3600.0,
            max_duration_s: 7200.0,
        }
    }

    fn parse_json(r: &[GroupRange], v: serde_json::Value) -> Result<Request, BroadcastError> {
        parse(&settings(r), v.to_string().as_bytes())
    }

    fn base() -> serde_json::Value {
        serde_json::json!({"object": "a.ts", "scheme": "cautious-harmonic", "max_wait_s": 2.0})
    }

    fn with(k: &str, v: serde_json::Value) -> serde_json::Value {
        let mut b = base();
        b[k] = v;
        b
    }

    fn is_bad(r: Result<Request, BroadcastError>, what: &str) {
        match r {
            Err(BroadcastError::BadRequest(m)) => assert!(m.contains(what), "{m}"),
            other => panic!("expected a bad request about {what}: {other:?}"),
        }
    }

    #[test]
    fn a_plain_request_takes_the_defaults() {
        let r = ranges();
        let req = parse_json(&r, base()).unwrap();
        assert_eq!(
            (req.port, req.family, req.end),
            (5000, Family::V4, End::Default)
        );
        assert_eq!((req.width, req.m, req.groups), (None, None, None));
        let req = parse_json(&r, with("ip_version", 6.into())).unwrap();
        assert_eq!(req.family, Family::V6);
    }

    #[test]
    fn bad_requests_say_what_is_wrong() {
        let r = ranges();
        is_bad(parse_json(&r, with("object", "".into())), "object is empty");
        is_bad(
            parse_json(&r, with("max_wait_s", (-1.0).into())),
            "max_wait_s",
        );
        is_bad(parse_json(&r, with("ip_version", 5.into())), "ip_version");
        is_bad(parse_json(&r, with("port", 0.into())), "port 0");
        is_bad(parse_json(&r, with("scheme", "nope".into())), "");
        let groups = |s: &[&str], rp: &[&str]| {
            let mut b = base();
            b["source_groups"] = serde_json::json!(s);
            b["repair_groups"] = serde_json::json!(rp);
            b
        };
        is_bad(parse_json(&r, groups(&["239.1.0.1"], &[])), "as many");
        is_bad(
            parse_json(&r, groups(&["239.2.0.1"], &["239.1.0.2"])),
            "outside",
        );
        is_bad(
            parse_json(&r, groups(&["239.1.0.1"], &["239.1.0.1"])),
            "twice",
        );
        is_bad(parse_json(&r, groups(&["239.1.0.1"], &["ff15::1"])), "both");
        let ok = parse_json(&r, groups(&["ff15::1"], &["ff15::2"])).unwrap();
        assert_eq!(ok.family, Family::V6);
    }

    #[test]
    fn the_end_is_one_of_until_duration_and_cycles() {
        let r = ranges();
        let req = parse_json(&r, with("duration_s", 60.0.into())).unwrap();
        assert_eq!(req.end, End::Duration(60.0));
        let req = parse_json(&r, with("cycles", 3.into())).unwrap();
        assert_eq!(req.end, End::Cycles(3));
        let req = parse_json(&r, with("until", 2_000_000_000u64.into())).unwrap();
        assert_eq!(req.end, End::Until(2_000_000_000));
        let mut both = with("cycles", 3.into());
        both["duration_s"] = 5.0.into();
        is_bad(parse_json(&r, both), "one of");
        is_bad(parse_json(&r, with("cycles", 0.into())), "cycles 0");
        is_bad(parse_json(&r, with("duration_s", 0.0.into())), "duration_s");
        is_bad(
            parse_json(&r, with("duration_s", 7201.0.into())),
            "--broadcast-max-duration-s",
        );
    }

    fn plan() -> Plan {
        let title = isnode_broadcast::Title::new(100, 20_000, 1_600_000).unwrap();
        let scheme = Scheme::parse("cautious-harmonic", SchemeParams::default()).unwrap();
        isnode_broadcast::plan(&isnode_broadcast::PlanRequest {
            title,
            max_wait_s: 1.0,
            scheme,
            client_cap_bps: None,
        })
        .unwrap()
    }

    #[test]
    fn lifetimes_within_the_maximum() {
        let r = ranges();
        let st = settings(&r);
        let p = plan();
        // 100 codewords of 20 000 bytes at 1.6 Mbit/s: a 10 s title, τ = 0.1 s.
        let cycle = cycle_s(&p);
        assert!(cycle > 0.5 && cycle <= 10.0 + 1e-9, "{cycle}");
        assert_eq!(lifetime_s(&st, End::Default, &p, 0.0).unwrap(), 3600.0);
        assert_eq!(lifetime_s(&st, End::Duration(5.0), &p, 0.0).unwrap(), 5.0);
        assert_eq!(
            lifetime_s(&st, End::Until(1100), &p, 1000.0).unwrap(),
            100.0
        );
        assert!(
            lifetime_s(&st, End::Until(1000), &p, 1000.0).is_err(),
            "past"
        );
        assert!(
            lifetime_s(&st, End::Until(9000), &p, 1000.0).is_err(),
            "too far"
        );
        let two = lifetime_s(&st, End::Cycles(2), &p, 0.0).unwrap();
        assert!(two >= 2.0 * cycle && two < 3.0 * cycle, "{two} {cycle}");
        assert!(lifetime_s(&st, End::Cycles(1_000_000), &p, 0.0).is_err());
        let short = Settings {
            default_duration_s: 9000.0,
            ..st
        };
        assert_eq!(lifetime_s(&short, End::Default, &p, 0.0).unwrap(), 7200.0);
    }
}
