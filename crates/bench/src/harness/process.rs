//! What a benchmark's server process (or any process) costs, from /proc: CPU time, memory,
//! reads from storage, and its children.

use anyhow::Context;

/// The fields of /proc/PID/stat after the command name (state first).
fn stat_fields(pid: u32) -> anyhow::Result<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("parsing /proc stat")?;
    Ok(after.split_whitespace().map(str::to_string).collect())
}

/// user + sys CPU seconds of a process, from /proc/PID/stat.
pub(crate) fn process_cpu_s(pid: u32) -> anyhow::Result<f64> {
    let fields = stat_fields(pid)?;
    // After the command name: state is field 3; utime and stime are fields 14 and 15.
    let utime: u64 = fields.get(11).context("utime")?.parse()?;
    let stime: u64 = fields.get(12).context("stime")?.parse()?;
    // SAFETY: sysconf has no preconditions.
    #[allow(unsafe_code)]
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Ok((utime + stime) as f64 / hz)
}

/// user + sys CPU seconds of the threads of process `pid` named `name` (their `comm`), from
/// /proc/PID/task/TID/stat (0 when none is found).
pub(crate) fn threads_cpu_s(pid: u32, name: &str) -> f64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0.0;
    };
    // SAFETY: sysconf has no preconditions.
    #[allow(unsafe_code)]
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let mut ticks = 0u64;
    for task in tasks.flatten() {
        let dir = task.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(dir.join("stat")) else {
            continue;
        };
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or(Vec::new(), |(_, r)| r.split_whitespace().collect());
        let field = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok());
        ticks += field(11).unwrap_or(0) + field(12).unwrap_or(0);
    }
    ticks as f64 / hz
}

/// Resident set size of a process in bytes (VmRSS), from /proc/PID/status.
pub(crate) fn process_rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .context("VmRSS in /proc status")?
        .parse()?;
    Ok(kb * 1024)
}

/// Pids of the children of `parent` (scanning /proc).
pub(crate) fn children_of(parent: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            stat_fields(pid)
                .ok()
                .and_then(|f| f.get(1)?.parse::<u32>().ok())
                == Some(parent)
        })
        .collect()
}

/// Bytes a process (all its threads, and those that ended) caused to be fetched from
/// storage: `read_bytes` of /proc/PID/io (page-cache hits are not counted).
pub(crate) fn process_read_bytes(pid: u32) -> anyhow::Result<u64> {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io"))?;
    parse_read_bytes(&io).context("read_bytes in /proc io")
}

fn parse_read_bytes(io: &str) -> Option<u64> {
    io.lines()
        .find_map(|l| l.strip_prefix("read_bytes:"))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_bytes_of_proc_io() {
        let io = "rchar: 10\nwchar: 2\nread_bytes: 4096\nwrite_bytes: 0\n";
        assert_eq!(parse_read_bytes(io), Some(4096));
        assert_eq!(parse_read_bytes("rchar: 10\n"), None);
        let own = process_read_bytes(std::process::id());
        assert!(own.is_ok(), "{own:?}");
    }
}
