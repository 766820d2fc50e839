//! The HTTP `Range` request header (RFC 9110 §14.2) for the `bytes` unit, and the
//! validators isnode answers conditional requests with (sans-IO; the server's content
//! route and `isnode play --http` both use it; docs/protocol.md, "Content over HTTP").
//!
//! ```text
//! Range        = range-unit "=" range-set
//! range-set    = 1#range-spec            ; comma-separated, empty elements allowed
//! range-spec   = int-range / suffix-range
//! int-range    = first-pos "-" [ last-pos ]
//! suffix-range = "-" suffix-length
//! ```
//!
//! Decisions ([`parse_range`]):
//! - No header, or a unit other than `bytes`: the whole representation ([`RangeRequest::Full`],
//!   as RFC 9110 says for a unit the server does not know).
//! - A `bytes` header that does not follow the grammar (or an int-range whose last-pos is
//!   before its first-pos): [`RangeRequest::Malformed`]; isnode answers `400` (clearer than
//!   silently sending the whole body to a client that asked for part of it).
//! - More than [`MAX_RANGES`] range-specs: [`RangeRequest::TooMany`] (`400`).
//! - None of the range-specs satisfiable (first-pos at or past the end, a zero suffix, an
//!   empty representation): [`RangeRequest::Unsatisfiable`] (`416`).
//! - Otherwise the satisfiable ones, in the order asked, each clipped to the length
//!   ([`RangeRequest::Partial`]); unsatisfiable ones among them are dropped. If any two of
//!   them overlap, they are all coalesced (RFC 9110 §14.2 allows it): sorted and merged, so
//!   that no byte is sent twice and a body never holds more than the representation (before,
//!   `bytes=0-,0-,...` asked for the object 16 times under one reader).

use std::ops::Range;

/// Most range-specs in one `Range` header.
pub const MAX_RANGES: usize = 16;
/// Longest `Range` header value considered, bytes (16 ranges of two 20-digit numbers fit).
pub const MAX_RANGE_HEADER_BYTES: usize = 1024;

/// What a `Range` header asks of a representation of a known length.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RangeRequest {
    /// The whole representation (no header, or a unit other than bytes): `200`.
    Full,
    /// These byte ranges (non-empty, each within the length, in the order asked, none
    /// overlapping another): `206`.
    Partial(Vec<Range<u64>>),
    /// No range-spec is satisfiable: `416` with `Content-Range: bytes */LEN`.
    Unsatisfiable,
    /// The header does not follow the grammar: `400`.
    Malformed,
    /// More than [`MAX_RANGES`] range-specs: `400`.
    TooMany,
}

/// One range-spec before it meets the length.
enum Spec {
    /// first-pos and last-pos (inclusive; None: to the end).
    From(u64, Option<u64>),
    /// The last N bytes.
    Suffix(u64),
}

/// Parses a `Range` header value (`None`: no header) against a representation of `len`
/// bytes. Never panics, whatever the bytes.
pub fn parse_range(header: Option<&[u8]>, len: u64) -> RangeRequest {
    let Some(raw) = header else {
        return RangeRequest::Full;
    };
    if raw.len() > MAX_RANGE_HEADER_BYTES {
        return RangeRequest::TooMany;
    }
    let Ok(text) = std::str::from_utf8(raw) else {
        return RangeRequest::Malformed;
    };
    let text = text.trim_matches([' ', '\t']);
    let Some((unit, set)) = text.split_once('=') else {
        return RangeRequest::Malformed;
    };
    if !unit.eq_ignore_ascii_case("bytes") {
        return if is_token(unit) {
            RangeRequest::Full
        } else {
            RangeRequest::Malformed
        };
    }
    let mut specs = Vec::new();
    for element in set.split(',') {
        let element = element.trim_matches([' ', '\t']);
        if element.is_empty() {
            continue;
        }
        if specs.len() == MAX_RANGES {
            return RangeRequest::TooMany;
        }
        match parse_spec(element) {
            Some(s) => specs.push(s),
            None => return RangeRequest::Malformed,
        }
    }
    if specs.is_empty() {
        return RangeRequest::Malformed;
    }
    let ranges: Vec<Range<u64>> = specs.iter().filter_map(|s| resolve(s, len)).collect();
    if ranges.is_empty() {
        RangeRequest::Unsatisfiable
    } else if overlapping(&ranges) {
        RangeRequest::Partial(coalesce(ranges))
    } else {
        RangeRequest::Partial(ranges)
    }
}

/// Whether two of the (non-empty) ranges share a byte.
fn overlapping(ranges: &[Range<u64>]) -> bool {
    let mut sorted: Vec<&Range<u64>> = ranges.iter().collect();
    sorted.sort_unstable_by_key(|r| r.start);
    sorted.windows(2).any(|w| match w {
        [a, b] => b.start < a.end,
        _ => false,
    })
}

/// The ranges sorted and merged where they overlap or touch.
fn coalesce(mut ranges: Vec<Range<u64>>) -> Vec<Range<u64>> {
    ranges.sort_unstable_by_key(|r| r.start);
    let mut out: Vec<Range<u64>> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match out.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}

fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Decimal digits, saturating at `u64::MAX` (a position past any length is as good).
fn digits(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(s.bytes().fold(0u64, |acc, b| {
        acc.saturating_mul(10).saturating_add(u64::from(b - b'0'))
    }))
}

fn parse_spec(s: &str) -> Option<Spec> {
    let (first, last) = s.split_once('-')?;
    if first.is_empty() {
        return digits(last).map(Spec::Suffix);
    }
    let first = digits(first)?;
    if last.is_empty() {
        return Some(Spec::From(first, None));
    }
    let last = digits(last)?;
    (last >= first).then_some(Spec::From(first, Some(last)))
}

/// The bytes a spec selects of `len`, if any (RFC 9110 §14.1.1, satisfiable specs).
fn resolve(spec: &Spec, len: u64) -> Option<Range<u64>> {
    match *spec {
        Spec::From(first, last) => {
            (first < len).then(|| first..last.map_or(len, |l| l.saturating_add(1).min(len)))
        }
        Spec::Suffix(n) => (n > 0 && len > 0).then(|| len - n.min(len)..len),
    }
}

/// Whether an `If-None-Match` value matches the strong entity tag `etag` (weak comparison,
/// RFC 9110 §13.1.2: `W/` prefixes are ignored; `*` matches any current representation).
pub fn if_none_match(header: &[u8], etag: &str) -> bool {
    let Ok(text) = std::str::from_utf8(header) else {
        return false;
    };
    let text = text.trim();
    if text == "*" {
        return true;
    }
    text.split(',').any(|t| {
        let t = t.trim();
        t.strip_prefix("W/").unwrap_or(t) == etag
    })
}

/// Whether an `If-Range` value lets the range apply: only the exact strong entity tag does
/// (a date, a weak tag or any other tag means "send the whole representation").
pub fn if_range_matches(header: &[u8], etag: &str) -> bool {
    header.trim_ascii() == etag.as_bytes()
}

/// The strong entity tag of an object: its TOI and the CRC32C of its content, in hex
/// (`"t7-1a2b3c4d"`). A replaced object has another TOI, so another tag.
pub fn object_etag(toi: u32, content_crc32c: u32) -> String {
    format!("\"t{toi:x}-{content_crc32c:08x}\"")
}

/// An IMF-fixdate (RFC 9110 §5.6.7) of a Unix time: `Sun, 06 Nov 1994 08:49:37 GMT`.
/// Times before 1970 are given as the epoch.
pub fn http_date(unix_s: i64) -> String {
    let t = unix_s.max(0);
    let (days, secs) = (t / 86_400, t % 86_400);
    let (y, m, d) = civil_from_days(days);
    const WEEKDAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{}, {d:02} {} {y:04} {:02}:{:02}:{:02} GMT",
        WEEKDAYS[(days % 7) as usize],
        MONTHS[(m - 1) as usize],
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// Year, month (1..=12), day of a count of days since 1970-01-01 (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)] // a list of one byte range is what is meant
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p(h: &str, len: u64) -> RangeRequest {
        parse_range(Some(h.as_bytes()), len)
    }

    #[test]
    fn single_and_multiple_ranges() {
        assert_eq!(p("bytes=0-99", 1000), RangeRequest::Partial(vec![0..100]));
        assert_eq!(
            p("bytes=900-", 1000),
            RangeRequest::Partial(vec![900..1000])
        );
        assert_eq!(
            p("bytes=-100", 1000),
            RangeRequest::Partial(vec![900..1000])
        );
        assert_eq!(p("bytes=-5000", 1000), RangeRequest::Partial(vec![0..1000]));
        assert_eq!(
            p("bytes=990-5000", 1000),
            RangeRequest::Partial(vec![990..1000])
        );
        assert_eq!(
            p("Bytes = 0-0 , ,-1", 1000),
            RangeRequest::Malformed,
            "no white space around ="
        );
        assert_eq!(
            p("bytes=0-0, ,-1,500-", 1000),
            RangeRequest::Partial(vec![0..1, 500..1000]),
            "-1 lies within 500-: coalesced"
        );
        assert_eq!(
            p("bytes=500-599,0-9", 1000),
            RangeRequest::Partial(vec![500..600, 0..10]),
            "disjoint ranges keep the order asked"
        );
        assert_eq!(
            p("bytes=2000-3000,10-19", 1000),
            RangeRequest::Partial(vec![10..20]),
            "an unsatisfiable spec among satisfiable ones is dropped"
        );
    }

    #[test]
    fn bad_and_unsatisfiable() {
        assert_eq!(parse_range(None, 10), RangeRequest::Full);
        assert_eq!(p("items=0-5", 10), RangeRequest::Full);
        for bad in [
            "bytes",
            "bytes=",
            "bytes=abc",
            "bytes=5-2",
            "bytes=--1",
            "bytes=1-2-3",
            "=0-1",
            "bytes=0x1-2",
            "bytes=+1-2",
            "bytes=,",
        ] {
            assert_eq!(p(bad, 10), RangeRequest::Malformed, "{bad}");
        }
        assert_eq!(p("bytes=10-", 10), RangeRequest::Unsatisfiable);
        assert_eq!(p("bytes=-0", 10), RangeRequest::Unsatisfiable);
        assert_eq!(p("bytes=0-", 0), RangeRequest::Unsatisfiable);
        assert_eq!(
            p("bytes=99999999999999999999999-", 10),
            RangeRequest::Unsatisfiable
        );
        let many = (0..=MAX_RANGES)
            .map(|i| format!("{i}-{i}"))
            .collect::<Vec<_>>();
        assert_eq!(
            p(&format!("bytes={}", many.join(",")), 100),
            RangeRequest::TooMany
        );
        let ok = &many[..MAX_RANGES];
        assert!(matches!(
            p(&format!("bytes={}", ok.join(",")), 100),
            RangeRequest::Partial(v) if v.len() == MAX_RANGES
        ));
    }

    /// `bytes=0-,0-,...` (16 times) asked for the whole object 16 times under one reader
    /// (issue 21): overlapping ranges are merged, so no body exceeds the object.
    #[test]
    fn overlapping_ranges_never_multiply_the_object() {
        let spec = vec!["0-"; MAX_RANGES].join(",");
        assert_eq!(
            p(&format!("bytes={spec}"), 1000),
            RangeRequest::Partial(vec![0..1000])
        );
        assert_eq!(
            p("bytes=10-19,15-29,-5,30-30", 1000),
            RangeRequest::Partial(vec![10..31, 995..1000]),
            "overlapping and touching ranges merged, sorted"
        );
    }

    #[test]
    fn validators() {
        let tag = object_etag(7, 0x1a2b_3c4d);
        assert_eq!(tag, "\"t7-1a2b3c4d\"");
        assert!(if_none_match(b"\"x\", W/\"t7-1a2b3c4d\"", &tag));
        assert!(if_none_match(b"*", &tag));
        assert!(!if_none_match(b"\"t7-1a2b3c4e\"", &tag));
        assert!(if_range_matches(b" \"t7-1a2b3c4d\" ", &tag));
        assert!(!if_range_matches(b"W/\"t7-1a2b3c4d\"", &tag));
        assert!(!if_range_matches(b"Sun, 06 Nov 1994 08:49:37 GMT", &tag));
        assert_eq!(http_date(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(http_date(1_709_210_096), "Thu, 29 Feb 2024 12:34:56 GMT");
    }

    proptest! {
        #[test]
        fn any_header_never_panics(raw in proptest::collection::vec(any::<u8>(), 0..200), len in any::<u64>()) {
            if let RangeRequest::Partial(r) = parse_range(Some(&raw), len) {
                let total: u64 = r.iter().map(|r| r.end - r.start).sum();
                prop_assert!(total <= len);
            }
            let _ = if_none_match(&raw, "\"a\"");
        }

        #[test]
        fn grammar_like_headers_never_panic(
            h in "[bB]ytes=[0-9,\\- ]{0,40}",
            len in 0u64..10_000,
        ) {
            if let RangeRequest::Partial(v) = p(&h, len) {
                for r in v {
                    prop_assert!(r.start < r.end && r.end <= len);
                }
            }
        }

        #[test]
        fn satisfiable_ranges_select_the_right_bytes(
            len in 1u64..5000,
            specs in proptest::collection::vec((0u64..6000, 0u64..6000, 0u8..3), 1..MAX_RANGES),
        ) {
            let body: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            let mut text = Vec::new();
            let mut expect: Vec<Vec<u8>> = Vec::new();
            for (a, b, kind) in specs {
                match kind {
                    0 => {
                        let (f, l) = (a.min(b), a.max(b));
                        text.push(format!("{f}-{l}"));
                        if f < len {
                            expect.push(body[f as usize..=(l.min(len - 1)) as usize].to_vec());
                        }
                    }
                    1 => {
                        text.push(format!("{a}-"));
                        if a < len {
                            expect.push(body[a as usize..].to_vec());
                        }
                    }
                    _ => {
                        text.push(format!("-{a}"));
                        if a > 0 {
                            expect.push(body[(len - a.min(len)) as usize..].to_vec());
                        }
                    }
                }
            }
            let got = p(&format!("bytes={}", text.join(", ")), len);
            match got {
                RangeRequest::Partial(v) => {
                    let bytes: Vec<Vec<u8>> =
                        v.iter().map(|r| body[r.start as usize..r.end as usize].to_vec()).collect();
                    let total: usize = expect.iter().map(Vec::len).sum();
                    if total <= len as usize && !overlapping(&v) && bytes.len() == expect.len() {
                        prop_assert_eq!(bytes, expect);
                    } else {
                        // Overlapping specs: coalesced, every byte asked for once, in order.
                        prop_assert!(!overlapping(&v));
                        prop_assert!(v.windows(2).all(|w| w[0].end < w[1].start));
                        let sent: usize = bytes.iter().map(Vec::len).sum();
                        prop_assert!(sent as u64 <= len);
                    }
                }
                RangeRequest::Unsatisfiable => prop_assert!(expect.is_empty()),
                other => prop_assert!(false, "{:?}", other),
            }
        }
    }
}
