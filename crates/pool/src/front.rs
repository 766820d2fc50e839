//! The fill front of one filling object as readers see it: how many leading codewords may
//! be read (every block holding their packets is whole and durable), in one atomic the
//! data plane loads per burst, and a condition variable blocking readers (HTTP bodies,
//! digests) wait on with a deadline.

use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Instant;

use isnode_store::Layout;

/// Where a fill stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum FrontState {
    /// Codewords are still coming.
    Filling = 0,
    /// Every codeword is there: the object is complete.
    Complete = 1,
    /// The fill stopped for good (the object changed at the origin, or vanished): what was
    /// served of it must not be continued with another version's bytes.
    Failed = 2,
}

/// What a reader waiting at the front learns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// The codeword may be read.
    Ready,
    /// The fill failed: the reader must stop.
    Failed,
    /// The deadline passed first.
    TimedOut,
}

/// The readable front of one filling object.
#[derive(Debug)]
pub struct FillFront {
    readable: AtomicU32,
    state: AtomicU8,
    lock: Mutex<()>,
    moved: Condvar,
    /// An MPEG-TS object's random-access points found so far (time s, byte offset), for a
    /// playlist of the filled part; `None` for another container.
    points: Mutex<Option<Vec<(f64, u64)>>>,
}

impl Default for FillFront {
    fn default() -> FillFront {
        FillFront::new()
    }
}

impl FillFront {
    /// A front with nothing readable yet.
    pub fn new() -> FillFront {
        FillFront {
            readable: AtomicU32::new(0),
            state: AtomicU8::new(FrontState::Filling as u8),
            lock: Mutex::new(()),
            moved: Condvar::new(),
            points: Mutex::new(None),
        }
    }

    fn lock_points(&self) -> MutexGuard<'_, Option<Vec<(f64, u64)>>> {
        self.points.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records the fill's random-access points so far (every one found, in order: those
    /// not recorded yet are appended).
    pub fn add_points(&self, all: &[isnode_media::AccessPoint]) {
        let mut p = self.lock_points();
        let known = p.get_or_insert_with(Vec::new);
        if let Some(new) = all.get(known.len()..) {
            known.extend(new.iter().map(|a| (a.time_s, a.offset_bytes)));
        }
    }

    /// The random-access points at offsets before `end_bytes` (`None`: not MPEG-TS, or
    /// none recorded yet).
    pub fn points_before(&self, end_bytes: u64) -> Option<Vec<(f64, u64)>> {
        let p = self.lock_points();
        let all = p.as_ref()?;
        let n = all.partition_point(|&(_, o)| o < end_bytes);
        all.get(..n).map(<[(f64, u64)]>::to_vec)
    }

    /// Leading codewords that may be read (cheap: one atomic load).
    #[inline]
    pub fn readable(&self) -> u32 {
        self.readable.load(Ordering::Acquire)
    }

    /// Where the fill stands.
    #[inline]
    pub fn state(&self) -> FrontState {
        match self.state.load(Ordering::Acquire) {
            0 => FrontState::Filling,
            1 => FrontState::Complete,
            _ => FrontState::Failed,
        }
    }

    /// Whether codeword `sbn` may be read now.
    #[inline]
    pub fn has(&self, sbn: u32) -> bool {
        sbn < self.readable() || self.state() == FrontState::Complete
    }

    /// Moves the readable front to `readable` codewords (never back) and wakes the waiters.
    pub fn advance(&self, readable: u32) {
        self.readable.fetch_max(readable, Ordering::AcqRel);
        self.notify();
    }

    /// Ends the fill: complete (every codeword readable) or failed; wakes the waiters.
    pub fn end(&self, state: FrontState, codewords: u32) {
        if state == FrontState::Complete {
            self.readable.fetch_max(codewords, Ordering::AcqRel);
        }
        self.state.store(state as u8, Ordering::Release);
        self.notify();
    }

    fn notify(&self) {
        let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.moved.notify_all();
    }

    /// Blocks until codeword `sbn` may be read, the fill fails, or `deadline`.
    pub fn wait_for(&self, sbn: u32, deadline: Instant) -> Wait {
        let mut g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if self.has(sbn) {
                return Wait::Ready;
            }
            if self.state() == FrontState::Failed {
                return Wait::Failed;
            }
            let now = Instant::now();
            if now >= deadline {
                return Wait::TimedOut;
            }
            g = match self.moved.wait_timeout(g, deadline - now) {
                Ok((g, _)) => g,
                Err(e) => e.into_inner().0,
            };
        }
    }
}

/// Leading codewords of an object laid out as `layout` that may be read when its first
/// `front` codewords are written: those whose packets all lie in blocks wholly before the
/// front's (a block the front cuts is still being written and is never read).
pub fn readable_codewords(layout: &Layout, front: u32) -> u32 {
    let codewords = layout.codewords();
    if front >= codewords {
        return codewords;
    }
    let members = layout.params().members;
    // On each member, the first block not wholly written.
    let open_block: Vec<u64> = (0..members).map(|m| layout.run_block(front, m)).collect();
    let readable = |sbn: u32| {
        (0..members).all(|m| {
            let run = layout.member_run(sbn, m);
            let Some(last) = (run.esis.len() as u64).checked_sub(1) else {
                return true;
            };
            let block = layout.packet_position(run.first_packet + last).0;
            open_block.get(m as usize).is_some_and(|&open| block < open)
        })
    };
    (0..front).find(|&sbn| !readable(sbn)).unwrap_or(front)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(len: u64) -> Layout {
        Layout::new(isnode_store::VolumeParams::SMALL, len).unwrap()
    }

    #[test]
    fn no_codeword_in_an_open_block_is_readable() {
        let l = layout(2_000_000);
        let c = l.codewords();
        assert!(c > 10);
        assert_eq!(readable_codewords(&l, 0), 0);
        assert_eq!(readable_codewords(&l, c), c);
        let mut last = 0;
        for front in 0..c {
            let r = readable_codewords(&l, front);
            assert!(r <= front, "front {front}: {r} readable");
            assert!(r >= last, "the readable front never goes back");
            last = r;
            // Every block holding a readable codeword's packets lies before the front's.
            for (member, block) in isnode_serve_core::pacer::blocks_of(&l, 0..r) {
                let open = l.run_block(front, member);
                assert!(
                    block < open,
                    "front {front}: block {block} of member {member}"
                );
            }
        }
        // Far enough into the object, most of the front is readable.
        assert!(readable_codewords(&l, c - 1) + 3 >= c - 1);
    }

    #[test]
    fn waiters_wake_when_the_front_passes_or_the_fill_fails() {
        let f = std::sync::Arc::new(FillFront::new());
        let soon = Instant::now() + std::time::Duration::from_millis(30);
        assert_eq!(f.wait_for(0, soon), Wait::TimedOut);
        let g = f.clone();
        let t = std::thread::spawn(move || {
            g.wait_for(4, Instant::now() + std::time::Duration::from_secs(10))
        });
        f.advance(3);
        f.advance(5);
        assert_eq!(t.join().unwrap(), Wait::Ready);
        f.advance(2);
        assert_eq!(f.readable(), 5, "never back");
        f.end(FrontState::Failed, 9);
        let far = Instant::now() + std::time::Duration::from_secs(10);
        assert_eq!(f.wait_for(7, far), Wait::Failed);
        assert_eq!(f.wait_for(1, far), Wait::Ready);
    }

    #[test]
    fn points_are_appended_and_cut_at_the_front() {
        let f = FillFront::new();
        assert_eq!(f.points_before(100), None);
        let p = |t: f64, o: u64| isnode_media::AccessPoint {
            time_s: t,
            offset_bytes: o,
        };
        f.add_points(&[p(0.0, 0), p(1.0, 50)]);
        f.add_points(&[p(0.0, 0), p(1.0, 50), p(2.0, 120)]);
        assert_eq!(f.points_before(120), Some(vec![(0.0, 0), (1.0, 50)]));
        assert_eq!(f.points_before(1_000).map(|v| v.len()), Some(3));
    }
}
