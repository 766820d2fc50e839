//! The goodbye datagram: what the server sends to a session's destination when it ends the
//! session itself, so that the client ends with the reason instead of waiting out its
//! `--timeout-s` (`docs/protocol.md`, "Goodbye datagram").
//!
//! 24 bytes, nothing else accepted:
//!
//! | offset | length | field                                             |
//! |-------:|-------:|---------------------------------------------------|
//! |      0 |      4 | magic `ISGB` (0x49 0x53 0x47 0x42)                |
//! |      4 |      1 | version, 1                                        |
//! |      5 |      1 | reason: 1 = the server is shutting down           |
//! |      6 |      2 | zero                                              |
//! |      8 |     16 | session id: 16 lowercase hexadecimal ASCII digits |
//!
//! A client takes it only from the server's address and for its own session id (which only
//! the control channel, over TLS, told it); anything else is a stray datagram.

use crate::keepalive::SESSION_ID_LEN;

/// Length of a goodbye datagram.
pub const GOODBYE_DATAGRAM_LEN: usize = 24;
/// The first four bytes of a goodbye datagram.
pub const GOODBYE_MAGIC: [u8; 4] = *b"ISGB";
/// The goodbye datagram's format version.
pub const GOODBYE_VERSION: u8 = 1;

/// Why the server ended a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GoodbyeReason {
    /// The server is shutting down and its grace period ran out.
    ShuttingDown,
}

impl GoodbyeReason {
    fn code(self) -> u8 {
        match self {
            GoodbyeReason::ShuttingDown => 1,
        }
    }

    fn from_code(code: u8) -> Option<GoodbyeReason> {
        match code {
            1 => Some(GoodbyeReason::ShuttingDown),
            _ => None,
        }
    }
}

/// The goodbye datagram of session `id` (16 lowercase hex digits); `None` for another id.
pub fn goodbye_datagram(id: &str, reason: GoodbyeReason) -> Option<[u8; GOODBYE_DATAGRAM_LEN]> {
    let id = id.as_bytes();
    if id.len() != SESSION_ID_LEN {
        return None;
    }
    let mut d = [0u8; GOODBYE_DATAGRAM_LEN];
    d[..4].copy_from_slice(&GOODBYE_MAGIC);
    d[4] = GOODBYE_VERSION;
    d[5] = reason.code();
    d[8..].copy_from_slice(id);
    Some(d)
}

/// The reason of a goodbye datagram for session `id`; `None` for anything else.
pub fn parse_goodbye(datagram: &[u8], id: &str) -> Option<GoodbyeReason> {
    let d: &[u8; GOODBYE_DATAGRAM_LEN] = datagram.try_into().ok()?;
    let (head, got_id) = d.split_at(8);
    if head[..4] != GOODBYE_MAGIC || head[4] != GOODBYE_VERSION || head[6..] != [0, 0] {
        return None;
    }
    if got_id != id.as_bytes() {
        return None;
    }
    GoodbyeReason::from_code(head[5])
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0123456789abcdef";

    #[test]
    fn round_trip_and_exact_bytes() {
        let d = goodbye_datagram(ID, GoodbyeReason::ShuttingDown).unwrap();
        assert_eq!(&d[..8], b"ISGB\x01\x01\0\0");
        assert_eq!(&d[8..], ID.as_bytes());
        assert_eq!(parse_goodbye(&d, ID), Some(GoodbyeReason::ShuttingDown));
    }

    #[test]
    fn anything_else_is_refused() {
        let d = goodbye_datagram(ID, GoodbyeReason::ShuttingDown).unwrap();
        assert_eq!(parse_goodbye(&d, "fedcba9876543210"), None);
        assert_eq!(parse_goodbye(&d[..23], ID), None);
        for i in 0..8 {
            let mut bad = d;
            bad[i] ^= 0x40;
            assert_eq!(parse_goodbye(&bad, ID), None, "byte {i}");
        }
        assert_eq!(goodbye_datagram("short", GoodbyeReason::ShuttingDown), None);
    }

    proptest::proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            let _ = parse_goodbye(&bytes, ID);
        }
    }
}
