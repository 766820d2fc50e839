//! SHA-256 of several messages of one length at once, with the CPU's SHA extensions.
//!
//! One SHA-256 is a chain: each `sha256rnds2` needs the one before it, so a single message
//! runs at the instruction's latency, not its throughput (about 1.7 GB/s on the machines
//! this was measured on, where the packet digests were half of ingest's CPU). The rounds
//! of `L` independent messages are interleaved here, so the CPU overlaps their chains. The
//! result is SHA-256 itself, bit for bit (FIPS 180-4; tests compare with the `sha2` crate
//! on every length up to three blocks and more). The rounds follow the `sha2` crate's
//! x86 backend (the Intel SHA extensions' reference sequence), one lane per message.

#![allow(unsafe_code)]

#[cfg(target_arch = "x86_64")]
use core::arch::x86_64::*;

/// The initial hash value (FIPS 180-4, 5.3.3).
const H0: [u32; 8] = [
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
];

/// The round constants (FIPS 180-4, 4.2.2).
const K: [u32; 64] = [
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
];

/// Whether this CPU has the instructions [`digest`] needs.
pub(crate) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("sha")
            && std::arch::is_x86_feature_detected!("sse4.1")
            && std::arch::is_x86_feature_detected!("ssse3")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The SHA-256 of each of `L` messages, which must all have the same length; `None` when
/// they do not or when the CPU lacks the SHA extensions ([`available`]): the caller then
/// digests them one by one.
pub(crate) fn digest<const L: usize>(msgs: [&[u8]; L]) -> Option<[[u8; 32]; L]> {
    let len = msgs.first()?.len();
    if msgs.iter().any(|m| m.len() != len) || !available() {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    {
        let mut states = [H0; L];
        let whole = len - len % 64;
        let heads = msgs.map(|m| &m[..whole]);
        // SAFETY: `available()` checked the CPU features the function is compiled for, and
        // every message has the same length, a multiple of 64 bytes.
        unsafe { blocks(&mut states, heads) };
        // The padding (FIPS 180-4, 5.1.1): the tail, 0x80, zeros, the bit length; one block
        // or two, the same for every message.
        let tail_len = len - whole;
        let pad_len = if tail_len < 56 { 64 } else { 128 };
        let bits = (len as u64).wrapping_mul(8).to_be_bytes();
        let mut pads = [[0u8; 128]; L];
        for (pad, m) in pads.iter_mut().zip(msgs) {
            pad[..tail_len].copy_from_slice(&m[whole..]);
            pad[tail_len] = 0x80;
            pad[pad_len - 8..pad_len].copy_from_slice(&bits);
        }
        let tails: [&[u8]; L] = std::array::from_fn(|i| &pads[i][..pad_len]);
        // SAFETY: as above; every tail is `pad_len` bytes, 64 or 128.
        unsafe { blocks(&mut states, tails) };
        Some(states.map(|s| {
            let mut out = [0u8; 32];
            for (o, w) in out.chunks_exact_mut(4).zip(s) {
                o.copy_from_slice(&w.to_be_bytes());
            }
            out
        }))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

/// The message schedule's next four words from the previous sixteen.
///
/// # Safety
/// The CPU has the SHA, SSE2, SSSE3 and SSE4.1 extensions.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
unsafe fn schedule(v0: __m128i, v1: __m128i, v2: __m128i, v3: __m128i) -> __m128i {
    let t1 = _mm_sha256msg1_epu32(v0, v1);
    let t2 = _mm_alignr_epi8(v3, v2, 4);
    let t3 = _mm_add_epi32(t1, t2);
    _mm_sha256msg2_epu32(t3, v3)
}

/// Runs the compression function of every lane over its message's 64-byte blocks.
///
/// # Safety
/// The CPU has the SHA, SSE2, SSSE3 and SSE4.1 extensions; every message has the same
/// length, a multiple of 64.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
unsafe fn blocks<const L: usize>(states: &mut [[u32; 8]; L], msgs: [&[u8]; L]) {
    let len = msgs.first().map_or(0, |m| m.len());
    assert!(len % 64 == 0 && msgs.iter().all(|m| m.len() == len));
    let mask = _mm_set_epi64x(
        0x0C0D_0E0F_0809_0A0Bu64 as i64,
        0x0405_0607_0001_0203u64 as i64,
    );
    let mut abef = [_mm_setzero_si128(); L];
    let mut cdgh = [_mm_setzero_si128(); L];
    for (l, state) in states.iter().enumerate() {
        // SAFETY: `state` is 8 u32, two unaligned 16-byte loads.
        let (dcba, efgh) = unsafe {
            let p = state.as_ptr().cast::<__m128i>();
            (_mm_loadu_si128(p), _mm_loadu_si128(p.add(1)))
        };
        let cdab = _mm_shuffle_epi32(dcba, 0xB1);
        let efgh = _mm_shuffle_epi32(efgh, 0x1B);
        abef[l] = _mm_alignr_epi8(cdab, efgh, 8);
        cdgh[l] = _mm_blend_epi16(efgh, cdab, 0xF0);
    }
    for at in (0..len).step_by(64) {
        let (abef_save, cdgh_save) = (abef, cdgh);
        // w[l][j]: words 4j..4j+4 of the schedule, in a ring of five.
        let mut w = [[_mm_setzero_si128(); 5]; L];
        for (l, m) in msgs.iter().enumerate() {
            let block = &m[at..at + 64];
            for (j, chunk) in block.chunks_exact(16).enumerate() {
                // SAFETY: `chunk` is 16 bytes; an unaligned load.
                let v = unsafe { _mm_loadu_si128(chunk.as_ptr().cast::<__m128i>()) };
                w[l][j] = _mm_shuffle_epi8(v, mask);
            }
        }
        for i in 0..16 {
            for l in 0..L {
                if i >= 4 {
                    let r = &mut w[l];
                    // SAFETY: this function's own target features.
                    r[i % 5] = unsafe {
                        schedule(
                            r[(i + 1) % 5],
                            r[(i + 2) % 5],
                            r[(i + 3) % 5],
                            r[(i + 4) % 5],
                        )
                    };
                }
                // SAFETY: K has 64 words; 4i + 3 < 64.
                let k = unsafe { _mm_loadu_si128(K.as_ptr().add(4 * i).cast::<__m128i>()) };
                let t1 = _mm_add_epi32(w[l][i % 5], k);
                cdgh[l] = _mm_sha256rnds2_epu32(cdgh[l], abef[l], t1);
                let t2 = _mm_shuffle_epi32(t1, 0x0E);
                abef[l] = _mm_sha256rnds2_epu32(abef[l], cdgh[l], t2);
            }
        }
        for l in 0..L {
            abef[l] = _mm_add_epi32(abef[l], abef_save[l]);
            cdgh[l] = _mm_add_epi32(cdgh[l], cdgh_save[l]);
        }
    }
    for (l, state) in states.iter_mut().enumerate() {
        let feba = _mm_shuffle_epi32(abef[l], 0x1B);
        let dchg = _mm_shuffle_epi32(cdgh[l], 0xB1);
        let dcba = _mm_blend_epi16(feba, dchg, 0xF0);
        let hgef = _mm_alignr_epi8(dchg, feba, 8);
        // SAFETY: `state` is 8 u32, two unaligned 16-byte stores.
        unsafe {
            let p = state.as_mut_ptr().cast::<__m128i>();
            _mm_storeu_si128(p, dcba);
            _mm_storeu_si128(p.add(1), hgef);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use sha2::Digest as _;

    fn reference(m: &[u8]) -> [u8; 32] {
        sha2::Sha256::digest(m).into()
    }

    #[test]
    fn every_length_up_to_three_blocks_is_sha256() {
        if !available() {
            eprintln!("no SHA extensions on this CPU: the lanes are not used here");
            return;
        }
        for len in 0..=200 {
            let a: Vec<u8> = (0..len).map(|i| (i * 7 + 1) as u8).collect();
            let b: Vec<u8> = (0..len).map(|i| (i * 13 + 5) as u8).collect();
            let got = digest([&a[..], &b[..]]).expect("same length");
            assert_eq!(got, [reference(&a), reference(&b)], "length {len}");
        }
    }

    #[test]
    fn different_lengths_are_left_to_the_caller() {
        assert!(digest([&[1u8, 2][..], &[3u8][..]]).is_none());
    }

    proptest! {
        #[test]
        fn four_lanes_of_packets_are_sha256(
            seed in any::<u64>(),
            len in 1000usize..1500,
        ) {
            prop_assume!(available());
            let msgs: Vec<Vec<u8>> = (0..4u64)
                .map(|l| (0..len).map(|i| (seed.wrapping_mul(l + 3) >> (i % 50)) as u8 ^ i as u8).collect())
                .collect();
            let got = digest([&msgs[0][..], &msgs[1][..], &msgs[2][..], &msgs[3][..]]).expect("same length");
            for (g, m) in got.iter().zip(&msgs) {
                prop_assert_eq!(*g, reference(m));
            }
        }
    }
}

#[cfg(test)]
mod speed {
    use super::*;
    use std::time::Instant;

    /// `cargo test --release -p isnode-wire sha256_lanes::speed -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn lanes_against_one() {
        let packets: Vec<Vec<u8>> = (0..4096u32).map(|i| vec![i as u8; 1436]).collect();
        let gb = packets.len() as f64 * 1436.0 / 1e9;
        for round in 0..3 {
            let t = Instant::now();
            let mut x = 0u8;
            for p in &packets {
                x ^= <sha2::Sha256 as sha2::Digest>::digest(p)[0];
            }
            let one = t.elapsed().as_secs_f64() / gb;
            let t = Instant::now();
            for p in packets.chunks_exact(2) {
                x ^= digest([&p[0][..], &p[1][..]]).unwrap()[0][0];
            }
            let two = t.elapsed().as_secs_f64() / gb;
            let t = Instant::now();
            for p in packets.chunks_exact(4) {
                x ^= digest([&p[0][..], &p[1][..], &p[2][..], &p[3][..]]).unwrap()[0][0];
            }
            let four = t.elapsed().as_secs_f64() / gb;
            let t = Instant::now();
            for p in packets.chunks_exact(8) {
                let a: [&[u8]; 8] = std::array::from_fn(|i| &p[i][..]);
                x ^= digest(a).unwrap()[0][0];
            }
            let eight = t.elapsed().as_secs_f64() / gb;
            eprintln!("round {round}: s/GB one {one:.3} two {two:.3} four {four:.3} eight {eight:.3} ({x})");
        }
    }
}
