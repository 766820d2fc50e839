//! Slice kernels: the hot loops of encoding and decoding, chosen at run time.
//!
//! Every byte of parity or of a rebuilt symbol is produced here, either by [`MatrixPlan`]
//! (a matrix of coefficients times a set of symbols: `outputs = C * inputs`, all outputs of a
//! group computed in one pass over the inputs) or by [`mul`] / [`mul_add`] over one row.
//!
//! Several [`Kernel`]s implement these, from the portable scalar table loop (the reference) to
//! GFNI with AVX-512; all give identical bytes. [`Kernel::active`] picks the fastest the CPU
//! supports, unless the environment variable `ISNODE_FEC_KERNEL` (see [`KERNEL_ENV`]) names
//! one. The `unsafe` SIMD code lives in one private module, `simd`, behind the length and
//! CPU-feature checks made here.

use std::sync::OnceLock;

use crate::gf::MUL_TABLE;
pub use crate::tables::{affine_matrix, AFFINE, NIBBLE_TABLES};

/// Environment variable that forces a kernel: `scalar`, `ssse3`, `avx2`, `gfni-avx2` or
/// `gfni-avx512`. A name that is unknown or unsupported by the CPU is reported on stderr and
/// ignored (the fastest supported kernel is used).
pub const KERNEL_ENV: &str = "ISNODE_FEC_KERNEL";

/// An implementation of the GF(2^8) slice arithmetic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// Portable table lookups (`MUL_TABLE`), one byte at a time: the reference.
    Scalar,
    /// SSSE3 `PSHUFB` on 16-byte vectors with split nibble tables.
    Ssse3,
    /// AVX2 `VPSHUFB` on 32-byte vectors with split nibble tables.
    Avx2,
    /// GFNI `VGF2P8AFFINEQB` on 32-byte AVX2 vectors.
    GfniAvx2,
    /// GFNI `VGF2P8AFFINEQB` on 64-byte AVX-512 vectors, with `VPTERNLOGQ` accumulation.
    GfniAvx512,
}

impl Kernel {
    /// Every kernel, slowest first.
    pub const ALL: [Kernel; 5] = [
        Kernel::Scalar,
        Kernel::Ssse3,
        Kernel::Avx2,
        Kernel::GfniAvx2,
        Kernel::GfniAvx512,
    ];

    /// The kernel's name, as accepted by [`Kernel::from_name`] and [`KERNEL_ENV`].
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Scalar => "scalar",
            Kernel::Ssse3 => "ssse3",
            Kernel::Avx2 => "avx2",
            Kernel::GfniAvx2 => "gfni-avx2",
            Kernel::GfniAvx512 => "gfni-avx512",
        }
    }

    /// The kernel named `name` (see [`Kernel::name`]), if any.
    pub fn from_name(name: &str) -> Option<Kernel> {
        Kernel::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Whether this CPU can run the kernel.
    pub fn is_supported(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            match self {
                Kernel::Scalar => true,
                Kernel::Ssse3 => std::arch::is_x86_feature_detected!("ssse3"),
                Kernel::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
                Kernel::GfniAvx2 => {
                    std::arch::is_x86_feature_detected!("avx2")
                        && std::arch::is_x86_feature_detected!("gfni")
                }
                Kernel::GfniAvx512 => {
                    std::arch::is_x86_feature_detected!("avx512f")
                        && std::arch::is_x86_feature_detected!("avx512bw")
                        && std::arch::is_x86_feature_detected!("gfni")
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self == Kernel::Scalar
        }
    }

    /// The kernels this CPU supports, slowest first.
    pub fn supported() -> Vec<Kernel> {
        Kernel::ALL
            .into_iter()
            .filter(|k| k.is_supported())
            .collect()
    }

    /// The fastest kernel this CPU supports.
    pub fn best() -> Kernel {
        Kernel::supported().pop().unwrap_or(Kernel::Scalar)
    }

    /// The kernel used by default: the one named by [`KERNEL_ENV`] if it is set, known and
    /// supported, else [`Kernel::best`]. Decided once per process.
    pub fn active() -> Kernel {
        static ACTIVE: OnceLock<Kernel> = OnceLock::new();
        *ACTIVE.get_or_init(|| {
            let Ok(name) = std::env::var(KERNEL_ENV) else {
                return Kernel::best();
            };
            match Kernel::from_name(name.trim()) {
                Some(k) if k.is_supported() => k,
                Some(k) => {
                    eprintln!(
                        "isnode-fec: {KERNEL_ENV}={name}: this CPU does not support the {} kernel; using {}",
                        k.name(),
                        Kernel::best().name()
                    );
                    Kernel::best()
                }
                None => {
                    let names: Vec<&str> = Kernel::ALL.iter().map(|k| k.name()).collect();
                    eprintln!(
                        "isnode-fec: {KERNEL_ENV}={name} is not a kernel (one of {}); using {}",
                        names.join(", "),
                        Kernel::best().name()
                    );
                    Kernel::best()
                }
            }
        })
    }

    /// Bytes per vector; symbol lengths are processed in multiples of this.
    fn width(self) -> usize {
        match self {
            Kernel::Scalar => 1,
            Kernel::Ssse3 => 16,
            Kernel::Avx2 | Kernel::GfniAvx2 => 32,
            Kernel::GfniAvx512 => 64,
        }
    }

    /// Most output rows kept in registers at once.
    fn max_tile(self) -> usize {
        match self {
            Kernel::Scalar => 1,
            Kernel::Ssse3 | Kernel::Avx2 | Kernel::GfniAvx2 => 8,
            Kernel::GfniAvx512 => 16,
        }
    }

    fn uses_gfni(self) -> bool {
        matches!(self, Kernel::GfniAvx2 | Kernel::GfniAvx512)
    }

    /// A supported kernel: `self`, or the best one if the CPU lacks `self`'s features.
    fn checked(self) -> Kernel {
        if self == Kernel::Scalar || self.is_supported() {
            self
        } else {
            Kernel::best()
        }
    }

    /// `dst[i] ^= coef * src[i]` with this kernel (the best supported one if this CPU cannot
    /// run it).
    ///
    /// # Panics
    /// If `dst` and `src` differ in length.
    pub fn mul_add(self, dst: &mut [u8], src: &[u8], coef: u8) {
        assert_eq!(dst.len(), src.len(), "mul_add: slice lengths differ");
        match coef {
            0 => {}
            1 => dst.iter_mut().zip(src).for_each(|(d, s)| *d ^= *s),
            _ => row::<true>(self.checked(), dst, src, coef),
        }
    }

    /// `dst[i] = coef * src[i]` with this kernel (the best supported one if this CPU cannot
    /// run it).
    ///
    /// # Panics
    /// If `dst` and `src` differ in length.
    pub fn mul(self, dst: &mut [u8], src: &[u8], coef: u8) {
        assert_eq!(dst.len(), src.len(), "mul: slice lengths differ");
        match coef {
            0 => dst.fill(0),
            1 => dst.copy_from_slice(src),
            _ => row::<false>(self.checked(), dst, src, coef),
        }
    }
}

/// Name of the kernel in use ([`Kernel::active`]), for benchmark reports.
pub fn kernel_name() -> &'static str {
    Kernel::active().name()
}

/// `dst[i] ^= coef * src[i]` for every `i` (multiply-accumulate in GF(2^8)), with the active
/// kernel.
///
/// # Panics
/// If `dst` and `src` differ in length (callers check symbol lengths first).
#[inline]
pub fn mul_add(dst: &mut [u8], src: &[u8], coef: u8) {
    Kernel::active().mul_add(dst, src, coef);
}

/// `dst[i] = coef * src[i]` for every `i`, with the active kernel.
///
/// # Panics
/// If `dst` and `src` differ in length (callers check symbol lengths first).
#[inline]
pub fn mul(dst: &mut [u8], src: &[u8], coef: u8) {
    Kernel::active().mul(dst, src, coef);
}

/// `outputs[r] = sum_j coefs[r * inputs.len() + j] * inputs[j]` with the active kernel:
/// a `rows x cols` coefficient matrix (row-major) times `cols` input symbols.
///
/// # Panics
/// If `coefs.len() != outputs.len() * inputs.len()` or the symbols differ in length.
pub fn mul_matrix(coefs: &[u8], inputs: &[&[u8]], outputs: &mut [&mut [u8]]) {
    MatrixPlan::new(Kernel::active(), coefs, outputs.len(), inputs.len()).apply(inputs, outputs);
}

/// Scalar `dst (^)= coef * src` over `range`.
fn row_scalar<const ACC: bool>(dst: &mut [u8], src: &[u8], coef: u8) {
    let table = &MUL_TABLE[coef as usize];
    for (d, s) in dst.iter_mut().zip(src) {
        let v = table[*s as usize];
        *d = if ACC { *d ^ v } else { v };
    }
}

/// `dst (^)= coef * src` with a supported kernel; lengths already checked equal.
fn row<const ACC: bool>(kernel: Kernel, dst: &mut [u8], src: &[u8], coef: u8) {
    let len = dst.len();
    #[cfg(target_arch = "x86_64")]
    {
        let (d, s) = (dst.as_mut_ptr(), src.as_ptr());
        // SAFETY: `kernel` is supported by this CPU (checked by the caller through
        // `Kernel::checked`), `dst` and `src` are distinct slices (one is `&mut`) of `len`
        // bytes, and each function touches only `len` bytes from its pointers.
        #[allow(unsafe_code)]
        let done = unsafe {
            match kernel {
                Kernel::Scalar => 0,
                Kernel::Ssse3 => crate::simd::row_ssse3::<ACC>(d, s, len, coef),
                Kernel::Avx2 => crate::simd::row_avx2::<ACC>(d, s, len, coef),
                Kernel::GfniAvx2 => crate::simd::row_gfni256::<ACC>(d, s, len, coef),
                Kernel::GfniAvx512 => {
                    crate::simd::row_gfni512::<ACC>(d, s, len, coef);
                    len
                }
            }
        };
        row_scalar::<ACC>(&mut dst[done..], &src[done..], coef);
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (kernel, len);
        row_scalar::<ACC>(dst, src, coef);
    }
}

/// The output tiles of a `rows x cols` plan: groups of `max_tile` rows, then powers of two;
/// tile `t` owns coefficients `coef0 .. coef0 + cols * size`, `[j][o]`.
#[cfg(target_arch = "x86_64")]
fn tiles(kernel: Kernel, rows: usize, cols: usize) -> Vec<crate::simd::Tile> {
    let max = kernel.max_tile();
    let mut tiles = Vec::new();
    let mut row0 = 0;
    while row0 < rows {
        let left = rows - row0;
        let size = if left >= max {
            max
        } else {
            1 << (usize::BITS - 1 - left.leading_zeros())
        };
        tiles.push(crate::simd::Tile {
            row0,
            size,
            coef0: row0 * cols,
        });
        row0 += size;
    }
    tiles
}

/// Gauss-Jordan elimination of `e` rows of `stride` bytes, `[A | I | 0]` into
/// `[I | A^-1 | 0]`, with GFNI; `None` if this CPU has no GFNI (the caller falls back), else
/// whether `A` was invertible.
///
/// # Panics
/// If `stride` is not a multiple of 32, is below `2 e`, or `aug.len() != e * stride`.
pub(crate) fn invert_gfni(aug: &mut [u8], e: usize, stride: usize) -> Option<bool> {
    assert!(stride.is_multiple_of(32) && stride >= 2 * e && aug.len() == e * stride);
    #[cfg(target_arch = "x86_64")]
    {
        if !Kernel::GfniAvx2.is_supported() {
            return None;
        }
        // SAFETY: AVX2 and GFNI are supported (checked above); `aug` holds `e * stride`
        // bytes, `stride` is a multiple of 32 and at least `2 e` (asserted).
        #[allow(unsafe_code)]
        Some(unsafe { crate::simd::invert_gfni256(aug.as_mut_ptr(), e, stride) })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

/// `dt[e + c] = sum_r rows[r][kept[c]] * dt[r]` over rows of `stride` bytes, `e = rows.len()`,
/// with GFNI; false (nothing done) if this CPU has no GFNI.
///
/// # Panics
/// If `stride % 32 != 0`, `dt.len() != (e + kept.len()) * stride`, or an index of `kept` is
/// out of range of a row.
pub(crate) fn combine_gfni(dt: &mut [u8], stride: usize, rows: &[&[u8]], kept: &[usize]) -> bool {
    let e = rows.len();
    assert!(stride.is_multiple_of(32) && dt.len() == (e + kept.len()) * stride);
    let min_len = rows.iter().map(|r| r.len()).min().unwrap_or(0);
    assert!(
        kept.iter().all(|&c| c < min_len),
        "combine: column out of range"
    );
    #[cfg(target_arch = "x86_64")]
    {
        if !Kernel::GfniAvx2.is_supported() {
            return false;
        }
        let ptrs: Vec<*const u8> = rows.iter().map(|r| r.as_ptr()).collect();
        // SAFETY: AVX2 and GFNI are supported (checked above); `dt` holds
        // `(e + kept.len()) * stride` bytes with `stride` a multiple of 32 (asserted); every
        // row is longer than every index of `kept` (asserted).
        #[allow(unsafe_code)]
        unsafe {
            crate::simd::combine_gfni256(dt.as_mut_ptr(), stride, &ptrs, kept)
        };
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// A coefficient matrix prepared for one kernel: tiled, and for GFNI expanded to bit
/// matrices. Build it once and apply it to many symbol sets (the encoder keeps one for its
/// parity matrix; the decoder caches one per erasure pattern).
#[derive(Clone)]
pub struct MatrixPlan {
    kernel: Kernel,
    rows: usize,
    cols: usize,
    /// Scalar: the row-major matrix. Nibble kernels: coefficients in tile order.
    coefs: Vec<u8>,
    /// GFNI kernels: bit matrices in tile order.
    mats: Vec<u64>,
    #[cfg(target_arch = "x86_64")]
    tiles: Vec<crate::simd::Tile>,
}

impl std::fmt::Debug for MatrixPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MatrixPlan")
            .field("kernel", &self.kernel)
            .field("rows", &self.rows)
            .field("cols", &self.cols)
            .finish_non_exhaustive()
    }
}

impl MatrixPlan {
    /// Prepares the `rows x cols` matrix `coefs` (row-major) for `kernel` (or the best
    /// supported kernel, if this CPU cannot run `kernel`).
    ///
    /// # Panics
    /// If `coefs.len() != rows * cols`.
    pub fn new(kernel: Kernel, coefs: &[u8], rows: usize, cols: usize) -> MatrixPlan {
        assert_eq!(
            coefs.len(),
            rows * cols,
            "MatrixPlan: coefficient count is not rows x cols"
        );
        let kernel = kernel.checked();
        let mut plan = MatrixPlan {
            kernel,
            rows,
            cols,
            coefs: Vec::new(),
            mats: Vec::new(),
            #[cfg(target_arch = "x86_64")]
            tiles: Vec::new(),
        };
        if kernel == Kernel::Scalar {
            plan.coefs = coefs.to_vec();
            return plan;
        }
        #[cfg(target_arch = "x86_64")]
        {
            plan.tiles = tiles(kernel, rows, cols);
            for t in &plan.tiles {
                for j in 0..cols {
                    for o in 0..t.size {
                        let c = coefs[(t.row0 + o) * cols + j];
                        if kernel.uses_gfni() {
                            plan.mats.push(AFFINE[c as usize]);
                        } else {
                            plan.coefs.push(c);
                        }
                    }
                }
            }
        }
        plan
    }

    /// Prepares the `rows x cols` matrix `C` given transposed: `C[o][j] = ct[j * stride + o]`
    /// (`stride >= rows`), like [`MatrixPlan::new`]. `recycle`, a plan no longer used, lends
    /// its buffers.
    ///
    /// # Panics
    /// If `stride < rows` or `ct` is shorter than `cols * stride` (for `cols > 0`).
    pub fn from_transposed(
        kernel: Kernel,
        ct: &[u8],
        stride: usize,
        rows: usize,
        cols: usize,
        recycle: Option<MatrixPlan>,
    ) -> MatrixPlan {
        assert!(
            stride >= rows && (cols == 0 || ct.len() >= (cols - 1) * stride + rows),
            "MatrixPlan: transposed matrix too short"
        );
        let kernel = kernel.checked();
        let (mut coefs, mut mats) = match recycle {
            Some(p) => (p.coefs, p.mats),
            None => (Vec::new(), Vec::new()),
        };
        coefs.clear();
        mats.clear();
        if kernel == Kernel::Scalar {
            coefs.reserve(rows * cols);
            for o in 0..rows {
                coefs.extend((0..cols).map(|j| ct[j * stride + o]));
            }
            return MatrixPlan {
                kernel,
                rows,
                cols,
                coefs,
                mats,
                #[cfg(target_arch = "x86_64")]
                tiles: Vec::new(),
            };
        }
        #[cfg(target_arch = "x86_64")]
        let tiles = tiles(kernel, rows, cols);
        #[cfg(target_arch = "x86_64")]
        {
            if kernel.uses_gfni() {
                mats.reserve(rows * cols);
            } else {
                coefs.reserve(rows * cols);
            }
            for t in &tiles {
                for j in 0..cols {
                    let column = &ct[j * stride + t.row0..j * stride + t.row0 + t.size];
                    if kernel.uses_gfni() {
                        mats.extend(column.iter().map(|&c| AFFINE[c as usize]));
                    } else {
                        coefs.extend_from_slice(column);
                    }
                }
            }
        }
        MatrixPlan {
            kernel,
            rows,
            cols,
            coefs,
            mats,
            #[cfg(target_arch = "x86_64")]
            tiles,
        }
    }

    /// The kernel this plan runs on.
    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// Number of output rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Number of inputs (columns).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// `outputs[r] = sum_j C[r][j] * inputs[j]`.
    ///
    /// # Panics
    /// If `inputs.len() != cols`, `outputs.len() != rows`, or the symbols differ in length.
    pub fn apply(&self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) {
        self.run::<false>(inputs, outputs);
    }

    /// `outputs[r] ^= sum_j C[r][j] * inputs[j]`.
    ///
    /// # Panics
    /// If `inputs.len() != cols`, `outputs.len() != rows`, or the symbols differ in length.
    pub fn apply_add(&self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) {
        self.run::<true>(inputs, outputs);
    }

    fn run<const ACC: bool>(&self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) {
        assert_eq!(
            inputs.len(),
            self.cols,
            "MatrixPlan: wrong number of inputs"
        );
        assert_eq!(
            outputs.len(),
            self.rows,
            "MatrixPlan: wrong number of outputs"
        );
        let Some(len) = inputs
            .first()
            .map(|s| s.len())
            .or_else(|| outputs.first().map(|s| s.len()))
        else {
            return;
        };
        assert!(
            inputs.iter().all(|s| s.len() == len) && outputs.iter().all(|s| s.len() == len),
            "MatrixPlan: symbol lengths differ"
        );
        if self.cols == 0 {
            if !ACC {
                outputs.iter_mut().for_each(|o| o.fill(0));
            }
            return;
        }
        if self.kernel == Kernel::Scalar {
            for (r, out) in outputs.iter_mut().enumerate() {
                let row = &self.coefs[r * self.cols..(r + 1) * self.cols];
                for (j, (input, &c)) in inputs.iter().zip(row).enumerate() {
                    if j == 0 && !ACC {
                        row_scalar::<false>(out, input, c);
                    } else {
                        row_scalar::<true>(out, input, c);
                    }
                }
            }
            return;
        }
        #[cfg(target_arch = "x86_64")]
        {
            let width = self.kernel.width();
            let body = len - len % width;
            if body > 0 {
                let ins: Vec<*const u8> = inputs.iter().map(|s| s.as_ptr()).collect();
                let outs: Vec<*mut u8> = outputs.iter_mut().map(|s| s.as_mut_ptr()).collect();
                self.run_simd::<ACC>(&ins, &outs, body);
            }
            if body < len {
                // The tail: padded copies, one vector wide.
                let tail = len - body;
                let mut in_pad = vec![0u8; self.cols * width];
                for (pad, input) in in_pad.chunks_exact_mut(width).zip(inputs) {
                    pad[..tail].copy_from_slice(&input[body..]);
                }
                let mut out_pad = vec![0u8; self.rows * width];
                if ACC {
                    for (pad, out) in out_pad.chunks_exact_mut(width).zip(outputs.iter()) {
                        pad[..tail].copy_from_slice(&out[body..]);
                    }
                }
                let ins: Vec<*const u8> = in_pad.chunks_exact(width).map(|s| s.as_ptr()).collect();
                let outs: Vec<*mut u8> = out_pad
                    .chunks_exact_mut(width)
                    .map(|s| s.as_mut_ptr())
                    .collect();
                self.run_simd::<ACC>(&ins, &outs, width);
                for (pad, out) in out_pad.chunks_exact(width).zip(outputs.iter_mut()) {
                    out[body..].copy_from_slice(&pad[..tail]);
                }
            }
        }
    }

    /// Runs the SIMD matrix product over `len` bytes (a multiple of the kernel's width).
    #[cfg(target_arch = "x86_64")]
    fn run_simd<const ACC: bool>(&self, ins: &[*const u8], outs: &[*mut u8], len: usize) {
        use crate::simd;
        debug_assert_eq!(len % self.kernel.width(), 0);
        let p = simd::Ptrs {
            inputs: ins,
            outputs: outs,
        };
        // SAFETY: the plan's kernel is supported by this CPU (`Kernel::checked` in `new`);
        // `ins` and `outs` point into `cols` input and `rows` output buffers of at least `len`
        // bytes each (checked by the caller), the outputs are distinct `&mut` slices or
        // distinct chunks of one buffer, and `len` is a multiple of the vector width; the
        // tiles cover rows `0..rows` with `cols * size` coefficients each, as built in `new`.
        #[allow(unsafe_code)]
        unsafe {
            match self.kernel {
                Kernel::Scalar => unreachable!("scalar plans do not use SIMD"),
                Kernel::Ssse3 => simd::matrix_ssse3::<ACC>(&self.coefs, &self.tiles, &p, len),
                Kernel::Avx2 => simd::matrix_avx2::<ACC>(&self.coefs, &self.tiles, &p, len),
                Kernel::GfniAvx2 => simd::matrix_gfni256::<ACC>(&self.mats, &self.tiles, &p, len),
                Kernel::GfniAvx512 => simd::matrix_gfni512::<ACC>(&self.mats, &self.tiles, &p, len),
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
    fn mul_add_matches_field_arithmetic_for_every_coefficient_and_kernel() {
        let src = sample(1031, 5);
        let base = sample(1031, 77);
        for kernel in Kernel::supported() {
            for coef in 0..=255u8 {
                let mut dst = base.clone();
                kernel.mul_add(&mut dst, &src, coef);
                for i in 0..src.len() {
                    assert_eq!(
                        dst[i],
                        base[i] ^ gf::mul(coef, src[i]),
                        "{kernel:?} coef {coef} at {i}"
                    );
                }
            }
        }
    }

    #[test]
    fn mul_matches_field_arithmetic_for_every_coefficient_and_kernel() {
        let src = sample(257, 9);
        for kernel in Kernel::supported() {
            for coef in 0..=255u8 {
                let mut dst = vec![0xA5; src.len()];
                kernel.mul(&mut dst, &src, coef);
                for i in 0..src.len() {
                    assert_eq!(
                        dst[i],
                        gf::mul(coef, src[i]),
                        "{kernel:?} coef {coef} at {i}"
                    );
                }
            }
        }
    }

    #[test]
    fn names_round_trip_and_scalar_is_always_supported() {
        for kernel in Kernel::ALL {
            assert_eq!(Kernel::from_name(kernel.name()), Some(kernel));
        }
        assert_eq!(Kernel::from_name("nope"), None);
        assert!(Kernel::supported().contains(&Kernel::Scalar));
        assert!(Kernel::best().is_supported());
        assert!(Kernel::active().is_supported());
    }

    #[test]
    fn empty_slices_are_fine() {
        for kernel in Kernel::supported() {
            kernel.mul_add(&mut [], &[], 3);
            kernel.mul(&mut [], &[], 3);
            MatrixPlan::new(kernel, &[1, 2], 1, 2).apply(&[&[], &[]], &mut [&mut []]);
            MatrixPlan::new(kernel, &[], 0, 0).apply(&[], &mut []);
        }
    }

    #[test]
    #[should_panic(expected = "lengths differ")]
    fn length_mismatch_panics() {
        mul_add(&mut [0u8; 3], &[0u8; 4], 3);
    }
}
