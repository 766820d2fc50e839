//! Arithmetic in GF(2^8) with the primitive polynomial x^8 + x^4 + x^3 + x^2 + 1 (0x11D).
//!
//! This is the field of RFC 5510 (FEC Encoding ID 5) and of Rizzo's `fec.c`, zfec and OpenFEC.
//! The generator `alpha` is the element `2` (the polynomial `x`). Addition and subtraction are
//! both XOR. All tables are built at compile time.

/// The primitive polynomial of the field, including the x^8 term.
pub const PRIMITIVE_POLYNOMIAL: u16 = 0x11D;

/// Number of non-zero field elements (the order of the multiplicative group).
pub const GROUP_ORDER: usize = 255;

const fn build_exp() -> [u8; 2 * GROUP_ORDER] {
    let mut table = [0u8; 2 * GROUP_ORDER];
    let mut value: u16 = 1;
    let mut i = 0;
    while i < 2 * GROUP_ORDER {
        table[i] = value as u8;
        value <<= 1;
        if value & 0x100 != 0 {
            value ^= PRIMITIVE_POLYNOMIAL;
        }
        i += 1;
    }
    table
}

const fn build_log(exp: &[u8; 2 * GROUP_ORDER]) -> [u8; 256] {
    let mut table = [0u8; 256];
    let mut i = 0;
    while i < GROUP_ORDER {
        table[exp[i] as usize] = i as u8;
        i += 1;
    }
    table
}

const fn build_mul(exp: &[u8; 2 * GROUP_ORDER], log: &[u8; 256]) -> [[u8; 256]; 256] {
    let mut table = [[0u8; 256]; 256];
    let mut a = 1;
    while a < 256 {
        let mut b = 1;
        while b < 256 {
            table[a][b] = exp[log[a] as usize + log[b] as usize];
            b += 1;
        }
        a += 1;
    }
    table
}

const fn build_inv(exp: &[u8; 2 * GROUP_ORDER], log: &[u8; 256]) -> [u8; 256] {
    let mut table = [0u8; 256];
    let mut a = 1;
    while a < 256 {
        table[a] = exp[GROUP_ORDER - log[a] as usize];
        a += 1;
    }
    table
}

/// `EXP[i] = alpha^i` for `0 <= i < 510`; doubled so that `EXP[log a + log b]` needs no reduction.
pub static EXP: [u8; 2 * GROUP_ORDER] = build_exp();

/// `LOG[a]` is the discrete logarithm of `a` to base alpha, for `a != 0`. `LOG[0]` is 0 and meaningless.
pub static LOG: [u8; 256] = build_log(&build_exp());

/// `INV[a]` is the multiplicative inverse of `a`, for `a != 0`. `INV[0]` is 0 and meaningless.
pub static INV: [u8; 256] = build_inv(&build_exp(), &build_log(&build_exp()));

/// Full product table: `MUL_TABLE[a][b] = a * b`. Row `a` is the lookup table of the linear map
/// "multiply by `a`", used by the scalar slice kernels in [`crate::kernel`].
pub static MUL_TABLE: [[u8; 256]; 256] = build_mul(&build_exp(), &build_log(&build_exp()));

/// `alpha^e` for any exponent (reduced modulo 255, the group order).
#[inline]
pub fn exp(e: usize) -> u8 {
    EXP[e % GROUP_ORDER]
}

/// Field addition (and subtraction): XOR.
#[inline]
pub fn add(a: u8, b: u8) -> u8 {
    a ^ b
}

/// Field multiplication.
#[inline]
pub fn mul(a: u8, b: u8) -> u8 {
    MUL_TABLE[a as usize][b as usize]
}

/// Multiplicative inverse; `None` for 0, which has none.
#[inline]
pub fn inv(a: u8) -> Option<u8> {
    if a == 0 {
        None
    } else {
        Some(INV[a as usize])
    }
}

/// Field division `a / b`; `None` when `b == 0`.
#[inline]
pub fn div(a: u8, b: u8) -> Option<u8> {
    inv(b).map(|b_inv| mul(a, b_inv))
}

/// Carry-less "Russian peasant" multiplication reduced by 0x11D, independent of the
/// exp/log tables: the reference the tables are tested against, and what the SIMD kernels'
/// constant tables are built from.
pub(crate) const fn mul_bitwise(mut a: u8, mut b: u8) -> u8 {
    let mut product = 0u8;
    while b != 0 {
        if b & 1 != 0 {
            product ^= a;
        }
        let carry = a & 0x80 != 0;
        a <<= 1;
        if carry {
            a ^= (PRIMITIVE_POLYNOMIAL & 0xFF) as u8;
        }
        b >>= 1;
    }
    product
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mul_matches_bitwise_reference_for_all_pairs() {
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                assert_eq!(mul(a, b), mul_bitwise(a, b), "{a} * {b}");
            }
        }
    }

    #[test]
    fn exp_table_is_powers_of_two_and_generates_the_group() {
        let mut seen = [false; 256];
        let mut power = 1u8;
        for (i, &value) in EXP.iter().enumerate() {
            assert_eq!(value, power, "EXP[{i}]");
            if i < GROUP_ORDER {
                assert!(
                    !seen[value as usize],
                    "alpha^{i} repeats: 2 is not primitive"
                );
                seen[value as usize] = true;
            }
            power = mul_bitwise(power, 2);
        }
        assert!(!seen[0]);
        assert_eq!(seen.iter().filter(|s| **s).count(), GROUP_ORDER);
        // Known values of this field: alpha^8 = 0x1D, alpha^255 = 1.
        assert_eq!(EXP[8], 0x1D);
        assert_eq!(exp(255), 1);
        assert_eq!(exp(256), 2);
    }

    #[test]
    fn log_is_inverse_of_exp() {
        for a in 1..=255u8 {
            assert_eq!(EXP[LOG[a as usize] as usize], a);
        }
        for i in 0..GROUP_ORDER {
            assert_eq!(LOG[EXP[i] as usize] as usize, i);
        }
    }

    #[test]
    fn multiplicative_inverse() {
        assert_eq!(inv(0), None);
        for a in 1..=255u8 {
            let a_inv = inv(a).expect("non-zero has an inverse");
            assert_eq!(mul_bitwise(a, a_inv), 1, "inverse of {a}");
            assert_eq!(div(a, a), Some(1));
        }
        assert_eq!(div(7, 0), None);
    }

    #[test]
    fn field_laws_spot_checks() {
        for a in (0..=255u8).step_by(7) {
            for b in (0..=255u8).step_by(11) {
                for c in (0..=255u8).step_by(13) {
                    assert_eq!(mul(a, add(b, c)), add(mul(a, b), mul(a, c)));
                    assert_eq!(mul(a, mul(b, c)), mul(mul(a, b), c));
                }
                assert_eq!(mul(a, b), mul(b, a));
            }
        }
    }
}
