//! Room for more open descriptors: what a server checks before it adds an object (each
//! keeps its segment files open), so that objects added after the start (uploads, fills)
//! never take the descriptors its API connections and sessions were budgeted at start.

/// The descriptors a server keeps free for what it may still open besides new objects
/// (API connections up to their cap, `sendfile` sessions' sockets, its own overhead), and
/// the descriptors one more object takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DescriptorRoom {
    /// Descriptors kept free for the rest of the server.
    pub reserve: u64,
    /// Descriptors one more object keeps open.
    pub per_object: u64,
}

/// Too few descriptors for one more object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the open files limit ({limit}) leaves no room for another object: {open} open, \
     {per_object} more needed, {reserve} kept for API connections and sessions (raise \
     the limit: LimitNOFILE, ulimit -n)"
)]
pub struct DescriptorShort {
    /// The open files limit.
    pub limit: u64,
    /// Descriptors open now.
    pub open: u64,
    /// What one more object needs.
    pub per_object: u64,
    /// Kept free for the rest of the server.
    pub reserve: u64,
}

impl DescriptorRoom {
    /// Whether one more object fits: checked against the limit and the descriptors open
    /// now (a read of `/proc/self/fd`: for object creations, not per packet). A count that
    /// cannot be made lets the object in.
    pub fn check_one_more(&self) -> Result<(), DescriptorShort> {
        let (Some(limit), Some(open)) = (open_files_limit(), open_descriptors()) else {
            return Ok(());
        };
        self.fits(limit, open)
    }

    /// [`DescriptorRoom::check_one_more`] with the limit and the count given.
    pub fn fits(&self, limit: u64, open: u64) -> Result<(), DescriptorShort> {
        let needed = open
            .saturating_add(self.per_object)
            .saturating_add(self.reserve);
        if needed <= limit {
            return Ok(());
        }
        Err(DescriptorShort {
            limit,
            open,
            per_object: self.per_object,
            reserve: self.reserve,
        })
    }
}

/// The soft open files limit.
pub fn open_files_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit with a valid pointer to an rlimit.
    let r = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    (r == 0).then_some(lim.rlim_cur)
}

/// Descriptors this process has open now.
pub fn open_descriptors() -> Option<u64> {
    Some(std::fs::read_dir("/proc/self/fd").ok()?.count() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_fits_only_beside_the_reserve() {
        let room = DescriptorRoom {
            reserve: 100,
            per_object: 8,
        };
        assert!(room.fits(1000, 892).is_ok());
        let short = room.fits(1000, 893).unwrap_err();
        assert_eq!(short.open, 893);
        assert!(short.to_string().contains("open files limit (1000)"));
        assert!(room.check_one_more().is_ok(), "this test process has room");
        let none = DescriptorRoom {
            reserve: u64::MAX / 2,
            per_object: 8,
        };
        assert!(none.check_one_more().is_err());
    }
}
