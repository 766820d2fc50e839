//! One module per subcommand; each is a thin shell over the library crates.

mod bench;
mod broadcast;
mod cert;
mod demo;
mod ingest;
mod objects;
mod stream;
mod token;
mod volume;

use std::process::ExitCode;

use crate::cli::{BenchCommand, BroadcastCommand, Cli, Command, VolumeCommand};

/// Runs the parsed command line.
pub(crate) fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Volume(VolumeCommand::Create(args)) => volume::create(&cli.volume, &args),
        Command::Volume(VolumeCommand::Check(args)) => volume::check(&cli.volume, &args),
        Command::Ingest(args) => ingest::run(&cli.volume, &args),
        Command::Ls(args) => objects::ls(&cli.volume, &args),
        Command::Cat(args) => objects::cat(&cli.volume, &args),
        Command::GenTs(args) => objects::gen_ts(&args),
        Command::Serve(args) => stream::serve(&cli.volume, &args),
        Command::Play(args) => stream::play(&args),
        Command::Relay(args) => stream::relay(&args),
        Command::Broadcast(BroadcastCommand::Plan(args)) => broadcast::plan(&cli.volume, &args),
        Command::Broadcast(BroadcastCommand::Plot(args)) => broadcast::plot(&cli.volume, &args),
        Command::Bench(BenchCommand::Codec(args)) => bench::codec(&args),
        Command::Bench(BenchCommand::Serve(args)) => bench::serve(&args),
        Command::Bench(BenchCommand::Load(args)) => bench::load(&args),
        Command::Bench(BenchCommand::Startup(args)) => bench::startup(&args),
        Command::Bench(BenchCommand::Verify(args)) => bench::verify(&args),
        Command::Cert(args) => cert::run(&args),
        Command::Token(cmd) => token::run(&cli.volume, &cmd),
        Command::Demo(args) => demo::run(&args),
    }
}
