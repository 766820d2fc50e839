//! The simulated volume: objects whose packets are built with the real encoder
//! (`isnode_recv::sender::object_packets`: RFC 5052 partitioning, RFC 5510 Reed-Solomon,
//! sealed isnode data packets), laid out in segment-file blocks by the real
//! [`Layout`], with each block's CRC32C as the catalog holds it; and a plan of disk
//! faults (EIO, corrupt, lost member) that never takes more than m symbols of any
//! codeword.

use std::collections::HashMap;

use isnode_recv::receiver::SessionParams;
use isnode_store::{Layout, VolumeParams};

use super::Rng;

/// A persistent fault of one block (every read of it fails the same way).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum DiskFault {
    /// The read fails with EIO.
    Eio,
    /// The read returns the block with one byte flipped (caught by the block's CRC32C).
    Corrupt,
    /// The member is gone: every read of it fails.
    LostMember,
}

/// One stored object.
pub(super) struct Obj {
    pub(super) toi: u32,
    pub(super) tsi: u32,
    pub(super) bytes: Vec<u8>,
    pub(super) layout: Layout,
    /// `packets[sbn][esi]`: what the store holds (the reference every send is checked on).
    pub(super) packets: Vec<Vec<Vec<u8>>>,
    /// Each codeword's packet digests in ESI order (the catalog's digest rows).
    pub(super) digests: Vec<Box<[u8]>>,
    /// Segment file of each member, whole blocks.
    pub(super) segments: Vec<Vec<u8>>,
    /// CRC32C of each block of each member (the catalog's block rows).
    pub(super) block_crc: Vec<Vec<u32>>,
    /// Persistent faults by (member, block).
    pub(super) faults: HashMap<(u32, u64), DiskFault>,
    /// Symbols of each codeword that the disk faults make unreadable.
    pub(super) disk_lost: Vec<u32>,
}

impl Obj {
    /// An object of `len` pseudo-random bytes, stored under `params`.
    pub(super) fn new(params: VolumeParams, toi: u32, len: u64, rng: &mut Rng) -> Obj {
        let bytes: Vec<u8> = (0..len).map(|_| rng.below(256) as u8).collect();
        let layout = Layout::new(params, len).expect("valid simulation parameters");
        let sp = SessionParams {
            tsi: 0x5100 + toi,
            toi,
            transfer_length: len,
            symbol_len: params.symbol_len,
            max_source_block_len: params.source_symbols,
            repair_symbols: params.repair_symbols,
            start_codeword: 0,
        };
        let packets = isnode_recv::sender::object_packets(&bytes, &sp).expect("encodable");
        let mut segments: Vec<Vec<u8>> = (0..params.members)
            .map(|m| vec![0u8; layout.segment_len_bytes(m) as usize])
            .collect();
        for (sbn, cw) in packets.iter().enumerate() {
            for (esi, p) in cw.iter().enumerate() {
                let at = layout.symbol_location(sbn as u32, esi as u32);
                let off = layout.block_offset(at.block) as usize + at.offset;
                segments[at.member as usize][off..off + p.len()].copy_from_slice(p);
            }
        }
        let block_len = params.block_len as usize;
        let block_crc = segments
            .iter()
            .map(|s| s.chunks(block_len).map(crc32c::crc32c).collect())
            .collect();
        Obj {
            toi,
            tsi: sp.tsi,
            bytes,
            disk_lost: vec![0; layout.codewords() as usize],
            layout,
            digests: packets
                .iter()
                .map(|cw| {
                    cw.iter()
                        .flat_map(|p| isnode_wire::digest::packet_digest(p))
                        .collect()
                })
                .collect(),
            packets,
            segments,
            block_crc,
            faults: HashMap::new(),
        }
    }

    /// The session parameters of a client of this object starting at `start_codeword`.
    pub(super) fn session_params(&self, start_codeword: u32) -> SessionParams {
        let p = self.layout.params();
        SessionParams {
            tsi: self.tsi,
            toi: self.toi,
            transfer_length: self.layout.transfer_len(),
            symbol_len: p.symbol_len,
            max_source_block_len: p.source_symbols,
            repair_symbols: p.repair_symbols,
            start_codeword,
        }
    }

    /// Symbols of each codeword held in block `block` of `member`.
    fn symbols_in_block(&self, member: u32, block: u64) -> Vec<(u32, u32)> {
        let per = u64::from(self.layout.params().packets_per_block());
        let mut out = Vec::new();
        for sbn in 0..self.layout.codewords() {
            let run = self.layout.member_run(sbn, member);
            let first = run.first_packet;
            let last = first + run.esis.len() as u64;
            let lo = first.max(block * per);
            let hi = last.min((block + 1) * per);
            if hi > lo {
                out.push((sbn, (hi - lo) as u32));
            }
        }
        out
    }

    /// Marks `block` of `member` faulty if its symbols fit in every codeword's budget of
    /// m (less `reserve` kept for the network); true if planted.
    fn plant(&mut self, member: u32, block: u64, fault: DiskFault, reserve: u32) -> bool {
        if self.faults.contains_key(&(member, block)) {
            return false;
        }
        let m = self.layout.params().repair_symbols;
        let hits = self.symbols_in_block(member, block);
        let fits = hits
            .iter()
            .all(|&(sbn, n)| self.disk_lost[sbn as usize] + n + reserve <= m);
        if !fits {
            return false;
        }
        for (sbn, n) in hits {
            self.disk_lost[sbn as usize] += n;
        }
        self.faults.insert((member, block), fault);
        true
    }

    /// Plants a random plan of disk faults: maybe a lost member (which may take the whole
    /// budget of its codewords: a member holds at most m symbols of one), then some faulty
    /// blocks, each only where every codeword keeps `reserve` symbols of its budget.
    pub(super) fn plan_faults(&mut self, rng: &mut Rng, reserve: u32) {
        let members = self.layout.params().members;
        if rng.below(3) == 0 {
            let member = rng.below(u64::from(members)) as u32;
            let blocks = self.layout.member_blocks(member);
            let all_fit = (0..blocks).all(|b| {
                self.symbols_in_block(member, b)
                    .iter()
                    .all(|&(sbn, n)| self.disk_lost[sbn as usize] + n <= m_of(self))
            });
            if all_fit {
                for b in 0..blocks {
                    self.plant(member, b, DiskFault::LostMember, 0);
                }
            }
        }
        for _ in 0..rng.below(4) {
            let member = rng.below(u64::from(members)) as u32;
            let blocks = self.layout.member_blocks(member);
            let block = rng.below(blocks.max(1));
            let fault = if rng.below(2) == 0 {
                DiskFault::Eio
            } else {
                DiskFault::Corrupt
            };
            self.plant(member, block, fault, reserve);
        }
    }

    /// What a read of block `block` of `member` returns: its bytes (maybe corrupted), or
    /// an error.
    pub(super) fn read_block(
        &self,
        member: u32,
        block: u64,
        rng: &mut Rng,
    ) -> Result<Vec<u8>, String> {
        let len = self.layout.params().block_len as usize;
        let start = self.layout.block_offset(block) as usize;
        let Some(bytes) = self
            .segments
            .get(member as usize)
            .and_then(|s| s.get(start..start + len))
        else {
            return Err(format!("block {block} of member {member} is past the end"));
        };
        match self.faults.get(&(member, block)) {
            None => Ok(bytes.to_vec()),
            Some(DiskFault::Eio) => Err("EIO (injected)".into()),
            Some(DiskFault::LostMember) => Err(format!("member {member} lost (injected)")),
            Some(DiskFault::Corrupt) => {
                let mut b = bytes.to_vec();
                let at = rng.below(len as u64) as usize;
                b[at] ^= 1 << rng.below(8);
                Ok(b)
            }
        }
    }
}

fn m_of(o: &Obj) -> u32 {
    o.layout.params().repair_symbols
}
