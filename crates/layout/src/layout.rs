//! Where every packet of an object lives: a pure function of the volume
//! parameters and the object's length (sans-IO).
//!
//! An object of T bytes is cut into codewords by the block partitioning of
//! RFC 5052 §9.1 (as every FLUTE receiver does it). Codeword `sbn` has `k`
//! source symbols (ESI 0..k) and `m` repair symbols (ESI k..k+m). Source
//! symbols are spread in contiguous runs of `ceil(k / (M-1))` over the first
//! M-1 members; the repair symbols all go to the last member (RAID-4). No
//! member holds more than `m` symbols of a codeword, so losing any one member
//! leaves every codeword decodable.
//!
//! Each member keeps one segment file per object: its packets of codeword 0,
//! then of codeword 1, ... (send order), packed into blocks of
//! [`VolumeParams::packets_per_block`] packets each.

use std::ops::Range;

use isnode_wire::partition::Partition;

use crate::error::ParamsError;
use crate::params::VolumeParams;

/// The layout of one object on a volume.
#[derive(Clone, Debug)]
pub struct Layout {
    params: VolumeParams,
    transfer_len: u64,
    codewords: u32,
    /// Source symbols of the first `large_codewords` codewords.
    k_large: u32,
    /// Source symbols of the remaining codewords.
    k_small: u32,
    large_codewords: u32,
}

/// The packets of one codeword held by one member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberRun {
    /// Member index.
    pub member: u32,
    /// Encoding symbol IDs, consecutive.
    pub esis: Range<u32>,
    /// Index of the first packet in the member's segment file.
    pub first_packet: u64,
}

impl Layout {
    /// Lays out an object of `transfer_len` bytes.
    pub fn new(params: VolumeParams, transfer_len: u64) -> Result<Layout, ParamsError> {
        params.validate()?;
        let partition = Partition::new(transfer_len, params.symbol_len, params.source_symbols)
            .map_err(|e| ParamsError(format!("block partitioning: {e}")))?;
        let codewords = partition.blocks();
        let (k_large, k_small, large_codewords) = if codewords == 0 {
            (0, 0, 0)
        } else {
            let k_large = partition.source_symbols(0);
            let k_small = partition.source_symbols(codewords - 1);
            let total = transfer_len.div_ceil(u64::from(params.symbol_len));
            let large = if k_large == k_small {
                codewords
            } else {
                (total - u64::from(k_small) * u64::from(codewords)) as u32
            };
            (k_large, k_small, large)
        };
        let layout = Layout {
            params,
            transfer_len,
            codewords,
            k_large,
            k_small,
            large_codewords,
        };
        debug_assert!(
            (0..codewords).all(|c| layout.source_symbols(c) == partition.source_symbols(c))
        );
        Ok(layout)
    }

    /// The volume parameters this layout follows.
    pub fn params(&self) -> &VolumeParams {
        &self.params
    }

    /// The object's length in bytes.
    pub fn transfer_len(&self) -> u64 {
        self.transfer_len
    }

    /// Number of codewords (source blocks).
    pub fn codewords(&self) -> u32 {
        self.codewords
    }

    /// Source symbols (k) of codeword `sbn`.
    pub fn source_symbols(&self, sbn: u32) -> u32 {
        assert!(
            sbn < self.codewords,
            "codeword {sbn} out of {}",
            self.codewords
        );
        if sbn < self.large_codewords {
            self.k_large
        } else {
            self.k_small
        }
    }

    /// Encoding symbols (n = k + m) of codeword `sbn`.
    pub fn encoding_symbols(&self, sbn: u32) -> u32 {
        self.source_symbols(sbn) + self.params.repair_symbols
    }

    /// Byte offset in the object of the first source symbol of codeword `sbn`.
    pub fn codeword_offset(&self, sbn: u32) -> u64 {
        let e = u64::from(self.params.symbol_len);
        let large = u64::from(sbn.min(self.large_codewords));
        let small = u64::from(sbn.saturating_sub(self.large_codewords));
        (large * u64::from(self.k_large) + small * u64::from(self.k_small)) * e
    }

    /// Bytes of real data in codeword `sbn` (the last one may be short).
    pub fn codeword_data_len(&self, sbn: u32) -> u64 {
        let full = u64::from(self.source_symbols(sbn)) * u64::from(self.params.symbol_len);
        full.min(self.transfer_len - self.codeword_offset(sbn))
    }

    /// Source symbols per source member in a codeword with `k` source symbols.
    fn run_len(&self, k: u32) -> u32 {
        k.div_ceil(self.params.source_members())
    }

    /// ESIs that `member` holds in a codeword with `k` source symbols.
    fn esis_of(&self, member: u32, k: u32) -> Range<u32> {
        if member == self.params.repair_member() {
            return k..k + self.params.repair_symbols;
        }
        let run = self.run_len(k);
        let start = (member * run).min(k);
        start..((member + 1) * run).min(k)
    }

    /// Packets `member` holds of every codeword before `sbn`.
    fn packets_before(&self, member: u32, sbn: u32) -> u64 {
        let large = u64::from(sbn.min(self.large_codewords));
        let small = u64::from(sbn.saturating_sub(self.large_codewords));
        let per_large = self.esis_of(member, self.k_large).len() as u64;
        let per_small = self.esis_of(member, self.k_small).len() as u64;
        large * per_large + small * per_small
    }

    /// The packets of codeword `sbn` on `member`.
    pub fn member_run(&self, sbn: u32, member: u32) -> MemberRun {
        assert!(member < self.params.members);
        let esis = self.esis_of(member, self.source_symbols(sbn));
        MemberRun {
            member,
            esis,
            first_packet: self.packets_before(member, sbn),
        }
    }

    /// The block of `member`'s segment file in which codeword `sbn`'s run starts (the
    /// block of [`MemberRun::first_packet`]).
    pub fn run_block(&self, sbn: u32, member: u32) -> u64 {
        assert!(member < self.params.members);
        self.packet_position(self.packets_before(member, sbn)).0
    }

    /// The member holding symbol `esi` of codeword `sbn`.
    pub fn member_of(&self, sbn: u32, esi: u32) -> u32 {
        let k = self.source_symbols(sbn);
        if esi >= k {
            self.params.repair_member()
        } else {
            esi / self.run_len(k)
        }
    }

    /// Total packets in `member`'s segment file.
    pub fn member_packets(&self, member: u32) -> u64 {
        self.packets_before(member, self.codewords)
    }

    /// Blocks in `member`'s segment file.
    pub fn member_blocks(&self, member: u32) -> u64 {
        self.member_packets(member)
            .div_ceil(u64::from(self.params.packets_per_block()))
    }

    /// Packets in block `block` of `member`'s segment file.
    pub fn packets_in_block(&self, member: u32, block: u64) -> u32 {
        let per = u64::from(self.params.packets_per_block());
        let total = self.member_packets(member);
        total.saturating_sub(block * per).min(per) as u32
    }

    /// Block index and byte offset within the block of packet `index` of a segment file.
    pub fn packet_position(&self, index: u64) -> (u64, usize) {
        let per = u64::from(self.params.packets_per_block());
        let slot = (index % per) as usize;
        (index / per, slot * self.params.packet_len() as usize)
    }
}

/// Where one stored symbol is: the member, the block of the member's segment file, and
/// the byte offset of its packet in that block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SymbolLocation {
    /// Member index.
    pub member: u32,
    /// Block index in the member's segment file.
    pub block: u64,
    /// Byte offset of the packet within the block.
    pub offset: usize,
}

impl Layout {
    /// Where symbol `esi` of codeword `sbn` is stored.
    pub fn symbol_location(&self, sbn: u32, esi: u32) -> SymbolLocation {
        let member = self.member_of(sbn, esi);
        let run = self.member_run(sbn, member);
        debug_assert!(run.esis.contains(&esi), "esi {esi} not in its member's run");
        let (block, offset) =
            self.packet_position(run.first_packet + u64::from(esi - run.esis.start));
        SymbolLocation {
            member,
            block,
            offset,
        }
    }

    /// Byte offset of block `block` in a segment file (the one place blocks become bytes).
    pub fn block_offset(&self, block: u64) -> u64 {
        block * u64::from(self.params.block_len)
    }

    /// Length in bytes of `member`'s segment file (whole blocks).
    pub fn segment_len_bytes(&self, member: u32) -> u64 {
        self.block_offset(self.member_blocks(member))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn small_params(members: u32) -> VolumeParams {
        VolumeParams {
            symbol_len: 16,
            source_symbols: 10,
            repair_symbols: 4,
            members,
            block_len: 4096,
        }
    }

    #[test]
    fn default_shape_is_raid4() {
        let l = Layout::new(VolumeParams::default(), 1408 * 223 * 3).unwrap();
        assert_eq!(l.codewords(), 3);
        let runs: Vec<_> = (0..8).map(|m| l.member_run(1, m).esis).collect();
        assert_eq!(runs[0], 0..32);
        assert_eq!(runs[6], 192..223);
        assert_eq!(runs[7], 223..255);
        assert_eq!(l.member_run(1, 7).first_packet, 32);
    }

    proptest! {
        #[test]
        fn every_symbol_once_and_member_loss_is_survivable(len in 0u64..5000, members in 4u32..9) {
            let p = small_params(members);
            let l = Layout::new(p, len).unwrap();
            let mut covered = 0u64;
            let mut next_packet = vec![0u64; members as usize];
            for sbn in 0..l.codewords() {
                let n = l.encoding_symbols(sbn);
                let mut seen = vec![false; n as usize];
                for m in 0..members {
                    let run = l.member_run(sbn, m);
                    prop_assert!(run.esis.len() as u32 <= p.repair_symbols);
                    prop_assert_eq!(run.first_packet, next_packet[m as usize]);
                    next_packet[m as usize] += run.esis.len() as u64;
                    for esi in run.esis.clone() {
                        prop_assert!(!seen[esi as usize]);
                        seen[esi as usize] = true;
                        prop_assert_eq!(l.member_of(sbn, esi), m);
                    }
                }
                prop_assert!(seen.iter().all(|s| *s));
                prop_assert_eq!(l.codeword_offset(sbn), covered);
                covered += l.codeword_data_len(sbn);
            }
            prop_assert_eq!(covered, len);
            for m in 0..members {
                prop_assert_eq!(l.member_packets(m), next_packet[m as usize]);
                let blocks = l.member_blocks(m);
                let sum: u64 = (0..blocks).map(|b| u64::from(l.packets_in_block(m, b))).sum();
                prop_assert_eq!(sum, next_packet[m as usize]);
            }
        }
    }
}
