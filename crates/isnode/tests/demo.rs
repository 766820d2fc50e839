//! `isnode demo` works in a temporary volume of its own: the user's volume
//! (`--volume`, default `./isnode-data`) and every file in it stay as they were,
//! also an object of the user that happens to be called like the demo's.

mod common;

use common::Vol;

#[test]
fn demo_leaves_the_users_volume_untouched() {
    let v = Vol::default_shape();
    let user = common::random_bytes(51, 300_000);
    let named_like_demo = common::random_bytes(52, 200_000);
    v.ingest("user.bin", &user);
    v.ingest("demo.ts", &named_like_demo);
    let files_before = v.snapshot();
    let listed_before = v.ls();

    let out = v.run(&["demo", "--duration", "2"]);
    eprintln!("{}{}", out.text(), out.stderr);
    assert!(
        out.status.success(),
        "demo failed ({}):\n{}{}",
        out.status,
        out.text(),
        out.stderr
    );

    assert_eq!(
        v.snapshot(),
        files_before,
        "the demo changed files of the user's volume {}",
        v.root.display()
    );
    assert_eq!(v.ls(), listed_before, "the demo changed the user's catalog");
    v.assert_cat("user.bin", &user);
    v.assert_cat("demo.ts", &named_like_demo);
    let aside: Vec<_> = std::fs::read_dir(v.root.join("members"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(aside.len(), 8, "member directories: {aside:?}");
    v.assert_clean();
}
