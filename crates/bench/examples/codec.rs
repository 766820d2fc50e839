//! Runs the codec benchmark once with the default shape (k = 223, m = 32, 1408-byte symbols).
//!
//! `cargo run --release -p isnode-bench --example codec [SECONDS] [--compare]`

fn main() {
    let mut cfg = isnode_bench::codec::CodecBenchConfig::default();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(seconds) = args.iter().find_map(|s| s.parse().ok()) {
        cfg.seconds = seconds;
    }
    let result = if args.iter().any(|a| a == "--compare") {
        isnode_bench::codec::run_compare(&cfg)
    } else {
        isnode_bench::codec::run_codec_bench(&cfg).map(|r| (vec![r], Vec::new()))
    };
    match result {
        Ok((reports, skipped)) => {
            print!("{}", isnode_bench::codec::format_table(&reports));
            for s in skipped {
                println!("skipped: {s}");
            }
        }
        Err(e) => {
            eprintln!("codec bench failed: {e}");
            std::process::exit(1);
        }
    }
}
