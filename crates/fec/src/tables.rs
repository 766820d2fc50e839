//! Constant tables of multiplication by each of the 256 field elements, in the two forms the
//! SIMD kernels load: the 8x8 bit matrix for `GF2P8AFFINEQB` ([`AFFINE`]) and the pair of
//! 16-entry nibble lookups for `PSHUFB` ([`NIBBLE_TABLES`]).
//!
//! A leaf of the crate: built at compile time from [`crate::gf::mul_bitwise`], read by
//! [`crate::kernel`] (which re-exports them) and by the private `simd` module.

use crate::gf::mul_bitwise;

/// The 8x8 bit matrix of "multiply by `c`" in GF(2^8)/0x11D, in the layout of
/// `GF2P8AFFINEQB`: byte `7 - i` of the result is the row giving output bit `i`, whose bit
/// `j` is bit `i` of `c * 2^j`.
pub const fn affine_matrix(c: u8) -> u64 {
    let mut matrix = 0u64;
    let mut i = 0;
    while i < 8 {
        let mut row = 0u8;
        let mut j = 0;
        while j < 8 {
            if (mul_bitwise(c, 1 << j) >> i) & 1 != 0 {
                row |= 1 << j;
            }
            j += 1;
        }
        matrix |= (row as u64) << (8 * (7 - i));
        i += 1;
    }
    matrix
}

const fn build_affine() -> [u64; 256] {
    let mut table = [0u64; 256];
    let mut c = 0;
    while c < 256 {
        table[c] = affine_matrix(c as u8);
        c += 1;
    }
    table
}

const fn build_nibbles() -> [[u8; 32]; 256] {
    let mut table = [[0u8; 32]; 256];
    let mut c = 0;
    while c < 256 {
        let mut x = 0;
        while x < 16 {
            table[c][x] = mul_bitwise(c as u8, x as u8);
            table[c][16 + x] = mul_bitwise(c as u8, (x as u8) << 4);
            x += 1;
        }
        c += 1;
    }
    table
}

/// `AFFINE[c] = affine_matrix(c)`.
pub static AFFINE: [u64; 256] = build_affine();

/// `NIBBLE_TABLES[c]`: bytes `0..16` are `c * x`, bytes `16..32` are `c * (x << 4)`, for
/// `x < 16`; `c * b` is the XOR of the two lookups of `b`'s low and high nibble.
pub static NIBBLE_TABLES: [[u8; 32]; 256] = build_nibbles();

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gf;

    #[test]
    fn affine_matrices_multiply() {
        // Apply the bit matrix by hand: output bit i = parity(byte (7 - i) & x).
        for c in 0..=255u8 {
            let m = affine_matrix(c);
            for x in 0..=255u8 {
                let mut y = 0u8;
                for i in 0..8 {
                    let row = (m >> (8 * (7 - i))) as u8;
                    y |= (((row & x).count_ones() & 1) as u8) << i;
                }
                assert_eq!(y, gf::mul(c, x), "{c} * {x}");
            }
        }
    }
}
