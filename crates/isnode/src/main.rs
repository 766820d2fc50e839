//! `isnode`: the intermediate storage node for media-on-demand, one binary
//! with a subcommand per job (volume admin, ingest, read-back, benchmarks, demo).

mod choice;
mod cli;
mod commands;
mod play_flags;
mod progress;
mod serve_flags;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

fn main() -> ExitCode {
    let matches = cli::Cli::command().get_matches();
    let mut cli = match cli::Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    if matches.value_source("volume") != Some(clap::parser::ValueSource::DefaultValue) {
        cli.volume_flag = serve_flags::VolumeFlag::Given;
    }
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
