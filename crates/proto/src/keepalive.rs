//! The keepalive datagram: what a client sends over UDP, once per
//! `keepalive_interval_ms`, to the server's `keepalive_port` instead of
//! `POST /v1/sessions/{id}/keepalive` (`docs/protocol.md`, "Keepalive datagram").
//!
//! 48 bytes (version 4), nothing else accepted:
//!
//! | offset | length | field                                           |
//! |-------:|-------:|-------------------------------------------------|
//! |      0 |      4 | magic `ISKA` (0x49 0x53 0x4B 0x41)              |
//! |      4 |      1 | version, 4                                      |
//! |      5 |      1 | zero                                            |
//! |      6 |      2 | the client's measured loss, in units of 1/10 000 (0..=10 000), big-endian, or 0xFFFF: no report |
//! |      8 |     16 | session id: 16 lowercase hexadecimal ASCII digits |
//! |     24 |      8 | counter, big-endian, from 1, one more for each datagram of the session |
//! |     32 |     16 | MAC: the first 16 bytes of HMAC-SHA-256 keyed with the session's secret ([`crate::auth`]) over bytes 0..32 |
//!
//! The secret itself never travels in the datagram: an observer of the client's network
//! sees the id and counters but cannot make a datagram with another counter (or another
//! loss report), and one it replays is refused by the server's [`ReplayWindow`]. The loss
//! report ([`LossReport`]) feeds adaptive repair. Versions 1 and 2 (24 bytes, no secret)
//! and 3 (40 bytes, the secret in clear) are refused.
//!
//! A client sends it from the socket the stream arrives on, so the datagram also keeps a
//! NAT or firewall mapping of the stream's path open; the server takes it only from the
//! session's destination IP.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::auth::Key;

/// Length of a keepalive datagram in bytes.
pub const KEEPALIVE_LEN: usize = 48;
/// The first four bytes of a keepalive datagram.
pub const KEEPALIVE_MAGIC: [u8; 4] = *b"ISKA";
/// The format version: counter and MAC, an optional loss report.
pub const KEEPALIVE_VERSION: u8 = 4;
/// Bytes of the datagram the MAC covers (everything before it).
const SIGNED_LEN: usize = 32;
/// Length of the MAC (HMAC-SHA-256 truncated).
pub const MAC_LEN: usize = 16;
/// Bytes 6..8 of a datagram without a loss report.
const NO_REPORT: u16 = 0xFFFF;
/// The unit of a loss report: a loss rate of 1 is this many units.
pub const LOSS_UNITS: u16 = 10_000;
/// Counters a [`ReplayWindow`] remembers below the highest it took.
pub const REPLAY_WINDOW: u64 = 64;

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

/// A keepalive datagram as parsed (not yet authenticated: see [`Keepalive::authentic`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keepalive<'a> {
    /// The session id.
    pub id: &'a str,
    /// The datagram's counter.
    pub counter: u64,
    /// The loss report, if any.
    pub loss: Option<LossReport>,
    /// The bytes the MAC covers.
    signed: &'a [u8; SIGNED_LEN],
    /// The MAC the datagram carries.
    mac: &'a [u8; MAC_LEN],
}

impl Keepalive<'_> {
    /// Whether the datagram's MAC is the one `secret` gives (compared in constant time).
    pub fn authentic(&self, secret: &Key) -> bool {
        hmac_of(secret, self.signed)
            .verify_truncated_left(self.mac)
            .is_ok()
    }
}

fn hmac_of(secret: &Key, signed: &[u8]) -> Hmac<Sha256> {
    // HMAC takes keys of any length: `new_from_slice` cannot fail.
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
    m.update(signed);
    m
}

/// Length of a session id (hexadecimal digits).
pub const SESSION_ID_LEN: usize = 16;

/// The keepalive datagram number `counter` of session `id`, authenticated with its
/// `secret`, with the loss report `loss`; `None` if `id` is not a session id (16 lowercase
/// hexadecimal digits).
pub fn keepalive_datagram(
    id: &str,
    secret: &Key,
    counter: u64,
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
    d[24..SIGNED_LEN].copy_from_slice(&counter.to_be_bytes());
    let tag = hmac_of(secret, &d[..SIGNED_LEN]).finalize().into_bytes();
    d[SIGNED_LEN..].copy_from_slice(tag.get(..MAC_LEN)?);
    Some(d)
}

/// The session id, counter and loss report of a keepalive datagram; `None` for anything
/// that is not exactly a version 4 keepalive datagram (byte 5 zero, a loss of at most
/// [`LOSS_UNITS`] or no report). Its MAC is checked by [`Keepalive::authentic`].
pub fn parse_keepalive(datagram: &[u8]) -> Option<Keepalive<'_>> {
    let d: &[u8; KEEPALIVE_LEN] = datagram.try_into().ok()?;
    let (signed, mac) = d.split_at(SIGNED_LEN);
    let (head, rest) = signed.split_at(8);
    let (id, counter) = rest.split_at(SESSION_ID_LEN);
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
    Some(Keepalive {
        id: std::str::from_utf8(id).ok()?,
        counter: u64::from_be_bytes(counter.try_into().ok()?),
        loss,
        signed: signed.try_into().ok()?,
        mac: mac.try_into().ok()?,
    })
}

fn is_session_id(id: &[u8]) -> bool {
    id.len() == SESSION_ID_LEN && id.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

/// The counters of one session's authentic keepalive datagrams the server took (as
/// IPsec's and WireGuard's anti-replay windows): a counter is taken once, and only above
/// the highest taken less [`REPLAY_WINDOW`]; counter 0 never.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplayWindow {
    /// The highest counter taken (0: none yet).
    highest: u64,
    /// Bit `i`: counter `highest - i` was taken.
    seen: u64,
}

impl Default for ReplayWindow {
    fn default() -> ReplayWindow {
        // Counter 0 counts as taken: a client starts from 1.
        ReplayWindow {
            highest: 0,
            seen: 1,
        }
    }
}

impl ReplayWindow {
    /// Takes `counter` if it is new and in the window (and remembers it); false for a
    /// replayed or too old one.
    pub fn take(&mut self, counter: u64) -> bool {
        if counter > self.highest {
            let shift = counter - self.highest;
            self.seen = if shift >= REPLAY_WINDOW {
                0
            } else {
                self.seen << shift
            };
            self.seen |= 1;
            self.highest = counter;
            return true;
        }
        let age = self.highest - counter;
        if age >= REPLAY_WINDOW || self.seen & (1 << age) != 0 {
            return false;
        }
        self.seen |= 1 << age;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const ID: &str = "0123456789abcdef";
    const SECRET: Key = [7; 16];

    #[test]
    fn round_trip_and_exact_bytes() {
        let d = keepalive_datagram(ID, &SECRET, 0x0102, None).unwrap();
        assert_eq!(&d[..8], b"ISKA\x04\0\xff\xff");
        assert_eq!(&d[8..24], ID.as_bytes());
        assert_eq!(&d[24..32], &[0, 0, 0, 0, 0, 0, 1, 2]);
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&SECRET).unwrap();
        m.update(&d[..32]);
        assert_eq!(&d[32..], &m.finalize().into_bytes()[..16]);
        let k = parse_keepalive(&d).unwrap();
        assert_eq!((k.id, k.counter, k.loss), (ID, 0x0102, None));
        assert!(k.authentic(&SECRET));
        assert!(
            !d.windows(16).any(|w| w == SECRET),
            "the secret is not sent"
        );
    }

    #[test]
    fn a_forged_datagram_is_not_authentic() {
        let d = keepalive_datagram(ID, &SECRET, 9, None).unwrap();
        let mut other = SECRET;
        other[0] ^= 1;
        assert!(!parse_keepalive(&d).unwrap().authentic(&other));
        // Any byte the MAC covers or of the MAC changed: refused or not authentic.
        for i in 0..KEEPALIVE_LEN {
            let mut bad = d;
            bad[i] ^= 0x01;
            let ok = parse_keepalive(&bad).is_some_and(|k| k.authentic(&SECRET));
            assert!(!ok, "byte {i} flipped");
        }
    }

    #[test]
    fn anything_else_is_refused() {
        let good = keepalive_datagram("00000000000000ff", &SECRET, 1, None).unwrap();
        assert_eq!(
            keepalive_datagram("00000000000000FF", &SECRET, 1, None),
            None
        );
        assert_eq!(keepalive_datagram("short", &SECRET, 1, None), None);
        assert_eq!(parse_keepalive(&good[..47]), None);
        let mut longer = good.to_vec();
        longer.push(0);
        assert_eq!(parse_keepalive(&longer), None);
        for i in 0..24 {
            let mut bad = good;
            bad[i] ^= 0x80;
            assert_eq!(parse_keepalive(&bad), None, "byte {i} flipped");
        }
        // Version 3 (40 bytes, the secret in clear) and the 24-byte versions 1 and 2.
        let mut v3 = [0u8; 40];
        v3[..8].copy_from_slice(b"ISKA\x03\0\xff\xff");
        v3[8..24].copy_from_slice(ID.as_bytes());
        v3[24..].copy_from_slice(&SECRET);
        assert_eq!(parse_keepalive(&v3), None);
        let mut v1 = [0u8; 24];
        v1[..8].copy_from_slice(b"ISKA\x01\0\0\0");
        v1[8..].copy_from_slice(ID.as_bytes());
        assert_eq!(parse_keepalive(&v1), None);
    }

    #[test]
    fn the_loss_report_rides_along() {
        let loss = LossReport::from_units(512).unwrap();
        let d = keepalive_datagram(ID, &SECRET, 1, Some(loss)).unwrap();
        assert_eq!(&d[..8], b"ISKA\x04\0\x02\x00");
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

    #[test]
    fn the_window_takes_each_counter_once() {
        let mut w = ReplayWindow::default();
        assert!(!w.take(0), "counter 0 never");
        assert!(w.take(1));
        assert!(!w.take(1), "replayed");
        assert!(w.take(5));
        assert!(w.take(3), "late but new");
        assert!(!w.take(3));
        assert!(w.take(100));
        assert!(!w.take(5), "replayed, and out of the window now");
        assert!(!w.take(36), "below highest - 64");
        assert!(w.take(37));
        assert!(w.take(u64::MAX));
        assert!(!w.take(u64::MAX));
    }

    proptest! {
        /// The window takes exactly the counters that are new and above the highest taken
        /// before less the window.
        #[test]
        fn the_window_is_exact(counters in prop::collection::vec(0u64..300, 0..200)) {
            let mut w = ReplayWindow::default();
            let mut taken = std::collections::HashSet::from([0u64]);
            let mut highest = 0u64;
            for c in counters {
                let expect = !taken.contains(&c) && c + REPLAY_WINDOW > highest;
                prop_assert_eq!(w.take(c), expect, "counter {}", c);
                if expect {
                    taken.insert(c);
                    highest = highest.max(c);
                }
            }
        }
    }
}
