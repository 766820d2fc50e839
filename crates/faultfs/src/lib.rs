//! A fault-injecting FUSE file system for isnode's tests.
//!
//! [`FaultMount::mount`] mounts a pass-through of a backing directory (a volume member's
//! directory, say) from a thread of the calling process. Switched at run time with
//! [`FaultMount::set`], its reads fail with `EIO` (all, or a byte range of one file), are
//! delayed (a slow disk), come back short, or come back with flipped bits: faults that
//! reach the program under test from a real kernel, through `read(2)`, `pread(2)` or
//! io_uring alike. Files are opened `direct_io`, so the kernel's page cache never hides
//! a fault. Randomness (short lengths, flipped bits) comes from a seeded PRNG; the
//! decision itself is a pure function ([`fault::decide`]), tested on its own.
//!
//! Mounting needs `/dev/fuse` and either root (the `mount(2)` call) or Debian's `fuse3`
//! (`fusermount3`); [`MountError`] says which is missing.

pub mod fault;
mod fs;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use fault::{Action, Plan, SplitMix64};

/// FUSE worker threads: a delayed read does not hold up the others (a slow disk with a
/// queue, not a stalled one).
const FUSE_THREADS: usize = 8;

/// Why a mount failed.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    /// The backing directory or the mount point is not a directory.
    #[error("{0}: not a directory")]
    NotADirectory(PathBuf),
    /// The kernel or the system refused the mount.
    #[error(
        "mounting the fault file system on {mountpoint} failed: {source} \
         (needs /dev/fuse, and root or Debian's fuse3 package for fusermount3: \
         apt-get install fuse3)"
    )]
    Mount {
        /// Where it was to be mounted.
        mountpoint: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// Reads seen and faults injected since the mount.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Reads answered (or failed) by the file system.
    pub reads: u64,
    /// Reads failed with `EIO`.
    pub eio: u64,
    /// Reads delayed.
    pub delayed: u64,
    /// Reads answered short.
    pub short: u64,
    /// Reads answered with flipped bits.
    pub flipped: u64,
}

/// The plan in force and its PRNG, shared by the file system's threads and the test.
pub(crate) struct Control {
    state: Mutex<(Plan, SplitMix64)>,
    reads: AtomicU64,
    eio: AtomicU64,
    delayed: AtomicU64,
    short: AtomicU64,
    flipped: AtomicU64,
}

impl Control {
    fn new(seed: u64) -> Control {
        Control {
            state: Mutex::new((Plan::pass(), SplitMix64::new(seed))),
            reads: AtomicU64::new(0),
            eio: AtomicU64::new(0),
            delayed: AtomicU64::new(0),
            short: AtomicU64::new(0),
            flipped: AtomicU64::new(0),
        }
    }

    /// Decides one read with `f` under the plan in force, and counts it.
    pub(crate) fn decide_read(&self, f: impl FnOnce(&Plan, &mut SplitMix64) -> Action) -> Action {
        let action = {
            let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let (plan, rng) = &mut *st;
            f(plan, rng)
        };
        self.reads.fetch_add(1, Ordering::Relaxed);
        let counter = match action {
            Action::Pass => None,
            Action::Eio => Some(&self.eio),
            Action::Delay(_) => Some(&self.delayed),
            Action::Short(_) => Some(&self.short),
            Action::Flip(_) => Some(&self.flipped),
        };
        if let Some(c) = counter {
            c.fetch_add(1, Ordering::Relaxed);
        }
        action
    }
}

/// A mounted fault file system; unmounted when dropped.
pub struct FaultMount {
    control: Arc<Control>,
    mountpoint: PathBuf,
    session: Option<fuser::BackgroundSession>,
}

impl FaultMount {
    /// Mounts a pass-through of `backing` on `mountpoint` (both existing directories),
    /// with no fault in force; `seed` seeds the PRNG of the faults.
    pub fn mount(backing: &Path, mountpoint: &Path, seed: u64) -> Result<FaultMount, MountError> {
        for d in [backing, mountpoint] {
            if !d.is_dir() {
                return Err(MountError::NotADirectory(d.to_path_buf()));
            }
        }
        let backing = backing
            .canonicalize()
            .map_err(|_| MountError::NotADirectory(backing.to_path_buf()))?;
        let control = Arc::new(Control::new(seed));
        let fs = fs::FaultFs::new(backing, control.clone());
        let mut config = fuser::Config::default();
        config.mount_options = vec![
            fuser::MountOption::FSName("isnode-faultfs".into()),
            fuser::MountOption::Subtype("isnode-faultfs".into()),
            fuser::MountOption::NoAtime,
        ];
        config.n_threads = Some(FUSE_THREADS);
        let session =
            fuser::spawn_mount(fs, mountpoint, &config).map_err(|source| MountError::Mount {
                mountpoint: mountpoint.to_path_buf(),
                source,
            })?;
        Ok(FaultMount {
            control,
            mountpoint: mountpoint.to_path_buf(),
            session: Some(session),
        })
    }

    /// Puts `plan` in force for the reads from now on.
    pub fn set(&self, plan: Plan) {
        let mut st = self.control.state.lock().unwrap_or_else(|e| e.into_inner());
        st.0 = plan;
    }

    /// Reads seen and faults injected so far.
    pub fn stats(&self) -> FaultStats {
        let c = &self.control;
        FaultStats {
            reads: c.reads.load(Ordering::Relaxed),
            eio: c.eio.load(Ordering::Relaxed),
            delayed: c.delayed.load(Ordering::Relaxed),
            short: c.short.load(Ordering::Relaxed),
            flipped: c.flipped.load(Ordering::Relaxed),
        }
    }

    /// Where it is mounted.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Unmounts now (also done on drop), saying why if the kernel refuses.
    pub fn unmount(mut self) -> std::io::Result<()> {
        match self.session.take() {
            Some(s) => s.umount_and_join(),
            None => Ok(()),
        }
    }
}

impl Drop for FaultMount {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            // Nothing to report to from a drop; `unmount` reports.
            let _ = s.umount_and_join();
        }
    }
}
