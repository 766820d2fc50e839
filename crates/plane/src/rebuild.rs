//! What a thread needs to rebuild the packets of a block that cannot be read: its codeword
//! decoder, and the pool's blocks as the store's codeword reader sees them (a failed or
//! hedged member's blocks not in memory count as missing). The sends are in `degraded.rs`.

use isnode_pool::cache::{BlockKey, Cache, Pinned};
use isnode_pool::demand::LazyDemand;
use isnode_pool::members::MemberHealth;
use isnode_pool::objects::ObjectInfo;
use isnode_pool::reader::Reader;
use isnode_store::codeword::Assembler;
use isnode_store::{BlockError, BlockSource};

/// Per-thread state of rebuilds: the codeword decoder and which codeword it holds.
pub(crate) struct Rebuild {
    pub(crate) asm: Assembler,
    /// The codeword complete in `asm`: (TOI, SBN).
    pub(crate) done: Option<(u32, u32)>,
}

impl Rebuild {
    /// Room for codewords of up to `max_symbols` symbols of `symbol_len` bytes.
    pub(crate) fn new(symbol_len: usize, max_symbols: usize) -> Rebuild {
        Rebuild {
            asm: Assembler::new(symbol_len, max_symbols),
            done: None,
        }
    }
}

/// Whether a rebuild is a hedge: the member whose block is not waited for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hedge {
    /// Not a hedge: a block could not be read.
    No,
    /// This member is slow: its blocks not in memory count as missing.
    Member(u32),
}

/// The blocks of one object, from the pool through this thread's reader (one pin per
/// member kept for the codeword being read). Blocks of a failed member, and of the hedged
/// member, that are not in memory count as missing (never read, never waited for).
pub(crate) struct PoolBlocks<'a> {
    pub(crate) reader: &'a mut Reader,
    pub(crate) obj: &'a ObjectInfo,
    pub(crate) demand: &'a LazyDemand<'a>,
    pub(crate) pins: Vec<Option<(u64, Pinned)>>,
    pub(crate) health: &'a MemberHealth,
    pub(crate) cache: &'a Cache,
    pub(crate) hedge: Hedge,
}

impl BlockSource for PoolBlocks<'_> {
    fn block(&mut self, member: u32, block: u64) -> Result<&[u8], BlockError> {
        let m = member as usize;
        let Some(held) = self.pins.get_mut(m) else {
            return Err(BlockError::Unreadable(format!("no member {member}")));
        };
        let key = BlockKey {
            toi: self.obj.rec.toi,
            member,
            block,
        };
        let pinned = held.as_ref().is_some_and(|(b, _)| *b == block);
        let skip = self.hedge == Hedge::Member(member) || self.health.is_failed(member);
        if !pinned && skip && !self.cache.contains(&key) {
            return Err(BlockError::Unreadable(format!(
                "member {member} not read (failed or slow)"
            )));
        }
        self.reader.pinned_block(held, key, self.obj, self.demand)
    }
}
