//! Writing a member's segment file: packets packed back to back into aligned
//! blocks (the rest of a block is zero), each block written whole with direct
//! I/O. Byte layout in `docs/format.md`.

use std::path::{Path, PathBuf};

use isnode_wire::digest::{packet_digest, Digest};
use isnode_wire::DataPacketId;

use crate::catalog::BlockRecord;
use crate::io::{AlignedBuf, BlockFile};
use crate::{Layout, StoreError};

/// Appends packets to one segment file, block by block; or, for a member a degraded
/// ingest does not write, only computes the blocks' checksums (no file).
pub(crate) struct SegmentWriter {
    file: Option<BlockFile>,
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
        Ok(Self::new(Some(file), path, member, layout))
    }

    /// A writer of no file: the packets are framed (for their digests) and the blocks
    /// checksummed (for the catalog), as [`SegmentWriter::create`] would write them.
    pub(crate) fn phantom(path: &Path, member: u32, layout: &Layout) -> SegmentWriter {
        Self::new(None, path, member, layout)
    }

    fn new(file: Option<BlockFile>, path: &Path, member: u32, layout: &Layout) -> SegmentWriter {
        let p = layout.params();
        SegmentWriter {
            file,
            path: path.to_path_buf(),
            member,
            buf: AlignedBuf::new(p.block_len as usize),
            block: 0,
            slot: 0,
            packets_per_block: p.packets_per_block() as usize,
            packet_len: p.packet_len() as usize,
            records: Vec::new(),
            dirty: false,
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
        Self::resume_with(Some(file), path, member, layout, (next_packet, partial))
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
        file: Option<BlockFile>,
        path: &Path,
        member: u32,
        layout: &Layout,
        (next_packet, partial): (u64, Option<&[u8]>),
    ) -> Result<SegmentWriter, StoreError> {
        let mut w = Self::new(file, path, member, layout);
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
        self.slot += 1;
        self.dirty = true;
        if self.slot == self.packets_per_block {
            self.flush_block()?;
        }
        Ok(digest)
    }

    fn flush_block(&mut self) -> Result<(), StoreError> {
        let crc32c = crc32c::crc32c(self.buf.as_slice());
        self.write_current()?;
        self.records.push(BlockRecord {
            member: self.member,
            block: self.block,
            packets: self.slot as u32,
            crc32c,
        });
        self.block += 1;
        self.slot = 0;
        self.buf.zero();
        Ok(())
    }

    /// Writes the last partial block, syncs, and returns the block records.
    pub(crate) fn finish(mut self) -> Result<Vec<BlockRecord>, StoreError> {
        if self.slot > 0 {
            self.flush_block()?;
        }
        if let Some(file) = &self.file {
            file.sync()
                .map_err(StoreError::io(format!("syncing {}", self.path.display())))?;
        }
        Ok(self.records)
    }
}
