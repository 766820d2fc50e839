//! The keepalive datagram: what a client sends over UDP, once per
//! `keepalive_interval_ms`, to the server's `keepalive_port` instead of
//! `POST /v1/sessions/{id}/keepalive` (`docs/protocol.md`, "Keepalive datagram").
//!
//! 24 bytes, nothing else accepted:
//!
//! | offset | length | field                                           |
//! |-------:|-------:|-------------------------------------------------|
//! |      0 |      4 | magic `ISKA` (0x49 0x53 0x4B 0x41)              |
//! |      4 |      1 | version, 1 or 2                                 |
//! |      5 |      1 | zero                                            |
//! |      6 |      2 | version 1: zero; version 2: the client's measured loss, in units of 1/10 000 (0..=10 000), big-endian |
//! |      8 |     16 | session id: 16 lowercase hexadecimal ASCII digits |
//!
//! Version 2 carries a loss report ([`LossReport`]) for adaptive repair; version 1 none. A
//! server that takes loss reports says so in the session answer (`loss_reports`), and a
//! client sends version 2 only then: an older server (version 1 only) keeps working.
//!
//! A client sends it from the socket the stream arrives on, so the datagram also keeps a
//! NAT or firewall mapping of the stream's path open; the server takes it only from the
//! session's destination IP.

/// Length of a keepalive datagram in bytes.
pub const KEEPALIVE_LEN: usize = 24;
/// The first four bytes of a keepalive datagram.
pub const KEEPALIVE_MAGIC: [u8; 4] = *b"ISKA";
/// The format version without a loss report.
pub const KEEPALIVE_VERSION: u8 = 1;
/// The format version with a loss report.
pub const KEEPALIVE_VERSION_LOSS: u8 = 2;
/// The unit of a loss report: a loss rate of 1 is this many units.
pub const LOSS_UNITS: u16 = 10_000;

/// A client's measured loss rate, in units of 1/10 000 (0..=[`LOSS_UNITS`]): the share of
/// the packets it expected over its recent window that did not arrive intact.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LossReport(u16);

impl LossReport {
    /// The report of `units` / 10 000; `None` above [`LOSS_UNITS`].
    pub fn from_units(units: u16) -> Option<LossReport> {
        (units <= LOSS_UNITS).then_some(LossReport(units))
    }

    /// The report of a loss rate in [0, 1] (clamped; NaN counts as 0), rounded up.
    pub fn from_rate(rate: f64) -> LossReport {
        let r = if rate.is_nan() {
            0.0
        } else {
            rate.clamp(0.0, 1.0)
        };
        LossReport((r * f64::from(LOSS_UNITS)).ceil() as u16)
    }

    /// Units of 1/10 000.
    pub fn units(self) -> u16 {
        self.0
    }

    /// The loss rate in [0, 1].
    pub fn rate(self) -> f64 {
        f64::from(self.0) / f64::from(LOSS_UNITS)
    }
}

/// A keepalive datagram as parsed: the session it names and its loss report, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keepalive<'a> {
    /// The session id.
    pub id: &'a str,
    /// The loss report (version 2), `None` for version 1.
    pub loss: Option<LossReport>,
}
/// Length of a session id (hexadecimal digits).
pub const SESSION_ID_LEN: usize = 16;

/// The keepalive datagram of session `id`; `None` if `id` is not a session id (16
/// lowercase hexadecimal digits).
pub fn keepalive_datagram(id: &str) -> Option<[u8; KEEPALIVE_LEN]> {
    if !is_session_id(id.as_bytes()) {
        return None;
    }
    let mut d = [0u8; KEEPALIVE_LEN];
    d[..4].copy_from_slice(&KEEPALIVE_MAGIC);
    d[4] = KEEPALIVE_VERSION;
    d[8..].copy_from_slice(id.as_bytes());
    Some(d)
}

/// The version 2 keepalive datagram of session `id` with loss report `loss`; `None` if `id`
/// is not a session id.
pub fn keepalive_datagram_with_loss(id: &str, loss: LossReport) -> Option<[u8; KEEPALIVE_LEN]> {
    let mut d = keepalive_datagram(id)?;
    d[4] = KEEPALIVE_VERSION_LOSS;
    d[6..8].copy_from_slice(&loss.units().to_be_bytes());
    Some(d)
}

/// The session id a keepalive datagram names (version 1 or 2); `None` for anything that is
/// not exactly a keepalive datagram.
pub fn parse_keepalive(datagram: &[u8]) -> Option<&str> {
    parse_keepalive_report(datagram).map(|k| k.id)
}

/// The session id and loss report of a keepalive datagram; `None` for anything that is not
/// exactly a keepalive datagram of version 1 (bytes 5..8 zero) or 2 (byte 5 zero, a loss of
/// at most [`LOSS_UNITS`]).
pub fn parse_keepalive_report(datagram: &[u8]) -> Option<Keepalive<'_>> {
    let d: &[u8; KEEPALIVE_LEN] = datagram.try_into().ok()?;
    let (head, id) = d.split_at(8);
    if head[..4] != KEEPALIVE_MAGIC || head[5] != 0 {
        return None;
    }
    let units = u16::from_be_bytes([head[6], head[7]]);
    let loss = match head[4] {
        KEEPALIVE_VERSION if units == 0 => None,
        KEEPALIVE_VERSION_LOSS => Some(LossReport::from_units(units)?),
        _ => return None,
    };
    if !is_session_id(id) {
        return None;
    }
    let id = std::str::from_utf8(id).ok()?;
    Some(Keepalive { id, loss })
}

fn is_session_id(id: &[u8]) -> bool {
    id.len() == SESSION_ID_LEN && id.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_exact_bytes() {
        let d = keepalive_datagram("0123456789abcdef").unwrap();
        assert_eq!(&d[..8], b"ISKA\x01\0\0\0");
        assert_eq!(&d[8..], b"0123456789abcdef");
        assert_eq!(parse_keepalive(&d), Some("0123456789abcdef"));
    }

    #[test]
    fn anything_else_is_refused() {
        let good = keepalive_datagram("00000000000000ff").unwrap();
        assert_eq!(keepalive_datagram("00000000000000FF"), None);
        assert_eq!(keepalive_datagram("short"), None);
        assert_eq!(parse_keepalive(&good[..23]), None);
        let mut longer = good.to_vec();
        longer.push(0);
        assert_eq!(parse_keepalive(&longer), None);
        for i in 0..KEEPALIVE_LEN {
            let mut bad = good;
            bad[i] ^= 0x80;
            assert_eq!(parse_keepalive(&bad), None, "byte {i} flipped");
        }
        let mut v3 = good;
        v3[4] = 3;
        assert_eq!(parse_keepalive(&v3), None);
        let mut v1_with_loss = good;
        v1_with_loss[7] = 1;
        assert_eq!(parse_keepalive(&v1_with_loss), None);
    }

    #[test]
    fn version_2_carries_the_loss() {
        let loss = LossReport::from_units(512).unwrap();
        let d = keepalive_datagram_with_loss("0123456789abcdef", loss).unwrap();
        assert_eq!(&d[..8], b"ISKA\x02\0\x02\x00");
        assert_eq!(
            parse_keepalive_report(&d),
            Some(Keepalive {
                id: "0123456789abcdef",
                loss: Some(loss)
            })
        );
        assert_eq!(parse_keepalive(&d), Some("0123456789abcdef"));
        let v1 = keepalive_datagram("0123456789abcdef").unwrap();
        assert_eq!(parse_keepalive_report(&v1).unwrap().loss, None);
        // A loss above 100 % or a non-zero byte 5 is refused.
        let mut over = d;
        over[6..8].copy_from_slice(&10_001u16.to_be_bytes());
        assert_eq!(parse_keepalive_report(&over), None);
        let mut flags = d;
        flags[5] = 1;
        assert_eq!(parse_keepalive_report(&flags), None);
        assert_eq!(LossReport::from_rate(0.05).units(), 500);
        assert_eq!(LossReport::from_rate(2.0).units(), 10_000);
        assert_eq!(LossReport::from_rate(f64::NAN).units(), 0);
        assert_eq!(LossReport::from_rate(1e-9).units(), 1, "rounded up");
        assert!(LossReport::from_units(10_001).is_none());
    }
}
