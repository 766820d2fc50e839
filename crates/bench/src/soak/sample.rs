//! One sample of the server process from `/proc`: resident memory, open descriptors, threads.

use anyhow::Context;
use serde::Serialize;

/// One sample.
#[derive(Clone, Debug, Serialize)]
pub struct Sample {
    /// Seconds since the start of the soak.
    pub t_s: f64,
    /// Resident set size, bytes (`VmRSS`).
    pub rss_bytes: u64,
    /// Open descriptors (entries of `/proc/PID/fd`).
    pub fds: u64,
    /// Threads (`Threads`).
    pub threads: u64,
    /// Clients running at that moment.
    pub clients: u64,
}

/// Samples process `pid`.
pub(super) fn take(pid: u32, t_s: f64, clients: usize) -> anyhow::Result<Sample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status (has the server exited?)"))?;
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .with_context(|| format!("listing /proc/{pid}/fd"))?
        .count() as u64;
    Ok(Sample {
        t_s,
        rss_bytes: field("VmRSS:") * 1024,
        fds,
        threads: field("Threads:"),
        clients: clients as u64,
    })
}
