//! The memory limit of this process's cgroup, where the kernel's OOM killer ends a process
//! that outgrows it: v2's `memory.max`, v1's `memory.limit_in_bytes`, under the usual
//! mount points (`/sys/fs/cgroup`, `/sys/fs/cgroup/memory`).

use std::path::Path;

/// A v1 limit at or above this is "no limit" (the kernel writes a page-rounded `i64::MAX`).
const UNLIMITED_BYTES: u64 = 1 << 60;

/// This process's cgroup memory limit, bytes; `None` when there is none (or it cannot be
/// read).
pub fn cgroup_limit_bytes() -> Option<u64> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    limit_from(&own, |p| std::fs::read_to_string(p).ok())
}

/// The limit of the cgroup `own` (the text of `/proc/self/cgroup`) names, its files read
/// with `read`: the memory controller's v1 line if any, else the v2 (`0::`) line.
fn limit_from(own: &str, read: impl Fn(&Path) -> Option<String>) -> Option<u64> {
    let line = |pred: &dyn Fn(&str) -> bool| {
        own.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            pred(controllers).then(|| path.trim_start_matches('/').to_string())
        })
    };
    let (dir, name) = match line(&|c: &str| c.split(',').any(|x| x == "memory")) {
        Some(p) => (
            Path::new("/sys/fs/cgroup/memory").join(p),
            "memory.limit_in_bytes",
        ),
        None => {
            let p = line(&|c: &str| c.is_empty())?;
            (Path::new("/sys/fs/cgroup").join(p), "memory.max")
        }
    };
    let text = read(&dir.join(name))?;
    let bytes: u64 = text.trim().parse().ok()?;
    (bytes < UNLIMITED_BYTES).then_some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(path: &'static str, value: &'static str) -> impl Fn(&Path) -> Option<String> {
        move |p: &Path| (p == Path::new(path)).then(|| value.to_string())
    }

    #[test]
    fn a_v1_memory_controllers_limit_is_read_and_unlimited_is_none() {
        let own = "12:cpu,cpuacct:/x\n7:memory:/isnode-bench-1\n0::/user.slice\n";
        let file = "/sys/fs/cgroup/memory/isnode-bench-1/memory.limit_in_bytes";
        assert_eq!(
            limit_from(own, reader(file, "134217728\n")),
            Some(134_217_728)
        );
        assert_eq!(limit_from(own, reader(file, "9223372036854771712\n")), None);
    }

    #[test]
    fn a_v2_cgroups_memory_max_is_read_and_max_is_none() {
        let own = "0::/system.slice/isnode.service\n";
        let file = "/sys/fs/cgroup/system.slice/isnode.service/memory.max";
        assert_eq!(
            limit_from(own, reader(file, "268435456\n")),
            Some(268_435_456)
        );
        assert_eq!(limit_from(own, reader(file, "max\n")), None);
        assert_eq!(limit_from("garbage", reader(file, "1")), None);
    }
}
