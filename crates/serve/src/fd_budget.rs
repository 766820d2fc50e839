//! The descriptor budget, reserved at start: the data plane's needs (the segment files of
//! every object, kept open; its threads' rings and sockets; a spare for sessions and
//! objects added later; with the `sendfile` engine, a connected socket per session) come
//! first, and the control API's connection cap is what is left.
//! A server whose open files limit cannot hold the data plane's needs and a minimum of
//! API connections refuses to start.

use isnode_sys::fds::DescriptorRoom;

/// Descriptors each data-plane thread may hold besides segment files (io_uring rings,
/// send sockets, wake-ups).
pub(crate) const PER_THREAD_FDS: u64 = 8;
/// Spare descriptors of the data plane: objects ingested after the start, the sockets of
/// broadcasts, the keepalive socket, the catalog.
pub(crate) const DATA_PLANE_SPARE_FDS: u64 = 256;
/// Descriptors of the control API besides its connections (listener, runtime, catalog
/// lookups on the blocking pool).
pub(crate) const API_OVERHEAD_FDS: u64 = 32;
/// Fewest API connections a server starts with.
pub(crate) const MIN_API_CONNECTIONS: u64 = 16;
/// Most `sendfile` sessions by default (fewer if the open files limit leaves fewer: half
/// of what the data plane's other needs leave, the other half for API connections).
pub const DEFAULT_MAX_SENDFILE_SESSIONS: u64 = 4096;

/// What the budget is computed from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FdNeeds {
    /// The open files limit (soft, after raising it to the hard limit).
    pub limit: u64,
    /// Descriptors open now.
    pub in_use: u64,
    /// Objects in the catalog at start.
    pub objects: u64,
    /// Members of the volume.
    pub members: u64,
    /// Data-plane threads.
    pub threads: u64,
    /// Whether each thread keeps its own (buffered) copy of the segment files.
    pub per_thread_files: PerThreadFiles,
    /// Sockets of sessions (`sendfile`: one connected socket per session; 0 otherwise).
    pub session_sockets: u64,
}

/// Whether the engine keeps per-thread segment files besides the shared ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PerThreadFiles {
    /// Only the objects' shared files (every engine but `sendfile`).
    No,
    /// Each thread also keeps buffered copies (`sendfile`).
    Yes,
}

impl FdNeeds {
    /// Descriptors reserved for the data plane.
    pub(crate) fn data_plane(&self) -> u64 {
        let copies = match self.per_thread_files {
            PerThreadFiles::No => 1,
            PerThreadFiles::Yes => 1 + self.threads,
        };
        self.objects
            .saturating_mul(self.members)
            .saturating_mul(copies)
            .saturating_add(self.threads.saturating_mul(PER_THREAD_FDS))
            .saturating_add(DATA_PLANE_SPARE_FDS)
            .saturating_add(self.session_sockets)
    }

    /// The sessions the `sendfile` engine may hold a socket for: `asked`, or by default
    /// half of what the rest of the data plane and the API's minimum leave (at most
    /// [`DEFAULT_MAX_SENDFILE_SESSIONS`]). The caller puts it in `session_sockets`.
    pub(crate) fn sendfile_sessions(&self, asked: Option<u64>) -> u64 {
        let without = FdNeeds {
            session_sockets: 0,
            ..*self
        };
        asked.unwrap_or_else(|| {
            let reserved = self
                .in_use
                .saturating_add(without.data_plane())
                .saturating_add(API_OVERHEAD_FDS)
                .saturating_add(MIN_API_CONNECTIONS);
            (self.limit.saturating_sub(reserved) / 2).min(DEFAULT_MAX_SENDFILE_SESSIONS)
        })
    }

    /// What objects added after the start may take: one more object keeps its segment
    /// files open (per thread too with `sendfile`), and the API's `max_connections`, the
    /// sessions' sockets and the overhead stay free. The data plane's spare is theirs.
    pub(crate) fn room_for_objects(&self, max_connections: usize) -> DescriptorRoom {
        let copies = match self.per_thread_files {
            PerThreadFiles::No => 1,
            PerThreadFiles::Yes => 1 + self.threads,
        };
        DescriptorRoom {
            reserve: (max_connections as u64)
                .saturating_add(self.session_sockets)
                .saturating_add(API_OVERHEAD_FDS)
                .saturating_add(self.threads.saturating_mul(PER_THREAD_FDS)),
            per_object: self.members.saturating_mul(copies),
        }
    }

    /// The API connection cap: `asked` (or [`isnode_serve_config::DEFAULT_API_MAX_CONNECTIONS`]) if the
    /// descriptors left after the data plane's reserve allow it; the error says why not.
    pub(crate) fn api_connections(&self, asked: Option<usize>) -> Result<usize, String> {
        let reserved = self
            .in_use
            .saturating_add(self.data_plane())
            .saturating_add(API_OVERHEAD_FDS);
        let left = self.limit.saturating_sub(reserved);
        let need = reserved.saturating_add(MIN_API_CONNECTIONS);
        if left < MIN_API_CONNECTIONS {
            return Err(format!(
                "the open files limit ({}) cannot hold the data plane's {} descriptors \
                 ({} objects x {} members kept open, {} threads, {} spare, {} session \
                 sockets), the {} in use and {MIN_API_CONNECTIONS} API connections: raise \
                 it to at least {need} (ulimit -n)",
                self.limit,
                self.data_plane(),
                self.objects,
                self.members,
                self.threads,
                DATA_PLANE_SPARE_FDS,
                self.session_sockets,
                self.in_use,
            ));
        }
        let left = usize::try_from(left).unwrap_or(usize::MAX);
        match asked {
            None => Ok(left.min(isnode_serve_config::DEFAULT_API_MAX_CONNECTIONS)),
            Some(0) => Err("--api-max-connections must be at least 1".into()),
            Some(n) if n <= left => Ok(n),
            Some(n) => Err(format!(
                "--api-max-connections {n}: the open files limit ({}) leaves {left} \
                 descriptors for API connections after the data plane's {}; raise it \
                 (ulimit -n) or ask for fewer",
                self.limit,
                self.data_plane()
            )),
        }
    }
}

/// Raises the soft limit of open descriptors to the hard limit and returns it.
pub(crate) fn raise_open_files_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to an rlimit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 1024;
        }
        if lim.rlim_cur < lim.rlim_max {
            let old = lim.rlim_cur;
            let mut raised = lim;
            raised.rlim_cur = lim.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                tracing::debug!("open files limit raised from {old} to {}", lim.rlim_max);
                lim = raised;
            }
        }
    }
    lim.rlim_cur
}

/// Descriptors this process has open now.
pub(crate) fn open_descriptors() -> std::io::Result<u64> {
    Ok(std::fs::read_dir("/proc/self/fd")?.count() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn needs(limit: u64) -> FdNeeds {
        FdNeeds {
            limit,
            in_use: 20,
            objects: 10,
            members: 8,
            threads: 2,
            per_thread_files: PerThreadFiles::No,
            session_sockets: 0,
        }
    }

    #[test]
    fn the_cap_is_what_the_data_plane_leaves() {
        let n = needs(1024);
        assert_eq!(n.data_plane(), 80 + 16 + DATA_PLANE_SPARE_FDS);
        let left = 1024 - 20 - n.data_plane() - API_OVERHEAD_FDS;
        assert_eq!(n.api_connections(None), Ok(left as usize));
        assert_eq!(n.api_connections(Some(100)), Ok(100));
        let e = n.api_connections(Some(left as usize + 1)).unwrap_err();
        assert!(e.contains("--api-max-connections"), "{e}");
        // A large limit: the default cap.
        assert_eq!(
            needs(1 << 20).api_connections(None),
            Ok(isnode_serve_config::DEFAULT_API_MAX_CONNECTIONS)
        );
    }

    #[test]
    fn a_limit_that_cannot_hold_the_data_plane_refuses_to_start() {
        let mut n = needs(1024);
        n.objects = 100;
        n.per_thread_files = PerThreadFiles::Yes;
        let e = n.api_connections(None).unwrap_err();
        assert!(e.contains("raise it to at least"), "{e}");
        assert!(e.contains("100 objects x 8 members"), "{e}");
    }

    /// The `sendfile` engine's session sockets are in the budget (issue 21: they were not,
    /// and past about 256 sessions with the API at its cap socket creation failed).
    #[test]
    fn sendfile_session_sockets_are_reserved() {
        let mut n = needs(1 << 16);
        n.per_thread_files = PerThreadFiles::Yes;
        let sessions = n.sendfile_sessions(None);
        assert_eq!(sessions, DEFAULT_MAX_SENDFILE_SESSIONS);
        n.session_sockets = sessions;
        let api = n.api_connections(None).unwrap() as u64;
        let total = n.in_use + n.data_plane() + API_OVERHEAD_FDS + api;
        assert!(
            total <= n.limit,
            "{total} descriptors under a limit of {}",
            n.limit
        );
        assert!(n.data_plane() >= sessions + DATA_PLANE_SPARE_FDS);
        // A small limit: half of what is left each.
        let mut small = needs(2048);
        let s = small.sendfile_sessions(None);
        assert!(s > 0 && s < 1024, "{s}");
        small.session_sockets = s;
        let api = small.api_connections(None).unwrap() as u64;
        assert!(api >= s, "{api} API connections, {s} sessions");
        assert!(small.in_use + small.data_plane() + API_OVERHEAD_FDS + api <= 2048);
        // Asked for: as asked (and too many refuse to start).
        assert_eq!(small.sendfile_sessions(Some(100)), 100);
        small.session_sockets = 5000;
        let e = small.api_connections(None).unwrap_err();
        assert!(e.contains("5000 session sockets"), "{e}");
    }
}
