//! Crash safety of ingest: the process dies at every crash point (and by a real
//! `kill -9` at random moments); after the next open the object is either whole
//! or gone, and no file remains that does not belong to a complete object.
//!
//! Crash points (`ISNODE_CRASH_POINT`) are compiled only into debug builds, as
//! `cargo test` builds the binary; under `cargo test --release` the tests that
//! need them are reported as ignored.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{Rng, Vol, DEFAULT_CODEWORD, SMALL_CODEWORD};

const SIGABRT: i32 = 6;

/// Crash points in the order ingest reaches them, and whether the object is
/// committed when the process dies there.
fn points(codewords: usize, members: usize) -> Vec<(String, bool)> {
    let mut v = vec![("after-begin".to_string(), false)];
    for n in [1, 2, 5, codewords] {
        if n <= codewords {
            v.push((format!("codeword:{n}"), false));
        }
    }
    v.push(("before-rename".into(), false));
    for n in [1, 2, members] {
        v.push((format!("rename:{n}"), false));
    }
    v.push(("before-commit".into(), false));
    v.push(("after-commit".into(), true));
    v.dedup();
    v
}

/// Runs `ingest` of `input` as `name` with a crash point and asserts that it aborted.
#[track_caller]
fn ingest_crashing(v: &Vol, input: &std::path::Path, name: &str, point: &str, replace: bool) {
    let mut args = vec![
        "ingest",
        input.to_str().unwrap(),
        "--name",
        name,
        "--bitrate",
        "1000000",
    ];
    if replace {
        args.push("--replace");
    }
    let mut cmd = v.cmd(&args);
    cmd.env("ISNODE_CRASH_POINT", point);
    let out = common::run_cmd(cmd, None);
    assert_eq!(
        out.status.signal(),
        Some(SIGABRT),
        "ingest with ISNODE_CRASH_POINT={point} should abort, got {}:\n{}{}",
        out.status,
        out.text(),
        out.stderr
    );
    assert!(
        out.stderr.contains("crash point"),
        "{point}: {}",
        out.stderr
    );
}

/// A fresh volume per crash point; `bystander` is an object ingested before that
/// must survive untouched.
fn crash_points_on(create: fn() -> Vol, data_len: usize, codeword: usize) {
    let data = common::random_bytes(11, data_len);
    let bystander = common::random_bytes(12, 3 * codeword + 17);
    let codewords = data_len.div_ceil(codeword);
    let probe = create();
    let members = probe.member_count();
    drop(probe);
    for (point, committed) in points(codewords, members) {
        let v = create();
        v.ingest("bystander", &bystander);
        let input = v.input("new.bin", &data);
        ingest_crashing(&v, &input, "new", &point, false);

        // `ls` opens the volume, which cleans up after the dead ingest.
        let listed = v.object("new");
        assert_eq!(
            listed.is_some(),
            committed,
            "crash at {point}: object listed = {:?}",
            listed
        );
        if committed {
            v.assert_cat("new", &data);
        } else {
            assert!(v
                .cat("new")
                .fails_with(&["no object named"])
                .stdout
                .is_empty());
        }
        v.assert_no_orphans();
        v.assert_cat("bystander", &bystander);
        v.assert_clean();

        // The volume stays usable: the same name can be ingested (again).
        let mut args = vec![
            "ingest",
            input.to_str().unwrap(),
            "--name",
            "new",
            "--bitrate",
            "1000000",
        ];
        if committed {
            args.push("--replace");
        }
        v.run(&args).ok();
        v.assert_cat("new", &data);
        v.assert_no_orphans();
        assert_eq!(v.names().len(), 2, "crash at {point}");
    }
}

#[test]
#[cfg_attr(
    not(debug_assertions),
    ignore = "crash points exist only in debug builds (cargo test without --release)"
)]
fn crash_at_every_point_small_shape() {
    // 24 codewords, 3 blocks per member.
    crash_points_on(Vol::small, 24 * SMALL_CODEWORD - 100, SMALL_CODEWORD);
}

#[test]
#[cfg_attr(
    not(debug_assertions),
    ignore = "crash points exist only in debug builds (cargo test without --release)"
)]
fn crash_at_every_point_default_shape() {
    crash_points_on(
        Vol::default_shape,
        3 * DEFAULT_CODEWORD + 999,
        DEFAULT_CODEWORD,
    );
}

/// `--replace` crashing at every point: the name always holds the old or the
/// new content, whole.
#[test]
#[cfg_attr(
    not(debug_assertions),
    ignore = "crash points exist only in debug builds (cargo test without --release)"
)]
fn crash_while_replacing() {
    let old = common::random_bytes(21, 10 * SMALL_CODEWORD + 5);
    let new = common::random_bytes(22, 14 * SMALL_CODEWORD - 9);
    let members = Vol::small().member_count();
    for (point, committed) in points(14, members) {
        let v = Vol::small();
        v.ingest("x", &old);
        let old_toi = v.object("x").unwrap()["toi"].clone();
        let input = v.input("x.new", &new);
        ingest_crashing(&v, &input, "x", &point, true);

        let listed = v
            .object("x")
            .unwrap_or_else(|| panic!("crash at {point} while replacing: x is gone"));
        if committed {
            assert_ne!(listed["toi"], old_toi, "crash at {point}");
            assert_eq!(listed["size_bytes"], new.len(), "crash at {point}");
            v.assert_cat("x", &new);
        } else {
            assert_eq!(listed["toi"], old_toi, "crash at {point}");
            assert_eq!(listed["size_bytes"], old.len(), "crash at {point}");
            v.assert_cat("x", &old);
        }
        assert_eq!(v.names().len(), 1);
        v.assert_no_orphans();
        v.assert_clean();
    }
}

/// An ingest that died after its commit must not leave its lock file in the
/// volume's tmp/ ("temporary files cleaned up"): the next open should remove it,
/// also once the object has been replaced.
#[test]
#[cfg_attr(
    not(debug_assertions),
    ignore = "crash points exist only in debug builds (cargo test without --release)"
)]
fn stale_ingest_locks_are_removed() {
    let v = Vol::small();
    let data = common::random_bytes(31, 4 * SMALL_CODEWORD);
    let input = v.input("a.bin", &data);
    ingest_crashing(&v, &input, "a", "after-commit", false);
    v.assert_cat("a", &data);
    v.assert_no_orphans();
    let after_crash = v.stale_ingest_locks();
    let i = input.to_str().unwrap();
    v.run(&["ingest", i, "--name", "a", "--bitrate", "1000", "--replace"])
        .ok();
    v.assert_no_orphans();
    let after_replace = v.stale_ingest_locks();
    assert!(
        after_crash.is_empty() && after_replace.is_empty(),
        "files left in {}/tmp after recovery: {after_crash:?}; after replacing the object: {after_replace:?}",
        v.root.display()
    );
}

/// Opening the volume (which recovers dead ingests) while an ingest is alive
/// must leave that ingest alone.
#[test]
fn recovery_spares_a_live_ingest() {
    let v = Vol::default_shape();
    let data = common::random_bytes(41, 48 << 20);
    let input = v.input("live.bin", &data);
    let i = input.to_str().unwrap();
    let mut child = v
        .cmd(&["ingest", i, "--name", "live", "--bitrate", "4000000"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut opens = 0;
    while child.try_wait().unwrap().is_none() && opens < 100 {
        let listed = v.ls();
        assert!(
            listed
                .iter()
                .all(|o| o["name"] != "live" || o["size_bytes"] == data.len()),
            "{listed:?}"
        );
        opens += 1;
    }
    let out = child.wait_with_output().unwrap();
    eprintln!("recovery_spares_a_live_ingest: {opens} opens during the ingest");
    assert!(
        out.status.success(),
        "ingest failed while other processes opened the volume: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    v.assert_cat("live", &data);
    v.assert_no_orphans();
    v.assert_clean();
}

/// A real `kill -9` at random moments of a large ingest (default shape), each
/// run replacing the object with new content. Whatever the timing, the object
/// afterwards is the last committed content or the new content, whole, and
/// nothing else is left on disk.
#[test]
fn kill_9_during_ingest() {
    let mut rng = Rng::from_env("kill_9_during_ingest");
    let v = Vol::default_shape();
    let len = 48 << 20;
    // How long one whole ingest takes here sets the range of the random delays
    // (10 ms .. ~2 s) so that most kills land inside an ingest; the
    // assertions hold whatever the timing.
    let first = rng.bytes(len);
    let input = v.input("big.bin", &first);
    let i = input.to_str().unwrap().to_string();
    let t = Instant::now();
    v.run(&["ingest", &i, "--name", "big", "--bitrate", "4000000"])
        .ok();
    let whole = (t.elapsed().as_millis() as u64).clamp(20, 1500);
    eprintln!("kill_9_during_ingest: one whole ingest took {whole} ms");
    let mut committed = first;
    let runs = 8;
    let mut finished = 0;
    for run in 0..runs {
        let data = rng.bytes(len);
        std::fs::write(&input, &data).unwrap();
        // Up to 1.3 x the whole ingest, so that some kills come after the commit.
        let delay = Duration::from_millis(10 + rng.below(whole * 13 / 10));
        let mut child = v
            .cmd(&[
                "ingest",
                &i,
                "--name",
                "big",
                "--bitrate",
                "4000000",
                "--replace",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(delay);
        child.kill().unwrap(); // SIGKILL (the child is not reaped yet, even if it has exited)
        let status = child.wait().unwrap();
        let killed = status.signal() == Some(9);
        eprintln!("run {run}: SIGKILL after {delay:?}: {status}");
        if !killed {
            assert!(
                status.success(),
                "run {run}: ingest failed without being killed: {status}"
            );
            finished += 1;
        }

        let Some(o) = v.object("big") else {
            panic!("run {run}: the object vanished after kill -9 of its --replace ingest")
        };
        let out = v.cat("big").ok();
        let is_new = out.stdout == data;
        let is_old = out.stdout == committed;
        assert!(
            is_new || is_old,
            "run {run}: big holds neither the old nor the new content ({} bytes)",
            o["size_bytes"]
        );
        assert!(
            is_new || killed,
            "run {run}: the ingest finished but big holds the old content"
        );
        if is_new {
            committed = data;
        }
        v.assert_no_orphans();
    }
    eprintln!("kill_9_during_ingest: {finished} of {runs} ingests finished before the kill");
    v.assert_clean();
}
