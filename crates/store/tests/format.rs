//! The on-disk format at byte level (docs/format.md): packets back to back in
//! each block, no trailer, and volumes of another format version refused with
//! an error that says what to do.

use isnode_store::catalog::FORMAT_VERSION;
use isnode_store::{IngestOptions, Layout, Volume, VolumeParams};

/// 92-byte packets in 4096-byte blocks: 44 fit (43 with version 1's 2-byte trailer per packet).
fn params() -> VolumeParams {
    VolumeParams {
        symbol_len: 64,
        source_symbols: 20,
        repair_symbols: 4,
        members: 6,
        block_len: 4096,
    }
}

fn volume_with_object(dir: &std::path::Path, len: usize) -> (Volume, isnode_store::ObjectRecord) {
    let root = dir.join("vol");
    let mut vol = Volume::create(&root, params(), None).unwrap();
    let data: Vec<u8> = (0..len).map(|i| (i * 13 + i / 256) as u8).collect();
    let opts = IngestOptions {
        name: "x".into(),
        bitrate_bps: 1_000_000,
        content_type: "application/octet-stream".into(),
        replace: false,
    };
    let rec = isnode_store::ingest(
        &mut vol,
        &opts,
        &mut data.as_slice(),
        data.len() as u64,
        &mut |_| {},
    )
    .unwrap();
    (vol, rec)
}

#[test]
fn blocks_hold_packets_back_to_back_and_no_trailer() {
    let p = params();
    assert_eq!(p.packet_len(), 92);
    assert_eq!(p.packets_per_block(), 4096 / 92);
    let dir = tempfile::tempdir().unwrap();
    // 30 codewords: member 0 holds 4 packets of each, 120 packets, 3 blocks.
    let (vol, rec) = volume_with_object(dir.path(), 30 * 64 * 20);
    let layout = Layout::new(p, rec.size_bytes).unwrap();
    let per_block = p.packets_per_block() as usize;
    let packet_len = p.packet_len() as usize;
    let seg = std::fs::read(vol.segment_path(0, rec.toi)).unwrap();
    assert_eq!(seg.len() as u64, layout.member_blocks(0) * 4096);
    let mut expected = Vec::new();
    for sbn in 0..layout.codewords() {
        expected.extend(layout.member_run(sbn, 0).esis.map(|esi| (sbn, esi)));
    }
    for (q, (sbn, esi)) in expected.iter().enumerate() {
        let at = (q / per_block) * 4096 + (q % per_block) * packet_len;
        let packet = isnode_wire::parse_data_packet(&seg[at..at + packet_len])
            .unwrap_or_else(|e| panic!("packet {q} at byte {at}: {e}"));
        assert_eq!((packet.id.sbn, u32::from(packet.id.esi)), (*sbn, *esi));
    }
    for block in seg.chunks_exact(4096) {
        assert!(
            block[per_block * packet_len..].iter().all(|b| *b == 0),
            "the bytes after the last packet slot of a block are not zero"
        );
    }
}

fn set_format_version(root: &std::path::Path, version: u32) {
    let conn = rusqlite::Connection::open(root.join("catalog.sqlite")).unwrap();
    conn.execute(
        "UPDATE volume SET value = ?1 WHERE key = 'format_version'",
        [version.to_string()],
    )
    .unwrap();
}

#[test]
fn an_old_format_volume_is_refused_with_what_to_do() {
    assert_eq!(FORMAT_VERSION, 2);
    let dir = tempfile::tempdir().unwrap();
    let (vol, _) = volume_with_object(dir.path(), 5000);
    let root = vol.root().to_path_buf();
    drop(vol);
    set_format_version(&root, 1);
    let e = Volume::open(&root).unwrap_err().to_string();
    for needle in [
        "format version 1",
        "isnode cat NAME",
        "isnode volume create",
        "ingest them again",
    ] {
        assert!(e.contains(needle), "{needle:?} not in: {e}");
    }
    set_format_version(&root, 3);
    let e = Volume::open(&root).unwrap_err().to_string();
    assert!(e.contains("newer isnode"), "{e}");
    set_format_version(&root, FORMAT_VERSION);
    Volume::open(&root).unwrap().object("x").unwrap();
}
