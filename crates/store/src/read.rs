//! Reading objects back from the segment files (`cat`, `check --repair`): the blocks come
//! from disk ([`DiskBlocks`]) and go through the one codeword read path
//! ([`crate::codeword`]): every packet is verified (CRC32C and identifiers); a missing,
//! unreadable or damaged packet is an erasure, and the code rebuilds whatever is lost, up
//! to m symbols per codeword.

use std::io::Write;

use serde::Serialize;

use crate::codeword::{
    read_codeword, Assembler, BlockError, BlockSource, Readiness, SymbolCheck, Target, Want,
};
use crate::io::{AlignedBuf, BlockFile};
use crate::prefetch::PrefetchBlocks;
use crate::records::ObjectRecord;
use crate::{Layout, StoreError, Volume};

/// What reading an object met on the way.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ReadStats {
    /// Codewords read.
    pub codewords: u64,
    /// Symbols that could not be read (missing member, file, block).
    pub symbols_missing: u64,
    /// Symbols read but failing their checks (CRC32C, identifiers).
    pub symbols_corrupt: u64,
    /// Source symbols rebuilt by decoding.
    pub symbols_rebuilt: u64,
    /// Codewords that needed decoding.
    pub codewords_decoded: u64,
    /// One line per member that could not be read, or per unreadable block.
    pub member_errors: Vec<String>,
}

/// The blocks of one object's segment files, read from disk (O_DIRECT where the file
/// system allows), one block buffer per member.
pub struct DiskBlocks {
    layout: Layout,
    members: Vec<MemberFile>,
    /// One line per member that could not be opened, or per unreadable block.
    errors: Vec<String>,
}

/// One member's segment file and the block last read from it.
struct MemberFile {
    file: Option<BlockFile>,
    buf: AlignedBuf,
    /// The block in `buf`, or the block whose read failed.
    block: Option<(u64, Result<(), ()>)>,
}

impl DiskBlocks {
    /// Opens the segment files of `rec`; a member that cannot be opened is reported in
    /// [`DiskBlocks::errors`] and all its blocks are unreadable.
    pub fn open(vol: &Volume, rec: &ObjectRecord, layout: &Layout) -> DiskBlocks {
        let params = *layout.params();
        let mut errors = Vec::new();
        let members = (0..params.members)
            .map(|m| {
                let path = vol.segment_path(m, rec.toi);
                let file = BlockFile::open_read(&path)
                    .map_err(|e| errors.push(format!("member {m}: {}: {e}", path.display())))
                    .ok();
                MemberFile {
                    file,
                    buf: AlignedBuf::new(params.block_len as usize),
                    block: None,
                }
            })
            .collect();
        DiskBlocks {
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

impl BlockSource for DiskBlocks {
    fn block(&mut self, member: u32, block: u64) -> Result<&[u8], BlockError> {
        let offset = self.layout.block_offset(block);
        let Some(src) = self.members.get_mut(member as usize) else {
            return Err(BlockError::Unreadable(format!("no member {member}")));
        };
        let Some(file) = &src.file else {
            return Err(BlockError::Unreadable(format!(
                "member {member} unreadable"
            )));
        };
        if src.block.as_ref().is_none_or(|(b, _)| *b != block) {
            let read = file.read_block(&mut src.buf, offset);
            if let Err(e) = &read {
                self.errors
                    .push(format!("member {member}: block {block}: {e}"));
            }
            src.block = Some((block, read.map_err(|_| ())));
        }
        match src.block {
            Some((_, Ok(()))) => Ok(src.buf.as_slice()),
            _ => Err(BlockError::Unreadable(format!(
                "member {member}: block {block} unreadable"
            ))),
        }
    }
}

/// Where an [`ObjectReader`] gets its blocks.
enum Blocks {
    /// One block at a time on the caller's thread, O_DIRECT: any order (check, rebuild).
    OnDemand(DiskBlocks),
    /// Read ahead in order by a thread per member through the page cache (`cat`).
    Ahead(PrefetchBlocks),
}

impl Blocks {
    fn errors(&self) -> &[String] {
        match self {
            Blocks::OnDemand(b) => b.errors(),
            Blocks::Ahead(b) => b.errors(),
        }
    }
}

impl BlockSource for Blocks {
    fn block(&mut self, member: u32, block: u64) -> Result<&[u8], BlockError> {
        match self {
            Blocks::OnDemand(b) => b.block(member, block),
            Blocks::Ahead(b) => b.block(member, block),
        }
    }
}

/// How an [`ObjectReader`] will walk the object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadOrder {
    /// Codewords in any order: blocks read when asked, bypassing the page cache.
    Any,
    /// Every codeword from the first on (a whole-object copy): the members' blocks are
    /// read ahead in parallel through the page cache.
    Sequential,
}

/// Reads codewords of one object from its segment files, decoding around damage.
pub struct ObjectReader {
    rec: ObjectRecord,
    layout: Layout,
    tsi: u32,
    blocks: Blocks,
    asm: Assembler,
    stats: ReadStats,
}

impl ObjectReader {
    /// Opens the complete object `name` for reads in any order.
    pub fn open(vol: &Volume, name: &str) -> Result<ObjectReader, StoreError> {
        let rec = vol.object(name)?;
        ObjectReader::for_record(vol, rec, ReadOrder::Any)
    }

    /// Opens an object by catalog record, for reads in `order`.
    pub fn for_record(
        vol: &Volume,
        rec: ObjectRecord,
        order: ReadOrder,
    ) -> Result<ObjectReader, StoreError> {
        let layout = vol.layout(&rec)?;
        let params = *layout.params();
        let n_max = (params.source_symbols + params.repair_symbols) as usize;
        let blocks = match order {
            ReadOrder::Any => Blocks::OnDemand(DiskBlocks::open(vol, &rec, &layout)),
            ReadOrder::Sequential => {
                let paths = (0..params.members)
                    .map(|m| vol.segment_path(m, rec.toi))
                    .collect();
                Blocks::Ahead(PrefetchBlocks::open(paths, &layout))
            }
        };
        Ok(ObjectReader {
            tsi: vol.tsi(),
            blocks,
            asm: Assembler::new(params.symbol_len as usize, n_max),
            rec,
            layout,
            stats: ReadStats::default(),
        })
    }

    /// The object's catalog record.
    pub fn record(&self) -> &ObjectRecord {
        &self.rec
    }

    /// The object's layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// What reading met so far.
    pub fn stats(&self) -> ReadStats {
        let mut stats = self.stats.clone();
        stats.member_errors = self.blocks.errors().to_vec();
        stats
    }

    /// Reads codeword `sbn`: afterwards [`Self::source`] holds its source bytes and, with
    /// [`Want::All`], [`Self::symbol`] every symbol. Returns the check of every symbol.
    pub fn read_codeword(&mut self, sbn: u32, want: Want) -> Result<&[SymbolCheck], StoreError> {
        let target = Target {
            layout: &self.layout,
            rec: &self.rec,
            tsi: self.tsi,
        };
        let (ready, tally) = read_codeword(&mut self.asm, target, sbn, want, &mut self.blocks)?;
        assert_eq!(ready, Readiness::Ready, "disk blocks are never pending");
        self.stats.codewords += 1;
        self.stats.symbols_missing += u64::from(tally.missing);
        self.stats.symbols_corrupt += u64::from(tally.corrupt);
        self.stats.symbols_rebuilt += u64::from(tally.rebuilt_source);
        self.stats.codewords_decoded += u64::from(tally.decoded);
        Ok(self.asm.checks())
    }

    /// The source bytes of codeword `sbn` (the one last read), without the padding of its
    /// last symbol.
    pub fn source(&self, sbn: u32) -> &[u8] {
        assert_eq!(
            self.asm.current(),
            Some(sbn),
            "codeword {sbn} is not the one read"
        );
        self.asm.source(self.layout.codeword_data_len(sbn))
    }

    /// Symbol `esi` of the codeword last read with [`Want::All`].
    pub fn symbol(&self, esi: u32) -> &[u8] {
        self.asm.symbol(esi)
    }

    /// Writes the whole object to `out`, checking the content CRC32C at the end.
    pub fn copy_to(
        &mut self,
        out: &mut dyn Write,
        progress: &mut dyn FnMut(u64),
    ) -> Result<ReadStats, StoreError> {
        let mut crc = 0u32;
        let mut done = 0u64;
        for sbn in 0..self.layout.codewords() {
            self.read_codeword(sbn, Want::Source)?;
            // The content CRC32C from the symbols' CRC32Cs found by the packet checks: one
            // pass of the CRC over the data, not two, and the same value.
            crc = self
                .asm
                .append_source_crc(crc, self.layout.codeword_data_len(sbn));
            let data = self.source(sbn);
            done += data.len() as u64;
            out.write_all(data)
                .map_err(StoreError::io("writing the output"))?;
            progress(done);
        }
        out.flush().map_err(StoreError::io("writing the output"))?;
        if crc != self.rec.content_crc32c {
            return Err(StoreError::Corrupt(format!(
                "object {:?}: content CRC32C {crc:08x} differs from the catalog's {:08x}",
                self.rec.name, self.rec.content_crc32c
            )));
        }
        Ok(self.stats())
    }
}
