//! What a soak is asked to do.

use std::path::PathBuf;

/// What to run.
#[derive(Clone, Debug)]
pub struct SoakConfig {
    /// The isnode binary (server and clients).
    pub isnode_exe: PathBuf,
    /// Length of the run, seconds.
    pub seconds: f64,
    /// Clients kept running.
    pub sessions: usize,
    /// Titles ingested before the start (uploads come and go on top of them).
    pub titles: usize,
    /// Playing time of each title, seconds.
    pub title_s: u64,
    /// Bitrate of each title.
    pub bitrate_bps: u64,
    /// Seed of the churn.
    pub seed: u64,
    /// The server's block pool (`--cache-size-bytes`); `None`: its default (256 MiB). The
    /// pool's pages become resident as slots are first used, so a short soak with the
    /// default pool measures that warm-up; a small pool is warm within the first half.
    pub cache_size_bytes: Option<u64>,
}
