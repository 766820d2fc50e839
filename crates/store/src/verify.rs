//! Pure verification of one stored codeword (sans-IO): each packet's framing, CRC32C and
//! identifiers, its digest against the catalog's, and the parity of the codeword (its
//! repair symbols re-encoded from its source symbols with the RS code and compared).

use isnode_fec::Code;
use isnode_wire::digest::{packet_digest, DIGEST_LEN};
use isnode_wire::DataPacketId;
use serde::Serialize;

use crate::codeword::verify_packet;

/// What verification found of one stored symbol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SymbolVerdict {
    /// Parses, CRC32C good, right identifiers, digest and parity agree (where known).
    Good,
    /// Not readable (member, file or block missing or unreadable).
    Missing,
    /// Fails its CRC32C, framing or identifiers.
    Corrupt,
    /// Passes its CRC32C but differs from the digest recorded at ingest.
    DigestMismatch,
    /// Passes its own checks, but is not the repair symbol the code gives for the
    /// codeword's source symbols.
    ParityMismatch,
}

/// Whether the parity of a codeword could be checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ParityCheck {
    /// Every source symbol was good: the repair symbols were re-encoded and compared.
    Checked,
    /// A source symbol was lost: there is nothing to re-encode from.
    Unchecked,
}

/// The verdicts on one codeword's symbols, by ESI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodewordVerdict {
    /// One verdict per ESI (k + m).
    pub symbols: Vec<SymbolVerdict>,
    /// Whether the parity was checked.
    pub parity: ParityCheck,
}

impl CodewordVerdict {
    /// Symbols not good.
    pub fn bad(&self) -> usize {
        self.symbols
            .iter()
            .filter(|v| **v != SymbolVerdict::Good)
            .count()
    }

    /// Whether the code can still rebuild the codeword: at least k good symbols.
    pub fn recoverable(&self, k: u32) -> bool {
        self.symbols.len() - self.bad() >= k as usize
    }
}

/// One stored codeword to verify: the packets as read, by ESI (`None`: unreadable).
pub struct StoredCodeword<'a> {
    /// Identifiers of ESI 0 (the others differ by ESI).
    pub first_id: DataPacketId,
    /// Source symbols k.
    pub k: u32,
    /// Symbol length E.
    pub symbol_len: usize,
    /// The packets, one per ESI.
    pub packets: &'a [Option<&'a [u8]>],
    /// The catalog's digests of the packets (n × 16 bytes), if the object has them.
    pub digests: Option<&'a [u8]>,
}

/// Verifies one codeword. `code` is the RS code for its k and n; `scratch` is resized
/// to hold its repair symbols.
pub fn verify_codeword(
    cw: &StoredCodeword<'_>,
    code: &Code,
    scratch: &mut Vec<u8>,
) -> CodewordVerdict {
    let n = cw.packets.len();
    let mut symbols = Vec::with_capacity(n);
    let mut good_symbols: Vec<Option<&[u8]>> = Vec::with_capacity(n);
    for (esi, packet) in cw.packets.iter().enumerate() {
        let id = DataPacketId {
            esi: u8::try_from(esi).unwrap_or(u8::MAX),
            ..cw.first_id
        };
        let (verdict, symbol) = verify_one(cw, esi, *packet, &id);
        symbols.push(verdict);
        good_symbols.push(symbol);
    }
    let parity = check_parity(cw, code, &good_symbols, &mut symbols, scratch);
    CodewordVerdict { symbols, parity }
}

fn verify_one<'a>(
    cw: &StoredCodeword<'a>,
    esi: usize,
    packet: Option<&'a [u8]>,
    id: &DataPacketId,
) -> (SymbolVerdict, Option<&'a [u8]>) {
    let Some(bytes) = packet else {
        return (SymbolVerdict::Missing, None);
    };
    let Some(symbol) = verify_packet(bytes, id, cw.symbol_len) else {
        return (SymbolVerdict::Corrupt, None);
    };
    if let Some(digests) = cw.digests {
        let want = digests.get(esi * DIGEST_LEN..(esi + 1) * DIGEST_LEN);
        if want != Some(&packet_digest(bytes)[..]) {
            return (SymbolVerdict::DigestMismatch, None);
        }
    }
    (SymbolVerdict::Good, Some(symbol))
}

/// Re-encodes the repair symbols from the source symbols and marks each good repair
/// symbol that differs.
fn check_parity(
    cw: &StoredCodeword<'_>,
    code: &Code,
    good: &[Option<&[u8]>],
    verdicts: &mut [SymbolVerdict],
    scratch: &mut Vec<u8>,
) -> ParityCheck {
    let k = cw.k as usize;
    let e = cw.symbol_len;
    let Some(source) = good
        .get(..k)
        .and_then(|s| s.iter().copied().collect::<Option<Vec<_>>>())
    else {
        return ParityCheck::Unchecked;
    };
    let m = good.len().saturating_sub(k);
    scratch.clear();
    scratch.resize(m * e, 0);
    let mut repair: Vec<&mut [u8]> = scratch.chunks_exact_mut(e).collect();
    if code.encode(&source, &mut repair).is_err() {
        return ParityCheck::Unchecked;
    }
    for (r, computed) in repair.iter().enumerate() {
        if let Some(stored) = good[k + r] {
            if stored != &computed[..] {
                verdicts[k + r] = SymbolVerdict::ParityMismatch;
            }
        }
    }
    ParityCheck::Checked
}

#[cfg(test)]
mod tests {
    use super::*;

    const E: usize = 16;
    const K: usize = 4;
    const N: usize = 7;

    fn id() -> DataPacketId {
        DataPacketId {
            tsi: 9,
            toi: 3,
            sbn: 5,
            esi: 0,
        }
    }

    /// The n packets of a codeword and their digests, as ingest writes them.
    fn codeword(code: &Code) -> (Vec<Vec<u8>>, Vec<u8>) {
        let source: Vec<Vec<u8>> = (0..K).map(|i| vec![i as u8 * 17 + 1; E]).collect();
        let mut repair = vec![vec![0u8; E]; N - K];
        let src: Vec<&[u8]> = source.iter().map(|s| &s[..]).collect();
        let mut rep: Vec<&mut [u8]> = repair.iter_mut().map(|r| &mut r[..]).collect();
        code.encode(&src, &mut rep).unwrap();
        let mut digests = Vec::new();
        let packets = source
            .iter()
            .chain(&repair)
            .enumerate()
            .map(|(esi, sym)| {
                let mut p = vec![0u8; isnode_wire::DATA_HEADER_LEN + E];
                let pid = DataPacketId {
                    esi: esi as u8,
                    ..id()
                };
                isnode_wire::build_data_packet(&mut p, &pid, sym).unwrap();
                digests.extend_from_slice(&packet_digest(&p));
                p
            })
            .collect();
        (packets, digests)
    }

    fn verify(packets: &[Vec<u8>], missing: &[usize], digests: Option<&[u8]>) -> CodewordVerdict {
        let code = Code::new(K, N).unwrap();
        let refs: Vec<Option<&[u8]>> = packets
            .iter()
            .enumerate()
            .map(|(i, p)| (!missing.contains(&i)).then_some(&p[..]))
            .collect();
        let cw = StoredCodeword {
            first_id: id(),
            k: K as u32,
            symbol_len: E,
            packets: &refs,
            digests,
        };
        verify_codeword(&cw, &code, &mut Vec::new())
    }

    #[test]
    fn a_clean_codeword_is_all_good_and_parity_checked() {
        let (packets, digests) = codeword(&Code::new(K, N).unwrap());
        let v = verify(&packets, &[], Some(&digests));
        assert_eq!(v.symbols, vec![SymbolVerdict::Good; N]);
        assert_eq!(v.parity, ParityCheck::Checked);
        assert_eq!(v.bad(), 0);
    }

    #[test]
    fn a_flipped_byte_is_corrupt_and_a_lost_source_leaves_parity_unchecked() {
        let (mut packets, digests) = codeword(&Code::new(K, N).unwrap());
        packets[1][isnode_wire::DATA_HEADER_LEN + 3] ^= 0x40;
        let v = verify(&packets, &[5], Some(&digests));
        assert_eq!(v.symbols[1], SymbolVerdict::Corrupt);
        assert_eq!(v.symbols[5], SymbolVerdict::Missing);
        assert_eq!(v.parity, ParityCheck::Unchecked);
        assert_eq!(v.bad(), 2);
        assert!(v.recoverable(K as u32));
    }

    #[test]
    fn a_wrong_repair_symbol_with_a_valid_crc_fails_parity_and_its_digest() {
        let code = Code::new(K, N).unwrap();
        let (mut packets, digests) = codeword(&code);
        // A well-formed packet whose symbol is not the code's: CRC good, parity wrong.
        let pid = DataPacketId { esi: 6, ..id() };
        isnode_wire::build_data_packet(&mut packets[6], &pid, &[0xAB; E]).unwrap();
        assert_eq!(
            verify(&packets, &[], Some(&digests)).symbols[6],
            SymbolVerdict::DigestMismatch
        );
        let v = verify(&packets, &[], None);
        assert_eq!(v.symbols[6], SymbolVerdict::ParityMismatch);
        assert_eq!(v.parity, ParityCheck::Checked);
    }

    #[test]
    fn a_packet_of_another_codeword_is_corrupt() {
        let (mut packets, _) = codeword(&Code::new(K, N).unwrap());
        packets.swap(0, 2);
        let v = verify(&packets, &[], None);
        assert_eq!(v.symbols[0], SymbolVerdict::Corrupt);
        assert_eq!(v.symbols[2], SymbolVerdict::Corrupt);
        assert!(!verify(&packets, &[1, 3, 4], None).recoverable(K as u32));
    }
}
