//! The block cache: a fixed pool of aligned block buffers, allocated (and touched) once at
//! start, keyed by (object, member, block) and shared by every session of every thread.
//!
//! The decisions live in a sans-IO state machine (`isnode_serve_core::cache_core`: slots, pins, reads in flight,
//! failed reads, eviction), simulated with a virtual clock in its tests. This shell adds
//! the pool's memory, a mutex, and the counters; it never reads a file and never waits:
//! the caller that takes a miss gets a [`Load`] (the slot, marked loading), fills it (the
//! data plane's `reader`) and hands it back to [`Cache::finish`], which verifies the
//! block's CRC32C. Callers that find a block loading come back later.
//!
//! A buffer is pinned while a send (or a rebuild) uses it and is never evicted while
//! pinned. Eviction prefers, in order: empty slots, blocks no active session will need
//! again, then the block whose next use is farthest away (interval caching: a block
//! between two sessions of the same title stays for the follower).
//! Choosing costs O(log n) amortised under the lock, not a walk of every slot: the
//! evictable slots are kept ordered by their last scored next use (see `isnode_serve_core::cache_core`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use isnode_store::io::AlignedBuf;

pub use isnode_serve_core::block::{BlockKey, Demand, FetchError, NoDemand};
use isnode_serve_core::cache_core::{CacheCore, CoreLookup};

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
    core: Mutex<CacheCore>,
    epoch: Instant,
    stats: CacheStats,
}

// SAFETY: `base` points into `_mem`, owned by Inner. A slot's bytes are written only
// through the single `Load` of a loading slot, and read only while the slot is ready and
// pinned; the core never evicts or hands out a pinned or loading slot, and every state
// change happens under the mutex, so no slot is written while another thread reads it.
unsafe impl Send for Inner {}
// SAFETY: see above.
unsafe impl Sync for Inner {}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, CacheCore> {
        // Every multi-step update of the core completes before any assertion can fail,
        // so a poisoned lock still guards consistent state.
        self.core.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn slot_ptr(&self, slot: u32) -> *mut u8 {
        assert!(
            (slot as usize) < self.lock().slots() as usize,
            "slot {slot}"
        );
        // SAFETY: in bounds of the pool (checked above).
        unsafe { self.base.add(slot as usize * self.block_len) }
    }
}

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
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        let len = self.inner.block_len;
        // SAFETY: the slot is ready and pinned: nobody writes it while this pin lives.
        unsafe { std::slice::from_raw_parts(self.inner.base.add(self.slot as usize * len), len) }
    }

    /// Index of the buffer in the pool (the io_uring registered-buffer index).
    pub fn pool_slot(&self) -> u32 {
        self.slot
    }
}

impl Clone for Pinned {
    fn clone(&self) -> Self {
        self.inner.lock().pin(self.slot);
        Pinned {
            inner: self.inner.clone(),
            slot: self.slot,
        }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        self.inner.lock().unpin(self.slot);
    }
}

impl std::fmt::Debug for Pinned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pinned(slot {})", self.slot)
    }
}

/// The answer of [`Cache::begin`].
#[derive(Debug)]
pub enum Lookup {
    /// In memory: pinned.
    Ready(Pinned),
    /// Being read (here or by another thread): come back later.
    Loading,
    /// A miss: the caller owns the read of this slot.
    Load(Load),
}

/// When the pool's memory becomes resident.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Residency {
    /// Every page at start: the engine sends from the pool, memory use is flat.
    Touched,
    /// A page when first used: the pool only backs the degraded path (`sendfile`, whose
    /// cache is the kernel's page cache), so it costs memory only when a member fails.
    OnUse,
}

impl Cache {
    /// Allocates `slots` buffers of `block_len` bytes (a multiple of 4096) and touches
    /// every page, so the memory is resident from the start and stays flat.
    pub fn new(slots: u32, block_len: usize) -> Cache {
        Cache::with_residency(slots, block_len, Residency::Touched)
    }

    /// Allocates `slots` buffers of `block_len` bytes (a multiple of 4096), resident from
    /// the start or only once used.
    pub fn with_residency(slots: u32, block_len: usize, residency: Residency) -> Cache {
        assert!(slots > 0, "a cache needs at least one slot");
        let mut mem = AlignedBuf::new(block_len * slots as usize);
        let bytes = mem.as_mut_slice();
        if residency == Residency::Touched {
            for page in bytes.chunks_mut(4096) {
                // A (volatile, so never elided) write of 0 still faults the page in.
                // SAFETY: the pointer is valid for writes (a page of our own buffer).
                unsafe { std::ptr::write_volatile(page.as_mut_ptr(), 0) };
            }
        }
        let base = bytes.as_mut_ptr();
        let retry_ns = u64::try_from(FAILED_RETRY.as_nanos()).unwrap_or(u64::MAX);
        Cache {
            inner: Arc::new(Inner {
                base,
                block_len,
                _mem: mem,
                core: Mutex::new(CacheCore::new(slots, retry_ns)),
                epoch: Instant::now(),
                stats: CacheStats::default(),
            }),
        }
    }

    /// Number of slots.
    pub fn slots(&self) -> u32 {
        self.inner.lock().slots()
    }

    /// Bytes per slot.
    pub fn block_len(&self) -> usize {
        self.inner.block_len
    }

    /// The counters.
    pub fn stats(&self) -> &CacheStats {
        &self.inner.stats
    }

    /// Bytes of the whole pool (every slot).
    pub fn pool_bytes(&self) -> u64 {
        u64::from(self.slots()) * self.inner.block_len as u64
    }

    /// Bytes of the pool holding ready blocks.
    pub fn bytes_cached(&self) -> u64 {
        u64::from(self.inner.lock().ready_slots()) * self.inner.block_len as u64
    }

    /// Pointer and length of every slot, for io_uring buffer registration.
    pub fn iovecs(&self) -> Vec<libc::iovec> {
        (0..self.slots())
            .map(|slot| libc::iovec {
                iov_base: self.inner.slot_ptr(slot).cast(),
                iov_len: self.inner.block_len,
            })
            .collect()
    }

    /// Pins `key` if it is ready in memory, without reading (counts nothing).
    pub fn peek(&self, key: &BlockKey) -> Option<Pinned> {
        let slot = self.inner.lock().peek(key)?;
        Some(Pinned {
            inner: self.inner.clone(),
            slot,
        })
    }

    /// Whether `key` is ready in memory (pins nothing, counts nothing).
    #[inline]
    pub fn contains(&self, key: &BlockKey) -> bool {
        self.inner.lock().contains(key)
    }

    /// Looks `key` up and, on a miss, claims a slot for it: the first half of a read.
    /// `Ready` is a hit (pinned, counted); `Loading` means a read is in flight (come back
    /// later: nobody waits here); `Load` hands the caller the slot, marked loading, to fill
    /// and pass to [`Cache::finish`]. Errors: the block failed recently
    /// ([`FetchError::Unavailable`]) or every slot is pinned or loading ([`FetchError::Full`]).
    pub fn begin(&self, key: BlockKey, demand: &dyn Demand) -> Result<Lookup, FetchError> {
        let now_ns = self.inner.now_ns();
        let found = self.inner.lock().begin(key, now_ns, demand)?;
        Ok(self.lookup(key, found))
    }

    /// [`Cache::begin`] for a read ahead: a miss evicts only a block needed later than
    /// `key` (or never), so reading ahead never pushes out what a session needs sooner;
    /// otherwise [`FetchError::Full`].
    pub fn begin_ahead(&self, key: BlockKey, demand: &dyn Demand) -> Result<Lookup, FetchError> {
        let now_ns = self.inner.now_ns();
        let found = self.inner.lock().begin_ahead(key, now_ns, demand)?;
        Ok(self.lookup(key, found))
    }

    /// The shell's answer for the core's, counted.
    fn lookup(&self, key: BlockKey, found: CoreLookup) -> Lookup {
        let stats = &self.inner.stats;
        match found {
            CoreLookup::Ready(slot) => {
                stats.hits.fetch_add(1, Ordering::Relaxed);
                Lookup::Ready(Pinned {
                    inner: self.inner.clone(),
                    slot,
                })
            }
            CoreLookup::Loading => Lookup::Loading,
            CoreLookup::Load { slot, evicted } => {
                stats.misses.fetch_add(1, Ordering::Relaxed);
                if evicted {
                    stats.evictions.fetch_add(1, Ordering::Relaxed);
                }
                Lookup::Load(Load {
                    cache: self.clone(),
                    slot,
                    key,
                    finished: false,
                })
            }
        }
    }

    /// The second half of a read: `io` is the outcome of filling `load`'s slot; on
    /// success the block is checked against `expected_crc32c` and becomes ready (returned
    /// pinned), otherwise the slot is freed and the block remembered as failed. `ctx`
    /// (file and block) prefixes the reason of a failure.
    pub fn finish(
        &self,
        mut load: Load,
        io: Result<(), String>,
        expected_crc32c: Option<u32>,
        ctx: &str,
    ) -> Result<Pinned, FetchError> {
        assert!(
            Arc::ptr_eq(&load.cache.inner, &self.inner),
            "a load finished on another cache"
        );
        load.finished = true;
        let outcome = io.and_then(|()| {
            isnode_store::codeword::verify_block(load.bytes_mut(), expected_crc32c)
                .map_err(|why| format!("{ctx}: {why}"))
        });
        let now_ns = self.inner.now_ns();
        let ok = outcome.is_ok();
        let done = self
            .inner
            .lock()
            .finish(load.slot, load.key, outcome, now_ns);
        let stats = &self.inner.stats;
        if ok {
            stats
                .bytes_read
                .fetch_add(self.inner.block_len as u64, Ordering::Relaxed);
        } else {
            stats.read_errors.fetch_add(1, Ordering::Relaxed);
        }
        done.map(|()| Pinned {
            inner: self.inner.clone(),
            slot: load.slot,
        })
    }
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

    /// Index of the buffer in the pool (the io_uring registered-buffer index).
    pub fn pool_slot(&self) -> u32 {
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
        let inner = &self.cache.inner;
        let now_ns = inner.now_ns();
        let _ = inner
            .lock()
            .finish(self.slot, self.key, Err("read abandoned".into()), now_ns);
        inner.stats.read_errors.fetch_add(1, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for Load {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Load(slot {}, {:?})", self.slot, self.key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(member: u32, block: u64) -> BlockKey {
        BlockKey {
            toi: 1,
            member,
            block,
        }
    }

    /// Reads `key` as the data plane does, filling the block with `byte`.
    fn fill(cache: &Cache, key: BlockKey, byte: u8) -> Result<Pinned, FetchError> {
        match cache.begin(key, &NoDemand)? {
            Lookup::Ready(p) => Ok(p),
            Lookup::Loading => Err(FetchError::Busy),
            Lookup::Load(mut load) => {
                load.bytes_mut().fill(byte);
                cache.finish(load, Ok(()), None, "test")
            }
        }
    }

    #[test]
    fn shared_block_is_read_once() {
        let cache = Cache::new(4, 4096);
        for _session in 0..2 {
            for b in 0..4 {
                let p = fill(&cache, key(0, b), b as u8).unwrap();
                assert!(p.bytes().iter().all(|&x| x == b as u8));
            }
        }
        assert_eq!(cache.stats().misses.load(Ordering::Relaxed), 4);
        assert_eq!(cache.stats().hits.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn pinned_blocks_are_never_evicted() {
        let cache = Cache::new(3, 4096);
        let a = fill(&cache, key(0, 0), 0).unwrap();
        let b = fill(&cache, key(1, 1), 1).unwrap();
        for blk in 2..8 {
            let p = fill(&cache, key(0, blk), blk as u8).unwrap();
            assert_eq!(p.bytes()[0], blk as u8);
            assert_eq!(a.bytes()[100], 0);
            assert_eq!(b.bytes()[100], 1);
        }
        let c = fill(&cache, key(0, 2), 2).unwrap();
        assert_eq!(fill(&cache, key(0, 3), 3).unwrap_err(), FetchError::Full);
        drop((a, b, c));
        assert!(fill(&cache, key(0, 3), 3).is_ok());
    }

    #[test]
    fn a_loading_block_is_busy_not_waited_for() {
        let cache = Cache::new(2, 4096);
        let Lookup::Load(mut load) = cache.begin(key(0, 0), &NoDemand).unwrap() else {
            panic!("a miss")
        };
        assert!(matches!(
            cache.begin(key(0, 0), &NoDemand),
            Ok(Lookup::Loading)
        ));
        load.bytes_mut().fill(7);
        let p = cache.finish(load, Ok(()), None, "t").unwrap();
        assert_eq!(p.bytes()[5], 7);
    }

    #[test]
    fn checksum_mismatch_fails_and_is_remembered() {
        let cache = Cache::new(2, 4096);
        let Lookup::Load(load) = cache.begin(key(0, 0), &NoDemand).unwrap() else {
            panic!("a miss")
        };
        let e = cache
            .finish(load, Ok(()), Some(1), "f: block 0")
            .unwrap_err();
        assert!(matches!(&e, FetchError::Failed(why) if why.starts_with("f: block 0: CRC32C")));
        assert!(matches!(
            cache.begin(key(0, 0), &NoDemand),
            Err(FetchError::Unavailable(_))
        ));
        assert_eq!(cache.stats().read_errors.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn concurrent_sessions_share_one_copy() {
        let cache = Cache::new(8, 4096);
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let cache = cache.clone();
                std::thread::spawn(move || {
                    for b in 0..6 {
                        // A block loading on another thread is retried, as the data plane does.
                        let p = loop {
                            match fill(&cache, key(1, b), b as u8) {
                                Err(FetchError::Busy) => std::thread::yield_now(),
                                other => break other.unwrap(),
                            }
                        };
                        assert_eq!(p.bytes()[4095], b as u8);
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
