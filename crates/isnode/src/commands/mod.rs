//! One module per subcommand; each is a thin shell over the library crates.

mod bench;
mod broadcast;
mod cert;
mod demo;
mod fill;
mod ingest;
mod objects;
mod protect;
pub(crate) mod publish;
mod rekey;
mod remote;
mod status;
mod stream;
mod title;
mod token;
mod volume;

use std::process::ExitCode;

use crate::cli::{BenchCommand, BroadcastCommand, Cli, Command, VolumeCommand};
use crate::serve_flags::ConfigCommand;

/// Runs the parsed command line.
pub(crate) fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Volume(VolumeCommand::Create(args)) => volume::create(&cli.volume, &args),
        Command::Volume(VolumeCommand::Check(args)) => volume::check(&cli.volume, &args),
        Command::Volume(VolumeCommand::Scrub(args)) => volume::scrub(&cli.volume, &args),
        Command::Volume(VolumeCommand::Rebuild(args)) => volume::rebuild(&cli.volume, &args),
        Command::Volume(VolumeCommand::Rekey(args)) => rekey::run(&cli.volume, &args),
        Command::Ingest(args) if !args.renditions.is_empty() => title::ingest(&cli.volume, &args),
        Command::Ingest(args) if args.encrypt => protect::ingest(&cli.volume, &args),
        Command::Ingest(args) => match &args.remote.server {
            Some(server) => remote::upload(server, &args),
            None => ingest::run(&cli.volume, &args),
        },
        Command::Rm(args) => match &args.remote.server {
            Some(server) => remote::remove(server, &args),
            None => title::rm(&cli.volume, &args),
        },
        Command::Ls(args) => match &args.remote.server {
            Some(server) => remote::list(server, &args),
            None => objects::ls(&cli.volume, &args),
        },
        Command::Cat(args) => objects::cat(&cli.volume, &args),
        Command::GenTs(args) => objects::gen_ts(&args),
        Command::Serve(flags) => stream::serve(&flags, &cli.volume, cli.volume_flag),
        Command::Config(ConfigCommand::Check(args)) => stream::config_check(&args),
        Command::Config(ConfigCommand::Default) => {
            print!("{}", crate::serve_flags::DEFAULT_CONFIG_TOML);
            Ok(ExitCode::SUCCESS)
        }
        Command::Play(args) => stream::play(&args.into_config()),
        Command::Publish(args) => publish::run(&args).map(|()| ExitCode::SUCCESS),
        Command::Relay(args) => stream::relay(&args.into()),
        Command::Broadcast(BroadcastCommand::Plan(args)) => broadcast::plan(&cli.volume, &args),
        Command::Broadcast(BroadcastCommand::Plot(args)) => broadcast::plot(&cli.volume, &args),
        Command::Bench(BenchCommand::Codec(args)) => bench::codec(&args),
        Command::Bench(BenchCommand::Serve(args)) => bench::serve(&args),
        Command::Bench(BenchCommand::Load(args)) => bench::load(&args),
        Command::Bench(BenchCommand::Startup(args)) => bench::startup(&args),
        Command::Bench(BenchCommand::Verify(args)) => bench::verify(&args),
        Command::Bench(BenchCommand::Upload(args)) => bench::upload(&args),
        Command::Bench(BenchCommand::Placement(args)) => bench::placement(&args),
        Command::Bench(BenchCommand::Soak(args)) => bench::soak(&args),
        Command::Bench(BenchCommand::Background(args)) => bench::background(&args),
        Command::Bench(BenchCommand::Timelines(args)) => bench::timelines(&args),
        Command::Cert(args) => cert::run(&args),
        Command::Token(cmd) => token::run(&cli.volume, &cmd),
        Command::Demo(args) => demo::run(&args),
        Command::Status(args) => status::run(&args),
        Command::Fill(args) => fill::run(&args),
    }
}
