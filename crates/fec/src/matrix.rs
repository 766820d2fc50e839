//! Small dense matrices over GF(2^8) and the RFC 5510 generator matrix.
//!
//! The systematic generator is `G = V * V_top^-1`, where `V` is the `n x k` Vandermonde matrix
//! whose row `j` holds the powers `x_j^0 .. x_j^(k-1)` of the evaluation point
//! `x_0 = 0`, `x_j = alpha^(j-1)` for `j > 0` (RFC 5510 section 8.1, Rizzo's `fec.c`, zfec's
//! `fec_new`), and `V_top` is its top `k x k` part. Row `j` of `G` evaluates, at `x_j`, the
//! polynomial of degree `< k` that takes the source values at `x_0 .. x_(k-1)`: entry `(r, j)` is
//! the Lagrange basis polynomial `L_j(x_r)`. So the repair row of ESI `r` depends only on `k`
//! and `r`, never on `n`.

use crate::gf;
use crate::kernel;

/// A dense `rows x cols` matrix over GF(2^8), stored row-major.
#[derive(Clone, PartialEq, Eq)]
pub struct Matrix {
    rows: usize,
    cols: usize,
    data: Vec<u8>,
}

impl std::fmt::Debug for Matrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "Matrix {}x{} [", self.rows, self.cols)?;
        for r in 0..self.rows {
            writeln!(f, "  {:02x?}", self.row(r))?;
        }
        write!(f, "]")
    }
}

impl Matrix {
    /// The all-zero `rows x cols` matrix.
    pub fn zero(rows: usize, cols: usize) -> Matrix {
        Matrix {
            rows,
            cols,
            data: vec![0; rows * cols],
        }
    }

    /// The `size x size` identity matrix.
    pub fn identity(size: usize) -> Matrix {
        let mut m = Matrix::zero(size, size);
        for i in 0..size {
            m.set(i, i, 1);
        }
        m
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Number of columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Entry at row `r`, column `c`.
    ///
    /// # Panics
    /// If `r` or `c` is out of range.
    pub fn get(&self, r: usize, c: usize) -> u8 {
        assert!(r < self.rows && c < self.cols, "matrix index out of range");
        self.data[r * self.cols + c]
    }

    /// Sets the entry at row `r`, column `c`.
    ///
    /// # Panics
    /// If `r` or `c` is out of range.
    pub fn set(&mut self, r: usize, c: usize, value: u8) {
        assert!(r < self.rows && c < self.cols, "matrix index out of range");
        self.data[r * self.cols + c] = value;
    }

    /// Row `r` as a slice.
    ///
    /// # Panics
    /// If `r` is out of range.
    pub fn row(&self, r: usize) -> &[u8] {
        &self.data[r * self.cols..(r + 1) * self.cols]
    }

    /// The Vandermonde matrix of the given evaluation points: row `j` is
    /// `points[j]^0, points[j]^1, .., points[j]^(cols-1)` (with `0^0 = 1`).
    pub fn vandermonde(points: &[u8], cols: usize) -> Matrix {
        let mut m = Matrix::zero(points.len(), cols);
        for (r, &x) in points.iter().enumerate() {
            let mut power = 1u8;
            for c in 0..cols {
                m.set(r, c, power);
                power = gf::mul(power, x);
            }
        }
        m
    }

    /// Matrix product `self * other`.
    ///
    /// # Panics
    /// If `self.cols() != other.rows()`.
    pub fn mul(&self, other: &Matrix) -> Matrix {
        assert_eq!(self.cols, other.rows, "matrix product: shapes do not match");
        let mut out = Matrix::zero(self.rows, other.cols);
        let cols = other.cols;
        for r in 0..self.rows {
            let out_row = &mut out.data[r * cols..(r + 1) * cols];
            for (i, &coef) in self.row(r).iter().enumerate() {
                kernel::mul_add(out_row, other.row(i), coef);
            }
        }
        out
    }

    /// Inverse by Gauss-Jordan elimination; `None` if the matrix is singular.
    ///
    /// # Panics
    /// If the matrix is not square.
    pub fn invert(&self) -> Option<Matrix> {
        assert_eq!(self.rows, self.cols, "only square matrices have inverses");
        let size = self.rows;
        let mut work = self.clone();
        let mut inverse = Matrix::identity(size);
        for col in 0..size {
            let pivot_row = (col..size).find(|&r| work.get(r, col) != 0)?;
            work.swap_rows(col, pivot_row);
            inverse.swap_rows(col, pivot_row);
            let pivot_inv = gf::inv(work.get(col, col))?;
            work.scale_row(col, pivot_inv);
            inverse.scale_row(col, pivot_inv);
            for r in 0..size {
                let factor = work.get(r, col);
                if r != col && factor != 0 {
                    work.add_scaled_row(r, col, factor);
                    inverse.add_scaled_row(r, col, factor);
                }
            }
        }
        Some(inverse)
    }

    fn swap_rows(&mut self, a: usize, b: usize) {
        if a != b {
            for c in 0..self.cols {
                self.data.swap(a * self.cols + c, b * self.cols + c);
            }
        }
    }

    fn scale_row(&mut self, r: usize, factor: u8) {
        for value in &mut self.data[r * self.cols..(r + 1) * self.cols] {
            *value = gf::mul(*value, factor);
        }
    }

    /// `row[dst] += factor * row[src]`, `dst != src`.
    fn add_scaled_row(&mut self, dst: usize, src: usize, factor: u8) {
        assert_ne!(dst, src);
        let cols = self.cols;
        let (dst_row, src_row) = if dst < src {
            let (head, tail) = self.data.split_at_mut(src * cols);
            (&mut head[dst * cols..(dst + 1) * cols], &tail[..cols])
        } else {
            let (head, tail) = self.data.split_at_mut(dst * cols);
            (&mut tail[..cols], &head[src * cols..(src + 1) * cols])
        };
        kernel::mul_add(dst_row, src_row, factor);
    }
}

/// The evaluation point of ESI `esi`: `0` for ESI 0, `alpha^(esi-1)` otherwise.
///
/// Distinct for all `esi < 256`.
pub fn evaluation_point(esi: usize) -> u8 {
    if esi == 0 {
        0
    } else {
        gf::exp(esi - 1)
    }
}

/// The repair part of the systematic generator: row `i` holds the `k` coefficients of the
/// repair symbol with ESI `k + i`, for `i < n - k`, so that
/// `repair[i] = sum_j rows[i][j] * source[j]`.
///
/// Computed in `O(n k)` from the Lagrange form (see the module docs); equal to the bottom
/// `n - k` rows of `V * V_top^-1` (checked by the tests against that construction).
///
/// # Panics
/// If `k == 0` or `n > 255` or `k > n` (the caller validates shapes first).
pub fn parity_rows(k: usize, n: usize) -> Matrix {
    assert!(
        k >= 1 && k <= n && n <= gf::GROUP_ORDER,
        "invalid code shape"
    );
    let points: Vec<u8> = (0..n).map(evaluation_point).collect();
    let source_points = &points[..k];
    // w_j = prod_{i != j} (x_j - x_i), never 0 because the points are distinct.
    let weights: Vec<u8> = (0..k)
        .map(|j| {
            (0..k).filter(|&i| i != j).fold(1u8, |acc, i| {
                gf::mul(acc, source_points[j] ^ source_points[i])
            })
        })
        .collect();
    let mut rows = Matrix::zero(n - k, k);
    for (i, &x) in points[k..].iter().enumerate() {
        // L_j(x) = prod_{i != j} (x - x_i) / w_j = N / ((x - x_j) w_j), with x != x_j.
        let numerator = source_points
            .iter()
            .fold(1u8, |acc, &xi| gf::mul(acc, x ^ xi));
        for j in 0..k {
            let denominator = gf::mul(x ^ source_points[j], weights[j]);
            let value = gf::div(numerator, denominator);
            assert!(value.is_some(), "evaluation points must be distinct");
            rows.set(i, j, value.unwrap_or(0));
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    /// zfec's `fec_new`, literally: Vandermonde with `tmp_m[0] = 1` and
    /// `gf_exp[modnn(row * col)]`, invert the top, multiply the bottom.
    fn parity_rows_by_inversion(k: usize, n: usize) -> Matrix {
        let mut v = Matrix::zero(n, k);
        v.set(0, 0, 1);
        for row in 0..n - 1 {
            for col in 0..k {
                v.set(row + 1, col, gf::exp(row * col));
            }
        }
        let mut top = Matrix::zero(k, k);
        let mut bottom = Matrix::zero(n - k, k);
        for r in 0..n {
            for c in 0..k {
                if r < k {
                    top.set(r, c, v.get(r, c));
                } else {
                    bottom.set(r - k, c, v.get(r, c));
                }
            }
        }
        let top_inv = top
            .invert()
            .expect("Vandermonde with distinct points is invertible");
        bottom.mul(&top_inv)
    }

    #[test]
    fn vandermonde_helper_matches_zfec_layout() {
        let points: Vec<u8> = (0..20).map(evaluation_point).collect();
        let v = Matrix::vandermonde(&points, 9);
        assert_eq!(v.row(0), &[1, 0, 0, 0, 0, 0, 0, 0, 0]);
        for row in 1..20 {
            for col in 0..9 {
                assert_eq!(v.get(row, col), gf::exp((row - 1) * col));
            }
        }
    }

    #[test]
    fn lagrange_parity_rows_equal_inverted_vandermonde() {
        for &(k, n) in &[
            (1, 2),
            (1, 255),
            (2, 3),
            (3, 7),
            (10, 15),
            (64, 80),
            (223, 255),
            (254, 255),
        ] {
            assert_eq!(
                parity_rows(k, n),
                parity_rows_by_inversion(k, n),
                "k={k} n={n}"
            );
        }
    }

    #[test]
    fn repair_rows_do_not_depend_on_n() {
        let short = parity_rows(20, 30);
        let long = parity_rows(20, 255);
        for i in 0..10 {
            assert_eq!(short.row(i), long.row(i));
        }
    }

    #[test]
    fn parity_rows_are_all_non_zero() {
        // MDS: every 1x1 minor of the repair part is non-singular.
        let rows = parity_rows(100, 255);
        assert!((0..rows.rows()).all(|r| rows.row(r).iter().all(|&c| c != 0)));
    }

    #[test]
    fn invert_round_trips_and_detects_singular() {
        let points: Vec<u8> = (0..12).map(evaluation_point).collect();
        let v = Matrix::vandermonde(&points, 12);
        let v_inv = v.invert().expect("invertible");
        assert_eq!(v.mul(&v_inv), Matrix::identity(12));
        assert_eq!(v_inv.mul(&v), Matrix::identity(12));

        let mut singular = v.clone();
        for c in 0..12 {
            let value = singular.get(3, c);
            singular.set(7, c, value);
        }
        assert!(singular.invert().is_none());
        assert!(Matrix::zero(4, 4).invert().is_none());
    }
}
