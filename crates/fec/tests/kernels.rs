//! Every SIMD kernel against the scalar reference: random matrices, symbol lengths (including
//! lengths that are not a multiple of any vector width), buffer alignments and coefficients.

use isnode_fec::{Kernel, MatrixPlan};
use proptest::prelude::*;

/// `count` buffers of `len` bytes each starting `align` bytes into its own allocation.
fn buffers(data: &[u8], count: usize, len: usize, align: usize) -> Vec<Vec<u8>> {
    (0..count)
        .map(|i| {
            let mut v = vec![0u8; align + len];
            for (b, byte) in v[align..].iter_mut().enumerate() {
                *byte = data[(i * 131 + b * 7) % data.len()] ^ (b as u8);
            }
            v
        })
        .collect()
}

fn apply(
    kernel: Kernel,
    coefs: &[u8],
    inputs: &[Vec<u8>],
    outputs: &mut [Vec<u8>],
    align: usize,
    accumulate: bool,
) {
    let plan = MatrixPlan::new(kernel, coefs, outputs.len(), inputs.len());
    let ins: Vec<&[u8]> = inputs.iter().map(|v| &v[align..]).collect();
    let mut outs: Vec<&mut [u8]> = outputs.iter_mut().map(|v| &mut v[align..]).collect();
    if accumulate {
        plan.apply_add(&ins, &mut outs);
    } else {
        plan.apply(&ins, &mut outs);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn matrix_kernels_match_scalar(
        rows in 0usize..=40,
        cols in 0usize..=40,
        len in prop_oneof![0usize..=200, 200usize..=1500],
        align in 0usize..64,
        accumulate in any::<bool>(),
        data in proptest::collection::vec(any::<u8>(), 2..512),
        coef_seed in any::<u64>(),
    ) {
        let mut state = coef_seed;
        let coefs: Vec<u8> = (0..rows * cols)
            .map(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (state >> 56) as u8
            })
            .collect();
        let inputs = buffers(&data, cols, len, align);
        let start = buffers(&data[1..], rows, len, align);
        let mut expected = start.clone();
        apply(Kernel::Scalar, &coefs, &inputs, &mut expected, align, accumulate);
        for kernel in Kernel::supported() {
            let mut got = start.clone();
            apply(kernel, &coefs, &inputs, &mut got, align, accumulate);
            prop_assert!(got == expected, "{:?} rows {} cols {} len {} align {}", kernel, rows, cols, len, align);
        }
    }

    #[test]
    fn row_kernels_match_scalar(
        len in 0usize..=300,
        align in 0usize..64,
        coef in any::<u8>(),
        data in proptest::collection::vec(any::<u8>(), 2..512),
    ) {
        let bufs = buffers(&data, 2, len, align);
        let (src, dst) = (&bufs[0][align..], &bufs[1][align..]);
        let mut want_add = dst.to_vec();
        Kernel::Scalar.mul_add(&mut want_add, src, coef);
        let mut want_mul = dst.to_vec();
        Kernel::Scalar.mul(&mut want_mul, src, coef);
        for kernel in Kernel::supported() {
            let mut got = bufs[1].clone();
            kernel.mul_add(&mut got[align..], src, coef);
            prop_assert_eq!(&got[align..], &want_add[..], "{:?} mul_add", kernel);
            let mut got = bufs[1].clone();
            kernel.mul(&mut got[align..], src, coef);
            prop_assert_eq!(&got[align..], &want_mul[..], "{:?} mul", kernel);
        }
    }
}

/// Every coefficient in every row/column slot of a 16 x 16 tile, for every kernel.
#[test]
fn every_coefficient_in_every_kernel() {
    let (rows, cols, len) = (16, 16, 200);
    let inputs: Vec<Vec<u8>> = (0..cols)
        .map(|j| (0..len).map(|b| (b * 37 + j * 11 + 5) as u8).collect())
        .collect();
    for base in (0..256).step_by(rows * cols) {
        let coefs: Vec<u8> = (0..rows * cols).map(|i| ((base + i) % 256) as u8).collect();
        let mut expected = vec![vec![0u8; len]; rows];
        apply(Kernel::Scalar, &coefs, &inputs, &mut expected, 0, false);
        for kernel in Kernel::supported() {
            let mut got = vec![vec![0xEEu8; len]; rows];
            apply(kernel, &coefs, &inputs, &mut got, 0, false);
            assert_eq!(got, expected, "{kernel:?}");
        }
    }
}

/// The environment override is honoured by `Kernel::active` (decided once per process, so
/// only checked for consistency here).
#[test]
fn active_kernel_is_supported_and_named() {
    let active = Kernel::active();
    assert!(active.is_supported());
    assert_eq!(isnode_fec::kernel::kernel_name(), active.name());
    if let Ok(name) = std::env::var(isnode_fec::kernel::KERNEL_ENV) {
        if let Some(k) = Kernel::from_name(&name) {
            if k.is_supported() {
                assert_eq!(active, k);
            }
        }
    }
}
