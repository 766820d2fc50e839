//! The HTTP mirror's bookkeeping: which codewords of which objects are held as contiguous
//! original bytes (for `sendfile` to players), which are being filled, which are pinned by
//! a response still being sent, and which to give back when a new one needs room.
//!
//! Pure and deterministic; the shell (`isnode-serve`, `api/mirror.rs`) fills and punches the
//! memory. A region is one codeword's original bytes of one object. Eviction takes the
//! least recently used region that no response pins; a region being filled is never a
//! candidate and is used by nobody else until it is ready (they take the copy path).

use std::collections::{BTreeMap, HashMap};

/// A region: codeword `sbn` of the object with TOI `toi`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RegionKey {
    /// The object's TOI.
    pub toi: u32,
    /// The codeword.
    pub sbn: u32,
}

/// What a response asking for a region gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// The region is held: send from it (pinned until [`MirrorBook::unpin`]).
    Ready,
    /// The region is the caller's to fill (pinned): call [`MirrorBook::filled`] after.
    /// The regions in `evicted` were given back to make room: punch them now.
    Fill {
        /// Regions given back, whose memory the caller releases.
        evicted: Vec<RegionKey>,
    },
    /// Another response is filling it, or there is no room: copy without the mirror.
    Bypass,
}

#[derive(Debug)]
struct Region {
    bytes: u64,
    ready: bool,
    pins: u32,
    /// Tick of the last claim (its key in `lru` while ready).
    used: u64,
}

/// The regions held and their budget.
#[derive(Debug)]
pub struct MirrorBook {
    budget_bytes: u64,
    /// Most that may be held: the budget, or what a lowered budget could not give back
    /// at once (pinned and filling regions), which only falls until the budget holds.
    ceiling_bytes: u64,
    held_bytes: u64,
    tick: u64,
    regions: HashMap<RegionKey, Region>,
    /// Ready regions by last use.
    lru: BTreeMap<u64, RegionKey>,
}

/// Most regions looked at for one eviction before giving up (pinned ones are skipped).
const EVICT_SCAN: usize = 64;

impl MirrorBook {
    /// An empty book holding at most `budget_bytes` (0: the mirror is off).
    pub fn new(budget_bytes: u64) -> MirrorBook {
        MirrorBook {
            budget_bytes,
            ceiling_bytes: budget_bytes,
            held_bytes: 0,
            tick: 0,
            regions: HashMap::new(),
            lru: BTreeMap::new(),
        }
    }

    /// Bytes held (ready or filling).
    pub fn held_bytes(&self) -> u64 {
        self.held_bytes
    }

    /// Regions held (ready or filling).
    pub fn regions(&self) -> usize {
        self.regions.len()
    }

    /// The budget in force.
    pub fn budget_bytes(&self) -> u64 {
        self.budget_bytes
    }

    /// Changes the budget (the server shrinks the mirror when its memory is wanted for
    /// readers, and grows it back): least recently used, unpinned ready regions are given
    /// back until what is held fits; punch the regions returned. Pinned and filling regions
    /// stay: until they are done the book may hold more than a lowered budget, and claims
    /// fill nothing new meanwhile.
    pub fn set_budget(&mut self, budget_bytes: u64) -> Vec<RegionKey> {
        self.budget_bytes = budget_bytes;
        let mut victims = Vec::new();
        let mut held = self.held_bytes;
        for key in self.lru.values() {
            if held <= budget_bytes {
                break;
            }
            if let Some(r) = self.regions.get(key).filter(|r| r.pins == 0) {
                held -= r.bytes;
                victims.push(*key);
            }
        }
        for key in &victims {
            if let Some(r) = self.regions.remove(key) {
                self.lru.remove(&r.used);
                self.held_bytes -= r.bytes;
            }
        }
        self.ceiling_bytes = budget_bytes.max(self.held_bytes);
        self.check();
        victims
    }

    /// Whether any region of object `toi` is held.
    pub fn holds_object(&self, toi: u32) -> bool {
        self.regions.keys().any(|k| k.toi == toi)
    }

    /// A response asks for `key`, `bytes` long.
    pub fn claim(&mut self, key: RegionKey, bytes: u64) -> Claim {
        self.tick += 1;
        let tick = self.tick;
        if let Some(r) = self.regions.get_mut(&key) {
            if !r.ready {
                return Claim::Bypass;
            }
            self.lru.remove(&r.used);
            r.used = tick;
            r.pins += 1;
            self.lru.insert(tick, key);
            return Claim::Ready;
        }
        let Some(evicted) = self.make_room(bytes) else {
            return Claim::Bypass;
        };
        let region = Region {
            bytes,
            ready: false,
            pins: 1,
            used: tick,
        };
        self.regions.insert(key, region);
        self.held_bytes += bytes;
        self.check();
        Claim::Fill { evicted }
    }

    /// The fill of `key` ended: ready to share, or (`FillEnd::Failed`) forgotten.
    pub fn filled(&mut self, key: RegionKey, end: FillEnd) {
        let Some(r) = self.regions.get_mut(&key) else {
            return;
        };
        debug_assert!(!r.ready, "a region is filled once");
        match end {
            FillEnd::Ready => {
                r.ready = true;
                self.lru.insert(r.used, key);
            }
            FillEnd::Failed => {
                self.held_bytes -= r.bytes;
                self.regions.remove(&key);
            }
        }
        self.check();
    }

    /// A response is done with `key` (one pin of [`Claim::Ready`] or [`Claim::Fill`]).
    pub fn unpin(&mut self, key: RegionKey) {
        if let Some(r) = self.regions.get_mut(&key) {
            debug_assert!(r.pins > 0, "unpinned more than pinned");
            r.pins = r.pins.saturating_sub(1);
        }
    }

    /// Least recently used, unpinned ready regions given back until `bytes` more fit;
    /// `None` (nothing given back) if they cannot be found.
    fn make_room(&mut self, bytes: u64) -> Option<Vec<RegionKey>> {
        if bytes > self.budget_bytes {
            return None;
        }
        let mut victims = Vec::new();
        let mut freed = 0u64;
        for (_, key) in self.lru.iter().take(EVICT_SCAN) {
            if self.held_bytes - freed + bytes <= self.budget_bytes {
                break;
            }
            let Some(r) = self.regions.get(key) else {
                continue;
            };
            if r.pins == 0 {
                freed += r.bytes;
                victims.push(*key);
            }
        }
        if self.held_bytes - freed + bytes > self.budget_bytes {
            return None;
        }
        for key in &victims {
            if let Some(r) = self.regions.remove(key) {
                self.lru.remove(&r.used);
                self.held_bytes -= r.bytes;
            }
        }
        Some(victims)
    }

    fn check(&self) {
        debug_assert!(self.held_bytes <= self.ceiling_bytes);
        debug_assert_eq!(
            self.held_bytes,
            self.regions.values().map(|r| r.bytes).sum::<u64>()
        );
    }
}

/// How a fill ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FillEnd {
    /// The region holds its bytes.
    Ready,
    /// It could not be filled.
    Failed,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn k(sbn: u32) -> RegionKey {
        RegionKey { toi: 1, sbn }
    }

    #[test]
    fn a_region_is_filled_once_then_shared() {
        let mut b = MirrorBook::new(100);
        assert_eq!(b.claim(k(0), 40), Claim::Fill { evicted: vec![] });
        assert_eq!(b.claim(k(0), 40), Claim::Bypass, "being filled");
        b.filled(k(0), FillEnd::Ready);
        assert_eq!(b.claim(k(0), 40), Claim::Ready);
        assert_eq!(b.held_bytes(), 40);
    }

    #[test]
    fn the_least_recently_used_unpinned_region_makes_room() {
        let mut b = MirrorBook::new(100);
        for s in 0..2 {
            assert!(matches!(b.claim(k(s), 50), Claim::Fill { .. }));
            b.filled(k(s), FillEnd::Ready);
        }
        // Region 0 pinned (claimed twice, unpinned once): region 1 goes although
        // region 0 is older.
        b.unpin(k(1));
        assert_eq!(
            b.claim(k(2), 50),
            Claim::Fill {
                evicted: vec![k(1)]
            }
        );
        // Everything pinned: no room.
        b.filled(k(2), FillEnd::Ready);
        assert_eq!(b.claim(k(3), 50), Claim::Bypass);
        b.unpin(k(0));
        assert_eq!(
            b.claim(k(3), 50),
            Claim::Fill {
                evicted: vec![k(0)]
            }
        );
    }

    #[test]
    fn a_lowered_budget_gives_back_unpinned_regions_and_fills_nothing_until_it_fits() {
        let mut b = MirrorBook::new(200);
        for s in 0..4 {
            assert!(matches!(b.claim(k(s), 50), Claim::Fill { .. }));
            b.filled(k(s), FillEnd::Ready);
        }
        for s in 1..4 {
            b.unpin(k(s));
        }
        // Region 0 is pinned: the others go, oldest first, until 60 fits... it cannot.
        assert_eq!(b.set_budget(60), vec![k(1), k(2), k(3)]);
        assert_eq!(b.held_bytes(), 50);
        assert_eq!(b.claim(k(4), 50), Claim::Bypass, "over the budget");
        b.unpin(k(0));
        assert_eq!(b.set_budget(200), vec![]);
        assert_eq!(b.claim(k(4), 50), Claim::Fill { evicted: vec![] });
    }

    #[test]
    fn a_failed_fill_is_forgotten_and_too_big_is_bypassed() {
        let mut b = MirrorBook::new(100);
        assert!(matches!(b.claim(k(0), 60), Claim::Fill { .. }));
        b.filled(k(0), FillEnd::Failed);
        assert_eq!(b.held_bytes(), 0);
        assert_eq!(b.claim(k(1), 101), Claim::Bypass);
        assert_eq!(MirrorBook::new(0).claim(k(0), 1), Claim::Bypass);
    }

    proptest! {
        /// Whatever the order of claims, fills, unpins and budget changes: the budget
        /// holds (over a lowered one only by pinned or filling regions, and no claim
        /// fills meanwhile), a pinned or filling region is never given back, and every
        /// region evicted was ready.
        #[test]
        fn the_budget_holds_and_pins_are_respected(
            ops in proptest::collection::vec((0u8..4, 0u32..12), 1..400)
        ) {
            let mut b = MirrorBook::new(500);
            let mut pins: HashMap<RegionKey, u32> = HashMap::new();
            let mut filling: Vec<RegionKey> = Vec::new();
            for (op, s) in ops {
                let key = k(s);
                match op {
                    0 => match b.claim(key, 100 + u64::from(s) * 10) {
                        Claim::Ready => *pins.entry(key).or_default() += 1,
                        Claim::Fill { evicted } => {
                            prop_assert!(b.held_bytes() <= b.budget_bytes());
                            for e in evicted {
                                prop_assert_eq!(pins.get(&e).copied().unwrap_or(0), 0);
                                prop_assert!(!filling.contains(&e));
                            }
                            *pins.entry(key).or_default() += 1;
                            filling.push(key);
                        }
                        Claim::Bypass => {}
                    },
                    1 => if let Some(f) = filling.pop() {
                        b.filled(f, if s % 4 == 0 { FillEnd::Failed } else { FillEnd::Ready });
                        if s % 4 == 0 {
                            pins.remove(&f);
                        }
                    },
                    2 => if let Some(p) = pins.get_mut(&key).filter(|p| **p > 0) {
                        if !filling.contains(&key) {
                            *p -= 1;
                            b.unpin(key);
                        }
                    },
                    _ => {
                        let budget = u64::from(s) * 50;
                        for e in b.set_budget(budget) {
                            prop_assert_eq!(pins.get(&e).copied().unwrap_or(0), 0);
                            prop_assert!(!filling.contains(&e));
                        }
                        let kept: u64 = pins
                            .iter()
                            .filter(|(_, p)| **p > 0)
                            .map(|(k, _)| 100 + u64::from(k.sbn) * 10)
                            .sum();
                        prop_assert!(b.held_bytes() <= budget.max(kept));
                    }
                }
                prop_assert!(b.held_bytes() <= 600);
            }
        }
    }
}
