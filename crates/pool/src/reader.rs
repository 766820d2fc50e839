//! Filling the block pool: each data-plane thread owns a [`Reader`] that reads whole
//! blocks into pool slots, either asynchronously through its own io_uring
//! (`READ_FIXED` into the registered pool buffers, O_DIRECT; a plain `READ` into the slot
//! where registration is refused) while the thread keeps serving its other sessions, or
//! synchronously with `pread` (the fallback, and `--read-io sync`).
//!
//! The cache's state machine stays sans-IO ([`Cache::begin`] / [`Cache::finish`]): a slot
//! being read is `Loading` (never evicted, never handed out) and owned by its [`Load`],
//! which this module keeps, together with the open file, until the kernel's completion.

use std::collections::HashMap;
use std::io;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use io_uring::{opcode, types, IoUring};
use isnode_store::io::BlockFile;
use isnode_store::BlockError;

use crate::cache::{BlockKey, Cache, Demand, FetchError, Load, Lookup, Pinned};
use crate::objects::ObjectInfo;
use isnode_serve_config::ReadIo;

/// Reads in flight per thread at most (the fixed submission depth).
pub const QUEUE_DEPTH: usize = 32;
/// Submission ring entries (more than the depth: a push never finds the ring full).
const RING_ENTRIES: u32 = 2 * QUEUE_DEPTH as u32;
/// True if this kernel lets us create a ring that supports `READ_FIXED` and `READ`.
pub fn available() -> bool {
    crate::uring_probe::supports(&[opcode::ReadFixed::CODE, opcode::Read::CODE])
}

/// Where the blocks of an object are on disk.
pub trait SegmentFiles {
    /// Path of the segment file holding `key` (for messages).
    fn segment_path(&self, key: &BlockKey) -> PathBuf;
    /// The open segment file holding `key` (opened once and kept: a read never opens a
    /// file), or why it could not be opened.
    fn segment_file(&self, key: &BlockKey) -> Result<Arc<BlockFile>, String>;
    /// Byte offset of `key`'s block in its segment file.
    fn block_offset(&self, key: &BlockKey) -> u64;
    /// Expected CRC32C of the whole block, if the catalog has it.
    fn block_crc32c(&self, key: &BlockKey) -> Option<u32>;
}

impl SegmentFiles for ObjectInfo {
    fn segment_path(&self, key: &BlockKey) -> PathBuf {
        self.seg_paths
            .get(key.member as usize)
            .cloned()
            .unwrap_or_default()
    }

    fn segment_file(&self, key: &BlockKey) -> Result<Arc<BlockFile>, String> {
        match self.seg_files.get(key.member as usize) {
            Some(f) => f.read().unwrap_or_else(|e| e.into_inner()).clone(),
            None => Err(format!("no member {}", key.member)),
        }
    }

    fn block_offset(&self, key: &BlockKey) -> u64 {
        self.layout.block_offset(key.block)
    }

    fn block_crc32c(&self, key: &BlockKey) -> Option<u32> {
        self.block_crcs
            .get(key.member as usize)?
            .get(key.block as usize)
            .copied()
            .flatten()
    }
}

/// What [`Reader::prefetch`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Prefetch {
    /// In memory, being read (here or elsewhere), or known unreadable: nothing to do.
    Done,
    /// A read was started (asynchronous) or done (synchronous).
    Started,
    /// No room now (read queue or pool full): try again later.
    NoRoom,
}

/// Called with every block whose read failed (I/O error or checksum mismatch).
pub type OnFail = Box<dyn FnMut(&BlockKey, &str) + Send>;
/// Called with every block read that succeeded, with the time it took.
pub type OnOk = Box<dyn FnMut(&BlockKey, Duration) + Send>;

/// One block read: where from, and what it must hash to.
struct BlockRead {
    file: Result<Arc<BlockFile>, String>,
    offset: u64,
    crc32c: Option<u32>,
    /// File and block, for messages.
    ctx: String,
}

impl BlockRead {
    fn of(key: &BlockKey, files: &dyn SegmentFiles) -> BlockRead {
        let path = files.segment_path(key);
        BlockRead {
            ctx: format!("{}: block {}", path.display(), key.block),
            offset: files.block_offset(key),
            crc32c: files.block_crc32c(key),
            file: files.segment_file(key),
        }
    }
}

struct Pending {
    load: Load,
    /// When the read was queued.
    started: Instant,
    /// Keeps the descriptor open until the completion (even if the object is dropped).
    file: Arc<BlockFile>,
    read: BlockRead,
}

/// One thread's io_uring block reads.
struct UringReads {
    ring: IoUring,
    /// Slots `0..registered` are registered buffers (READ_FIXED); others use READ.
    registered: usize,
    block_len: usize,
    /// By pool slot (the `user_data` of the read): at most [`QUEUE_DEPTH`].
    inflight: HashMap<u32, Pending>,
    /// Pushed but not yet submitted.
    unsubmitted: bool,
    /// Keeps the pool (registered and read into) alive as long as the ring (declared
    /// after it: dropped after).
    cache: Cache,
}

/// Reads blocks into the pool for one data-plane thread. Never waits for a read: a block
/// being read answers [`FetchError::Busy`] and the caller comes back later (only the
/// synchronous `pread` of `--read-io sync` blocks, for the time of one read).
pub struct Reader {
    cache: Cache,
    uring: Option<UringReads>,
    on_fail: OnFail,
    on_ok: Option<OnOk>,
}

static LOGGED_REGISTER: AtomicBool = AtomicBool::new(false);
static LOGGED_SETUP: AtomicBool = AtomicBool::new(false);

impl Reader {
    /// A reader of `io` kind; `Uring` falls back to synchronous reads (logged once) if the
    /// ring cannot be set up.
    pub fn new(cache: &Cache, io: ReadIo, on_fail: OnFail) -> Reader {
        let uring = match io {
            ReadIo::Sync => None,
            ReadIo::Uring => match UringReads::new(cache) {
                Ok(u) => Some(u),
                Err(e) => {
                    if !LOGGED_SETUP.swap(true, Ordering::Relaxed) {
                        tracing::warn!(
                            "io_uring block reads unavailable ({e}): reading with pread"
                        );
                    }
                    None
                }
            },
        };
        Reader {
            cache: cache.clone(),
            uring,
            on_fail,
            on_ok: None,
        }
    }

    /// This reader, calling `f` with every successful read and its latency.
    pub fn on_ok(mut self, f: OnOk) -> Reader {
        self.on_ok = Some(f);
        self
    }

    /// Reads of `member` this reader has in flight.
    pub fn in_flight_of(&self, member: u32) -> usize {
        self.uring.as_ref().map_or(0, |u| {
            u.inflight
                .values()
                .filter(|p| p.load.key().member == member)
                .count()
        })
    }

    /// The kind of reads this reader does.
    pub fn kind(&self) -> ReadIo {
        if self.uring.is_some() {
            ReadIo::Uring
        } else {
            ReadIo::Sync
        }
    }

    /// Reads in flight.
    pub fn in_flight(&self) -> usize {
        self.uring.as_ref().map_or(0, |u| u.inflight.len())
    }

    /// How many more reads may start now (synchronous: unbounded; the caller bounds).
    pub fn room(&self) -> usize {
        self.uring
            .as_ref()
            .map_or(usize::MAX, |u| QUEUE_DEPTH - u.inflight.len())
    }

    /// Starts reading `key` unless it is in memory, being read, or known bad; never
    /// waits (a synchronous reader reads it now). It evicts only a block needed later
    /// than `key` ([`Cache::begin_ahead`]): otherwise [`Prefetch::NoRoom`].
    pub fn prefetch(
        &mut self,
        key: BlockKey,
        files: &dyn SegmentFiles,
        demand: &dyn Demand,
    ) -> Prefetch {
        if self.room() == 0 {
            return Prefetch::NoRoom;
        }
        match self.cache.begin_ahead(key, demand) {
            Ok(Lookup::Ready(_)) | Ok(Lookup::Loading) | Err(FetchError::Unavailable(_)) => {
                Prefetch::Done
            }
            Err(_) => Prefetch::NoRoom,
            Ok(Lookup::Load(load)) => {
                self.start(load, files);
                Prefetch::Started
            }
        }
    }

    /// Starts (or, synchronously, does) the read of a claimed slot; a synchronous read
    /// returns the block.
    fn start(
        &mut self,
        load: Load,
        files: &dyn SegmentFiles,
    ) -> Option<Result<Pinned, FetchError>> {
        let key = load.key();
        let read = BlockRead::of(&key, files);
        let started = Instant::now();
        let done = match &mut self.uring {
            Some(u) => u.submit(load, read).map(Err),
            None => Some(read_now(&self.cache, load, &read)),
        };
        match &done {
            Some(Err(FetchError::Failed(why))) => (self.on_fail)(&key, why),
            Some(Ok(_)) => {
                if let Some(f) = &mut self.on_ok {
                    f(&key, started.elapsed());
                }
            }
            _ => {}
        }
        done
    }

    /// The bytes of `key` through `held`, the one pin a codeword reader keeps per member:
    /// the pin is kept while the same block is asked for again, and replaced by a
    /// [`Reader::fetch`] of `key` otherwise. A block still being read (or no room to read
    /// it) is [`BlockError::Pending`]; one that cannot be read, [`BlockError::Unreadable`].
    pub fn pinned_block<'p>(
        &mut self,
        held: &'p mut Option<(u64, Pinned)>,
        key: BlockKey,
        files: &dyn SegmentFiles,
        demand: &dyn Demand,
    ) -> Result<&'p [u8], BlockError> {
        if held.as_ref().is_none_or(|(b, _)| *b != key.block) {
            *held = None;
            match self.fetch(key, files, demand) {
                Ok(pin) => *held = Some((key.block, pin)),
                Err(FetchError::Busy) | Err(FetchError::Full) => return Err(BlockError::Pending),
                Err(FetchError::Failed(why)) | Err(FetchError::Unavailable(why)) => {
                    return Err(BlockError::Unreadable(why))
                }
            }
        }
        match held {
            Some((_, pin)) => Ok(pin.bytes()),
            None => Err(BlockError::Pending),
        }
    }

    /// Returns `key` pinned if it is in memory; otherwise starts its read (if there is
    /// room) and answers [`FetchError::Busy`]: come back when the read has completed. A
    /// synchronous reader reads it at once. A read that fails here answers
    /// [`FetchError::Failed`] once (and goes to the failure callback); afterwards the
    /// block is [`FetchError::Unavailable`] for a while.
    pub fn fetch(
        &mut self,
        key: BlockKey,
        files: &dyn SegmentFiles,
        demand: &dyn Demand,
    ) -> Result<Pinned, FetchError> {
        if self.room() == 0 && !self.cache.contains(&key) {
            return Err(FetchError::Busy);
        }
        match self.cache.begin(key, demand)? {
            Lookup::Ready(pin) => Ok(pin),
            Lookup::Loading => Err(FetchError::Busy),
            Lookup::Load(load) => {
                let done = self.start(load, files);
                self.submit();
                done.unwrap_or(Err(FetchError::Busy))
            }
        }
    }

    fn submit(&mut self) {
        if let Some(u) = &mut self.uring {
            u.submit_pushed();
        }
    }

    /// Submits queued reads and finishes the completed ones (never blocks).
    pub fn poll(&mut self) {
        if let Some(u) = &mut self.uring {
            u.submit_pushed();
            u.reap(&mut self.on_fail, &mut self.on_ok);
        }
    }

    /// Waits up to `timeout` for at least one completion (if reads are in flight) and
    /// finishes what completed.
    pub fn wait(&mut self, timeout: Duration) {
        let Some(u) = &mut self.uring else { return };
        u.submit_pushed();
        if !u.inflight.is_empty() && !timeout.is_zero() {
            let ts = types::Timespec::from(timeout);
            let args = types::SubmitArgs::new().timespec(&ts);
            // ETIME (timeout) and EINTR are expected; anything else shows in the next reap.
            let _ = u.ring.submitter().submit_with_args(1, &args);
        }
        u.reap(&mut self.on_fail, &mut self.on_ok);
    }

    /// Waits (bounded) until no read is in flight; reads still in flight after `limit`
    /// are leaked with the pool (the kernel may still write into it).
    pub fn drain(&mut self, limit: Duration) {
        let deadline = Instant::now() + limit;
        while self.in_flight() > 0 && Instant::now() < deadline {
            self.wait(Duration::from_millis(10));
        }
        if let Some(u) = &mut self.uring {
            if !u.inflight.is_empty() {
                tracing::warn!(
                    "{} block reads still in flight at shutdown; leaking the pool",
                    u.inflight.len()
                );
                std::mem::forget(std::mem::take(&mut u.inflight));
                std::mem::forget(u.cache.clone());
            }
        }
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.drain(Duration::from_secs(2));
    }
}

impl UringReads {
    fn new(cache: &Cache) -> io::Result<UringReads> {
        let ring = IoUring::new(RING_ENTRIES)?;
        // SAFETY: `cache` (a field dropped after the ring) keeps the pool alive for the
        // ring's whole life.
        let registered = match unsafe { crate::uring_probe::register_pool(&ring, cache) } {
            Ok(n) => n,
            Err(e) => {
                if !LOGGED_REGISTER.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        "io_uring: registering the block pool for reads failed ({e}); plain READ into the slots"
                    );
                }
                0
            }
        };
        Ok(UringReads {
            ring,
            registered,
            block_len: cache.block_len(),
            inflight: HashMap::with_capacity(QUEUE_DEPTH),
            unsubmitted: false,
            cache: cache.clone(),
        })
    }

    /// Queues the read of `load`; answers the failure if it cannot even start.
    fn submit(&mut self, mut load: Load, read: BlockRead) -> Option<FetchError> {
        assert!(self.inflight.len() < QUEUE_DEPTH, "read queue overfull");
        let slot = load.pool_slot();
        assert!(
            !self.inflight.contains_key(&slot),
            "slot {slot} already being read"
        );
        // The descriptor was opened when the object was prepared and is kept: a read
        // never needs a new one. A member that fails (a failed disk, a truncated file)
        // fails its reads through it.
        let file = match &read.file {
            Ok(f) => f.clone(),
            Err(e) => {
                let io = Err(format!("{}: {e}", read.ctx));
                return self.cache.finish(load, io, read.crc32c, &read.ctx).err();
            }
        };
        let buf = load.bytes_mut();
        let (ptr, len) = (buf.as_mut_ptr(), buf.len() as u32);
        let fd = types::Fd(file.as_raw_fd());
        let sqe = if (slot as usize) < self.registered {
            opcode::ReadFixed::new(fd, ptr, len, slot as u16)
                .offset(read.offset)
                .build()
        } else {
            opcode::Read::new(fd, ptr, len).offset(read.offset).build()
        }
        .user_data(u64::from(slot))
        // Always from io_uring's workers, never inline in the submitting call: a file
        // system that ignores non-blocking submission (FUSE, network file systems) would
        // otherwise block the data-plane thread in `io_uring_enter` for the whole read
        // (measured with the fault file system's 200 ms reads: every read on the thread,
        // of every member, then took 700-800 ms and no read could be hedged).
        .flags(io_uring::squeue::Flags::ASYNC);
        // SAFETY: the buffer is the slot of `load`, which stays loading (no one else reads
        // or writes it, it is never evicted) and alive in `inflight` until this read's
        // completion; `file` keeps the descriptor open as long.
        let pushed = unsafe { self.ring.submission().push(&sqe) };
        assert!(pushed.is_ok(), "io_uring submission ring full");
        self.unsubmitted = true;
        self.inflight.insert(
            slot,
            Pending {
                load,
                started: Instant::now(),
                file,
                read,
            },
        );
        None
    }

    fn submit_pushed(&mut self) {
        if !self.unsubmitted {
            return;
        }
        match self.ring.submit() {
            Ok(_) => self.unsubmitted = false,
            // EAGAIN/EBUSY: retried at the next poll.
            Err(e) => tracing::debug!("io_uring submit (reads): {e}"),
        }
    }

    fn reap(&mut self, on_fail: &mut OnFail, on_ok: &mut Option<OnOk>) {
        let mut done: Vec<(u32, i32)> = Vec::new();
        for cqe in self.ring.completion() {
            done.push((cqe.user_data() as u32, cqe.result()));
        }
        for (slot, res) in done {
            let Some(mut p) = self.inflight.remove(&slot) else {
                panic!("completion for slot {slot}, which has no read in flight");
            };
            let len = self.block_len;
            let io = if res < 0 {
                Err(io::Error::from_raw_os_error(-res))
            } else if res as usize == len {
                Ok(())
            } else if res == 0 {
                Err(io::Error::from(io::ErrorKind::UnexpectedEof))
            } else {
                // A short read (rare: a signal, a partial O_DIRECT transfer): finish it
                // synchronously.
                p.file.read_block_into(p.load.bytes_mut(), p.read.offset)
            };
            let key = p.load.key();
            let io = io.map_err(|e| format!("{}: {e}", p.read.ctx));
            let done = self.cache.finish(p.load, io, p.read.crc32c, &p.read.ctx);
            match done {
                Err(FetchError::Failed(why)) => on_fail(&key, &why),
                Ok(_) => {
                    if let Some(f) = on_ok {
                        f(&key, p.started.elapsed());
                    }
                }
                Err(_) => {}
            }
        }
    }
}

/// Reads a claimed slot now with `pread` (O_DIRECT where the file system allows).
fn read_now(cache: &Cache, mut load: Load, read: &BlockRead) -> Result<Pinned, FetchError> {
    let io = match &read.file {
        Ok(f) => f
            .read_block_into(load.bytes_mut(), read.offset)
            .map_err(|e| format!("{}: {e}", read.ctx)),
        Err(e) => Err(format!("{}: {e}", read.ctx)),
    };
    cache.finish(load, io, read.crc32c, &read.ctx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::NoDemand;
    use std::sync::{Arc, Mutex};

    const LEN: usize = 8192;

    struct Files {
        dir: PathBuf,
        crcs: HashMap<BlockKey, u32>,
    }
    impl SegmentFiles for Files {
        fn segment_path(&self, key: &BlockKey) -> PathBuf {
            self.dir.join(format!("{}-{}", key.toi, key.member))
        }
        fn segment_file(&self, key: &BlockKey) -> Result<Arc<BlockFile>, String> {
            BlockFile::open_read(&self.segment_path(key))
                .map(Arc::new)
                .map_err(|e| e.to_string())
        }
        fn block_offset(&self, key: &BlockKey) -> u64 {
            key.block * LEN as u64
        }
        fn block_crc32c(&self, key: &BlockKey) -> Option<u32> {
            self.crcs.get(key).copied()
        }
    }

    /// Two members of `blocks` pseudo-random blocks each, with their checksums.
    fn setup(blocks: u64) -> (tempfile::TempDir, Files) {
        let dir = tempfile::tempdir().unwrap();
        let mut crcs = HashMap::new();
        let mut x = 0x1234_5678_9abc_def0u64;
        for m in 0..2u32 {
            let mut data = Vec::new();
            for b in 0..blocks {
                let start = data.len();
                for _ in 0..LEN / 8 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    data.extend_from_slice(&x.to_le_bytes());
                }
                crcs.insert(key(m, b), crc32c::crc32c(&data[start..]));
            }
            std::fs::write(dir.path().join(format!("1-{m}")), data).unwrap();
        }
        let dir_path = dir.path().to_path_buf();
        (
            dir,
            Files {
                dir: dir_path,
                crcs,
            },
        )
    }

    fn key(member: u32, block: u64) -> BlockKey {
        BlockKey {
            toi: 1,
            member,
            block,
        }
    }

    type Failures = Arc<Mutex<Vec<(BlockKey, String)>>>;

    /// A reader of `io`; `None` (said on stderr) where io_uring is unavailable, unless
    /// `ISNODE_REQUIRE_URING` is set (CI sets it where the kernel has io_uring), which
    /// makes a missing io_uring a failure instead of a skip.
    fn reader(cache: &Cache, io: ReadIo) -> Option<(Reader, Failures)> {
        let failures: Failures = Arc::default();
        let f = failures.clone();
        let r = Reader::new(
            cache,
            io,
            Box::new(move |k, why| f.lock().unwrap().push((*k, why.to_string()))),
        );
        if io == ReadIo::Uring && r.kind() != ReadIo::Uring {
            assert!(
                std::env::var_os("ISNODE_REQUIRE_URING").is_none(),
                "io_uring reads required (ISNODE_REQUIRE_URING) but unavailable"
            );
            eprintln!("SKIPPED: io_uring unavailable here");
            return None;
        }
        Some((r, failures))
    }

    /// Fetches as the data plane does over several turns: come back while busy (bounded).
    fn fetch(r: &mut Reader, key: BlockKey, src: &Files) -> Result<Pinned, FetchError> {
        for _turn in 0..5000 {
            match r.fetch(key, src, &NoDemand) {
                Err(FetchError::Busy) => r.wait(Duration::from_millis(1)),
                other => return other,
            }
        }
        panic!("{key:?} still busy after 5000 turns");
    }

    #[test]
    fn uring_reads_equal_sync_reads() {
        let (_d, src) = setup(6);
        let sync_cache = Cache::new(16, LEN);
        let uring_cache = Cache::new(16, LEN);
        let (mut sync, _) = reader(&sync_cache, ReadIo::Sync).unwrap();
        let Some((mut uring, failures)) = reader(&uring_cache, ReadIo::Uring) else {
            return;
        };
        // Read-ahead of everything, then fetch (comes back until the reads complete).
        for m in 0..2 {
            for b in 0..6 {
                assert_eq!(
                    uring.prefetch(key(m, b), &src, &NoDemand),
                    Prefetch::Started
                );
            }
        }
        assert!(uring.in_flight() <= QUEUE_DEPTH);
        for m in 0..2 {
            for b in 0..6 {
                let a = sync.fetch(key(m, b), &src, &NoDemand).unwrap();
                let u = fetch(&mut uring, key(m, b), &src).unwrap();
                assert!(a.bytes() == u.bytes(), "block {m}/{b} differs");
            }
        }
        assert_eq!(uring.in_flight(), 0);
        assert!(failures.lock().unwrap().is_empty());
        assert_eq!(uring_cache.stats().misses.load(Ordering::Relaxed), 12);
        assert_eq!(uring_cache.stats().read_errors.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_fetch_never_waits_for_its_read() {
        let (_d, src) = setup(2);
        let cache = Cache::new(4, LEN);
        let Some((mut r, _)) = reader(&cache, ReadIo::Uring) else {
            return;
        };
        // The first fetch starts the read and comes back at once.
        assert_eq!(
            r.fetch(key(0, 0), &src, &NoDemand).unwrap_err(),
            FetchError::Busy
        );
        assert_eq!(r.in_flight(), 1);
        let p = fetch(&mut r, key(0, 0), &src).unwrap();
        assert_eq!(crc32c::crc32c(p.bytes()), src.crcs[&key(0, 0)]);
    }

    #[test]
    fn read_queue_depth_is_bounded() {
        let (_d, src) = setup(40);
        let cache = Cache::new(80, LEN);
        let Some((mut r, _)) = reader(&cache, ReadIo::Uring) else {
            return;
        };
        let mut started = 0;
        for b in 0..40 {
            if r.prefetch(key(0, b), &src, &NoDemand) == Prefetch::Started {
                started += 1;
            }
        }
        // Completions are only reaped by poll/wait: the depth caps what was started.
        assert_eq!(started, QUEUE_DEPTH);
        assert_eq!(r.prefetch(key(1, 0), &src, &NoDemand), Prefetch::NoRoom);
        assert_eq!(
            r.fetch(key(1, 0), &src, &NoDemand).unwrap_err(),
            FetchError::Busy
        );
        r.drain(Duration::from_secs(5));
        assert_eq!(r.in_flight(), 0);
        for b in 0..QUEUE_DEPTH as u64 {
            assert!(cache.peek(&key(0, b)).is_some());
        }
    }

    #[test]
    fn in_flight_slot_is_not_evicted_nor_handed_out() {
        let (_d, src) = setup(4);
        let cache = Cache::new(2, LEN);
        let Some((mut r, _)) = reader(&cache, ReadIo::Uring) else {
            return;
        };
        let (mut sync, _) = reader(&cache, ReadIo::Sync).unwrap();
        assert_eq!(r.prefetch(key(0, 0), &src, &NoDemand), Prefetch::Started);
        // Not reaped yet: the slot is loading.
        assert!(cache.peek(&key(0, 0)).is_none());
        // The other slot cycles; the loading one is never taken.
        for b in 1..4 {
            let p = sync.fetch(key(1, b), &src, &NoDemand).unwrap();
            assert_eq!(p.pool_slot(), 1, "the loading slot 0 was reused");
            drop(p);
        }
        let busy = sync.fetch(key(1, 0), &src, &NoDemand).unwrap();
        assert_eq!(
            sync.fetch(key(1, 1), &src, &NoDemand).unwrap_err(),
            FetchError::Full
        );
        drop(busy);
        let p = fetch(&mut r, key(0, 0), &src).unwrap();
        assert_eq!(crc32c::crc32c(p.bytes()), src.crcs[&key(0, 0)]);
    }

    #[test]
    fn failed_reads_mark_the_block_failed() {
        for io in [ReadIo::Uring, ReadIo::Sync] {
            let (_d, mut src) = setup(2);
            let cache = Cache::new(4, LEN);
            let Some((mut r, failures)) = reader(&cache, io) else {
                continue;
            };
            // Missing file.
            let missing = BlockKey {
                toi: 9,
                member: 0,
                block: 0,
            };
            assert!(matches!(
                fetch(&mut r, missing, &src),
                Err(FetchError::Failed(_))
            ));
            assert!(matches!(
                fetch(&mut r, missing, &src),
                Err(FetchError::Unavailable(_))
            ));
            // Past the end of the file, through read-ahead.
            assert_eq!(r.prefetch(key(0, 7), &src, &NoDemand), Prefetch::Started);
            r.drain(Duration::from_secs(5));
            assert!(matches!(
                fetch(&mut r, key(0, 7), &src),
                Err(FetchError::Unavailable(_))
            ));
            // Checksum mismatch: an asynchronous read reports it to the callback, and the
            // next fetch finds the block unavailable.
            src.crcs.insert(key(1, 1), 0xdead_beef);
            let e = fetch(&mut r, key(1, 1), &src).unwrap_err();
            assert!(
                matches!(&e, FetchError::Failed(why) | FetchError::Unavailable(why) if why.contains("CRC32C")),
                "{io:?}: {e}"
            );
            let f = failures.lock().unwrap();
            let keys: Vec<BlockKey> = f.iter().map(|(k, _)| *k).collect();
            assert_eq!(keys, [missing, key(0, 7), key(1, 1)], "{io:?}: {f:?}");
            assert_eq!(cache.stats().read_errors.load(Ordering::Relaxed), 3);
            drop(f);
            // Failed slots are free again.
            for b in 0..2 {
                assert!(fetch(&mut r, key(0, b), &src).is_ok());
            }
        }
    }
}
