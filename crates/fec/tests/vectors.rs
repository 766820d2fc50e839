//! Interoperability: isnode-fec parity must be byte-identical to zfec's (and so to Rizzo's
//! fec.c and OpenFEC), for the vectors in `tests/vectors/zfec.txt` (see its README).

use isnode_fec::{Code, Kernel};
use sha2::{Digest, Sha256};

const FIXTURE: &str = include_str!("vectors/zfec.txt");

/// Expected content of one repair symbol.
#[derive(Clone)]
enum Expected {
    Bytes(Vec<u8>),
    Sha256(String),
}

#[derive(Clone)]
struct Case {
    k: usize,
    n: usize,
    symbol_len_bytes: usize,
    seed: u64,
    source_sha256: String,
    repair: Vec<(usize, Expected)>,
}

fn splitmix64_bytes(seed: u64, count: usize) -> Vec<u8> {
    let mut state = seed;
    let mut out = Vec::with_capacity(count + 8);
    while out.len() < count {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        out.extend_from_slice(&z.to_le_bytes());
    }
    out.truncate(count);
    out
}

fn hex_decode(text: &str) -> Vec<u8> {
    assert!(text.len().is_multiple_of(2), "odd hex length");
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex digit"))
        .collect()
}

fn hex_encode(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_fixture() -> Vec<Case> {
    let mut cases = Vec::new();
    let mut current: Option<Case> = None;
    for line in FIXTURE
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields[0] {
            "case" => {
                assert!(current.is_none(), "nested case");
                let num = |i: usize| fields[i].parse::<usize>().expect("number");
                current = Some(Case {
                    k: num(1),
                    n: num(2),
                    symbol_len_bytes: num(3),
                    seed: num(4) as u64,
                    source_sha256: String::new(),
                    repair: Vec::new(),
                });
            }
            "source_sha256" => current.as_mut().expect("in case").source_sha256 = fields[1].into(),
            "repair" | "repair_sha256" => {
                let esi = fields[1].parse().expect("esi");
                let expected = if fields[0] == "repair" {
                    Expected::Bytes(hex_decode(fields[2]))
                } else {
                    Expected::Sha256(fields[2].into())
                };
                current
                    .as_mut()
                    .expect("in case")
                    .repair
                    .push((esi, expected));
            }
            "end" => cases.push(current.take().expect("end without case")),
            other => panic!("unknown fixture line kind {other:?}"),
        }
    }
    assert!(current.is_none(), "unterminated case");
    cases
}

/// All n symbols of a case, encoded by isnode-fec.
fn encode_case(case: &Case, kernel: Kernel) -> (Code, Vec<Vec<u8>>) {
    let code = Code::new(case.k, case.n)
        .expect("valid shape")
        .with_kernel(kernel);
    let stream = splitmix64_bytes(case.seed, case.k * case.symbol_len_bytes);
    assert_eq!(
        hex_encode(&Sha256::digest(&stream)),
        case.source_sha256,
        "source generator differs from gen.py for case k={} n={}",
        case.k,
        case.n
    );
    let len = case.symbol_len_bytes;
    let mut symbols: Vec<Vec<u8>> = (0..case.k)
        .map(|i| stream[i * len..(i + 1) * len].to_vec())
        .collect();
    let mut repair = vec![vec![0u8; len]; case.n - case.k];
    {
        let source: Vec<&[u8]> = symbols.iter().map(Vec::as_slice).collect();
        let mut out: Vec<&mut [u8]> = repair.iter_mut().map(Vec::as_mut_slice).collect();
        code.encode(&source, &mut out).expect("encode");
    }
    symbols.extend(repair);
    (code, symbols)
}

/// Every case under every kernel this CPU supports.
fn every_kernel(cases: Vec<Case>) -> Vec<(Kernel, Case)> {
    Kernel::supported()
        .into_iter()
        .flat_map(|kernel| cases.iter().map(move |c| (kernel, c.clone())))
        .collect()
}

#[test]
fn fixture_covers_the_required_shapes() {
    let cases = parse_fixture();
    let shapes: Vec<(usize, usize, usize)> = cases
        .iter()
        .map(|c| (c.k, c.n, c.symbol_len_bytes))
        .collect();
    for required in [
        (223, 255, 1408),
        (1, 2, 16),
        (10, 15, 37),
        (150, 182, 100),
        (2, 255, 64),
    ] {
        assert!(shapes.contains(&required), "missing vector {required:?}");
    }
    for case in &cases {
        assert_eq!(case.repair.len(), case.n - case.k);
    }
}

#[test]
fn repair_symbols_match_zfec_byte_for_byte() {
    for (kernel, case) in every_kernel(parse_fixture()) {
        let (_, symbols) = encode_case(&case, kernel);
        for (esi, expected) in &case.repair {
            let ours = &symbols[*esi];
            match expected {
                Expected::Bytes(bytes) => assert!(
                    ours == bytes,
                    "{kernel:?} k={} n={} ESI {esi}: ours {} zfec {}",
                    case.k,
                    case.n,
                    hex_encode(ours),
                    hex_encode(bytes)
                ),
                Expected::Sha256(hash) => assert_eq!(
                    &hex_encode(&Sha256::digest(ours)),
                    hash,
                    "{kernel:?} k={} n={} ESI {esi}: sha256 differs from zfec",
                    case.k,
                    case.n
                ),
            }
        }
    }
}

#[test]
fn encode_symbol_matches_zfec_for_single_esi() {
    for (kernel, case) in every_kernel(parse_fixture()) {
        if case.n == case.k {
            continue;
        }
        let (code, symbols) = encode_case(&case, kernel);
        let source: Vec<&[u8]> = symbols[..case.k].iter().map(Vec::as_slice).collect();
        let esi = case.n - 1;
        let mut out = vec![0xEE; case.symbol_len_bytes];
        code.encode_symbol(&source, esi, &mut out)
            .expect("encode_symbol");
        assert_eq!(out, symbols[esi], "{kernel:?} k={} n={}", case.k, case.n);
    }
}

#[test]
fn zfec_vectors_decode_after_random_erasures() {
    let mut rng_state = 0x5EED_u64;
    for (kernel, case) in every_kernel(parse_fixture()) {
        let (code, original) = encode_case(&case, kernel);
        let patterns = if case.symbol_len_bytes > 1000 { 3 } else { 8 };
        for pattern in 0..patterns {
            // Draw a loss count in 0..=n-k (the first pattern always loses the maximum)
            // and distinct positions by a partial Fisher-Yates shuffle.
            let mut positions: Vec<usize> = (0..case.n).collect();
            let mut next = || {
                let r = splitmix64_bytes(rng_state, 8);
                rng_state = rng_state.wrapping_add(1);
                u64::from_le_bytes(r.try_into().expect("8 bytes")) as usize
            };
            let max_loss = case.n - case.k;
            let loss = if pattern == 0 {
                max_loss
            } else {
                next() % (max_loss + 1)
            };
            for i in 0..loss {
                let j = i + next() % (case.n - i);
                positions.swap(i, j);
            }
            let mut present = vec![true; case.n];
            let mut shards = original.clone();
            for &esi in &positions[..loss] {
                present[esi] = false;
                shards[esi].fill(0xA5);
            }
            let mut refs: Vec<&mut [u8]> = shards.iter_mut().map(Vec::as_mut_slice).collect();
            code.reconstruct_all(&mut refs, &present)
                .expect("enough symbols");
            assert!(
                shards == original,
                "{kernel:?} k={} n={} lost {:?}",
                case.k,
                case.n,
                &positions[..loss]
            );
        }
    }
}
