//! `isnode token add|list|revoke`: the role tokens of `serve` (docs/protocol.md,
//! "Authentication"), kept in the token file as hashes.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use isnode_auth::{last_use, tokens_path, TokenStore};

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
    let now = now_unix_s();
    let name = a.name.clone().unwrap_or_else(|| format!("token-{now}"));
    if a.expires_in_s == Some(0) {
        bail!("--expires-in-s must be above 0");
    }
    let expires = a.expires_in_s.map(|s| now.saturating_add(s));
    let token = TokenStore::update(&path, |store| {
        store.add_expiring(&name, &a.roles, now, expires)
    })?;
    let until = expires.map_or_else(String::new, |e| format!(", expires {}", utc(e)));
    eprintln!(
        "token {name:?} added to {}{until} (shown once: keep it now)",
        path.display()
    );
    println!("{token}");
    Ok(ExitCode::SUCCESS)
}

fn list(volume: &Path, f: &TokenFileArgs) -> anyhow::Result<ExitCode> {
    let path = path_of(volume, f);
    let store = load(&path)?;
    // Written by the server (at most a minute late): a missing or broken one says "never".
    let used = last_use::read(&last_use::side_path(&path)).unwrap_or_else(|e| {
        eprintln!("isnode token: last uses unknown: {e}");
        Default::default()
    });
    print!("{}", table(&store, &used));
    Ok(ExitCode::SUCCESS)
}

/// The token list: name, roles, creation and last use (UTC; "never" for an unused token).
fn table(store: &TokenStore, used: &std::collections::HashMap<String, u64>) -> String {
    let mut out = format!(
        "{:<24} {:<26} {:<21} {:<21} last_used\n",
        "name", "roles", "created", "expires"
    );
    for r in store.records() {
        let roles: Vec<&str> = r.roles.iter().map(|r| r.name()).collect();
        let last = used
            .get(&r.sha256)
            .map_or_else(|| "never".to_string(), |&s| utc(s));
        let expires = r.expires_unix_s.map_or_else(|| "never".to_string(), utc);
        out.push_str(&format!(
            "{:<24} {:<26} {:<21} {expires:<21} {last}\n",
            r.name,
            roles.join(","),
            utc(r.created_unix_s)
        ));
    }
    out
}

/// `unix_s` as a UTC date and time, `YYYY-MM-DD HH:MM:SSZ` (the proleptic Gregorian
/// calendar, from days since the epoch: H. Hinnant's `civil_from_days`).
fn utc(unix_s: u64) -> String {
    let days = (unix_s / 86_400) as i64;
    let secs = unix_s % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

fn revoke(volume: &Path, a: &TokenRevokeArgs) -> anyhow::Result<ExitCode> {
    let path = path_of(volume, &a.file);
    if !TokenStore::update(&path, |store| Ok(store.revoke(&a.name)))? {
        bail!("no token named {:?} in {}", a.name, path.display());
    }
    eprintln!(
        "token {:?} revoked (a running server refuses it after SIGHUP)",
        a.name
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use isnode_auth::Role;

    #[test]
    fn dates_are_utc() {
        assert_eq!(utc(0), "1970-01-01 00:00:00Z");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00Z");
        assert_eq!(utc(1_795_740_472), "2026-11-27 00:47:52Z");
    }

    #[test]
    fn the_list_shows_creation_and_last_use_or_never() {
        let mut store = TokenStore::default();
        store.add("ops", &[Role::Operator], 0).unwrap();
        store
            .add_expiring("tv", &[Role::Viewer], 86_400, Some(2 * 86_400))
            .unwrap();
        let used = [(store.find("tv").unwrap().sha256.clone(), 90_061)].into();
        let text = table(&store, &used);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("created") && lines[0].contains("last_used"));
        assert!(
            lines[1].starts_with("ops") && lines[1].ends_with("never"),
            "{text}"
        );
        assert!(lines[1].contains("1970-01-01 00:00:00Z"), "{text}");
        assert!(lines[2].contains("1970-01-02 00:00:00Z"), "{text}");
        assert!(lines[2].ends_with("1970-01-02 01:01:01Z"), "{text}");
        assert!(lines[0].contains("expires"), "{text}");
        let nevers = lines[1]
            .split_whitespace()
            .filter(|w| *w == "never")
            .count();
        assert_eq!(nevers, 2, "ops never expires, never used: {text}");
        assert!(
            lines[2].contains("1970-01-03 00:00:00Z"),
            "tv's expiry: {text}"
        );
    }
}
