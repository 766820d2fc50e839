//! A library larger than memory on a disk that is the bottleneck: each server of the run
//! (isnode and nginx alike) runs in a control group of its own ([`crate::cgroup`]) whose
//! memory limit counts its page cache and whose reads of the disk holding the titles are
//! throttled. Every server starts cold: the page cache is dropped before each one.

use std::path::Path;

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use crate::cgroup::{Cgroup, Limits};

/// The library must be at least this many times the memory limit (the question is what
/// happens when it does not fit).
pub const MIN_LIBRARY_OVER_MEMORY: u64 = 4;
/// Memory an isnode server needs beside its block pool (sockets, threads, catalog, the
/// process itself): the pool gets the memory limit less this. Measured: 17-20 MB of RSS
/// beyond the pool (`gso`, 8 to 256 streams under an 80 MiB limit); the rest is room for the
/// page cache of the catalog and of the binary. (It was 48 MiB until 2026-11-27, which left
/// the pool 32 MiB of an 80 MiB limit instead of 56.)
const ISNODE_HEADROOM_BYTES: u64 = 24 << 20;

/// The limits each server of a run runs under (`None`: not limited).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Confinement {
    /// Bytes of memory per server, page cache included.
    pub memory_limit_bytes: Option<u64>,
    /// Bytes per second a server may read from the disk holding the titles.
    pub disk_read_limit_bps: Option<u64>,
}

impl Confinement {
    /// True when neither memory nor disk is limited.
    pub fn is_none(&self) -> bool {
        self.memory_limit_bytes.is_none() && self.disk_read_limit_bps.is_none()
    }

    /// Refuses a library that fits in memory: the figures would answer another question.
    pub fn check_library(&self, library_bytes: u64) -> anyhow::Result<()> {
        if let Some(mem) = self.memory_limit_bytes {
            if library_bytes < MIN_LIBRARY_OVER_MEMORY.saturating_mul(mem) {
                bail!(
                    "the library ({library_bytes} bytes) must be at least {MIN_LIBRARY_OVER_MEMORY} \
                     times the memory limit ({mem} bytes): add titles or make them longer"
                );
            }
        }
        Ok(())
    }

    /// isnode's block pool within the memory limit: `asked`, or the limit less the
    /// process's headroom when that is smaller.
    pub fn isnode_pool_bytes(&self, asked: u64) -> anyhow::Result<u64> {
        let Some(mem) = self.memory_limit_bytes else {
            return Ok(asked);
        };
        let room = mem
            .checked_sub(ISNODE_HEADROOM_BYTES)
            .filter(|r| *r >= 8 << 20);
        match room {
            Some(room) => Ok(asked.min(room)),
            None => bail!(
                "a memory limit of {mem} bytes leaves no room for isnode's pool beside its \
                 {ISNODE_HEADROOM_BYTES} bytes of headroom: give at least 32 MiB"
            ),
        }
    }

    /// The group a server named `server` runs in, reading titles under `titles_dir`, with
    /// the page cache dropped first so that it starts cold; `None` when nothing is limited.
    pub(crate) fn group_for(
        &self,
        server: &str,
        titles_dir: &Path,
    ) -> anyhow::Result<Option<Cgroup>> {
        if self.is_none() {
            return Ok(None);
        }
        drop_page_cache()?;
        let limits = Limits {
            disk_read_bps: self.disk_read_limit_bps,
            memory_bytes: self.memory_limit_bytes,
        };
        let name = format!("isnode-bench-{}-{server}", std::process::id());
        Cgroup::create(&name, limits, titles_dir)
            .map(Some)
            .with_context(|| format!("the control group of {server}"))
    }
}

/// Writes dirty pages and drops the clean ones, so that the next server reads the disk.
fn drop_page_cache() -> anyhow::Result<()> {
    sync_everything();
    std::fs::write("/proc/sys/vm/drop_caches", "1")
        .context("dropping the page cache (/proc/sys/vm/drop_caches; root is needed)")
}

/// `sync(2)`: dirty pages are not dropped, so they are written first.
fn sync_everything() {
    // SAFETY: sync has no arguments and no preconditions.
    #[allow(unsafe_code)]
    unsafe {
        libc::sync()
    };
}

/// What a confined run ran under, for the report.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ConfinementReport {
    /// The limits.
    pub limits: Confinement,
    /// Bytes of all titles.
    pub library_bytes: u64,
    /// `library_bytes` over the memory limit.
    pub library_over_memory: Option<f64>,
    /// isnode's block pool under the limit.
    pub isnode_pool_bytes: u64,
    /// The cgroup hierarchy used (`v1`, `v2`).
    pub cgroup: String,
    /// Whether isnode's servers admitted sessions against the disk read limit.
    #[serde(default)]
    pub disk_admission: DiskAdmission,
}

/// Whether isnode's servers are told the disk's read rate (`isnode serve --disk-read-bps`),
/// so that admission refuses a session whose reads the disk cannot sustain.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiskAdmission {
    /// Not told: admission knows the bitrate budget and the pool only.
    #[default]
    Off,
    /// Told this share (percent) of the `--disk-read-limit` (× 8, in bits per second), when
    /// one is set.
    AtReadLimit {
        /// Percent of the read limit.
        percent: u32,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_and_pool_rules() {
        let c = Confinement {
            memory_limit_bytes: Some(256 << 20),
            disk_read_limit_bps: None,
        };
        assert!(c.check_library(1 << 30).is_ok());
        assert!(c.check_library((1 << 30) - 1).is_err());
        assert_eq!(c.isnode_pool_bytes(512 << 20).unwrap(), (256 - 24) << 20);
        assert_eq!(c.isnode_pool_bytes(64 << 20).unwrap(), 64 << 20);
        let tiny = Confinement {
            memory_limit_bytes: Some(30 << 20),
            disk_read_limit_bps: None,
        };
        assert!(tiny.isnode_pool_bytes(64 << 20).is_err());
        let none = Confinement::default();
        assert!(none.is_none());
        assert!(none.check_library(1).is_ok());
        assert_eq!(none.isnode_pool_bytes(7).unwrap(), 7);
    }
}
