//! `isnode`: the intermediate storage node for media-on-demand, one binary
//! with a subcommand per job (volume admin, ingest, read-back, benchmarks, demo).

mod cli;
mod commands;
mod progress;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("ISNODE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    match commands::run(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("isnode: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
