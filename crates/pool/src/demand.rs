//! Where the sessions are, for the cache's eviction decisions, without touching the
//! control plane's session table: every data-plane thread publishes the positions of its
//! own sessions on a board (a few times per second at most, off the per-packet path), and
//! a cache miss reads the board lazily.

use std::cell::OnceCell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::cache::Demand;
use crate::objects::ObjectInfo;
use isnode_serve_core::pacer::codewords_in_block;

/// Per object: the object and the sorted codewords one thread's sessions are at.
pub type Positions = HashMap<u32, (Arc<ObjectInfo>, Vec<u32>)>;

/// Every data-plane thread's last published positions (locks shared only by data-plane
/// threads, held for an `Arc` clone or swap).
pub struct PositionBoard {
    threads: Vec<Mutex<Arc<Positions>>>,
}

impl PositionBoard {
    /// A board for `threads` data-plane threads.
    pub fn new(threads: usize) -> PositionBoard {
        PositionBoard {
            threads: (0..threads).map(|_| Mutex::default()).collect(),
        }
    }

    /// Replaces thread `thread`'s positions.
    pub fn publish(&self, thread: usize, positions: Positions) {
        if let Some(slot) = self.threads.get(thread) {
            *slot.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(positions);
        }
    }

    fn snapshot(&self) -> Vec<Arc<Positions>> {
        self.threads
            .iter()
            .map(|m| m.lock().unwrap_or_else(|e| e.into_inner()).clone())
            .collect()
    }
}

/// Eviction demand read from the board, once per cache miss that needs it.
pub struct LazyDemand<'a> {
    board: &'a PositionBoard,
    snap: OnceCell<Vec<Arc<Positions>>>,
}

impl<'a> LazyDemand<'a> {
    /// Demand over `board` (read on first use).
    pub fn new(board: &'a PositionBoard) -> Self {
        LazyDemand {
            board,
            snap: OnceCell::new(),
        }
    }
}

impl Demand for LazyDemand<'_> {
    fn next_use(&self, toi: u32, member: u32, block: u64) -> Option<u64> {
        let snap = self.snap.get_or_init(|| self.board.snapshot());
        snap.iter()
            .filter_map(|positions| next_use_in(positions, toi, member, block))
            .min()
    }
}

/// Stream time (ns) until the nearest of one thread's sessions needs the block.
fn next_use_in(positions: &Positions, toi: u32, member: u32, block: u64) -> Option<u64> {
    let (obj, at) = positions.get(&toi)?;
    let cws = codewords_in_block(&obj.layout, member, block);
    if cws.is_empty() {
        return None;
    }
    // The nearest session before the block's end.
    let i = at.partition_point(|&c| c < cws.end);
    let c = *at.get(i.checked_sub(1)?)?;
    Some(u64::from(cws.start.saturating_sub(c)).saturating_mul(obj.codeword_ns()))
}
