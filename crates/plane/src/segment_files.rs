//! One thread's open segment files for the `sendfile` engine (buffered, shared by the
//! thread's sessions of a title, reopened with backoff after a failure), the page-cache
//! read-ahead it asks for, and the per-session connected sockets it sends into.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

use isnode_pool::objects::ObjectInfo;
use isnode_sys::net;

/// Most segment files a thread keeps open (beyond that, the table starts over).
const MAX_OPEN_FILES: usize = 4096;

/// Most blocks a thread remembers having advised (beyond that, it starts over: a block
/// the kernel has evicted since is advised again).
const MAX_ADVISED: usize = 1 << 16;

/// First wait before a segment file that could not be opened is tried again (doubling
/// after each failure, up to [`OPEN_RETRY_MAX`]).
const OPEN_RETRY_FIRST: Duration = Duration::from_millis(100);
/// Longest wait between two tries of a segment file that cannot be opened.
const OPEN_RETRY_MAX: Duration = Duration::from_secs(5);

/// A segment file, open or not (yet).
enum Opened {
    File(File),
    /// The last open failed; tried again from `retry_at`, then after twice `backoff`.
    Failed {
        retry_at: Instant,
        backoff: Duration,
    },
}

/// One thread's open segment files, by (TOI, member). A file that could not be opened
/// (descriptors exhausted for a moment, a member being replaced) is tried again with
/// backoff, not remembered as missing: its member is served degraded only meanwhile.
#[derive(Default)]
pub(crate) struct SegmentFiles {
    files: HashMap<(u32, u32), Opened>,
    /// Blocks (TOI, member, block) whose reading ahead was asked for: each is asked once,
    /// however many sessions pass it (asking again costs a page-cache walk of the block).
    advised: HashSet<(u32, u32, u64)>,
}

impl SegmentFiles {
    /// The segment file of `member` of `obj`, opened (buffered) on first use.
    pub(crate) fn get(&mut self, obj: &ObjectInfo, member: u32) -> Option<&File> {
        let path = obj.seg_paths.get(member as usize)?;
        self.open((obj.rec.toi, member), path, Instant::now())
    }

    /// The file `key` at `path`, opened on first use or once its retry time has come.
    fn open(&mut self, key: (u32, u32), path: &Path, now: Instant) -> Option<&File> {
        if self.files.len() >= MAX_OPEN_FILES && !self.files.contains_key(&key) {
            self.files.clear();
        }
        let slot = self.files.entry(key).or_insert(Opened::Failed {
            retry_at: now,
            backoff: Duration::ZERO,
        });
        if let Opened::Failed { retry_at, backoff } = *slot {
            if now >= retry_at {
                *slot = match File::open(path) {
                    Ok(f) => Opened::File(f),
                    Err(_) => {
                        let backoff = (backoff * 2).clamp(OPEN_RETRY_FIRST, OPEN_RETRY_MAX);
                        Opened::Failed {
                            retry_at: now + backoff,
                            backoff,
                        }
                    }
                };
            }
        }
        match slot {
            Opened::File(f) => Some(f),
            Opened::Failed { .. } => None,
        }
    }

    /// Asks the kernel to start reading block `block` of `member`'s segment file of `obj`
    /// into the page cache (`POSIX_FADV_WILLNEED`: the reads are started, not waited for),
    /// once per block, unless the block is already there ([`resident`]).
    pub(crate) fn advise(&mut self, obj: &ObjectInfo, member: u32, block: u64) {
        if self.advised.len() >= MAX_ADVISED {
            self.advised.clear();
        }
        if !self.advised.insert((obj.rec.toi, member, block)) {
            return;
        }
        let offset = obj.layout.block_offset(block);
        let len = u64::from(obj.layout.params().block_len);
        let Some(file) = self.get(obj, member) else {
            return;
        };
        if resident(file, offset, len) {
            return;
        }
        let (Ok(off), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
            return;
        };
        // SAFETY: an advisory call on an open descriptor; no memory is passed.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), off, len, libc::POSIX_FADV_WILLNEED) };
    }

    /// Closes the files of titles no session of this thread is on.
    pub(crate) fn retain_titles(&mut self, active: impl Fn(u32) -> bool) {
        self.files.retain(|(toi, _), _| active(*toi));
        self.advised.retain(|(toi, _, _)| active(*toi));
    }
}

/// Whether the first and the last byte of the `len` bytes at `offset` of `file` are in the
/// page cache (one-byte reads that may not wait, `RWF_NOWAIT`): a block read ahead is read
/// whole, so both there means the block is. Two such reads cost about 1.5 us; an advice on
/// a resident 1 MiB block walks its 256 pages, about 15 us (measured on the benchmark
/// machine), and was 6.5 % of the server's CPU at 50 streams. A byte past the file's end
/// or any error counts as missing (the block is advised as before).
fn resident(file: &File, offset: u64, len: u64) -> bool {
    let last = offset.saturating_add(len.max(1) - 1);
    cached_byte(file, offset) && cached_byte(file, last)
}

/// Whether the byte at `offset` of `file` is in the page cache (a one-byte `preadv2` with
/// `RWF_NOWAIT`: it fails with `EAGAIN` rather than wait for the disk).
fn cached_byte(file: &File, offset: u64) -> bool {
    let Ok(off) = libc::off_t::try_from(offset) else {
        return false;
    };
    let mut byte = 0u8;
    let iov = libc::iovec {
        iov_base: (&raw mut byte).cast(),
        iov_len: 1,
    };
    // SAFETY: one iovec of one live byte, for the duration of the call; the descriptor is open.
    let n = unsafe { libc::preadv2(file.as_raw_fd(), &iov, 1, off, libc::RWF_NOWAIT) };
    n == 1
}

/// A socket connected to `dest`, segmenting every send into `packet_len`-byte packets.
pub(crate) fn session_socket(
    dest: SocketAddr,
    packet_len: usize,
    multicast: net::Multicast,
) -> std::io::Result<UdpSocket> {
    let sock = net::send_socket(&dest, multicast)?;
    sock.connect(dest)?;
    net::set_gso_size(
        &sock,
        u16::try_from(packet_len).map_err(std::io::Error::other)?,
    )?;
    Ok(sock)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block in the page cache is seen as resident; one past the file's end, or ending
    /// past it, is not (it is advised as before).
    #[test]
    fn residency_of_a_block() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("seg");
        std::fs::write(&path, vec![7u8; 1 << 16]).unwrap();
        let file = File::open(&path).unwrap();
        file.sync_all().unwrap();
        // Just written: in the page cache.
        assert!(resident(&file, 0, 1 << 16));
        assert!(!resident(&file, 1 << 16, 1 << 16), "past the end");
        assert!(!resident(&file, 0, 1 << 17), "its last byte past the end");
    }

    /// A segment file that could not be opened (issue 21: it was remembered as missing, its
    /// member served degraded until the table was cleared) is opened once it can be, after
    /// a bounded backoff; and not retried on every burst meanwhile.
    #[test]
    fn a_failed_open_is_retried_with_backoff() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("seg");
        let mut files = SegmentFiles::default();
        let t0 = Instant::now();
        assert!(files.open((1, 0), &path, t0).is_none());
        std::fs::write(&path, b"blocks").unwrap();
        // Within the first backoff: not tried again.
        assert!(files
            .open((1, 0), &path, t0 + OPEN_RETRY_FIRST / 2)
            .is_none());
        // After it: opened.
        assert!(files.open((1, 0), &path, t0 + OPEN_RETRY_FIRST).is_some());
        // The backoff doubles while the file stays missing, up to its bound.
        let gone = dir.path().join("gone");
        let mut at = t0;
        let mut waits = Vec::new();
        for _ in 0..8 {
            assert!(files.open((2, 0), &gone, at).is_none());
            let Some(Opened::Failed { retry_at, .. }) = files.files.get(&(2, 0)) else {
                panic!("a failed open is recorded");
            };
            waits.push(*retry_at - at);
            at = *retry_at;
        }
        assert_eq!(waits[0], OPEN_RETRY_FIRST);
        assert_eq!(waits[1], OPEN_RETRY_FIRST * 2);
        assert_eq!(*waits.last().unwrap(), OPEN_RETRY_MAX);
    }
}
