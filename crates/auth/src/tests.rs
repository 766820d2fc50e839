use super::*;
use proptest::prelude::*;

fn p() -> &'static Path {
    Path::new("t.json")
}

#[test]
fn added_tokens_are_found_with_their_roles_and_revoked_ones_are_not() {
    let mut s = TokenStore::default();
    let op = s.add("ops", &[Role::Operator, Role::Metrics], 5).unwrap();
    let vw = s.add("tv", &[Role::Viewer], 6).unwrap();
    assert_eq!(op.len(), 64);
    let r = s.lookup(&op).unwrap();
    assert_eq!(r.name, "ops");
    assert!(r.has(Role::Operator) && r.has(Role::Metrics) && !r.has(Role::Viewer));
    assert_eq!(s.lookup(&vw).unwrap().name, "tv");
    assert!(s.lookup(&"0".repeat(64)).is_none());
    assert!(s.revoke("ops"));
    assert!(s.lookup(&op).is_none());
    assert!(!s.revoke("ops"));
}

#[test]
fn the_file_keeps_hashes_only_and_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens.json");
    let mut s = TokenStore::default();
    let t = s.add("a", &[Role::Viewer], 1).unwrap();
    s.save(&path).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(!text.contains(&t), "the token itself is never written");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let back = TokenStore::load(&path).unwrap().unwrap();
    assert_eq!(back.lookup(&t).unwrap().name, "a");
    assert!(TokenStore::load(&dir.path().join("none"))
        .unwrap()
        .is_none());
}

#[test]
fn broken_files_are_refused() {
    for text in [
        "",
        "{}",
        r#"{"tokens":[{"name":"a","roles":[],"sha256":"00","created_unix_s":0}]}"#,
        r#"{"tokens":[{"name":"a","roles":["viewer"],"sha256":"zz","created_unix_s":0}]}"#,
        r#"{"tokens":[{"name":"a","roles":["king"],"sha256":"00","created_unix_s":0}]}"#,
    ] {
        assert!(TokenStore::parse(text, p()).is_err(), "{text}");
    }
    let h = "0".repeat(64);
    let twice = format!(
        r#"{{"tokens":[{{"name":"a","roles":["viewer"],"sha256":"{h}","created_unix_s":0}},{{"name":"a","roles":["viewer"],"sha256":"{h}","created_unix_s":0}}]}}"#
    );
    assert!(TokenStore::parse(&twice, p()).is_err());
}

#[test]
fn bad_names_and_empty_roles_are_refused() {
    let mut s = TokenStore::default();
    assert!(s.add("", &[Role::Viewer], 0).is_err());
    assert!(s.add("a b", &[Role::Viewer], 0).is_err());
    assert!(s.add("a", &[], 0).is_err());
    s.add("a", &[Role::Viewer], 0).unwrap();
    assert!(s.add("a", &[Role::Viewer], 0).is_err());
}

proptest! {
    #[test]
    fn any_text_parses_or_errs_without_panic(text in ".{0,300}") {
        let _ = TokenStore::parse(&text, p());
    }

    #[test]
    fn a_token_finds_only_itself(flip in 0usize..64) {
        let mut s = TokenStore::default();
        let t = s.add("x", &[Role::Metrics], 0).unwrap();
        let mut other: Vec<u8> = t.clone().into_bytes();
        other[flip] = if other[flip] == b'0' { b'1' } else { b'0' };
        let other = String::from_utf8(other).unwrap();
        prop_assert!(s.lookup(&other).is_none());
        prop_assert!(s.lookup(&t).is_some());
    }

    #[test]
    fn saved_stores_read_back_equal(n in 0usize..5) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        let mut s = TokenStore::default();
        let toks: Vec<String> = (0..n)
            .map(|i| s.add(&format!("t{i}"), &[Role::Viewer], i as u64).unwrap())
            .collect();
        s.save(&path).unwrap();
        let back = TokenStore::load(&path).unwrap().unwrap();
        prop_assert_eq!(back.records(), s.records());
        for t in &toks {
            prop_assert!(back.lookup(t).is_some());
        }
    }
}

#[test]
fn every_role_choice_is_named_as_in_the_token_file() {
    for (role, name, help) in Role::CHOICES {
        assert_eq!(serde_json::to_string(role).unwrap(), format!("\"{name}\""));
        assert_eq!(role.name(), *name);
        assert!(!help.is_empty());
    }
    assert_eq!(Role::CHOICES.len(), 3);
}

#[test]
fn an_expiring_token_is_kept_with_its_expiry_and_expires_then() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("tokens.json");
    let t = TokenStore::update(&path, |s| {
        s.add_expiring("tv", &[Role::Viewer], 100, Some(160))
    })
    .unwrap();
    let s = TokenStore::load(&path).unwrap().unwrap();
    let r = s.lookup(&t).unwrap();
    assert_eq!(r.expires_unix_s, Some(160));
    assert!(!r.expired(159));
    assert!(r.expired(160));
    let never = s.records().iter().all(|r| r.expires_unix_s.is_some());
    assert!(never);
    let mut s = s;
    assert!(s
        .add_expiring("old", &[Role::Viewer], 100, Some(100))
        .is_err());
    let plain = s.add("plain", &[Role::Viewer], 100).unwrap();
    assert!(!s.lookup(&plain).unwrap().expired(u64::MAX));
}
