//! A tmpfs mounted with huge pages for a server's HTTP mirror (`isnode serve
//! --http-mirror-dir`), unmounted when dropped: `bench load`'s `+huge` engines and the
//! tests of the mirror.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;

/// A tmpfs mounted with `huge=within_size` at a directory of the run's own.
pub struct HugeTmpfs {
    dir: PathBuf,
}

impl HugeTmpfs {
    /// Mounts a tmpfs of `size_bytes` with huge pages at `dir` (made if missing; root is
    /// needed).
    pub fn mount(dir: &Path, size_bytes: u64) -> anyhow::Result<HugeTmpfs> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let options = format!("huge=within_size,size={size_bytes},mode=0700");
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &options, "tmpfs"])
            .arg(dir)
            .output()
            .context("running mount")?;
        anyhow::ensure!(
            out.status.success(),
            "mounting a tmpfs with huge pages at {} (root is needed): {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Ok(HugeTmpfs {
            dir: dir.to_path_buf(),
        })
    }

    /// The mount point.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for HugeTmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        let _ = std::fs::remove_dir(&self.dir);
    }
}
