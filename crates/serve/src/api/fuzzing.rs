//! Entry points for the fuzz targets (`fuzz/`, cargo-fuzz): the control API's parsers of
//! request bodies, paths and queries, called as its handlers call them, with what each
//! accepted reduced to plain values a target can check. Not a stable API.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use axum::extract::Query;
use axum::http::{header, HeaderMap, HeaderValue, Uri};

use isnode_control::broadcast::groups::GroupRange;
use isnode_control::broadcast::request::{self, End, Settings};

/// The peer every parsed session request comes from.
pub const PEER: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7)), 40_000);
/// The lowest destination port the session parser is given.
pub const MIN_PORT: u16 = 1024;
/// The longest broadcast the broadcast parser is given, seconds.
pub const MAX_DURATION_S: f64 = 7200.0;

/// A `POST /v1/sessions` body as the handler parses it (peer [`PEER`], lowest port
/// [`MIN_PORT`]): the destination and start it asks for, or why it is refused.
pub fn create_session(body: &[u8]) -> Result<(SocketAddr, u32, Option<f64>), String> {
    let r = super::create::parse(body, PEER, MIN_PORT).map_err(|e| e.into_message())?;
    Ok((r.dest, r.start_codeword, r.start_at_s))
}

/// What a `POST /v1/broadcasts` body asks for, once checked.
#[derive(Debug)]
pub struct Broadcast {
    /// The object's name.
    pub object: String,
    /// Port of channel 0.
    pub port: u16,
    /// The longest wait asked, seconds.
    pub max_wait_s: f64,
    /// The groups named: (source, repair).
    pub groups: Option<(Vec<IpAddr>, Vec<IpAddr>)>,
    /// The duration asked for, seconds, if one was.
    pub duration_s: Option<f64>,
}

/// The group ranges the broadcast parser is given: `239.1.0.0/16` and `ff15::/64`.
pub fn group_ranges() -> Vec<GroupRange> {
    ["239.1.0.0/16", "ff15::/64"]
        .iter()
        .filter_map(|r| r.parse().ok())
        .collect()
}

/// Whether `ip` lies in [`group_ranges`].
pub fn in_group_ranges(ip: IpAddr) -> bool {
    group_ranges().iter().any(|r| r.contains(ip))
}

/// A `POST /v1/broadcasts` body as the handler parses it (the ranges of
/// [`group_ranges`], at most 8 groups, port 5000, at most [`MAX_DURATION_S`]).
pub fn broadcast(body: &[u8]) -> Result<Broadcast, String> {
    let ranges = group_ranges();
    let st = Settings {
        group_ranges: &ranges,
        max_groups: 8,
        port: 5000,
        default_duration_s: 3600.0,
        max_duration_s: MAX_DURATION_S,
    };
    let r = request::parse(&st, body).map_err(|e| e.to_string())?;
    Ok(Broadcast {
        object: r.object,
        port: r.port,
        max_wait_s: r.max_wait_s,
        groups: r.groups,
        duration_s: match r.end {
            End::Duration(d) => Some(d),
            _ => None,
        },
    })
}

/// The ESIs a repair request's query (`esi=1,5,9`) asks for.
pub fn repair_query(query: &str) -> Result<Vec<u32>, String> {
    super::content::parse_esis(query)
}

/// What an upload (`PUT /v1/objects/NAME?QUERY`) asks for, once checked.
#[derive(Debug)]
pub struct Upload {
    /// The object's name.
    pub name: String,
    /// `Content-Length`, if given.
    pub len: Option<u64>,
    /// `bitrate_bps`, if given.
    pub bitrate_bps: Option<u64>,
}

/// An upload's path (`/v1/objects/NAME?QUERY`) with the raw `If-None-Match` and
/// `Content-Length` values, parsed as the handler does (the router takes the name from the
/// path; a URI axum would not route is refused here).
pub fn upload(
    path_and_query: &str,
    if_none_match: Option<&[u8]>,
    content_length: Option<&[u8]>,
) -> Result<Upload, String> {
    let uri: Uri = path_and_query.parse().map_err(|e| format!("uri: {e}"))?;
    let name = uri
        .path()
        .strip_prefix("/v1/objects/")
        .ok_or("not an object path")?
        .to_string();
    let Query(q) = Query::try_from_uri(&uri).map_err(|e| e.to_string())?;
    let mut headers = HeaderMap::new();
    for (h, v) in [
        (header::IF_NONE_MATCH, if_none_match),
        (header::CONTENT_LENGTH, content_length),
    ] {
        if let Some(v) = v.and_then(|v| HeaderValue::from_bytes(v).ok()) {
            headers.insert(h, v);
        }
    }
    let up = super::upload::parse(name, q, &headers).map_err(|e| e.into_message())?;
    Ok(Upload {
        name: up.name,
        len: up.len,
        bitrate_bps: up.bitrate_bps,
    })
}
