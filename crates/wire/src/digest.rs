//! Packet digests: what makes a stored packet authentic, not just intact.
//!
//! A packet's CRC32C (in its header) catches corruption, not forgery: anyone who can reach
//! a client can send CRC-valid packets of a public TSI/TOI. At ingest the store computes
//! the digest of every stored packet, whole (header, symbol and CRC), and keeps it in the
//! catalog; the client gets the digests over the (authenticated) control channel and
//! takes a packet only if its digest matches. The packets on the wire stay the stored
//! bytes, unchanged: standard FLUTE receivers are unaffected.
//!
//! The digest is BLAKE3 truncated to [`DIGEST_LEN`] bytes (128 bits: forging a packet
//! means finding a second preimage, 2^128 work). Byte layout of the catalog rows and of
//! the digest route in `docs/format.md` and `docs/protocol.md`.

/// Length of a packet digest, bytes.
pub const DIGEST_LEN: usize = 16;
/// A packet digest.
pub type Digest = [u8; DIGEST_LEN];
/// The digest algorithm's name as the API gives it.
pub const DIGEST_ALGORITHM: &str = "blake3-128";

/// The digest of one stored packet (its complete bytes).
pub fn packet_digest(packet: &[u8]) -> Digest {
    let full = blake3::hash(packet);
    let mut d = [0u8; DIGEST_LEN];
    d.copy_from_slice(&full.as_bytes()[..DIGEST_LEN]);
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_is_blake3_truncated_and_sees_every_byte() {
        // BLAKE3("") starts af1349b9f5f9a1a6 a0404dea36dcc949 (the published test vector).
        assert_eq!(
            packet_digest(b""),
            [
                0xaf, 0x13, 0x49, 0xb9, 0xf5, 0xf9, 0xa1, 0xa6, 0xa0, 0x40, 0x4d, 0xea, 0x36, 0xdc,
                0xc9, 0x49
            ]
        );
        let p = vec![7u8; 1436];
        let d = packet_digest(&p);
        for i in [0, 17, 1435] {
            let mut q = p.clone();
            q[i] ^= 1;
            assert_ne!(packet_digest(&q), d, "byte {i}");
        }
    }
}
