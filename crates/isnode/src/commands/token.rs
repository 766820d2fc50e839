//! `isnode token add|list|revoke`: the role tokens of `serve` (docs/protocol.md,
//! "Authentication"), kept in the token file as hashes.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use isnode_serve::auth::{tokens_path, TokenStore};

use crate::cli::{TokenAddArgs, TokenCommand, TokenFileArgs, TokenRevokeArgs};

/// Runs a `token` subcommand on the token file of `volume`.
pub(crate) fn run(volume: &Path, cmd: &TokenCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        TokenCommand::Add(a) => add(volume, a),
        TokenCommand::List(f) => list(volume, f),
        TokenCommand::Revoke(a) => revoke(volume, a),
    }
}

fn path_of(volume: &Path, f: &TokenFileArgs) -> PathBuf {
    tokens_path(volume, f.tokens_file.as_deref())
}

fn load(path: &Path) -> anyhow::Result<TokenStore> {
    Ok(TokenStore::load(path)?.unwrap_or_default())
}

fn now_unix_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn add(volume: &Path, a: &TokenAddArgs) -> anyhow::Result<ExitCode> {
    let path = path_of(volume, &a.file);
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut store = load(&path)?;
    let now = now_unix_s();
    let name = a.name.clone().unwrap_or_else(|| format!("token-{now}"));
    let token = store.add(&name, &a.roles, now)?;
    store.save(&path)?;
    eprintln!(
        "token {name:?} added to {} (shown once: keep it now)",
        path.display()
    );
    println!("{token}");
    Ok(ExitCode::SUCCESS)
}

fn list(volume: &Path, f: &TokenFileArgs) -> anyhow::Result<ExitCode> {
    let store = load(&path_of(volume, f))?;
    println!("{:<24} {:<26} created_unix_s", "name", "roles");
    for r in store.records() {
        let roles: Vec<&str> = r.roles.iter().map(|r| r.name()).collect();
        println!(
            "{:<24} {:<26} {}",
            r.name,
            roles.join(","),
            r.created_unix_s
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn revoke(volume: &Path, a: &TokenRevokeArgs) -> anyhow::Result<ExitCode> {
    let path = path_of(volume, &a.file);
    let mut store = load(&path)?;
    if !store.revoke(&a.name) {
        bail!("no token named {:?} in {}", a.name, path.display());
    }
    store.save(&path)?;
    eprintln!(
        "token {:?} revoked (a running server refuses it after SIGHUP)",
        a.name
    );
    Ok(ExitCode::SUCCESS)
}
