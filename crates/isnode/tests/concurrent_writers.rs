//! Concurrent writers of one volume (issue 11, "concurrent writers"): eight ingests at once
//! all succeed; `--replace` ingests of one name at once all succeed (they used to fail with
//! "already exists" when another replaced the object first) and leave one object and no
//! stray files; three `volume check --repair` runs at once over a damaged volume all succeed
//! and leave it clean (they used to trip over each other's temporary segment files:
//! "replacing …: No such file or directory").

mod serve_support;

use std::process::{Output, Stdio};

use serve_support::{command, run_ok, Vol};

/// Runs `isnode ARGS` for each argument list at once; their outputs, in order.
fn all_at_once(runs: Vec<Vec<String>>) -> Vec<Output> {
    let children: Vec<_> = runs
        .iter()
        .map(|args| {
            command()
                .args(args)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawning isnode")
        })
        .collect();
    children
        .into_iter()
        .map(|c| c.wait_with_output().expect("waiting for isnode"))
        .collect()
}

/// Flips one byte of the first segment file of member `m`.
fn damage_member(vol: &Vol, m: u32, at: usize) {
    let dir = vol.root.join("members").join(m.to_string()).join("objects");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("a member's objects")
        .map(|e| e.expect("an entry").path())
        .collect();
    files.sort();
    let file = files.first().expect("a segment file");
    let mut bytes = std::fs::read(file).expect("reading a segment");
    bytes[at] ^= 0xff;
    std::fs::write(file, bytes).expect("writing a segment");
}

#[test]
fn eight_ingests_and_three_repairs_at_once_all_succeed() {
    let vol = Vol::create(&[]);
    let root = vol.root.to_str().unwrap().to_string();
    let inputs: Vec<String> = (0..8)
        .map(|i| {
            let f = vol.path(&format!("in-{i}.ts"));
            let f = f.to_str().unwrap().to_string();
            run_ok(&[
                "gen-ts",
                "--bitrate",
                "2000000",
                "--duration",
                "3",
                "--seed",
                &i.to_string(),
                &f,
            ]);
            f
        })
        .collect();
    let ingests = inputs
        .iter()
        .enumerate()
        .map(|(i, f)| {
            [
                "ingest",
                "--volume",
                &root,
                "--name",
                &format!("t{i}.ts"),
                f,
            ]
            .map(String::from)
            .to_vec()
        })
        .collect();
    for (i, out) in all_at_once(ingests).iter().enumerate() {
        assert!(
            out.status.success(),
            "ingest {i} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let listed = run_ok(&["ls", "--volume", &root]);
    assert_eq!(
        listed.lines().filter(|l| l.contains(".ts")).count(),
        8,
        "{listed}"
    );

    // Four `--replace` ingests of an existing name, three of a new one, all at once.
    let replaces = (0..7)
        .map(|i| {
            let name = if i < 4 { "t0.ts" } else { "fresh.ts" };
            [
                "ingest",
                "--volume",
                &root,
                "--replace",
                "--name",
                name,
                &inputs[i],
            ]
            .map(String::from)
            .to_vec()
        })
        .collect();
    for (i, out) in all_at_once(replaces).iter().enumerate() {
        assert!(
            out.status.success(),
            "replacing ingest {i} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let listed = run_ok(&["ls", "--volume", &root]);
    assert_eq!(
        listed.lines().filter(|l| l.contains(".ts")).count(),
        9,
        "{listed}"
    );
    for (name, from) in [("t0.ts", 0..4), ("fresh.ts", 4..7)] {
        let got = run_bytes(&["cat", "--volume", &root, name]);
        assert!(
            from.clone()
                .any(|i| got == std::fs::read(&inputs[i]).unwrap()),
            "{name} is none of the inputs that replaced it"
        );
    }
    let segments = std::fs::read_dir(vol.root.join("members").join("0").join("objects"))
        .unwrap()
        .count();
    assert_eq!(segments, 9, "stray segment files after the replacements");

    damage_member(&vol, 3, 5000);
    damage_member(&vol, 4, 9000);
    let check = ["volume", "check", "--volume", &root]
        .map(String::from)
        .to_vec();
    let damaged = command().args(&check).output().expect("check");
    assert!(!damaged.status.success(), "the damage was not found");
    let mut repair = check.clone();
    repair.push("--repair".into());
    for (i, out) in all_at_once(vec![repair.clone(), repair.clone(), repair])
        .iter()
        .enumerate()
    {
        assert!(
            out.status.success(),
            "repair {i} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    run_ok(&check.iter().map(String::as_str).collect::<Vec<_>>());
    // t0.ts was replaced above (by one of inputs 0..4): the others are compared.
    for (i, f) in inputs.iter().enumerate().skip(1) {
        let got = run_bytes(&["cat", "--volume", &root, &format!("t{i}.ts")]);
        assert!(
            got == std::fs::read(f).unwrap(),
            "t{i}.ts differs after the repairs"
        );
    }
}

/// Runs `isnode ARGS`, which must succeed; its standard output.
fn run_bytes(args: &[&str]) -> Vec<u8> {
    let out = command().args(args).output().expect("isnode");
    assert!(
        out.status.success(),
        "isnode {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}
