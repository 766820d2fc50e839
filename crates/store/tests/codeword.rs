//! The one codeword read path (`isnode_store::codeword`) against a model: blocks of a real
//! ingested object served from memory, with random blocks unreadable, damaged, or not in
//! memory yet (pending, as in the server's pool).

use std::collections::HashMap;

use isnode_store::codeword::{read_codeword, Assembler, Readiness, Target, Want};
use isnode_store::{BlockError, BlockSource, IngestOptions, StoreError, Volume, VolumeParams};
use proptest::prelude::*;

fn small() -> VolumeParams {
    VolumeParams {
        symbol_len: 64,
        source_symbols: 20,
        repair_symbols: 4,
        members: 6,
        block_len: 4096,
    }
}

/// Every block of every member, read once from the segment files.
struct MemBlocks {
    blocks: HashMap<(u32, u64), Vec<u8>>,
    unreadable: Vec<(u32, u64)>,
    pending: Vec<(u32, u64)>,
}

impl BlockSource for MemBlocks {
    fn block(&mut self, member: u32, block: u64) -> Result<&[u8], BlockError> {
        if self.pending.contains(&(member, block)) {
            return Err(BlockError::Pending);
        }
        if self.unreadable.contains(&(member, block)) {
            return Err(BlockError::Unreadable("test".into()));
        }
        self.blocks
            .get(&(member, block))
            .map(Vec::as_slice)
            .ok_or(BlockError::Unreadable("no such block".into()))
    }
}

fn setup(len: usize, seed: u64) -> (tempfile::TempDir, Volume, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let mut vol = Volume::create(dir.path(), small(), None).unwrap();
    let mut x = seed | 1;
    let bytes: Vec<u8> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let opts = IngestOptions {
        name: "x".into(),
        bitrate_bps: 1_000_000,
        content_type: String::new(),
        replace: false,
    };
    isnode_store::ingest(&mut vol, &opts, &mut &bytes[..], len as u64, &mut |_| {}).unwrap();
    (dir, vol, bytes)
}

fn mem_blocks(vol: &Volume, toi: u32, layout: &isnode_store::Layout) -> MemBlocks {
    let mut blocks = HashMap::new();
    for m in 0..layout.params().members {
        let file = std::fs::read(vol.segment_path(m, toi)).unwrap();
        for b in 0..layout.member_blocks(m) {
            let at = layout.block_offset(b) as usize;
            let end = at + layout.params().block_len as usize;
            blocks.insert((m, b), file[at..end].to_vec());
        }
    }
    MemBlocks {
        blocks,
        unreadable: Vec::new(),
        pending: Vec::new(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn any_loss_the_code_covers_reads_back_exactly(
        len in 1usize..6000,
        seed in any::<u64>(),
        lost_member in 0u32..6,
        flip in any::<u16>(),
        want_all in any::<bool>(),
    ) {
        let (_d, vol, bytes) = setup(len, seed);
        let rec = vol.object("x").unwrap();
        let layout = vol.layout(&rec).unwrap();
        let mut src = mem_blocks(&vol, rec.toi, &layout);
        // A whole member lost: within what the code rebuilds (at most m symbols a codeword).
        for b in 0..layout.member_blocks(lost_member) {
            src.unreadable.push((lost_member, b));
        }
        // ... or, instead, one byte damaged somewhere in a block of another member.
        let other = (lost_member + 1) % 6;
        if let Some(block) = src.blocks.get_mut(&(other, 0)) {
            let i = usize::from(flip) % block.len();
            block[i] ^= 0x40;
            src.unreadable.clear();
        }
        let want = if want_all { Want::All } else { Want::Source };
        let mut asm = Assembler::new(64, 24);
        let target = Target { layout: &layout, rec: &rec, tsi: vol.tsi() };
        let mut out = Vec::new();
        for sbn in 0..layout.codewords() {
            let (ready, _) = read_codeword(&mut asm, target, sbn, want, &mut src).unwrap();
            prop_assert_eq!(ready, Readiness::Ready);
            out.extend_from_slice(asm.source(layout.codeword_data_len(sbn)));
        }
        prop_assert!(out == bytes);
    }
}

#[test]
fn a_pending_block_decodes_nothing_and_more_loss_than_m_is_an_error() {
    let (_d, vol, _) = setup(3000, 9);
    let rec = vol.object("x").unwrap();
    let layout = vol.layout(&rec).unwrap();
    let target = Target {
        layout: &layout,
        rec: &rec,
        tsi: vol.tsi(),
    };
    let mut asm = Assembler::new(64, 24);
    let mut src = mem_blocks(&vol, rec.toi, &layout);
    src.pending.push((0, 0));
    let (ready, tally) = read_codeword(&mut asm, target, 0, Want::Source, &mut src).unwrap();
    assert_eq!(ready, Readiness::Pending);
    assert!(!tally.decoded);
    // Two whole members lost: more than the 4 repair symbols cover.
    src.pending.clear();
    src.unreadable = vec![(0, 0), (1, 0)];
    let e = read_codeword(&mut asm, target, 0, Want::Source, &mut src).unwrap_err();
    assert!(matches!(e, StoreError::Unrecoverable { sbn: 0, .. }), "{e}");
}
