//! Tests of [`crate::prefetch`]: its blocks against the same blocks read one at a time by
//! [`crate::read::DiskBlocks`]. Kept apart from `prefetch.rs`, which `read.rs` imports, so
//! that the comparison does not make the two files import each other.

use crate::codeword::BlockSource;
use crate::ingest::IngestOptions;
use crate::params::VolumeParams;
use crate::prefetch::PrefetchBlocks;
use crate::read::DiskBlocks;
use crate::records::ObjectRecord;
use crate::volume::Volume;

fn volume_with(len: usize) -> (tempfile::TempDir, Volume, ObjectRecord, Vec<u8>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let params = VolumeParams {
        members: 4,
        symbol_len: 1024,
        source_symbols: 12,
        repair_symbols: 4,
        block_len: 8192,
    };
    let mut vol = Volume::create(dir.path(), params, None).expect("volume");
    let data: Vec<u8> = (0..len).map(|i| (i * 7 + i / 251) as u8).collect();
    let opts = IngestOptions {
        name: "x".into(),
        bitrate_bps: 1_000_000,
        content_type: "video/mp2t".into(),
        replace: false,
    };
    let rec = crate::ingest::ingest(
        &mut vol,
        &opts,
        &mut data.as_slice(),
        data.len() as u64,
        &mut |_| {},
    )
    .expect("ingest");
    (dir, vol, rec, data)
}

/// Every block in any order of asking equals the block as read one at a time.
#[test]
fn blocks_equal_direct_reads_in_any_order() {
    let (_dir, vol, rec, _) = volume_with(200_000);
    let layout = vol.layout(&rec).expect("layout");
    let paths = (0..4).map(|m| vol.segment_path(m, rec.toi)).collect();
    let mut ahead = PrefetchBlocks::open(paths, &layout);
    let mut plain = DiskBlocks::open(&vol, &rec, &layout);
    let mut asks = Vec::new();
    for m in 0..4u32 {
        for b in 0..layout.member_blocks(m) {
            asks.push((m, b));
        }
    }
    // In order, then repeated, then backwards (out of the queue's order).
    let backwards: Vec<_> = asks.iter().rev().copied().collect();
    for (m, b) in asks.iter().chain(asks.iter()).chain(backwards.iter()) {
        let want = plain.block(*m, *b).expect("plain").to_vec();
        assert_eq!(
            ahead.block(*m, *b).expect("ahead"),
            &want[..],
            "member {m} block {b}"
        );
    }
    assert!(ahead.errors().is_empty(), "{:?}", ahead.errors());
    assert!(ahead.block(0, layout.member_blocks(0) + 5).is_err());
}

/// A member whose file is gone is unreadable and says so; the others still read.
#[test]
fn a_missing_member_is_unreadable() {
    let (_dir, vol, rec, _) = volume_with(50_000);
    let layout = vol.layout(&rec).expect("layout");
    std::fs::remove_file(vol.segment_path(1, rec.toi)).expect("remove");
    let paths = (0..4).map(|m| vol.segment_path(m, rec.toi)).collect();
    let mut ahead = PrefetchBlocks::open(paths, &layout);
    assert_eq!(ahead.errors().len(), 1, "{:?}", ahead.errors());
    assert!(ahead.block(1, 0).is_err());
    assert!(ahead.block(0, 0).is_ok());
}
