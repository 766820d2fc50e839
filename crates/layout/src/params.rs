//! Volume parameters and the rules that keep one failed member from losing data.

use serde::{Deserialize, Serialize};

use crate::error::ParamsError;

/// Default encoding symbol length in bytes: a multiple of 64 that, with the
/// 28-byte ALC header, UDP, and IPv6 headers, still fits one 1500-byte packet.
pub const DEFAULT_SYMBOL_LEN: u32 = 1408;
/// Default number of source symbols per codeword (the seeds' 224, less one so n <= 255).
pub const DEFAULT_SOURCE_SYMBOLS: u32 = 223;
/// Default number of repair symbols per codeword (12.5 % overhead).
pub const DEFAULT_REPAIR_SYMBOLS: u32 = 32;
/// Default number of members (disks) in a volume.
pub const DEFAULT_MEMBERS: u32 = 8;
/// Default block length in bytes: 64 KiB, a multiple of the O_DIRECT alignment (45
/// packets of the default shape: one member's run of a codeword, 32 packets, spans one or
/// two blocks). Chosen by measurement against 256 KiB and 1 MiB (docs/benchmarks.md,
/// "Block size"): a stream's working set in the pool and each miss's read are 16 times
/// smaller than with 1 MiB, which holds many times the streams larger than memory and on a
/// slow disk. Volumes record their own block length; this is only for new ones.
pub const DEFAULT_BLOCK_LEN: u32 = 64 << 10;
/// Alignment of blocks, buffers and file offsets for O_DIRECT.
pub const DIRECT_IO_ALIGN: usize = 4096;
/// Largest UDP payload over IPv4 (65535 - 20 - 8).
pub const MAX_UDP_PAYLOAD: u32 = 65_507;

/// The coding and layout parameters of a volume (and of every object in it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeParams {
    /// Encoding symbol length E in bytes.
    pub symbol_len: u32,
    /// Maximum source symbols per codeword (B, the RFC 5052 maximum source block length).
    pub source_symbols: u32,
    /// Repair symbols per codeword (m = max_n - B).
    pub repair_symbols: u32,
    /// Number of members M: M - 1 hold source symbols, the last one repair symbols.
    pub members: u32,
    /// Length of one block of a segment file in bytes.
    pub block_len: u32,
}

impl Default for VolumeParams {
    fn default() -> Self {
        VolumeParams {
            symbol_len: DEFAULT_SYMBOL_LEN,
            source_symbols: DEFAULT_SOURCE_SYMBOLS,
            repair_symbols: DEFAULT_REPAIR_SYMBOLS,
            members: DEFAULT_MEMBERS,
            block_len: DEFAULT_BLOCK_LEN,
        }
    }
}

impl VolumeParams {
    /// A small volume for tests and examples: 6 members, k <= 20, m = 4, 1024-byte symbols,
    /// 7 packets per 8 KiB block.
    pub const SMALL: VolumeParams = VolumeParams {
        symbol_len: 1024,
        source_symbols: 20,
        repair_symbols: 4,
        members: 6,
        block_len: 8192,
    };

    /// Checks every rule, with an explanation when one is broken.
    pub fn validate(&self) -> Result<(), ParamsError> {
        let bad = |why: String| Err(ParamsError(why));
        if self.symbol_len == 0 {
            return bad("symbol size must be at least 1 byte".into());
        }
        if self.packet_len() > MAX_UDP_PAYLOAD {
            return bad(format!(
                "symbol size {} gives {}-byte packets, more than the largest UDP payload ({MAX_UDP_PAYLOAD})",
                self.symbol_len,
                self.packet_len()
            ));
        }
        if self.source_symbols == 0 {
            return bad("a codeword needs at least 1 source symbol".into());
        }
        if self.repair_symbols == 0 {
            return bad(
                "at least 1 repair symbol per codeword is needed to survive a failed member".into(),
            );
        }
        let n = self.source_symbols + self.repair_symbols;
        if n > isnode_fec::MAX_ENCODING_SYMBOLS as u32 {
            return bad(format!(
                "{} source + {} repair = {n} symbols per codeword, but a GF(2^8) Reed-Solomon codeword (RFC 5510) holds at most 255",
                self.source_symbols, self.repair_symbols
            ));
        }
        if self.members < 2 {
            return bad(format!(
                "{} member(s): a volume needs at least 2 (source symbols on M-1 members, repair symbols on one) so that a failed member loses nothing",
                self.members
            ));
        }
        let per_member = self.max_source_per_member();
        if per_member > self.repair_symbols {
            return bad(format!(
                "{} source symbols over {} source members puts up to {per_member} symbols of a codeword on one member, \
                 but only {} repair symbols can replace them when that member fails; use more members, fewer source \
                 symbols, or at least {per_member} repair symbols",
                self.source_symbols,
                self.members - 1,
                self.repair_symbols
            ));
        }
        if self.block_len as usize % DIRECT_IO_ALIGN != 0 {
            return bad(format!(
                "block size {} is not a multiple of {DIRECT_IO_ALIGN} bytes (O_DIRECT alignment)",
                self.block_len
            ));
        }
        if self.block_len < self.packet_len() {
            return bad(format!(
                "block size {} cannot hold one {}-byte packet",
                self.block_len,
                self.packet_len()
            ));
        }
        Ok(())
    }

    /// Bytes of one stored (and sent) packet: ALC header plus symbol.
    pub fn packet_len(&self) -> u32 {
        isnode_wire::DATA_HEADER_LEN as u32 + self.symbol_len
    }

    /// Packets per block: as many whole packets as fit, back to back (the rest of
    /// the block is zero). The one place this number is derived; layout, check and
    /// the server's block addressing all call it.
    pub fn packets_per_block(&self) -> u32 {
        self.block_len / self.packet_len()
    }

    /// Number of members holding source symbols.
    pub fn source_members(&self) -> u32 {
        self.members - 1
    }

    /// Index of the member holding repair symbols.
    pub fn repair_member(&self) -> u32 {
        self.members - 1
    }

    /// Largest number of source symbols of one codeword on one member.
    pub fn max_source_per_member(&self) -> u32 {
        self.source_symbols.div_ceil(self.members.max(2) - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        VolumeParams::default().validate().unwrap();
        assert_eq!(VolumeParams::default().packet_len(), 1436);
        // 64 KiB: 45 packets, more than one member's run of a codeword (32).
        assert_eq!(VolumeParams::default().packets_per_block(), 45);
        let one_mib = VolumeParams {
            block_len: 1 << 20,
            ..VolumeParams::default()
        };
        assert_eq!(one_mib.packets_per_block(), 730);
    }

    #[test]
    fn refusals_explain() {
        let p = VolumeParams {
            members: 4,
            ..Default::default()
        };
        let e = p.validate().unwrap_err().to_string();
        assert!(e.contains("75 symbols") && e.contains("32 repair"), "{e}");
        let p = VolumeParams {
            repair_symbols: 40,
            ..Default::default()
        };
        assert!(p.validate().unwrap_err().to_string().contains("263"));
        let p = VolumeParams {
            members: 1,
            ..Default::default()
        };
        assert!(p.validate().is_err());
        let p = VolumeParams {
            block_len: 5000,
            ..Default::default()
        };
        assert!(p.validate().is_err());
        let p = VolumeParams {
            symbol_len: 0,
            ..Default::default()
        };
        assert!(p.validate().is_err());
    }
}
