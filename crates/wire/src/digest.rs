//! Packet digests: what makes a stored packet authentic, not just intact.
//!
//! A packet's CRC32C (in its header) catches corruption, not forgery: anyone who can reach
//! a client can send CRC-valid packets of a public TSI/TOI. At ingest the store computes
//! the digest of every stored packet, whole (header, symbol and CRC), and keeps it in the
//! catalog; the client gets the digests over the (authenticated) control channel and
//! takes a packet only if its digest matches. The packets on the wire stay the stored
//! bytes, unchanged: standard FLUTE receivers are unaffected.
//!
//! The digest is SHA-256 truncated to [`DIGEST_LEN`] bytes (128 bits: forging a packet
//! means finding a second preimage, 2^128 work). SHA-256 rather than BLAKE3, measured:
//! on 1436-byte packets BLAKE3 cannot use its parallel chunks (a packet is under two
//! 1 KiB chunks) and ran at 3.1 s/GB on this machine, SHA-256 with the CPU's SHA
//! extensions at 1.1-1.5 s/GB (`isnode bench verify` reports the figure of the machine
//! it runs on). Byte layout of the catalog rows and of the digest route in
//! `docs/format.md` and `docs/protocol.md`.

/// Length of a packet digest, bytes.
pub const DIGEST_LEN: usize = 16;
/// A packet digest.
pub type Digest = [u8; DIGEST_LEN];
/// The digest algorithm's name as the API gives it.
pub const DIGEST_ALGORITHM: &str = "sha256-128";

/// The digest of one stored packet (its complete bytes).
pub fn packet_digest(packet: &[u8]) -> Digest {
    use sha2::Digest as _;
    let full = sha2::Sha256::digest(packet);
    let mut d = [0u8; DIGEST_LEN];
    d.copy_from_slice(&full[..DIGEST_LEN]);
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_is_sha256_truncated_and_sees_every_byte() {
        // SHA-256("") starts e3b0c44298fc1c14 9afbf4c8996fb924 (FIPS 180-4 test vector).
        assert_eq!(
            packet_digest(b""),
            [
                0xe3, 0xb0, 0xc4, 0x42, 0x98, 0xfc, 0x1c, 0x14, 0x9a, 0xfb, 0xf4, 0xc8, 0x99, 0x6f,
                0xb9, 0x24
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
