//! The FUSE pass-through: every operation goes to the same path under the backing
//! directory; reads go through the fault decision ([`crate::fault`]) first. Files are
//! opened with `FOPEN_DIRECT_IO`, so the kernel keeps none of their data in its page
//! cache: every read of the mount reaches this file system (and its faults).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};

use crate::fault::{apply, decide, Action, ReadReq};
use crate::Control;

/// How long the kernel may keep attributes and entries.
const TTL: Duration = Duration::from_secs(1);
/// Largest read answered (the kernel asks at most `max_read`, 128 KiB by default; bounded
/// again here before sizing a buffer).
const MAX_READ_BYTES: u32 = 1 << 24;

/// Inode numbers of the paths seen so far (relative paths; the root is "").
#[derive(Default)]
struct Inodes {
    by_ino: HashMap<u64, PathBuf>,
    by_path: HashMap<PathBuf, u64>,
    next: u64,
}

impl Inodes {
    fn new() -> Inodes {
        let mut i = Inodes {
            next: 2,
            ..Inodes::default()
        };
        i.by_ino.insert(1, PathBuf::new());
        i.by_path.insert(PathBuf::new(), 1);
        i
    }

    fn ino(&mut self, rel: &Path) -> u64 {
        if let Some(&i) = self.by_path.get(rel) {
            return i;
        }
        let i = self.next;
        self.next += 1;
        self.by_ino.insert(i, rel.to_path_buf());
        self.by_path.insert(rel.to_path_buf(), i);
        i
    }

    /// Moves `from` (and everything under it) to `to`.
    fn rename(&mut self, from: &Path, to: &Path) {
        let moved: Vec<(PathBuf, u64)> = self
            .by_path
            .iter()
            .filter(|(p, _)| p.starts_with(from))
            .map(|(p, &i)| (p.clone(), i))
            .collect();
        if let Some(old) = self.by_path.remove(to) {
            self.by_ino.remove(&old);
        }
        for (p, i) in moved {
            self.by_path.remove(&p);
            let rest = p.strip_prefix(from).unwrap_or(Path::new(""));
            let np = if rest.as_os_str().is_empty() {
                to.to_path_buf()
            } else {
                to.join(rest)
            };
            self.by_ino.insert(i, np.clone());
            self.by_path.insert(np, i);
        }
    }
}

/// The pass-through file system.
pub(crate) struct FaultFs {
    root: PathBuf,
    inodes: Mutex<Inodes>,
    files: Mutex<HashMap<u64, (PathBuf, Arc<File>)>>,
    next_fh: Mutex<u64>,
    control: Arc<Control>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn errno(e: std::io::Error) -> Errno {
    Errno::from(e)
}

fn time(secs: i64, nsecs: i64) -> SystemTime {
    if secs >= 0 {
        UNIX_EPOCH + Duration::new(secs as u64, nsecs.clamp(0, 999_999_999) as u32)
    } else {
        UNIX_EPOCH
    }
}

fn attr(ino: u64, md: &std::fs::Metadata) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: md.len(),
        blocks: md.blocks(),
        atime: time(md.atime(), md.atime_nsec()),
        mtime: time(md.mtime(), md.mtime_nsec()),
        ctime: time(md.ctime(), md.ctime_nsec()),
        crtime: UNIX_EPOCH,
        kind: FileType::from_std(md.file_type()).unwrap_or(FileType::RegularFile),
        perm: (md.mode() & 0o7777) as u16,
        nlink: md.nlink() as u32,
        uid: md.uid(),
        gid: md.gid(),
        rdev: md.rdev() as u32,
        blksize: 4096,
        flags: 0,
    }
}

impl FaultFs {
    pub(crate) fn new(root: PathBuf, control: Arc<Control>) -> FaultFs {
        FaultFs {
            root,
            inodes: Mutex::new(Inodes::new()),
            files: Mutex::new(HashMap::new()),
            next_fh: Mutex::new(1),
            control,
        }
    }

    fn rel(&self, ino: INodeNo) -> Result<PathBuf, Errno> {
        lock(&self.inodes)
            .by_ino
            .get(&ino.0)
            .cloned()
            .ok_or(Errno::ENOENT)
    }

    fn child(&self, parent: INodeNo, name: &OsStr) -> Result<PathBuf, Errno> {
        Ok(self.rel(parent)?.join(name))
    }

    fn entry(&self, rel: &Path, reply: ReplyEntry) {
        match std::fs::symlink_metadata(self.root.join(rel)) {
            Ok(md) => {
                let ino = lock(&self.inodes).ino(rel);
                reply.entry(&TTL, &attr(ino, &md), Generation(0));
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn add_file(&self, rel: PathBuf, file: File) -> u64 {
        let mut n = lock(&self.next_fh);
        let fh = *n;
        *n += 1;
        lock(&self.files).insert(fh, (rel, Arc::new(file)));
        fh
    }

    fn file(&self, fh: FileHandle) -> Result<(PathBuf, Arc<File>), Errno> {
        lock(&self.files).get(&fh.0).cloned().ok_or(Errno::EBADF)
    }

    /// Reads `size` bytes at `offset` of `fh`, through the fault in force.
    fn read_faulty(&self, fh: FileHandle, offset: u64, size: u32) -> Result<Vec<u8>, Errno> {
        let (rel, file) = self.file(fh)?;
        let path = rel.to_string_lossy();
        let size = size.min(MAX_READ_BYTES);
        let action = self.control.decide_read(|plan, rng| {
            decide(
                plan,
                &ReadReq {
                    path: &path,
                    offset,
                    len: size,
                },
                rng,
            )
        });
        match &action {
            Action::Eio => return Err(Errno::EIO),
            Action::Delay(d) => std::thread::sleep(*d),
            _ => {}
        }
        let mut buf = vec![0u8; size as usize];
        let mut got = 0;
        while got < buf.len() {
            match file.read_at(&mut buf[got..], offset + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(errno(e)),
            }
        }
        buf.truncate(got);
        let n = apply(&action, &mut buf);
        buf.truncate(n);
        Ok(buf)
    }
}

impl Filesystem for FaultFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.child(parent, name) {
            Ok(rel) => self.entry(&rel, reply),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let r = self
            .rel(ino)
            .and_then(|rel| std::fs::symlink_metadata(self.root.join(rel)).map_err(errno));
        match r {
            Ok(md) => reply.attr(&TTL, &attr(ino.0, &md)),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let run = || -> Result<std::fs::Metadata, Errno> {
            let path = self.root.join(self.rel(ino)?);
            if let Some(m) = mode {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(m))
                    .map_err(errno)?;
            }
            if let Some(len) = size {
                let f = OpenOptions::new().write(true).open(&path).map_err(errno)?;
                f.set_len(len).map_err(errno)?;
            }
            std::fs::symlink_metadata(&path).map_err(errno)
        };
        match run() {
            Ok(md) => reply.attr(&TTL, &attr(ino.0, &md)),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let rel = match self.child(parent, name) {
            Ok(r) => r,
            Err(e) => return reply.error(e),
        };
        let path = self.root.join(&rel);
        match std::fs::create_dir(&path)
            .and_then(|()| std::fs::set_permissions(&path, PermissionsExt::from_mode(mode)))
        {
            Ok(()) => self.entry(&rel, reply),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self
            .child(parent, name)
            .and_then(|rel| std::fs::remove_file(self.root.join(rel)).map_err(errno))
        {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self
            .child(parent, name)
            .and_then(|rel| std::fs::remove_dir(self.root.join(rel)).map_err(errno))
        {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        _flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let run = || -> Result<(), Errno> {
            let from = self.child(parent, name)?;
            let to = self.child(newparent, newname)?;
            std::fs::rename(self.root.join(&from), self.root.join(&to)).map_err(errno)?;
            lock(&self.inodes).rename(&from, &to);
            Ok(())
        };
        match run() {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let run = || -> Result<u64, Errno> {
            let rel = self.rel(ino)?;
            let file = open_backing(&self.root.join(&rel), flags.0, None)?;
            Ok(self.add_file(rel, file))
        };
        match run() {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let run = || -> Result<(u64, FileAttr), Errno> {
            let rel = self.child(parent, name)?;
            let path = self.root.join(&rel);
            let file = open_backing(&path, flags | libc::O_CREAT, Some(mode))?;
            let md = file.metadata().map_err(errno)?;
            let ino = lock(&self.inodes).ino(&rel);
            Ok((self.add_file(rel, file), attr(ino, &md)))
        };
        match run() {
            Ok((fh, a)) => reply.created(
                &TTL,
                &a,
                Generation(0),
                FileHandle(fh),
                FopenFlags::FOPEN_DIRECT_IO,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match self.read_faulty(fh, offset, size) {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self
            .file(fh)
            .and_then(|(_, f)| f.write_all_at(data, offset).map_err(errno))
        {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        lock(&self.files).remove(&fh.0);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.file(fh).and_then(|(_, f)| f.sync_all().map_err(errno)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let rel = match self.rel(ino) {
            Ok(r) => r,
            Err(e) => return reply.error(e),
        };
        let entries = match std::fs::read_dir(self.root.join(&rel)) {
            Ok(rd) => rd,
            Err(e) => return reply.error(errno(e)),
        };
        let mut list = vec![
            (ino.0, FileType::Directory, ".".into()),
            (ino.0, FileType::Directory, "..".into()),
        ];
        for e in entries.flatten() {
            let kind = e
                .file_type()
                .ok()
                .and_then(FileType::from_std)
                .unwrap_or(FileType::RegularFile);
            let child = lock(&self.inodes).ino(&rel.join(e.file_name()));
            list.push((child, kind, e.file_name()));
        }
        for (i, (child, kind, name)) in list.into_iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(child), (i + 1) as u64, kind, &name) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let Ok(c) = std::ffi::CString::new(self.root.as_os_str().as_encoded_bytes()) else {
            return reply.error(Errno::EINVAL);
        };
        // SAFETY: `c` is a NUL-terminated path; `st` is plain data the call fills.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: as above; the pointers are valid for the call.
        if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
            return reply.error(errno(std::io::Error::last_os_error()));
        }
        reply.statfs(
            st.f_blocks,
            st.f_bfree,
            st.f_bavail,
            st.f_files,
            st.f_ffree,
            st.f_bsize as u32,
            st.f_namemax as u32,
            st.f_frsize as u32,
        );
    }
}

/// Opens the backing file at `path` with the access mode and the creation and truncation
/// flags of `flags` (never `O_DIRECT`: the backing file system may refuse it, and the
/// mount's own files bypass the page cache already).
fn open_backing(path: &Path, flags: i32, mode: Option<u32>) -> Result<File, Errno> {
    let mut o = OpenOptions::new();
    match flags & libc::O_ACCMODE {
        libc::O_WRONLY => o.write(true),
        libc::O_RDWR => o.read(true).write(true),
        _ => o.read(true),
    };
    if flags & libc::O_CREAT != 0 {
        o.create(true);
        if flags & libc::O_EXCL != 0 {
            o.create_new(true);
        }
    }
    if flags & libc::O_TRUNC != 0 {
        o.truncate(true);
    }
    if flags & libc::O_APPEND != 0 {
        o.append(true);
    }
    if let Some(m) = mode {
        o.mode(m);
    }
    o.open(path).map_err(errno)
}
