//! A probe of one member: is it readable and ours again? Its identity file is checked and
//! one block of one of its segments (chosen at random among the complete objects) is read
//! and checked against its catalog CRC32C. `isnode serve` probes a member it failed after
//! read errors before reading it again.

use rand::Rng;

use crate::codeword::verify_block;
use crate::io::{AlignedBuf, BlockFile};
use crate::Volume;

/// Probes `member` of `vol`: `Ok` when its identity is this volume's and one block read
/// back whole with its checksum (or it holds no block at all); the problem otherwise.
pub fn probe_member(vol: &Volume, member: u32) -> Result<(), String> {
    if member >= vol.params().members {
        return Err(format!("no member {member}"));
    }
    vol.member_identity_ok(member)?;
    let objects = vol.objects().map_err(|e| e.to_string())?;
    let mut rng = rand::rng();
    // Up to a few objects: one may have no block on this member (a small object).
    for _ in 0..objects.len().min(8) {
        let Some(rec) = objects.get(rng.random_range(0..objects.len())) else {
            continue;
        };
        let layout = vol.layout(rec).map_err(|e| e.to_string())?;
        let blocks = vol.blocks(rec, &layout).map_err(|e| e.to_string())?;
        let Some(mine) = blocks.get(member as usize).filter(|b| !b.is_empty()) else {
            continue;
        };
        let Some(b) = mine.get(rng.random_range(0..mine.len())) else {
            continue;
        };
        let path = vol.segment_path(member, rec.toi);
        let file = BlockFile::open_read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut buf = AlignedBuf::new(layout.params().block_len as usize);
        file.read_block(&mut buf, layout.block_offset(b.block))
            .map_err(|e| format!("{} block {}: {e}", path.display(), b.block))?;
        return verify_block(buf.as_slice(), Some(b.crc32c))
            .map_err(|e| format!("{} block {}: {e}", path.display(), b.block));
    }
    Ok(())
}
