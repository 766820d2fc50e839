//! The one codeword read path: fetch a codeword's packets from their blocks, verify each,
//! and rebuild what is missing through the code.
//!
//! Every reader of stored packets goes through here: `cat` and `check --repair` (blocks
//! read from the segment files by [`crate::read::ObjectReader`]), and the server's
//! degraded path (blocks from its shared pool). Where the blocks come from is the
//! caller's [`BlockSource`]; this module decides which symbols are needed, verifies them
//! ([`verify_packet`]), and decodes ([`Assembler`]).
//!
//! A block that cannot be given yet ([`BlockError::Pending`]: a read in flight) makes the
//! read answer [`Readiness::Pending`] without decoding, so that an event loop never
//! waits here: it asks again when the read completes.

use std::collections::HashMap;

use isnode_fec::Code;
use isnode_wire::DataPacketId;

use crate::crc_shift::ZeroShift;
use crate::records::ObjectRecord;
use crate::{Layout, StoreError};

/// Which symbols of a codeword a read must produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Want {
    /// The k source symbols; repair symbols are read only to rebuild lost source ones.
    Source,
    /// All n symbols: a lost repair symbol is rebuilt too.
    All,
}

/// The state of one symbol as found in its block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SymbolCheck {
    /// Present and verified.
    Good,
    /// Not readable (or not read: not needed).
    Missing,
    /// Read but failed verification (CRC32C, identifiers, length).
    Corrupt,
}

/// Why a [`BlockSource`] cannot give a block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BlockError {
    /// Unreadable or failed its checksum: its packets are erasures. The string says why
    /// (the source reports it; the read path only counts erasures).
    Unreadable(String),
    /// Not in memory yet (a read is in flight): read the codeword again later.
    Pending,
}

/// Where the blocks of one object's segment files come from.
pub trait BlockSource {
    /// The bytes of block `block` of `member`'s segment file (the whole block).
    fn block(&mut self, member: u32, block: u64) -> Result<&[u8], BlockError>;
}

/// Whether a codeword read finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readiness {
    /// Every wanted symbol is in the assembler (read or rebuilt).
    Ready,
    /// A block is not available yet: nothing was decoded.
    Pending,
}

/// What one codeword read met.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CodewordTally {
    /// Symbols needed but not readable.
    pub missing: u32,
    /// Symbols read but failing their checks.
    pub corrupt: u32,
    /// Source symbols rebuilt by decoding.
    pub rebuilt_source: u32,
    /// Whether the codeword was decoded.
    pub decoded: bool,
}

/// The object whose codewords are read: its layout and the identifiers its packets carry.
#[derive(Clone, Copy, Debug)]
pub struct Target<'a> {
    /// Where the packets are.
    pub layout: &'a Layout,
    /// The catalog record (TOI, name for errors).
    pub rec: &'a ObjectRecord,
    /// The volume's FLUTE TSI.
    pub tsi: u32,
}

/// Verifies a stored packet against the identifiers it must carry; returns its symbol.
///
/// The packet's own CRC32C (EXT_CRC32C) covers every byte but itself; a packet that
/// fails it, carries other identifiers, or has a symbol of another length is rejected.
pub fn verify_packet<'a>(
    bytes: &'a [u8],
    expected: &DataPacketId,
    symbol_len: usize,
) -> Option<&'a [u8]> {
    let p = isnode_wire::parse_data_packet(bytes).ok()?;
    (p.id == *expected && p.symbol.len() == symbol_len).then_some(p.symbol)
}

/// Where a data packet's CRC32C field is: the CRC covers the bytes before it and after it.
const CRC_FIELD: std::ops::Range<usize> = 20..24;

/// [`verify_packet`], also giving the CRC32C of the symbol alone.
///
/// The packet's CRC32C is computed in two parts, the header's bytes and the symbol's
/// (joined with `shift`, which must be [`ZeroShift`] for `symbol_len` bytes): the same
/// value [`verify_packet`] computes, so the check is the same, and the symbol's part is
/// kept for a caller that needs the CRC32C of the data (the content check of `cat`), which
/// then need not run the CRC over the same bytes a second time.
pub fn verify_packet_with_symbol_crc<'a>(
    bytes: &'a [u8],
    expected: &DataPacketId,
    symbol_len: usize,
    shift: &ZeroShift,
) -> Option<(&'a [u8], u32)> {
    let (p, carried) = isnode_wire::parse_data_packet_unverified(bytes).ok()?;
    if p.id != *expected || p.symbol.len() != symbol_len || shift.len() != symbol_len {
        return None;
    }
    let fpi = bytes.get(CRC_FIELD.end..isnode_wire::DATA_HEADER_LEN)?;
    let head = crc32c::crc32c_append(crc32c::crc32c(bytes.get(..CRC_FIELD.start)?), fpi);
    let symbol_crc = crc32c::crc32c(p.symbol);
    (shift.append(head, symbol_crc) == carried).then_some((p.symbol, symbol_crc))
}

/// Verifies a whole block against the CRC32C the catalog holds for it (if any).
pub fn verify_block(bytes: &[u8], expected_crc32c: Option<u32>) -> Result<(), String> {
    let Some(expected) = expected_crc32c else {
        return Ok(());
    };
    let got = crc32c::crc32c(bytes);
    if got == expected {
        Ok(())
    } else {
        Err(format!("CRC32C {got:08x}, catalog says {expected:08x}"))
    }
}

/// Collects the symbols of one codeword and rebuilds the lost ones (sans-IO: symbols are
/// offered by the caller). Memory for the largest codeword is allocated once.
pub struct Assembler {
    symbol_len: usize,
    /// n symbols of the current codeword, `symbol_len` bytes each.
    work: Vec<u8>,
    checks: Vec<SymbolCheck>,
    /// Source symbols of the current codeword not (yet) good.
    source_bad: u32,
    /// Scratch: which symbols are good, for the decoder.
    present: Vec<bool>,
    /// Codes by k (the last codeword of an object may be shorter).
    codes: HashMap<u32, Code>,
    /// The CRC32C carried over one symbol's bytes.
    shift: ZeroShift,
    /// CRC32C of each good symbol's bytes (found while verifying its packet).
    symbol_crcs: Vec<u32>,
    sbn: Option<u32>,
    k: u32,
    n: u32,
}

impl Assembler {
    /// An assembler for codewords of at most `max_symbols` symbols of `symbol_len` bytes.
    pub fn new(symbol_len: usize, max_symbols: usize) -> Assembler {
        Assembler {
            symbol_len,
            work: vec![0; symbol_len * max_symbols],
            checks: vec![SymbolCheck::Missing; max_symbols],
            source_bad: 0,
            present: vec![false; max_symbols],
            codes: HashMap::new(),
            shift: ZeroShift::new(symbol_len),
            symbol_crcs: vec![0; max_symbols],
            sbn: None,
            k: 0,
            n: 0,
        }
    }

    /// Starts codeword `sbn` of `layout`: every symbol missing.
    pub fn begin(&mut self, layout: &Layout, sbn: u32) {
        let (k, n) = (layout.source_symbols(sbn), layout.encoding_symbols(sbn));
        assert!(
            n as usize <= self.checks.len()
                && layout.params().symbol_len as usize == self.symbol_len,
            "codeword {sbn} ({n} symbols) does not fit the assembler"
        );
        self.checks[..n as usize].fill(SymbolCheck::Missing);
        (self.sbn, self.k, self.n, self.source_bad) = (Some(sbn), k, n, k);
    }

    /// The codeword begun last, if any.
    pub fn current(&self) -> Option<u32> {
        self.sbn
    }

    /// Whether symbol `esi` must be read for `want`: source symbols always, repair ones
    /// when asked for all or once a source symbol is lost.
    pub fn needs(&self, esi: u32, want: Want) -> bool {
        want == Want::All || esi < self.k || self.source_bad > 0
    }

    /// Offers the stored packet of symbol `esi` (`None`: unreadable); verifies it.
    pub fn offer(&mut self, esi: u32, packet: Option<&[u8]>, expected: &DataPacketId) {
        assert!(esi < self.n, "symbol {esi} of a codeword of {}", self.n);
        let e = self.symbol_len;
        let check = match packet {
            None => SymbolCheck::Missing,
            Some(bytes) => match verify_packet_with_symbol_crc(bytes, expected, e, &self.shift) {
                Some((symbol, crc)) => {
                    let at = esi as usize * e;
                    self.work[at..at + e].copy_from_slice(symbol);
                    self.symbol_crcs[esi as usize] = crc;
                    SymbolCheck::Good
                }
                None => SymbolCheck::Corrupt,
            },
        };
        let old = std::mem::replace(&mut self.checks[esi as usize], check);
        if esi < self.k {
            let was_good = u32::from(old == SymbolCheck::Good);
            let is_good = u32::from(check == SymbolCheck::Good);
            self.source_bad = self.source_bad + was_good - is_good;
        }
    }

    /// The check of every symbol of the current codeword.
    pub fn checks(&self) -> &[SymbolCheck] {
        &self.checks[..self.n as usize]
    }

    /// Rebuilds what `want` needs and is lost, if the code can (k good symbols).
    pub fn rebuild(&mut self, want: Want) -> Result<CodewordTally, RebuildError> {
        let (k, n, e) = (self.k, self.n, self.symbol_len);
        let source_lost = self.source_bad;
        let mut tally = CodewordTally::default();
        for (esi, c) in self.checks[..n as usize].iter().enumerate() {
            let needed = want == Want::All || (esi as u32) < k || source_lost > 0;
            match c {
                SymbolCheck::Missing if needed => tally.missing += 1,
                SymbolCheck::Corrupt => tally.corrupt += 1,
                _ => {}
            }
        }
        let repair_lost = self.checks[k as usize..n as usize]
            .iter()
            .any(|c| *c != SymbolCheck::Good);
        if source_lost == 0 && !(want == Want::All && repair_lost) {
            return Ok(tally);
        }
        for (p, c) in self.present.iter_mut().zip(&self.checks[..n as usize]) {
            *p = *c == SymbolCheck::Good;
        }
        let present = &self.present[..n as usize];
        let have = present.iter().filter(|p| **p).count() as u32;
        if have < k {
            return Err(RebuildError::TooFew { have, need: k });
        }
        if let std::collections::hash_map::Entry::Vacant(v) = self.codes.entry(k) {
            v.insert(Code::new(k as usize, n as usize)?);
        }
        let code = self
            .codes
            .get(&k)
            .ok_or(RebuildError::TooFew { have, need: k })?;
        let mut shards: Vec<&mut [u8]> = self.work[..n as usize * e].chunks_exact_mut(e).collect();
        match want {
            Want::All => code.reconstruct_all(&mut shards, present)?,
            Want::Source => code.reconstruct(&mut shards, present)?,
        }
        tally.decoded = true;
        tally.rebuilt_source = source_lost;
        Ok(tally)
    }

    /// Symbol `esi` of the current codeword (valid for a good, or rebuilt, symbol).
    pub fn symbol(&self, esi: u32) -> &[u8] {
        assert!(esi < self.n, "symbol {esi} of a codeword of {}", self.n);
        let e = self.symbol_len;
        &self.work[esi as usize * e..(esi as usize + 1) * e]
    }

    /// The k source symbols of the current codeword, back to back, `len` bytes of them
    /// (the codeword's data length: the last symbol may be padding).
    pub fn source(&self, len: u64) -> &[u8] {
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        assert!(
            len <= self.k as usize * self.symbol_len,
            "source of {len} bytes"
        );
        &self.work[..len]
    }

    /// `crc32c_append(crc, self.source(len))`, with the CRC32C of each whole symbol read
    /// good taken from the check of its packet (the same value: see [`crate::crc_shift`])
    /// and computed over the bytes for rebuilt symbols and a last partial one.
    pub fn append_source_crc(&self, mut crc: u32, len: u64) -> u32 {
        let data = self.source(len);
        let e = self.symbol_len;
        let whole = data.len() / e;
        for (esi, symbol) in data.chunks_exact(e).enumerate().take(whole) {
            crc = match self.checks[esi] {
                SymbolCheck::Good => self.shift.append(crc, self.symbol_crcs[esi]),
                SymbolCheck::Missing | SymbolCheck::Corrupt => crc32c::crc32c_append(crc, symbol),
            };
        }
        crc32c::crc32c_append(crc, &data[whole * e..])
    }

    /// Every symbol of the current codeword, back to back (`n * symbol_len` bytes).
    pub fn symbols_mut(&mut self) -> &mut [u8] {
        let end = self.n as usize * self.symbol_len;
        &mut self.work[..end]
    }
}

/// Why a codeword could not be rebuilt.
#[derive(Debug, thiserror::Error)]
pub enum RebuildError {
    /// Fewer than k good symbols.
    #[error("only {have} of the {need} symbols needed are readable")]
    TooFew {
        /// Good symbols.
        have: u32,
        /// Symbols needed (k).
        need: u32,
    },
    /// The codec refused.
    #[error("FEC: {0}")]
    Fec(#[from] isnode_fec::FecError),
}

/// Reads codeword `sbn` of `target` from `src` into `asm`: fetches what `want` needs,
/// verifies every packet, and rebuilds the lost symbols. Never waits: a block the source
/// cannot give yet makes the answer [`Readiness::Pending`].
pub fn read_codeword(
    asm: &mut Assembler,
    target: Target<'_>,
    sbn: u32,
    want: Want,
    src: &mut dyn BlockSource,
) -> Result<(Readiness, CodewordTally), StoreError> {
    let layout = target.layout;
    let packet_len = layout.params().packet_len() as usize;
    asm.begin(layout, sbn);
    let mut pending = false;
    for esi in 0..layout.encoding_symbols(sbn) {
        if !asm.needs(esi, want) {
            continue;
        }
        let at = layout.symbol_location(sbn, esi);
        let packet = match src.block(at.member, at.block) {
            Ok(bytes) => bytes.get(at.offset..at.offset + packet_len),
            Err(BlockError::Unreadable(_)) => None,
            Err(BlockError::Pending) => {
                pending = true;
                None
            }
        };
        let expected = DataPacketId {
            tsi: target.tsi,
            toi: target.rec.toi,
            sbn,
            esi: u8::try_from(esi).map_err(|_| StoreError::Corrupt(format!("ESI {esi} > 255")))?,
        };
        asm.offer(esi, packet, &expected);
    }
    if pending {
        return Ok((Readiness::Pending, CodewordTally::default()));
    }
    match asm.rebuild(want) {
        Ok(tally) => Ok((Readiness::Ready, tally)),
        Err(RebuildError::TooFew { have, need }) => Err(StoreError::Unrecoverable {
            name: target.rec.name.clone(),
            sbn,
            have,
            need,
        }),
        Err(RebuildError::Fec(e)) => Err(StoreError::Fec(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The two-part check accepts exactly what the whole-packet check accepts, every
    /// single-bit flip of a packet included, and gives the symbol's own CRC32C.
    #[test]
    fn the_split_check_is_the_whole_check() {
        let id = DataPacketId {
            tsi: 9,
            toi: 4,
            sbn: 77,
            esi: 3,
        };
        let symbol: Vec<u8> = (0..96u32).map(|i| (i * 37 + 5) as u8).collect();
        let mut packet = vec![0u8; isnode_wire::DATA_HEADER_LEN + symbol.len()];
        isnode_wire::build_data_packet(&mut packet, &id, &symbol).expect("packet");
        let shift = ZeroShift::new(symbol.len());
        let (got, crc) =
            verify_packet_with_symbol_crc(&packet, &id, symbol.len(), &shift).expect("good");
        assert_eq!((got, crc), (&symbol[..], crc32c::crc32c(&symbol)));
        for bit in 0..packet.len() * 8 {
            let mut bad = packet.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            let whole = verify_packet(&bad, &id, symbol.len()).is_some();
            let split = verify_packet_with_symbol_crc(&bad, &id, symbol.len(), &shift).is_some();
            assert!(!whole && !split, "bit {bit}: whole {whole}, split {split}");
        }
        let other = DataPacketId { esi: 4, ..id };
        assert!(verify_packet_with_symbol_crc(&packet, &other, symbol.len(), &shift).is_none());
        assert!(verify_packet_with_symbol_crc(&packet, &id, 95, &shift).is_none());
    }
}
