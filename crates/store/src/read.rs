//! Reading objects back: every packet is verified (CRC32C and identifiers);
//! a missing, unreadable or damaged packet is an erasure, and the code
//! rebuilds whatever is lost, up to m symbols per codeword.

use std::collections::HashMap;
use std::io::Write;

use isnode_fec::Code;
use serde::Serialize;

use crate::catalog::ObjectRecord;
use crate::io::{AlignedBuf, BlockFile};
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

/// Reads one member's segment file of one object, a block at a time.
struct MemberSource {
    file: Option<BlockFile>,
    buf: AlignedBuf,
    cached: Option<u64>,
    /// Block whose read failed (its packets are erasures).
    failed: Option<u64>,
}

/// Reads codewords of one object, decoding around damage.
pub struct ObjectReader {
    rec: ObjectRecord,
    layout: Layout,
    tsi: u32,
    sources: Vec<MemberSource>,
    codes: HashMap<u32, Code>,
    /// n symbols of the current codeword, E bytes each.
    work: Vec<u8>,
    present: Vec<bool>,
    stats: ReadStats,
}

/// The state of one symbol as found on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SymbolCheck {
    /// Present and verified.
    Good,
    /// Not readable.
    Missing,
    /// Read but failed verification.
    Corrupt,
}

impl ObjectReader {
    /// Opens the complete object `name`.
    pub fn open(vol: &Volume, name: &str) -> Result<ObjectReader, StoreError> {
        let rec = vol.object(name)?;
        ObjectReader::for_record(vol, rec)
    }

    /// Opens an object by catalog record.
    pub fn for_record(vol: &Volume, rec: ObjectRecord) -> Result<ObjectReader, StoreError> {
        let layout = vol.layout(&rec)?;
        let params = *layout.params();
        let mut stats = ReadStats::default();
        let sources = (0..params.members)
            .map(|m| {
                let path = vol.segment_path(m, rec.toi);
                let file = match BlockFile::open_read(&path) {
                    Ok(f) => Some(f),
                    Err(e) => {
                        stats
                            .member_errors
                            .push(format!("member {m}: {}: {e}", path.display()));
                        None
                    }
                };
                MemberSource {
                    file,
                    buf: AlignedBuf::new(params.block_len as usize),
                    cached: None,
                    failed: None,
                }
            })
            .collect();
        let n_max = (params.source_symbols + params.repair_symbols) as usize;
        Ok(ObjectReader {
            tsi: vol.tsi(),
            work: vec![0u8; n_max * params.symbol_len as usize],
            present: vec![false; n_max],
            rec,
            layout,
            sources,
            codes: HashMap::new(),
            stats,
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
    pub fn stats(&self) -> &ReadStats {
        &self.stats
    }

    /// Fetches the symbol `esi` of codeword `sbn` from disk into `out`, verifying it.
    fn fetch(&mut self, sbn: u32, esi: u32, out: &mut [u8]) -> SymbolCheck {
        let member = self.layout.member_of(sbn, esi);
        let run = self.layout.member_run(sbn, member);
        let index = run.first_packet + u64::from(esi - run.esis.start);
        let (block, offset) = self.layout.packet_position(index);
        let block_len = self.layout.params().block_len as u64;
        let packet_len = self.layout.params().packet_len() as usize;
        let src = &mut self.sources[member as usize];
        let Some(file) = &src.file else {
            return SymbolCheck::Missing;
        };
        if src.failed == Some(block) {
            return SymbolCheck::Missing;
        }
        if src.cached != Some(block) {
            src.cached = None;
            if let Err(e) = file.read_block(&mut src.buf, block * block_len) {
                self.stats
                    .member_errors
                    .push(format!("member {member}: block {block}: {e}"));
                src.failed = Some(block);
                return SymbolCheck::Missing;
            }
            src.cached = Some(block);
        }
        let bytes = &src.buf.as_slice()[offset..offset + packet_len];
        let expected = isnode_wire::DataPacketId {
            tsi: self.tsi,
            toi: self.rec.toi,
            sbn,
            esi: esi as u8,
        };
        let ok = isnode_wire::parse_data_packet(bytes)
            .is_ok_and(|p| p.id == expected && p.symbol.len() == out.len());
        if !ok {
            return SymbolCheck::Corrupt;
        }
        out.copy_from_slice(&bytes[isnode_wire::DATA_HEADER_LEN..]);
        SymbolCheck::Good
    }

    /// Reads codeword `sbn`; afterwards [`Self::source`] holds its k source symbols.
    ///
    /// With `all`, repair symbols are read (and rebuilt if lost) too, for [`Self::symbol`].
    /// Returns the check result of every one of its n symbols.
    pub fn read_codeword(&mut self, sbn: u32, all: bool) -> Result<Vec<SymbolCheck>, StoreError> {
        let k = self.layout.source_symbols(sbn);
        let n = self.layout.encoding_symbols(sbn);
        let e = self.layout.params().symbol_len as usize;
        let mut checks = Vec::with_capacity(n as usize);
        let mut work = std::mem::take(&mut self.work);
        for esi in 0..n {
            let slot = &mut work[esi as usize * e..(esi as usize + 1) * e];
            // Repair symbols are only needed when a source symbol is lost, or when asked.
            let needed = all || esi < k || checks.iter().any(|c| *c != SymbolCheck::Good);
            let c = if needed {
                self.fetch(sbn, esi, slot)
            } else {
                SymbolCheck::Missing
            };
            if needed {
                match c {
                    SymbolCheck::Good => {}
                    SymbolCheck::Missing => self.stats.symbols_missing += 1,
                    SymbolCheck::Corrupt => self.stats.symbols_corrupt += 1,
                }
            }
            self.present[esi as usize] = c == SymbolCheck::Good;
            checks.push(c);
        }
        self.stats.codewords += 1;
        let source_lost = checks[..k as usize]
            .iter()
            .filter(|c| **c != SymbolCheck::Good)
            .count();
        let repair_lost = checks[k as usize..].iter().any(|c| *c != SymbolCheck::Good);
        if source_lost > 0 || (all && repair_lost) {
            let have = self.present[..n as usize].iter().filter(|p| **p).count() as u32;
            if have < k {
                self.work = work;
                return Err(StoreError::Unrecoverable {
                    name: self.rec.name.clone(),
                    sbn,
                    have,
                    need: k,
                });
            }
            let m = self.layout.params().repair_symbols;
            let code = match self.codes.entry(k) {
                std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(Code::new(k as usize, (k + m) as usize)?)
                }
            };
            let mut shards: Vec<&mut [u8]> = work[..n as usize * e].chunks_exact_mut(e).collect();
            if all {
                code.reconstruct_all(&mut shards, &self.present[..n as usize])?;
            } else {
                code.reconstruct(&mut shards, &self.present[..n as usize])?;
            }
            self.stats.codewords_decoded += 1;
            self.stats.symbols_rebuilt += source_lost as u64;
        }
        self.work = work;
        Ok(checks)
    }

    /// The source bytes of the codeword last read, without the padding of the last symbol.
    pub fn source(&self, sbn: u32) -> &[u8] {
        &self.work[..self.layout.codeword_data_len(sbn) as usize]
    }

    /// Symbol `esi` of the codeword last read with `all`.
    pub fn symbol(&self, esi: u32) -> &[u8] {
        let e = self.layout.params().symbol_len as usize;
        &self.work[esi as usize * e..(esi as usize + 1) * e]
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
            self.read_codeword(sbn, false)?;
            let data = self.source(sbn);
            crc = crc32c::crc32c_append(crc, data);
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
        Ok(self.stats.clone())
    }
}
