//! Memory that is a view of a file: an anonymous in-memory file (`memfd`) mapped shared,
//! whose pages a socket can be handed with `sendfile` instead of copied with `writev`.
//!
//! A [`ViewFile`] registers its mapping in a process-wide table; a writer that is given a
//! buffer asks [`view_of`] whether the buffer lies in a view and, if so, sends the same
//! bytes from the file (the mapping and the file share their pages, so the bytes sent are
//! the bytes the buffer shows). The caller keeps a view's bytes unchanged while anything
//! may still read them: pages are filled once, then only removed whole
//! ([`ViewFile::punch`]), never rewritten in place, because a socket that was handed a
//! page keeps reading it (for retransmissions too) after `sendfile` returns.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::RwLock;

/// Bytes of a page: what [`ViewFile::punch`] removes whole.
pub const PAGE_BYTES: usize = 4096;

/// A shared mapping of an in-memory file, registered for [`view_of`] until dropped.
pub struct ViewFile {
    fd: OwnedFd,
    addr: usize,
    len: usize,
}

// SAFETY: the mapping is owned by this value; the bytes in it are shared memory whose
// writes and reads the owner orders (see the module's rules).
unsafe impl Send for ViewFile {}
// SAFETY: as above.
unsafe impl Sync for ViewFile {}

/// The views mapped now: (first address, end address, file), sorted by address.
static VIEWS: RwLock<Vec<(usize, usize, RawFd)>> = RwLock::new(Vec::new());

impl ViewFile {
    /// A new in-memory file of `len` bytes (a whole number of pages), holding no page yet,
    /// mapped shared and registered. `name` shows in `/proc/PID/fd`.
    pub fn new(name: &str, len: usize) -> io::Result<ViewFile> {
        check_len(len)?;
        let cname = std::ffi::CString::new(name).map_err(io::Error::other)?;
        // SAFETY: a valid C string; the returned descriptor is checked and then owned.
        let raw = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC) };
        ViewFile::from_raw(raw, len)
    }

    /// [`ViewFile::new`], the file an unnamed one in directory `dir` (`O_TMPFILE`): on a
    /// tmpfs mounted with `huge=within_size` (or `always`) its pages come as huge pages,
    /// which a `memfd` does not get.
    pub fn new_in(dir: &Path, len: usize) -> io::Result<ViewFile> {
        check_len(len)?;
        let cdir = std::ffi::CString::new(dir.as_os_str().as_bytes()).map_err(io::Error::other)?;
        let flags = libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC;
        // SAFETY: a valid C string; the returned descriptor is checked and then owned.
        let raw = unsafe { libc::open(cdir.as_ptr(), flags, 0o600) };
        ViewFile::from_raw(raw, len)
    }

    /// The view of `raw` (a new descriptor, or -1 with `errno` set), `len` bytes.
    fn from_raw(raw: RawFd, len: usize) -> io::Result<ViewFile> {
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a descriptor just opened and owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let size = libc::off_t::try_from(len).map_err(io::Error::other)?;
        // SAFETY: a valid descriptor.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), size) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new shared mapping of the whole file, checked below.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let view = ViewFile {
            fd,
            addr: addr as usize,
            len,
        };
        register(view.addr, view.len, view.fd.as_raw_fd());
        Ok(view)
    }

    /// Bytes of the file.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the file has no bytes (never: [`ViewFile::new`] refuses it).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The file's bytes `range`, as mapped (zeros where no page is held).
    ///
    /// The caller guarantees that nothing writes or punches these bytes while the slice
    /// lives (the module's rules).
    pub fn bytes(&self, range: std::ops::Range<usize>) -> Option<&[u8]> {
        if range.start > range.end || range.end > self.len {
            return None;
        }
        // SAFETY: within the mapping, which lives as long as `self`.
        Some(unsafe {
            std::slice::from_raw_parts((self.addr + range.start) as *const u8, range.len())
        })
    }

    /// Writes `data` at `offset`: bytes nothing reads yet (a range never written since
    /// it was created or punched). Written with `pwrite`, not through the mapping: the file
    /// takes whole pages at once instead of one page fault per page.
    pub fn write(&self, offset: usize, data: &[u8]) -> io::Result<()> {
        if offset.checked_add(data.len()).is_none_or(|e| e > self.len) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "past the view's end",
            ));
        }
        let mut done = 0;
        // Bounded: each turn writes at least one byte or fails.
        while let Some(rest) = data.get(done..).filter(|r| !r.is_empty()) {
            let at = to_off(offset + done)?;
            // SAFETY: a valid descriptor and a valid buffer of `rest.len()` bytes.
            let n =
                unsafe { libc::pwrite(self.fd.as_raw_fd(), rest.as_ptr().cast(), rest.len(), at) };
            match n {
                n if n > 0 => done += n as usize,
                0 => {
                    return Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "pwrite wrote nothing",
                    ))
                }
                _ => {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::Interrupted {
                        return Err(e);
                    }
                }
            }
        }
        Ok(())
    }

    /// Gives back the pages of `offset..offset + len` (whole pages): they read as zeros
    /// after, and a socket still holding one keeps its own reference to the old page.
    pub fn punch(&self, offset: usize, len: usize) -> io::Result<()> {
        if offset % PAGE_BYTES != 0 || len % PAGE_BYTES != 0 || offset + len > self.len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("punch {offset}+{len}: not whole pages of the view"),
            ));
        }
        let (off, n) = (to_off(offset)?, to_off(len)?);
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        // SAFETY: a valid descriptor; the range was checked.
        if unsafe { libc::fallocate(self.fd.as_raw_fd(), mode, off, n) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Bytes of the largest folio (page group) the kernel may give an in-memory file written
/// with `pwrite`: transparent huge pages of shmem set to `always`, `within_size` or
/// `force` (`/sys/kernel/mm/transparent_hugepage/shmem_enabled` and each size's
/// `hugepages-*kB/shmem_enabled`, `inherit` following the first); [`PAGE_BYTES`] when none
/// is or the settings cannot be read. Ranges given back must be whole folios: a punch
/// through part of a large folio zeroes those bytes in place, under any socket still
/// holding the folio.
pub fn largest_folio_bytes() -> usize {
    let root = std::path::Path::new("/sys/kernel/mm/transparent_hugepage");
    let chosen = |path: &std::path::Path| -> Option<String> {
        let text = std::fs::read_to_string(path).ok()?;
        let start = text.find('[')? + 1;
        let end = start + text.get(start..)?.find(']')?;
        text.get(start..end).map(str::to_string)
    };
    let gives = |v: &str| matches!(v, "always" | "within_size" | "force");
    let top = chosen(&root.join("shmem_enabled")).unwrap_or_default();
    let mut largest = PAGE_BYTES;
    let Ok(sizes) = std::fs::read_dir(root) else {
        return largest;
    };
    for entry in sizes.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(kb) = name
            .strip_prefix("hugepages-")
            .and_then(|n| n.strip_suffix("kB"))
            .and_then(|n| n.parse::<usize>().ok())
        else {
            continue;
        };
        let v = chosen(&entry.path().join("shmem_enabled")).unwrap_or_default();
        let v = if v == "inherit" { top.clone() } else { v };
        if gives(&v) {
            largest = largest.max(kb.saturating_mul(1024));
        }
    }
    largest
}

/// Bytes of a PMD-sized huge page (`hpage_pmd_size`; 2 MiB if it cannot be read): the
/// largest folio a tmpfs file gets.
pub fn huge_page_bytes() -> usize {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size")
        .ok()
        .and_then(|t| t.trim().parse::<usize>().ok())
        .filter(|&b| b >= PAGE_BYTES && b.is_power_of_two())
        .unwrap_or(2 << 20)
}

/// What a tmpfs gives the files made in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TmpfsPages {
    /// Huge pages (mounted with `huge=always` or `huge=within_size`).
    Huge,
    /// Pages only (no `huge=` option, or `never`).
    Small,
}

/// A tmpfs: what pages its files get and how large it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tmpfs {
    /// Huge pages or pages only.
    pub pages: TmpfsPages,
    /// Its size (`size=`), bytes.
    pub size_bytes: u64,
}

/// Whether `dir` is a directory on a tmpfs, what pages its files get and how large it is;
/// an error otherwise (files elsewhere would be written back to a disk).
pub fn tmpfs_of(dir: &Path) -> io::Result<Tmpfs> {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    let path = std::fs::canonicalize(dir)?;
    if !path.is_dir() {
        return Err(io::Error::other(format!(
            "{} is not a directory",
            path.display()
        )));
    }
    let cpath = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(io::Error::other)?;
    // SAFETY: `statfs` is plain data, valid all zeros.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid C string and a `statfs` the kernel fills.
    if unsafe { libc::statfs(cpath.as_ptr(), &mut fs) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if fs.f_type as i64 != TMPFS_MAGIC {
        return Err(io::Error::other(format!(
            "{} is not on a tmpfs",
            path.display()
        )));
    }
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")?;
    let pages = match mount_options(&mountinfo, &path).is_some_and(huge_option) {
        true => TmpfsPages::Huge,
        false => TmpfsPages::Small,
    };
    let size_bytes = (fs.f_blocks as u64).saturating_mul(fs.f_bsize as u64);
    Ok(Tmpfs { pages, size_bytes })
}

/// The super-block options (after ` - TYPE SOURCE `) of the mount of `mountinfo` whose
/// mount point is the longest prefix of `path`.
fn mount_options<'a>(mountinfo: &'a str, path: &Path) -> Option<&'a str> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let point = line.split(' ').nth(4)?;
            let (_, tail) = line.split_once(" - ")?;
            let options = tail.split(' ').nth(2)?;
            path.starts_with(point).then_some((point.len(), options))
        })
        .max_by_key(|(len, _)| *len)
        .map(|(_, options)| options)
}

/// Whether tmpfs options ask for huge pages.
fn huge_option(options: &str) -> bool {
    options
        .split(',')
        .any(|o| o == "huge=always" || o == "huge=within_size")
}

fn check_len(len: usize) -> io::Result<()> {
    if len == 0 || len % PAGE_BYTES != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("a view file of {len} bytes is not a whole number of pages"),
        ));
    }
    Ok(())
}

fn to_off(v: usize) -> io::Result<libc::off_t> {
    libc::off_t::try_from(v).map_err(io::Error::other)
}

impl AsFd for ViewFile {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Drop for ViewFile {
    fn drop(&mut self) {
        unregister(self.addr);
        // SAFETY: the mapping made in `new`, unmapped once; nothing borrows it any more
        // (slices borrow `self`).
        unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len) };
    }
}

fn register(addr: usize, len: usize, fd: RawFd) {
    let mut views = VIEWS.write().unwrap_or_else(|e| e.into_inner());
    let at = views.partition_point(|v| v.0 < addr);
    views.insert(at, (addr, addr + len, fd));
}

fn unregister(addr: usize) {
    let mut views = VIEWS.write().unwrap_or_else(|e| e.into_inner());
    views.retain(|v| v.0 != addr);
}

/// Where `buf` lies in a view: the view's file and the offset of `buf`'s first byte in it;
/// `None` for memory that is not (wholly) in one view.
///
/// The descriptor is valid while whatever keeps `buf`'s memory alive keeps its view alive.
pub fn view_of(buf: &[u8]) -> Option<(RawFd, u64)> {
    let (start, end) = (buf.as_ptr() as usize, buf.as_ptr() as usize + buf.len());
    let views = VIEWS.read().unwrap_or_else(|e| e.into_inner());
    let at = views.partition_point(|v| v.0 <= start).checked_sub(1)?;
    let &(first, last, fd) = views.get(at)?;
    (start >= first && end <= last && !buf.is_empty()).then(|| (fd, (start - first) as u64))
}

/// `sendfile(2)` of `len` bytes of `file` from `offset` into socket `sock` (non-blocking
/// sockets answer `WouldBlock`). Returns the bytes sent.
pub fn sendfile(sock: BorrowedFd<'_>, file: RawFd, offset: u64, len: usize) -> io::Result<usize> {
    let mut off = libc::off_t::try_from(offset).map_err(io::Error::other)?;
    // SAFETY: valid descriptors (the caller's); the kernel writes only `off`.
    let n = unsafe { libc::sendfile(sock.as_raw_fd(), file, &mut off, len) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn the_mount_of_a_path_and_its_huge_option_are_read() {
        let info = "22 1 8:1 / / rw - ext4 /dev/vda rw\n\
                    30 22 0:5 / /run rw - tmpfs tmpfs rw,size=10m\n\
                    31 30 0:6 / /run/m rw - tmpfs tmpfs rw,size=64m,huge=within_size\n";
        let at = |p: &str| mount_options(info, Path::new(p));
        assert_eq!(at("/run/m/x"), Some("rw,size=64m,huge=within_size"));
        assert_eq!(
            at("/run/mx"),
            Some("rw,size=10m"),
            "a prefix of the name is not a parent"
        );
        assert_eq!(at("/var"), Some("rw"));
        assert!(huge_option("rw,huge=always") && !huge_option("rw,huge=never"));
        assert!(tmpfs_of(&std::env::temp_dir().join("no-such-dir")).is_err());
    }

    #[test]
    fn a_view_in_a_directory_holds_its_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let v = ViewFile::new_in(dir.path(), 2 * PAGE_BYTES).unwrap();
        v.write(100, b"mirror").unwrap();
        assert_eq!(v.bytes(100..106).unwrap(), b"mirror");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "unnamed");
    }

    #[test]
    fn a_buffer_in_a_view_is_found_with_its_offset() {
        let v = ViewFile::new("isnode-test", 4 * PAGE_BYTES).unwrap();
        v.write(5000, b"hello").unwrap();
        let b = v.bytes(5000..5005).unwrap();
        assert_eq!(b, b"hello");
        let (fd, off) = view_of(b).unwrap();
        assert_eq!((fd, off), (v.as_fd().as_raw_fd(), 5000));
        assert!(view_of(b"elsewhere").is_none());
        assert!(v.bytes(0..4 * PAGE_BYTES + 1).is_none());
        let addr = b.as_ptr() as usize;
        drop(v);
        // Gone from the table with its mapping.
        let views = VIEWS.read().unwrap();
        assert!(views.iter().all(|x| x.0 > addr || x.1 <= addr));
    }

    #[test]
    fn sendfile_sends_what_the_view_shows_and_punched_pages_read_as_zeros() {
        let v = ViewFile::new("isnode-test", 2 * PAGE_BYTES).unwrap();
        v.write(PAGE_BYTES, &[7u8; PAGE_BYTES]).unwrap();
        let (mut a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let (fd, off) = view_of(v.bytes(PAGE_BYTES..PAGE_BYTES + 100).unwrap()).unwrap();
        assert_eq!(sendfile(b.as_fd(), fd, off, 100).unwrap(), 100);
        let mut got = [0u8; 100];
        a.read_exact(&mut got).unwrap();
        assert_eq!(got, [7u8; 100]);
        v.punch(PAGE_BYTES, PAGE_BYTES).unwrap();
        assert_eq!(v.bytes(PAGE_BYTES..PAGE_BYTES + 4).unwrap(), [0u8; 4]);
        assert!(v.punch(1, PAGE_BYTES).is_err());
        assert!(ViewFile::new("x", 100).is_err());
    }

    #[test]
    fn the_largest_folio_is_a_whole_number_of_pages() {
        let f = largest_folio_bytes();
        assert!(
            f >= PAGE_BYTES && f % PAGE_BYTES == 0 && f.is_power_of_two(),
            "{f}"
        );
    }
}
