//! Systematic Reed-Solomon erasure code over GF(2^8): FEC Encoding ID 5 of RFC 5510.
//!
//! The parity is byte-identical to Rizzo's `fec.c`, zfec and OpenFEC (checked against zfec test
//! vectors in `tests/vectors/`): primitive polynomial 0x11D, Vandermonde evaluation points
//! `x_0 = 0`, `x_j = alpha^(j-1)`, made systematic by the inverse of the top `k x k` part.
//!
//! A [`Code`] with `k` source and `n` encoding symbols names its symbols by ESI (encoding symbol
//! ID): ESIs `0..k` are the source symbols, `k..n` the repair symbols. Any `k` of the `n` symbols
//! rebuild the rest. Decoding work is proportional to the loss: with no source symbol missing,
//! [`Code::reconstruct`] does nothing; with `e` missing it solves an `e x e` system and computes
//! only the `e` lost symbols.
//!
//! ```
//! use isnode_fec::Code;
//!
//! let code = Code::new(3, 5)?; // k = 3 source, n = 5 encoding symbols
//! let source = [b"abcd", b"efgh", b"ijkl"];
//! let mut repair = [[0u8; 4]; 2];
//! {
//!     let source: Vec<&[u8]> = source.iter().map(|s| &s[..]).collect();
//!     let mut out: Vec<&mut [u8]> = repair.iter_mut().map(|r| &mut r[..]).collect();
//!     code.encode(&source, &mut out)?; // ESIs 3 and 4
//! }
//! // Lose ESIs 0 and 2; rebuild them from the three that are left.
//! let mut shards = [[0u8; 4], *source[1], [0u8; 4], repair[0], repair[1]];
//! let present = [false, true, false, true, true];
//! let mut refs: Vec<&mut [u8]> = shards.iter_mut().map(|s| &mut s[..]).collect();
//! code.reconstruct(&mut refs, &present)?;
//! assert_eq!(&shards[0], b"abcd");
//! assert_eq!(&shards[2], b"ijkl");
//! # Ok::<(), isnode_fec::FecError>(())
//! ```
//!
//! Modules: [`gf`] (field tables), [`matrix`] (matrices, generator), [`kernel`] (the slice
//! multiply-accumulate loops that do all the byte work).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod gf;
pub mod kernel;
pub mod matrix;

use matrix::Matrix;

/// The largest number of encoding symbols in one codeword: 255, the limit of a GF(2^8)
/// Reed-Solomon code (RFC 5510).
pub const MAX_ENCODING_SYMBOLS: usize = 255;

/// Why a code could not be built or a symbol set could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FecError {
    /// `n` is above [`MAX_ENCODING_SYMBOLS`].
    #[error(
        "n = {n} exceeds {MAX_ENCODING_SYMBOLS}, the limit of a GF(2^8) Reed-Solomon codeword (RFC 5510)"
    )]
    TooManyEncodingSymbols {
        /// The requested number of encoding symbols.
        n: usize,
    },
    /// `k == 0`.
    #[error("k = 0: a Reed-Solomon code needs at least one source symbol")]
    NoSourceSymbols,
    /// `k > n`.
    #[error(
        "k = {k} exceeds n = {n}: a code cannot have more source symbols than encoding symbols"
    )]
    SourceExceedsEncoding {
        /// The requested number of source symbols.
        k: usize,
        /// The requested number of encoding symbols.
        n: usize,
    },
    /// A slice of symbols (or of presence flags) has the wrong number of entries.
    #[error("wrong number of {what}: got {got}, expected {expected}")]
    WrongSymbolCount {
        /// What was counted, e.g. "source symbols".
        what: &'static str,
        /// How many were passed.
        got: usize,
        /// How many the code needs.
        expected: usize,
    },
    /// The symbols of one codeword are not all the same length.
    #[error(
        "symbol lengths differ: the symbol with ESI {esi} has {len_bytes} bytes, the others {expected_bytes}"
    )]
    SymbolLengthMismatch {
        /// ESI of the first symbol whose length differs.
        esi: usize,
        /// Its length in bytes.
        len_bytes: usize,
        /// The length of the first symbol, in bytes.
        expected_bytes: usize,
    },
    /// Fewer than `k` symbols are present: the codeword cannot be decoded.
    #[error("not enough symbols to decode: got {got}, need {need} (k)")]
    NotEnoughSymbols {
        /// Number of symbols present.
        got: usize,
        /// Number needed (`k`).
        need: usize,
    },
    /// An ESI at or beyond `n` was asked for.
    #[error("ESI {esi} out of range: this code has n = {n} encoding symbols (ESIs 0..{n})")]
    EsiOutOfRange {
        /// The ESI asked for.
        esi: usize,
        /// The number of encoding symbols of the code.
        n: usize,
    },
}

/// An RFC 5510 code with `k` source and `n` encoding symbols (`1 <= k <= n <= 255`).
///
/// Cheap to build (`O(n k)`), immutable, and shareable between threads.
#[derive(Clone)]
pub struct Code {
    k: usize,
    n: usize,
    /// `(n - k) x k`: row `i` gives the repair symbol with ESI `k + i`.
    parity: Matrix,
}

impl std::fmt::Debug for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Code")
            .field("k", &self.k)
            .field("n", &self.n)
            .finish_non_exhaustive()
    }
}

impl Code {
    /// Builds the code with `k` source symbols and `n` encoding symbols in all.
    ///
    /// Fails if `k == 0`, `k > n` or `n > 255`.
    pub fn new(k: usize, n: usize) -> Result<Code, FecError> {
        if n > MAX_ENCODING_SYMBOLS {
            return Err(FecError::TooManyEncodingSymbols { n });
        }
        if k == 0 {
            return Err(FecError::NoSourceSymbols);
        }
        if k > n {
            return Err(FecError::SourceExceedsEncoding { k, n });
        }
        Ok(Code {
            k,
            n,
            parity: matrix::parity_rows(k, n),
        })
    }

    /// Number of source symbols, `k`.
    pub fn source_symbols(&self) -> usize {
        self.k
    }

    /// Number of encoding symbols, `n` (source plus repair).
    pub fn encoding_symbols(&self) -> usize {
        self.n
    }

    /// Number of repair symbols, `n - k`.
    pub fn repair_symbols(&self) -> usize {
        self.n - self.k
    }

    /// The `k` generator coefficients of the repair symbol with ESI `esi` (`k <= esi < n`):
    /// `symbol[esi] = sum_j coefficients[j] * source[j]`.
    pub fn repair_coefficients(&self, esi: usize) -> Result<&[u8], FecError> {
        if esi < self.k || esi >= self.n {
            return Err(FecError::EsiOutOfRange { esi, n: self.n });
        }
        Ok(self.parity.row(esi - self.k))
    }

    /// Computes repair symbols: `repair[i]` receives the symbol with ESI `k + i`.
    ///
    /// `source` must hold exactly `k` symbols, `repair.len() <= n - k`, and all slices must have
    /// the same length (any length, including 0 and odd lengths).
    pub fn encode(&self, source: &[&[u8]], repair: &mut [&mut [u8]]) -> Result<(), FecError> {
        let len_bytes = self.check_source(source)?;
        if repair.len() > self.repair_symbols() {
            return Err(FecError::EsiOutOfRange {
                esi: self.k + repair.len() - 1,
                n: self.n,
            });
        }
        for (i, symbol) in repair.iter().enumerate() {
            check_len(self.k + i, symbol.len(), len_bytes)?;
        }
        for (i, out) in repair.iter_mut().enumerate() {
            self.encode_row(self.parity.row(i), source, out);
        }
        Ok(())
    }

    /// Computes the single repair symbol with ESI `esi` (`k <= esi < n`) into `out`.
    pub fn encode_symbol(
        &self,
        source: &[&[u8]],
        esi: usize,
        out: &mut [u8],
    ) -> Result<(), FecError> {
        let len_bytes = self.check_source(source)?;
        let row = self.repair_coefficients(esi)?;
        check_len(esi, out.len(), len_bytes)?;
        self.encode_row(row, source, out);
        Ok(())
    }

    /// Rebuilds the missing source symbols in place.
    ///
    /// `shards.len() == n`, indexed by ESI; `present[esi]` tells which hold valid data. All
    /// shards, present or not, must have the same length (a missing shard is the buffer its
    /// symbol is written into). On success every source shard (ESI `< k`) is valid; present
    /// shards are never written and missing repair shards are left as they were. Fails, before
    /// writing anything, if fewer than `k` shards are present.
    pub fn reconstruct(&self, shards: &mut [&mut [u8]], present: &[bool]) -> Result<(), FecError> {
        self.check_shards(shards, present)?;
        self.rebuild_sources(shards, present)
    }

    /// Like [`Code::reconstruct`], and also recomputes the missing repair shards, so that on
    /// success all `n` shards are valid (used by volume repair).
    pub fn reconstruct_all(
        &self,
        shards: &mut [&mut [u8]],
        present: &[bool],
    ) -> Result<(), FecError> {
        self.check_shards(shards, present)?;
        self.rebuild_sources(shards, present)?;
        for esi in self.k..self.n {
            if present[esi] {
                continue;
            }
            // Take the output out of `shards` so the sources can be read while it is written.
            let out = std::mem::take(&mut shards[esi]);
            let source: Vec<&[u8]> = shards[..self.k].iter().map(|s| &**s).collect();
            self.encode_row(self.parity.row(esi - self.k), &source, out);
            shards[esi] = out;
        }
        Ok(())
    }

    fn encode_row(&self, row: &[u8], source: &[&[u8]], out: &mut [u8]) {
        debug_assert_eq!(row.len(), source.len());
        let mut terms = source.iter().zip(row);
        if let Some((first, &coef)) = terms.next() {
            kernel::mul(out, first, coef);
        }
        for (symbol, &coef) in terms {
            kernel::mul_add(out, symbol, coef);
        }
    }

    /// Checks `source` has `k` symbols of one length; returns that length.
    fn check_source(&self, source: &[&[u8]]) -> Result<usize, FecError> {
        if source.len() != self.k {
            return Err(FecError::WrongSymbolCount {
                what: "source symbols",
                got: source.len(),
                expected: self.k,
            });
        }
        let len_bytes = source[0].len();
        for (esi, symbol) in source.iter().enumerate() {
            check_len(esi, symbol.len(), len_bytes)?;
        }
        Ok(len_bytes)
    }

    fn check_shards(&self, shards: &[&mut [u8]], present: &[bool]) -> Result<(), FecError> {
        if shards.len() != self.n {
            return Err(FecError::WrongSymbolCount {
                what: "shards",
                got: shards.len(),
                expected: self.n,
            });
        }
        if present.len() != self.n {
            return Err(FecError::WrongSymbolCount {
                what: "presence flags",
                got: present.len(),
                expected: self.n,
            });
        }
        let len_bytes = shards[0].len();
        for (esi, shard) in shards.iter().enumerate() {
            check_len(esi, shard.len(), len_bytes)?;
        }
        let got = present.iter().filter(|&&p| p).count();
        if got < self.k {
            return Err(FecError::NotEnoughSymbols { got, need: self.k });
        }
        Ok(())
    }

    /// Rebuilds the missing source shards from the present sources and the first present repair
    /// shards. Shapes are already checked and at least `k` shards are present.
    ///
    /// With `L` the missing source ESIs (`e` of them), `P` the present ones and `R` the first
    /// `e` present repair ESIs: `G[R][L] s_L = p_R + G[R][P] s_P`, so
    /// `s_L = A^-1 p_R + A^-1 G[R][P] s_P` with `A = G[R][L]` (`e x e`, non-singular because
    /// the code is MDS). Each lost symbol is one linear combination of `k` present symbols.
    fn rebuild_sources(&self, shards: &mut [&mut [u8]], present: &[bool]) -> Result<(), FecError> {
        let lost: Vec<usize> = (0..self.k).filter(|&esi| !present[esi]).collect();
        let e = lost.len();
        if e == 0 {
            return Ok(());
        }
        let kept: Vec<usize> = (0..self.k).filter(|&esi| present[esi]).collect();
        let repair: Vec<usize> = (self.k..self.n)
            .filter(|&esi| present[esi])
            .take(e)
            .collect();
        assert_eq!(repair.len(), e, "check_shards guarantees k present shards");

        let mut a = Matrix::zero(e, e);
        let mut b = Matrix::zero(e, kept.len());
        for (r, &esi) in repair.iter().enumerate() {
            let row = self.parity.row(esi - self.k);
            for (c, &source_esi) in lost.iter().enumerate() {
                a.set(r, c, row[source_esi]);
            }
            for (c, &source_esi) in kept.iter().enumerate() {
                b.set(r, c, row[source_esi]);
            }
        }
        let a_inv = a.invert();
        assert!(
            a_inv.is_some(),
            "square submatrices of an MDS parity matrix are invertible"
        );
        let Some(a_inv) = a_inv else {
            return Ok(());
        };
        let from_kept = a_inv.mul(&b);

        for (i, &esi) in lost.iter().enumerate() {
            let out = std::mem::take(&mut shards[esi]);
            let inputs = repair
                .iter()
                .zip(a_inv.row(i))
                .chain(kept.iter().zip(from_kept.row(i)));
            let mut first = true;
            for (&input_esi, &coef) in inputs {
                if first {
                    kernel::mul(out, shards[input_esi], coef);
                    first = false;
                } else {
                    kernel::mul_add(out, shards[input_esi], coef);
                }
            }
            shards[esi] = out;
        }
        Ok(())
    }
}

fn check_len(esi: usize, len_bytes: usize, expected_bytes: usize) -> Result<(), FecError> {
    if len_bytes != expected_bytes {
        return Err(FecError::SymbolLengthMismatch {
            esi,
            len_bytes,
            expected_bytes,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_messages_are_clear() {
        assert_eq!(
            Code::new(10, 300).unwrap_err().to_string(),
            "n = 300 exceeds 255, the limit of a GF(2^8) Reed-Solomon codeword (RFC 5510)"
        );
        assert_eq!(Code::new(0, 10).unwrap_err(), FecError::NoSourceSymbols);
        assert_eq!(
            Code::new(11, 10).unwrap_err(),
            FecError::SourceExceedsEncoding { k: 11, n: 10 }
        );
    }

    #[test]
    fn small_known_answer_from_zfec() {
        // zfec.Encoder(2, 3).encode([b"ab", b"cd"])[2] == b"en"
        let code = Code::new(2, 3).unwrap();
        let mut parity = [0u8; 2];
        code.encode(&[b"ab", b"cd"], &mut [&mut parity]).unwrap();
        assert_eq!(&parity, b"en");
    }
}
