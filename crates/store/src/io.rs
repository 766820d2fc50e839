//! Aligned buffers and direct (page-cache bypassing) file I/O with a buffered fallback.
//!
//! The only `unsafe` of the store lives here: mapping a zeroed buffer with the
//! 4096-byte alignment that O_DIRECT requires.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::ptr::NonNull;

use crate::params::DIRECT_IO_ALIGN;

/// An anonymous memory mapping aligned to [`DIRECT_IO_ALIGN`] (a page), zeroed at
/// allocation. Its pages become resident when first touched (a large pool that is never
/// used costs address space, not memory).
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only give out &[u8].
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// Allocates `len` zeroed bytes (`len` > 0, a multiple of the alignment).
    pub fn new(len: usize) -> AlignedBuf {
        assert!(
            len > 0 && len % DIRECT_IO_ALIGN == 0,
            "aligned buffer of {len} bytes"
        );
        // SAFETY: a new private anonymous mapping of `len` (> 0) bytes; no existing memory
        // is touched. The kernel returns page-aligned, zero-filled memory.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert!(
            raw != libc::MAP_FAILED,
            "mapping {len} bytes: {}",
            io::Error::last_os_error()
        );
        let ptr = NonNull::new(raw.cast::<u8>()).expect("mmap returned a null mapping");
        assert_eq!(
            ptr.as_ptr() as usize % DIRECT_IO_ALIGN,
            0,
            "mmap is page-aligned"
        );
        AlignedBuf { ptr, len }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a buffer has at least one page.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Sets every byte to zero.
    pub fn zero(&mut self) {
        self.as_mut_slice().fill(0);
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr points to len initialised bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes, mutable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: ptr points to len initialised bytes owned exclusively by self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: the mapping made in new() with this length, unmapped once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.len)
    }
}

/// A file opened for block I/O, with O_DIRECT where the file system allows it.
#[derive(Debug)]
pub struct BlockFile {
    file: File,
    direct: bool,
}

impl BlockFile {
    /// Opens an existing file for reading.
    pub fn open_read(path: &Path) -> io::Result<BlockFile> {
        Self::open(path, OpenOptions::new().read(true))
    }

    /// Opens an existing file for reading in order through the page cache (sequential
    /// read-ahead advised), as `cat` reads: for whole-object reads, not the data plane.
    pub fn open_read_sequential(path: &Path) -> io::Result<BlockFile> {
        let file = File::open(path)?;
        // Advice only: a file system that ignores it reads the same bytes.
        // SAFETY: fadvise on an open descriptor with no memory arguments.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_SEQUENTIAL) };
        Ok(BlockFile {
            file,
            direct: false,
        })
    }

    /// Creates (truncating) a file for writing.
    pub fn create(path: &Path) -> io::Result<BlockFile> {
        Self::open(
            path,
            OpenOptions::new().write(true).create(true).truncate(true),
        )
    }

    /// Opens a file for writing blocks in place: created if missing, never truncated.
    pub fn open_write(path: &Path) -> io::Result<BlockFile> {
        Self::open(
            path,
            OpenOptions::new().write(true).create(true).truncate(false),
        )
    }

    fn open(path: &Path, opts: &OpenOptions) -> io::Result<BlockFile> {
        if std::env::var_os("ISNODE_BUFFERED_IO").is_none() {
            let mut direct = opts.clone();
            direct.custom_flags(libc::O_DIRECT);
            match direct.open(path) {
                Ok(file) => return Ok(BlockFile { file, direct: true }),
                // tmpfs and some others refuse O_DIRECT: fall back to the page cache.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(BlockFile {
            file: opts.open(path)?,
            direct: false,
        })
    }

    /// True when the page cache is bypassed.
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// Reads a whole block at `offset` into `buf`; a short file is an error.
    pub fn read_block(&self, buf: &mut AlignedBuf, offset: u64) -> io::Result<()> {
        self.read_block_into(buf.as_mut_slice(), offset)
    }

    /// Reads `buf.len()` bytes at `offset` into `buf` (aligned memory of a multiple of
    /// [`DIRECT_IO_ALIGN`] bytes when the file is direct, such as a slot of the server's
    /// pool); a short file is an error.
    pub fn read_block_into(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        debug_assert!(
            !self.direct
                || (buf.as_ptr() as usize % DIRECT_IO_ALIGN == 0
                    && buf.len() % DIRECT_IO_ALIGN == 0),
            "a direct read into unaligned memory"
        );
        self.file.read_exact_at(buf, offset)
    }

    /// Writes a whole block at `offset`.
    pub fn write_block(&self, buf: &AlignedBuf, offset: u64) -> io::Result<()> {
        self.file.write_all_at(buf.as_slice(), offset)
    }

    /// Flushes data and metadata to stable storage.
    pub fn sync(&self) -> io::Result<()> {
        self.file.sync_all()
    }

    /// Length of the file in bytes.
    pub fn size_bytes(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }
}

impl std::os::fd::AsRawFd for BlockFile {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.file.as_raw_fd()
    }
}

/// Flushes a directory entry list (after create, rename, unlink) to stable storage.
pub fn sync_dir(path: &Path) -> io::Result<()> {
    File::open(path)?.sync_all()
}

/// Bytes an unprivileged writer may still use on the file system holding `path`.
// The statvfs field types differ between targets (u32 on some, u64 here).
#[allow(clippy::useless_conversion)]
pub fn free_bytes(path: &Path) -> io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    // SAFETY: a zeroed statvfs is a valid out-parameter.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: statvfs with a valid NUL-terminated path and a valid out-pointer.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(u64::from(st.f_bavail).saturating_mul(u64::from(st.f_frsize)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_zeroed() {
        let mut b = AlignedBuf::new(8192);
        assert_eq!(b.as_slice().as_ptr() as usize % DIRECT_IO_ALIGN, 0);
        assert!(b.as_slice().iter().all(|&x| x == 0));
        b.as_mut_slice()[5] = 7;
        b.zero();
        assert_eq!(b.as_slice()[5], 0);
    }

    #[test]
    fn block_roundtrip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut b = AlignedBuf::new(4096);
        b.as_mut_slice()[..3].copy_from_slice(b"abc");
        let f = BlockFile::create(&path).unwrap();
        f.write_block(&b, 4096).unwrap();
        f.sync().unwrap();
        let r = BlockFile::open_read(&path).unwrap();
        let mut c = AlignedBuf::new(4096);
        r.read_block(&mut c, 4096).unwrap();
        assert_eq!(&c.as_slice()[..3], b"abc");
        assert!(r.read_block(&mut c, 8192).is_err());
    }
}
