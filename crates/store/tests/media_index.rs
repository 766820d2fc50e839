//! The time index at ingest: kept in the catalog with its object, gone with it (on
//! replace), and an older catalog without the index tables still opens (without index).

use isnode_store::{IngestOptions, Volume, VolumeParams};

fn params() -> VolumeParams {
    VolumeParams {
        symbol_len: 64,
        source_symbols: 20,
        repair_symbols: 4,
        members: 6,
        block_len: 4096,
    }
}

/// A TS of `frames` video PES packets (PID 0x100, 25 frame/s), a key frame with the
/// random_access_indicator every 50, each followed by a continuation packet.
fn ts(frames: u64) -> Vec<u8> {
    let mut out = Vec::new();
    for f in 0..frames {
        let pts = 90_000 + f * 3600;
        let mut p = vec![
            0x47,
            0x41,
            0x00,
            0x30,
            1,
            if f % 50 == 0 { 0x40 } else { 0 },
        ];
        p.extend_from_slice(&[0, 0, 1, 0xE0, 0, 0, 0x80, 0x80, 5]);
        p.extend_from_slice(&[
            0x21 | ((pts >> 29) & 0x0E) as u8,
            (pts >> 22) as u8,
            0x01 | ((pts >> 14) & 0xFE) as u8,
            (pts >> 7) as u8,
            0x01 | ((pts << 1) & 0xFE) as u8,
        ]);
        p.resize(188, 0xFF);
        out.extend(p);
        let mut c = vec![0x47, 0x01, 0x00, 0x10];
        c.resize(188, 0xAB);
        out.extend(c);
    }
    out
}

fn ingest(vol: &mut Volume, name: &str, data: &[u8], replace: bool) -> u32 {
    let opts = IngestOptions {
        name: name.into(),
        bitrate_bps: 1_000_000,
        content_type: "video/mp2t".into(),
        replace,
    };
    let mut src = data;
    isnode_store::ingest(vol, &opts, &mut src, data.len() as u64, &mut |_| {})
        .unwrap()
        .toi
}

#[test]
fn index_is_stored_replaced_and_optional() {
    let dir = tempfile::tempdir().unwrap();
    let mut vol = Volume::create(dir.path(), params(), None).unwrap();
    let toi = ingest(&mut vol, "a.ts", &ts(250), false);
    let ix = vol.catalog().media_index(toi).unwrap().unwrap();
    assert_eq!(ix.container, "mpeg-ts");
    assert_eq!(ix.moov_at_front, None);
    let want: Vec<(f64, u64)> = (0..5).map(|i| (2.0 * i as f64, i * 100 * 188)).collect();
    assert_eq!(ix.points, want);

    let bin = ingest(&mut vol, "b.bin", &[7u8; 5000], false);
    let ix = vol.catalog().media_index(bin).unwrap().unwrap();
    assert_eq!((ix.container.as_str(), ix.points.len()), ("unknown", 0));

    // Replacing the object drops its index with it.
    let new = ingest(&mut vol, "a.ts", &ts(100), true);
    assert_eq!(vol.catalog().media_index(toi).unwrap(), None);
    assert_eq!(
        vol.catalog()
            .media_index(new)
            .unwrap()
            .unwrap()
            .points
            .len(),
        2
    );
    drop(vol);

    // A catalog written before the index tables existed opens; its objects have none.
    let conn = rusqlite::Connection::open(dir.path().join("catalog.sqlite")).unwrap();
    conn.execute_batch("DROP TABLE media_index; DROP TABLE media_meta;")
        .unwrap();
    drop(conn);
    let mut vol = Volume::open(dir.path()).unwrap();
    assert_eq!(vol.catalog().media_index(new).unwrap(), None);
    let again = ingest(&mut vol, "c.ts", &ts(60), false);
    assert_eq!(
        vol.catalog()
            .media_index(again)
            .unwrap()
            .unwrap()
            .points
            .len(),
        2
    );
}
