//! File locks (flock) that order ingests, recovery and repair between processes.

use std::fs::{self, File, OpenOptions};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use crate::StoreError;

/// The flock a repair holds (`DIR/repair.lock`): taken by a member rebuild and by
/// `volume check --repair`, tried by recovery at open to leave their `.rebuild` files alone.
pub(crate) const REPAIR_LOCK_FILE: &str = "repair.lock";

/// Whether taking a lock waits for its holder to release it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LockWait {
    /// Wait until the lock is free.
    Block,
    /// Return at once if another holder has it.
    Try,
}

/// An flock on a file, released on drop (and by the kernel if the process dies).
#[derive(Debug)]
pub(crate) struct FileLock {
    file: File,
    path: PathBuf,
}

impl FileLock {
    /// Takes an exclusive lock; `Ok(None)` if another holder has it and `wait` is
    /// [`LockWait::Try`]. With [`LockWait::Block`] the result is never `Ok(None)`.
    pub(crate) fn exclusive(path: &Path, wait: LockWait) -> Result<Option<FileLock>, StoreError> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(StoreError::io(format!(
                "opening lock file {}",
                path.display()
            )))?;
        let op = match wait {
            LockWait::Block => libc::LOCK_EX,
            LockWait::Try => libc::LOCK_EX | libc::LOCK_NB,
        };
        // SAFETY: flock on a valid open descriptor.
        let rc = unsafe { libc::flock(file.as_raw_fd(), op) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
                return Ok(None);
            }
            return Err(StoreError::Io {
                context: format!("locking {}", path.display()),
                source: err,
            });
        }
        Ok(Some(FileLock {
            file,
            path: path.to_path_buf(),
        }))
    }

    /// Releases the lock and removes the lock file.
    pub(crate) fn remove(self) {
        let _ = fs::remove_file(&self.path);
        drop(self.file);
    }
}
