//! Recovery at open runs while other processes ingest: concurrent ingests and
//! opens (what `isnode ls` does) in a loop; no committed object ever disappears.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use isnode_store::{IngestOptions, Volume, VolumeParams};

const INGESTERS: usize = 2;
const OBJECTS_PER_INGESTER: usize = 15;
const MAX_OPENS: usize = 2000;

fn small_params() -> VolumeParams {
    VolumeParams {
        symbol_len: 64,
        source_symbols: 20,
        repair_symbols: 4,
        members: 6,
        block_len: 4096,
    }
}

fn ingest_all(root: &Path, ingester: usize) -> Vec<String> {
    let mut committed = Vec::new();
    for i in 0..OBJECTS_PER_INGESTER {
        let name = format!("obj-{ingester}-{i}");
        let data: Vec<u8> = (0..3000 + 97 * i).map(|b| (b * 31 + i) as u8).collect();
        let mut vol = Volume::open(root).expect("opening the volume to ingest");
        let opts = IngestOptions {
            name: name.clone(),
            bitrate_bps: 1_000_000,
            content_type: "application/octet-stream".into(),
            replace: false,
        };
        isnode_store::ingest(
            &mut vol,
            &opts,
            &mut data.as_slice(),
            data.len() as u64,
            &mut |_| {},
        )
        .expect("ingest");
        committed.push(name);
    }
    committed
}

/// Every object committed before an open began is listed by that open, with its segment files.
fn assert_listed(vol: &Volume, names: &BTreeSet<String>) {
    let listed: BTreeSet<String> = vol
        .objects()
        .expect("listing")
        .into_iter()
        .map(|r| r.name)
        .collect();
    let missing: Vec<_> = names.difference(&listed).collect();
    assert!(
        missing.is_empty(),
        "committed objects disappeared: {missing:?}"
    );
    for name in names {
        let rec = vol.object(name).expect("listed object");
        for m in 0..vol.params().members {
            let seg = vol.segment_path(m, rec.toi);
            assert!(seg.is_file(), "{name}: {} was removed", seg.display());
        }
    }
}

#[test]
fn concurrent_ingests_and_opens_never_lose_a_committed_object() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("vol");
    drop(Volume::create(&root, small_params(), None).unwrap());
    let done = Arc::new(AtomicBool::new(false));
    let ingesters: Vec<_> = (0..INGESTERS)
        .map(|n| {
            let root = root.clone();
            std::thread::spawn(move || ingest_all(&root, n))
        })
        .collect();
    let opener = {
        let root = root.clone();
        let done = done.clone();
        std::thread::spawn(move || {
            let mut seen = BTreeSet::new();
            let mut opens = 0;
            while !done.load(Ordering::Relaxed) && opens < MAX_OPENS {
                let vol = Volume::open(&root).expect("open");
                assert_listed(&vol, &seen);
                seen.extend(vol.objects().unwrap().into_iter().map(|r| r.name));
                opens += 1;
            }
            opens
        })
    };
    let mut committed = BTreeSet::new();
    for i in ingesters {
        committed.extend(i.join().expect("ingester panicked"));
    }
    done.store(true, Ordering::Relaxed);
    let opens = opener.join().expect("opener panicked");
    eprintln!("{opens} opens during {} ingests", committed.len());
    assert_eq!(committed.len(), INGESTERS * OBJECTS_PER_INGESTER);
    assert_listed(&Volume::open(&root).unwrap(), &committed);
}
