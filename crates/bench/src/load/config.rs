//! What a load run is asked to do.

use std::path::PathBuf;

use super::confine::{Confinement, DiskAdmission};
use super::net::NetMode;
use super::nginx::NginxVariant;

/// What to run.
#[derive(Clone, Debug)]
pub struct LoadBenchConfig {
    /// The `isnode` binary to start servers from.
    pub isnode_exe: PathBuf,
    /// isnode engines to load, in order.
    pub engines: Vec<String>,
    /// nginx variants to load after the engines (none: isnode only).
    pub nginx: Vec<NginxVariant>,
    /// Number of titles.
    pub titles: usize,
    /// Bitrate of every title.
    pub bitrate_bps: u64,
    /// Length of every title, seconds.
    pub title_s: f64,
    /// Seconds of load per level.
    pub seconds: f64,
    /// Concurrent streams of the first level.
    pub streams: usize,
    /// Highest level tried (no ramp when at most `streams`).
    pub max_streams: usize,
    /// Bisection steps after the doubling found a failing level.
    pub bisect_steps: usize,
    /// Smallest share of valid streams for a level to pass.
    pub pass_fraction: f64,
    /// Seconds of the stream a client buffers before playing.
    pub startup_buffer_s: f64,
    /// isnode's block pool size.
    pub cache_size_bytes: u64,
    /// Seed of the schedules.
    pub seed: u64,
    /// Where the clients run.
    pub net: NetMode,
    /// Memory and disk limits of every server (a library larger than memory).
    pub confine: Confinement,
    /// Whether isnode servers admit sessions against the disk read limit.
    pub disk_admission: DiskAdmission,
}
