//! RFC 5052 §9.1 block partitioning: how an object of L bytes is cut into source blocks
//! of at most B source symbols of E bytes.
//!
//! ```text
//! T = ceil(L / E)              source symbols in the object
//! N = ceil(T / B)              source blocks
//! A_large = ceil(T / N)        symbols in each of the first I blocks
//! A_small = floor(T / N)       symbols in each of the remaining N - I blocks
//! I = T - A_small * N          number of larger blocks
//! ```
//!
//! The last source symbol of the object holds `L - (T - 1) * E` bytes of the object; it is
//! zero-padded to E bytes before encoding (RFC 5052 §9.1, RFC 5510 §5).

use crate::WireError;

/// The block partitioning of one object (RFC 5052 §9.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Partition {
    /// Transfer length L of the object in bytes.
    pub transfer_length: u64,
    /// Encoding symbol length E in bytes.
    pub symbol_len: u32,
    /// Maximum source block length B in symbols.
    pub max_source_block_len: u32,
    /// Number of source symbols T = ceil(L / E).
    pub nb_symbols: u64,
    /// Source symbols in each larger block (A_large).
    pub a_large: u32,
    /// Source symbols in each smaller block (A_small).
    pub a_small: u32,
    /// Number of larger blocks (I); they come first.
    pub nb_large: u32,
    /// Number of source blocks N (0 for an empty object).
    pub nb_blocks: u32,
}

impl Partition {
    /// Partitions an object of `transfer_length_bytes` bytes into blocks of at most
    /// `max_source_block_len` symbols of `symbol_len` bytes. A transfer length of 0 gives
    /// 0 blocks. Fails if E or B is 0 or if the number of blocks does not fit in 32 bits.
    pub fn new(
        transfer_length_bytes: u64,
        symbol_len: u32,
        max_source_block_len: u32,
    ) -> Result<Self, WireError> {
        if symbol_len == 0 {
            return Err(WireError::InvalidParameter(
                "encoding symbol length must be > 0",
            ));
        }
        if max_source_block_len == 0 {
            return Err(WireError::InvalidParameter(
                "maximum source block length must be > 0",
            ));
        }
        let t = transfer_length_bytes.div_ceil(u64::from(symbol_len));
        let n = t.div_ceil(u64::from(max_source_block_len));
        let nb_blocks = u32::try_from(n)
            .map_err(|_| WireError::InvalidParameter("number of source blocks exceeds 2^32-1"))?;
        let (a_large, a_small, nb_large) = if n == 0 {
            (0, 0, 0)
        } else {
            let a_large = t.div_ceil(n);
            let a_small = t / n;
            let nb_large = t - a_small * n;
            // a_large <= B fits u32; nb_large < n fits u32.
            (a_large as u32, a_small as u32, nb_large as u32)
        };
        Ok(Partition {
            transfer_length: transfer_length_bytes,
            symbol_len,
            max_source_block_len,
            nb_symbols: t,
            a_large,
            a_small,
            nb_large,
            nb_blocks,
        })
    }

    /// Number of source blocks N.
    pub fn blocks(&self) -> u32 {
        self.nb_blocks
    }

    /// Total number of source symbols T of the object.
    pub fn total_symbols(&self) -> u64 {
        self.nb_symbols
    }

    /// Number of source symbols k of block `sbn` (0 if `sbn` is not a block of the object).
    pub fn source_symbols(&self, sbn: u32) -> u32 {
        if sbn >= self.nb_blocks {
            0
        } else if sbn < self.nb_large {
            self.a_large
        } else {
            self.a_small
        }
    }

    /// Index in the object of the first source symbol of block `sbn`
    /// (the total number of symbols T if `sbn` >= the number of blocks).
    pub fn first_symbol(&self, sbn: u32) -> u64 {
        let sbn = u64::from(sbn.min(self.nb_blocks));
        let large = sbn.min(u64::from(self.nb_large));
        large * u64::from(self.a_large) + (sbn - large) * u64::from(self.a_small)
    }

    /// Byte offset in the object of the first byte of block `sbn`
    /// (the transfer length if `sbn` >= the number of blocks).
    pub fn block_offset(&self, sbn: u32) -> u64 {
        (self.first_symbol(sbn) * u64::from(self.symbol_len)).min(self.transfer_length)
    }

    /// Number of object bytes in block `sbn`, without the padding of the last symbol.
    pub fn block_bytes(&self, sbn: u32) -> u64 {
        self.block_offset(sbn.saturating_add(1)) - self.block_offset(sbn)
    }

    /// Number of object bytes in the last source symbol of the object (1..=E), or 0 for an
    /// empty object. The rest of that symbol, `E - last_symbol_len()` bytes, is zero padding.
    pub fn last_symbol_len(&self) -> u32 {
        if self.nb_symbols == 0 {
            return 0;
        }
        let rem = self.transfer_length % u64::from(self.symbol_len);
        if rem == 0 {
            self.symbol_len
        } else {
            rem as u32
        }
    }

    /// The block holding the source symbol of index `symbol` in the object, with the ESI
    /// of that symbol in the block; `None` if `symbol` >= T.
    pub fn locate_symbol(&self, symbol: u64) -> Option<(u32, u32)> {
        if symbol >= self.nb_symbols {
            return None;
        }
        let large_symbols = u64::from(self.nb_large) * u64::from(self.a_large);
        if symbol < large_symbols {
            let a = u64::from(self.a_large);
            Some(((symbol / a) as u32, (symbol % a) as u32))
        } else {
            let a = u64::from(self.a_small);
            let rel = symbol - large_symbols;
            Some((self.nb_large + (rel / a) as u32, (rel % a) as u32))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn empty_object_has_no_block() {
        let p = Partition::new(0, 1408, 223).unwrap();
        assert_eq!(p.blocks(), 0);
        assert_eq!(p.total_symbols(), 0);
        assert_eq!(p.source_symbols(0), 0);
        assert_eq!(p.first_symbol(0), 0);
        assert_eq!(p.last_symbol_len(), 0);
        assert_eq!(p.locate_symbol(0), None);
    }

    #[test]
    fn zero_parameters_are_errors() {
        assert!(Partition::new(10, 0, 1).is_err());
        assert!(Partition::new(10, 1, 0).is_err());
        // 2^40 symbols in blocks of 1: more than 2^32 blocks.
        assert!(Partition::new(1 << 40, 1, 1).is_err());
    }

    #[test]
    fn rfc5052_worked_examples() {
        // T = 10 symbols, B = 4: N = 3, A_large = 4, A_small = 3, I = 1 -> 4, 3, 3
        let p = Partition::new(10 * 100, 100, 4).unwrap();
        assert_eq!((p.blocks(), p.a_large, p.a_small, p.nb_large), (3, 4, 3, 1));
        assert_eq!(
            (0..3).map(|b| p.source_symbols(b)).collect::<Vec<_>>(),
            [4, 3, 3]
        );
        assert_eq!(
            (0..4).map(|b| p.first_symbol(b)).collect::<Vec<_>>(),
            [0, 4, 7, 10]
        );
        // Last symbol partially filled: L = 950 -> T = 10, last symbol holds 50 bytes.
        let p = Partition::new(950, 100, 4).unwrap();
        assert_eq!(p.total_symbols(), 10);
        assert_eq!(p.last_symbol_len(), 50);
        assert_eq!(p.block_bytes(2), 250);
        // isnode default: E = 1408, B = 223. 1 MiB -> T = 745, N = 4, 187,186,186,186.
        let p = Partition::new(1 << 20, 1408, 223).unwrap();
        assert_eq!(p.total_symbols(), 745);
        assert_eq!(
            (0..4).map(|b| p.source_symbols(b)).collect::<Vec<_>>(),
            [187, 186, 186, 186]
        );
        // Exactly two full codewords.
        let p = Partition::new(2 * 223 * 1408, 1408, 223).unwrap();
        assert_eq!(
            (p.blocks(), p.a_large, p.a_small, p.nb_large),
            (2, 223, 223, 0)
        );
        assert_eq!(p.last_symbol_len(), 1408);
        // Single short block.
        let p = Partition::new(1, 1408, 223).unwrap();
        assert_eq!(
            (p.blocks(), p.source_symbols(0), p.last_symbol_len()),
            (1, 1, 1)
        );
    }

    proptest! {
        #[test]
        fn partition_properties(l in 0u64..5_000_000, e in 1u32..3000, b in 1u32..300) {
            let p = Partition::new(l, e, b).unwrap();
            let t = l.div_ceil(u64::from(e));
            prop_assert_eq!(p.total_symbols(), t);
            let sizes: Vec<u32> = (0..p.blocks()).map(|s| p.source_symbols(s)).collect();
            prop_assert_eq!(sizes.iter().map(|&k| u64::from(k)).sum::<u64>(), t);
            if let (Some(max), Some(min)) = (sizes.iter().max(), sizes.iter().min()) {
                prop_assert!(max - min <= 1);
                prop_assert!(*min >= 1);
            }
            prop_assert!(sizes.windows(2).all(|w| w[0] >= w[1]), "larger blocks first");
            prop_assert!(sizes.iter().all(|&k| k <= b));
            prop_assert_eq!(u64::from(p.blocks()), t.div_ceil(u64::from(b)));
            let mut first = 0u64;
            let mut bytes = 0u64;
            for sbn in 0..p.blocks() {
                prop_assert_eq!(p.first_symbol(sbn), first);
                prop_assert_eq!(p.locate_symbol(first), Some((sbn, 0)));
                let k = p.source_symbols(sbn);
                prop_assert_eq!(p.locate_symbol(first + u64::from(k) - 1), Some((sbn, k - 1)));
                first += u64::from(k);
                bytes += p.block_bytes(sbn);
            }
            prop_assert_eq!(p.first_symbol(p.blocks()), t);
            prop_assert_eq!(bytes, l);
            prop_assert_eq!(p.locate_symbol(t), None);
        }
    }
}
