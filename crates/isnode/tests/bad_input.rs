//! Bad input gets a clear error and changes nothing: the listing and the files
//! of the volume are the same before and after the refused command.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Out, Vol, SMALL_CODEWORD};

/// A small volume holding one object, `keep`.
fn volume_with_object() -> (Vol, Vec<u8>) {
    let v = Vol::small();
    let data = common::random_bytes(1, 5 * SMALL_CODEWORD + 3);
    v.ingest("keep", &data);
    (v, data)
}

/// Runs `f` and asserts that it changed neither `ls --json` nor the volume's files.
#[track_caller]
fn unchanged(v: &Vol, keep: &[u8], f: impl FnOnce() -> Out) -> Out {
    let ls = v.ls();
    let files = v.snapshot();
    let out = f();
    assert_eq!(v.ls(), ls, "`{}` changed the listing", out.what);
    assert_eq!(
        v.snapshot(),
        files,
        "`{}` changed the volume's files",
        out.what
    );
    v.assert_no_orphans();
    v.assert_cat("keep", keep);
    out
}

fn ingest_args<'a>(file: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec!["ingest", file];
    a.extend_from_slice(extra);
    a
}

#[test]
fn missing_file() {
    let (v, keep) = volume_with_object();
    let missing = v.dir.path().join("in/does-not-exist.ts");
    let m = missing.to_str().unwrap();
    unchanged(&v, &keep, || v.run(&ingest_args(m, &["--bitrate", "1000"])))
        .fails_with(&["does-not-exist.ts", "No such file"]);
}

#[test]
fn unreadable_file_a_directory() {
    let (v, keep) = volume_with_object();
    let dir = v.dir.path().join("in/a-directory");
    std::fs::create_dir(&dir).unwrap();
    let d = dir.to_str().unwrap();
    unchanged(&v, &keep, || v.run(&ingest_args(d, &["--bitrate", "1000"])))
        .fails_with(&["a-directory", "Is a directory"]);
    unchanged(&v, &keep, || {
        v.run(&ingest_args(d, &["--bitrate", "1000", "--name", "x"]))
    })
    .fails_with(&["Is a directory"]);
}

#[test]
fn empty_name() {
    let (v, keep) = volume_with_object();
    let input = v.input("ok.bin", &common::random_bytes(2, 3000));
    let i = input.to_str().unwrap();
    unchanged(&v, &keep, || {
        v.run(&ingest_args(i, &["--bitrate", "1000", "--name", ""]))
    })
    .fails_with(&["name is empty"]);
}

#[test]
fn name_with_slash_or_dotdot() {
    let (v, keep) = volume_with_object();
    let input = v.input("ok.bin", &common::random_bytes(3, 3000));
    let i = input.to_str().unwrap();
    for (name, phrase) in [
        ("a/b", "contains '/'"),
        ("/etc/passwd", "contains '/'"),
        ("../escape", "contains '/'"),
        ("..", "contains '..'"),
        ("a..b", "contains '..'"),
    ] {
        unchanged(&v, &keep, || {
            v.run(&ingest_args(i, &["--bitrate", "1000", "--name", name]))
        })
        .fails_with(&["invalid object name", phrase]);
    }
    // Nothing escaped the volume either.
    assert!(!v.dir.path().join("escape").exists());
}

#[test]
fn duplicate_name_without_replace() {
    let (v, keep) = volume_with_object();
    let other = common::random_bytes(4, 2 * SMALL_CODEWORD);
    let input = v.input("other.bin", &other);
    let i = input.to_str().unwrap();
    unchanged(&v, &keep, || {
        v.run(&ingest_args(i, &["--bitrate", "1000", "--name", "keep"]))
    })
    .fails_with(&["already exists", "--replace"]);
    // Through stdin too (the spool file must not stay behind).
    unchanged(&v, &keep, || {
        v.run_stdin(
            &["ingest", "-", "--bitrate", "1000", "--name", "keep"],
            &other,
        )
    })
    .fails_with(&["already exists", "--replace"]);
    // With --replace it is accepted.
    v.run(&ingest_args(
        i,
        &["--bitrate", "1000", "--name", "keep", "--replace"],
    ))
    .ok();
    v.assert_cat("keep", &other);
    v.assert_no_orphans();
}

#[test]
fn parameters_out_of_range() {
    let v = Vol::empty();
    let cases: &[(&[&str], &[&str])] = &[
        (&["--repair-symbols", "40"], &["263", "255"]),
        (&["--members", "4"], &["75 symbols", "32 repair"]),
        (&["--block-size", "5000"], &["5000", "multiple of 4096"]),
        (&["--members", "1"], &["at least 2"]),
        (&["--symbol-size", "0"], &["symbol size"]),
        (&["--symbol-size", "70000"], &["UDP"]),
        (&["--source-symbols", "0"], &["at least 1 source symbol"]),
        (&["--repair-symbols", "0"], &["repair symbol"]),
    ];
    for (args, phrases) in cases {
        let mut a = vec!["volume", "create"];
        a.extend_from_slice(args);
        let out = v.run(&a).fails_with(phrases);
        assert!(out.stderr.contains("invalid parameters"), "{}", out.stderr);
        assert!(!v.root.exists(), "`{}` left {}", out.what, v.root.display());
    }

    // Ingest parameters: a zero bitrate, a bitrate that cannot be detected.
    let (v, keep) = volume_with_object();
    let input = v.input("ok.bin", &common::random_bytes(5, 3000));
    let i = input.to_str().unwrap();
    unchanged(&v, &keep, || v.run(&ingest_args(i, &["--bitrate", "0"])))
        .fails_with(&["bitrate", "greater than 0"]);
    unchanged(&v, &keep, || v.run(&ingest_args(i, &[]))).fails_with(&["bitrate"]);
    // --size that does not match the file.
    unchanged(&v, &keep, || {
        v.run(&ingest_args(i, &["--bitrate", "1000", "--size", "2999"]))
    })
    .fails_with(&["3000", "2999"]);
}

/// Creating over an existing volume is refused and keeps it.
#[test]
fn create_over_existing_volume() {
    let (v, keep) = volume_with_object();
    unchanged(&v, &keep, || v.create(&[])).fails_with(&["already exists"]);
}

#[test]
fn truncated_stdin_upload() {
    let (v, keep) = volume_with_object();
    let data = common::random_bytes(6, 4 * SMALL_CODEWORD);
    let size = (data.len() + 1).to_string();
    unchanged(&v, &keep, || {
        v.run_stdin(
            &[
                "ingest",
                "-",
                "--name",
                "up",
                "--bitrate",
                "1000",
                "--size",
                &size,
            ],
            &data,
        )
    })
    .fails_with(&["truncated", &format!("got {} of {size} bytes", data.len())]);
    // Nothing at all on stdin.
    unchanged(&v, &keep, || {
        v.run_stdin(
            &[
                "ingest",
                "-",
                "--name",
                "up",
                "--bitrate",
                "1000",
                "--size",
                "100",
            ],
            &[],
        )
    })
    .fails_with(&["truncated"]);
    // Longer than announced.
    let short = (data.len() - 1).to_string();
    unchanged(&v, &keep, || {
        v.run_stdin(
            &[
                "ingest",
                "-",
                "--name",
                "up",
                "--bitrate",
                "1000",
                "--size",
                &short,
            ],
            &data,
        )
    })
    .fails_with(&["longer"]);
    // stdin needs a name.
    unchanged(&v, &keep, || {
        v.run_stdin(&["ingest", "-", "--bitrate", "1000"], &data)
    })
    .fails_with(&["--name"]);

    // An MPEG-TS cut mid-packet, without --size: the container tells.
    let ts_path = v.dir.path().join("in/stream.ts");
    let mut gen = common::command();
    gen.args([
        "gen-ts",
        "--bitrate",
        "1000000",
        "--duration",
        "1",
        ts_path.to_str().unwrap(),
    ]);
    common::run_cmd(gen, None).ok();
    let ts = std::fs::read(&ts_path).unwrap();
    assert_eq!(ts.len() % 188, 0);
    let cut = &ts[..ts.len() - 100];
    unchanged(&v, &keep, || {
        v.run_stdin(&["ingest", "-", "--name", "stream.ts"], cut)
    })
    .fails_with(&["truncated"]);
    // The whole stream goes in, bitrate detected.
    v.run_stdin(&["ingest", "-", "--name", "stream.ts"], &ts)
        .ok();
    v.assert_cat("stream.ts", &ts);
    let o = v.object("stream.ts").unwrap();
    assert_eq!(o["bitrate_bps"], 1_000_000, "{o}");
    v.assert_no_orphans();
}

/// `ingest -` without `--size` spools at most `--max-spool-bytes`: past it, a clear error,
/// nothing stored and no spool left behind (before: it spooled without limit).
#[test]
fn stdin_spool_is_bounded() {
    let (v, keep) = volume_with_object();
    let data = common::random_bytes(7, 4 * SMALL_CODEWORD);
    let limit = (data.len() - 1).to_string();
    let args = [
        "ingest",
        "-",
        "--name",
        "up",
        "--bitrate",
        "1000",
        "--max-spool-bytes",
        &limit,
    ];
    unchanged(&v, &keep, || v.run_stdin(&args, &data)).fails_with(&[
        &format!("more than {limit} bytes"),
        "--max-spool-bytes",
        "nothing was stored",
    ]);
    let tmp: Vec<_> = std::fs::read_dir(v.root.join("tmp"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .collect();
    assert!(tmp.is_empty(), "left in tmp/: {tmp:?}");
    // --size past the bound is refused before reading.
    let size = (data.len()).to_string();
    let mut with_size = args.to_vec();
    with_size.extend_from_slice(&["--size", &size]);
    unchanged(&v, &keep, || v.run_stdin(&with_size, &data))
        .fails_with(&["more than the spool may hold"]);
    // At the bound exactly, it goes in.
    let exact = data.len().to_string();
    let ok_args = [
        "ingest",
        "-",
        "--name",
        "up",
        "--bitrate",
        "1000",
        "--max-spool-bytes",
        &exact,
    ];
    v.run_stdin(&ok_args, &data).ok();
    v.assert_cat("up", &data);
}

/// `cat` of an unknown name, and commands on a directory that is not a volume.
#[test]
fn unknown_object_and_missing_volume() {
    let (v, keep) = volume_with_object();
    let out = unchanged(&v, &keep, || v.cat("nope")).fails_with(&["no object named \"nope\""]);
    assert!(out.stdout.is_empty());
    let elsewhere = Vol::empty();
    elsewhere
        .run(&["cat", "x"])
        .fails_with(&["no volume", "volume create"]);
    elsewhere
        .run(&["volume", "check"])
        .fails_with(&["no volume"]);
    assert!(!elsewhere.root.exists());
}

/// Unmounts a tmpfs when dropped, even when the test panics.
struct Mount(PathBuf);

impl Mount {
    /// A tmpfs of `size` mounted at `dir`; panics, saying why and what it needs, if it
    /// cannot be mounted (a test that cannot run fails rather than passes).
    #[track_caller]
    fn tmpfs(dir: &Path, size: &str) -> Mount {
        std::fs::create_dir_all(dir).unwrap();
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status();
        match st {
            Ok(s) if s.success() => Mount(dir.to_path_buf()),
            other => panic!(
                "the full-disk test cannot run: mounting a tmpfs at {} failed ({other:?}); \
                 it needs `mount` (util-linux) and the right to mount (root with \
                 CAP_SYS_ADMIN, e.g. a privileged container)",
                dir.display()
            ),
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.0)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

#[test]
fn full_disk() {
    let v = Vol::empty();
    let _mount = Mount::tmpfs(&v.root, "3m");
    v.create(common::SMALL).ok();
    let keep = common::random_bytes(7, 3 * SMALL_CODEWORD);
    v.ingest("keep", &keep);
    let big = common::random_bytes(8, 10 << 20);
    let input = v.input("big.bin", &big);
    let i = input.to_str().unwrap();
    unchanged(&v, &keep, || v.run(&ingest_args(i, &["--bitrate", "1000"])))
        .fails_with(&["No space left on device"]);
    // Through stdin: the spool stops at half the free space, before the disk is full.
    unchanged(&v, &keep, || {
        v.run_stdin(&["ingest", "-", "--name", "big", "--bitrate", "1000"], &big)
    })
    .fails_with(&["half the free space", "nothing was stored"]);
    v.assert_clean();
    // The space came back: a small ingest works.
    let small = common::random_bytes(9, 20 * SMALL_CODEWORD);
    v.ingest("small", &small);
    v.assert_cat("small", &small);
    v.assert_cat("keep", &keep);
    v.assert_no_orphans();
}

/// An OS error appears once in a message, not repeated by each layer of the
/// error chain ("...: Is a directory (os error 21): Is a directory (os error 21)").
#[test]
fn os_errors_are_reported_once() {
    let (v, keep) = volume_with_object();
    let dir = v.dir.path().join("in/a-directory");
    std::fs::create_dir(&dir).unwrap();
    let d = dir.to_str().unwrap();
    let out = unchanged(&v, &keep, || v.run(&ingest_args(d, &["--bitrate", "1000"])));
    let dir_msg = out.fails_with(&["Is a directory"]).stderr;

    // A member's tmp directory gone (the member itself present, so not a degraded
    // write): the ingest cannot write its segment.
    let aside = v.dir.path().join("member-2-tmp-aside");
    std::fs::rename(v.member(2).join("tmp"), &aside).unwrap();
    let input = v.input("ok.bin", &common::random_bytes(10, 3000));
    let i = input.to_str().unwrap();
    let member_msg = v
        .run(&ingest_args(i, &["--bitrate", "1000"]))
        .fails_with(&["members/2"])
        .stderr;
    std::fs::rename(&aside, v.member(2).join("tmp")).unwrap();
    v.assert_no_orphans();

    for (msg, os) in [(&dir_msg, "(os error 21)"), (&member_msg, "(os error 2)")] {
        assert_eq!(
            msg.matches(os).count(),
            1,
            "the OS error is repeated: {msg}"
        );
    }
}
