//! Control groups for disk-bound benchmarks: a group whose processes read the disk holding
//! a directory at most at a given rate and use at most a given memory (page cache
//! included), so that reads really hit a slow disk instead of memory.
//!
//! Both cgroup versions: v1 (`blkio.throttle.read_bps_device` under the blkio hierarchy,
//! `memory.limit_in_bytes` under the memory one) when those controllers are mounted under
//! `/sys/fs/cgroup/blkio` and `/sys/fs/cgroup/memory`, else v2 (`io.max`, `memory.max`) on
//! the unified hierarchy at `/sys/fs/cgroup`. Root is needed. A process joins the group
//! before it runs anything ([`Cgroup::command`]: a shell writes its own pid into the
//! groups, then execs the program), so none of its reads escape the limit. The groups are
//! removed when the [`Cgroup`] is dropped (once their processes have ended).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};

/// What a group limits (`None`: not limited).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// Most bytes per second read from the disk holding the directory.
    pub disk_read_bps: Option<u64>,
    /// Most bytes of memory, page cache included.
    pub memory_bytes: Option<u64>,
}

/// Which cgroup hierarchy the machine has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// Separate `blkio` and `memory` hierarchies.
    V1,
    /// The unified hierarchy.
    V2,
}

/// Where the cgroup file systems are mounted.
const ROOT: &str = "/sys/fs/cgroup";

/// The hierarchy in use here: v1 when its blkio and memory controllers are mounted.
pub fn version() -> anyhow::Result<Version> {
    let root = Path::new(ROOT);
    if root.join("blkio/blkio.throttle.read_bps_device").exists()
        && root.join("memory/memory.limit_in_bytes").exists()
    {
        return Ok(Version::V1);
    }
    if root.join("cgroup.controllers").exists() {
        return Ok(Version::V2);
    }
    bail!(
        "no cgroup controllers for disk and memory limits under {ROOT} (neither v1 blkio and \
         memory nor a v2 unified hierarchy)"
    )
}

/// `major:minor` of the whole disk holding `path` (its file system's device, or the disk
/// a partition belongs to: throttling applies to whole disks).
pub fn disk_of(path: &Path) -> anyhow::Result<(u32, u32)> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(path)
        .with_context(|| format!("stat {}", path.display()))?
        .dev();
    let (major, minor) = split_dev(dev);
    if major == 0 {
        bail!(
            "{} is on a file system without a block device ({major}:{minor}: tmpfs, overlay, \
             a network file system): put the volume on a disk",
            path.display()
        );
    }
    let sys = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    if sys.join("partition").exists() {
        let parent = std::fs::read_to_string(sys.join("../dev"))
            .with_context(|| format!("the disk of partition {major}:{minor}"))?;
        return parse_dev(parent.trim())
            .with_context(|| format!("parsing {parent:?} (the disk of {major}:{minor})"));
    }
    Ok((major, minor))
}

/// `dev_t` as Linux encodes it, into major and minor.
fn split_dev(dev: u64) -> (u32, u32) {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    (major as u32, minor as u32)
}

/// `"254:0"` into (254, 0).
fn parse_dev(s: &str) -> Option<(u32, u32)> {
    let (a, b) = s.split_once(':')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// A control group (one directory per controller), removed when dropped.
#[derive(Debug)]
pub struct Cgroup {
    version: Version,
    dirs: Vec<PathBuf>,
    disk: (u32, u32),
}

impl Cgroup {
    /// Creates the group `name` limiting reads of the disk holding `dir` and memory.
    pub fn create(name: &str, limits: Limits, dir: &Path) -> anyhow::Result<Cgroup> {
        let version = version()?;
        let disk = disk_of(dir)?;
        let dirs = match version {
            Version::V1 => vec![
                Path::new(ROOT).join("blkio").join(name),
                Path::new(ROOT).join("memory").join(name),
            ],
            Version::V2 => vec![Path::new(ROOT).join(name)],
        };
        for d in &dirs {
            std::fs::create_dir_all(d)
                .with_context(|| format!("creating the cgroup {} (root is needed)", d.display()))?;
        }
        let g = Cgroup {
            version,
            dirs,
            disk,
        };
        g.apply(limits)?;
        Ok(g)
    }

    /// Writes the limits into the group's files.
    fn apply(&self, limits: Limits) -> anyhow::Result<()> {
        let (major, minor) = self.disk;
        let mut writes: Vec<(PathBuf, String)> = Vec::new();
        match self.version {
            Version::V1 => {
                let (blkio, memory) = (&self.dirs[0], &self.dirs[1]);
                if let Some(bps) = limits.disk_read_bps {
                    writes.push((
                        blkio.join("blkio.throttle.read_bps_device"),
                        format!("{major}:{minor} {bps}"),
                    ));
                }
                if let Some(bytes) = limits.memory_bytes {
                    writes.push((memory.join("memory.limit_in_bytes"), bytes.to_string()));
                }
            }
            Version::V2 => {
                let g = &self.dirs[0];
                // The controllers must be on for the root's children.
                let _ = std::fs::write(
                    Path::new(ROOT).join("cgroup.subtree_control"),
                    "+io +memory",
                );
                if let Some(bps) = limits.disk_read_bps {
                    writes.push((g.join("io.max"), format!("{major}:{minor} rbps={bps}")));
                }
                if let Some(bytes) = limits.memory_bytes {
                    writes.push((g.join("memory.max"), bytes.to_string()));
                }
            }
        }
        for (file, value) in writes {
            std::fs::write(&file, &value)
                .with_context(|| format!("writing {value:?} to {}", file.display()))?;
        }
        Ok(())
    }

    /// Sets (or changes) the group's memory limit.
    pub fn set_memory_limit(&self, bytes: u64) -> anyhow::Result<()> {
        self.apply(Limits {
            disk_read_bps: None,
            memory_bytes: Some(bytes),
        })
    }

    /// Moves the running process `pid` into the group (its memory already charged
    /// elsewhere stays there; what it takes from now on is charged here).
    pub fn add_process(&self, pid: u32) -> anyhow::Result<()> {
        for d in &self.dirs {
            let procs = d.join("cgroup.procs");
            std::fs::write(&procs, pid.to_string())
                .with_context(|| format!("writing {pid} to {}", procs.display()))?;
        }
        Ok(())
    }

    /// Bytes of memory charged to the group now (v1 `memory.usage_in_bytes`, v2
    /// `memory.current`).
    pub fn memory_charged_bytes(&self) -> anyhow::Result<u64> {
        let file = match self.version {
            Version::V1 => self.dirs[1].join("memory.usage_in_bytes"),
            Version::V2 => self.dirs[0].join("memory.current"),
        };
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        text.trim()
            .parse()
            .with_context(|| format!("{}: {text:?}", file.display()))
    }

    /// The disk whose reads are limited, `major:minor`.
    pub fn disk(&self) -> (u32, u32) {
        self.disk
    }

    /// A command that runs `exe` inside the group: `sh` writes its own pid into the
    /// group's `cgroup.procs` and execs `exe` (add the arguments to the command).
    pub fn command(&self, exe: &Path) -> Command {
        let procs: Vec<String> = self
            .dirs
            .iter()
            .map(|d| d.join("cgroup.procs").display().to_string())
            .collect();
        let joins: String = procs
            .iter()
            .map(|p| format!("echo $$ > '{p}' && "))
            .collect();
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!("{joins}exec \"$0\" \"$@\""))
            .arg(exe);
        cmd
    }

    /// Bytes the group's processes read from the limited disk so far (as the kernel counts
    /// them; `None` where the counter is not found).
    pub fn disk_read_bytes(&self) -> Option<u64> {
        let (major, minor) = self.disk;
        let dev = format!("{major}:{minor}");
        match self.version {
            Version::V1 => {
                let t = std::fs::read_to_string(
                    self.dirs[0].join("blkio.throttle.io_service_bytes_recursive"),
                )
                .ok()?;
                t.lines().find_map(|l| {
                    let mut f = l.split_whitespace();
                    (f.next()? == dev && f.next()? == "Read").then(|| f.next()?.parse().ok())?
                })
            }
            Version::V2 => {
                let t = std::fs::read_to_string(self.dirs[0].join("io.stat")).ok()?;
                t.lines()
                    .find(|l| l.starts_with(&format!("{dev} ")))?
                    .split_whitespace()
                    .find_map(|kv| kv.strip_prefix("rbytes=")?.parse().ok())
            }
        }
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        for d in &self.dirs {
            // Fails while a process is still inside: it is left for the operator.
            let _ = std::fs::remove_dir(d);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_split_as_linux_encodes_them() {
        // makedev(254, 0) and makedev(259, 65537).
        assert_eq!(split_dev(254 << 8), (254, 0));
        let dev = (259u64 << 8) | (65537 & 0xff) | ((65537u64 & !0xff) << 12);
        assert_eq!(split_dev(dev), (259, 65537));
        assert_eq!(parse_dev("8:0"), Some((8, 0)));
        assert_eq!(parse_dev("8"), None);
    }
}
