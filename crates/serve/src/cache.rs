//! The block cache: a fixed pool of aligned block buffers, allocated (and touched) once at
//! start, keyed by (object, member, block) and shared by every session of every thread.
//!
//! A buffer is pinned while a send (or a rebuild) uses it and is never evicted while
//! pinned. On a miss the caller that takes the miss reads the block into a free or evicted
//! slot (O_DIRECT where the file system allows) while the slot is marked loading; other
//! callers wait for it or come back later. Eviction prefers, in order: empty slots, blocks
//! no active session will need again, then the block whose next use is farthest away
//! (interval caching: a block between two sessions of the same title stays for the
//! follower).

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use isnode_store::io::AlignedBuf;

/// Identity of a cached block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockKey {
    /// Object (TOI).
    pub toi: u32,
    /// Member index.
    pub member: u32,
    /// Block index in the member's segment file.
    pub block: u64,
}

/// Why a block could not be provided.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum FetchError {
    /// The block could not be read or failed its checksum (just now); the string says why.
    #[error("block unreadable: {0}")]
    Failed(String),
    /// The block failed recently and is not retried yet.
    #[error("block unreadable (remembered): {0}")]
    Unavailable(String),
    /// Another thread is reading it (only when not waiting).
    #[error("block is being read")]
    Busy,
    /// Every slot is pinned or loading.
    #[error("block cache full: every buffer is in use")]
    Full,
}

/// How to read one block from disk (implemented by the object registry).
pub trait BlockSource {
    /// Path of the segment file holding `key`.
    fn path(&self, key: &BlockKey) -> std::path::PathBuf;
    /// Expected CRC32C of the whole block, if known.
    fn crc(&self, key: &BlockKey) -> Option<u32>;
}

/// Where active sessions are, for eviction.
pub trait Demand {
    /// How far (in nanoseconds of stream time) the nearest active session is from needing
    /// block `block` of `member` of object `toi` (0: in use now), or `None` if no active
    /// session will need it again.
    fn next_use(&self, toi: u32, member: u32, block: u64) -> Option<u64>;
}

/// No demand information: plain LRU.
pub struct NoDemand;

impl Demand for NoDemand {
    fn next_use(&self, _: u32, _: u32, _: u64) -> Option<u64> {
        Some(0)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotState {
    Empty,
    Loading,
    Ready,
}

#[derive(Debug)]
struct SlotMeta {
    key: Option<BlockKey>,
    state: SlotState,
    last_use: u64,
}

struct State {
    index: HashMap<BlockKey, u32>,
    slots: Vec<SlotMeta>,
    /// Blocks whose read failed, with when: retried after [`FAILED_RETRY`].
    failed: HashMap<BlockKey, (Instant, String)>,
    tick: u64,
}

/// A failed block is retried after this long.
const FAILED_RETRY: Duration = Duration::from_secs(2);

/// Counters of the cache.
#[derive(Debug, Default)]
pub struct CacheStats {
    /// Lookups served from memory.
    pub hits: AtomicU64,
    /// Lookups that had to read the block.
    pub misses: AtomicU64,
    /// Block reads that failed.
    pub read_errors: AtomicU64,
    /// Blocks evicted.
    pub evictions: AtomicU64,
    /// Bytes read from disk.
    pub bytes_read: AtomicU64,
}

struct Inner {
    /// Base of the pool; `slots` buffers of `block_len` bytes.
    base: *mut u8,
    block_len: usize,
    /// Keeps the pool memory alive.
    _mem: AlignedBuf,
    pins: Vec<AtomicU32>,
    state: Mutex<State>,
    ready: Condvar,
    stats: CacheStats,
}

// SAFETY: `base` points into `_mem`, owned by Inner. A slot's bytes are written only by the
// single thread that marked it Loading (holding the only pin), and read only while Ready
// and pinned; eviction only takes slots with no pin. The state machine is protected by the
// mutex, so no slot is ever written while another thread reads it.
unsafe impl Send for Inner {}
// SAFETY: see above.
unsafe impl Sync for Inner {}

/// The shared block cache (cheap to clone).
#[derive(Clone)]
pub struct Cache {
    inner: Arc<Inner>,
}

/// A pinned, ready block: its bytes stay valid and unchanged while this lives.
pub struct Pinned {
    inner: Arc<Inner>,
    slot: u32,
}

impl Pinned {
    /// The block's bytes.
    pub fn bytes(&self) -> &[u8] {
        let len = self.inner.block_len;
        // SAFETY: the slot is Ready and pinned: nobody writes it while this pin lives.
        unsafe { std::slice::from_raw_parts(self.inner.base.add(self.slot as usize * len), len) }
    }

    /// Index of the slot in the pool (the io_uring registered-buffer index).
    pub fn slot(&self) -> u32 {
        self.slot
    }
}

impl Clone for Pinned {
    fn clone(&self) -> Self {
        self.inner.pins[self.slot as usize].fetch_add(1, Ordering::AcqRel);
        Pinned {
            inner: self.inner.clone(),
            slot: self.slot,
        }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        let prev = self.inner.pins[self.slot as usize].fetch_sub(1, Ordering::AcqRel);
        assert!(prev > 0, "unbalanced unpin of slot {}", self.slot);
    }
}

impl std::fmt::Debug for Pinned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pinned(slot {})", self.slot)
    }
}

impl Cache {
    /// Allocates `slots` buffers of `block_len` bytes (a multiple of 4096) and touches
    /// every page, so the memory is resident from the start and stays flat.
    pub fn new(slots: u32, block_len: usize) -> Cache {
        assert!(slots > 0, "a cache needs at least one slot");
        let mut mem = AlignedBuf::new(block_len * slots as usize);
        let bytes = mem.as_mut_slice();
        for page in bytes.chunks_mut(4096) {
            // A (volatile, so never elided) write of 0 still faults the page in.
            // SAFETY: the pointer is valid for writes (a page of our own buffer).
            unsafe { std::ptr::write_volatile(page.as_mut_ptr(), 0) };
        }
        let base = bytes.as_mut_ptr();
        let metas = (0..slots)
            .map(|_| SlotMeta {
                key: None,
                state: SlotState::Empty,
                last_use: 0,
            })
            .collect();
        Cache {
            inner: Arc::new(Inner {
                base,
                block_len,
                _mem: mem,
                pins: (0..slots).map(|_| AtomicU32::new(0)).collect(),
                state: Mutex::new(State {
                    index: HashMap::new(),
                    slots: metas,
                    failed: HashMap::new(),
                    tick: 0,
                }),
                ready: Condvar::new(),
                stats: CacheStats::default(),
            }),
        }
    }

    /// Number of slots.
    pub fn slots(&self) -> u32 {
        self.inner.pins.len() as u32
    }

    /// Bytes per slot.
    pub fn block_len(&self) -> usize {
        self.inner.block_len
    }

    /// The counters.
    pub fn stats(&self) -> &CacheStats {
        &self.inner.stats
    }

    /// Bytes of the pool holding ready blocks.
    pub fn bytes_cached(&self) -> u64 {
        let st = self.lock();
        st.slots
            .iter()
            .filter(|s| s.state == SlotState::Ready)
            .count() as u64
            * self.inner.block_len as u64
    }

    /// Pointer and length of every slot, for io_uring buffer registration.
    pub fn iovecs(&self) -> Vec<libc::iovec> {
        (0..self.slots() as usize)
            .map(|i| libc::iovec {
                // SAFETY: in bounds of the pool.
                iov_base: unsafe { self.inner.base.add(i * self.inner.block_len) }.cast(),
                iov_len: self.inner.block_len,
            })
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent metadata (no multi-step updates
        // are interrupted by code that can panic), so poisoning is ignored.
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Pins `key` if it is ready in memory, without reading (counts nothing).
    pub fn peek(&self, key: &BlockKey) -> Option<Pinned> {
        let mut st = self.lock();
        let slot = *st.index.get(key)?;
        if st.slots[slot as usize].state != SlotState::Ready {
            return None;
        }
        st.tick += 1;
        let tick = st.tick;
        st.slots[slot as usize].last_use = tick;
        Some(self.pin(&st, slot))
    }

    /// Pins a ready slot (the caller holds the lock: `st`).
    fn pin(&self, st: &State, slot: u32) -> Pinned {
        assert_eq!(
            st.slots[slot as usize].state,
            SlotState::Ready,
            "handing out slot {slot} that is not ready"
        );
        self.inner.pins[slot as usize].fetch_add(1, Ordering::AcqRel);
        Pinned {
            inner: self.inner.clone(),
            slot,
        }
    }

    /// Looks `key` up and, on a miss, claims a slot for it: the sans-IO first half of a
    /// read. `Ready` is a hit (pinned, counted); `Loading` means a read is in flight
    /// (here or on another thread); `Load` hands the caller the slot, marked loading, to
    /// fill and then pass to [`Cache::finish`]. Errors: the block failed recently
    /// ([`FetchError::Unavailable`]) or every slot is pinned or loading ([`FetchError::Full`]).
    pub fn begin(&self, key: BlockKey, demand: &dyn Demand) -> Result<Lookup, FetchError> {
        let mut st = self.lock();
        self.begin_locked(&mut st, key, demand)
    }

    fn begin_locked(
        &self,
        st: &mut State,
        key: BlockKey,
        demand: &dyn Demand,
    ) -> Result<Lookup, FetchError> {
        if let Some(&slot) = st.index.get(&key) {
            return match st.slots[slot as usize].state {
                SlotState::Ready => {
                    st.tick += 1;
                    let tick = st.tick;
                    st.slots[slot as usize].last_use = tick;
                    self.inner.stats.hits.fetch_add(1, Ordering::Relaxed);
                    Ok(Lookup::Ready(self.pin(st, slot)))
                }
                SlotState::Loading => Ok(Lookup::Loading),
                SlotState::Empty => unreachable!("an indexed slot is never empty"),
            };
        }
        if let Some((at, why)) = st.failed.get(&key) {
            if at.elapsed() < FAILED_RETRY {
                return Err(FetchError::Unavailable(why.clone()));
            }
            st.failed.remove(&key);
        }
        let slot = self.victim(st, demand).ok_or(FetchError::Full)?;
        assert_eq!(
            self.inner.pins[slot as usize].load(Ordering::Acquire),
            0,
            "victim slot {slot} is pinned"
        );
        let old = st.slots[slot as usize].key.take();
        if let Some(old) = old {
            st.index.remove(&old);
            self.inner.stats.evictions.fetch_add(1, Ordering::Relaxed);
        }
        let meta = &mut st.slots[slot as usize];
        meta.key = Some(key);
        meta.state = SlotState::Loading;
        st.index.insert(key, slot);
        self.inner.stats.misses.fetch_add(1, Ordering::Relaxed);
        Ok(Lookup::Load(Load {
            cache: self.clone(),
            slot,
            key,
            finished: false,
        }))
    }

    /// The second half of a read: `io` is the outcome of filling `load`'s slot; on
    /// success the block is checked against `expected_crc` and becomes ready (returned
    /// pinned), otherwise the slot is freed and the block remembered as failed. `ctx`
    /// (file and block) prefixes the message of a checksum mismatch.
    pub fn finish(
        &self,
        mut load: Load,
        io: Result<(), String>,
        expected_crc: Option<u32>,
        ctx: &str,
    ) -> Result<Pinned, FetchError> {
        assert!(
            Arc::ptr_eq(&load.cache.inner, &self.inner),
            "a load finished on another cache"
        );
        load.finished = true;
        let (slot, key) = (load.slot, load.key);
        let io = io.and_then(|()| match expected_crc {
            Some(expected) => {
                let got = crc32c::crc32c(load.bytes_mut());
                if got == expected {
                    Ok(())
                } else {
                    Err(format!(
                        "{ctx}: CRC32C {got:08x}, catalog says {expected:08x}"
                    ))
                }
            }
            None => Ok(()),
        });
        let mut st = self.lock();
        let meta = &st.slots[slot as usize];
        assert!(
            meta.state == SlotState::Loading && meta.key == Some(key),
            "finishing slot {slot} that is not loading {key:?}"
        );
        st.tick += 1;
        let tick = st.tick;
        let out = match io {
            Ok(()) => {
                let meta = &mut st.slots[slot as usize];
                meta.state = SlotState::Ready;
                meta.last_use = tick;
                self.inner
                    .stats
                    .bytes_read
                    .fetch_add(self.inner.block_len as u64, Ordering::Relaxed);
                Ok(self.pin(&st, slot))
            }
            Err(why) => {
                self.fail_locked(&mut st, slot, key, why.clone());
                Err(FetchError::Failed(why))
            }
        };
        drop(st);
        self.inner.ready.notify_all();
        out
    }

    fn fail_locked(&self, st: &mut State, slot: u32, key: BlockKey, why: String) {
        let meta = &mut st.slots[slot as usize];
        meta.state = SlotState::Empty;
        meta.key = None;
        st.index.remove(&key);
        st.failed.insert(key, (Instant::now(), why));
        self.inner.stats.read_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Waits up to `timeout` while `key` is loading (on another thread: a thread must
    /// never wait here for its own read).
    pub fn wait_loading(&self, key: &BlockKey, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let mut st = self.lock();
        loop {
            let loading = st
                .index
                .get(key)
                .is_some_and(|&s| st.slots[s as usize].state == SlotState::Loading);
            let now = Instant::now();
            if !loading || now >= deadline {
                return;
            }
            st = self
                .inner
                .ready
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Returns `key` pinned, reading it synchronously (`pread`) if needed. With `wait`,
    /// waits (bounded) for a read in progress elsewhere; otherwise answers
    /// [`FetchError::Busy`].
    pub fn get(
        &self,
        key: BlockKey,
        source: &dyn BlockSource,
        demand: &dyn Demand,
        wait: bool,
    ) -> Result<Pinned, FetchError> {
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut st = self.lock();
        let mut load = loop {
            match self.begin_locked(&mut st, key, demand)? {
                Lookup::Ready(pin) => return Ok(pin),
                Lookup::Load(load) => break load,
                Lookup::Loading => {
                    let now = Instant::now();
                    if !wait || now >= deadline {
                        return Err(FetchError::Busy);
                    }
                    st = self
                        .inner
                        .ready
                        .wait_timeout(st, deadline - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            }
        };
        drop(st);
        let path = source.path(&key);
        let ctx = format!("{}: block {}", path.display(), key.block);
        let io = read_block(
            &path,
            key.block * self.inner.block_len as u64,
            load.bytes_mut(),
        )
        .map_err(|e| format!("{ctx}: {e}"));
        self.finish(load, io, source.crc(&key), &ctx)
    }

    /// Chooses a slot to (re)use: empty first, then the unpinned ready block whose next use
    /// is farthest (never needed counts as infinitely far; ties by least recent use).
    /// A loading slot is never chosen.
    fn victim(&self, st: &State, demand: &dyn Demand) -> Option<u32> {
        let mut best: Option<(u32, (u64, std::cmp::Reverse<u64>))> = None;
        for (i, meta) in st.slots.iter().enumerate() {
            if meta.state == SlotState::Empty {
                return Some(i as u32);
            }
            if meta.state != SlotState::Ready || self.inner.pins[i].load(Ordering::Acquire) != 0 {
                continue;
            }
            let Some(key) = meta.key else { continue };
            let distance = demand
                .next_use(key.toi, key.member, key.block)
                .unwrap_or(u64::MAX);
            let score = (distance, std::cmp::Reverse(meta.last_use));
            if best.as_ref().is_none_or(|(_, b)| score > *b) {
                best = Some((i as u32, score));
            }
        }
        if let Some((i, _)) = best {
            assert_eq!(
                st.slots[i as usize].state,
                SlotState::Ready,
                "a loading slot chosen for eviction"
            );
        }
        best.map(|(i, _)| i)
    }
}

/// The answer of [`Cache::begin`].
#[derive(Debug)]
pub enum Lookup {
    /// In memory: pinned.
    Ready(Pinned),
    /// Being read (here or by another thread).
    Loading,
    /// A miss: the caller owns the read of this slot.
    Load(Load),
}

/// A slot claimed for reading one block (state loading: never evicted, never handed
/// out). Fill [`Load::bytes_mut`] (or the slot's registered buffer) and pass it to
/// [`Cache::finish`]. Dropped unfinished, the block counts as failed; a load whose read
/// the kernel may still be writing must be leaked (`std::mem::forget`), never dropped.
pub struct Load {
    cache: Cache,
    slot: u32,
    key: BlockKey,
    finished: bool,
}

impl Load {
    /// The block being read.
    pub fn key(&self) -> BlockKey {
        self.key
    }

    /// Index of the slot in the pool (the io_uring registered-buffer index).
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// The slot's bytes, for the reader to fill.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        let len = self.cache.inner.block_len;
        // SAFETY: the slot is loading and this `Load` (not Clone) is its only owner: no
        // pin exists and no other thread reads or writes it until `finish`.
        unsafe {
            std::slice::from_raw_parts_mut(self.cache.inner.base.add(self.slot as usize * len), len)
        }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let cache = self.cache.clone();
        let mut st = cache.lock();
        cache.fail_locked(&mut st, self.slot, self.key, "read abandoned".into());
        drop(st);
        cache.inner.ready.notify_all();
    }
}

impl std::fmt::Debug for Load {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Load(slot {}, {:?})", self.slot, self.key)
    }
}

/// Opens a segment file for block reads: O_DIRECT where the file system allows (and
/// `ISNODE_BUFFERED_IO` is not set), buffered otherwise.
pub fn open_for_blocks(path: &Path) -> std::io::Result<File> {
    let mut opts = OpenOptions::new();
    opts.read(true);
    if std::env::var_os("ISNODE_BUFFERED_IO").is_none() {
        let mut direct = opts.clone();
        direct.custom_flags(libc::O_DIRECT);
        match direct.open(path) {
            Ok(f) => return Ok(f),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
            Err(e) => return Err(e),
        }
    }
    opts.open(path)
}

/// Reads exactly `buf.len()` bytes at `offset` of `path` (opened with [`open_for_blocks`]).
pub fn read_block(path: &Path, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
    open_for_blocks(path)?.read_exact_at(buf, offset)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    struct Files(PathBuf);
    impl BlockSource for Files {
        fn path(&self, key: &BlockKey) -> PathBuf {
            self.0.join(format!("{}-{}", key.toi, key.member))
        }
        fn crc(&self, _: &BlockKey) -> Option<u32> {
            None
        }
    }

    fn setup(blocks: u64) -> (tempfile::TempDir, Files) {
        let dir = tempfile::tempdir().unwrap();
        for m in 0..2u32 {
            let mut data = Vec::new();
            for b in 0..blocks {
                data.extend(std::iter::repeat_n((b as u8) ^ (m as u8 * 0x80), 4096));
            }
            std::fs::write(dir.path().join(format!("1-{m}")), data).unwrap();
        }
        let f = Files(dir.path().to_path_buf());
        (dir, f)
    }

    fn key(member: u32, block: u64) -> BlockKey {
        BlockKey {
            toi: 1,
            member,
            block,
        }
    }

    #[test]
    fn shared_block_is_read_once() {
        let (_d, src) = setup(4);
        let cache = Cache::new(4, 4096);
        for _session in 0..2 {
            for b in 0..4 {
                let p = cache.get(key(0, b), &src, &NoDemand, true).unwrap();
                assert!(p.bytes().iter().all(|&x| x == b as u8));
            }
        }
        assert_eq!(cache.stats().misses.load(Ordering::Relaxed), 4);
        assert_eq!(cache.stats().hits.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn pinned_blocks_are_never_evicted() {
        let (_d, src) = setup(8);
        let cache = Cache::new(3, 4096);
        let a = cache.get(key(0, 0), &src, &NoDemand, true).unwrap();
        let b = cache.get(key(1, 1), &src, &NoDemand, true).unwrap();
        for round in 0..3 {
            for blk in 2..8 {
                let p = cache.get(key(0, blk), &src, &NoDemand, true).unwrap();
                assert_eq!(p.bytes()[0], blk as u8, "round {round}");
                assert_eq!(a.bytes()[100], 0);
                assert_eq!(b.bytes()[100], 1 ^ 0x80);
            }
        }
        // All slots pinned: no room.
        let c = cache.get(key(0, 2), &src, &NoDemand, true).unwrap();
        assert_eq!(
            cache.get(key(0, 3), &src, &NoDemand, true).unwrap_err(),
            FetchError::Full
        );
        drop((a, b, c));
        assert!(cache.get(key(0, 3), &src, &NoDemand, true).is_ok());
    }

    #[test]
    fn eviction_prefers_blocks_nobody_needs() {
        struct Need;
        impl Demand for Need {
            fn next_use(&self, _: u32, member: u32, _: u64) -> Option<u64> {
                // Member 1's blocks are needed soon; member 0's never again.
                (member == 1).then_some(1)
            }
        }
        let (_d, src) = setup(4);
        let cache = Cache::new(2, 4096);
        drop(cache.get(key(1, 0), &src, &Need, true).unwrap());
        drop(cache.get(key(0, 0), &src, &Need, true).unwrap());
        // key(1,0) is older, but needed: key(0,0) goes.
        drop(cache.get(key(0, 1), &src, &Need, true).unwrap());
        assert!(cache.peek(&key(1, 0)).is_some());
        assert!(cache.peek(&key(0, 0)).is_none());
    }

    #[test]
    fn failed_reads_are_remembered() {
        let (_d, src) = setup(1);
        let cache = Cache::new(2, 4096);
        let e = cache.get(key(0, 5), &src, &NoDemand, true).unwrap_err();
        assert!(matches!(e, FetchError::Failed(_)));
        let missing = BlockKey {
            toi: 9,
            member: 0,
            block: 0,
        };
        assert!(matches!(
            cache.get(missing, &src, &NoDemand, true),
            Err(FetchError::Failed(_))
        ));
        assert!(matches!(
            cache.get(missing, &src, &NoDemand, true),
            Err(FetchError::Unavailable(_))
        ));
        assert_eq!(cache.stats().read_errors.load(Ordering::Relaxed), 2);
        // Remembered: no second read attempt.
        assert!(cache.get(key(0, 5), &src, &NoDemand, true).is_err());
        assert_eq!(cache.stats().misses.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn concurrent_sessions_share_one_copy() {
        let (_d, src) = setup(6);
        let src = Arc::new(src);
        let cache = Cache::new(8, 4096);
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let cache = cache.clone();
                let src = src.clone();
                std::thread::spawn(move || {
                    for b in 0..6 {
                        let p = cache.get(key(1, b), &*src, &NoDemand, true).unwrap();
                        assert_eq!(p.bytes()[4095], (b as u8) ^ 0x80);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(cache.stats().misses.load(Ordering::Relaxed), 6);
    }
}
