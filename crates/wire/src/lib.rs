//! Sans-IO ALC/LCT/FLUTE packet codec of isnode.
//!
//! isnode cuts every file at ingest into RFC 5510 Reed-Solomon codewords (FEC Encoding ID 5)
//! and stores each encoding symbol as the complete ALC/LCT packet (RFC 5775, RFC 5651) it
//! will be on the wire. This crate builds and parses those packets, the FLUTE (RFC 6726)
//! File Delivery Table that describes the objects of a session, and the RFC 5052 block
//! partitioning both sides agree on. It does no I/O: it reads and writes byte slices.
//!
//! The byte-level specification is `docs/wire.md`. In short, a data packet is
//!
//! ```text
//! offset  0  LCT word 0: V=1 C=0 PSI=0 S=1 O=1 H=0 A=0 B=0 | HDR_LEN=6 | CP=5
//! offset  4  CCI = 0 (32 bits)
//! offset  8  TSI (32 bits)
//! offset 12  TOI (32 bits)
//! offset 16  EXT_CRC: HET=120 | HEL=2 | reserved (16 bits) = 0
//! offset 20  CRC32C of the packet without these 4 bytes
//! offset 24  FEC Payload ID: SBN (24 bits) | ESI (8 bits)
//! offset 28  encoding symbol (E bytes; the last source symbol of an object is zero-padded)
//! ```
//!
//! Standard FLUTE receivers (for example the `flute` crate) skip the unknown EXT_CRC
//! extension and receive the stream as plain FEC Encoding ID 5 traffic.

#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod digest;
pub mod fdt;
pub mod partition;
mod sha256_lanes;

use fdt::FecOti;

/// Length of the headers of an isnode data packet: LCT header with EXT_CRC (24 bytes)
/// plus the FEC Payload ID of FEC Encoding ID 5 (4 bytes). The symbol starts at this offset.
pub const DATA_HEADER_LEN: usize = 28;

/// Header Extension Type of EXT_CRC, isnode's CRC32C extension (variable-length range, unassigned).
pub const EXT_CRC32C_HET: u8 = 120;

/// Header Extension Type of EXT_FTI (RFC 5775 §5.1).
pub const EXT_FTI_HET: u8 = 64;

/// Header Extension Type of EXT_FDT (RFC 6726 §3.4.1).
pub const EXT_FDT_HET: u8 = 192;

/// Header Extension Type of EXT_CENC (RFC 6726 §3.4.3).
pub const EXT_CENC_HET: u8 = 193;

/// FEC Encoding ID of Compact No-Code (RFC 5445), used by isnode for the FDT object.
pub const FEC_ENCODING_ID_NO_CODE: u8 = 0;

/// FEC Encoding ID of Reed-Solomon over GF(2^8) (RFC 5510 §5), used for every isnode object.
pub const FEC_ENCODING_ID_RS28: u8 = 5;

/// LCT codepoint of isnode data packets. Like the `flute` crate and other FLUTE
/// implementations, isnode sets the codepoint to the FEC Encoding ID.
pub const DATA_CODEPOINT: u8 = FEC_ENCODING_ID_RS28;

/// FLUTE version carried in EXT_FDT (RFC 6726 is version 2).
pub const FLUTE_VERSION: u8 = 2;

/// Largest Source Block Number of FEC Encoding ID 5 (24 bits).
pub const MAX_SBN: u32 = 0x00FF_FFFF;

/// Largest encoding symbol length: E is a 16-bit field of the FEC OTI.
pub const MAX_SYMBOL_LEN: usize = u16::MAX as usize;

/// Offset of the CRC32C value in an isnode data packet.
const DATA_CRC_OFFSET: usize = 20;

/// Errors of this crate: every malformed input yields one of these, never a panic.
#[derive(Debug, thiserror::Error, PartialEq, Eq, Clone)]
pub enum WireError {
    /// The buffer is shorter than the structure it must hold.
    #[error("buffer too short: need {need} bytes, got {got}")]
    TooShort {
        /// Bytes needed.
        need: usize,
        /// Bytes available.
        got: usize,
    },
    /// The LCT version is not 1.
    #[error("unsupported LCT version {0} (expected 1)")]
    BadVersion(u8),
    /// HDR_LEN is smaller than the fixed part of the LCT header.
    #[error("LCT HDR_LEN of {hdr_len} bytes is shorter than its fixed part of {fixed} bytes")]
    BadHeaderLength {
        /// HDR_LEN in bytes.
        hdr_len: usize,
        /// Length of the fixed fields (first word, CCI, TSI, TOI) in bytes.
        fixed: usize,
    },
    /// A header extension is malformed (zero or overflowing length, wrong size, duplicate).
    #[error("malformed header extension HET={het} at offset {offset}: {reason}")]
    BadExtension {
        /// Header Extension Type.
        het: u8,
        /// Offset of the extension in the packet.
        offset: usize,
        /// What is wrong.
        reason: &'static str,
    },
    /// The codepoint names an FEC scheme whose FEC Payload ID this crate does not know.
    #[error("unsupported codepoint / FEC Encoding ID {0}")]
    UnsupportedCodepoint(u8),
    /// A Source Block Number does not fit the 24-bit field of FEC Encoding ID 5.
    #[error("source block number {0} does not fit in 24 bits")]
    SbnOutOfRange(u32),
    /// An encoding symbol is empty or longer than 65535 bytes.
    #[error("symbol length {0} is not in 1..=65535")]
    BadSymbolLength(usize),
    /// A parameter is out of its range (FEC OTI, partitioning, FDT instance ID, ...).
    #[error("invalid parameter: {0}")]
    InvalidParameter(&'static str),
    /// The packet is not laid out as an isnode data packet (see [`parse_data_packet`]).
    #[error("not an isnode data packet: {0}")]
    NotDataPacket(&'static str),
    /// The EXT_CRC of an isnode data packet does not match its bytes: the packet is corrupt.
    #[error("CRC32C mismatch: packet carries {carried:#010x}, bytes give {computed:#010x}")]
    CrcMismatch {
        /// CRC32C carried in EXT_CRC.
        carried: u32,
        /// CRC32C computed over the received bytes.
        computed: u32,
    },
    /// The FDT instance XML is malformed or lacks a required attribute.
    #[error("FDT XML: {0}")]
    FdtXml(String),
}

/// Identity of an isnode data packet: session, object, block and symbol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DataPacketId {
    /// Transport Session Identifier (32-bit field).
    pub tsi: u32,
    /// Transport Object Identifier (32-bit field; 0 is the FDT, objects use 1 and up).
    pub toi: u32,
    /// Source Block Number (must fit in 24 bits).
    pub sbn: u32,
    /// Encoding Symbol ID: 0..k-1 source symbols, k.. repair symbols.
    pub esi: u8,
}

/// Fills the headers and the CRC of a data packet whose symbol already sits at
/// `out[DATA_HEADER_LEN..]` (a caller that computes the symbol in place saves a copy;
/// ingest today copies each symbol in with [`build_data_packet`]).
///
/// `out.len()` is `DATA_HEADER_LEN` + the symbol length (1..=65535 bytes).
pub fn seal_data_packet(out: &mut [u8], id: &DataPacketId) -> Result<(), WireError> {
    if out.len() <= DATA_HEADER_LEN {
        return Err(WireError::TooShort {
            need: DATA_HEADER_LEN + 1,
            got: out.len(),
        });
    }
    let symbol_len = out.len() - DATA_HEADER_LEN;
    if symbol_len > MAX_SYMBOL_LEN {
        return Err(WireError::BadSymbolLength(symbol_len));
    }
    if id.sbn > MAX_SBN {
        return Err(WireError::SbnOutOfRange(id.sbn));
    }
    if id.toi == 0 {
        return Err(WireError::NotDataPacket("TOI 0 is the FDT's"));
    }
    // V=1 C=0 PSI=0 | S=1 O=01 H=0 Res=00 A=0 B=0 | HDR_LEN=6 | CP=5
    out[0] = 0x10;
    out[1] = 0xA0;
    out[2] = 6;
    out[3] = DATA_CODEPOINT;
    out[4..8].copy_from_slice(&0u32.to_be_bytes());
    out[8..12].copy_from_slice(&id.tsi.to_be_bytes());
    out[12..16].copy_from_slice(&id.toi.to_be_bytes());
    out[16] = EXT_CRC32C_HET;
    out[17] = 2;
    out[18] = 0;
    out[19] = 0;
    out[24..28].copy_from_slice(&((id.sbn << 8) | u32::from(id.esi)).to_be_bytes());
    write_crc(out, DATA_CRC_OFFSET);
    Ok(())
}

/// Builds a complete data packet into `out`: headers, a copy of `symbol`, CRC.
/// Returns the packet length, `DATA_HEADER_LEN + symbol.len()`.
pub fn build_data_packet(
    out: &mut [u8],
    id: &DataPacketId,
    symbol: &[u8],
) -> Result<usize, WireError> {
    let len = DATA_HEADER_LEN + symbol.len();
    if symbol.is_empty() || symbol.len() > MAX_SYMBOL_LEN {
        return Err(WireError::BadSymbolLength(symbol.len()));
    }
    if out.len() < len {
        return Err(WireError::TooShort {
            need: len,
            got: out.len(),
        });
    }
    out[DATA_HEADER_LEN..len].copy_from_slice(symbol);
    seal_data_packet(&mut out[..len], id)?;
    Ok(len)
}

/// A verified isnode data packet, borrowing its symbol from the input buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataPacket<'a> {
    /// Session, object, block and symbol of the packet.
    pub id: DataPacketId,
    /// The encoding symbol (E bytes).
    pub symbol: &'a [u8],
}

/// Strict receive-side check of an isnode data packet, as the isnode client and the store's
/// scrub use it: the first 20 bytes must have exactly the layout [`seal_data_packet`] writes
/// (LCT version 1, 32-bit CCI/TSI/TOI, HDR_LEN 6, codepoint 5, EXT_CRC with HEL 2), the
/// symbol must not be empty, and the CRC32C must match. Any single corrupted bit makes this
/// fail, whereas the general [`parse_packet`] may read a corrupted header as another valid
/// LCT layout without EXT_CRC.
pub fn parse_data_packet(bytes: &[u8]) -> Result<DataPacket<'_>, WireError> {
    let (packet, carried) = parse_data_packet_unverified(bytes)?;
    let computed = packet_crc(bytes, DATA_CRC_OFFSET);
    if carried != computed {
        return Err(WireError::CrcMismatch { carried, computed });
    }
    Ok(packet)
}

/// [`parse_data_packet`] but for the CRC32C: every check of the header's layout, and the
/// identifiers, the symbol and the CRC32C the packet carries. For a caller that computes
/// the CRC32C its own way (e.g. the symbol's part apart, to reuse it) and compares it
/// with the carried one: until then the packet is not verified.
pub fn parse_data_packet_unverified(bytes: &[u8]) -> Result<(DataPacket<'_>, u32), WireError> {
    if bytes.len() <= DATA_HEADER_LEN {
        return Err(WireError::TooShort {
            need: DATA_HEADER_LEN + 1,
            got: bytes.len(),
        });
    }
    if bytes[0] >> 4 != 1 {
        return Err(WireError::BadVersion(bytes[0] >> 4));
    }
    // PSI and the reserved bits are not checked here: the CRC covers them.
    if bytes[0] & 0x0C != 0 || bytes[1] & 0xF3 != 0xA0 || bytes[2] != 6 {
        return Err(WireError::NotDataPacket(
            "LCT header is not V=1 C=0 S=1 O=1 H=0 B=0 HDR_LEN=6",
        ));
    }
    if bytes[3] != DATA_CODEPOINT {
        return Err(WireError::NotDataPacket("codepoint is not 5"));
    }
    if bytes[16..18] != [EXT_CRC32C_HET, 2] {
        return Err(WireError::NotDataPacket("no EXT_CRC at offset 16"));
    }
    let carried = u32::from_be_bytes([bytes[20], bytes[21], bytes[22], bytes[23]]);
    let word =
        |at: usize| u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    // TOI 0 carries the FDT (FLUTE): never a data packet, as `AlcPacket::data_id` agrees.
    if word(12) == 0 {
        return Err(WireError::NotDataPacket("TOI 0 is the FDT's"));
    }
    let fpi = word(24);
    let packet = DataPacket {
        id: DataPacketId {
            tsi: word(8),
            toi: word(12),
            sbn: fpi >> 8,
            esi: (fpi & 0xFF) as u8,
        },
        symbol: &bytes[DATA_HEADER_LEN..],
    };
    Ok((packet, carried))
}

/// CRC32C of `packet` without the 4 bytes at `crc_offset..crc_offset + 4`.
fn packet_crc(packet: &[u8], crc_offset: usize) -> u32 {
    let crc = crc32c::crc32c(&packet[..crc_offset]);
    crc32c::crc32c_append(crc, &packet[crc_offset + 4..])
}

/// Writes the CRC32C of `packet` (all bytes but the CRC field) at `crc_offset`.
fn write_crc(packet: &mut [u8], crc_offset: usize) {
    let crc = packet_crc(packet, crc_offset);
    packet[crc_offset..crc_offset + 4].copy_from_slice(&crc.to_be_bytes());
}

/// Result of the EXT_CRC check of a parsed packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrcStatus {
    /// The packet carries no EXT_CRC (e.g. it comes from another sender).
    Absent,
    /// The CRC32C matches: the packet is as isnode sealed it.
    Valid,
    /// The CRC32C does not match: the packet is corrupt and must be treated as an erasure.
    Invalid,
}

/// Fields of an LCT header (RFC 5651 §5.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LctHeader {
    /// LCT version number (always 1 for a parsed packet).
    pub version: u8,
    /// Protocol-Specific Indication (2 bits).
    pub psi: u8,
    /// Congestion Control Information (32 to 128 bits).
    pub cci: u128,
    /// Transport Session Identifier (0, 16, 32 or 48 bits).
    pub tsi: u64,
    /// Transport Object Identifier (0 to 112 bits).
    pub toi: u128,
    /// Codepoint; FLUTE senders put the FEC Encoding ID here.
    pub codepoint: u8,
    /// Close Session flag (A).
    pub close_session: bool,
    /// Close Object flag (B).
    pub close_object: bool,
    /// Length of the whole LCT header including extensions, in bytes (HDR_LEN * 4).
    pub header_len: usize,
}

/// FEC Object Transmission Information carried in an EXT_FTI extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fti {
    /// Transfer length of the object in bytes (48 bits).
    pub transfer_length: u64,
    /// FEC OTI (encoding ID = codepoint of the packet).
    pub oti: FecOti,
}

/// A parsed ALC packet, borrowing its payload from the input buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AlcPacket<'a> {
    /// The LCT header.
    pub lct: LctHeader,
    /// Source Block Number from the FEC Payload ID (0 for a data-less packet).
    pub sbn: u32,
    /// Encoding Symbol ID from the FEC Payload ID (8 bits for FEC Encoding ID 5, 16 bits for
    /// Compact No-Code; 0 for a data-less packet).
    pub esi: u32,
    /// EXT_CRC status.
    pub crc: CrcStatus,
    /// FDT Instance ID from EXT_FDT, if present.
    pub fdt_instance_id: Option<u32>,
    /// FLUTE version from EXT_FDT, if present.
    pub flute_version: Option<u8>,
    /// Content encoding byte of EXT_CENC, if present (0 = null).
    pub cenc: Option<u8>,
    /// FEC OTI from EXT_FTI, if present and of a scheme this crate decodes (Encoding ID 0 or 5).
    pub fti: Option<Fti>,
    /// True for a header-only packet (RFC 5775 §4.1, e.g. close-session): no FEC Payload ID.
    pub dataless: bool,
    /// The encoding symbol(s) after the FEC Payload ID.
    pub payload: &'a [u8],
}

impl AlcPacket<'_> {
    /// The isnode data packet identity, if this is an FEC Encoding ID 5 data packet whose
    /// TSI and TOI fit in 32 bits and that is not part of the FDT (TOI 0).
    pub fn data_id(&self) -> Option<DataPacketId> {
        if self.dataless || self.lct.codepoint != DATA_CODEPOINT || self.lct.toi == 0 {
            return None;
        }
        Some(DataPacketId {
            tsi: u32::try_from(self.lct.tsi).ok()?,
            toi: u32::try_from(self.lct.toi).ok()?,
            sbn: self.sbn,
            esi: u8::try_from(self.esi).ok()?,
        })
    }
}

/// Reads a big-endian unsigned integer of up to 16 bytes.
fn be_uint(bytes: &[u8]) -> u128 {
    bytes
        .iter()
        .fold(0u128, |acc, &b| (acc << 8) | u128::from(b))
}

/// Length in bytes of the FEC Payload ID for a codepoint (= FEC Encoding ID), with the
/// split of its bits as (SBN bits, ESI bits) inside a 32-bit word.
fn fec_payload_id_format(codepoint: u8) -> Result<(u32, u32), WireError> {
    match codepoint {
        // Compact No-Code (RFC 5445) and Raptor (RFC 5053): SBN 16 | ESI 16
        0 | 1 => Ok((16, 16)),
        // Reed-Solomon GF(2^m) with the default m = 8 (RFC 5510 §4) and GF(2^8) (§5): SBN 24 | ESI 8
        2 | 5 => Ok((24, 8)),
        // RaptorQ (RFC 6330): SBN 8 | ESI 24
        6 => Ok((8, 24)),
        other => Err(WireError::UnsupportedCodepoint(other)),
    }
}

/// Parses any ALC packet: isnode data or FDT packets, or other senders' packets with 16/32/48-bit
/// TSI and TOI up to 112 bits. Unknown header extensions are skipped; EXT_CRC, EXT_FDT,
/// EXT_CENC and EXT_FTI (for FEC Encoding IDs 0 and 5) are decoded.
///
/// Never panics: malformed input is a typed [`WireError`]. A CRC mismatch is not an error
/// but [`CrcStatus::Invalid`], so that the caller can count it and treat it as an erasure.
pub fn parse_packet(bytes: &[u8]) -> Result<AlcPacket<'_>, WireError> {
    let (lct, fixed) = parse_lct_header(bytes)?;
    let header_len = lct.header_len;
    let ext = parse_extensions(bytes, fixed, header_len)?;
    let fti = match ext.fti_offset {
        Some(at) => parse_fti(&bytes[at..header_len], lct.codepoint, at)?,
        None => None,
    };
    let crc = match ext.crc_offset {
        None => CrcStatus::Absent,
        Some(at) if read_u32(bytes, at) == packet_crc(bytes, at) => CrcStatus::Valid,
        Some(_) => CrcStatus::Invalid,
    };
    let (flute_version, fdt_instance_id) = ext.fdt.unzip();
    let mut packet = AlcPacket {
        lct,
        sbn: 0,
        esi: 0,
        crc,
        fdt_instance_id,
        flute_version,
        cenc: ext.cenc,
        fti,
        dataless: true,
        payload: &bytes[header_len..],
    };
    // RFC 5775 §4.1: a packet may consist of the LCT header only.
    if bytes.len() == header_len {
        return Ok(packet);
    }
    let (sbn, esi) = parse_fec_payload_id(bytes, header_len, lct.codepoint)?;
    packet.sbn = sbn;
    packet.esi = esi;
    packet.dataless = false;
    packet.payload = &bytes[header_len + 4..];
    Ok(packet)
}

/// The big-endian 32-bit word at `at` (the caller has checked `at + 4 <= bytes.len()`).
fn read_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// Parses the fixed part of an LCT header and checks HDR_LEN against it and against the
/// buffer. Returns the header and the length of its fixed part (where extensions start).
fn parse_lct_header(bytes: &[u8]) -> Result<(LctHeader, usize), WireError> {
    let got = bytes.len();
    if got < 4 {
        return Err(WireError::TooShort { need: 4, got });
    }
    let version = bytes[0] >> 4;
    if version != 1 {
        return Err(WireError::BadVersion(version));
    }
    let c = usize::from((bytes[0] >> 2) & 0x3);
    let s = usize::from(bytes[1] >> 7);
    let o = usize::from((bytes[1] >> 5) & 0x3);
    let h = usize::from((bytes[1] >> 4) & 0x1);
    let header_len = usize::from(bytes[2]) * 4;

    let cci_len = 4 * (c + 1);
    let tsi_len = 4 * s + 2 * h;
    let toi_len = 4 * o + 2 * h;
    let fixed = 4 + cci_len + tsi_len + toi_len;
    if header_len < fixed {
        return Err(WireError::BadHeaderLength {
            hdr_len: header_len,
            fixed,
        });
    }
    if got < header_len {
        return Err(WireError::TooShort {
            need: header_len,
            got,
        });
    }
    let tsi_end = 4 + cci_len + tsi_len;
    let lct = LctHeader {
        version,
        psi: bytes[0] & 0x3,
        cci: be_uint(&bytes[4..4 + cci_len]),
        // At most 48 bits: the cast is lossless.
        tsi: be_uint(&bytes[4 + cci_len..tsi_end]) as u64,
        toi: be_uint(&bytes[tsi_end..fixed]),
        codepoint: bytes[3],
        close_session: bytes[1] & 0x2 != 0,
        close_object: bytes[1] & 0x1 != 0,
        header_len,
    };
    Ok((lct, fixed))
}

/// The header extensions isnode decodes, by where they are.
#[derive(Default)]
struct Extensions {
    /// Offset of the CRC32C value of EXT_CRC.
    crc_offset: Option<usize>,
    /// FLUTE version and FDT Instance ID of EXT_FDT.
    fdt: Option<(u8, u32)>,
    /// Content encoding of EXT_CENC.
    cenc: Option<u8>,
    /// Offset of EXT_FTI (its HET byte).
    fti_offset: Option<usize>,
}

/// Walks the header extensions in `bytes[fixed..header_len]` (the caller has checked
/// `header_len <= bytes.len()`): checks every length, rejects duplicates of the extensions
/// it decodes, and skips the others.
fn parse_extensions(
    bytes: &[u8],
    fixed: usize,
    header_len: usize,
) -> Result<Extensions, WireError> {
    let mut ext = Extensions::default();
    let mut offset = fixed;
    while offset < header_len {
        let het = bytes[offset];
        let bad = |reason| WireError::BadExtension {
            het,
            offset,
            reason,
        };
        let hel = if het >= 128 {
            4
        } else {
            usize::from(bytes[offset + 1]) * 4
        };
        if hel == 0 {
            return Err(bad("HEL is 0"));
        }
        if offset + hel > header_len {
            return Err(bad("extension overruns HDR_LEN"));
        }
        let duplicate = match het {
            EXT_CRC32C_HET if hel != 8 => return Err(bad("EXT_CRC must have HEL=2")),
            EXT_CRC32C_HET => ext.crc_offset.replace(offset + 4).is_some(),
            EXT_FDT_HET => {
                let word = read_u32(bytes, offset);
                let fdt = (((word >> 20) & 0xF) as u8, word & 0xF_FFFF);
                ext.fdt.replace(fdt).is_some()
            }
            EXT_CENC_HET => ext.cenc.replace(bytes[offset + 1]).is_some(),
            EXT_FTI_HET => ext.fti_offset.replace(offset).is_some(),
            _ => false,
        };
        if duplicate {
            return Err(bad(match het {
                EXT_CRC32C_HET => "duplicate EXT_CRC",
                EXT_FDT_HET => "duplicate EXT_FDT",
                EXT_CENC_HET => "duplicate EXT_CENC",
                _ => "duplicate EXT_FTI",
            }));
        }
        offset += hel;
    }
    Ok(ext)
}

/// Reads the FEC Payload ID at `header_len` for the scheme `codepoint`: (SBN, ESI).
fn parse_fec_payload_id(
    bytes: &[u8],
    header_len: usize,
    codepoint: u8,
) -> Result<(u32, u32), WireError> {
    let (sbn_bits, esi_bits) = fec_payload_id_format(codepoint)?;
    let payload_start = header_len + 4;
    if bytes.len() < payload_start {
        return Err(WireError::TooShort {
            need: payload_start,
            got: bytes.len(),
        });
    }
    let word = read_u32(bytes, header_len);
    debug_assert_eq!(sbn_bits + esi_bits, 32);
    Ok((word >> esi_bits, word & ((1u32 << esi_bits) - 1)))
}

/// Decodes the EXT_FTI starting at `ext[0]` (HET) for the FEC scheme `codepoint`.
fn parse_fti(ext: &[u8], codepoint: u8, offset: usize) -> Result<Option<Fti>, WireError> {
    let bad = |reason| WireError::BadExtension {
        het: EXT_FTI_HET,
        offset,
        reason,
    };
    let hel = usize::from(ext[1]) * 4;
    let ext = &ext[..hel];
    match codepoint {
        FEC_ENCODING_ID_NO_CODE => {
            // RFC 5445 §2.1.1: L (48) | reserved (16) | E (16) | B (32)
            if hel != 16 {
                return Err(bad("Compact No-Code EXT_FTI must have HEL=4"));
            }
            let transfer_length = be_uint(&ext[2..8]) as u64;
            let symbol_len = be_uint(&ext[10..12]) as u32;
            let max_source_block_len = be_uint(&ext[12..16]) as u32;
            Ok(Some(Fti {
                transfer_length,
                oti: FecOti {
                    encoding_id: FEC_ENCODING_ID_NO_CODE,
                    max_source_block_len,
                    symbol_len,
                    max_encoding_symbols: max_source_block_len,
                },
            }))
        }
        FEC_ENCODING_ID_RS28 => {
            // RFC 5510 §5.2.3: L (48) | E (16) | B (8) | max_n (8)
            if hel != 12 {
                return Err(bad("FEC Encoding ID 5 EXT_FTI must have HEL=3"));
            }
            Ok(Some(Fti {
                transfer_length: be_uint(&ext[2..8]) as u64,
                oti: FecOti {
                    encoding_id: FEC_ENCODING_ID_RS28,
                    max_source_block_len: u32::from(ext[10]),
                    symbol_len: be_uint(&ext[8..10]) as u32,
                    max_encoding_symbols: u32::from(ext[11]),
                },
            }))
        }
        _ => Ok(None),
    }
}

/// RFC 1071 one's-complement sum of `bytes` taken as big-endian 16-bit words (an odd last
/// byte is padded with zero), folded to 16 bits and **not** inverted: the partial checksum
/// to which a raw-socket send path adds the UDP pseudo-header and header sums.
pub fn internet_checksum_partial(bytes: &[u8]) -> u16 {
    let mut sum: u64 = 0;
    let mut chunks = bytes.chunks_exact(2);
    for pair in &mut chunks {
        sum += u64::from(u16::from_be_bytes([pair[0], pair[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u64::from(*last) << 8;
    }
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    sum as u16
}

/// Builds an FDT packet: LCT header with EXT_FDT, Compact No-Code EXT_FTI and EXT_CRC,
/// FEC Payload ID (SBN 16 | ESI 16), then `symbol`.
pub(crate) fn build_fdt_packet(
    tsi: u32,
    fdt_instance_id: u32,
    fti: &Fti,
    sbn: u16,
    esi: u16,
    symbol: &[u8],
) -> Vec<u8> {
    let mut p = Vec::with_capacity(fdt::FDT_HEADER_LEN + symbol.len());
    // V=1 C=0 PSI=0 | S=1 O=01 H=0 | HDR_LEN=11 | CP=0
    p.extend_from_slice(&[0x10, 0xA0, 11, FEC_ENCODING_ID_NO_CODE]);
    p.extend_from_slice(&0u32.to_be_bytes()); // CCI
    p.extend_from_slice(&tsi.to_be_bytes());
    p.extend_from_slice(&0u32.to_be_bytes()); // TOI 0 = FDT
                                              // EXT_FDT: HET=192 | V (4) | FDT Instance ID (20)
    let fdt_word = (u32::from(EXT_FDT_HET) << 24)
        | (u32::from(FLUTE_VERSION) << 20)
        | (fdt_instance_id & 0xF_FFFF);
    p.extend_from_slice(&fdt_word.to_be_bytes());
    // EXT_FTI (RFC 5445): HET=64 | HEL=4 | L (48) | reserved (16) | E (16) | B (32)
    p.push(EXT_FTI_HET);
    p.push(4);
    p.extend_from_slice(&fti.transfer_length.to_be_bytes()[2..8]);
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(&(fti.oti.symbol_len as u16).to_be_bytes());
    p.extend_from_slice(&fti.oti.max_source_block_len.to_be_bytes());
    // EXT_CRC
    p.extend_from_slice(&[EXT_CRC32C_HET, 2, 0, 0, 0, 0, 0, 0]);
    debug_assert_eq!(p.len(), 44);
    p.extend_from_slice(&((u32::from(sbn) << 16) | u32::from(esi)).to_be_bytes());
    p.extend_from_slice(symbol);
    write_crc(&mut p, 40);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toi_0_is_never_a_data_packet() {
        // Found by the wire_packet fuzz target: the strict parser took a TOI 0 packet that
        // the general parser (rightly) calls the FDT's.
        let id = DataPacketId {
            tsi: 7,
            toi: 0,
            sbn: 1,
            esi: 2,
        };
        let mut p = vec![0u8; DATA_HEADER_LEN + 8];
        assert!(seal_data_packet(&mut p, &id).is_err());
        let ok = DataPacketId { toi: 1, ..id };
        seal_data_packet(&mut p, &ok).unwrap();
        p[12..16].copy_from_slice(&0u32.to_be_bytes());
        let crc = packet_crc(&p, DATA_CRC_OFFSET);
        p[20..24].copy_from_slice(&crc.to_be_bytes());
        assert!(matches!(
            parse_data_packet(&p),
            Err(WireError::NotDataPacket(_))
        ));
        assert_eq!(parse_packet(&p).unwrap().data_id(), None);
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: 00 01 f2 03 f4 f5 f6 f7 sums to ddf2.
        let b = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(internet_checksum_partial(&b), 0xddf2);
        assert_eq!(internet_checksum_partial(&[]), 0);
        assert_eq!(internet_checksum_partial(&[0xab]), 0xab00);
        assert_eq!(internet_checksum_partial(&[0xff, 0xff, 0x00, 0x01]), 0x0001);
    }

    #[test]
    fn data_packet_layout() {
        let mut buf = [0u8; DATA_HEADER_LEN + 4];
        let id = DataPacketId {
            tsi: 0x0102_0304,
            toi: 0x0A0B_0C0D,
            sbn: 0x00AB_CDEF,
            esi: 0x42,
        };
        let n = build_data_packet(&mut buf, &id, &[1, 2, 3, 4]).unwrap();
        assert_eq!(n, 32);
        assert_eq!(
            &buf[..20],
            &[0x10, 0xA0, 6, 5, 0, 0, 0, 0, 1, 2, 3, 4, 0x0A, 0x0B, 0x0C, 0x0D, 120, 2, 0, 0]
        );
        assert_eq!(&buf[24..], &[0xAB, 0xCD, 0xEF, 0x42, 1, 2, 3, 4]);
        let mut without = buf[..20].to_vec();
        without.extend_from_slice(&buf[24..]);
        assert_eq!(&buf[20..24], &crc32c::crc32c(&without).to_be_bytes());
        let p = parse_packet(&buf).unwrap();
        assert_eq!(p.data_id(), Some(id));
        assert_eq!(p.crc, CrcStatus::Valid);
        assert_eq!(p.payload, &[1, 2, 3, 4]);
        assert_eq!(p.lct.header_len, 24);
    }

    #[test]
    fn seal_rejects_bad_input() {
        let id = DataPacketId {
            tsi: 1,
            toi: 1,
            sbn: MAX_SBN + 1,
            esi: 0,
        };
        let mut buf = [0u8; 40];
        assert_eq!(
            seal_data_packet(&mut buf, &id),
            Err(WireError::SbnOutOfRange(MAX_SBN + 1))
        );
        assert!(matches!(
            seal_data_packet(&mut buf[..DATA_HEADER_LEN], &id),
            Err(WireError::TooShort { .. })
        ));
        assert_eq!(
            build_data_packet(&mut buf, &id, &[]),
            Err(WireError::BadSymbolLength(0))
        );
        assert!(matches!(
            build_data_packet(&mut buf[..30], &id, &[0; 8]),
            Err(WireError::TooShort { need: 36, got: 30 })
        ));
        let mut big = vec![0u8; DATA_HEADER_LEN + MAX_SYMBOL_LEN + 1];
        assert!(matches!(
            seal_data_packet(&mut big, &DataPacketId { sbn: 0, ..id }),
            Err(WireError::BadSymbolLength(_))
        ));
    }

    #[test]
    fn parses_foreign_headers() {
        // 48-bit TSI, 16-bit TOI (H=1, S=1, O=0), 64-bit CCI (C=1), codepoint 0,
        // an unknown variable-length extension and EXT_TIME.
        let mut p = vec![0x14, 0x90, 0, 0];
        p.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 7]); // CCI
        p.extend_from_slice(&[0x12, 0x34, 0x56, 0x78, 0x9A, 0xBC]); // TSI
        p.extend_from_slice(&[0x00, 0x09]); // TOI
        p.extend_from_slice(&[1, 2, 0xAA, 0xBB, 0xCC, 0xDD, 0xEE, 0xFF]); // HET=1 HEL=2
        p.extend_from_slice(&[200, 1, 2, 3]); // fixed-size unknown
        p[2] = (p.len() / 4) as u8;
        p.extend_from_slice(&[0x00, 0x03, 0x00, 0x07]); // SBN=3 ESI=7
        p.extend_from_slice(b"hello");
        let a = parse_packet(&p).unwrap();
        assert_eq!(a.lct.cci, 7);
        assert_eq!(a.lct.tsi, 0x1234_5678_9ABC);
        assert_eq!(a.lct.toi, 9);
        assert_eq!((a.sbn, a.esi), (3, 7));
        assert_eq!(a.crc, CrcStatus::Absent);
        assert_eq!(a.payload, b"hello");
        assert_eq!(a.data_id(), None);
    }

    #[test]
    fn dataless_close_session() {
        // flute's close-session packet: V=1, S=1 O=0 H=0, A=1, HDR_LEN=3, CP=0, TSI=1
        let p = [0x10, 0x82, 3, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let a = parse_packet(&p).unwrap();
        assert!(a.dataless && a.lct.close_session && !a.lct.close_object);
        assert_eq!(a.lct.tsi, 1);
        assert!(a.payload.is_empty());
    }

    #[test]
    fn typed_errors() {
        assert_eq!(
            parse_packet(&[0x10, 0xA0]),
            Err(WireError::TooShort { need: 4, got: 2 })
        );
        assert_eq!(
            parse_packet(&[0x20, 0xA0, 6, 5]),
            Err(WireError::BadVersion(2))
        );
        assert_eq!(
            parse_packet(&[0x10, 0xA0, 3, 5, 0, 0, 0, 0, 0, 0, 0, 0]),
            Err(WireError::BadHeaderLength {
                hdr_len: 12,
                fixed: 16
            })
        );
        let mut ok = vec![0u8; 40];
        build_data_packet(
            &mut ok,
            &DataPacketId {
                tsi: 1,
                toi: 2,
                sbn: 3,
                esi: 4,
            },
            &[9; 12],
        )
        .unwrap();
        let mut bad = ok.clone();
        bad[17] = 0; // HEL 0
        assert!(matches!(
            parse_packet(&bad),
            Err(WireError::BadExtension { het: 120, .. })
        ));
        let mut bad = ok.clone();
        bad[17] = 3; // overruns HDR_LEN
        assert!(matches!(
            parse_packet(&bad),
            Err(WireError::BadExtension { het: 120, .. })
        ));
        let mut bad = ok.clone();
        bad[3] = 77;
        assert_eq!(parse_packet(&bad), Err(WireError::UnsupportedCodepoint(77)));
        assert_eq!(
            parse_packet(&ok[..26]),
            Err(WireError::TooShort { need: 28, got: 26 })
        );
    }
}
