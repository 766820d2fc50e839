//! x86-64 SIMD kernels: the only `unsafe` code of the crate.
//!
//! Two building blocks per instruction set, both driven by the safe wrappers in
//! [`crate::kernel`], which check every length and every CPU feature before calling in:
//!
//! * a *tile* of the matrix product `out[o] (^)= sum_j c[o][j] * in[j]` for `G` outputs at
//!   once over one vector-wide column: each source vector is loaded once and multiplied into
//!   `G` accumulators kept in registers;
//! * a *row* multiply(-accumulate) `dst (^)= c * src`, for short rows (matrix inversion).
//!
//! GF(2^8)/0x11D multiplication by a constant `c` is either one `GF2P8AFFINEQB` with the
//! 8x8 bit matrix of `c` (see [`crate::tables::affine_matrix`]; `GF2P8MULB` would use the
//! AES polynomial 0x11B and is never used), or two `PSHUFB` lookups in the 16-entry tables
//! of `c` times the low and the high nibble (see [`crate::tables::NIBBLE_TABLES`]).
//!
//! # Safety contract (all functions)
//! The caller has checked that the CPU supports the features named in the function's
//! `target_feature`, that every input and output pointer is valid for `len` bytes (reads, and
//! writes for outputs), that outputs do not overlap inputs or each other, that `len` is a
//! multiple of the vector width for tile functions, and that coefficient slices have the
//! documented length.

use std::arch::x86_64::*;

use crate::tables::{AFFINE, NIBBLE_TABLES};

/// Input and output pointers of one matrix product.
pub(crate) struct Ptrs<'a> {
    /// One pointer per input symbol.
    pub inputs: &'a [*const u8],
    /// One pointer per output symbol of the tile.
    pub outputs: &'a [*mut u8],
}

/// A group of consecutive output rows computed together, and where its coefficients start.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tile {
    /// First output row.
    pub row0: usize,
    /// Number of rows: a power of two no larger than the kernel's maximum.
    pub size: usize,
    /// Index of the tile's first coefficient (`inputs * size` of them, `[j][o]`).
    pub coef0: usize,
}

// ---------------------------------------------------------------------------------------
// GFNI + AVX-512: 64-byte vectors, 32 registers, three-way XOR with VPTERNLOGQ.
// ---------------------------------------------------------------------------------------

/// `G` outputs, one 64-byte column at `off`. `mats` holds `k * G` affine matrices, `[j][o]`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,gfni")]
unsafe fn tile_gfni512<const G: usize, const ACC: bool, const PF: bool>(
    mats: &[u64],
    p: &Ptrs,
    off: usize,
) {
    let k = p.inputs.len();
    let m = mats.as_ptr();
    let mut acc = [_mm512_setzero_si512(); G];
    if ACC {
        for (o, a) in acc.iter_mut().enumerate() {
            *a = _mm512_loadu_si512(p.outputs[o].add(off).cast());
        }
    }
    let mut j = 0;
    while j + 1 < k {
        let s0 = _mm512_loadu_si512(p.inputs.get_unchecked(j).add(off).cast());
        let s1 = _mm512_loadu_si512(p.inputs.get_unchecked(j + 1).add(off).cast());
        if PF {
            // The next column of these inputs, for the next pass (no fault: a hint).
            _mm_prefetch::<_MM_HINT_T0>(p.inputs.get_unchecked(j).wrapping_add(off + 64).cast());
            _mm_prefetch::<_MM_HINT_T0>(
                p.inputs.get_unchecked(j + 1).wrapping_add(off + 64).cast(),
            );
        }
        let m0 = m.add(j * G);
        let m1 = m.add((j + 1) * G);
        for (o, a) in acc.iter_mut().enumerate() {
            let p0 = _mm512_gf2p8affine_epi64_epi8::<0>(s0, _mm512_set1_epi64(*m0.add(o) as i64));
            let p1 = _mm512_gf2p8affine_epi64_epi8::<0>(s1, _mm512_set1_epi64(*m1.add(o) as i64));
            *a = _mm512_ternarylogic_epi64::<0x96>(*a, p0, p1);
        }
        j += 2;
    }
    if j < k {
        let s0 = _mm512_loadu_si512(p.inputs.get_unchecked(j).add(off).cast());
        let m0 = m.add(j * G);
        for (o, a) in acc.iter_mut().enumerate() {
            let p0 = _mm512_gf2p8affine_epi64_epi8::<0>(s0, _mm512_set1_epi64(*m0.add(o) as i64));
            *a = _mm512_xor_si512(*a, p0);
        }
    }
    for (o, a) in acc.iter().enumerate() {
        _mm512_storeu_si512(p.outputs[o].add(off).cast(), *a);
    }
}

/// Matrix product over `len` bytes (a multiple of 64) for one tile of `p.outputs.len()`
/// (a power of two, at most 16) outputs.
#[target_feature(enable = "avx512f,avx512bw,gfni")]
pub(crate) unsafe fn matrix_gfni512<const ACC: bool>(
    mats: &[u64],
    tiles: &[Tile],
    p: &Ptrs,
    len: usize,
) {
    let mut off = 0;
    while off < len {
        for t in tiles {
            let c = &mats[t.coef0..];
            let q = Ptrs {
                inputs: p.inputs,
                outputs: &p.outputs[t.row0..t.row0 + t.size],
            };
            let first = t.row0 == 0;
            match (t.size, first) {
                (16, true) => tile_gfni512::<16, ACC, true>(c, &q, off),
                (16, false) => tile_gfni512::<16, ACC, false>(c, &q, off),
                (8, true) => tile_gfni512::<8, ACC, true>(c, &q, off),
                (8, false) => tile_gfni512::<8, ACC, false>(c, &q, off),
                (4, true) => tile_gfni512::<4, ACC, true>(c, &q, off),
                (4, false) => tile_gfni512::<4, ACC, false>(c, &q, off),
                (2, true) => tile_gfni512::<2, ACC, true>(c, &q, off),
                (2, false) => tile_gfni512::<2, ACC, false>(c, &q, off),
                _ => tile_gfni512::<1, ACC, false>(c, &q, off),
            }
        }
        off += 64;
    }
}

/// `dst (^)= coef * src` over `len` bytes, any length (masked tail).
#[target_feature(enable = "avx512f,avx512bw,gfni")]
pub(crate) unsafe fn row_gfni512<const ACC: bool>(
    dst: *mut u8,
    src: *const u8,
    len: usize,
    coef: u8,
) {
    let mat = _mm512_set1_epi64(AFFINE[coef as usize] as i64);
    let mut off = 0;
    while off < len {
        let rem = len - off;
        let mask: __mmask64 = if rem >= 64 { !0 } else { (1u64 << rem) - 1 };
        let s = _mm512_maskz_loadu_epi8(mask, src.add(off).cast());
        let mut v = _mm512_gf2p8affine_epi64_epi8::<0>(s, mat);
        if ACC {
            v = _mm512_xor_si512(v, _mm512_maskz_loadu_epi8(mask, dst.add(off).cast()));
        }
        _mm512_mask_storeu_epi8(dst.add(off).cast(), mask, v);
        off += 64;
    }
}

// ---------------------------------------------------------------------------------------
// GFNI + AVX2: 32-byte vectors, 16 registers.
// ---------------------------------------------------------------------------------------

#[inline]
#[target_feature(enable = "avx2,gfni")]
unsafe fn tile_gfni256<const G: usize, const ACC: bool>(mats: &[u64], p: &Ptrs, off: usize) {
    let k = p.inputs.len();
    let m = mats.as_ptr();
    let mut acc = [_mm256_setzero_si256(); G];
    if ACC {
        for (o, a) in acc.iter_mut().enumerate() {
            *a = _mm256_loadu_si256(p.outputs[o].add(off).cast());
        }
    }
    for j in 0..k {
        let s = _mm256_loadu_si256(p.inputs.get_unchecked(j).add(off).cast());
        let mj = m.add(j * G);
        for (o, a) in acc.iter_mut().enumerate() {
            let prod = _mm256_gf2p8affine_epi64_epi8::<0>(s, _mm256_set1_epi64x(*mj.add(o) as i64));
            *a = _mm256_xor_si256(*a, prod);
        }
    }
    for (o, a) in acc.iter().enumerate() {
        _mm256_storeu_si256(p.outputs[o].add(off).cast(), *a);
    }
}

/// Matrix product over `len` bytes (a multiple of 32), tile of at most 8 outputs.
#[target_feature(enable = "avx2,gfni")]
pub(crate) unsafe fn matrix_gfni256<const ACC: bool>(
    mats: &[u64],
    tiles: &[Tile],
    p: &Ptrs,
    len: usize,
) {
    let mut off = 0;
    while off < len {
        for t in tiles {
            let c = &mats[t.coef0..];
            let q = Ptrs {
                inputs: p.inputs,
                outputs: &p.outputs[t.row0..t.row0 + t.size],
            };
            match t.size {
                8 => tile_gfni256::<8, ACC>(c, &q, off),
                4 => tile_gfni256::<4, ACC>(c, &q, off),
                2 => tile_gfni256::<2, ACC>(c, &q, off),
                _ => tile_gfni256::<1, ACC>(c, &q, off),
            }
        }
        off += 32;
    }
}

/// `dst (^)= coef * src` over `len` bytes; returns the bytes done (a multiple of 32).
#[target_feature(enable = "avx2,gfni")]
pub(crate) unsafe fn row_gfni256<const ACC: bool>(
    dst: *mut u8,
    src: *const u8,
    len: usize,
    coef: u8,
) -> usize {
    let mat = _mm256_set1_epi64x(AFFINE[coef as usize] as i64);
    let mut off = 0;
    while off + 32 <= len {
        let mut v =
            _mm256_gf2p8affine_epi64_epi8::<0>(_mm256_loadu_si256(src.add(off).cast()), mat);
        if ACC {
            v = _mm256_xor_si256(v, _mm256_loadu_si256(dst.add(off).cast()));
        }
        _mm256_storeu_si256(dst.add(off).cast(), v);
        off += 32;
    }
    off
}

// ---------------------------------------------------------------------------------------
// AVX2 split nibble tables (VPSHUFB).
// ---------------------------------------------------------------------------------------

#[inline]
#[target_feature(enable = "avx2")]
unsafe fn tile_avx2<const G: usize, const ACC: bool>(coefs: &[u8], p: &Ptrs, off: usize) {
    let k = p.inputs.len();
    let nib = NIBBLE_TABLES.as_ptr();
    let mask = _mm256_set1_epi8(0x0f);
    let mut acc = [_mm256_setzero_si256(); G];
    if ACC {
        for (o, a) in acc.iter_mut().enumerate() {
            *a = _mm256_loadu_si256(p.outputs[o].add(off).cast());
        }
    }
    for j in 0..k {
        let s = _mm256_loadu_si256(p.inputs.get_unchecked(j).add(off).cast());
        let lo = _mm256_and_si256(s, mask);
        let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(s), mask);
        let cj = coefs.as_ptr().add(j * G);
        for (o, a) in acc.iter_mut().enumerate() {
            let t = nib.add(*cj.add(o) as usize).cast::<u8>();
            let tl = _mm256_broadcastsi128_si256(_mm_loadu_si128(t.cast()));
            let th = _mm256_broadcastsi128_si256(_mm_loadu_si128(t.add(16).cast()));
            let prod = _mm256_xor_si256(_mm256_shuffle_epi8(tl, lo), _mm256_shuffle_epi8(th, hi));
            *a = _mm256_xor_si256(*a, prod);
        }
    }
    for (o, a) in acc.iter().enumerate() {
        _mm256_storeu_si256(p.outputs[o].add(off).cast(), *a);
    }
}

/// Matrix product over `len` bytes (a multiple of 32), tile of at most 8 outputs.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn matrix_avx2<const ACC: bool>(
    coefs: &[u8],
    tiles: &[Tile],
    p: &Ptrs,
    len: usize,
) {
    let mut off = 0;
    while off < len {
        for t in tiles {
            let c = &coefs[t.coef0..];
            let q = Ptrs {
                inputs: p.inputs,
                outputs: &p.outputs[t.row0..t.row0 + t.size],
            };
            match t.size {
                8 => tile_avx2::<8, ACC>(c, &q, off),
                4 => tile_avx2::<4, ACC>(c, &q, off),
                2 => tile_avx2::<2, ACC>(c, &q, off),
                _ => tile_avx2::<1, ACC>(c, &q, off),
            }
        }
        off += 32;
    }
}

/// `dst (^)= coef * src` over `len` bytes; returns the bytes done (a multiple of 32).
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn row_avx2<const ACC: bool>(
    dst: *mut u8,
    src: *const u8,
    len: usize,
    coef: u8,
) -> usize {
    let t = NIBBLE_TABLES[coef as usize].as_ptr();
    let tl = _mm256_broadcastsi128_si256(_mm_loadu_si128(t.cast()));
    let th = _mm256_broadcastsi128_si256(_mm_loadu_si128(t.add(16).cast()));
    let mask = _mm256_set1_epi8(0x0f);
    let mut off = 0;
    while off + 32 <= len {
        let s = _mm256_loadu_si256(src.add(off).cast());
        let lo = _mm256_and_si256(s, mask);
        let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(s), mask);
        let mut v = _mm256_xor_si256(_mm256_shuffle_epi8(tl, lo), _mm256_shuffle_epi8(th, hi));
        if ACC {
            v = _mm256_xor_si256(v, _mm256_loadu_si256(dst.add(off).cast()));
        }
        _mm256_storeu_si256(dst.add(off).cast(), v);
        off += 32;
    }
    off
}

// ---------------------------------------------------------------------------------------
// SSSE3 split nibble tables (PSHUFB), 16-byte vectors.
// ---------------------------------------------------------------------------------------

#[inline]
#[target_feature(enable = "ssse3")]
unsafe fn tile_ssse3<const G: usize, const ACC: bool>(coefs: &[u8], p: &Ptrs, off: usize) {
    let k = p.inputs.len();
    let nib = NIBBLE_TABLES.as_ptr();
    let mask = _mm_set1_epi8(0x0f);
    let mut acc = [_mm_setzero_si128(); G];
    if ACC {
        for (o, a) in acc.iter_mut().enumerate() {
            *a = _mm_loadu_si128(p.outputs[o].add(off).cast());
        }
    }
    for j in 0..k {
        let s = _mm_loadu_si128(p.inputs.get_unchecked(j).add(off).cast());
        let lo = _mm_and_si128(s, mask);
        let hi = _mm_and_si128(_mm_srli_epi16::<4>(s), mask);
        let cj = coefs.as_ptr().add(j * G);
        for (o, a) in acc.iter_mut().enumerate() {
            let t = nib.add(*cj.add(o) as usize).cast::<u8>();
            let tl = _mm_loadu_si128(t.cast());
            let th = _mm_loadu_si128(t.add(16).cast());
            let prod = _mm_xor_si128(_mm_shuffle_epi8(tl, lo), _mm_shuffle_epi8(th, hi));
            *a = _mm_xor_si128(*a, prod);
        }
    }
    for (o, a) in acc.iter().enumerate() {
        _mm_storeu_si128(p.outputs[o].add(off).cast(), *a);
    }
}

/// Matrix product over `len` bytes (a multiple of 16), tile of at most 8 outputs.
#[target_feature(enable = "ssse3")]
pub(crate) unsafe fn matrix_ssse3<const ACC: bool>(
    coefs: &[u8],
    tiles: &[Tile],
    p: &Ptrs,
    len: usize,
) {
    let mut off = 0;
    while off < len {
        for t in tiles {
            let c = &coefs[t.coef0..];
            let q = Ptrs {
                inputs: p.inputs,
                outputs: &p.outputs[t.row0..t.row0 + t.size],
            };
            match t.size {
                8 => tile_ssse3::<8, ACC>(c, &q, off),
                4 => tile_ssse3::<4, ACC>(c, &q, off),
                2 => tile_ssse3::<2, ACC>(c, &q, off),
                _ => tile_ssse3::<1, ACC>(c, &q, off),
            }
        }
        off += 16;
    }
}

/// `dst (^)= coef * src` over `len` bytes; returns the bytes done (a multiple of 16).
#[target_feature(enable = "ssse3")]
pub(crate) unsafe fn row_ssse3<const ACC: bool>(
    dst: *mut u8,
    src: *const u8,
    len: usize,
    coef: u8,
) -> usize {
    let t = NIBBLE_TABLES[coef as usize].as_ptr();
    let tl = _mm_loadu_si128(t.cast());
    let th = _mm_loadu_si128(t.add(16).cast());
    let mask = _mm_set1_epi8(0x0f);
    let mut off = 0;
    while off + 16 <= len {
        let s = _mm_loadu_si128(src.add(off).cast());
        let lo = _mm_and_si128(s, mask);
        let hi = _mm_and_si128(_mm_srli_epi16::<4>(s), mask);
        let mut v = _mm_xor_si128(_mm_shuffle_epi8(tl, lo), _mm_shuffle_epi8(th, hi));
        if ACC {
            v = _mm_xor_si128(v, _mm_loadu_si128(dst.add(off).cast()));
        }
        _mm_storeu_si128(dst.add(off).cast(), v);
        off += 16;
    }
    off
}

// ---------------------------------------------------------------------------------------
// Decoding-matrix construction with GFNI on 256-bit vectors (both GFNI kernels): the
// per-codeword work of a fresh erasure pattern, on short rows kept in L1.
// ---------------------------------------------------------------------------------------

/// Gauss-Jordan elimination of `e` rows of `stride` bytes each (`stride` a multiple of 32,
/// at least `2e`; bytes past `2e` are zero): `[A | I | 0]` becomes `[I | A^-1 | 0]`. False
/// (with `aug` partly eliminated) if `A` is singular.
///
/// # Safety
/// The CPU supports AVX2 and GFNI; `aug` is valid for reads and writes of `e * stride`
/// bytes; `stride % 32 == 0` and `stride >= 2 * e`.
#[target_feature(enable = "avx2,gfni")]
pub(crate) unsafe fn invert_gfni256(aug: *mut u8, e: usize, stride: usize) -> bool {
    let nv = stride / 32;
    for col in 0..e {
        let mut pivot = col;
        while pivot < e && *aug.add(pivot * stride + col) == 0 {
            pivot += 1;
        }
        if pivot == e {
            return false;
        }
        let prow = aug.add(col * stride);
        if pivot != col {
            let other = aug.add(pivot * stride);
            for v in 0..nv {
                let a = _mm256_loadu_si256(prow.add(32 * v).cast());
                let b = _mm256_loadu_si256(other.add(32 * v).cast());
                _mm256_storeu_si256(prow.add(32 * v).cast(), b);
                _mm256_storeu_si256(other.add(32 * v).cast(), a);
            }
        }
        // The pivot is non-zero, so its inverse exists.
        let scale = crate::gf::INV[*prow.add(col) as usize];
        let m = _mm256_set1_epi64x(AFFINE[scale as usize] as i64);
        for v in 0..nv {
            let x = _mm256_loadu_si256(prow.add(32 * v).cast());
            _mm256_storeu_si256(
                prow.add(32 * v).cast(),
                _mm256_gf2p8affine_epi64_epi8::<0>(x, m),
            );
        }
        for r in 0..e {
            let row = aug.add(r * stride);
            let factor = *row.add(col);
            if r == col || factor == 0 {
                continue;
            }
            let m = _mm256_set1_epi64x(AFFINE[factor as usize] as i64);
            for v in 0..nv {
                let p = _mm256_loadu_si256(prow.add(32 * v).cast());
                let x = _mm256_loadu_si256(row.add(32 * v).cast());
                let y = _mm256_xor_si256(x, _mm256_gf2p8affine_epi64_epi8::<0>(p, m));
                _mm256_storeu_si256(row.add(32 * v).cast(), y);
            }
        }
    }
    true
}

/// Rows `e .. e + kept.len()` of the transposed decoding matrix `dt` (rows of `stride`
/// bytes): `dt[e + c] = sum_r rows[r][kept[c]] * dt[r]` for `r < e`, over whole rows.
///
/// # Safety
/// The CPU supports AVX2 and GFNI; `dt` is valid for reads and writes of
/// `(e + kept.len()) * stride` bytes, `stride % 32 == 0`; `rows` has `e` pointers, each
/// valid for reads of more than `max(kept)` bytes.
#[target_feature(enable = "avx2,gfni")]
pub(crate) unsafe fn combine_gfni256(
    dt: *mut u8,
    stride: usize,
    rows: &[*const u8],
    kept: &[usize],
) {
    let e = rows.len();
    let nv = stride / 32;
    for (c, &col) in kept.iter().enumerate() {
        let out = dt.add((e + c) * stride);
        for v in 0..nv {
            let mut acc0 = _mm256_setzero_si256();
            let mut acc1 = _mm256_setzero_si256();
            let mut r = 0;
            while r + 1 < e {
                let c0 = *rows.get_unchecked(r).add(col);
                let c1 = *rows.get_unchecked(r + 1).add(col);
                let m0 = _mm256_set1_epi64x(AFFINE[c0 as usize] as i64);
                let m1 = _mm256_set1_epi64x(AFFINE[c1 as usize] as i64);
                let x0 = _mm256_loadu_si256(dt.add(r * stride + 32 * v).cast());
                let x1 = _mm256_loadu_si256(dt.add((r + 1) * stride + 32 * v).cast());
                acc0 = _mm256_xor_si256(acc0, _mm256_gf2p8affine_epi64_epi8::<0>(x0, m0));
                acc1 = _mm256_xor_si256(acc1, _mm256_gf2p8affine_epi64_epi8::<0>(x1, m1));
                r += 2;
            }
            if r < e {
                let c0 = *rows.get_unchecked(r).add(col);
                let m0 = _mm256_set1_epi64x(AFFINE[c0 as usize] as i64);
                let x0 = _mm256_loadu_si256(dt.add(r * stride + 32 * v).cast());
                acc0 = _mm256_xor_si256(acc0, _mm256_gf2p8affine_epi64_epi8::<0>(x0, m0));
            }
            _mm256_storeu_si256(out.add(32 * v).cast(), _mm256_xor_si256(acc0, acc1));
        }
    }
}
