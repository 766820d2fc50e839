//! `isnode`: the intermediate storage node for media-on-demand, one binary
//! with a subcommand per job (volume admin, ingest, read-back, benchmarks, demo).

mod cli;
mod commands;
mod progress;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("ISNODE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match cli.log_format {
        cli::LogFormat::Text => logs.init(),
        cli::LogFormat::Json => logs.json().init(),
    }
    match commands::run(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("isnode: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
