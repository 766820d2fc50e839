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

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod gf;
pub mod kernel;
pub mod matrix;
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod simd;
mod tables;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, OnceLock};

pub use kernel::{Kernel, MatrixPlan};
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
/// Cheap to build (`O(n k)`), immutable, and shareable between threads. All byte work runs
/// on one [`Kernel`] (by default [`Kernel::active`]; see [`Code::with_kernel`]); every kernel
/// gives the same bytes.
#[derive(Clone)]
pub struct Code {
    k: usize,
    n: usize,
    /// `(n - k) x k`: row `i` gives the repair symbol with ESI `k + i`.
    parity: Matrix,
    kernel: Kernel,
    /// The whole parity matrix prepared for `kernel`, built on first use.
    encode_plan: OnceLock<Arc<MatrixPlan>>,
    /// Decoding matrices of the last few erasure patterns (shared by clones).
    decode_cache: Arc<Mutex<DecodeCache>>,
}

/// Decoding matrices by presence pattern (a bit per ESI), most recent first.
type DecodeCache = VecDeque<(Pattern, Arc<MatrixPlan>)>;

/// A presence pattern: bit `esi % 64` of word `esi / 64` is set if the symbol is present.
type Pattern = [u64; 4];

fn pattern(present: &[bool]) -> Pattern {
    let mut bits = [0u64; 4];
    for (esi, &p) in present.iter().enumerate() {
        bits[esi / 64] |= u64::from(p) << (esi % 64);
    }
    bits
}

/// Erasure patterns whose decoding matrix is kept: a store repairing a lost member meets
/// the same pattern in every codeword, so its `e x e` inversion is done once.
const DECODE_CACHE_PATTERNS: usize = 8;

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
            kernel: Kernel::active(),
            encode_plan: OnceLock::new(),
            decode_cache: Arc::default(),
        })
    }

    /// The same code computed with `kernel` (or with [`Kernel::best`] if this CPU cannot run
    /// `kernel`): for tests and benchmarks; the bytes are the same.
    pub fn with_kernel(self, kernel: Kernel) -> Code {
        let kernel = if kernel.is_supported() {
            kernel
        } else {
            Kernel::best()
        };
        Code {
            kernel,
            encode_plan: OnceLock::new(),
            decode_cache: Arc::default(),
            ..self
        }
    }

    /// The kernel this code computes with.
    pub fn kernel(&self) -> Kernel {
        self.kernel
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
    /// the same length (any length, including 0 and odd lengths). All repair symbols are
    /// computed in one pass over the source.
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
        if repair.len() == self.repair_symbols() {
            self.full_encode_plan().apply(source, repair);
        } else {
            let rows: Vec<usize> = (0..repair.len()).collect();
            self.parity_plan(&rows).apply(source, repair);
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
        self.repair_coefficients(esi)?;
        check_len(esi, out.len(), len_bytes)?;
        self.parity_plan(&[esi - self.k]).apply(source, &mut [out]);
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
        let missing: Vec<usize> = (0..self.repair_symbols())
            .filter(|&i| !present[self.k + i])
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let (source, repair) = shards.split_at_mut(self.k);
        let source: Vec<&[u8]> = source.iter().map(|s| &**s).collect();
        let mut outputs: Vec<&mut [u8]> = repair
            .iter_mut()
            .enumerate()
            .filter(|(i, _)| !present[self.k + i])
            .map(|(_, s)| &mut **s)
            .collect();
        if missing.len() == self.repair_symbols() {
            self.full_encode_plan().apply(&source, &mut outputs);
        } else {
            self.parity_plan(&missing).apply(&source, &mut outputs);
        }
        Ok(())
    }

    fn full_encode_plan(&self) -> &MatrixPlan {
        self.encode_plan.get_or_init(|| {
            let rows: Vec<usize> = (0..self.repair_symbols()).collect();
            Arc::new(self.parity_plan(&rows))
        })
    }

    /// The parity rows `rows` (indices into the parity matrix) prepared for the kernel.
    fn parity_plan(&self, rows: &[usize]) -> MatrixPlan {
        let coefs: Vec<u8> = rows
            .iter()
            .flat_map(|&r| self.parity.row(r).iter().copied())
            .collect();
        MatrixPlan::new(self.kernel, &coefs, rows.len(), self.k)
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
    /// the code is MDS). The `e x k` decoding matrix `D = A^-1 [I | G[R][P]]` (cached per
    /// erasure pattern) is applied to the inputs `[p_R | s_P]` in one pass.
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

        let plan = self.decode_plan(present, &lost, &kept, &repair);

        let mut by_esi: Vec<Option<&[u8]>> = vec![None; self.n];
        let mut outputs: Vec<&mut [u8]> = Vec::with_capacity(e);
        for (esi, shard) in shards.iter_mut().enumerate() {
            if present[esi] {
                by_esi[esi] = Some(&**shard);
            } else if esi < self.k {
                outputs.push(&mut **shard);
            }
        }
        let inputs: Vec<&[u8]> = repair
            .iter()
            .chain(&kept)
            .filter_map(|&esi| by_esi[esi])
            .collect();
        plan.apply(&inputs, &mut outputs);
        Ok(())
    }

    /// The decoding matrix for this erasure pattern, from the cache or freshly computed.
    fn decode_plan(
        &self,
        present: &[bool],
        lost: &[usize],
        kept: &[usize],
        repair: &[usize],
    ) -> Arc<MatrixPlan> {
        let key = pattern(present);
        // The oldest plan, if the cache is full and nobody else holds it, lends its buffers.
        let mut recycle = None;
        if let Ok(mut cache) = self.decode_cache.try_lock() {
            if let Some((_, plan)) = cache.iter().find(|(p, _)| *p == key) {
                return Arc::clone(plan);
            }
            if cache.len() == DECODE_CACHE_PATTERNS {
                recycle = cache.pop_back().and_then(|(_, plan)| Arc::into_inner(plan));
            }
        }
        let plan = Arc::new(self.decode_matrix(lost, kept, repair, recycle));
        if let Ok(mut cache) = self.decode_cache.try_lock() {
            if cache.len() == DECODE_CACHE_PATTERNS {
                cache.pop_back();
            }
            cache.push_front((key, Arc::clone(&plan)));
        }
        plan
    }

    /// `D = A^-1 [I | G[R][P]]` (`e x k`), see [`Code::rebuild_sources`].
    fn decode_matrix(
        &self,
        lost: &[usize],
        kept: &[usize],
        repair: &[usize],
        recycle: Option<MatrixPlan>,
    ) -> MatrixPlan {
        if matches!(self.kernel, Kernel::GfniAvx2 | Kernel::GfniAvx512) {
            if let Some(plan) = self.decode_matrix_gfni(lost, kept, repair, recycle) {
                return plan;
            }
        }
        let (e, k) = (lost.len(), self.k);
        // Augmented [A | I], inverted in place by Gauss-Jordan with kernel row operations.
        let w = 2 * e;
        let mut aug = vec![0u8; e * w];
        let mut rhs = vec![0u8; e * k]; // [I | G[R][P]]
        for (r, &esi) in repair.iter().enumerate() {
            let row = self.parity.row(esi - self.k);
            for (c, &s) in lost.iter().enumerate() {
                aug[r * w + c] = row[s];
            }
            aug[r * w + e + r] = 1;
            rhs[r * k + r] = 1;
            for (c, &s) in kept.iter().enumerate() {
                rhs[r * k + e + c] = row[s];
            }
        }
        let inverted = invert_augmented(self.kernel, &mut aug, e);
        assert!(
            inverted,
            "square submatrices of an MDS parity matrix are invertible"
        );
        let a_inv: Vec<u8> = aug
            .chunks_exact(w)
            .flat_map(|r| r[e..].iter().copied())
            .collect();
        let mut d = vec![0u8; e * k];
        {
            let inputs: Vec<&[u8]> = rhs.chunks_exact(k).collect();
            let mut outputs: Vec<&mut [u8]> = d.chunks_exact_mut(k).collect();
            MatrixPlan::new(self.kernel, &a_inv, e, e).apply(&inputs, &mut outputs);
        }
        MatrixPlan::new(self.kernel, &d, e, k)
    }
}

impl Code {
    /// [`Code::decode_matrix`] with GFNI on short rows: `[A | I]` inverted in place, then
    /// `D` built transposed (`D^T` row `j` is column `j` of `D`: the `e` coefficients of
    /// input `j` for the `e` outputs), which is the order the plan stores its bit matrices
    /// in. `D^T[c] = A^-1[.][c]` for the repair inputs `c < e`; for the present source `s`
    /// (input `e + c`), `D^T[e + c] = sum_r G[R_r][s] A^-1[.][r]`. `None` without GFNI.
    fn decode_matrix_gfni(
        &self,
        lost: &[usize],
        kept: &[usize],
        repair: &[usize],
        recycle: Option<MatrixPlan>,
    ) -> Option<MatrixPlan> {
        let (e, k) = (lost.len(), self.k);
        let stride = (2 * e).div_ceil(32) * 32;
        let mut aug = vec![0u8; e * stride];
        let rows: Vec<&[u8]> = repair
            .iter()
            .map(|&esi| self.parity.row(esi - self.k))
            .collect();
        for (r, row) in rows.iter().enumerate() {
            let out = &mut aug[r * stride..];
            for (c, &s) in lost.iter().enumerate() {
                out[c] = row[s];
            }
            out[e + r] = 1;
        }
        let inverted = kernel::invert_gfni(&mut aug, e, stride)?;
        assert!(
            inverted,
            "square submatrices of an MDS parity matrix are invertible"
        );
        let dstride = e.div_ceil(32) * 32;
        let mut dt = vec![0u8; k * dstride];
        for (i, a_row) in aug.chunks_exact(stride).enumerate() {
            for (c, &a) in a_row[e..2 * e].iter().enumerate() {
                dt[c * dstride + i] = a;
            }
        }
        if !kernel::combine_gfni(&mut dt, dstride, &rows, kept) {
            return None;
        }
        Some(MatrixPlan::from_transposed(
            self.kernel,
            &dt,
            dstride,
            e,
            k,
            recycle,
        ))
    }
}

/// Gauss-Jordan elimination of the `e x 2e` row-major `[A | I]` into `[I | A^-1]`; false if
/// `A` is singular.
fn invert_augmented(kernel: Kernel, aug: &mut [u8], e: usize) -> bool {
    let w = 2 * e;
    let mut pivot_row = vec![0u8; w];
    for col in 0..e {
        let Some(pivot) = (col..e).find(|&r| aug[r * w + col] != 0) else {
            return false;
        };
        if pivot != col {
            for c in 0..w {
                aug.swap(pivot * w + c, col * w + c);
            }
        }
        let Some(scale) = gf::inv(aug[col * w + col]) else {
            return false;
        };
        kernel.mul(
            &mut pivot_row[col..],
            &aug[col * w + col..(col + 1) * w],
            scale,
        );
        aug[col * w + col..(col + 1) * w].copy_from_slice(&pivot_row[col..]);
        for r in 0..e {
            let factor = aug[r * w + col];
            if r != col && factor != 0 {
                kernel.mul_add(
                    &mut aug[r * w + col..(r + 1) * w],
                    &pivot_row[col..],
                    factor,
                );
            }
        }
    }
    true
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

    /// Every kernel rebuilds the same bytes for every erasure count (short and long rows of
    /// the inversion, more than 32 lost) and for more patterns than the cache holds (plans
    /// recycled), including patterns that lose repair symbols.
    #[test]
    fn decode_matches_for_every_erasure_count_kernel_and_pattern() {
        let (k, n, len) = (100, 170, 131);
        let source: Vec<Vec<u8>> = (0..k)
            .map(|i| (0..len).map(|b| (i * 7 + b * 13 + 1) as u8).collect())
            .collect();
        let code = Code::new(k, n).unwrap();
        let mut full = source.clone();
        full.extend((k..n).map(|_| vec![0u8; len]));
        {
            let (src, rep) = full.split_at_mut(k);
            let src: Vec<&[u8]> = src.iter().map(|s| &s[..]).collect();
            let mut rep: Vec<&mut [u8]> = rep.iter_mut().map(|s| &mut s[..]).collect();
            code.encode(&src, &mut rep).unwrap();
        }
        for kernel in Kernel::supported() {
            let code = Code::new(k, n).unwrap().with_kernel(kernel);
            let mut seed = 0x9E37_79B9_u32;
            for e in (1..=70).chain(1..=20) {
                let mut present = vec![true; n];
                let mut lost = 0;
                while lost < e {
                    seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    let esi = (seed >> 8) as usize % k;
                    if present[esi] {
                        present[esi] = false;
                        lost += 1;
                    }
                }
                // Lose a few repair symbols too: R is then not the first e repair rows.
                for esi in (k..k + (e % 5)).filter(|_| e + 5 <= n - k) {
                    present[esi] = false;
                }
                let mut shards = full.clone();
                for (esi, shard) in shards.iter_mut().enumerate() {
                    if !present[esi] {
                        shard.fill(0xEE);
                    }
                }
                let mut refs: Vec<&mut [u8]> = shards.iter_mut().map(|s| &mut s[..]).collect();
                code.reconstruct(&mut refs, &present).unwrap();
                assert_eq!(&shards[..k], &full[..k], "{kernel:?} e = {e}");
            }
        }
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
