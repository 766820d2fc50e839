//! Reading an object's segment files ahead of the codeword read path, for whole-object
//! reads in order (`cat`): one thread per member reads that member's blocks in order
//! into a bounded queue, so the members' reads overlap each other and the decoding and
//! writing of the codewords before them. [`crate::read::DiskBlocks`] reads one block at
//! a time on the caller's thread, which left a whole-object read waiting for each read
//! in turn (`isnode cat` ran several times slower than `cat`).
//!
//! The files are read through the page cache (sequential read-ahead advised), as `cat`
//! reads them: an object read twice comes from memory the second time. Memory is bounded:
//! `QUEUE_BLOCKS` block buffers per member made at open and recycled between the thread and
//! the reader, and one more only when a block is asked out of order.

use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::codeword::{BlockError, BlockSource};
use crate::io::{AlignedBuf, BlockFile};
use crate::Layout;

/// Blocks each member's thread may read ahead of the reader.
const QUEUE_BLOCKS: usize = 4;
/// How long the reader waits for one block before calling it unreadable.
const BLOCK_WAIT: Duration = Duration::from_secs(60);
/// How often a member's thread, waiting for a free buffer, checks that the reader is still there.
const RECYCLE_POLL: Duration = Duration::from_secs(1);

/// One block as a member's thread read it.
struct Filled {
    block: u64,
    buf: AlignedBuf,
    read: Result<(), String>,
}

/// One member: its thread's queue, the block the reader holds, and a spare buffer for a
/// block asked out of order (read on the reader's thread).
struct MemberQueue {
    filled: Option<Receiver<Filled>>,
    recycle: Option<SyncSender<AlignedBuf>>,
    current: Option<Filled>,
    /// The next block the thread will deliver (blocks before it are gone from the queue).
    next: u64,
    file: Option<BlockFile>,
    thread: Option<JoinHandle<()>>,
}

/// The blocks of one object's segment files, read ahead in order by one thread per member.
pub struct PrefetchBlocks {
    layout: Layout,
    members: Vec<MemberQueue>,
    errors: Vec<String>,
}

impl PrefetchBlocks {
    /// Opens the segment files at `paths` (one per member, in member order) and starts
    /// reading ahead each that holds source symbols; the repair member's blocks are read
    /// when asked (only a lost source symbol needs them). A member that cannot be opened
    /// is reported in [`PrefetchBlocks::errors`] and all its blocks are unreadable.
    pub fn open(paths: Vec<PathBuf>, layout: &Layout) -> PrefetchBlocks {
        let mut errors = Vec::new();
        let repair = layout.params().repair_member();
        let members = paths
            .into_iter()
            .enumerate()
            .map(|(m, path)| {
                let member = m as u32;
                if member == repair {
                    return match BlockFile::open_read_sequential(&path) {
                        Ok(own) => MemberQueue::on_demand(own),
                        Err(e) => {
                            errors.push(format!("member {m}: {}: {e}", path.display()));
                            MemberQueue::unreadable()
                        }
                    };
                }
                match (
                    BlockFile::open_read_sequential(&path),
                    BlockFile::open_read_sequential(&path),
                ) {
                    (Ok(ahead), Ok(own)) => MemberQueue::start(ahead, own, member, layout),
                    (Err(e), _) | (_, Err(e)) => {
                        errors.push(format!("member {m}: {}: {e}", path.display()));
                        MemberQueue::unreadable()
                    }
                }
            })
            .collect();
        PrefetchBlocks {
            layout: layout.clone(),
            members,
            errors,
        }
    }

    /// What went wrong so far: unopenable members, unreadable blocks.
    pub fn errors(&self) -> &[String] {
        &self.errors
    }
}

impl MemberQueue {
    fn unreadable() -> MemberQueue {
        MemberQueue {
            filled: None,
            recycle: None,
            current: None,
            next: 0,
            file: None,
            thread: None,
        }
    }

    /// Starts the thread that reads `ahead` block by block; `own` serves blocks asked out of order.
    fn start(ahead: BlockFile, own: BlockFile, member: u32, layout: &Layout) -> MemberQueue {
        let block_len = layout.params().block_len as usize;
        let blocks = layout.member_blocks(member);
        let (filled_tx, filled_rx) = mpsc::sync_channel(QUEUE_BLOCKS);
        let (recycle_tx, recycle_rx) = mpsc::sync_channel(QUEUE_BLOCKS + 1);
        for _ in 0..QUEUE_BLOCKS {
            // Cannot fail: the channel has room for every buffer and its receiver is here.
            let _ = recycle_tx.try_send(AlignedBuf::new(block_len));
        }
        let offsets: Vec<u64> = (0..blocks).map(|b| layout.block_offset(b)).collect();
        let thread = std::thread::Builder::new()
            .name(format!("prefetch-{member}"))
            .spawn(move || read_ahead(&ahead, &offsets, &recycle_rx, &filled_tx));
        match thread {
            Ok(handle) => MemberQueue {
                filled: Some(filled_rx),
                recycle: Some(recycle_tx),
                current: None,
                next: 0,
                file: Some(own),
                thread: Some(handle),
            },
            // No thread: every block is read on the reader's thread.
            Err(_) => MemberQueue::on_demand(own),
        }
    }

    /// A member whose blocks are read on the reader's thread when asked.
    fn on_demand(own: BlockFile) -> MemberQueue {
        MemberQueue {
            filled: None,
            recycle: None,
            current: None,
            next: u64::MAX,
            file: Some(own),
            thread: None,
        }
    }

    /// Makes `block` the current block: from the queue when it is ahead, else read here.
    fn fetch(&mut self, block: u64, block_len: usize, offset: u64) -> Result<(), String> {
        if self.current.as_ref().is_some_and(|c| c.block == block) {
            return Ok(());
        }
        let spare = self.current.take().map(|c| c.buf);
        if block >= self.next {
            if let Some(buf) = spare {
                self.give_back(buf);
            }
            return self.take_from_queue(block);
        }
        let file = self.file.as_ref().ok_or("member unreadable")?;
        let mut buf = spare.unwrap_or_else(|| AlignedBuf::new(block_len));
        let read = file.read_block(&mut buf, offset).map_err(|e| e.to_string());
        self.current = Some(Filled { block, buf, read });
        Ok(())
    }

    /// Receives blocks until `block` (dropping those before it, which nobody asked for).
    fn take_from_queue(&mut self, block: u64) -> Result<(), String> {
        let rx = self.filled.as_ref().ok_or("member unreadable")?;
        loop {
            let got = match rx.recv_timeout(BLOCK_WAIT) {
                Ok(got) => got,
                Err(RecvTimeoutError::Timeout) => {
                    return Err(format!("block {block} not read within {BLOCK_WAIT:?}"))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(format!("block {block} is past the segment's end"))
                }
            };
            self.next = got.block + 1;
            if got.block == block {
                self.current = Some(got);
                return Ok(());
            }
            self.give_back(got.buf);
        }
    }

    fn give_back(&self, buf: AlignedBuf) {
        if let Some(tx) = &self.recycle {
            // Full or gone only when the thread has ended: the buffer is simply dropped.
            let _ = tx.try_send(buf);
        }
    }
}

impl Drop for MemberQueue {
    fn drop(&mut self) {
        // Closing both channels ends the thread at its next send or poll.
        self.filled = None;
        self.recycle = None;
        if let Some(handle) = self.thread.take() {
            let _ = handle.join();
        }
    }
}

/// A member's thread: reads the blocks at `offsets` in order into recycled buffers.
fn read_ahead(
    file: &BlockFile,
    offsets: &[u64],
    recycle: &Receiver<AlignedBuf>,
    filled: &SyncSender<Filled>,
) {
    for (block, &offset) in offsets.iter().enumerate() {
        let mut buf = loop {
            match recycle.recv_timeout(RECYCLE_POLL) {
                Ok(buf) => break buf,
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => return,
            }
        };
        let read = file.read_block(&mut buf, offset).map_err(|e| e.to_string());
        let item = Filled {
            block: block as u64,
            buf,
            read,
        };
        if filled.send(item).is_err() {
            return;
        }
    }
}

impl BlockSource for PrefetchBlocks {
    fn block(&mut self, member: u32, block: u64) -> Result<&[u8], BlockError> {
        let block_len = self.layout.params().block_len as usize;
        let offset = self.layout.block_offset(block);
        let Some(queue) = self.members.get_mut(member as usize) else {
            return Err(BlockError::Unreadable(format!("no member {member}")));
        };
        if let Err(e) = queue.fetch(block, block_len, offset) {
            self.errors
                .push(format!("member {member}: block {block}: {e}"));
            return Err(BlockError::Unreadable(format!(
                "member {member}: block {block} unreadable"
            )));
        }
        match &queue.current {
            Some(Filled {
                buf, read: Ok(()), ..
            }) => Ok(buf.as_slice()),
            Some(Filled { read: Err(e), .. }) => {
                let line = format!("member {member}: block {block}: {e}");
                if self.errors.last() != Some(&line) {
                    self.errors.push(line);
                }
                Err(BlockError::Unreadable(format!(
                    "member {member}: block {block} unreadable"
                )))
            }
            None => Err(BlockError::Unreadable(format!(
                "member {member}: block {block} unreadable"
            ))),
        }
    }
}
