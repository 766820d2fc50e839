//! CRC32C of a concatenation from the CRC32Cs of its parts, so that bytes checked once are
//! not run through the CRC again for a second check over the same bytes.
//!
//! CRC32C is linear over GF(2): for any `crc` and bytes `b` of length `L`,
//! `crc32c_append(crc, b) = M_L(crc) ^ crc32c(b)`, where `M_L` (the register advanced over
//! `L` zero bytes, without the initial and final inversions) is a linear map of 32-bit
//! values, independent of `b`. [`ZeroShift`] is `M_L` for one `L`, tabulated (4 lookups per
//! application). The values computed this way are the CRC32Cs themselves, bit for bit:
//! nothing is approximated, so no check using them detects less.

/// `M_L` for one length `L`: the CRC of a prefix carried over `L` more bytes.
#[derive(Clone)]
pub struct ZeroShift {
    len: usize,
    tables: Box<[[u32; 256]; 4]>,
}

impl ZeroShift {
    /// The map for `len` bytes.
    pub fn new(len: usize) -> ZeroShift {
        let zeros = vec![0u8; len];
        let base = crc32c::crc32c(&zeros);
        // The image of each bit: M(e_i) = crc32c_append(e_i, zeros) ^ crc32c(zeros).
        let bit = |i: usize| crc32c::crc32c_append(1 << i, &zeros) ^ base;
        let images: Vec<u32> = (0..32).map(bit).collect();
        let mut tables = Box::new([[0u32; 256]; 4]);
        for (j, table) in tables.iter_mut().enumerate() {
            for (byte, slot) in table.iter_mut().enumerate() {
                *slot = (0..8)
                    .filter(|b| byte & (1 << b) != 0)
                    .fold(0, |acc, b| acc ^ images[8 * j + b]);
            }
        }
        ZeroShift { len, tables }
    }

    /// The length the map carries a CRC over.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the map is for zero bytes (the identity).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `M_L(crc)`.
    pub fn apply(&self, crc: u32) -> u32 {
        let t = &self.tables;
        t[0][(crc & 0xff) as usize]
            ^ t[1][((crc >> 8) & 0xff) as usize]
            ^ t[2][((crc >> 16) & 0xff) as usize]
            ^ t[3][(crc >> 24) as usize]
    }

    /// `crc32c_append(crc, b)` for bytes `b` of this map's length whose own CRC32C is `b_crc`.
    pub fn append(&self, crc: u32, b_crc: u32) -> u32 {
        self.apply(crc) ^ b_crc
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The CRC of a concatenation from its parts' CRCs equals the CRC of the whole.
        #[test]
        fn append_from_parts_equals_the_crc_of_the_whole(
            a in proptest::collection::vec(any::<u8>(), 0..300),
            b in proptest::collection::vec(any::<u8>(), 0..300),
            start in any::<u32>(),
        ) {
            let shift = ZeroShift::new(b.len());
            let whole = crc32c::crc32c_append(crc32c::crc32c_append(start, &a), &b);
            let parts = shift.append(crc32c::crc32c_append(start, &a), crc32c::crc32c(&b));
            prop_assert_eq!(parts, whole);
        }
    }

    #[test]
    fn the_empty_shift_is_the_identity() {
        let s = ZeroShift::new(0);
        assert!(s.is_empty());
        for c in [0, 1, 0xdead_beef, u32::MAX] {
            assert_eq!(s.apply(c), c);
        }
        assert_eq!(ZeroShift::new(1408).len(), 1408);
    }
}
