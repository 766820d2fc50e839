//! The cache's state machine, sans-IO: which block each slot holds, which slots are
//! pinned or being read, which reads failed recently, and which slot to reuse. Driven by
//! the caller's clock (`now_ns`) and the caller's reads; no memory, no files, no locks, so
//! a simulation can drive it with a virtual clock (`sim` tests).

use std::collections::HashMap;

use super::{BlockKey, Demand, FetchError};

/// What a slot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SlotState {
    /// Nothing.
    Empty,
    /// A read is filling it (owned by one `Load`): never evicted, never handed out.
    Loading,
    /// A verified block.
    Ready,
}

#[derive(Debug)]
struct SlotMeta {
    key: Option<BlockKey>,
    state: SlotState,
    /// Tick of the last use (LRU tie-break).
    last_use: u64,
    /// Live pins (sends or rebuilds using the bytes).
    pins: u32,
}

/// The answer of [`CacheCore::begin`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CoreLookup {
    /// In memory: the slot, pinned once for the caller.
    Ready(u32),
    /// Being read (by whoever took the miss).
    Loading,
    /// A miss: the caller owns the read of this slot (now loading); `evicted` tells
    /// whether a ready block was dropped for it.
    Load {
        /// The slot to fill.
        slot: u32,
        /// A ready block was evicted.
        evicted: bool,
    },
}

/// The state machine of the block cache.
#[derive(Debug)]
pub(crate) struct CacheCore {
    index: HashMap<BlockKey, u32>,
    slots: Vec<SlotMeta>,
    /// Blocks whose read failed, with when (ns) and why: retried after `retry_after_ns`.
    failed: HashMap<BlockKey, (u64, String)>,
    retry_after_ns: u64,
    tick: u64,
}

impl CacheCore {
    /// A core of `slots` empty slots; a failed block is retried `retry_after_ns` later.
    pub(crate) fn new(slots: u32, retry_after_ns: u64) -> CacheCore {
        assert!(slots > 0, "a cache needs at least one slot");
        CacheCore {
            index: HashMap::with_capacity(slots as usize),
            slots: (0..slots)
                .map(|_| SlotMeta {
                    key: None,
                    state: SlotState::Empty,
                    last_use: 0,
                    pins: 0,
                })
                .collect(),
            failed: HashMap::new(),
            retry_after_ns,
            tick: 0,
        }
    }

    /// Number of slots.
    pub(crate) fn slots(&self) -> u32 {
        self.slots.len() as u32
    }

    /// Slots holding ready blocks.
    pub(crate) fn ready_slots(&self) -> u32 {
        self.slots
            .iter()
            .filter(|s| s.state == SlotState::Ready)
            .count() as u32
    }

    /// The state of `slot` and the block it holds.
    #[cfg(test)]
    pub(crate) fn slot(&self, slot: u32) -> (SlotState, Option<BlockKey>, u32) {
        let m = &self.slots[slot as usize];
        (m.state, m.key, m.pins)
    }

    fn touch(&mut self, slot: u32) {
        self.tick += 1;
        self.slots[slot as usize].last_use = self.tick;
    }

    /// Pins `slot` once more (it must be ready).
    pub(crate) fn pin(&mut self, slot: u32) {
        let meta = &mut self.slots[slot as usize];
        assert_eq!(
            meta.state,
            SlotState::Ready,
            "pinning slot {slot}: not ready"
        );
        meta.pins += 1;
    }

    /// Drops one pin of `slot`.
    pub(crate) fn unpin(&mut self, slot: u32) {
        let meta = &mut self.slots[slot as usize];
        assert!(meta.pins > 0, "unbalanced unpin of slot {slot}");
        meta.pins -= 1;
    }

    /// The slot of `key` if it is ready, pinned for the caller (counts no hit).
    pub(crate) fn peek(&mut self, key: &BlockKey) -> Option<u32> {
        let slot = *self.index.get(key)?;
        if self.slots[slot as usize].state != SlotState::Ready {
            return None;
        }
        self.touch(slot);
        self.pin(slot);
        Some(slot)
    }

    /// Whether `key` is ready in memory (changes nothing).
    pub(crate) fn contains(&self, key: &BlockKey) -> bool {
        self.index
            .get(key)
            .is_some_and(|&s| self.slots[s as usize].state == SlotState::Ready)
    }

    /// Looks `key` up at `now_ns`; on a miss claims a slot for it (see [`CoreLookup`]).
    /// Errors: the block failed less than the retry time ago, or no slot is free.
    pub(crate) fn begin(
        &mut self,
        key: BlockKey,
        now_ns: u64,
        demand: &dyn Demand,
    ) -> Result<CoreLookup, FetchError> {
        if let Some(&slot) = self.index.get(&key) {
            return match self.slots[slot as usize].state {
                SlotState::Ready => {
                    self.touch(slot);
                    self.pin(slot);
                    Ok(CoreLookup::Ready(slot))
                }
                SlotState::Loading => Ok(CoreLookup::Loading),
                SlotState::Empty => unreachable!("an indexed slot is never empty"),
            };
        }
        if let Some((at_ns, why)) = self.failed.get(&key) {
            if now_ns.saturating_sub(*at_ns) < self.retry_after_ns {
                return Err(FetchError::Unavailable(why.clone()));
            }
            self.failed.remove(&key);
        }
        let slot = self.victim(demand).ok_or(FetchError::Full)?;
        let meta = &mut self.slots[slot as usize];
        assert_eq!(meta.pins, 0, "victim slot {slot} is pinned");
        let evicted = meta.key.take();
        meta.key = Some(key);
        meta.state = SlotState::Loading;
        if let Some(old) = evicted {
            self.index.remove(&old);
        }
        self.index.insert(key, slot);
        Ok(CoreLookup::Load {
            slot,
            evicted: evicted.is_some(),
        })
    }

    /// Ends the read of `slot` (loading `key`): on success the block is ready and pinned
    /// once for the caller; on failure the slot is freed and the block remembered as
    /// failed at `now_ns`.
    pub(crate) fn finish(
        &mut self,
        slot: u32,
        key: BlockKey,
        outcome: Result<(), String>,
        now_ns: u64,
    ) -> Result<(), FetchError> {
        let meta = &mut self.slots[slot as usize];
        assert!(
            meta.state == SlotState::Loading && meta.key == Some(key),
            "finishing slot {slot} that is not loading {key:?}"
        );
        assert_eq!(meta.pins, 0, "a loading slot {slot} is pinned");
        match outcome {
            Ok(()) => {
                meta.state = SlotState::Ready;
                self.touch(slot);
                self.pin(slot);
                Ok(())
            }
            Err(why) => {
                meta.state = SlotState::Empty;
                meta.key = None;
                self.index.remove(&key);
                self.failed.insert(key, (now_ns, why.clone()));
                Err(FetchError::Failed(why))
            }
        }
    }

    /// Chooses a slot to (re)use: empty first, then the unpinned ready block whose next use
    /// is farthest (never needed counts as infinitely far; ties by least recent use).
    /// A loading or pinned slot is never chosen.
    fn victim(&self, demand: &dyn Demand) -> Option<u32> {
        let mut best: Option<(u32, (u64, std::cmp::Reverse<u64>))> = None;
        for (i, meta) in self.slots.iter().enumerate() {
            if meta.state == SlotState::Empty {
                return Some(i as u32);
            }
            if meta.state != SlotState::Ready || meta.pins != 0 {
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
        best.map(|(i, _)| i)
    }
}
