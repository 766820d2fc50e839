//! Ingest → read-back round trips, with and without damage, through the library.

use std::path::Path;

use isnode_store::{check, CheckOptions, IngestOptions, ObjectReader, Volume, VolumeParams};
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

fn data(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn put(vol: &mut Volume, name: &str, bytes: &[u8]) {
    let opts = IngestOptions {
        name: name.into(),
        bitrate_bps: 1_000_000,
        content_type: "application/octet-stream".into(),
        replace: false,
    };
    let rec =
        isnode_store::ingest(vol, &opts, &mut &bytes[..], bytes.len() as u64, &mut |_| {}).unwrap();
    assert_eq!(rec.size_bytes, bytes.len() as u64);
}

fn get(vol: &Volume, name: &str) -> Result<Vec<u8>, isnode_store::StoreError> {
    let mut out = Vec::new();
    ObjectReader::open(vol, name)?.copy_to(&mut out, &mut |_| {})?;
    Ok(out)
}

fn sizes(p: &VolumeParams) -> Vec<usize> {
    let e = p.symbol_len as usize;
    let cw = e * p.source_symbols as usize;
    vec![0, 1, e - 1, e, e + 1, cw - 1, cw, cw + 1, 3 * cw + e / 2]
}

#[test]
fn edge_sizes_round_trip_small_and_default_shapes() {
    let one_mib = VolumeParams {
        block_len: 1 << 20,
        ..VolumeParams::default()
    };
    for params in [small(), VolumeParams::default(), one_mib] {
        let dir = tempfile::tempdir().unwrap();
        let mut vol = Volume::create(dir.path(), params, None).unwrap();
        for (i, len) in sizes(&params).into_iter().enumerate() {
            let bytes = data(len, i as u64);
            put(&mut vol, &format!("o{i}"), &bytes);
            assert_eq!(get(&vol, &format!("o{i}")).unwrap(), bytes, "size {len}");
        }
        drop(vol);
        // Everything is still there after reopening.
        let vol = Volume::open(dir.path()).unwrap();
        for (i, len) in sizes(&params).into_iter().enumerate() {
            assert_eq!(get(&vol, &format!("o{i}")).unwrap(), data(len, i as u64));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn random_sizes_round_trip_with_a_member_lost(len in 0usize..(64 * 20 * 5), seed in any::<u64>(), lost in 0u32..6) {
        let dir = tempfile::tempdir().unwrap();
        let mut vol = Volume::create(dir.path(), small(), None).unwrap();
        let bytes = data(len, seed);
        put(&mut vol, "x", &bytes);
        prop_assert_eq!(&get(&vol, "x").unwrap(), &bytes);
        std::fs::remove_dir_all(&vol.members()[lost as usize]).unwrap();
        prop_assert_eq!(&get(&vol, "x").unwrap(), &bytes);
        let report = check(&mut vol, CheckOptions { repair: true }, &mut |_| {}).unwrap();
        prop_assert!(report.unrecoverable.is_empty());
        let again = check(&mut vol, CheckOptions { repair: false }, &mut |_| {}).unwrap();
        prop_assert!(!again.damaged(), "{:?}", again);
        prop_assert_eq!(&get(&vol, "x").unwrap(), &bytes);
    }
}

fn segments(root: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for m in std::fs::read_dir(root.join("members")).unwrap() {
        for f in std::fs::read_dir(m.unwrap().path().join("objects")).unwrap() {
            out.push(f.unwrap().path());
        }
    }
    out.sort();
    out
}

#[test]
fn flipped_bytes_are_found_read_around_and_repaired() {
    let dir = tempfile::tempdir().unwrap();
    let mut vol = Volume::create(dir.path(), small(), None).unwrap();
    let bytes = data(64 * 20 * 7 + 5, 42);
    put(&mut vol, "x", &bytes);
    // Corrupt one byte in every block of one member's segment, and the header of a packet on another.
    let segs = segments(dir.path());
    let victim = &segs[2];
    let mut content = std::fs::read(victim).unwrap();
    for block in 0..content.len() / 4096 {
        content[block * 4096 + 100] ^= 0x40;
    }
    std::fs::write(victim, &content).unwrap();
    let other = &segs[4];
    let mut content = std::fs::read(other).unwrap();
    content[5] ^= 1; // inside the LCT header of the first packet
    std::fs::write(other, &content).unwrap();

    let report = check(&mut vol, CheckOptions { repair: false }, &mut |_| {}).unwrap();
    assert!(report.damaged());
    assert_eq!(report.damage.len(), 2, "{report:?}");
    assert!(report.unrecoverable.is_empty());
    let mut reader = ObjectReader::open(&vol, "x").unwrap();
    let mut out = Vec::new();
    let stats = reader.copy_to(&mut out, &mut |_| {}).unwrap();
    assert_eq!(out, bytes);
    assert!(stats.symbols_corrupt >= 2, "{stats:?}");

    let fixed = check(&mut vol, CheckOptions { repair: true }, &mut |_| {}).unwrap();
    assert!(!fixed.damaged(), "{fixed:?}");
    let clean = check(&mut vol, CheckOptions { repair: false }, &mut |_| {}).unwrap();
    assert!(!clean.damaged() && clean.damage.is_empty(), "{clean:?}");
    assert_eq!(get(&vol, "x").unwrap(), bytes);
}

#[test]
fn loss_beyond_the_code_is_reported_not_hidden() {
    let dir = tempfile::tempdir().unwrap();
    let mut vol = Volume::create(dir.path(), small(), None).unwrap();
    let bytes = data(64 * 20 * 3, 9);
    put(&mut vol, "x", &bytes);
    std::fs::remove_dir_all(&vol.members()[0]).unwrap();
    std::fs::remove_dir_all(&vol.members()[1]).unwrap();
    let err = get(&vol, "x").unwrap_err().to_string();
    assert!(err.contains("codeword 0"), "{err}");
    let report = check(&mut vol, CheckOptions { repair: true }, &mut |_| {}).unwrap();
    assert!(report.damaged() && !report.unrecoverable.is_empty());
}

#[test]
fn names_and_duplicates_are_refused_without_side_effects() {
    let dir = tempfile::tempdir().unwrap();
    let mut vol = Volume::create(dir.path(), small(), None).unwrap();
    put(&mut vol, "a", b"hello");
    let before = segments(dir.path());
    for bad in ["", "a/b", "..", "x..y", "tab\there", " lead"] {
        let opts = IngestOptions {
            name: bad.into(),
            bitrate_bps: 1,
            content_type: "x".into(),
            replace: false,
        };
        assert!(
            isnode_store::ingest(&mut vol, &opts, &mut &b"zz"[..], 2, &mut |_| {}).is_err(),
            "{bad:?}"
        );
    }
    let dup = IngestOptions {
        name: "a".into(),
        bitrate_bps: 1,
        content_type: "x".into(),
        replace: false,
    };
    let err = isnode_store::ingest(&mut vol, &dup, &mut &b"zz"[..], 2, &mut |_| {}).unwrap_err();
    assert!(err.to_string().contains("already exists"));
    // A short input is a truncation, and leaves nothing behind.
    let short = IngestOptions {
        name: "b".into(),
        ..dup.clone()
    };
    let err =
        isnode_store::ingest(&mut vol, &short, &mut &b"zz"[..], 10_000, &mut |_| {}).unwrap_err();
    assert!(err.to_string().contains("truncated"), "{err}");
    assert_eq!(segments(dir.path()), before);
    assert_eq!(vol.objects().unwrap().len(), 1);
    // Replacing works and frees the old object's files.
    let rep = IngestOptions {
        replace: true,
        ..dup
    };
    isnode_store::ingest(&mut vol, &rep, &mut &b"new content"[..], 11, &mut |_| {}).unwrap();
    assert_eq!(get(&vol, "a").unwrap(), b"new content");
    assert_eq!(segments(dir.path()).len(), before.len());
}

#[test]
fn a_volume_keeps_the_block_length_it_was_made_with() {
    // A volume made with 1 MiB blocks (the default before 64 KiB) opens with 1 MiB blocks,
    // and its objects read back; a new volume gets the default.
    let dir = tempfile::tempdir().unwrap();
    let old = VolumeParams {
        block_len: 1 << 20,
        ..VolumeParams::default()
    };
    let bytes = data(3 * 223 * 1408 + 17, 7);
    {
        let mut vol = Volume::create(dir.path(), old, None).unwrap();
        put(&mut vol, "old.bin", &bytes);
    }
    let vol = Volume::open(dir.path()).unwrap();
    assert_eq!(vol.params().block_len, 1 << 20);
    assert_eq!(get(&vol, "old.bin").unwrap(), bytes);
    let fresh = tempfile::tempdir().unwrap();
    let vol = Volume::open_or_create(fresh.path()).unwrap();
    assert_eq!(vol.params().block_len, 64 << 10);
}
