//! Slice kernels: the hot loops of encoding and decoding.
//!
//! Every byte of parity or of a rebuilt symbol is produced here, by [`mul`] and [`mul_add`]
//! over whole symbols. This is the single place the hot loop lives: the scalar, safe,
//! table-driven path below is the reference that faster (SIMD) kernels must match.

use crate::gf::MUL_TABLE;

/// Name of the kernel in use, for benchmark reports.
pub fn kernel_name() -> &'static str {
    "scalar-table"
}

/// `dst[i] ^= coef * src[i]` for every `i` (multiply-accumulate in GF(2^8)).
///
/// # Panics
/// If `dst` and `src` differ in length (callers check symbol lengths first).
#[inline]
pub fn mul_add(dst: &mut [u8], src: &[u8], coef: u8) {
    assert_eq!(dst.len(), src.len(), "mul_add: slice lengths differ");
    match coef {
        0 => {}
        1 => {
            for (d, s) in dst.iter_mut().zip(src) {
                *d ^= *s;
            }
        }
        _ => {
            let row = &MUL_TABLE[coef as usize];
            for (d, s) in dst.iter_mut().zip(src) {
                *d ^= row[*s as usize];
            }
        }
    }
}

/// `dst[i] = coef * src[i]` for every `i`.
///
/// # Panics
/// If `dst` and `src` differ in length (callers check symbol lengths first).
#[inline]
pub fn mul(dst: &mut [u8], src: &[u8], coef: u8) {
    assert_eq!(dst.len(), src.len(), "mul: slice lengths differ");
    match coef {
        0 => dst.fill(0),
        1 => dst.copy_from_slice(src),
        _ => {
            let row = &MUL_TABLE[coef as usize];
            for (d, s) in dst.iter_mut().zip(src) {
                *d = row[*s as usize];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gf;

    fn sample(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[test]
    fn mul_add_matches_field_arithmetic_for_every_coefficient() {
        let src = sample(1031, 5);
        let base = sample(1031, 77);
        for coef in 0..=255u8 {
            let mut dst = base.clone();
            mul_add(&mut dst, &src, coef);
            for i in 0..src.len() {
                assert_eq!(
                    dst[i],
                    base[i] ^ gf::mul(coef, src[i]),
                    "coef {coef} at {i}"
                );
            }
        }
    }

    #[test]
    fn mul_matches_field_arithmetic_for_every_coefficient() {
        let src = sample(257, 9);
        for coef in 0..=255u8 {
            let mut dst = vec![0xA5; src.len()];
            mul(&mut dst, &src, coef);
            for i in 0..src.len() {
                assert_eq!(dst[i], gf::mul(coef, src[i]), "coef {coef} at {i}");
            }
        }
    }

    #[test]
    fn empty_slices_are_fine() {
        mul_add(&mut [], &[], 3);
        mul(&mut [], &[], 3);
    }

    #[test]
    #[should_panic(expected = "lengths differ")]
    fn length_mismatch_panics() {
        mul_add(&mut [0u8; 3], &[0u8; 4], 3);
    }
}
