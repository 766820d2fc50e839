//! Reed-Solomon codec throughput: encode, and worst-case decode, on one thread.
//!
//! Throughput is in MB/s of **source** data (10^6 bytes of source symbols per second) on one
//! core. Worst-case decode loses `m` source symbols in every codeword, at fresh random
//! (seeded) positions, so each codeword needs a new `m x m` inversion and `m` symbols rebuilt
//! from `k` inputs each. Every decode in the timed loop writes into the working copy of its
//! codeword; after timing, all working copies are compared with the originals, so a broken
//! decoder cannot report a figure.

use std::time::{Duration, Instant};

use isnode_fec::{kernel, Code, FecError};
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};

/// Number of distinct codewords cycled through, so the data is not all hot in L1/L2.
const CODEWORD_POOL: usize = 8;

/// What to measure.
#[derive(Debug, Clone, PartialEq)]
pub struct CodecBenchConfig {
    /// Source symbols per codeword.
    pub k: usize,
    /// Repair symbols per codeword (`k + m <= 255`).
    pub m: usize,
    /// Bytes per symbol.
    pub symbol_len_bytes: usize,
    /// Duration of each timed measurement (encode, then decode), in seconds; a warm-up of
    /// a fifth of this (at most 0.5 s) precedes each.
    pub seconds: f64,
    /// Seed of the source data and of the loss positions.
    pub seed: u64,
}

impl Default for CodecBenchConfig {
    /// isnode's default codeword: k = 223, m = 32, 1408-byte symbols, 2 s per measurement.
    fn default() -> Self {
        CodecBenchConfig {
            k: 223,
            m: 32,
            symbol_len_bytes: 1408,
            seconds: 2.0,
            seed: 0x15_40DE,
        }
    }
}

/// Result of one codec benchmark run.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CodecReport {
    /// Name of the slice kernel used (e.g. `scalar-table`).
    pub kernel: String,
    /// Source symbols per codeword.
    pub k: usize,
    /// Repair symbols per codeword.
    pub m: usize,
    /// Bytes per symbol.
    pub symbol_len_bytes: usize,
    /// Threads used (always 1: figures are per core).
    pub threads: usize,
    /// Encode throughput, MB (10^6 bytes) of source data per second.
    pub encode_mb_per_s: f64,
    /// Worst-case decode throughput (m source symbols lost per codeword), MB of source data
    /// per second, including building and inverting the decode matrix.
    pub decode_worst_mb_per_s: f64,
    /// Codewords encoded in the timed loop.
    pub encode_codewords: u64,
    /// Codewords decoded in the timed loop.
    pub decode_codewords: u64,
    /// Length of the timed encode loop, in seconds.
    pub encode_seconds: f64,
    /// Length of the timed decode loop, in seconds.
    pub decode_seconds: f64,
    /// Every decoded codeword was checked against the original (always true in a report:
    /// a mismatch is an error).
    pub decode_verified: bool,
}

/// Why the codec benchmark could not run or produce a figure.
#[derive(Debug, thiserror::Error)]
pub enum CodecBenchError {
    /// The configuration is unusable.
    #[error("invalid codec benchmark configuration: {0}")]
    InvalidConfig(String),
    /// The codec refused the shape or the data.
    #[error("codec error: {0}")]
    Fec(#[from] FecError),
    /// A decoded codeword differs from the original: the decoder is broken.
    #[error(
        "decode produced wrong data (codeword {codeword}, ESI {esi}): refusing to report a figure"
    )]
    DecodeMismatch {
        /// Index of the codeword in the pool.
        codeword: usize,
        /// First ESI that differs.
        esi: usize,
    },
}

/// One codeword: `k + m` symbols, indexed by ESI.
type Codeword = Vec<Vec<u8>>;

/// Runs the encode and worst-case decode measurements described by `cfg` on the calling thread.
pub fn run_codec_bench(cfg: &CodecBenchConfig) -> Result<CodecReport, CodecBenchError> {
    if !(cfg.seconds.is_finite() && cfg.seconds > 0.0) {
        return Err(CodecBenchError::InvalidConfig(format!(
            "seconds = {} must be a positive number",
            cfg.seconds
        )));
    }
    if cfg.symbol_len_bytes == 0 {
        return Err(CodecBenchError::InvalidConfig(
            "symbol_len_bytes must be at least 1".into(),
        ));
    }
    let n = cfg.k.checked_add(cfg.m).ok_or_else(|| {
        CodecBenchError::InvalidConfig(format!("k + m overflows (k = {}, m = {})", cfg.k, cfg.m))
    })?;
    let code = Code::new(cfg.k, n)?;
    let mut rng = StdRng::seed_from_u64(cfg.seed);

    // Originals: random source, parity from the codec under test.
    let mut originals: Vec<Codeword> = Vec::with_capacity(CODEWORD_POOL);
    for _ in 0..CODEWORD_POOL {
        let mut codeword: Codeword = vec![vec![0u8; cfg.symbol_len_bytes]; n];
        for symbol in &mut codeword[..cfg.k] {
            rng.fill_bytes(symbol);
        }
        encode_codeword(&code, &mut codeword)?;
        originals.push(codeword);
    }
    let mut work = originals.clone();
    let warmup = Duration::from_secs_f64((cfg.seconds / 5.0).min(0.5));
    let measure = Duration::from_secs_f64(cfg.seconds);

    // Encode.
    let mut encode_one = |i: usize| -> Result<(), CodecBenchError> {
        Ok(encode_codeword(&code, &mut work[i % CODEWORD_POOL])?)
    };
    timed_loop(warmup, &mut encode_one)?;
    let (encode_codewords, encode_time) = timed_loop(measure, &mut encode_one)?;
    verify(&originals, &work)?;

    // Worst-case decode: m source symbols lost at fresh positions in every codeword.
    let mut present = vec![true; n];
    // Warm-up decodes scribble over the lost symbols first and are checked one by one.
    timed_loop(warmup, |i| {
        let slot = i % CODEWORD_POOL;
        decode_codeword(&code, cfg.m, &mut work[slot], &mut present, &mut rng, true)?;
        verify_one(&originals[slot], &work[slot], slot)
    })?;
    let (decode_codewords, decode_time) = timed_loop(measure, |i| {
        decode_codeword(
            &code,
            cfg.m,
            &mut work[i % CODEWORD_POOL],
            &mut present,
            &mut rng,
            false,
        )
    })?;
    verify(&originals, &work)?;

    let source_bytes = (cfg.k * cfg.symbol_len_bytes) as f64;
    let mb_per_s =
        |codewords: u64, time: Duration| codewords as f64 * source_bytes / time.as_secs_f64() / 1e6;
    Ok(CodecReport {
        kernel: kernel::kernel_name().to_string(),
        k: cfg.k,
        m: cfg.m,
        symbol_len_bytes: cfg.symbol_len_bytes,
        threads: 1,
        encode_mb_per_s: mb_per_s(encode_codewords, encode_time),
        decode_worst_mb_per_s: mb_per_s(decode_codewords, decode_time),
        encode_codewords,
        decode_codewords,
        encode_seconds: encode_time.as_secs_f64(),
        decode_seconds: decode_time.as_secs_f64(),
        decode_verified: true,
    })
}

/// Renders reports as a fixed-width text table, one row per report.
pub fn format_table(reports: &[CodecReport]) -> String {
    let mut out = format!(
        "{:<14} {:>4} {:>4} {:>12} {:>14} {:>20} {:>10} {:>10}\n",
        "kernel", "k", "m", "symbol_bytes", "encode_MB/s", "decode_worst_MB/s", "enc_cw", "dec_cw"
    );
    for r in reports {
        out.push_str(&format!(
            "{:<14} {:>4} {:>4} {:>12} {:>14.1} {:>20.1} {:>10} {:>10}\n",
            r.kernel,
            r.k,
            r.m,
            r.symbol_len_bytes,
            r.encode_mb_per_s,
            r.decode_worst_mb_per_s,
            r.encode_codewords,
            r.decode_codewords
        ));
    }
    out
}

/// Loses `m` source symbols of `codeword` at fresh random positions (overwriting them with
/// garbage if `scribble`) and rebuilds them.
fn decode_codeword(
    code: &Code,
    m: usize,
    codeword: &mut Codeword,
    present: &mut [bool],
    rng: &mut StdRng,
    scribble: bool,
) -> Result<(), CodecBenchError> {
    let k = code.source_symbols();
    present.fill(true);
    for esi in rand::seq::index::sample(rng, k, m.min(k)) {
        present[esi] = false;
        if scribble {
            codeword[esi].fill(rng.random());
        }
    }
    let mut shards: Vec<&mut [u8]> = codeword.iter_mut().map(Vec::as_mut_slice).collect();
    code.reconstruct(&mut shards, present)?;
    Ok(())
}

fn encode_codeword(code: &Code, codeword: &mut Codeword) -> Result<(), FecError> {
    let (source, repair) = codeword.split_at_mut(code.source_symbols());
    let source: Vec<&[u8]> = source.iter().map(Vec::as_slice).collect();
    let mut repair: Vec<&mut [u8]> = repair.iter_mut().map(Vec::as_mut_slice).collect();
    code.encode(&source, &mut repair)
}

/// Runs `step(0), step(1), ..` for at least `duration` (and at least once); returns the
/// number of steps and the elapsed time.
fn timed_loop(
    duration: Duration,
    mut step: impl FnMut(usize) -> Result<(), CodecBenchError>,
) -> Result<(u64, Duration), CodecBenchError> {
    let start = Instant::now();
    let mut count = 0usize;
    loop {
        step(count)?;
        count += 1;
        let elapsed = start.elapsed();
        if elapsed >= duration {
            return Ok((count as u64, elapsed));
        }
    }
}

fn verify(originals: &[Codeword], work: &[Codeword]) -> Result<(), CodecBenchError> {
    for (codeword, (original, decoded)) in originals.iter().zip(work).enumerate() {
        verify_one(original, decoded, codeword)?;
    }
    Ok(())
}

fn verify_one(
    original: &Codeword,
    decoded: &Codeword,
    codeword: usize,
) -> Result<(), CodecBenchError> {
    match original.iter().zip(decoded).position(|(a, b)| a != b) {
        Some(esi) => Err(CodecBenchError::DecodeMismatch { codeword, esi }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quick(k: usize, m: usize, symbol_len_bytes: usize) -> CodecBenchConfig {
        CodecBenchConfig {
            k,
            m,
            symbol_len_bytes,
            seconds: 0.02,
            seed: 7,
        }
    }

    #[test]
    fn small_run_reports_positive_verified_figures() {
        let report = run_codec_bench(&quick(20, 4, 64)).expect("bench runs");
        assert_eq!((report.k, report.m, report.symbol_len_bytes), (20, 4, 64));
        assert!(report.encode_mb_per_s > 0.0 && report.decode_worst_mb_per_s > 0.0);
        assert!(report.encode_codewords >= 1 && report.decode_codewords >= 1);
        assert!(report.encode_seconds >= 0.02 && report.decode_seconds >= 0.02);
        assert!(report.decode_verified);
        assert_eq!(report.kernel, kernel::kernel_name());
        let json = serde_json::to_value(&report).expect("serialises");
        assert_eq!(json["k"], 20);
        assert!(json["decode_worst_mb_per_s"].as_f64().is_some());
    }

    #[test]
    fn default_shape_runs() {
        let cfg = CodecBenchConfig {
            seconds: 0.01,
            ..CodecBenchConfig::default()
        };
        let report = run_codec_bench(&cfg).expect("bench runs");
        assert_eq!(
            (report.k, report.m, report.symbol_len_bytes),
            (223, 32, 1408)
        );
    }

    #[test]
    fn bad_configs_are_refused() {
        assert!(matches!(
            run_codec_bench(&quick(250, 32, 64)),
            Err(CodecBenchError::Fec(FecError::TooManyEncodingSymbols {
                n: 282
            }))
        ));
        assert!(matches!(
            run_codec_bench(&quick(0, 4, 64)),
            Err(CodecBenchError::Fec(FecError::NoSourceSymbols))
        ));
        let mut cfg = quick(10, 2, 64);
        cfg.seconds = 0.0;
        assert!(matches!(
            run_codec_bench(&cfg),
            Err(CodecBenchError::InvalidConfig(_))
        ));
        cfg.seconds = f64::NAN;
        assert!(matches!(
            run_codec_bench(&cfg),
            Err(CodecBenchError::InvalidConfig(_))
        ));
        assert!(matches!(
            run_codec_bench(&quick(10, 2, 0)),
            Err(CodecBenchError::InvalidConfig(_))
        ));
    }

    #[test]
    fn verify_detects_a_wrong_symbol() {
        let original: Codeword = vec![vec![1, 2], vec![3, 4], vec![5, 6]];
        let mut decoded = original.clone();
        assert!(verify_one(&original, &decoded, 0).is_ok());
        decoded[1][0] ^= 1;
        assert!(matches!(
            verify_one(&original, &decoded, 3),
            Err(CodecBenchError::DecodeMismatch {
                codeword: 3,
                esi: 1
            })
        ));
    }

    #[test]
    fn table_has_a_row_per_report() {
        let report = run_codec_bench(&quick(4, 2, 16)).expect("bench runs");
        let table = format_table(&[report.clone(), report]);
        assert_eq!(table.lines().count(), 3);
        assert!(table
            .lines()
            .next()
            .is_some_and(|h| h.contains("decode_worst_MB/s")));
        assert!(table.contains("scalar-table"));
    }
}
