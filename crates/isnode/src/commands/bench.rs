//! `isnode bench ...`.

use std::process::ExitCode;

use anyhow::Context;

use crate::cli::CodecBenchArgs;

/// `bench codec`: our codec with the active kernel (`ISNODE_FEC_KERNEL` forces one), or with
/// `--compare` every kernel beside the peer codecs.
pub fn codec(args: &CodecBenchArgs) -> anyhow::Result<ExitCode> {
    use isnode_bench::codec;
    let cfg = codec::CodecBenchConfig {
        k: args.k,
        m: args.m,
        symbol_len_bytes: args.symbol_size,
        seconds: args.seconds,
        seed: args.seed,
    };
    let (reports, skipped) = if args.compare {
        codec::run_compare(&cfg).context("running the codec comparison")?
    } else {
        let report = codec::run_codec_bench(&cfg).context("running the codec benchmark")?;
        (vec![report], Vec::new())
    };
    println!(
        "MB/s of source data per core (per CPU second of the benchmark thread); \
         enc_x / dec_x: ratio to our fastest kernel"
    );
    print!("{}", codec::format_table(&reports));
    for s in &skipped {
        println!("skipped: {s}");
    }
    let json = serde_json::to_string_pretty(&serde_json::json!({
        "reports": reports,
        "skipped": skipped,
    }))?;
    if let Some(path) = &args.json {
        std::fs::write(path, &json).with_context(|| format!("writing {}", path.display()))?;
    } else {
        println!("{json}");
    }
    Ok(ExitCode::SUCCESS)
}
