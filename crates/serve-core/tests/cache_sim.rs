//! A virtual-clock simulation of the cache's state machine: sessions walk through the
//! blocks of a few objects at their own pace, reads complete after random delays or fail,
//! sends hold pins for a while. A model of the pool's memory (which block each slot's
//! bytes hold) checks that a pinned block is never overwritten, that a block is never read
//! twice while it stays resident, that failed blocks are not retried before their time,
//! and that followers of a session hit the blocks their leader loaded.

use std::collections::{BTreeMap, HashMap};

use proptest::prelude::*;

use isnode_serve_core::block::{BlockKey, Demand, FetchError};
use isnode_serve_core::cache_core::{CacheCore, CoreLookup, Mutation, SlotState};

const RETRY_NS: u64 = 2_000_000_000;
const BLOCKS: u64 = 40;

/// Sessions' positions, as the data plane publishes them (block index = stream time).
struct Positions(Vec<(u32, u64)>);

impl Demand for Positions {
    fn next_use(&self, toi: u32, _member: u32, block: u64) -> Option<u64> {
        self.0
            .iter()
            .filter(|(t, at)| *t == toi && *at <= block)
            .map(|(_, at)| (block - at) * 1_000_000)
            .min()
    }
}

struct Session {
    toi: u32,
    next_block: u64,
    /// Virtual ns between blocks.
    period_ns: u64,
    due_ns: u64,
}

#[derive(Default)]
struct World {
    /// Which block the bytes of each slot hold (what a read wrote).
    memory: Vec<Option<BlockKey>>,
    /// Reads in flight: completion time → (slot, key, fails).
    reads: BTreeMap<(u64, u32), (BlockKey, bool)>,
    /// Pins held by sends: release time → slots.
    pins: BTreeMap<(u64, u64), u32>,
    /// When each block last failed.
    failed_at: HashMap<BlockKey, u64>,
    reads_started: HashMap<BlockKey, u32>,
    hits: u64,
}

impl World {
    /// A read of `key` into `slot` starts at `now_ns`, completing at `done_ns`.
    fn start_read(&mut self, slot: u32, key: BlockKey, now_ns: u64, done_ns: u64, fails: bool) {
        assert!(
            self.reads.keys().all(|(_, sl)| *sl != slot),
            "slot read twice at once"
        );
        assert!(
            self.pins.values().all(|sl| *sl != slot),
            "a pinned slot reused"
        );
        if let Some(at) = self.failed_at.get(&key) {
            assert!(now_ns - at >= RETRY_NS, "failed block retried early");
        }
        *self.reads_started.entry(key).or_default() += 1;
        self.memory[slot as usize] = None; // the read overwrites it
        self.reads.insert((done_ns, slot), (key, fails));
    }
}

/// How sessions read ahead of their next block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReadAhead {
    /// `n` blocks with `begin`: a read ahead may evict anything unpinned.
    Plain(u64),
    /// `n` blocks with `begin_ahead`: only blocks needed later than the one read.
    Bounded(u64),
}

impl ReadAhead {
    fn blocks(self) -> u64 {
        match self {
            ReadAhead::Plain(n) | ReadAhead::Bounded(n) => n,
        }
    }
}

fn simulate(seed: u64, slots: u32, sessions: usize, fail_every: u64) -> (u64, u64) {
    simulate_mutated(
        seed,
        slots,
        sessions,
        fail_every,
        Mutation::None,
        ReadAhead::Bounded(0),
    )
}

fn simulate_mutated(
    seed: u64,
    slots: u32,
    sessions: usize,
    fail_every: u64,
    mutation: Mutation,
    ahead: ReadAhead,
) -> (u64, u64) {
    let mut rng = seed;
    let mut next = move |n: u64| {
        // xorshift64*: deterministic per seed.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n.max(1)
    };
    let mut core = CacheCore::new(slots, RETRY_NS);
    core.mutate(mutation);
    let mut w = World {
        memory: vec![None; slots as usize],
        ..World::default()
    };
    let mut ss: Vec<Session> = (0..sessions)
        .map(|i| Session {
            toi: (i % 2) as u32,
            next_block: 0,
            period_ns: 5_000_000 + next(5) * 1_000_000,
            due_ns: (i as u64) * 20_000_000,
        })
        .collect();
    let mut now_ns = 0u64;
    let mut seq = 0u64;
    for _step in 0..20_000 {
        now_ns += 1_000_000;
        // Complete reads that are due (the I/O shell's part).
        while let Some((&(at, slot), &(key, fails))) = w.reads.iter().next() {
            if at > now_ns {
                break;
            }
            w.reads.remove(&(at, slot));
            let outcome = if fails {
                Err("injected".into())
            } else {
                Ok(())
            };
            if fails {
                w.failed_at.insert(key, now_ns);
            } else {
                w.memory[slot as usize] = Some(key);
            }
            if core.finish(slot, key, outcome, now_ns).is_ok() {
                // finish pins for the reader; the sim's send of it releases soon.
                seq += 1;
                w.pins.insert((now_ns + 1_000_000, seq), slot);
            }
        }
        // Release pins that are due.
        while let Some((&(at, s), &slot)) = w.pins.iter().next() {
            if at > now_ns {
                break;
            }
            w.pins.remove(&(at, s));
            core.unpin(slot);
        }
        let demand = Positions(ss.iter().map(|s| (s.toi, s.next_block)).collect());
        for s in ss
            .iter_mut()
            .filter(|s| s.due_ns <= now_ns && s.next_block < BLOCKS)
        {
            let key = BlockKey {
                toi: s.toi,
                member: 0,
                block: s.next_block,
            };
            match core.begin(key, now_ns, &demand) {
                Ok(CoreLookup::Ready(slot)) => {
                    assert_eq!(w.memory[slot as usize], Some(key), "a hit on other bytes");
                    w.hits += 1;
                    seq += 1;
                    w.pins.insert((now_ns + 1 + next(3_000_000), seq), slot);
                    s.next_block += 1;
                    s.due_ns = now_ns + s.period_ns;
                }
                Ok(CoreLookup::Loading) => {}
                Ok(CoreLookup::Load { slot, .. }) => {
                    let fails = fail_every > 0 && next(fail_every) == 0;
                    w.start_read(slot, key, now_ns, now_ns + 1 + next(8_000_000), fails);
                }
                Err(FetchError::Unavailable(_)) => {
                    // The client's FEC (or the rebuild) covers it: move on.
                    s.next_block += 1;
                    s.due_ns = now_ns + s.period_ns;
                }
                Err(FetchError::Full) | Err(FetchError::Busy) => {}
                Err(FetchError::Failed(_)) => unreachable!("begin never reads"),
            }
            // Read ahead as the data plane does (its next blocks, not waited for).
            for block in
                (s.next_block + 1..s.next_block + 1 + ahead.blocks()).filter(|b| *b < BLOCKS)
            {
                let key = BlockKey {
                    toi: s.toi,
                    member: 0,
                    block,
                };
                let r = match ahead {
                    ReadAhead::Bounded(_) => core.begin_ahead(key, now_ns, &demand),
                    ReadAhead::Plain(_) => core.begin(key, now_ns, &demand),
                };
                match r {
                    Ok(CoreLookup::Ready(slot)) => core.unpin(slot),
                    Ok(CoreLookup::Load { slot, .. }) => {
                        let fails = fail_every > 0 && next(fail_every) == 0;
                        w.start_read(slot, key, now_ns, now_ns + 1 + next(8_000_000), fails);
                    }
                    _ => {}
                }
            }
        }
        for slot in 0..slots {
            let (state, key, pins) = core.slot(slot);
            if pins > 0 {
                assert_eq!(state, SlotState::Ready, "a pin on a slot not ready");
                assert_eq!(w.memory[slot as usize], key, "pinned bytes changed");
            }
        }
        if ss.iter().all(|s| s.next_block >= BLOCKS) && w.reads.is_empty() {
            break;
        }
    }
    assert!(
        ss.iter().all(|s| s.next_block >= BLOCKS),
        "every session finishes"
    );
    let reads: u64 = w.reads_started.values().map(|&n| u64::from(n)).sum();
    (w.hits, reads)
}

#[test]
fn followers_hit_what_their_leader_loaded() {
    // 8 sessions over 2 objects with room for every block: each block read once.
    let (hits, reads) = simulate(7, 2 * BLOCKS as u32, 8, 0);
    assert_eq!(reads, 2 * BLOCKS, "one read per distinct block");
    assert_eq!(hits, 8 * BLOCKS);
}

/// A deliberately broken core (eviction ignoring pins, the pins then lost) is caught by
/// the simulation's model of the pool's memory: a pinned slot reused, or its bytes changed.
#[test]
fn eviction_ignoring_pins_is_caught() {
    let caught = std::panic::catch_unwind(|| {
        simulate_mutated(7, 6, 8, 0, Mutation::EvictPinned, ReadAhead::Bounded(0));
    });
    let payload = caught.expect_err("the broken invariant went unnoticed");
    let why = payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    assert!(
        why.contains("a pinned slot reused") || why.contains("pinned bytes changed"),
        "caught for another reason: {why}"
    );
}

/// A pool smaller than the sessions' read-ahead: plain read-ahead evicts blocks other
/// sessions are about to use (they are read again), bounded read-ahead does not.
#[test]
fn bounded_read_ahead_reads_less_when_the_pool_is_short() {
    let (mut plain, mut bounded) = (0, 0);
    for seed in 1..=8u64 {
        plain += simulate_mutated(seed, 12, 8, 0, Mutation::None, ReadAhead::Plain(3)).1;
        bounded += simulate_mutated(seed, 12, 8, 0, Mutation::None, ReadAhead::Bounded(3)).1;
    }
    println!("block reads over 8 seeds: plain read-ahead {plain}, bounded {bounded}");
    assert!(bounded < plain, "bounded {bounded} reads, plain {plain}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn invariants_hold_under_pressure_and_failures(
        seed in 1u64..u64::MAX,
        slots in 4u32..24,
        sessions in 1usize..10,
        fail_every in prop_oneof![Just(0u64), 3u64..50],
        ahead in prop_oneof![
            (0u64..4).prop_map(ReadAhead::Plain),
            (0u64..4).prop_map(ReadAhead::Bounded),
        ],
    ) {
        simulate_mutated(seed, slots, sessions, fail_every, Mutation::None, ahead);
    }
}
