//! The fault decision, pure and deterministic: given the plan in force and one read
//! request, what the file system does with it ([`decide`]). Randomness (short read
//! lengths, flipped positions) comes from a seeded [`SplitMix64`], so a run is repeatable
//! from its seed.

use std::ops::Range;
use std::time::Duration;

/// Which reads a fault applies to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// Every read of every file.
    All,
    /// Reads of files whose path (relative to the mount's root) ends with `file` that
    /// overlap the byte range `bytes`.
    Range {
        /// The end of the file's relative path (e.g. `"objects/7.seg"`).
        file: String,
        /// The faulty bytes of that file.
        bytes: Range<u64>,
    },
}

/// What happens to the reads the plan targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// Nothing: reads pass through.
    Pass,
    /// The read fails with `EIO`.
    Eio,
    /// The read is answered after `delay_ms` milliseconds (a slow disk).
    Delay {
        /// Added latency per read, in milliseconds.
        delay_ms: u64,
    },
    /// The read returns fewer bytes than asked (at least one, chosen by the PRNG).
    Short,
    /// The read returns `per_read` bytes with bits flipped (positions and bits chosen by
    /// the PRNG, within the targeted bytes).
    Flip {
        /// Bytes damaged per read.
        per_read: u32,
    },
}

/// The fault in force: what, and on which reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// What happens.
    pub kind: FaultKind,
    /// To which reads.
    pub target: Target,
}

impl Plan {
    /// No fault: every read passes through.
    pub fn pass() -> Plan {
        Plan {
            kind: FaultKind::Pass,
            target: Target::All,
        }
    }

    /// `kind` on every read.
    pub fn all(kind: FaultKind) -> Plan {
        Plan {
            kind,
            target: Target::All,
        }
    }
}

/// One read as the file system receives it.
#[derive(Clone, Copy, Debug)]
pub struct ReadReq<'a> {
    /// The file's path relative to the mount's root.
    pub path: &'a str,
    /// Byte offset of the read.
    pub offset: u64,
    /// Bytes asked.
    pub len: u32,
}

/// What the file system does with one read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Read and answer as the backing file does.
    Pass,
    /// Answer `EIO` without reading.
    Eio,
    /// Wait this long, then read and answer.
    Delay(Duration),
    /// Read, then answer only the first this many bytes (fewer than asked).
    Short(u32),
    /// Read, then XOR each (position in the answer, mask) before answering.
    Flip(Vec<(u32, u8)>),
}

/// A small seeded generator (SplitMix64): deterministic and good enough for tests.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0; 0 for `n` = 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        self.next_u64() % n
    }
}

/// The bytes of `req` (offsets within the answer) that `target` covers, if any.
pub fn targeted(target: &Target, req: &ReadReq<'_>) -> Option<Range<u32>> {
    let end = req.offset.saturating_add(u64::from(req.len));
    match target {
        Target::All if req.len > 0 => Some(0..req.len),
        Target::All => None,
        Target::Range { file, bytes } => {
            if !req.path.ends_with(file.as_str()) {
                return None;
            }
            let start = bytes.start.max(req.offset);
            let stop = bytes.end.min(end);
            (start < stop).then(|| (start - req.offset) as u32..(stop - req.offset) as u32)
        }
    }
}

/// What to do with `req` under `plan`, drawing any randomness from `rng`.
pub fn decide(plan: &Plan, req: &ReadReq<'_>, rng: &mut SplitMix64) -> Action {
    let Some(hit) = targeted(&plan.target, req) else {
        return Action::Pass;
    };
    match plan.kind {
        FaultKind::Pass => Action::Pass,
        FaultKind::Eio => Action::Eio,
        FaultKind::Delay { delay_ms } => Action::Delay(Duration::from_millis(delay_ms)),
        FaultKind::Short if req.len > 1 => {
            Action::Short(1 + rng.below(u64::from(req.len - 1)) as u32)
        }
        FaultKind::Short => Action::Pass,
        FaultKind::Flip { per_read } => {
            let span = u64::from(hit.end - hit.start);
            let flips = (0..per_read)
                .map(|_| {
                    let at = hit.start + rng.below(span) as u32;
                    let mask = 1u8 << rng.below(8);
                    (at, mask)
                })
                .collect();
            Action::Flip(flips)
        }
    }
}

/// Applies a read's `action` to the bytes `data` read from the backing file: the bytes to
/// answer (a prefix of `data`, possibly damaged). `Eio` and `Delay` leave `data` as it
/// is (the caller answers the error, or has waited).
pub fn apply(action: &Action, data: &mut [u8]) -> usize {
    match action {
        Action::Short(n) => (*n as usize).min(data.len()),
        Action::Flip(flips) => {
            for &(at, mask) in flips {
                if let Some(b) = data.get_mut(at as usize) {
                    *b ^= mask;
                }
            }
            data.len()
        }
        Action::Pass | Action::Eio | Action::Delay(_) => data.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(path: &str, offset: u64, len: u32) -> ReadReq<'_> {
        ReadReq { path, offset, len }
    }

    #[test]
    fn pass_and_all() {
        let mut rng = SplitMix64::new(1);
        let r = req("objects/1.seg", 0, 4096);
        assert_eq!(decide(&Plan::pass(), &r, &mut rng), Action::Pass);
        assert_eq!(
            decide(&Plan::all(FaultKind::Eio), &r, &mut rng),
            Action::Eio
        );
        assert_eq!(
            decide(&Plan::all(FaultKind::Delay { delay_ms: 200 }), &r, &mut rng),
            Action::Delay(Duration::from_millis(200))
        );
    }

    #[test]
    fn a_range_faults_only_the_reads_that_overlap_it() {
        let plan = Plan {
            kind: FaultKind::Eio,
            target: Target::Range {
                file: "objects/7.seg".into(),
                bytes: 8192..12288,
            },
        };
        let mut rng = SplitMix64::new(2);
        let d =
            |path, offset, len, rng: &mut SplitMix64| decide(&plan, &req(path, offset, len), rng);
        assert_eq!(
            d("objects/7.seg", 0, 8192, &mut rng),
            Action::Pass,
            "ends where the range starts"
        );
        assert_eq!(
            d("objects/7.seg", 12288, 4096, &mut rng),
            Action::Pass,
            "starts where it ends"
        );
        assert_eq!(d("objects/7.seg", 4096, 8192, &mut rng), Action::Eio);
        assert_eq!(d("objects/7.seg", 12287, 1, &mut rng), Action::Eio);
        assert_eq!(
            d("objects/8.seg", 8192, 4096, &mut rng),
            Action::Pass,
            "another file"
        );
        assert_eq!(
            targeted(&plan.target, &req("objects/7.seg", 4096, 16384)),
            Some(4096..8192)
        );
    }

    #[test]
    fn short_reads_return_fewer_bytes_but_at_least_one() {
        let plan = Plan::all(FaultKind::Short);
        let mut rng = SplitMix64::new(3);
        for len in [2u32, 3, 4096, 1 << 20] {
            for _ in 0..100 {
                match decide(&plan, &req("f", 0, len), &mut rng) {
                    Action::Short(n) => assert!(n >= 1 && n < len, "{n} of {len}"),
                    a => panic!("{a:?}"),
                }
            }
        }
        assert_eq!(decide(&plan, &req("f", 0, 1), &mut rng), Action::Pass);
        let mut data = vec![7u8; 100];
        assert_eq!(apply(&Action::Short(10), &mut data), 10);
    }

    #[test]
    fn flips_stay_in_the_targeted_bytes_and_change_them() {
        let plan = Plan {
            kind: FaultKind::Flip { per_read: 5 },
            target: Target::Range {
                file: "a.seg".into(),
                bytes: 100..200,
            },
        };
        let mut rng = SplitMix64::new(4);
        let Action::Flip(flips) = decide(&plan, &req("objects/a.seg", 50, 1000), &mut rng) else {
            panic!("expected flips");
        };
        assert_eq!(flips.len(), 5);
        for &(at, mask) in &flips {
            assert!((50..150).contains(&at), "{at}");
            assert_eq!(mask.count_ones(), 1);
        }
        let mut data = vec![0u8; 1000];
        assert_eq!(apply(&Action::Flip(flips.clone()), &mut data), 1000);
        let changed = data.iter().filter(|&&b| b != 0).count();
        assert!((1..=5).contains(&changed), "{changed}");
    }

    #[test]
    fn the_same_seed_makes_the_same_faults() {
        let plan = Plan::all(FaultKind::Flip { per_read: 3 });
        let run = |seed| {
            let mut rng = SplitMix64::new(seed);
            (0..10)
                .map(|i| decide(&plan, &req("f", i * 4096, 4096), &mut rng))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(9), run(9));
        assert_ne!(run(9), run(10));
    }

    #[test]
    fn empty_reads_are_never_faulted() {
        let mut rng = SplitMix64::new(5);
        assert_eq!(
            decide(&Plan::all(FaultKind::Eio), &req("f", 0, 0), &mut rng),
            Action::Pass
        );
    }
}
