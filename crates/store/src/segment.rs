//! Writing a member's segment file: packets packed back to back into aligned
//! blocks (the rest of a block is zero), each block written whole with direct
//! I/O. Byte layout in `docs/format.md`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use isnode_wire::digest::{packet_digest, Digest};
use isnode_wire::DataPacketId;

use crate::crc_shift::ZeroShift;
use crate::io::{AlignedBuf, BlockFile};
use crate::records::BlockRecord;
use crate::write_behind::WriteBehind;
use crate::{Layout, StoreError};

/// How a segment writer's full blocks reach the file.
#[derive(Clone)]
pub(crate) enum BlockWrites {
    /// Written on the caller's thread, one at a time.
    Inline,
    /// Handed to write threads; the writer goes on filling another buffer.
    Behind(Arc<WriteBehind>),
}

/// Appends packets to one segment file, block by block; or, for a member a degraded
/// ingest does not write, only computes the blocks' checksums (no file).
///
/// The bytes of a block past its last whole packet (`packets_per_block × packet_len`
/// onwards) are zero in every buffer and never written; the slots of a block's packets are
/// overwritten by the next block's, and cleared only where a block ends short.
pub(crate) struct SegmentWriter {
    file: Option<Arc<BlockFile>>,
    writes: BlockWrites,
    path: PathBuf,
    member: u32,
    buf: AlignedBuf,
    block: u64,
    slot: usize,
    packets_per_block: usize,
    packet_len: usize,
    records: Vec<BlockRecord>,
    /// Whether the partial block in `buf` holds packets not yet written to the file.
    dirty: bool,
    /// The CRC32C of the current block's packets so far, when every one of them came
    /// with its CRC32C ([`SegmentWriter::push_framed`]) from the block's first slot on.
    folded: Option<u32>,
    /// The CRC32C of a full block's zero tail, and the map carrying a CRC over it.
    tail: (ZeroShift, u32),
}

impl SegmentWriter {
    /// Creates (truncates) the file at `path`.
    pub(crate) fn create(
        path: &Path,
        member: u32,
        layout: &Layout,
    ) -> Result<SegmentWriter, StoreError> {
        let file = BlockFile::create(path).map_err(StoreError::io(format!(
            "creating segment {}",
            path.display()
        )))?;
        Ok(Self::new(Some(Arc::new(file)), path, member, layout))
    }

    /// [`SegmentWriter::create`] whose full blocks are written by `writes`.
    pub(crate) fn create_with(
        path: &Path,
        member: u32,
        layout: &Layout,
        writes: BlockWrites,
    ) -> Result<SegmentWriter, StoreError> {
        let mut w = Self::create(path, member, layout)?;
        w.writes = writes;
        Ok(w)
    }

    /// A writer of no file: the packets are framed (for their digests) and the blocks
    /// checksummed (for the catalog), as [`SegmentWriter::create`] would write them.
    pub(crate) fn phantom(path: &Path, member: u32, layout: &Layout) -> SegmentWriter {
        Self::new(None, path, member, layout)
    }

    fn new(
        file: Option<Arc<BlockFile>>,
        path: &Path,
        member: u32,
        layout: &Layout,
    ) -> SegmentWriter {
        let p = layout.params();
        SegmentWriter {
            file,
            writes: BlockWrites::Inline,
            path: path.to_path_buf(),
            member,
            buf: AlignedBuf::new(p.block_len as usize),
            block: 0,
            slot: 0,
            packets_per_block: p.packets_per_block() as usize,
            packet_len: p.packet_len() as usize,
            records: Vec::new(),
            dirty: false,
            folded: Some(0),
            tail: {
                let tail_len = (p.block_len - p.packets_per_block() * p.packet_len()) as usize;
                (
                    ZeroShift::new(tail_len),
                    crc32c::crc32c(&vec![0u8; tail_len]),
                )
            },
        }
    }

    /// Opens the file at `path` (created if missing, never truncated) to go on writing at
    /// packet `next_packet` of the segment. When that packet does not start a block,
    /// `partial` must be the block holding it as stored: its packets before `next_packet`
    /// are kept (they are written again, byte for byte, with the block), the rest zeroed.
    pub(crate) fn resume(
        path: &Path,
        member: u32,
        layout: &Layout,
        next_packet: u64,
        partial: Option<&[u8]>,
    ) -> Result<SegmentWriter, StoreError> {
        let file = BlockFile::open_write(path).map_err(StoreError::io(format!(
            "opening segment {}",
            path.display()
        )))?;
        Self::resume_with(
            Some(Arc::new(file)),
            path,
            member,
            layout,
            (next_packet, partial),
        )
    }

    /// [`SegmentWriter::resume`] for a member a degraded fill does not write (no file, as
    /// [`SegmentWriter::phantom`]).
    pub(crate) fn resume_phantom(
        path: &Path,
        member: u32,
        layout: &Layout,
        next_packet: u64,
        partial: Option<&[u8]>,
    ) -> Result<SegmentWriter, StoreError> {
        Self::resume_with(None, path, member, layout, (next_packet, partial))
    }

    fn resume_with(
        file: Option<Arc<BlockFile>>,
        path: &Path,
        member: u32,
        layout: &Layout,
        (next_packet, partial): (u64, Option<&[u8]>),
    ) -> Result<SegmentWriter, StoreError> {
        let mut w = Self::new(file, path, member, layout);
        w.folded = None;
        let per = w.packets_per_block as u64;
        w.block = next_packet / per;
        w.slot = (next_packet % per) as usize;
        if w.slot > 0 {
            let keep = w.slot * w.packet_len;
            let src = partial.and_then(|b| b.get(..keep)).ok_or_else(|| {
                StoreError::Corrupt(format!("{}: no partial block", path.display()))
            })?;
            w.buf.as_mut_slice()[..keep].copy_from_slice(src);
        }
        Ok(w)
    }

    /// Makes every packet pushed so far durable: writes the partial block (if it changed)
    /// and syncs the file. Returns the records of the blocks filled since the last
    /// checkpoint (CRC32C of the whole block) and, if a block is partly filled, its record
    /// with the packets it holds so far and the CRC32C of those packets' bytes only (its
    /// first `packets × packet_len` bytes: the rest of the block is rewritten as the
    /// segment grows).
    pub(crate) fn checkpoint(&mut self) -> Result<Vec<BlockRecord>, StoreError> {
        let mut out = std::mem::take(&mut self.records);
        if self.slot > 0 {
            if self.dirty {
                self.clear_tail();
                self.write_current()?;
            }
            let len = self.slot * self.packet_len;
            out.push(BlockRecord {
                member: self.member,
                block: self.block,
                packets: self.slot as u32,
                crc32c: crc32c::crc32c(&self.buf.as_slice()[..len]),
            });
        }
        if let Some(file) = &self.file {
            file.sync()
                .map_err(StoreError::io(format!("syncing {}", self.path.display())))?;
        }
        Ok(out)
    }

    fn write_current(&mut self) -> Result<(), StoreError> {
        let offset = self.block * self.buf.len() as u64;
        if let Some(file) = &self.file {
            file.write_block(&self.buf, offset)
                .map_err(StoreError::io(format!(
                    "writing block {} of {}",
                    self.block,
                    self.path.display()
                )))?;
        }
        self.dirty = false;
        Ok(())
    }

    /// Frames `symbol` as the packet `id` into the next slot; the packet's digest.
    pub(crate) fn push(&mut self, id: &DataPacketId, symbol: &[u8]) -> Result<Digest, StoreError> {
        debug_assert_eq!(symbol.len() + isnode_wire::DATA_HEADER_LEN, self.packet_len);
        let start = self.slot * self.packet_len;
        let packet = &mut self.buf.as_mut_slice()[start..start + self.packet_len];
        isnode_wire::build_data_packet(packet, id, symbol)?;
        let digest = packet_digest(packet);
        self.folded = None;
        self.advance()?;
        Ok(digest)
    }

    /// Copies an already framed packet (`packet_len` bytes) into the next slot, with the
    /// CRC32C of its bytes (`shift`: [`ZeroShift`] over one packet), of which the block's
    /// CRC32C is made without another pass over the block.
    pub(crate) fn push_framed(
        &mut self,
        packet: &[u8],
        crc: u32,
        shift: &ZeroShift,
    ) -> Result<(), StoreError> {
        let start = self.slot * self.packet_len;
        self.buf.as_mut_slice()[start..start + self.packet_len].copy_from_slice(packet);
        self.folded = self.folded.map(|c| shift.append(c, crc));
        self.advance()
    }

    fn advance(&mut self) -> Result<(), StoreError> {
        self.slot += 1;
        self.dirty = true;
        if self.slot == self.packets_per_block {
            self.flush_block()?;
        }
        Ok(())
    }

    /// Zeroes the slots after the last packet of a short block (they may hold packets of
    /// the block written before from this buffer).
    fn clear_tail(&mut self) {
        let (from, to) = (
            self.slot * self.packet_len,
            self.packets_per_block * self.packet_len,
        );
        self.buf.as_mut_slice()[from..to].fill(0);
    }

    fn flush_block(&mut self) -> Result<(), StoreError> {
        self.clear_tail();
        let (shift, zeros) = &self.tail;
        let crc32c = match self.folded {
            Some(c) if self.slot == self.packets_per_block => shift.append(c, *zeros),
            _ => crc32c::crc32c(self.buf.as_slice()),
        };
        self.folded = Some(0);
        match (&self.writes, &self.file) {
            (BlockWrites::Behind(behind), Some(file)) => {
                let next = behind.take()?;
                let full = std::mem::replace(&mut self.buf, next);
                let what = format!("writing block {} of {}", self.block, self.path.display());
                let offset = self.block * full.len() as u64;
                behind.submit(Arc::clone(file), offset, full, what)?;
                self.dirty = false;
            }
            _ => self.write_current()?,
        }
        self.records.push(BlockRecord {
            member: self.member,
            block: self.block,
            packets: self.slot as u32,
            crc32c,
        });
        self.block += 1;
        self.slot = 0;
        Ok(())
    }

    /// Writes the last partial block, waits for the blocks written behind, syncs, and
    /// returns the block records.
    pub(crate) fn finish(mut self) -> Result<Vec<BlockRecord>, StoreError> {
        if self.slot > 0 {
            self.flush_block()?;
        }
        if let BlockWrites::Behind(behind) = &self.writes {
            behind.wait_idle()?;
        }
        if let Some(file) = &self.file {
            file.sync()
                .map_err(StoreError::io(format!("syncing {}", self.path.display())))?;
        }
        Ok(self.records)
    }
}
