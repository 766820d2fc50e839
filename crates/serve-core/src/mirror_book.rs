//! The HTTP mirror's bookkeeping: which codewords of which objects are held as contiguous
//! original bytes (for `sendfile` to players), which are being filled, which are pinned by
//! a response still being sent, and which to give back when a new one needs room.
//!
//! Pure and deterministic; the shell (`isnode-serve`, `api/mirror.rs`) fills and punches the
//! memory. A region is one codeword's original bytes of one object; it lies in an
//! **extent**, the unit memory is taken and given back in (a region of its own in a
//! page-backed file; a huge page holding several regions when the file gets huge pages,
//! which can only be given back whole). Eviction takes the least recently used extent that
//! no response pins and nobody fills, with every region in it; a region being filled is
//! used by nobody else until it is ready (they take the copy path).

use std::collections::{BTreeMap, HashMap};

/// A region: codeword `sbn` of the object with TOI `toi`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RegionKey {
    /// The object's TOI.
    pub toi: u32,
    /// The codeword.
    pub sbn: u32,
}

/// An extent: the `index`th of the object with TOI `toi` (the shell places regions in it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExtentKey {
    /// The object's TOI.
    pub toi: u32,
    /// The extent's index in the object's file.
    pub index: u32,
}

/// Where a claimed region lies: its extent and the extent's size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    /// The extent holding the region.
    pub extent: ExtentKey,
    /// Bytes of memory the extent takes while any region of it is held.
    pub extent_bytes: u64,
}

/// What a response asking for a region gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// The region is held: send from it (pinned until [`MirrorBook::unpin`]).
    Ready,
    /// The region is the caller's to fill (pinned): call [`MirrorBook::filled`] after.
    /// The extents in `evicted` were given back to make room: punch them now.
    Fill {
        /// Extents given back, whose memory the caller releases.
        evicted: Vec<ExtentKey>,
    },
    /// Another response is filling it, or there is no room: copy without the mirror.
    Bypass,
}

#[derive(Debug)]
struct Region {
    extent: ExtentKey,
    ready: bool,
    pins: u32,
}

#[derive(Debug)]
struct Extent {
    bytes: u64,
    /// The codewords held in it.
    regions: Vec<u32>,
    /// Pins of its regions, summed (a filling region holds its filler's pin).
    pins: u32,
    /// Tick of the last claim of any of its regions (its key in `lru`).
    used: u64,
}

/// The regions held and their budget.
#[derive(Debug)]
pub struct MirrorBook {
    budget_bytes: u64,
    /// Most that may be held: the budget, or what a lowered budget could not give back
    /// at once (pinned and filling extents), which only falls until the budget holds.
    ceiling_bytes: u64,
    held_bytes: u64,
    tick: u64,
    regions: HashMap<RegionKey, Region>,
    extents: HashMap<ExtentKey, Extent>,
    /// Extents by last use.
    lru: BTreeMap<u64, ExtentKey>,
}

/// Most extents looked at for one eviction before giving up (pinned ones are skipped).
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
            extents: HashMap::new(),
            lru: BTreeMap::new(),
        }
    }

    /// Bytes held (the extents with a region ready or filling, whole).
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
    /// readers, and grows it back): least recently used, unpinned extents are given back
    /// until what is held fits; punch the extents returned. Pinned and filling extents
    /// stay: until they are done the book may hold more than a lowered budget, and claims
    /// fill nothing new meanwhile.
    pub fn set_budget(&mut self, budget_bytes: u64) -> Vec<ExtentKey> {
        self.budget_bytes = budget_bytes;
        let victims = self.victims(budget_bytes, usize::MAX);
        self.give_back(&victims);
        self.ceiling_bytes = budget_bytes.max(self.held_bytes);
        self.check();
        victims
    }

    /// Whether any extent of object `toi` is held.
    pub fn holds_object(&self, toi: u32) -> bool {
        self.extents.keys().any(|k| k.toi == toi)
    }

    /// A response asks for region `key`, which lies at `place`.
    pub fn claim(&mut self, key: RegionKey, place: Place) -> Claim {
        self.tick += 1;
        if let Some(r) = self.regions.get_mut(&key) {
            if !r.ready {
                return Claim::Bypass;
            }
            r.pins += 1;
            let extent = r.extent;
            self.touch(extent, 1);
            return Claim::Ready;
        }
        let mut evicted = Vec::new();
        if self.held_bytes > self.budget_bytes {
            // Over a lowered budget: nothing new, not even in an extent held (its pages
            // may be small ones, taken as they are written).
            return Claim::Bypass;
        }
        if !self.extents.contains_key(&place.extent) {
            match self.make_room(place.extent_bytes) {
                Some(given_back) => evicted = given_back,
                None => return Claim::Bypass,
            }
            let extent = Extent {
                bytes: place.extent_bytes,
                regions: Vec::new(),
                pins: 0,
                used: self.tick,
            };
            self.extents.insert(place.extent, extent);
            self.lru.insert(self.tick, place.extent);
            self.held_bytes += place.extent_bytes;
        }
        if let Some(e) = self.extents.get_mut(&place.extent) {
            e.regions.push(key.sbn);
        }
        let region = Region {
            extent: place.extent,
            ready: false,
            pins: 1,
        };
        self.regions.insert(key, region);
        self.touch(place.extent, 1);
        self.check();
        Claim::Fill { evicted }
    }

    /// The fill of `key` ended: ready to share, or (`FillEnd::Failed`) forgotten (its
    /// extent stays until it is evicted).
    pub fn filled(&mut self, key: RegionKey, end: FillEnd) {
        let Some(r) = self.regions.get_mut(&key) else {
            return;
        };
        debug_assert!(!r.ready, "a region is filled once");
        match end {
            FillEnd::Ready => r.ready = true,
            FillEnd::Failed => {
                if let Some(r) = self.regions.remove(&key) {
                    if let Some(e) = self.extents.get_mut(&r.extent) {
                        e.pins -= r.pins;
                        e.regions.retain(|&s| s != key.sbn);
                    }
                }
            }
        }
        self.check();
    }

    /// A response is done with `key` (one pin of [`Claim::Ready`] or [`Claim::Fill`]).
    pub fn unpin(&mut self, key: RegionKey) {
        if let Some(r) = self.regions.get_mut(&key) {
            debug_assert!(r.pins > 0, "unpinned more than pinned");
            if r.pins > 0 {
                r.pins -= 1;
                if let Some(e) = self.extents.get_mut(&r.extent) {
                    e.pins -= 1;
                }
            }
        }
    }

    /// `extent` used now, with `pins` more.
    fn touch(&mut self, extent: ExtentKey, pins: u32) {
        if let Some(e) = self.extents.get_mut(&extent) {
            self.lru.remove(&e.used);
            e.used = self.tick;
            e.pins += pins;
            self.lru.insert(self.tick, extent);
        }
    }

    /// Least recently used, unpinned extents, looking at most at `scan`, until what is held
    /// is at most `target_bytes` (or as close as they allow).
    fn victims(&self, target_bytes: u64, scan: usize) -> Vec<ExtentKey> {
        let mut victims = Vec::new();
        let mut held = self.held_bytes;
        for key in self.lru.values().take(scan) {
            if held <= target_bytes {
                break;
            }
            if let Some(e) = self.extents.get(key).filter(|e| e.pins == 0) {
                held -= e.bytes;
                victims.push(*key);
            }
        }
        victims
    }

    /// `victims` and every region in them forgotten.
    fn give_back(&mut self, victims: &[ExtentKey]) {
        for key in victims {
            if let Some(e) = self.extents.remove(key) {
                debug_assert_eq!(e.pins, 0, "a pinned extent is never given back");
                self.lru.remove(&e.used);
                self.held_bytes -= e.bytes;
                for sbn in e.regions {
                    self.regions.remove(&RegionKey { toi: key.toi, sbn });
                }
            }
        }
    }

    /// Least recently used, unpinned extents given back until `bytes` more fit; `None`
    /// (nothing given back) if they cannot be found.
    fn make_room(&mut self, bytes: u64) -> Option<Vec<ExtentKey>> {
        let target = self.budget_bytes.checked_sub(bytes)?;
        let victims = self.victims(target, EVICT_SCAN);
        let freed: u64 = victims
            .iter()
            .filter_map(|k| self.extents.get(k))
            .map(|e| e.bytes)
            .sum();
        if self.held_bytes - freed > target {
            return None;
        }
        self.give_back(&victims);
        Some(victims)
    }

    fn check(&self) {
        debug_assert!(self.held_bytes <= self.ceiling_bytes);
        debug_assert_eq!(
            self.held_bytes,
            self.extents.values().map(|e| e.bytes).sum::<u64>()
        );
        debug_assert_eq!(
            self.regions.len(),
            self.extents
                .values()
                .map(|e| e.regions.len())
                .sum::<usize>()
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

    fn e(index: u32) -> ExtentKey {
        ExtentKey { toi: 1, index }
    }

    /// Region `sbn` alone in an extent of `bytes`.
    fn own(sbn: u32, bytes: u64) -> Place {
        Place {
            extent: e(sbn),
            extent_bytes: bytes,
        }
    }

    #[test]
    fn a_region_is_filled_once_then_shared() {
        let mut b = MirrorBook::new(100);
        assert_eq!(b.claim(k(0), own(0, 40)), Claim::Fill { evicted: vec![] });
        assert_eq!(b.claim(k(0), own(0, 40)), Claim::Bypass, "being filled");
        b.filled(k(0), FillEnd::Ready);
        assert_eq!(b.claim(k(0), own(0, 40)), Claim::Ready);
        assert_eq!(b.held_bytes(), 40);
    }

    #[test]
    fn the_least_recently_used_unpinned_region_makes_room() {
        let mut b = MirrorBook::new(100);
        for s in 0..2 {
            assert!(matches!(b.claim(k(s), own(s, 50)), Claim::Fill { .. }));
            b.filled(k(s), FillEnd::Ready);
        }
        // Region 0 pinned (claimed twice, unpinned once): region 1 goes although
        // region 0 is older.
        b.unpin(k(1));
        assert_eq!(
            b.claim(k(2), own(2, 50)),
            Claim::Fill {
                evicted: vec![e(1)]
            }
        );
        // Everything pinned: no room.
        b.filled(k(2), FillEnd::Ready);
        assert_eq!(b.claim(k(3), own(3, 50)), Claim::Bypass);
        b.unpin(k(0));
        assert_eq!(
            b.claim(k(3), own(3, 50)),
            Claim::Fill {
                evicted: vec![e(0)]
            }
        );
    }

    #[test]
    fn a_lowered_budget_gives_back_unpinned_regions_and_fills_nothing_until_it_fits() {
        let mut b = MirrorBook::new(200);
        for s in 0..4 {
            assert!(matches!(b.claim(k(s), own(s, 50)), Claim::Fill { .. }));
            b.filled(k(s), FillEnd::Ready);
        }
        for s in 1..4 {
            b.unpin(k(s));
        }
        // Region 0 is pinned: the others go, oldest first, until 60 fits... it cannot.
        assert_eq!(b.set_budget(60), vec![e(1), e(2), e(3)]);
        assert_eq!(b.held_bytes(), 50);
        assert_eq!(b.claim(k(4), own(4, 50)), Claim::Bypass, "over the budget");
        b.unpin(k(0));
        assert_eq!(b.set_budget(200), vec![]);
        assert_eq!(b.claim(k(4), own(4, 50)), Claim::Fill { evicted: vec![] });
    }

    #[test]
    fn a_failed_fill_is_forgotten_and_too_big_is_bypassed() {
        let mut b = MirrorBook::new(100);
        assert!(matches!(b.claim(k(0), own(0, 60)), Claim::Fill { .. }));
        b.filled(k(0), FillEnd::Failed);
        // The region is forgotten, its extent stays until it is evicted.
        assert_eq!((b.regions(), b.held_bytes()), (0, 60));
        assert_eq!(b.claim(k(0), own(0, 60)), Claim::Fill { evicted: vec![] });
        b.filled(k(0), FillEnd::Failed);
        assert_eq!(b.claim(k(1), own(1, 101)), Claim::Bypass);
        assert_eq!(MirrorBook::new(0).claim(k(0), own(0, 1)), Claim::Bypass);
    }

    /// Regions 0..3 in extent 0, 3..6 in extent 1 (a huge page holding three codewords).
    fn shared(sbn: u32) -> Place {
        Place {
            extent: e(sbn / 3),
            extent_bytes: 300,
        }
    }

    #[test]
    fn regions_of_one_extent_share_its_memory_and_go_with_it() {
        let mut b = MirrorBook::new(600);
        assert_eq!(b.claim(k(0), shared(0)), Claim::Fill { evicted: vec![] });
        b.filled(k(0), FillEnd::Ready);
        // Region 1 lies in the same extent: no more memory.
        assert_eq!(b.claim(k(1), shared(1)), Claim::Fill { evicted: vec![] });
        b.filled(k(1), FillEnd::Ready);
        assert_eq!((b.regions(), b.held_bytes()), (2, 300));
        assert_eq!(b.claim(k(3), shared(3)), Claim::Fill { evicted: vec![] });
        b.filled(k(3), FillEnd::Ready);
        assert_eq!(b.held_bytes(), 600);
        // Region 1 still pinned: extent 0 stays, so extent 1 (used later, unpinned) goes.
        b.unpin(k(0));
        b.unpin(k(3));
        assert_eq!(
            b.claim(k(6), shared(6)),
            Claim::Fill {
                evicted: vec![e(1)]
            }
        );
        b.filled(k(6), FillEnd::Ready);
        // Region 1 done: extent 0 goes with both its regions.
        b.unpin(k(1));
        b.unpin(k(6));
        assert_eq!(b.set_budget(300), vec![e(0)]);
        assert_eq!((b.regions(), b.held_bytes()), (1, 300));
        assert_eq!(
            b.claim(k(0), shared(0)),
            Claim::Fill {
                evicted: vec![e(2)]
            }
        );
    }

    proptest! {
        /// Whatever the order of claims, fills, unpins and budget changes: the budget
        /// holds (over a lowered one only by extents with a pinned or filling region, and
        /// no claim fills meanwhile), an extent with a pinned or filling region is never
        /// given back, and a region is ready only once filled.
        #[test]
        fn the_budget_holds_and_pins_are_respected(
            ops in proptest::collection::vec((0u8..4, 0u32..12), 1..400)
        ) {
            let mut b = MirrorBook::new(1000);
            let mut pins: HashMap<RegionKey, u32> = HashMap::new();
            let mut filling: Vec<RegionKey> = Vec::new();
            let held_by = |pins: &HashMap<RegionKey, u32>, filling: &[RegionKey], x: ExtentKey| {
                pins.iter().any(|(k, p)| *p > 0 && k.sbn / 3 == x.index)
                    || filling.iter().any(|k| k.sbn / 3 == x.index)
            };
            for (op, s) in ops {
                let key = k(s);
                match op {
                    0 => match b.claim(key, shared(s)) {
                        Claim::Ready => {
                            prop_assert!(!filling.contains(&key));
                            *pins.entry(key).or_default() += 1;
                        }
                        Claim::Fill { evicted } => {
                            prop_assert!(b.held_bytes() <= b.budget_bytes());
                            for x in evicted {
                                prop_assert!(!held_by(&pins, &filling, x));
                                pins.retain(|k, _| k.sbn / 3 != x.index);
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
                        let budget = u64::from(s) * 100;
                        for x in b.set_budget(budget) {
                            prop_assert!(!held_by(&pins, &filling, x));
                            pins.retain(|k, _| k.sbn / 3 != x.index);
                        }
                        let kept = (0..4)
                            .filter(|&i| held_by(&pins, &filling, e(i)))
                            .count() as u64
                            * 300;
                        prop_assert!(b.held_bytes() <= budget.max(kept));
                    }
                }
                prop_assert!(b.held_bytes() <= 1200);
            }
        }
    }
}
