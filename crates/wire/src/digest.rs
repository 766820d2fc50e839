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
//! it runs on). Where many packets are digested together (ingest), [`packet_digests`]
//! interleaves eight: 0.30-0.37 s/GB against 0.50-0.52 one at a time on this machine (the ignored
//! test `sha256_lanes::speed`). Byte layout of the catalog rows and of the digest route in
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

/// The digests of back-to-back packets of `packet_len` bytes each (`packets`), into `out`
/// ([`DIGEST_LEN`] bytes per packet, in order): the values of [`packet_digest`], computed
/// eight or four at a time where the CPU has the SHA extensions (`sha256_lanes`: the
/// interleaved chains cut the time per packet by about 35-40 % on the machines measured).
/// Packets past what `out` holds, and a last partial packet, are left out.
pub fn packet_digests(packets: &[u8], packet_len: usize, out: &mut [u8]) {
    if packet_len == 0 {
        return;
    }
    let n = (packets.len() / packet_len).min(out.len() / DIGEST_LEN);
    let mut at = 0;
    while at < n {
        at += match n - at {
            8.. => digests_of_lanes::<8>(packets, packet_len, out, at),
            4.. => digests_of_lanes::<4>(packets, packet_len, out, at),
            _ => digests_of_lanes::<1>(packets, packet_len, out, at),
        };
    }
}

/// The digests of separate packets (`msgs`), into `out` (one per packet, in order; packets
/// past what `out` holds are left out): the values of [`packet_digest`], computed eight or
/// four at a time over runs of packets of one length where the CPU has the SHA extensions
/// (a receiver's batch: the packets of one datagram or one receive are of one length but
/// for an odd FDT packet, which is digested alone).
pub fn packet_digests_each(msgs: &[&[u8]], out: &mut [Digest]) {
    let n = msgs.len().min(out.len());
    let mut at = 0;
    while at < n {
        let len = msgs[at].len();
        let run = msgs[at..n].iter().take_while(|m| m.len() == len).count();
        at += match run {
            8.. => digests_each_in_lanes::<8>(&msgs[at..], &mut out[at..]),
            4.. => digests_each_in_lanes::<4>(&msgs[at..], &mut out[at..]),
            _ => {
                out[at] = packet_digest(msgs[at]);
                1
            }
        };
    }
}

/// Digests the first `L` of `msgs` (of one length; the caller checked both hold them) into
/// the first `L` of `out`; returns `L`.
fn digests_each_in_lanes<const L: usize>(msgs: &[&[u8]], out: &mut [Digest]) -> usize {
    let lanes: [&[u8]; L] = std::array::from_fn(|l| msgs[l]);
    match crate::sha256_lanes::digest(lanes) {
        Some(full) => {
            for (o, d) in out.iter_mut().zip(&full) {
                o.copy_from_slice(&d[..DIGEST_LEN]);
            }
        }
        None => {
            for (o, m) in out.iter_mut().zip(lanes) {
                *o = packet_digest(m);
            }
        }
    }
    L
}

/// Digests packets `at..at + L` of `packets` into their places in `out` (the caller checked
/// both hold them); returns `L`.
fn digests_of_lanes<const L: usize>(
    packets: &[u8],
    packet_len: usize,
    out: &mut [u8],
    at: usize,
) -> usize {
    let msgs: [&[u8]; L] =
        std::array::from_fn(|l| &packets[(at + l) * packet_len..(at + l + 1) * packet_len]);
    let outs = out[at * DIGEST_LEN..(at + L) * DIGEST_LEN].chunks_exact_mut(DIGEST_LEN);
    match (L > 1).then(|| crate::sha256_lanes::digest(msgs)).flatten() {
        Some(full) => {
            for (o, d) in outs.zip(&full) {
                o.copy_from_slice(&d[..DIGEST_LEN]);
            }
        }
        None => {
            for (o, m) in outs.zip(msgs) {
                o.copy_from_slice(&packet_digest(m));
            }
        }
    }
    L
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_of_many_packets_are_each_packets_digest() {
        let plen = 1436;
        for count in [0usize, 1, 3, 4, 7, 8, 12, 31, 255] {
            let packets: Vec<u8> = (0..count * plen).map(|i| (i * 31 % 251) as u8).collect();
            let mut out = vec![0u8; count * DIGEST_LEN];
            packet_digests(&packets, plen, &mut out);
            for (i, d) in out.chunks_exact(DIGEST_LEN).enumerate() {
                assert_eq!(
                    d,
                    packet_digest(&packets[i * plen..(i + 1) * plen]),
                    "{count}: {i}"
                );
            }
        }
        // `out` shorter than the packets: only what it holds.
        let packets = vec![9u8; 3 * 100];
        let mut out = vec![0u8; DIGEST_LEN + 3];
        packet_digests(&packets, 100, &mut out);
        assert_eq!(out[..DIGEST_LEN], packet_digest(&packets[..100]));
        assert_eq!(out[DIGEST_LEN..], [0, 0, 0]);
    }

    #[test]
    fn digests_of_separate_packets_are_each_packets_digest() {
        // Runs of one length broken by odd lengths (FDT packets), of every count up to 20.
        for count in 0usize..20 {
            let packets: Vec<Vec<u8>> = (0..count)
                .map(|i| {
                    let len = if i % 7 == 3 { 700 + i } else { 1436 };
                    (0..len).map(|b| (b * 31 + i * 7) as u8).collect()
                })
                .collect();
            let msgs: Vec<&[u8]> = packets.iter().map(Vec::as_slice).collect();
            let mut out = vec![[0u8; DIGEST_LEN]; count];
            packet_digests_each(&msgs, &mut out);
            for (i, d) in out.iter().enumerate() {
                assert_eq!(*d, packet_digest(&packets[i]), "{count}: {i}");
            }
            // `out` shorter than the packets: only what it holds.
            let mut short = vec![[9u8; DIGEST_LEN]; count / 2];
            packet_digests_each(&msgs, &mut short);
            assert_eq!(short, out[..count / 2]);
        }
    }

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
