//! `isnode token add/list/revoke` with the real binary: the token is printed once, the
//! file keeps only its hash (mode 0600), list shows names and roles, revoke removes it.

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output};

fn isnode(volume: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_isnode"))
        .arg("--volume")
        .arg(volume)
        .args(args)
        .output()
        .expect("running isnode")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn add_list_revoke() {
    let dir = tempfile::tempdir().unwrap();
    let vol = dir.path().join("v");
    let out = isnode(
        &vol,
        &[
            "token", "add", "--role", "operator", "--role", "metrics", "--name", "ops",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let token = text(&out.stdout).trim().to_string();
    assert_eq!(token.len(), 64, "{token}");
    assert!(token.bytes().all(|c| c.is_ascii_hexdigit()));
    let file = vol.join("tokens.json");
    let stored = std::fs::read_to_string(&file).unwrap();
    assert!(!stored.contains(&token), "only the hash is kept");
    let mode = std::fs::metadata(&file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);

    let out = isnode(&vol, &["token", "add", "--role", "viewer", "--name", "tv"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let again = isnode(&vol, &["token", "add", "--role", "viewer", "--name", "tv"]);
    assert!(!again.status.success(), "a repeated name is refused");

    let out = isnode(&vol, &["token", "list"]);
    let list = text(&out.stdout);
    assert!(out.status.success());
    assert!(
        list.contains("ops") && list.contains("metrics,operator"),
        "{list}"
    );
    assert!(list.contains("tv") && list.contains("viewer"), "{list}");

    let out = isnode(&vol, &["token", "revoke", "ops"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let list = text(&isnode(&vol, &["token", "list"]).stdout);
    assert!(!list.contains("ops") && list.contains("tv"), "{list}");
    let out = isnode(&vol, &["token", "revoke", "ops"]);
    assert!(!out.status.success(), "revoking twice fails");
}
