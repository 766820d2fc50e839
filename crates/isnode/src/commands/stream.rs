//! `isnode serve`, `play`, `relay`: thin shells over the serve and recv crates.

use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;

use anyhow::Context;

/// `serve`: runs until SIGINT or SIGTERM.
pub(super) fn serve(root: &Path, args: &isnode_serve::ServeArgs) -> anyhow::Result<ExitCode> {
    isnode_serve::run(root, args).with_context(|| format!("serving {}", root.display()))?;
    Ok(ExitCode::SUCCESS)
}

/// The end of a broadcast `play`: its summary on stderr; exit 1 if a codeword was lost or late.
fn broadcast_played(
    args: &isnode_recv::PlayArgs,
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
pub(super) fn play(args: &isnode_recv::PlayArgs) -> anyhow::Result<ExitCode> {
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
