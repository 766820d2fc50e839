//! The keepalive datagram: what a client sends over UDP, once per
//! `keepalive_interval_ms`, to the server's `keepalive_port` instead of
//! `POST /v1/sessions/{id}/keepalive` (`docs/protocol.md`, "Keepalive datagram").
//!
//! 40 bytes (version 3), nothing else accepted:
//!
//! | offset | length | field                                           |
//! |-------:|-------:|-------------------------------------------------|
//! |      0 |      4 | magic `ISKA` (0x49 0x53 0x4B 0x41)              |
//! |      4 |      1 | version, 3                                      |
//! |      5 |      1 | zero                                            |
//! |      6 |      2 | the client's measured loss, in units of 1/10 000 (0..=10 000), big-endian, or 0xFFFF: no report |
//! |      8 |     16 | session id: 16 lowercase hexadecimal ASCII digits |
//! |     24 |     16 | the session's secret ([`crate::auth`]), raw bytes |
//!
//! The loss report ([`LossReport`]) feeds adaptive repair. Versions 1 and 2 (24 bytes, no
//! secret) were taken before sessions were owned; a server now refuses them, as it refuses
//! a datagram whose secret is not the session's.
//!
//! A client sends it from the socket the stream arrives on, so the datagram also keeps a
//! NAT or firewall mapping of the stream's path open; the server takes it only from the
//! session's destination IP.

use crate::auth::Key;

/// Length of a keepalive datagram in bytes.
pub const KEEPALIVE_LEN: usize = 40;
/// The first four bytes of a keepalive datagram.
pub const KEEPALIVE_MAGIC: [u8; 4] = *b"ISKA";
/// The format version: with the session's secret and an optional loss report.
pub const KEEPALIVE_VERSION: u8 = 3;
/// Bytes 6..8 of a datagram without a loss report.
const NO_REPORT: u16 = 0xFFFF;
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

/// A keepalive datagram as parsed: the session it names, its secret and its loss report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keepalive<'a> {
    /// The session id.
    pub id: &'a str,
    /// The secret the datagram carries (the server compares it with the session's).
    pub secret: Key,
    /// The loss report, if any.
    pub loss: Option<LossReport>,
}

/// Length of a session id (hexadecimal digits).
pub const SESSION_ID_LEN: usize = 16;

/// The keepalive datagram of session `id` with its `secret` and loss report `loss`; `None`
/// if `id` is not a session id (16 lowercase hexadecimal digits).
pub fn keepalive_datagram(
    id: &str,
    secret: &Key,
    loss: Option<LossReport>,
) -> Option<[u8; KEEPALIVE_LEN]> {
    if !is_session_id(id.as_bytes()) {
        return None;
    }
    let mut d = [0u8; KEEPALIVE_LEN];
    d[..4].copy_from_slice(&KEEPALIVE_MAGIC);
    d[4] = KEEPALIVE_VERSION;
    let units = loss.map_or(NO_REPORT, LossReport::units);
    d[6..8].copy_from_slice(&units.to_be_bytes());
    d[8..24].copy_from_slice(id.as_bytes());
    d[24..].copy_from_slice(secret);
    Some(d)
}

/// The session id, secret and loss report of a keepalive datagram; `None` for anything
/// that is not exactly a version 3 keepalive datagram (byte 5 zero, a loss of at most
/// [`LOSS_UNITS`] or no report).
pub fn parse_keepalive(datagram: &[u8]) -> Option<Keepalive<'_>> {
    let d: &[u8; KEEPALIVE_LEN] = datagram.try_into().ok()?;
    let (head, rest) = d.split_at(8);
    let (id, secret) = rest.split_at(SESSION_ID_LEN);
    if head[..4] != KEEPALIVE_MAGIC || head[4] != KEEPALIVE_VERSION || head[5] != 0 {
        return None;
    }
    let loss = match u16::from_be_bytes([head[6], head[7]]) {
        NO_REPORT => None,
        units => Some(LossReport::from_units(units)?),
    };
    if !is_session_id(id) {
        return None;
    }
    let id = std::str::from_utf8(id).ok()?;
    Some(Keepalive {
        id,
        secret: secret.try_into().ok()?,
        loss,
    })
}

fn is_session_id(id: &[u8]) -> bool {
    id.len() == SESSION_ID_LEN && id.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0123456789abcdef";
    const SECRET: Key = [7; 16];

    #[test]
    fn round_trip_and_exact_bytes() {
        let d = keepalive_datagram(ID, &SECRET, None).unwrap();
        assert_eq!(&d[..8], b"ISKA\x03\0\xff\xff");
        assert_eq!(&d[8..24], ID.as_bytes());
        assert_eq!(&d[24..], &SECRET);
        let k = parse_keepalive(&d).unwrap();
        assert_eq!((k.id, k.secret, k.loss), (ID, SECRET, None));
    }

    #[test]
    fn anything_else_is_refused() {
        let good = keepalive_datagram("00000000000000ff", &SECRET, None).unwrap();
        assert_eq!(keepalive_datagram("00000000000000FF", &SECRET, None), None);
        assert_eq!(keepalive_datagram("short", &SECRET, None), None);
        assert_eq!(parse_keepalive(&good[..39]), None);
        let mut longer = good.to_vec();
        longer.push(0);
        assert_eq!(parse_keepalive(&longer), None);
        for i in 0..24 {
            let mut bad = good;
            bad[i] ^= 0x80;
            assert_eq!(parse_keepalive(&bad), None, "byte {i} flipped");
        }
        // The old 24-byte versions 1 and 2 (no secret) are refused.
        let mut v1 = [0u8; 24];
        v1[..8].copy_from_slice(b"ISKA\x01\0\0\0");
        v1[8..].copy_from_slice(ID.as_bytes());
        assert_eq!(parse_keepalive(&v1), None);
    }

    #[test]
    fn the_loss_report_rides_along() {
        let loss = LossReport::from_units(512).unwrap();
        let d = keepalive_datagram(ID, &SECRET, Some(loss)).unwrap();
        assert_eq!(&d[..8], b"ISKA\x03\0\x02\x00");
        assert_eq!(parse_keepalive(&d).unwrap().loss, Some(loss));
        // A loss above 100 % or a non-zero byte 5 is refused.
        let mut over = d;
        over[6..8].copy_from_slice(&10_001u16.to_be_bytes());
        assert_eq!(parse_keepalive(&over), None);
        let mut flags = d;
        flags[5] = 1;
        assert_eq!(parse_keepalive(&flags), None);
        assert_eq!(LossReport::from_rate(0.05).units(), 500);
        assert_eq!(LossReport::from_rate(2.0).units(), 10_000);
        assert_eq!(LossReport::from_rate(f64::NAN).units(), 0);
        assert_eq!(LossReport::from_rate(1e-9).units(), 1, "rounded up");
        assert!(LossReport::from_units(10_001).is_none());
    }
}
