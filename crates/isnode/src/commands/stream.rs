//! `isnode serve`, `play`, `relay`: thin shells over the serve and recv crates.

use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;

use anyhow::Context;

/// `serve`: runs until SIGINT or SIGTERM.
pub(super) fn serve(
    flags: &crate::serve_flags::ServeFlags,
    volume: &Path,
    given: crate::serve_flags::VolumeFlag,
) -> anyhow::Result<ExitCode> {
    let config = flags.to_config(volume, given)?;
    let root = config
        .volume
        .clone()
        .unwrap_or_else(|| volume.to_path_buf());
    // SIGHUP: the file again, the same command line over it.
    let reload = || flags.to_config(volume, given);
    isnode_serve::run(&root, &config, reload)
        .with_context(|| format!("serving {}", root.display()))?;
    Ok(ExitCode::SUCCESS)
}

/// `config check FILE`: the configuration in force on stdout, or the error naming the key.
pub(super) fn config_check(args: &crate::serve_flags::ConfigCheckArgs) -> anyhow::Result<ExitCode> {
    let config = crate::serve_flags::read_config(&args.file)?;
    isnode_serve::cluster_tls_check(&config)
        .with_context(|| format!("configuration {}", args.file.display()))?;
    print!("{}", config.to_toml());
    eprintln!("isnode config: {} is valid", args.file.display());
    Ok(ExitCode::SUCCESS)
}

/// The end of a broadcast `play`: its summary on stderr; exit 1 if a codeword was lost or late.
fn broadcast_played(
    args: &isnode_recv::PlayConfig,
    played: anyhow::Result<isnode_recv::broadcast::BroadcastStats>,
) -> anyhow::Result<ExitCode> {
    let stats = played.with_context(|| format!("playing {:?} from its broadcast", args.name))?;
    eprintln!("{}", stats.summary());
    Ok(if stats.is_clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `play`: the summary goes to stderr (stdout may carry the media); exit 1 if any codeword was lost.
pub(super) fn play(args: &isnode_recv::PlayConfig) -> anyhow::Result<ExitCode> {
    if args.broadcast {
        return broadcast_played(args, isnode_recv::broadcast::play(args));
    }
    let stats = match isnode_recv::play(args) {
        Ok(stats) => stats,
        Err(e) => match e.downcast::<isnode_recv::play::FollowBroadcast>() {
            Ok(f) => {
                let played = isnode_recv::broadcast::play_described(args, &f.info, f.asked, f.rtt);
                return broadcast_played(args, played);
            }
            Err(e) => return Err(e).with_context(|| format!("playing {:?}", args.name)),
        },
    };
    eprintln!("{}", stats.summary());
    Ok(if stats.is_clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `relay`: forwards until its time limit or idle exit.
pub(super) fn relay(args: &isnode_recv::RelayArgs) -> anyhow::Result<ExitCode> {
    let stop = AtomicBool::new(false);
    let stats = isnode_recv::relay(args, &stop).context("relaying")?;
    eprintln!("{}", stats.summary());
    Ok(ExitCode::SUCCESS)
}
