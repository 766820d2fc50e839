//! The keepalive datagram: what a client sends over UDP, once per
//! `keepalive_interval_ms`, to the server's `keepalive_port` instead of
//! `POST /v1/sessions/{id}/keepalive` (`docs/protocol.md`, "Keepalive datagram").
//!
//! 24 bytes, nothing else accepted:
//!
//! | offset | length | field                                           |
//! |-------:|-------:|-------------------------------------------------|
//! |      0 |      4 | magic `ISKA` (0x49 0x53 0x4B 0x41)              |
//! |      4 |      1 | version, 1                                      |
//! |      5 |      3 | zero                                            |
//! |      8 |     16 | session id: 16 lowercase hexadecimal ASCII digits |
//!
//! A client sends it from the socket the stream arrives on, so the datagram also keeps a
//! NAT or firewall mapping of the stream's path open; the server takes it only from the
//! session's destination IP.

/// Length of a keepalive datagram in bytes.
pub const KEEPALIVE_LEN: usize = 24;
/// The first four bytes of a keepalive datagram.
pub const KEEPALIVE_MAGIC: [u8; 4] = *b"ISKA";
/// The format version this crate writes and reads.
pub const KEEPALIVE_VERSION: u8 = 1;
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

/// The session id a keepalive datagram names; `None` for anything that is not exactly a
/// keepalive datagram of this version.
pub fn parse_keepalive(datagram: &[u8]) -> Option<&str> {
    let d: &[u8; KEEPALIVE_LEN] = datagram.try_into().ok()?;
    let (head, id) = d.split_at(8);
    if head
        != [
            KEEPALIVE_MAGIC[0],
            KEEPALIVE_MAGIC[1],
            KEEPALIVE_MAGIC[2],
            KEEPALIVE_MAGIC[3],
            KEEPALIVE_VERSION,
            0,
            0,
            0,
        ]
    {
        return None;
    }
    if !is_session_id(id) {
        return None;
    }
    std::str::from_utf8(id).ok()
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
        let mut v2 = good;
        v2[4] = 2;
        assert_eq!(parse_keepalive(&v2), None);
    }
}
