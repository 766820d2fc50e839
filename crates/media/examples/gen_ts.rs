//! Writes a generated constant-bitrate MPEG-TS and prints what `probe` says about it.
//!
//! Usage: `cargo run -p isnode-media --example gen_ts -- OUT.ts [BITRATE_BPS] [DURATION_S] [SEED]`

use std::fs::File;
use std::io::BufWriter;

use isnode_media::{generate_ts, probe, TsGenConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        return Err("usage: gen_ts OUT.ts [BITRATE_BPS] [DURATION_S] [SEED]".into());
    };
    let cfg = TsGenConfig {
        bitrate_bps: args.get(1).map_or(Ok(4_000_000), |s| s.parse())?,
        duration_s: args.get(2).map_or(Ok(10.0), |s| s.parse())?,
        seed: args.get(3).map_or(Ok(1), |s| s.parse())?,
    };
    let mut out = BufWriter::new(File::create(path)?);
    let n = generate_ts(&cfg, &mut out)?;
    out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    let file = File::open(path)?;
    let info = probe(&file, n)?;
    println!("wrote {n} bytes to {path}: {info:?}");
    Ok(())
}
