//! Runs the codec benchmark once with the default shape (k = 223, m = 32, 1408-byte symbols).
//!
//! `cargo run --release -p isnode-bench --example codec [SECONDS]`

fn main() {
    let mut cfg = isnode_bench::codec::CodecBenchConfig::default();
    if let Some(seconds) = std::env::args().nth(1).and_then(|s| s.parse().ok()) {
        cfg.seconds = seconds;
    }
    match isnode_bench::codec::run_codec_bench(&cfg) {
        Ok(report) => print!("{}", isnode_bench::codec::format_table(&[report])),
        Err(e) => {
            eprintln!("codec bench failed: {e}");
            std::process::exit(1);
        }
    }
}
