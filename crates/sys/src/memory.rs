//! The memory cgroup of this process, where the kernel's OOM killer ends a process that
//! outgrows its limit: the limit (v2's `memory.max`, v1's `memory.limit_in_bytes`) and what
//! the group holds that the kernel cannot reclaim without swap, under the usual mount points
//! (`/sys/fs/cgroup`, `/sys/fs/cgroup/memory`).

use std::path::{Path, PathBuf};

/// A v1 limit at or above this is "no limit" (the kernel writes a page-rounded `i64::MAX`).
const UNLIMITED_BYTES: u64 = 1 << 60;

/// This process's cgroup memory limit, bytes; `None` when there is none (or it cannot be
/// read).
pub fn cgroup_limit_bytes() -> Option<u64> {
    Cgroup::own()?.limit_bytes()
}

/// The memory cgroup of this process: its directory and hierarchy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cgroup {
    dir: PathBuf,
    version: Version,
}

/// A cgroup hierarchy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Version {
    V1,
    V2,
}

/// What a memory cgroup holds against its limit, read at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    /// The limit, bytes.
    pub limit_bytes: u64,
    /// What the group holds that the kernel cannot give back without swap: all it is
    /// charged less the page cache of files (shared memory, as the HTTP mirror's files,
    /// stays) and reclaimable slab.
    pub held_bytes: u64,
}

impl Cgroup {
    /// This process's memory cgroup (from `/proc/self/cgroup`), `None` if it cannot be read.
    pub fn own() -> Option<Cgroup> {
        let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        Cgroup::named_in(&own)
    }

    /// The cgroup `own` (the text of `/proc/self/cgroup`) names: the memory controller's v1
    /// line if any, else the v2 (`0::`) line.
    fn named_in(own: &str) -> Option<Cgroup> {
        let line = |pred: &dyn Fn(&str) -> bool| {
            own.lines().find_map(|l| {
                let mut parts = l.splitn(3, ':');
                let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
                pred(controllers).then(|| path.trim_start_matches('/').to_string())
            })
        };
        if let Some(p) = line(&|c: &str| c.split(',').any(|x| x == "memory")) {
            return Some(Cgroup {
                dir: Path::new("/sys/fs/cgroup/memory").join(p),
                version: Version::V1,
            });
        }
        let p = line(&|c: &str| c.is_empty())?;
        Some(Cgroup {
            dir: Path::new("/sys/fs/cgroup").join(p),
            version: Version::V2,
        })
    }

    /// The group's limit, bytes; `None` when it has none (or it cannot be read).
    pub fn limit_bytes(&self) -> Option<u64> {
        self.limit_with(read_file)
    }

    fn limit_with(&self, read: impl Fn(&Path) -> Option<String>) -> Option<u64> {
        let name = match self.version {
            Version::V1 => "memory.limit_in_bytes",
            Version::V2 => "memory.max",
        };
        let bytes: u64 = read(&self.dir.join(name))?.trim().parse().ok()?;
        (bytes < UNLIMITED_BYTES).then_some(bytes)
    }

    /// The limit and what is held against it now; `None` without a limit (or if the
    /// group's files cannot be read).
    pub fn usage(&self) -> Option<Usage> {
        self.usage_with(read_file)
    }

    fn usage_with(&self, read: impl Fn(&Path) -> Option<String>) -> Option<Usage> {
        let limit_bytes = self.limit_with(&read)?;
        // v1 counts its own and its children's pages in `usage_in_bytes` and the `total_`
        // rows; v2's `memory.current` and rows are hierarchical already.
        let (charged, file, shmem, slab) = match self.version {
            Version::V1 => ("memory.usage_in_bytes", "total_cache", "total_shmem", None),
            Version::V2 => ("memory.current", "file", "shmem", Some("slab_reclaimable")),
        };
        let charged: u64 = read(&self.dir.join(charged))?.trim().parse().ok()?;
        let stat = read(&self.dir.join("memory.stat"))?;
        let row = |name: &str| -> Option<u64> {
            stat.lines().find_map(|l| {
                let (k, v) = l.split_once(' ')?;
                (k == name).then(|| v.trim().parse().ok())?
            })
        };
        let reclaimable = row(file)?.saturating_sub(row(shmem)?) + slab.map_or(Some(0), row)?;
        Some(Usage {
            limit_bytes,
            held_bytes: charged.saturating_sub(reclaimable),
        })
    }
}

fn read_file(p: &Path) -> Option<String> {
    std::fs::read_to_string(p).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader of the files `files` names (path, text); any other path is unreadable.
    fn files(files: Vec<(&'static str, &'static str)>) -> impl Fn(&Path) -> Option<String> {
        move |p: &Path| {
            files
                .iter()
                .find(|(name, _)| p == Path::new(name))
                .map(|(_, text)| text.to_string())
        }
    }

    fn limit_from(own: &str, read: impl Fn(&Path) -> Option<String>) -> Option<u64> {
        Cgroup::named_in(own)?.limit_with(read)
    }

    #[test]
    fn a_v1_memory_controllers_limit_is_read_and_unlimited_is_none() {
        let own = "12:cpu,cpuacct:/x\n7:memory:/isnode-bench-1\n0::/user.slice\n";
        let file = "/sys/fs/cgroup/memory/isnode-bench-1/memory.limit_in_bytes";
        assert_eq!(
            limit_from(own, files(vec![(file, "134217728\n")])),
            Some(134_217_728)
        );
        let unlimited = files(vec![(file, "9223372036854771712\n")]);
        assert_eq!(limit_from(own, unlimited), None);
    }

    #[test]
    fn a_v2_cgroups_memory_max_is_read_and_max_is_none() {
        let own = "0::/system.slice/isnode.service\n";
        let file = "/sys/fs/cgroup/system.slice/isnode.service/memory.max";
        assert_eq!(
            limit_from(own, files(vec![(file, "268435456\n")])),
            Some(268_435_456)
        );
        assert_eq!(limit_from(own, files(vec![(file, "max\n")])), None);
        assert_eq!(limit_from("garbage", files(vec![(file, "1")])), None);
    }

    #[test]
    fn v1_usage_is_what_is_charged_less_file_pages_but_not_shared_memory() {
        let own = "7:memory:/g\n";
        let read = files(vec![
            (
                "/sys/fs/cgroup/memory/g/memory.limit_in_bytes",
                "134217728\n",
            ),
            (
                "/sys/fs/cgroup/memory/g/memory.usage_in_bytes",
                "130000000\n",
            ),
            (
                "/sys/fs/cgroup/memory/g/memory.stat",
                "cache 1\nshmem 1\ntotal_cache 90000000\ntotal_rss 40000000\n\
                 total_shmem 30000000\n",
            ),
        ]);
        let usage = Cgroup::named_in(own).and_then(|c| c.usage_with(read));
        assert_eq!(
            usage,
            Some(Usage {
                limit_bytes: 134_217_728,
                held_bytes: 130_000_000 - (90_000_000 - 30_000_000),
            })
        );
    }

    #[test]
    fn v2_usage_also_gives_back_reclaimable_slab_and_needs_a_limit_and_every_row() {
        let own = "0::/s/isnode.service\n";
        let stat = "anon 50000000\nfile 70000000\nshmem 20000000\nslab_reclaimable 3000000\n";
        let read = files(vec![
            ("/sys/fs/cgroup/s/isnode.service/memory.max", "268435456\n"),
            (
                "/sys/fs/cgroup/s/isnode.service/memory.current",
                "125000000\n",
            ),
            ("/sys/fs/cgroup/s/isnode.service/memory.stat", stat),
        ]);
        let group = Cgroup::named_in(own).expect("a v2 group");
        assert_eq!(
            group.usage_with(read),
            Some(Usage {
                limit_bytes: 268_435_456,
                held_bytes: 125_000_000 - (70_000_000 - 20_000_000) - 3_000_000,
            })
        );
        let unlimited = files(vec![
            ("/sys/fs/cgroup/s/isnode.service/memory.max", "max\n"),
            ("/sys/fs/cgroup/s/isnode.service/memory.current", "1\n"),
            ("/sys/fs/cgroup/s/isnode.service/memory.stat", stat),
        ]);
        assert_eq!(group.usage_with(unlimited), None);
        let no_shmem_row = files(vec![
            ("/sys/fs/cgroup/s/isnode.service/memory.max", "268435456\n"),
            ("/sys/fs/cgroup/s/isnode.service/memory.current", "1\n"),
            ("/sys/fs/cgroup/s/isnode.service/memory.stat", "file 5\n"),
        ]);
        assert_eq!(group.usage_with(no_shmem_row), None);
    }
}
