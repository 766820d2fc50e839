//! The cache's state machine, sans-IO: which block each slot holds, which slots are
//! pinned or being read, which reads failed recently, and which slot to reuse. Driven by
//! the caller's clock (`now_ns`) and the caller's reads; no memory, no files, no locks, so
//! a simulation can drive it with a virtual clock (`sim` tests).
//!
//! Choosing a victim costs O(log n) amortised, not a walk of every slot (issue 21: the
//! walk ran under the lock HTTP readers share): empty slots are on a free list; the
//! evictable slots (ready, unpinned) are in an ordered set keyed by when each is next
//! needed, as last scored, `now + next_use` (sessions play at stream speed, so that time
//! stays right until a session starts, seeks, pauses or stops). A slot becoming evictable
//! is scored at the next miss; each miss rescores [`REFRESH_PER_MISS`] slots in turn (a
//! clock hand), so every score is refreshed within `slots / REFRESH_PER_MISS` misses; and
//! the candidate is rescored before it is taken: it is taken only if its fresh score is
//! still the farthest in the set, otherwise it goes back and the next is tried (at most
//! [`REFRESH_PER_MISS`] times). With scores unchanged since they were taken (positions
//! and clock fixed) the choice is exactly the full walk's (a property test checks this).

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};

use crate::block::{BlockKey, Demand, FetchError};

/// Slots rescored per miss (the clock hand's step), and the most candidates rescored
/// before one is taken.
pub const REFRESH_PER_MISS: u32 = 16;

/// What a slot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotState {
    /// Nothing.
    Empty,
    /// A read is filling it (owned by one `Load`): never evicted, never handed out.
    Loading,
    /// A verified block.
    Ready,
}

/// A deliberate bug, to show that the simulation (`sim` tests) catches it.
#[cfg(any(test, feature = "mutation"))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// The core as it is.
    None,
    /// Eviction ignores pins: a pinned ready slot is reused first.
    EvictPinned,
}

/// Which ready block a miss may evict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Admit {
    /// Any (a burst is due: the block is needed now).
    Always,
    /// Only one whose next use (absolute ns, as scored) is later than this (a read ahead).
    FartherThan(u64),
}

impl Admit {
    /// Whether a block next used at `at_ns` may be evicted.
    fn allows(self, at_ns: u64) -> bool {
        match self {
            Admit::Always => true,
            // Never-needed blocks score u64::MAX: evictable for any bound but "never".
            Admit::FartherThan(bound) => at_ns > bound,
        }
    }
}

/// An evictable slot's place in the order: farthest next use (absolute ns, `u64::MAX`
/// for never), then least recent use, then slot.
type Score = (u64, Reverse<u64>, u32);

#[derive(Debug)]
struct SlotMeta {
    key: Option<BlockKey>,
    state: SlotState,
    /// Tick of the last use (LRU tie-break).
    last_use: u64,
    /// Live pins (sends or rebuilds using the bytes).
    pins: u32,
    /// Its entry in the evictable set, if there.
    scored: Option<Score>,
    /// On the list of slots to score at the next miss.
    queued: bool,
}

/// The answer of [`CacheCore::begin`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoreLookup {
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
pub struct CacheCore {
    index: HashMap<BlockKey, u32>,
    slots: Vec<SlotMeta>,
    /// Empty slots.
    free: Vec<u32>,
    /// Ready, unpinned slots that were scored, by score.
    evictable: BTreeSet<Score>,
    /// Slots that became evictable since the last miss (scored then).
    unscored: Vec<u32>,
    /// The next slot the refresh hand rescores.
    hand: u32,
    ready: u32,
    /// Blocks whose read failed, with when (ns) and why: retried after `retry_after_ns`.
    failed: HashMap<BlockKey, (u64, String)>,
    retry_after_ns: u64,
    tick: u64,
    #[cfg(any(test, feature = "mutation"))]
    mutation: Mutation,
}

impl CacheCore {
    /// A core of `slots` empty slots; a failed block is retried `retry_after_ns` later.
    pub fn new(slots: u32, retry_after_ns: u64) -> CacheCore {
        assert!(slots > 0, "a cache needs at least one slot");
        CacheCore {
            index: HashMap::with_capacity(slots as usize),
            slots: (0..slots)
                .map(|_| SlotMeta {
                    key: None,
                    state: SlotState::Empty,
                    last_use: 0,
                    pins: 0,
                    scored: None,
                    queued: false,
                })
                .collect(),
            // Popped from the end: the lowest slot first.
            free: (0..slots).rev().collect(),
            evictable: BTreeSet::new(),
            unscored: Vec::new(),
            hand: 0,
            ready: 0,
            failed: HashMap::new(),
            retry_after_ns,
            tick: 0,
            #[cfg(any(test, feature = "mutation"))]
            mutation: Mutation::None,
        }
    }

    /// Plants `mutation` (tests only).
    #[cfg(any(test, feature = "mutation"))]
    pub fn mutate(&mut self, mutation: Mutation) {
        self.mutation = mutation;
    }

    /// Number of slots.
    pub fn slots(&self) -> u32 {
        self.slots.len() as u32
    }

    /// Slots holding ready blocks.
    pub fn ready_slots(&self) -> u32 {
        self.ready
    }

    /// The state of `slot` and the block it holds.
    #[cfg(any(test, feature = "mutation"))]
    pub fn slot(&self, slot: u32) -> (SlotState, Option<BlockKey>, u32) {
        let m = &self.slots[slot as usize];
        (m.state, m.key, m.pins)
    }

    fn touch(&mut self, slot: u32) {
        self.tick += 1;
        self.slots[slot as usize].last_use = self.tick;
    }

    /// Pins `slot` once more (it must be ready).
    pub fn pin(&mut self, slot: u32) {
        let meta = &mut self.slots[slot as usize];
        assert_eq!(
            meta.state,
            SlotState::Ready,
            "pinning slot {slot}: not ready"
        );
        meta.pins += 1;
        if let Some(score) = meta.scored.take() {
            self.evictable.remove(&score);
        }
    }

    /// Drops one pin of `slot`.
    pub fn unpin(&mut self, slot: u32) {
        let meta = &mut self.slots[slot as usize];
        assert!(meta.pins > 0, "unbalanced unpin of slot {slot}");
        meta.pins -= 1;
        if meta.pins == 0 && !meta.queued {
            meta.queued = true;
            self.unscored.push(slot);
        }
    }

    /// The slot of `key` if it is ready, pinned for the caller (counts no hit).
    pub fn peek(&mut self, key: &BlockKey) -> Option<u32> {
        let slot = *self.index.get(key)?;
        if self.slots[slot as usize].state != SlotState::Ready {
            return None;
        }
        self.touch(slot);
        self.pin(slot);
        Some(slot)
    }

    /// Whether `key` is ready in memory (changes nothing).
    pub fn contains(&self, key: &BlockKey) -> bool {
        self.index
            .get(key)
            .is_some_and(|&s| self.slots[s as usize].state == SlotState::Ready)
    }

    /// Looks `key` up at `now_ns`; on a miss claims a slot for it (see [`CoreLookup`]).
    /// Errors: the block failed less than the retry time ago, or no slot is free.
    pub fn begin(
        &mut self,
        key: BlockKey,
        now_ns: u64,
        demand: &dyn Demand,
    ) -> Result<CoreLookup, FetchError> {
        self.begin_with(key, now_ns, demand, Admit::Always)
    }

    /// [`CacheCore::begin`] for a read ahead: a miss takes an empty slot, or evicts a
    /// block only if that block's next use is farther than `key`'s own (a block never
    /// needed again counts as farthest). Reading ahead never pushes out what a session
    /// needs sooner than what is read: when the pool holds only sooner blocks the answer
    /// is [`FetchError::Full`] and the block is read when it is due (by `begin`).
    pub fn begin_ahead(
        &mut self,
        key: BlockKey,
        now_ns: u64,
        demand: &dyn Demand,
    ) -> Result<CoreLookup, FetchError> {
        let floor = demand
            .next_use(key.toi, key.member, key.block)
            .map(|d| now_ns.saturating_add(d));
        match floor {
            Some(at_ns) => self.begin_with(key, now_ns, demand, Admit::FartherThan(at_ns)),
            // Nobody will need it: not worth any eviction.
            None => self.begin_with(key, now_ns, demand, Admit::FartherThan(u64::MAX)),
        }
    }

    fn begin_with(
        &mut self,
        key: BlockKey,
        now_ns: u64,
        demand: &dyn Demand,
        admit: Admit,
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
        let slot = self.victim(now_ns, demand, admit).ok_or(FetchError::Full)?;
        let meta = &mut self.slots[slot as usize];
        #[cfg(any(test, feature = "mutation"))]
        if self.mutation == Mutation::EvictPinned {
            meta.pins = 0;
        }
        assert_eq!(meta.pins, 0, "victim slot {slot} is pinned");
        assert!(meta.scored.is_none(), "victim slot {slot} still evictable");
        let evicted = meta.key.take();
        if meta.state == SlotState::Ready {
            self.ready -= 1;
        }
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
    pub fn finish(
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
                self.ready += 1;
                self.touch(slot);
                self.pin(slot);
                Ok(())
            }
            Err(why) => {
                meta.state = SlotState::Empty;
                meta.key = None;
                self.free.push(slot);
                self.index.remove(&key);
                self.failed.insert(key, (now_ns, why.clone()));
                Err(FetchError::Failed(why))
            }
        }
    }

    /// `slot`'s score at `now_ns`, if it is evictable (ready and unpinned).
    fn score(&self, slot: u32, now_ns: u64, demand: &dyn Demand) -> Option<Score> {
        let meta = &self.slots[slot as usize];
        if meta.state != SlotState::Ready || meta.pins != 0 {
            return None;
        }
        let key = meta.key?;
        let at_ns = demand
            .next_use(key.toi, key.member, key.block)
            .map_or(u64::MAX, |d| now_ns.saturating_add(d));
        Some((at_ns, Reverse(meta.last_use), slot))
    }

    /// Puts `slot` in the evictable set with its score at `now_ns` (or takes it out if it
    /// is not evictable).
    fn rescore(&mut self, slot: u32, now_ns: u64, demand: &dyn Demand) {
        if let Some(old) = self.slots[slot as usize].scored.take() {
            self.evictable.remove(&old);
        }
        let fresh = self.score(slot, now_ns, demand);
        if let Some(score) = fresh {
            self.evictable.insert(score);
        }
        self.slots[slot as usize].scored = fresh;
    }

    /// Chooses a slot to (re)use: empty first, then the unpinned ready block whose next use
    /// is farthest (never needed counts as infinitely far; ties by least recent use), as
    /// scored (see the module's doc). A loading or pinned slot is never chosen, nor (with
    /// [`Admit::FartherThan`]) a block needed no later than the bound. Takes the chosen
    /// slot out of the evictable set.
    fn victim(&mut self, now_ns: u64, demand: &dyn Demand, admit: Admit) -> Option<u32> {
        #[cfg(any(test, feature = "mutation"))]
        if self.mutation == Mutation::EvictPinned {
            let pinned = self.slots.iter().position(|m| m.pins > 0);
            if let Some(i) = pinned {
                return Some(i as u32);
            }
        }
        if let Some(slot) = self.free.pop() {
            return Some(slot);
        }
        for slot in std::mem::take(&mut self.unscored) {
            self.slots[slot as usize].queued = false;
            self.rescore(slot, now_ns, demand);
        }
        let n = self.slots();
        for _ in 0..REFRESH_PER_MISS.min(n) {
            let slot = self.hand;
            self.hand = (self.hand + 1) % n;
            if self.slots[slot as usize].scored.is_some() {
                self.rescore(slot, now_ns, demand);
            }
        }
        for _ in 0..REFRESH_PER_MISS {
            let (_, _, slot) = self.evictable.pop_last()?;
            self.slots[slot as usize].scored = None;
            let Some(fresh) = self.score(slot, now_ns, demand) else {
                continue;
            };
            if self.evictable.last().is_none_or(|next| fresh >= *next) {
                if !admit.allows(fresh.0) {
                    self.evictable.insert(fresh);
                    self.slots[slot as usize].scored = Some(fresh);
                    return None;
                }
                return Some(slot);
            }
            self.evictable.insert(fresh);
            self.slots[slot as usize].scored = Some(fresh);
        }
        let &(at_ns, _, slot) = self.evictable.last()?;
        if !admit.allows(at_ns) {
            return None;
        }
        self.evictable.pop_last();
        self.slots[slot as usize].scored = None;
        Some(slot)
    }

    /// The choice of a full walk of every slot (the policy before issue 21), for tests:
    /// an empty slot (any), else the unpinned ready block of farthest next use, ties by
    /// least recent use.
    #[cfg(any(test, feature = "mutation"))]
    pub fn victim_by_walk(&self, demand: &dyn Demand) -> Option<u32> {
        let mut best: Option<(u32, (u64, Reverse<u64>))> = None;
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
            let score = (distance, Reverse(meta.last_use));
            if best.as_ref().is_none_or(|(_, b)| score > *b) {
                best = Some((i as u32, score));
            }
        }
        best.map(|(i, _)| i)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use proptest::prelude::*;

    use super::*;

    /// A fixed next use per block (a frozen board of positions).
    struct Table(Vec<Option<u64>>);

    impl Demand for Table {
        fn next_use(&self, _toi: u32, _member: u32, block: u64) -> Option<u64> {
            *self.0.get(block as usize % self.0.len()).unwrap_or(&None)
        }
    }

    fn key(block: u64) -> BlockKey {
        BlockKey {
            toi: 1,
            member: 0,
            block,
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        /// Look block n up (a miss reads it, the read completing at once or failing).
        Get(u64, bool),
        /// Drop the oldest pin.
        Unpin,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0u64..64, prop::bool::weighted(0.1)).prop_map(|(b, f)| Op::Get(b, f)),
            2 => Just(Op::Unpin),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        /// With the positions and the clock fixed, every victim is the one the full walk
        /// of every slot chose (an empty slot when there is one).
        #[test]
        fn victim_equals_the_full_walk_when_positions_hold(
            slots in 1u32..24,
            table in prop::collection::vec(prop::option::of(0u64..1_000_000), 64),
            ops in prop::collection::vec(op(), 1..300),
        ) {
            let demand = Table(table);
            let now_ns = 5_000;
            let mut core = CacheCore::new(slots, 1);
            let mut pins: std::collections::VecDeque<u32> = Default::default();
            for op in ops {
                match op {
                    Op::Unpin => {
                        if let Some(slot) = pins.pop_front() {
                            core.unpin(slot);
                        }
                    }
                    Op::Get(block, fails) => {
                        let expect = core.victim_by_walk(&demand);
                        let expect_empty = expect
                            .is_some_and(|s| core.slot(s).0 == SlotState::Empty);
                        match core.begin(key(block), now_ns, &demand) {
                            Ok(CoreLookup::Ready(slot)) => pins.push_back(slot),
                            Ok(CoreLookup::Loading) => unreachable!("reads complete at once"),
                            Ok(CoreLookup::Load { slot, evicted }) => {
                                if expect_empty {
                                    prop_assert!(!evicted, "an empty slot was free");
                                } else {
                                    prop_assert_eq!(Some(slot), expect);
                                }
                                let outcome = if fails { Err("x".into()) } else { Ok(()) };
                                if core.finish(slot, key(block), outcome, now_ns).is_ok() {
                                    pins.push_back(slot);
                                }
                            }
                            Err(FetchError::Full) => prop_assert_eq!(expect, None),
                            Err(FetchError::Unavailable(_)) => {}
                            Err(e) => prop_assert!(false, "{e}"),
                        }
                    }
                }
                let ready = (0..slots).filter(|&s| core.slot(s).0 == SlotState::Ready).count();
                prop_assert_eq!(core.ready_slots() as usize, ready);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        /// A read ahead never evicts a block needed no later than the block it reads (a
        /// block never needed counts as farthest), takes an empty slot when there is one,
        /// and is refused only when every evictable block is needed sooner (or it is not
        /// needed at all).
        #[test]
        fn read_ahead_evicts_only_later_blocks(
            slots in 1u32..24,
            table in prop::collection::vec(prop::option::of(0u64..1_000_000), 64),
            ops in prop::collection::vec((0u64..64, prop::bool::ANY, prop::bool::weighted(0.3)), 1..300),
        ) {
            let demand = Table(table);
            let now_ns = 5_000;
            let at = |b: u64| demand.next_use(1, 0, b).map_or(u64::MAX, |d| now_ns + d);
            let mut core = CacheCore::new(slots, 1);
            let mut pins: std::collections::VecDeque<u32> = Default::default();
            for (block, ahead, unpin) in ops {
                if unpin {
                    if let Some(slot) = pins.pop_front() {
                        core.unpin(slot);
                    }
                    continue;
                }
                let before: Vec<_> = (0..slots).map(|s| core.slot(s)).collect();
                let evictable: Vec<u64> = before
                    .iter()
                    .filter(|(st, _, p)| *st == SlotState::Ready && *p == 0)
                    .filter_map(|(_, k, _)| k.map(|k| at(k.block)))
                    .collect();
                let any_empty = before.iter().any(|s| s.0 == SlotState::Empty);
                let r = if ahead {
                    core.begin_ahead(key(block), now_ns, &demand)
                } else {
                    core.begin(key(block), now_ns, &demand)
                };
                match r {
                    Ok(CoreLookup::Ready(slot)) => pins.push_back(slot),
                    Ok(CoreLookup::Load { slot, evicted }) => {
                        let (state, old, pinned) = before[slot as usize];
                        prop_assert_eq!(pinned, 0);
                        prop_assert!(!any_empty || state == SlotState::Empty);
                        if ahead && evicted {
                            let old = old.expect("an evicted block");
                            prop_assert!(at(old.block) > at(block),
                                "read ahead of {} (at {}) evicted {} (at {})",
                                block, at(block), old.block, at(old.block));
                        }
                        core.finish(slot, key(block), Ok(()), now_ns).unwrap();
                        pins.push_back(slot);
                    }
                    Ok(CoreLookup::Loading) => unreachable!("reads complete at once"),
                    Err(FetchError::Full) => {
                        prop_assert!(!any_empty, "refused with an empty slot");
                        if ahead {
                            prop_assert!(evictable.iter().all(|&e| e <= at(block) || at(block) == u64::MAX),
                                "refused a read ahead of {} (at {}) with later blocks {:?}",
                                block, at(block), evictable);
                        } else {
                            prop_assert!(evictable.is_empty());
                        }
                    }
                    Err(e) => prop_assert!(false, "{e}"),
                }
            }
        }
    }

    /// Positions moving under it (every miss sees another board): the victim is always
    /// unpinned, an empty slot when there is one, and never a loading slot.
    #[test]
    fn victim_is_valid_while_positions_move() {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let mut core = CacheCore::new(32, 1);
        let mut pins = Vec::new();
        for step in 0..20_000u64 {
            let table = Table(
                (0..64)
                    .map(|_| (next(4) != 0).then(|| next(1 << 30)))
                    .collect(),
            );
            if next(3) == 0 && !pins.is_empty() {
                let i = next(pins.len() as u64) as usize;
                core.unpin(pins.swap_remove(i));
                continue;
            }
            let before: Vec<_> = (0..32).map(|s| core.slot(s)).collect();
            let any_empty = before.iter().any(|s| s.0 == SlotState::Empty);
            match core.begin(key(next(128)), step, &table) {
                Ok(CoreLookup::Ready(slot)) => pins.push(slot),
                Ok(CoreLookup::Load { slot, .. }) => {
                    let (state, _, pinned) = before[slot as usize];
                    assert_eq!(pinned, 0, "step {step}: a pinned victim");
                    assert_ne!(state, SlotState::Loading, "step {step}: a loading victim");
                    assert!(!any_empty || state == SlotState::Empty, "step {step}");
                    let k = core.slot(slot).1.unwrap();
                    core.finish(slot, k, Ok(()), step).unwrap();
                    pins.push(slot);
                }
                Ok(CoreLookup::Loading) => unreachable!("reads complete at once"),
                Err(FetchError::Full) => {
                    assert!(
                        before.iter().all(|s| s.2 > 0),
                        "step {step}: full with room"
                    );
                }
                Err(e) => panic!("{e}"),
            }
        }
    }

    /// Micro-bench (issue 21): the cost of one victim choice with 65,536 ready, unpinned
    /// slots, the full walk against the ordered set. Run:
    /// `cargo test -p isnode-serve --release --lib cache::core::tests::victim_bench -- --ignored --nocapture`
    #[test]
    #[ignore = "a measurement, run by hand"]
    fn victim_bench() {
        const SLOTS: u32 = 65_536;
        const MISSES: u64 = 2_000;
        // Sessions every 4096 blocks: a block's next use is its distance to the one below.
        struct Every;
        impl Demand for Every {
            fn next_use(&self, _: u32, _: u32, block: u64) -> Option<u64> {
                (block % 8192 < 6000).then_some((block % 4096) * 1_000)
            }
        }
        let mut core = CacheCore::new(SLOTS, 1);
        for b in 0..u64::from(SLOTS) {
            let Ok(CoreLookup::Load { slot, .. }) = core.begin(key(b), 0, &Every) else {
                panic!("fill");
            };
            core.finish(slot, key(b), Ok(()), 0).unwrap();
            core.unpin(slot);
        }
        let (mut walk_ns, mut set_ns) = (0u128, 0u128);
        for i in 0..MISSES {
            let t = Instant::now();
            std::hint::black_box(core.victim_by_walk(&Every));
            walk_ns += t.elapsed().as_nanos();
            let b = u64::from(SLOTS) + i;
            let t = Instant::now();
            let r = core.begin(key(b), i, &Every);
            set_ns += t.elapsed().as_nanos();
            let Ok(CoreLookup::Load { slot, .. }) = r else {
                panic!("miss");
            };
            core.finish(slot, key(b), Ok(()), i).unwrap();
            core.unpin(slot);
        }
        println!(
            "victim choice, {SLOTS} slots: full walk {} ns, ordered set (whole miss) {} ns",
            walk_ns / u128::from(MISSES),
            set_ns / u128::from(MISSES)
        );
    }
}
