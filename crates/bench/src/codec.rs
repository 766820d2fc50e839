//! Reed-Solomon codec throughput: encode, and worst-case decode, on one thread.
//!
//! Throughput is in MB/s of **source** data (10^6 bytes of source symbols per second) per
//! core: bytes divided by the **CPU time of the benchmarking thread**, so that time the
//! thread spends descheduled on a shared machine does not count (the wall-clock figures are
//! in the report too). Worst-case decode loses `m` source symbols in every codeword, at fresh
//! random (seeded) positions, so each codeword needs a new `m x m` inversion and `m` symbols
//! rebuilt from `k` inputs each. Every decode in the timed loop writes into the working copy
//! of its codeword; after timing, all working copies are compared with the originals, so a
//! broken decoder cannot report a figure.
//!
//! [`run_compare`] measures, in one run on the same data and loss positions, our codec with
//! every kernel the CPU supports and the peer codecs of [`crate::peers`].

use std::time::{Duration, Instant};

use isnode_fec::{Code, FecError, Kernel};
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};

use crate::contender::{CodecBenchError, Codeword, Contender};
use crate::peers;

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
    /// Codec measured: `isnode` (ours) or a peer crate/library name.
    pub codec: String,
    /// Which code it computes (ours: RFC 5510 Reed-Solomon over GF(2^8)).
    pub code: String,
    /// Name of the slice kernel used (ours: e.g. `gfni-avx512`; peers: their own dispatch).
    pub kernel: String,
    /// Source symbols per codeword.
    pub k: usize,
    /// Repair symbols per codeword.
    pub m: usize,
    /// Bytes per symbol.
    pub symbol_len_bytes: usize,
    /// Threads used (always 1: figures are per core).
    pub threads: usize,
    /// Encode throughput, MB (10^6 bytes) of source data per CPU second of the thread.
    pub encode_mb_per_s: f64,
    /// Worst-case decode throughput (m source symbols lost per codeword), MB of source data
    /// per CPU second, including building and inverting the decode matrix.
    pub decode_worst_mb_per_s: f64,
    /// Encode throughput per wall-clock second.
    pub encode_wall_mb_per_s: f64,
    /// Worst-case decode throughput per wall-clock second.
    pub decode_worst_wall_mb_per_s: f64,
    /// This codec's encode figure divided by ours (our fastest kernel); set by [`run_compare`].
    pub encode_ratio_to_ours: Option<f64>,
    /// This codec's decode figure divided by ours (our fastest kernel); set by [`run_compare`].
    pub decode_ratio_to_ours: Option<f64>,
    /// Codewords encoded in the timed loop.
    pub encode_codewords: u64,
    /// Codewords decoded in the timed loop.
    pub decode_codewords: u64,
    /// Length of the timed encode loop, in wall-clock seconds.
    pub encode_seconds: f64,
    /// Length of the timed decode loop, in wall-clock seconds.
    pub decode_seconds: f64,
    /// Every decoded codeword was checked against the original (always true in a report:
    /// a mismatch is an error).
    pub decode_verified: bool,
}

/// Our codec with one kernel.
pub struct Ours {
    code: Code,
}

impl Ours {
    /// Our `k`, `k + m` code on `kernel`.
    pub fn new(k: usize, m: usize, kernel: Kernel) -> Result<Ours, CodecBenchError> {
        let n = k.checked_add(m).ok_or_else(|| {
            CodecBenchError::InvalidConfig(format!("k + m overflows (k = {k}, m = {m})"))
        })?;
        Ok(Ours {
            code: Code::new(k, n)?.with_kernel(kernel),
        })
    }
}

impl Contender for Ours {
    fn codec(&self) -> String {
        "isnode".into()
    }
    fn code(&self) -> String {
        "RFC 5510 RS GF(2^8)".into()
    }
    fn kernel(&self) -> String {
        self.code.kernel().name().into()
    }
    fn encode(&mut self, codeword: &mut Codeword) -> Result<(), CodecBenchError> {
        Ok(encode_codeword(&self.code, codeword)?)
    }
    fn decode(&mut self, codeword: &mut Codeword, present: &[bool]) -> Result<(), CodecBenchError> {
        let mut shards: Vec<&mut [u8]> = codeword.iter_mut().map(Vec::as_mut_slice).collect();
        Ok(self.code.reconstruct(&mut shards, present)?)
    }
}

fn check_config(cfg: &CodecBenchConfig) -> Result<(), CodecBenchError> {
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
    Code::new(cfg.k, n)?;
    Ok(())
}

/// Runs the encode and worst-case decode measurements described by `cfg` on the calling
/// thread, for our codec with the active kernel.
pub fn run_codec_bench(cfg: &CodecBenchConfig) -> Result<CodecReport, CodecBenchError> {
    check_config(cfg)?;
    let mut ours = Ours::new(cfg.k, cfg.m, Kernel::active())?;
    measure(cfg, &mut ours)
}

/// Runs [`run_codec_bench`] for our codec with every kernel this CPU supports (fastest
/// first), then for every peer of [`peers::all`] that supports the shape, in one run on the
/// same data and loss positions; fills in the ratios to our fastest kernel. Peers that
/// cannot take the shape are skipped (listed in the second value).
pub fn run_compare(
    cfg: &CodecBenchConfig,
) -> Result<(Vec<CodecReport>, Vec<String>), CodecBenchError> {
    check_config(cfg)?;
    let mut reports = Vec::new();
    for kernel in Kernel::supported().into_iter().rev() {
        let mut ours = Ours::new(cfg.k, cfg.m, kernel)?;
        reports.push(measure(cfg, &mut ours)?);
    }
    let (contenders, skipped) = peers::all(cfg.k, cfg.m, cfg.symbol_len_bytes);
    for mut peer in contenders {
        reports.push(measure(cfg, peer.as_mut())?);
    }
    let (best_enc, best_dec) = reports
        .iter()
        .filter(|r| r.codec == "isnode")
        .fold((0f64, 0f64), |(e, d), r| {
            (e.max(r.encode_mb_per_s), d.max(r.decode_worst_mb_per_s))
        });
    for r in &mut reports {
        r.encode_ratio_to_ours = Some(r.encode_mb_per_s / best_enc);
        r.decode_ratio_to_ours = Some(r.decode_worst_mb_per_s / best_dec);
    }
    Ok((reports, skipped))
}

/// Measures one contender: same source data and loss positions for every contender with the
/// same `cfg`.
pub fn measure(
    cfg: &CodecBenchConfig,
    contender: &mut dyn Contender,
) -> Result<CodecReport, CodecBenchError> {
    check_config(cfg)?;
    let n = cfg.k + cfg.m;
    let mut rng = StdRng::seed_from_u64(cfg.seed);

    // Originals: random source, parity from the codec under test.
    let mut originals: Vec<Codeword> = Vec::with_capacity(CODEWORD_POOL);
    for _ in 0..CODEWORD_POOL {
        let mut codeword: Codeword = vec![vec![0u8; cfg.symbol_len_bytes]; n];
        for symbol in &mut codeword[..cfg.k] {
            rng.fill_bytes(symbol);
        }
        contender.encode(&mut codeword)?;
        originals.push(codeword);
    }
    let mut work = originals.clone();
    let warmup = Duration::from_secs_f64((cfg.seconds / 5.0).min(0.5));
    let duration = Duration::from_secs_f64(cfg.seconds);

    // Encode.
    timed_loop(warmup, |i| contender.encode(&mut work[i % CODEWORD_POOL]))?;
    let encode = timed_loop(duration, |i| contender.encode(&mut work[i % CODEWORD_POOL]))?;
    verify(&originals, &work)?;

    // Worst-case decode: m source symbols lost at fresh positions in every codeword.
    let mut present = vec![true; n];
    // Warm-up decodes scribble over the lost symbols first and are checked one by one.
    timed_loop(warmup, |i| {
        let slot = i % CODEWORD_POOL;
        lose(cfg, &mut work[slot], &mut present, &mut rng, true);
        contender.decode(&mut work[slot], &present)?;
        verify_one(&originals[slot], &work[slot], slot)
    })?;
    let decode = timed_loop(duration, |i| {
        let slot = i % CODEWORD_POOL;
        lose(cfg, &mut work[slot], &mut present, &mut rng, false);
        contender.decode(&mut work[slot], &present)
    })?;
    verify(&originals, &work)?;

    let source_bytes = (cfg.k * cfg.symbol_len_bytes) as f64;
    let mb_per_s = |codewords: u64, time: Duration| {
        codewords as f64 * source_bytes / time.as_secs_f64().max(1e-9) / 1e6
    };
    Ok(CodecReport {
        codec: contender.codec(),
        code: contender.code(),
        kernel: contender.kernel(),
        k: cfg.k,
        m: cfg.m,
        symbol_len_bytes: cfg.symbol_len_bytes,
        threads: 1,
        encode_mb_per_s: mb_per_s(encode.count, encode.cpu),
        decode_worst_mb_per_s: mb_per_s(decode.count, decode.cpu),
        encode_wall_mb_per_s: mb_per_s(encode.count, encode.wall),
        decode_worst_wall_mb_per_s: mb_per_s(decode.count, decode.wall),
        encode_ratio_to_ours: None,
        decode_ratio_to_ours: None,
        encode_codewords: encode.count,
        decode_codewords: decode.count,
        encode_seconds: encode.wall.as_secs_f64(),
        decode_seconds: decode.wall.as_secs_f64(),
        decode_verified: true,
    })
}

/// Renders reports as a fixed-width text table, one row per report.
pub fn format_table(reports: &[CodecReport]) -> String {
    let mut out = format!(
        "{:<22} {:<12} {:>4} {:>4} {:>6} {:>12} {:>18} {:>8} {:>8} {:>8} {:>8}\n",
        "codec",
        "kernel",
        "k",
        "m",
        "bytes",
        "encode_MB/s",
        "decode_worst_MB/s",
        "enc_x",
        "dec_x",
        "enc_cw",
        "dec_cw"
    );
    let ratio = |r: Option<f64>| r.map_or_else(|| "-".to_string(), |r| format!("{r:.3}"));
    for r in reports {
        out.push_str(&format!(
            "{:<22} {:<12} {:>4} {:>4} {:>6} {:>12.1} {:>18.1} {:>8} {:>8} {:>8} {:>8}\n",
            r.codec,
            r.kernel,
            r.k,
            r.m,
            r.symbol_len_bytes,
            r.encode_mb_per_s,
            r.decode_worst_mb_per_s,
            ratio(r.encode_ratio_to_ours),
            ratio(r.decode_ratio_to_ours),
            r.encode_codewords,
            r.decode_codewords
        ));
    }
    out
}

/// Marks `m` source symbols of `codeword` lost at fresh random positions (overwriting them
/// with garbage if `scribble`).
fn lose(
    cfg: &CodecBenchConfig,
    codeword: &mut Codeword,
    present: &mut [bool],
    rng: &mut StdRng,
    scribble: bool,
) {
    present.fill(true);
    for esi in rand::seq::index::sample(rng, cfg.k, cfg.m.min(cfg.k)) {
        present[esi] = false;
        if scribble {
            codeword[esi].fill(rng.random());
        }
    }
}

fn encode_codeword(code: &Code, codeword: &mut Codeword) -> Result<(), FecError> {
    let (source, repair) = codeword.split_at_mut(code.source_symbols());
    let source: Vec<&[u8]> = source.iter().map(Vec::as_slice).collect();
    let mut repair: Vec<&mut [u8]> = repair.iter_mut().map(Vec::as_mut_slice).collect();
    code.encode(&source, &mut repair)
}

/// Steps, wall time and thread CPU time of a timed loop.
struct Timed {
    count: u64,
    wall: Duration,
    cpu: Duration,
}

/// Runs `step(0), step(1), ..` for at least `duration` of wall time (and at least once).
fn timed_loop(
    duration: Duration,
    mut step: impl FnMut(usize) -> Result<(), CodecBenchError>,
) -> Result<Timed, CodecBenchError> {
    let start = Instant::now();
    let cpu_start = crate::cputime::thread_cpu_time();
    let mut count = 0usize;
    loop {
        step(count)?;
        count += 1;
        let wall = start.elapsed();
        if wall >= duration {
            let cpu = match (cpu_start, crate::cputime::thread_cpu_time()) {
                (Some(a), Some(b)) if b > a => b - a,
                _ => wall,
            };
            return Ok(Timed {
                count: count as u64,
                wall,
                cpu,
            });
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
    use isnode_fec::kernel;

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
        assert!(table.contains(kernel::kernel_name()));
    }
}
