//! Shared helpers for the end-to-end tests: they run the real `isnode` binary
//! on volumes in per-test temporary directories and look at the files it leaves.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};

use serde_json::Value;

/// The binary under test.
pub(crate) fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_isnode")
}

/// The small volume shape used by loops: E=64, k=20, m=4, 6 members, 4 KiB blocks
/// (a codeword is 1280 bytes; each source member holds 4 symbols of it).
pub(crate) const SMALL: &[&str] = &[
    "--symbol-size",
    "64",
    "--source-symbols",
    "20",
    "--repair-symbols",
    "4",
    "--members",
    "6",
    "--block-size",
    "4096",
];

/// Bytes of source data in one codeword of the small shape.
pub(crate) const SMALL_CODEWORD: usize = 64 * 20;
/// Bytes of source data in one codeword of the default shape.
pub(crate) const DEFAULT_CODEWORD: usize = 1408 * 223;

/// A finished run of the binary.
#[derive(Debug)]
pub(crate) struct Out {
    /// Exit status.
    pub status: ExitStatus,
    /// Standard output.
    pub stdout: Vec<u8>,
    /// Standard error, lossily decoded.
    pub stderr: String,
    /// The command line, for messages.
    pub what: String,
}

impl Out {
    /// Standard output as text.
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// Panics unless the run succeeded.
    #[track_caller]
    pub(crate) fn ok(self) -> Out {
        assert!(
            self.status.success(),
            "`{}` failed ({}):\nstdout:\n{}\nstderr:\n{}",
            self.what,
            self.status,
            self.text(),
            self.stderr
        );
        self
    }

    /// Panics unless the run failed with exit status 1 (an error, not a crash), and
    /// unless stderr contains every one of `phrases` (case-insensitive).
    #[track_caller]
    pub(crate) fn fails_with(self, phrases: &[&str]) -> Out {
        assert_eq!(
            self.status.code(),
            Some(1),
            "`{}` should fail with status 1, got {}:\nstdout:\n{}\nstderr:\n{}",
            self.what,
            self.status,
            self.text(),
            self.stderr
        );
        let lower = self.stderr.to_lowercase();
        for p in phrases {
            assert!(
                lower.contains(&p.to_lowercase()),
                "`{}`: stderr lacks {p:?}:\n{}",
                self.what,
                self.stderr
            );
        }
        self
    }
}

/// Runs a prepared command with optional stdin bytes.
pub(crate) fn run_cmd(mut cmd: Command, stdin: Option<&[u8]>) -> Out {
    let what = format!("{cmd:?}");
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {what}: {e}"));
    let writer = stdin.map(|data| {
        let mut pipe = child.stdin.take().unwrap();
        let data = data.to_vec();
        // The child may stop reading early (an error): a broken pipe is fine.
        std::thread::spawn(move || {
            let _ = pipe.write_all(&data);
        })
    });
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("waiting for {what}: {e}"));
    if let Some(w) = writer {
        w.join().unwrap();
    }
    Out {
        status: out.status,
        stdout: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        what,
    }
}

/// A bare command for the binary, isolated from the caller's environment.
pub(crate) fn command() -> Command {
    let mut cmd = Command::new(bin());
    cmd.env_remove("ISNODE_CRASH_POINT")
        .env_remove("ISNODE_VOLUME")
        .env_remove("RUST_LOG");
    cmd
}

/// A temporary directory with a volume in `vol/` and inputs in `in/`.
pub(crate) struct Vol {
    /// Keeps the directory alive.
    pub dir: tempfile::TempDir,
    /// The volume directory.
    pub root: PathBuf,
}

impl Vol {
    /// A temporary directory without a volume yet.
    pub(crate) fn empty() -> Vol {
        let dir = tempfile::Builder::new()
            .prefix("isnode-e2e-")
            .tempdir()
            .unwrap();
        let root = dir.path().join("vol");
        fs::create_dir_all(dir.path().join("in")).unwrap();
        Vol { dir, root }
    }

    /// A fresh volume with the small shape.
    pub(crate) fn small() -> Vol {
        let v = Vol::empty();
        v.create(SMALL).ok();
        v
    }

    /// A fresh volume with the default shape.
    pub(crate) fn default_shape() -> Vol {
        let v = Vol::empty();
        v.create(&[]).ok();
        v
    }

    /// `volume create` with extra arguments.
    pub(crate) fn create(&self, args: &[&str]) -> Out {
        let mut a = vec!["volume", "create"];
        a.extend_from_slice(args);
        self.run(&a)
    }

    /// A command on this volume.
    pub(crate) fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = command();
        cmd.arg("--volume").arg(&self.root).args(args);
        cmd
    }

    /// Runs a command on this volume.
    pub(crate) fn run(&self, args: &[&str]) -> Out {
        run_cmd(self.cmd(args), None)
    }

    /// Runs a command on this volume with bytes on stdin.
    pub(crate) fn run_stdin(&self, args: &[&str], stdin: &[u8]) -> Out {
        run_cmd(self.cmd(args), Some(stdin))
    }

    /// Writes an input file under `in/` and returns its path.
    pub(crate) fn input(&self, file_name: &str, data: &[u8]) -> PathBuf {
        let p = self.dir.path().join("in").join(file_name);
        fs::write(&p, data).unwrap();
        p
    }

    /// Ingests `data` as `name` (the bitrate given explicitly), panicking on failure.
    pub(crate) fn ingest(&self, name: &str, data: &[u8]) {
        let p = self.input(&format!("{name}.input"), data);
        self.run(&[
            "ingest",
            p.to_str().unwrap(),
            "--name",
            name,
            "--bitrate",
            "1000000",
        ])
        .ok();
    }

    /// `ls --json`, parsed.
    #[track_caller]
    pub(crate) fn ls(&self) -> Vec<Value> {
        let out = self.run(&["ls", "--json"]).ok();
        match serde_json::from_slice::<Value>(&out.stdout) {
            Ok(Value::Array(a)) => a,
            other => panic!("ls --json printed {other:?}: {}", out.text()),
        }
    }

    /// Object names listed by `ls --json`.
    #[track_caller]
    pub(crate) fn names(&self) -> BTreeSet<String> {
        self.ls()
            .iter()
            .map(|o| o["name"].as_str().unwrap().to_string())
            .collect()
    }

    /// The listing entry of `name`, if listed.
    #[track_caller]
    pub(crate) fn object(&self, name: &str) -> Option<Value> {
        self.ls().into_iter().find(|o| o["name"] == name)
    }

    /// `cat NAME`.
    pub(crate) fn cat(&self, name: &str) -> Out {
        self.run(&["cat", name])
    }

    /// Asserts that `cat NAME` succeeds and returns exactly `expected`.
    #[track_caller]
    pub(crate) fn assert_cat(&self, name: &str, expected: &[u8]) {
        let out = self.cat(name).ok();
        assert!(
            out.stdout == expected,
            "cat {name}: {} bytes differ from the {} original bytes (first difference at {:?})",
            out.stdout.len(),
            expected.len(),
            out.stdout.iter().zip(expected).position(|(a, b)| a != b)
        );
    }

    /// Member directory `i` (default member paths).
    pub(crate) fn member(&self, i: usize) -> PathBuf {
        self.root.join("members").join(i.to_string())
    }

    /// Number of member directories listed under `members/`.
    pub(crate) fn member_count(&self) -> usize {
        fs::read_dir(self.root.join("members"))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    /// Every segment file of the volume (members/*/objects/*.seg), sorted.
    pub(crate) fn segment_files(&self) -> Vec<PathBuf> {
        let mut v = Vec::new();
        for m in 0..self.member_count() {
            if let Ok(entries) = fs::read_dir(self.member(m).join("objects")) {
                v.extend(entries.flatten().map(|e| e.path()));
            }
        }
        v.sort();
        v
    }

    /// Snapshot of the volume's files (without the catalog's own files, whose
    /// bytes change on every open): relative path -> (length, FNV hash).
    pub(crate) fn snapshot(&self) -> BTreeMap<PathBuf, Option<(u64, u64)>> {
        let mut out = BTreeMap::new();
        walk(&self.root, &self.root, &mut out);
        out
    }

    /// The invariants a crash or a failed ingest must leave, after the next open:
    /// only `<toi>.seg` files of listed objects in members/*/objects, one per member
    /// for each listed object; members/*/tmp empty; the volume tmp/ without files
    /// other than ingest locks (see `stale_ingest_locks`).
    #[track_caller]
    pub(crate) fn assert_no_orphans(&self) {
        let listed = self.ls();
        let tois: BTreeSet<u64> = listed.iter().map(|o| o["toi"].as_u64().unwrap()).collect();
        let members = self.member_count();
        assert!(
            members >= 2,
            "{} members found under {}",
            members,
            self.root.display()
        );
        let mut problems = Vec::new();
        for m in 0..members {
            let mut seen = BTreeSet::new();
            for entry in fs::read_dir(self.member(m).join("objects"))
                .unwrap()
                .flatten()
            {
                let name = entry.file_name().to_string_lossy().into_owned();
                match name
                    .strip_suffix(".seg")
                    .and_then(|t| t.parse::<u64>().ok())
                {
                    Some(t) if tois.contains(&t) => {
                        seen.insert(t);
                    }
                    _ => problems.push(format!("orphan file {}", entry.path().display())),
                }
            }
            for t in tois.difference(&seen) {
                problems.push(format!(
                    "member {m} lacks the segment of listed object TOI {t}"
                ));
            }
            for entry in fs::read_dir(self.member(m).join("tmp")).unwrap().flatten() {
                problems.push(format!("left in a member tmp/: {}", entry.path().display()));
            }
        }
        if let Ok(entries) = fs::read_dir(self.root.join("tmp")) {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                // Stale ingest locks are a known leak, asserted on by
                // crash::stale_ingest_locks_are_removed; tolerated here so that
                // the other invariants keep being checked.
                let ingest_lock = name
                    .strip_prefix("ingest-")
                    .and_then(|n| n.strip_suffix(".lock"))
                    .is_some_and(|t| t.parse::<u64>().is_ok());
                if !ingest_lock {
                    problems.push(format!(
                        "left in the volume tmp/: {}",
                        entry.path().display()
                    ));
                }
            }
        }
        assert!(
            problems.is_empty(),
            "volume {} after recovery:\n  {}",
            self.root.display(),
            problems.join("\n  ")
        );
    }

    /// Ingest lock files left in the volume's tmp/ (none should outlive their ingest).
    pub(crate) fn stale_ingest_locks(&self) -> Vec<String> {
        let Ok(entries) = fs::read_dir(self.root.join("tmp")) else {
            return Vec::new();
        };
        let mut v: Vec<String> = entries
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    /// `volume check` (optionally `--repair`).
    pub(crate) fn check(&self, repair: bool) -> Out {
        if repair {
            self.run(&["volume", "check", "--repair"])
        } else {
            self.run(&["volume", "check"])
        }
    }

    /// Asserts that `volume check` exits 0 and calls the volume clean.
    #[track_caller]
    pub(crate) fn assert_clean(&self) {
        let out = self.check(false);
        assert!(
            out.status.success() && out.text().contains("clean"),
            "volume check should be clean ({}):\n{}{}",
            out.status,
            out.text(),
            out.stderr
        );
    }
}

fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Option<(u64, u64)>>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let rel = path.strip_prefix(root).unwrap().to_path_buf();
        let name = entry.file_name().to_string_lossy().into_owned();
        if dir == root && name.starts_with("catalog.sqlite") {
            continue;
        }
        let ft = entry.file_type().unwrap();
        if ft.is_dir() {
            out.insert(rel, None);
            walk(root, &path, out);
        } else {
            let data = fs::read(&path).unwrap_or_default();
            out.insert(rel, Some((data.len() as u64, fnv(&data))));
        }
    }
}

fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A small deterministic PRNG (SplitMix64).
pub(crate) struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// A generator seeded from `ISNODE_TEST_SEED` or the clock; prints the seed.
    pub(crate) fn from_env(test: &str) -> Rng {
        let seed = std::env::var("ISNODE_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
            });
        eprintln!("{test}: ISNODE_TEST_SEED={seed}");
        Rng(seed)
    }

    /// The next 64 random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// `len` random bytes.
    pub(crate) fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(len + 8);
        while v.len() < len {
            v.extend_from_slice(&self.next_u64().to_le_bytes());
        }
        v.truncate(len);
        v
    }
}

/// `len` bytes from a fixed seed.
pub(crate) fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    Rng::new(seed).bytes(len)
}
