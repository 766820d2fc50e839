//! `isnode bench ...`.

use std::process::ExitCode;

use anyhow::Context;

use crate::cli::CodecBenchArgs;

/// `bench codec`.
pub fn codec(args: &CodecBenchArgs) -> anyhow::Result<ExitCode> {
    let cfg = isnode_bench::codec::CodecBenchConfig {
        k: args.k,
        m: args.m,
        symbol_len_bytes: args.symbol_size,
        seconds: args.seconds,
        seed: args.seed,
    };
    let report = isnode_bench::codec::run_codec_bench(&cfg).context("running the codec benchmark")?;
    println!("{}", isnode_bench::codec::format_table(std::slice::from_ref(&report)));
    let json = serde_json::to_string_pretty(&report)?;
    if let Some(path) = &args.json {
        std::fs::write(path, &json).with_context(|| format!("writing {}", path.display()))?;
    } else {
        println!("{json}");
    }
    Ok(ExitCode::SUCCESS)
}
