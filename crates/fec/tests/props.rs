//! Property tests: any erasure pattern of at most n - k symbols is repaired exactly, encoding
//! is linear, and bad inputs give the right error without touching the shards.

use isnode_fec::{gf, Code, FecError, MAX_ENCODING_SYMBOLS};
use proptest::prelude::*;
use proptest::sample::subsequence;

/// A code shape, a symbol length (0, 1, small odd, up to ~3000) and source bytes.
fn shape_and_source() -> impl Strategy<Value = (usize, usize, Vec<Vec<u8>>)> {
    (1..=MAX_ENCODING_SYMBOLS)
        .prop_flat_map(|n| (1..=n, Just(n)))
        .prop_flat_map(|(k, n)| {
            let len = prop_oneof![
                Just(0usize),
                Just(1usize),
                (0usize..40).prop_map(|l| 2 * l + 1),
                0usize..=3000
            ];
            (Just(k), Just(n), len)
        })
        .prop_flat_map(|(k, n, len)| {
            (
                Just(k),
                Just(n),
                proptest::collection::vec(proptest::collection::vec(any::<u8>(), len), k),
            )
        })
}

/// Shape, source, and a set of ESIs to erase (any positions, at most n - k of them).
fn codeword_and_erasures() -> impl Strategy<Value = (usize, usize, Vec<Vec<u8>>, Vec<usize>)> {
    shape_and_source().prop_flat_map(|(k, n, source)| {
        let erased = subsequence((0..n).collect::<Vec<_>>(), 0..=n - k);
        (Just(k), Just(n), Just(source), erased)
    })
}

fn encode_all(code: &Code, source: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let len = source[0].len();
    let mut repair = vec![vec![0u8; len]; code.repair_symbols()];
    let source_refs: Vec<&[u8]> = source.iter().map(Vec::as_slice).collect();
    let mut repair_refs: Vec<&mut [u8]> = repair.iter_mut().map(Vec::as_mut_slice).collect();
    code.encode(&source_refs, &mut repair_refs).expect("encode");
    source.iter().cloned().chain(repair).collect()
}

fn refs(shards: &mut [Vec<u8>]) -> Vec<&mut [u8]> {
    shards.iter_mut().map(Vec::as_mut_slice).collect()
}

const GARBAGE: u8 = 0xA5;

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn reconstruct_repairs_any_erasures((k, n, source, erased) in codeword_and_erasures()) {
        let code = Code::new(k, n).expect("valid shape");
        let original = encode_all(&code, &source);
        let mut present = vec![true; n];
        let mut shards = original.clone();
        for &esi in &erased {
            present[esi] = false;
            shards[esi].fill(GARBAGE);
        }
        let before = shards.clone();

        code.reconstruct(&mut refs(&mut shards), &present).expect("reconstruct");
        for esi in 0..n {
            if esi < k {
                prop_assert_eq!(&shards[esi], &original[esi], "source ESI {}", esi);
            } else {
                // Present repair shards must be untouched; missing ones are left alone too.
                prop_assert_eq!(&shards[esi], &before[esi], "repair ESI {}", esi);
            }
        }

        let mut shards = before.clone();
        code.reconstruct_all(&mut refs(&mut shards), &present).expect("reconstruct_all");
        prop_assert!(shards == original);
    }

    #[test]
    fn encode_is_linear((k, n, a) in shape_and_source(), seed in any::<u64>(), scale in any::<u8>()) {
        let code = Code::new(k, n).expect("valid shape");
        let b: Vec<Vec<u8>> = a
            .iter()
            .enumerate()
            .map(|(i, s)| s.iter().enumerate().map(|(j, &x)| x ^ (seed.rotate_left((i * 7 + j) as u32 % 64) as u8)).collect())
            .collect();
        let sum: Vec<Vec<u8>> = a.iter().zip(&b).map(|(x, y)| x.iter().zip(y).map(|(p, q)| p ^ q).collect()).collect();
        let scaled: Vec<Vec<u8>> = a.iter().map(|x| x.iter().map(|&p| gf::mul(scale, p)).collect()).collect();
        let (ea, eb, esum, escaled) = (encode_all(&code, &a), encode_all(&code, &b), encode_all(&code, &sum), encode_all(&code, &scaled));
        for esi in k..n {
            let expected: Vec<u8> = ea[esi].iter().zip(&eb[esi]).map(|(p, q)| p ^ q).collect();
            prop_assert_eq!(&esum[esi], &expected, "additivity at ESI {}", esi);
            let expected: Vec<u8> = ea[esi].iter().map(|&p| gf::mul(scale, p)).collect();
            prop_assert_eq!(&escaled[esi], &expected, "homogeneity at ESI {}", esi);
        }
    }

    #[test]
    fn too_few_symbols_is_an_error_and_touches_nothing(
        (k, n, source) in shape_and_source(),
        extra in 1usize..=255,
        pick in any::<proptest::sample::Index>(),
    ) {
        let code = Code::new(k, n).expect("valid shape");
        let mut shards = encode_all(&code, &source);
        // Erase n - k + extra symbols (capped at n), starting at a random rotation.
        let erase = (n - k + extra).min(n);
        let start = pick.index(n);
        let mut present = vec![true; n];
        for i in 0..erase {
            present[(start + i) % n] = false;
        }
        let before = shards.clone();
        let got = n - erase;
        let err = code.reconstruct(&mut refs(&mut shards), &present).unwrap_err();
        prop_assert_eq!(err, FecError::NotEnoughSymbols { got, need: k });
        let err = code.reconstruct_all(&mut refs(&mut shards), &present).unwrap_err();
        prop_assert_eq!(err, FecError::NotEnoughSymbols { got, need: k });
        prop_assert!(shards == before);
    }

    #[test]
    fn new_validates_shape(k in 0usize..400, n in 0usize..400) {
        let result = Code::new(k, n);
        if n > MAX_ENCODING_SYMBOLS {
            prop_assert_eq!(result.unwrap_err(), FecError::TooManyEncodingSymbols { n });
        } else if k == 0 {
            prop_assert_eq!(result.unwrap_err(), FecError::NoSourceSymbols);
        } else if k > n {
            prop_assert_eq!(result.unwrap_err(), FecError::SourceExceedsEncoding { k, n });
        } else {
            let code = result.expect("valid shape");
            prop_assert_eq!((code.source_symbols(), code.encoding_symbols(), code.repair_symbols()), (k, n, n - k));
        }
    }
}

#[test]
fn no_missing_source_means_no_work() {
    let code = Code::new(4, 8).expect("valid");
    let mut shards = vec![vec![1u8; 10]; 8];
    let present = [true, true, true, true, false, false, false, false];
    // The repair shards hold garbage and are missing: reconstruct must not even look at them.
    code.reconstruct(&mut refs(&mut shards), &present)
        .expect("ok");
    assert!(shards.iter().all(|s| s == &vec![1u8; 10]));
}

#[test]
fn input_shape_errors() {
    let code = Code::new(3, 5).expect("valid");
    let a = [1u8; 4];
    let short = [1u8; 3];
    let mut r0 = [0u8; 4];
    let mut r1 = [0u8; 4];
    let mut r2 = [0u8; 4];

    assert_eq!(
        code.encode(&[&a, &a], &mut [&mut r0]).unwrap_err(),
        FecError::WrongSymbolCount {
            what: "source symbols",
            got: 2,
            expected: 3
        }
    );
    assert_eq!(
        code.encode(&[&a, &short, &a], &mut [&mut r0]).unwrap_err(),
        FecError::SymbolLengthMismatch {
            esi: 1,
            len_bytes: 3,
            expected_bytes: 4
        }
    );
    let mut r_short = [0u8; 3];
    assert_eq!(
        code.encode(&[&a, &a, &a], &mut [&mut r0, &mut r_short])
            .unwrap_err(),
        FecError::SymbolLengthMismatch {
            esi: 4,
            len_bytes: 3,
            expected_bytes: 4
        }
    );
    assert_eq!(
        code.encode(&[&a, &a, &a], &mut [&mut r0, &mut r1, &mut r2])
            .unwrap_err(),
        FecError::EsiOutOfRange { esi: 5, n: 5 }
    );
    assert_eq!(
        code.encode_symbol(&[&a, &a, &a], 2, &mut r0).unwrap_err(),
        FecError::EsiOutOfRange { esi: 2, n: 5 }
    );
    assert_eq!(
        code.encode_symbol(&[&a, &a, &a], 5, &mut r0).unwrap_err(),
        FecError::EsiOutOfRange { esi: 5, n: 5 }
    );
    code.encode(&[&a, &a, &a], &mut [])
        .expect("no repair requested is fine");

    let mut shards = vec![vec![0u8; 4]; 4];
    assert_eq!(
        code.reconstruct(&mut refs(&mut shards), &[true; 4])
            .unwrap_err(),
        FecError::WrongSymbolCount {
            what: "shards",
            got: 4,
            expected: 5
        }
    );
    let mut shards = vec![vec![0u8; 4]; 5];
    assert_eq!(
        code.reconstruct(&mut refs(&mut shards), &[true; 6])
            .unwrap_err(),
        FecError::WrongSymbolCount {
            what: "presence flags",
            got: 6,
            expected: 5
        }
    );
    shards[3] = vec![0u8; 5];
    assert_eq!(
        code.reconstruct_all(&mut refs(&mut shards), &[true; 5])
            .unwrap_err(),
        FecError::SymbolLengthMismatch {
            esi: 3,
            len_bytes: 5,
            expected_bytes: 4
        }
    );
    assert!(FecError::NotEnoughSymbols { got: 2, need: 3 }
        .to_string()
        .contains("got 2, need 3"));
}

#[test]
fn code_is_clone_debug_send_sync() {
    fn assert_traits<T: Clone + std::fmt::Debug + Send + Sync>() {}
    assert_traits::<Code>();
    let code = Code::new(223, 255).expect("valid");
    assert_eq!(format!("{code:?}"), "Code { k: 223, n: 255, .. }");
}
