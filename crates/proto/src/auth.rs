//! Who may steer a session, and proof that its destination wants the stream
//! (`docs/protocol.md`, "Session ownership" and "Return routability").
//!
//! - **Secret.** `POST /v1/sessions` answers with a per-session secret
//!   ([`crate::SessionInfo::secret`], 16 random bytes as 32 lowercase hexadecimal digits).
//!   Keepalives, controls, validation and `DELETE` of the session are taken only from the
//!   creating IP address and with the secret: the header [`SESSION_SECRET_HEADER`]
//!   (`Isnode-Session-Secret: <secret>`) over HTTP, as the key of the MAC of a keepalive
//!   datagram ([`crate::keepalive`], version 4). `Authorization: Bearer` carries role
//!   tokens only.
//! - **Return routability.** The server streams nothing until the destination has proved
//!   that it receives: it sends a [`TOKEN_DATAGRAM_LEN`]-byte token datagram to the
//!   session's destination (from its keepalive port), and the client echoes the token with
//!   `POST /v1/sessions/{id}/validate` ([`ValidateSession`]). A session not validated in
//!   time ends; a request for a port that is not listening costs the server a few token
//!   datagrams and no stream.
//!
//! Token datagram, 24 bytes, nothing else accepted:
//!
//! | offset | length | field                                  |
//! |-------:|-------:|----------------------------------------|
//! |      0 |      4 | magic `ISRT` (0x49 0x53 0x52 0x54)     |
//! |      4 |      1 | version, 1                             |
//! |      5 |      3 | zero                                   |
//! |      8 |     16 | the token (random bytes)               |

use serde::{Deserialize, Serialize};

/// Length of a session secret and of a validation token, bytes.
pub const KEY_LEN: usize = 16;
/// A session secret or a validation token.
pub type Key = [u8; KEY_LEN];
/// Length of a token datagram.
pub const TOKEN_DATAGRAM_LEN: usize = 24;
/// The first four bytes of a token datagram.
pub const TOKEN_MAGIC: [u8; 4] = *b"ISRT";
/// The token datagram's format version.
pub const TOKEN_VERSION: u8 = 1;

/// The body of `POST /v1/sessions/{id}/validate`: the token the destination received.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ValidateSession {
    /// The token of the token datagram, 32 lowercase hexadecimal digits.
    pub token: String,
}

/// The token datagram carrying `token`.
pub fn token_datagram(token: &Key) -> [u8; TOKEN_DATAGRAM_LEN] {
    let mut d = [0u8; TOKEN_DATAGRAM_LEN];
    d[..4].copy_from_slice(&TOKEN_MAGIC);
    d[4] = TOKEN_VERSION;
    d[8..].copy_from_slice(token);
    d
}

/// The token of a token datagram; `None` for anything that is not exactly one.
pub fn parse_token_datagram(datagram: &[u8]) -> Option<Key> {
    let d: &[u8; TOKEN_DATAGRAM_LEN] = datagram.try_into().ok()?;
    let (head, token) = d.split_at(8);
    if head[..4] != TOKEN_MAGIC || head[4] != TOKEN_VERSION || head[5..] != [0, 0, 0] {
        return None;
    }
    token.try_into().ok()
}

/// `key` as 32 lowercase hexadecimal digits.
pub fn key_hex(key: &Key) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

/// The key written as 32 lowercase hexadecimal digits; `None` for anything else.
pub fn parse_key_hex(text: &str) -> Option<Key> {
    let t = text.as_bytes();
    if t.len() != 2 * KEY_LEN {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut key = [0u8; KEY_LEN];
    for (k, pair) in key.iter_mut().zip(t.chunks_exact(2)) {
        *k = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(key)
}

/// Compares two keys in time independent of where they differ.
pub fn keys_equal(a: &Key, b: &Key) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The HTTP header that carries a session's secret on the session routes (keepalive,
/// validate, control, delete): `Isnode-Session-Secret: <32 lowercase hexadecimal digits>`.
/// Header names are case-insensitive; this is the lowercase form HTTP/2 sends.
pub const SESSION_SECRET_HEADER: &str = "isnode-session-secret";

/// The secret of an [`SESSION_SECRET_HEADER`] value: exactly 32 lowercase hexadecimal
/// digits (spaces or tabs around them ignored, as HTTP allows); `None` otherwise.
pub fn parse_session_secret(value: &str) -> Option<Key> {
    parse_key_hex(value.trim_matches([' ', '\t']))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_datagram_round_trip_and_exact_bytes() {
        let token: Key = std::array::from_fn(|i| i as u8 * 17);
        let d = token_datagram(&token);
        assert_eq!(&d[..8], b"ISRT\x01\0\0\0");
        assert_eq!(parse_token_datagram(&d), Some(token));
        for i in 0..8 {
            let mut bad = d;
            bad[i] ^= 0x40;
            assert_eq!(parse_token_datagram(&bad), None, "byte {i} flipped");
        }
        assert_eq!(parse_token_datagram(&d[..23]), None);
        let mut longer = d.to_vec();
        longer.push(0);
        assert_eq!(parse_token_datagram(&longer), None);
    }

    #[test]
    fn keys_in_hex_and_session_secret_headers() {
        let key: Key = std::array::from_fn(|i| 0xf0 | i as u8);
        let hex = key_hex(&key);
        assert_eq!(hex, "f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff");
        assert_eq!(parse_key_hex(&hex), Some(key));
        assert_eq!(parse_key_hex(&hex.to_uppercase()), None);
        assert_eq!(parse_key_hex(&hex[..30]), None);
        assert_eq!(parse_key_hex("zz"), None);
        assert_eq!(parse_session_secret(&hex), Some(key));
        assert_eq!(parse_session_secret(&format!(" {hex}\t")), Some(key));
        assert_eq!(parse_session_secret(&format!("Bearer {hex}")), None);
        assert_eq!(parse_session_secret(&hex.to_uppercase()), None);
        assert_eq!(parse_session_secret(&format!("{hex}0")), None);
        assert!(keys_equal(&key, &key));
        let mut other = key;
        other[15] ^= 1;
        assert!(!keys_equal(&key, &other));
    }
}
