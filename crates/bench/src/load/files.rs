//! Ingest against `cp`, `cat` against `cat`: one title's file stored into an isnode volume by
//! `isnode ingest` (a child process) against `cp` of it followed by `sync FILE` (fsync), and
//! `isnode cat NAME > /dev/null` against `cat FILE > /dev/null`; each pair run [`REPS`] times
//! in alternating order, medians reported, and the ratios isnode/peer. The page cache is
//! not dropped: both sides run warm, the same way (the segment files, written with
//! O_DIRECT, are read once before the `cat`s, as `cp` left the file's pages in the cache).
//! `scripts/bench-ingest` measures the same pairs cold and warm on a file of any size.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use super::title::Title;

/// Runs of each command.
pub const REPS: usize = 3;

/// One isnode command against its peer: medians of [`REPS`] runs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct OpPair {
    /// What is compared (`ingest vs cp+fsync`, `cat vs cat`).
    pub what: String,
    /// The isnode command (paths shortened).
    pub isnode_cmd: String,
    /// The peer command.
    pub peer_cmd: String,
    /// isnode's wall time, seconds.
    pub isnode_s: f64,
    /// isnode's CPU (user + sys of the child), seconds.
    pub isnode_cpu_s: f64,
    /// The peer's wall time, seconds.
    pub peer_s: f64,
    /// The peer's CPU, seconds.
    pub peer_cpu_s: f64,
    /// `isnode_s / peer_s`.
    pub wall_ratio: f64,
    /// `isnode_cpu_s / peer_cpu_s` (None when the peer's CPU was below the clock's tick).
    pub cpu_ratio: Option<f64>,
}

/// Ingest and cat of one title's file.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FileOps {
    /// Bytes of the file.
    pub file_bytes: u64,
    /// Runs per command (medians reported).
    pub reps: usize,
    /// The state of the page cache (not dropped between runs).
    pub cache: String,
    /// `isnode ingest` against `cp` + `sync FILE`.
    pub ingest: OpPair,
    /// `isnode cat` against `cat`.
    pub cat: OpPair,
}

/// User + sys seconds of the children waited for so far.
fn children_cpu_s() -> f64 {
    // SAFETY: getrusage writes one rusage into the valid, zeroed struct passed.
    #[allow(unsafe_code)]
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Runs `cmds` one after the other (each must succeed); wall and CPU seconds of them all.
fn timed(cmds: &mut [Command]) -> anyhow::Result<(f64, f64)> {
    let cpu0 = children_cpu_s();
    let t0 = Instant::now();
    for c in cmds.iter_mut() {
        let out = c.output().with_context(|| format!("running {c:?}"))?;
        if !out.status.success() {
            bail!(
                "{c:?} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
    }
    Ok((t0.elapsed().as_secs_f64(), children_cpu_s() - cpu0))
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs.get(xs.len() / 2).copied().unwrap_or(0.0)
}

/// Medians of `reps` runs of `isnode` and `peer` (alternating which goes first).
fn pair(
    (what, isnode_cmd, peer_cmd): (&str, String, String),
    reps: usize,
    mut isnode: impl FnMut(usize) -> anyhow::Result<(f64, f64)>,
    mut peer: impl FnMut(usize) -> anyhow::Result<(f64, f64)>,
) -> anyhow::Result<OpPair> {
    let (mut mine, mut theirs) = (Vec::new(), Vec::new());
    for rep in 0..reps.max(1) {
        if rep % 2 == 0 {
            mine.push(isnode(rep)?);
            theirs.push(peer(rep)?);
        } else {
            theirs.push(peer(rep)?);
            mine.push(isnode(rep)?);
        }
    }
    let wall = |v: &[(f64, f64)]| median(v.iter().map(|x| x.0).collect());
    let cpu = |v: &[(f64, f64)]| median(v.iter().map(|x| x.1).collect());
    let (is, ps) = (wall(&mine), wall(&theirs));
    let (ic, pc) = (cpu(&mine), cpu(&theirs));
    Ok(OpPair {
        what: what.into(),
        isnode_cmd,
        peer_cmd,
        isnode_s: is,
        isnode_cpu_s: ic,
        peer_s: ps,
        peer_cpu_s: pc,
        wall_ratio: is / ps.max(1e-9),
        cpu_ratio: (pc > 0.0).then(|| ic / pc),
    })
}

fn isnode(exe: &Path, vol: &Path) -> Command {
    let mut c = Command::new(exe);
    c.arg("--volume").arg(vol).stdin(Stdio::null());
    c
}

/// `program args... | wc -c`: the output goes through a pipe to a reader, as it goes to a
/// player (`/dev/null` would flatter `cat`: since coreutils 9 it splices into /dev/null,
/// which discards without copying).
fn into_pipe(program: &Path, args: &[&std::ffi::OsStr]) -> Command {
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg("\"$0\" \"$@\" | wc -c > /dev/null")
        .arg(program)
        .args(args)
        .stdin(Stdio::null());
    c
}

/// Writes `title` under `dir` and compares ingest with `cp` and `cat` with `cat` on it.
pub(crate) fn compare(exe: &Path, dir: &Path, title: &Title) -> anyhow::Result<FileOps> {
    std::fs::create_dir_all(dir)?;
    let file = dir.join(&title.name);
    std::fs::write(&file, title.bytes.as_slice())
        .with_context(|| format!("writing {}", file.display()))?;
    let vol = |rep: usize| dir.join(format!("vol-{rep}"));
    let copy = |rep: usize| dir.join(format!("copy-{rep}.ts"));
    let bitrate = title.bitrate_bps.to_string();
    let ingest = pair(
        (
            "ingest vs cp+fsync",
            format!(
                "isnode ingest FILE --name {} --bitrate {bitrate}",
                title.name
            ),
            "cp FILE COPY && sync COPY".into(),
        ),
        REPS,
        |rep| {
            let v = vol(rep);
            let mut create = isnode(exe, &v);
            create.args(["volume", "create"]);
            timed(&mut [create])?;
            let mut ingest = isnode(exe, &v);
            ingest.arg("ingest").arg(&file);
            ingest.args(["--name", &title.name, "--bitrate", &bitrate]);
            let r = timed(&mut [ingest]);
            // The last volume stays for cat.
            if rep + 1 < REPS {
                let _ = std::fs::remove_dir_all(&v);
            }
            r
        },
        |rep| {
            let c: PathBuf = copy(rep);
            let mut cp = Command::new("cp");
            cp.arg(&file).arg(&c);
            let mut sync = Command::new("sync");
            sync.arg(&c);
            let r = timed(&mut [cp, sync]);
            let _ = std::fs::remove_file(&c);
            r
        },
    )?;
    let last = vol(REPS - 1);
    // Ingest writes the segment files with O_DIRECT, past the page cache, while `cp` left
    // FILE's pages there: read the segments once, so that both `cat`s start warm.
    warm_segments(&last)?;
    let cat = pair(
        (
            "cat vs cat",
            format!("isnode cat {} | wc -c", title.name),
            "cat FILE | wc -c".into(),
        ),
        REPS,
        |_| {
            let args = [
                "--volume".as_ref(),
                last.as_os_str(),
                "cat".as_ref(),
                title.name.as_ref(),
            ];
            timed(&mut [into_pipe(exe, &args)])
        },
        |_| timed(&mut [into_pipe(Path::new("cat"), &[file.as_os_str()])]),
    )?;
    Ok(FileOps {
        file_bytes: title.bytes.len() as u64,
        reps: REPS,
        cache: "warm (page cache not dropped; both sides run the same way)".into(),
        ingest,
        cat,
    })
}

/// Reads every segment file of the volume at `vol` once (into the page cache).
pub(crate) fn warm_segments(vol: &Path) -> anyhow::Result<()> {
    let members = vol.join("members");
    for member in
        std::fs::read_dir(&members).with_context(|| format!("listing {}", members.display()))?
    {
        let objects = member?.path().join("objects");
        let Ok(files) = std::fs::read_dir(&objects) else {
            continue;
        };
        for f in files {
            let path = f?.path();
            let mut file = std::fs::File::open(&path)
                .with_context(|| format!("opening {}", path.display()))?;
            std::io::copy(&mut file, &mut std::io::sink())
                .with_context(|| format!("reading {}", path.display()))?;
        }
    }
    Ok(())
}

/// The comparison as a few lines of a table.
pub(crate) fn format_table(f: &FileOps) -> String {
    let mut s = format!(
        "one title's file, {:.1} MB, median of {} runs, {}\n{:<20} {:>8} {:>8} {:>9} {:>9}   \
         commands\n",
        f.file_bytes as f64 / 1e6,
        f.reps,
        f.cache,
        "isnode vs peer",
        "isnode_s",
        "peer_s",
        "wall_x",
        "cpu_x"
    );
    for p in [&f.ingest, &f.cat] {
        s.push_str(&format!(
            "{:<20} {:>8.3} {:>8.3} {:>9.2} {:>9}   {} / {}\n",
            p.what,
            p.isnode_s,
            p.peer_s,
            p.wall_ratio,
            p.cpu_ratio.map_or("-".into(), |r| format!("{r:.2}")),
            p.isnode_cmd,
            p.peer_cmd,
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_report_medians_and_ratios() {
        let mut mine = [(3.0, 1.0), (1.0, 0.5), (2.0, 0.7)].into_iter();
        let mut theirs = [(1.0, 0.1), (1.5, 0.2), (0.5, 0.0)].into_iter();
        let p = pair(
            ("a vs b", "a".into(), "b".into()),
            3,
            |_| mine.next().context("ran too often"),
            |_| theirs.next().context("ran too often"),
        );
        let p = p.expect("three runs each");
        assert_eq!((p.isnode_s, p.isnode_cpu_s), (2.0, 0.7));
        assert_eq!((p.peer_s, p.peer_cpu_s), (1.0, 0.1));
        assert!((p.wall_ratio - 2.0).abs() < 1e-12);
        assert!(p.cpu_ratio.is_some_and(|r| (r - 7.0).abs() < 1e-9));
    }

    #[test]
    fn timed_children_fail_with_their_status() {
        let ok = timed(&mut [Command::new("true")]);
        assert!(ok.is_ok_and(|(wall, cpu)| wall >= 0.0 && cpu >= 0.0));
        assert!(timed(&mut [Command::new("false")]).is_err());
    }
}
