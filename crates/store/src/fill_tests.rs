//! Tests of origin fills ([`crate::fill`]) and the cache bookkeeping ([`crate::cache`]).

use std::path::Path;
use std::sync::{RwLock, RwLockReadGuard};

use proptest::prelude::*;

use crate::codeword::Want;
use crate::fill::{verify_fill_block, Fill, FillSpec};
use crate::records::ObjectState;
use crate::{IngestOptions, ObjectReader, ObjectRecord, StoreError, Volume, VolumeParams};

/// Held, shared, by the tests that drop a fill and take its name again, and alone by
/// [`a_fill_resumes_after_a_crash_at_every_point`] while it spawns a child: between fork and
/// exec a child holds a copy of every descriptor of this process, `flock` locks included,
/// so a fill dropped in that window would still look busy to its resume (`FillBusy`, seen
/// once in a full run).
static FORKING: RwLock<()> = RwLock::new(());

/// No child is being spawned by this test binary while the guard is held.
fn no_fork() -> RwLockReadGuard<'static, ()> {
    FORKING.read().unwrap_or_else(|e| e.into_inner())
}

/// Small codewords (k = 20 symbols of 64 bytes) and blocks of 4096 bytes (44 packets):
/// blocks straddle codeword boundaries on every member.
fn params() -> VolumeParams {
    VolumeParams {
        symbol_len: 64,
        source_symbols: 20,
        repair_symbols: 4,
        members: 6,
        block_len: 4096,
    }
}

fn data(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(seed) >> 13) as u8)
        .collect()
}

fn spec(name: &str, len: usize, etag: &str) -> FillSpec {
    FillSpec {
        name: name.into(),
        size_bytes: len as u64,
        bitrate_bps: 1_000_000,
        content_type: "video/mp2t".into(),
        origin_etag: etag.into(),
    }
}

fn new_volume(dir: &Path) -> Volume {
    Volume::create(&dir.join("vol"), params(), None).unwrap()
}

fn ingest(vol: &mut Volume, name: &str, bytes: &[u8]) -> ObjectRecord {
    let opts = IngestOptions {
        name: name.into(),
        bitrate_bps: 1_000_000,
        content_type: "video/mp2t".into(),
        replace: false,
    };
    let mut src = bytes;
    crate::ingest(vol, &opts, &mut src, bytes.len() as u64, &mut |_| {}).unwrap()
}

/// Fills `name` with `bytes` pushed in `chunks` (sizes, cycled), committing after every
/// `commit_every` pushes.
fn fill(
    vol: &mut Volume,
    name: &str,
    bytes: &[u8],
    chunks: &[usize],
    commit_every: usize,
) -> ObjectRecord {
    let mut f = Fill::begin_or_resume(vol, &spec(name, bytes.len(), "e1")).unwrap();
    push_rest(vol, &mut f, bytes, chunks, commit_every);
    f.finish(vol).unwrap()
}

fn push_rest(vol: &mut Volume, f: &mut Fill, bytes: &[u8], chunks: &[usize], commit_every: usize) {
    let mut at = f.next_byte_offset() as usize;
    let mut pushes = 0;
    for c in chunks.iter().cycle() {
        if at >= bytes.len() {
            break;
        }
        let end = (at + c.max(&1)).min(bytes.len());
        f.push(vol, &bytes[at..end]).unwrap();
        at = end;
        pushes += 1;
        if pushes % commit_every.max(1) == 0 {
            f.commit(vol).unwrap();
        }
    }
}

/// Every stored packet of `rec` as (sbn, esi, symbol), per member in segment order, and
/// the bytes after the packets of every block (must be zero).
fn packets(vol: &Volume, rec: &ObjectRecord) -> Vec<Vec<(u32, u8, Vec<u8>)>> {
    let layout = vol.layout(rec).unwrap();
    let p = *layout.params();
    let packet_len = p.packet_len() as usize;
    (0..p.members)
        .map(|m| {
            let file = std::fs::read(vol.segment_path(m, rec.toi)).unwrap();
            assert_eq!(file.len() as u64, layout.segment_len_bytes(m));
            let mut out = Vec::new();
            for q in 0..layout.member_packets(m) {
                let (block, offset) = layout.packet_position(q);
                let at = layout.block_offset(block) as usize + offset;
                let pk = isnode_wire::parse_data_packet(&file[at..at + packet_len]).unwrap();
                assert_eq!((pk.id.tsi, pk.id.toi), (vol.tsi(), rec.toi));
                out.push((pk.id.sbn, pk.id.esi, pk.symbol.to_vec()));
            }
            for b in 0..layout.member_blocks(m) {
                let used = layout.packets_in_block(m, b) as usize * packet_len;
                let start = layout.block_offset(b) as usize;
                let block = &file[start..start + p.block_len as usize];
                assert!(
                    block[used..].iter().all(|x| *x == 0),
                    "member {m} block {b} tail"
                );
            }
            out
        })
        .collect()
}

fn read_all(vol: &Volume, name: &str) -> Vec<u8> {
    let mut out = Vec::new();
    ObjectReader::open(vol, name)
        .unwrap()
        .copy_to(&mut out, &mut |_| {})
        .unwrap();
    out
}

/// The fill of `b` is the ingest of `a` but for the TOI: same packets, same rows.
fn assert_same_as_ingest(vol: &Volume, a: &ObjectRecord, b: &ObjectRecord, bytes: &[u8]) {
    assert_eq!(b.state, ObjectState::Complete);
    assert_eq!(vol.object(&b.name).unwrap(), *b);
    assert_eq!(a.content_crc32c, b.content_crc32c);
    assert_eq!(a.codewords, b.codewords);
    assert_eq!(packets(vol, a), packets(vol, b));
    let layout = vol.layout(a).unwrap();
    let blocks_a = vol.blocks(a, &layout).unwrap();
    let blocks_b = vol.blocks(b, &layout).unwrap();
    let shape = |bl: &Vec<Vec<crate::records::BlockRecord>>| -> Vec<Vec<(u64, u32)>> {
        bl.iter()
            .map(|m| m.iter().map(|r| (r.block, r.packets)).collect())
            .collect()
    };
    assert_eq!(shape(&blocks_a), shape(&blocks_b));
    // Whole-block CRCs of what is on disk.
    for (m, rows) in blocks_b.iter().enumerate() {
        let file = std::fs::read(vol.segment_path(m as u32, b.toi)).unwrap();
        for r in rows {
            let s = layout.block_offset(r.block) as usize;
            assert_eq!(
                crc32c::crc32c(&file[s..s + layout.params().block_len as usize]),
                r.crc32c
            );
        }
    }
    let digests = |t| vol.catalog().digests(t, 0, a.codewords).unwrap().len();
    assert_eq!(digests(a.toi), a.codewords as usize);
    assert_eq!(digests(b.toi), b.codewords as usize);
    assert_eq!(vol.media_index(a).unwrap(), vol.media_index(b).unwrap());
    assert_eq!(read_all(vol, &b.name), bytes);
}

#[test]
fn a_fill_writes_the_packets_an_ingest_writes() {
    let dir = tempfile::tempdir().unwrap();
    let mut vol = new_volume(dir.path());
    let bytes = data(20 * 64 * 7 + 333, 1);
    let a = ingest(&mut vol, "a", &bytes);
    let b = fill(&mut vol, "b", &bytes, &[1000, 7, 4096], 2);
    assert_same_as_ingest(&vol, &a, &b, &bytes);
    assert!(vol.filling("b").unwrap().is_none());
    assert_eq!(vol.origin_etag("b").unwrap().as_deref(), Some("e1"));
    assert_eq!(vol.origin_etag("a").unwrap(), None);
}

#[test]
fn an_empty_object_fills() {
    let dir = tempfile::tempdir().unwrap();
    let mut vol = new_volume(dir.path());
    let a = ingest(&mut vol, "a", &[]);
    let f = Fill::begin_or_resume(&mut vol, &spec("b", 0, "e")).unwrap();
    assert!(f.all_pushed());
    let b = f.finish(&mut vol).unwrap();
    assert_same_as_ingest(&vol, &a, &b, &[]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn any_chunking_fills_what_one_ingest_writes(
        len in 0usize..9000,
        chunks in proptest::collection::vec(1usize..3000, 1..8),
        commit_every in 1usize..4,
        seed in any::<u32>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let mut vol = new_volume(dir.path());
        let bytes = data(len, seed);
        let a = ingest(&mut vol, "a", &bytes);
        let b = fill(&mut vol, "b", &bytes, &chunks, commit_every);
        assert_same_as_ingest(&vol, &a, &b, &bytes);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]
    /// A fill dropped after a random push (what was not committed is lost) and resumed,
    /// with other chunk sizes, still writes what one ingest writes.
    #[test]
    fn a_fill_dropped_anywhere_resumes_to_what_one_ingest_writes(
        len in 1usize..9000,
        chunks in proptest::collection::vec(1usize..3000, 1..6),
        resumed_chunks in proptest::collection::vec(1usize..3000, 1..6),
        commit_every in 1usize..3,
        drop_after in 0usize..8,
    ) {
        let _fork = no_fork();
        let dir = tempfile::tempdir().unwrap();
        let mut vol = new_volume(dir.path());
        let bytes = data(len, len as u32);
        let a = ingest(&mut vol, "a", &bytes);
        let mut f = Fill::begin_or_resume(&mut vol, &spec("b", len, "e1")).unwrap();
        let mut at = 0;
        for (i, c) in chunks.iter().cycle().enumerate() {
            if at >= len || i == drop_after {
                break;
            }
            let end = (at + c).min(len);
            f.push(&mut vol, &bytes[at..end]).unwrap();
            at = end;
            if (i + 1) % commit_every == 0 {
                f.commit(&mut vol).unwrap();
            }
        }
        let front = f.front_codewords();
        drop(f);
        let mut f = Fill::begin_or_resume(&mut vol, &spec("b", len, "e1")).unwrap();
        prop_assert_eq!(f.front_codewords(), front);
        prop_assert_eq!(f.next_byte_offset(), f.front_bytes());
        push_rest(&mut vol, &mut f, &bytes, &resumed_chunks, commit_every);
        let b = f.finish(&mut vol).unwrap();
        assert_same_as_ingest(&vol, &a, &b, &bytes);
    }
}

#[test]
fn the_front_moves_only_at_commits_and_by_whole_codewords() {
    let dir = tempfile::tempdir().unwrap();
    let mut vol = new_volume(dir.path());
    let bytes = data(20 * 64 * 5, 2);
    let mut f = Fill::begin_or_resume(&mut vol, &spec("t", bytes.len(), "e")).unwrap();
    assert_eq!(f.record().state, ObjectState::Filling);
    f.push(&mut vol, &bytes[..2000]).unwrap();
    assert_eq!(f.next_byte_offset(), 2000);
    assert_eq!(f.front_codewords(), 0);
    assert_eq!(f.pushed_codewords(), 1);
    assert_eq!(f.origin_etag(), "e");
    assert_eq!(vol.filling("t").unwrap().unwrap().front_codewords, 0);
    assert_eq!(f.commit(&mut vol).unwrap(), 1);
    assert_eq!(f.front_bytes(), 1280);
    let seen = vol.filling("t").unwrap().unwrap();
    assert_eq!(seen.front_codewords, 1);
    assert_eq!(seen.origin_etag, "e");
    assert_eq!(seen.record.toi, f.toi());
    assert_eq!(vol.filling_objects().unwrap(), vec![seen]);
    // Too many bytes: refused, nothing taken.
    assert!(matches!(
        f.push(&mut vol, &vec![0; bytes.len()]),
        Err(StoreError::BadParams(_))
    ));
    assert_eq!(f.next_byte_offset(), 2000);
    // Not all bytes: finish refuses, the durable front stays.
    let err = f.finish(&mut vol).unwrap_err();
    assert!(
        matches!(err, StoreError::Truncated { got: 2000, .. }),
        "{err}"
    );
    assert_eq!(vol.filling("t").unwrap().unwrap().front_codewords, 1);
    // Not a complete object yet.
    assert!(matches!(vol.object("t"), Err(StoreError::NotFound(_))));
}

/// What a reader does with a filling object: the rows of the blocks holding committed
/// packets, each block verified against its row; then the codewords read.
fn read_committed(vol: &Volume, name: &str) -> Vec<u8> {
    let fo = vol.filling(name).unwrap().unwrap();
    let layout = vol.layout(&fo.record).unwrap();
    let p = *layout.params();
    for (m, rows) in vol.fill_blocks(&fo).unwrap().iter().enumerate() {
        // A member a degraded fill does not write has rows but no file.
        let Ok(file) = std::fs::read(vol.segment_path(m as u32, fo.record.toi)) else {
            continue;
        };
        for r in rows {
            let s = layout.block_offset(r.block) as usize;
            verify_fill_block(&p, r, &file[s..s + p.block_len as usize]).unwrap();
        }
    }
    let mut reader =
        ObjectReader::for_record(vol, fo.record.clone(), crate::ReadOrder::Any).unwrap();
    let mut out = Vec::new();
    for sbn in 0..fo.front_codewords {
        reader.read_codeword(sbn, Want::Source).unwrap();
        out.extend_from_slice(reader.source(sbn));
    }
    assert_eq!(reader.stats().symbols_corrupt, 0);
    let degraded = (0..vol.params().members).any(|m| !vol.segment_path(m, fo.record.toi).exists());
    if !degraded {
        assert_eq!(reader.stats().symbols_missing, 0);
    }
    assert_eq!(out.len() as u64, fo.front_bytes(&layout));
    out
}

#[test]
fn readers_see_verified_committed_codewords_while_the_fill_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut vol = new_volume(dir.path());
    let bytes = data(20 * 64 * 9 + 17, 3);
    let mut f = Fill::begin_or_resume(&mut vol, &spec("t", bytes.len(), "e")).unwrap();
    let mut at = 0;
    let mut old: Option<crate::records::BlockRecord> = None;
    while at < bytes.len() {
        let end = (at + 1500).min(bytes.len());
        f.push(&mut vol, &bytes[at..end]).unwrap();
        at = end;
        f.commit(&mut vol).unwrap();
        let got = read_committed(&vol, "t");
        assert_eq!(got, bytes[..got.len()]);
        // A block read under the row of an earlier commit still verifies (same prefix).
        let fo = vol.filling("t").unwrap().unwrap();
        let p = *vol.params();
        let file = std::fs::read(vol.segment_path(0, fo.record.toi)).unwrap();
        if let Some(row) = old {
            let s = row.block as usize * p.block_len as usize;
            verify_fill_block(&p, &row, &file[s..s + p.block_len as usize]).unwrap();
        }
        let rows = vol.fill_blocks(&fo).unwrap();
        old = rows[0].last().copied();
    }
    f.finish(&mut vol).unwrap();
    assert_eq!(read_all(&vol, "t"), bytes);
}

#[test]
fn a_block_checked_against_a_newer_row_is_an_erasure_not_a_wrong_byte() {
    let _fork = no_fork();
    let dir = tempfile::tempdir().unwrap();
    let mut vol = new_volume(dir.path());
    let bytes = data(20 * 64 * 4, 4);
    let mut f = Fill::begin_or_resume(&mut vol, &spec("t", bytes.len(), "e")).unwrap();
    f.push(&mut vol, &bytes[..1280]).unwrap();
    f.commit(&mut vol).unwrap();
    let toi = f.toi();
    let p = *vol.params();
    let old_block = std::fs::read(vol.segment_path(0, toi)).unwrap()[..4096].to_vec();
    f.push(&mut vol, &bytes[1280..2560]).unwrap();
    f.commit(&mut vol).unwrap();
    let fo = vol.filling("t").unwrap().unwrap();
    let newer = vol.fill_blocks(&fo).unwrap()[0][0];
    assert!(verify_fill_block(&p, &newer, &old_block).is_err());
    // A torn read: the old block with the new block's bytes over half of it.
    let new_block = std::fs::read(vol.segment_path(0, toi)).unwrap()[..4096].to_vec();
    let mut torn = old_block.clone();
    torn[..2048].copy_from_slice(&new_block[..2048]);
    let older_row = crate::records::BlockRecord {
        packets: newer.packets / 2,
        crc32c: crc32c::crc32c(
            &old_block[..(newer.packets / 2) as usize * p.packet_len() as usize],
        ),
        ..newer
    };
    // The committed prefix of the older row is the same bytes in both.
    verify_fill_block(&p, &older_row, &torn).unwrap();
    verify_fill_block(&p, &newer, &new_block).unwrap();
    drop(f);
}

#[test]
fn a_dropped_fill_resumes_from_its_durable_front() {
    let _fork = no_fork();
    let dir = tempfile::tempdir().unwrap();
    let mut vol = new_volume(dir.path());
    let bytes = data(20 * 64 * 6 + 100, 5);
    let a = ingest(&mut vol, "a", &bytes);
    let mut f = Fill::begin_or_resume(&mut vol, &spec("b", bytes.len(), "e1")).unwrap();
    f.push(&mut vol, &bytes[..3000]).unwrap();
    f.commit(&mut vol).unwrap();
    f.push(&mut vol, &bytes[3000..6000]).unwrap(); // not committed
    let toi = f.toi();
    drop(f);
    drop(vol);
    let mut vol = Volume::open(&dir.path().join("vol")).unwrap();
    assert!(
        vol.ingest_lock_path(toi).exists(),
        "recovery removed a fill's lock file"
    );
    let fo = vol.filling("b").unwrap().unwrap();
    assert_eq!(fo.front_codewords, 2);
    let mut f = Fill::begin_or_resume(&mut vol, &spec("b", bytes.len(), "e1")).unwrap();
    assert_eq!(f.toi(), toi);
    assert_eq!(f.origin_etag(), "e1");
    assert_eq!(f.front_codewords(), 2);
    assert_eq!(f.pushed_codewords(), 2);
    assert_eq!(f.next_byte_offset(), f.layout().codeword_offset(2));
    push_rest(&mut vol, &mut f, &bytes, &[777], 3);
    let b = f.finish(&mut vol).unwrap();
    assert_same_as_ingest(&vol, &a, &b, &bytes);
    assert!(!vol.ingest_lock_path(toi).exists());
}

#[test]
fn another_etag_or_size_starts_anew_and_one_fill_holds_a_name() {
    let _fork = no_fork();
    let dir = tempfile::tempdir().unwrap();
    let mut vol = new_volume(dir.path());
    let bytes = data(20 * 64 * 3, 6);
    let mut f = Fill::begin_or_resume(&mut vol, &spec("t", bytes.len(), "v1")).unwrap();
    f.push(&mut vol, &bytes[..1300]).unwrap();
    f.commit(&mut vol).unwrap();
    let first = f.toi();
    // One fill per name: a second one is refused while the first lives.
    let busy = Fill::begin_or_resume(&mut vol, &spec("t", bytes.len(), "v1")).unwrap_err();
    assert!(matches!(busy, StoreError::FillBusy(_)), "{busy}");
    drop(f);
    // Same size, new ETag: the old version goes, files and all.
    let f = Fill::begin_or_resume(&mut vol, &spec("t", bytes.len(), "v2")).unwrap();
    assert_ne!(f.toi(), first);
    assert_eq!(f.front_codewords(), 0);
    assert!(!vol.segment_path(0, first).exists());
    let second = f.toi();
    drop(f);
    // Same ETag, another size: starts anew too.
    let f = Fill::begin_or_resume(&mut vol, &spec("t", bytes.len() + 1, "v2")).unwrap();
    assert_ne!(f.toi(), second);
    assert_eq!(vol.filling_objects().unwrap().len(), 1);
    f.abandon(&mut vol).unwrap();
    assert!(vol.filling("t").unwrap().is_none());
    assert!(vol.filling_objects().unwrap().is_empty());
}

#[test]
fn a_finished_fill_replaces_the_complete_object_of_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let mut vol = new_volume(dir.path());
    let old = fill(&mut vol, "t", &data(3000, 7), &[500], 1);
    let new_bytes = data(4000, 8);
    let mut f = Fill::begin_or_resume(&mut vol, &spec("t", new_bytes.len(), "e2")).unwrap();
    // The old version stays served while the new one fills.
    assert_eq!(vol.object("t").unwrap().toi, old.toi);
    push_rest(&mut vol, &mut f, &new_bytes, &[4000], 1);
    let new = f.finish(&mut vol).unwrap();
    assert_eq!(vol.object("t").unwrap().toi, new.toi);
    assert!(!vol.segment_path(0, old.toi).exists());
    assert_eq!(read_all(&vol, "t"), new_bytes);
}

#[test]
fn an_overlong_etag_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut vol = new_volume(dir.path());
    let long = "x".repeat(crate::fill::MAX_ETAG_LEN + 1);
    let err = Fill::begin_or_resume(&mut vol, &spec("t", 100, &long)).unwrap_err();
    assert!(matches!(err, StoreError::BadParams(_)), "{err}");
    assert!(vol.filling("t").unwrap().is_none());
}

#[test]
fn a_degraded_fill_resumes_and_writes_what_a_degraded_ingest_writes() {
    let _fork = no_fork();
    let dir = tempfile::tempdir().unwrap();
    let mut vol = new_volume(dir.path());
    let failed = crate::MemberState::Failed {
        reason: "test".into(),
    };
    vol.set_member_state(2, &failed).unwrap();
    let bytes = data(20 * 64 * 8 + 99, 18);
    let a = ingest(&mut vol, "a", &bytes);
    let mut f = Fill::begin_or_resume(&mut vol, &spec("b", bytes.len(), "e")).unwrap();
    f.push(&mut vol, &bytes[..3000]).unwrap();
    f.commit(&mut vol).unwrap();
    assert!(!vol.segment_path(2, f.toi()).exists());
    let got = read_committed(&vol, "b");
    assert_eq!(got, bytes[..got.len()]);
    drop(f);
    // The resume frames member 2's straddling block anew from the code.
    let mut f = Fill::begin_or_resume(&mut vol, &spec("b", bytes.len(), "e")).unwrap();
    assert_eq!(f.front_codewords(), 2);
    push_rest(&mut vol, &mut f, &bytes, &[1111], 2);
    let b = f.finish(&mut vol).unwrap();
    assert_eq!(read_all(&vol, "b"), bytes);
    let layout = vol.layout(&a).unwrap();
    let shape = |rec: &ObjectRecord| -> Vec<Vec<(u64, u32)>> {
        let rows = vol.blocks(rec, &layout).unwrap();
        rows.iter()
            .map(|m| m.iter().map(|r| (r.block, r.packets)).collect())
            .collect()
    };
    assert_eq!(shape(&a), shape(&b));
    // Member 2's rows are the CRCs of the blocks a rebuild will write.
    let per = u64::from(params().packets_per_block());
    for row in &vol.blocks(&b, &layout).unwrap()[2] {
        let next = ((row.block + 1) * per).min(layout.member_packets(2));
        let block = crate::fill::reframe_block(&vol, &b, &layout, 2, (b.codewords, next)).unwrap();
        assert_eq!(
            crc32c::crc32c(&block),
            row.crc32c,
            "member 2 block {}",
            row.block
        );
    }
    assert_eq!(
        vol.catalog().missing_segments(2).unwrap(),
        vec![a.toi, b.toi]
    );
    // A rebuild writes member 2's segment: then every packet is the ingest's.
    crate::rebuild_member(&mut vol, 2, &mut crate::pace::Unpaced, &mut |_| {}).unwrap();
    assert_eq!(vol.member_states().unwrap()[2], crate::MemberState::Ok);
    assert_eq!(packets(&vol, &a), packets(&vol, &b));
    let report = crate::check(&mut vol, crate::CheckOptions::default(), &mut |_| {}).unwrap();
    assert!(!report.damaged(), "{report:?}");
    // Two members out: refused.
    vol.set_member_state(2, &failed).unwrap();
    vol.set_member_state(3, &failed).unwrap();
    let err = Fill::begin_or_resume(&mut vol, &spec("c", 100, "e")).unwrap_err();
    assert!(matches!(err, StoreError::BadParams(_)), "{err}");
}

#[test]
fn a_resume_whose_blocks_do_not_verify_starts_anew() {
    let _fork = no_fork();
    let dir = tempfile::tempdir().unwrap();
    let mut vol = new_volume(dir.path());
    let bytes = data(20 * 64 * 3, 9);
    let mut f = Fill::begin_or_resume(&mut vol, &spec("t", bytes.len(), "e")).unwrap();
    f.push(&mut vol, &bytes[..1280]).unwrap();
    f.commit(&mut vol).unwrap();
    let toi = f.toi();
    drop(f);
    // Damage the straddling block of member 0 (its first packet).
    let path = vol.segment_path(0, toi);
    let mut file = std::fs::read(&path).unwrap();
    file[40] ^= 0xff;
    std::fs::write(&path, file).unwrap();
    let mut f = Fill::begin_or_resume(&mut vol, &spec("t", bytes.len(), "e")).unwrap();
    assert_ne!(f.toi(), toi);
    assert_eq!(f.next_byte_offset(), 0);
    push_rest(&mut vol, &mut f, &bytes, &[999], 1);
    f.finish(&mut vol).unwrap();
    assert_eq!(read_all(&vol, "t"), bytes);
}

#[test]
fn a_fill_can_be_sent_to_another_thread() {
    fn send<T: Send>() {}
    send::<Fill>();
}

/// The crash points a fill passes, with the hit that aborts (`NAME:N`), and the least
/// front the fill must keep (the commits before the crash).
const CRASHES: [(&str, u32); 9] = [
    ("fill-after-begin:1", 0),
    ("fill-push:1", 0),
    ("fill-push:4", 1),
    ("fill-commit-member:3", 0),
    ("fill-commit-member:9", 1),
    ("fill-before-commit:2", 1),
    ("fill-after-commit:2", 2),
    ("fill-before-finish:1", 0),
    ("fill-after-finish:1", 0),
];

const CHILD_ENV: &str = "ISNODE_FILL_CRASH_CHILD";

fn crash_bytes() -> Vec<u8> {
    data(20 * 64 * 6 + 555, 10)
}

/// Run by [`a_fill_resumes_after_a_crash_at_every_point`] in a child process that aborts at
/// a crash point (like `kill -9`): fills `t` in chunks of 1000 bytes, committing after each.
#[test]
#[ignore = "run as a child process by a_fill_resumes_after_a_crash_at_every_point"]
fn crash_child() {
    let root = std::env::var_os(CHILD_ENV).expect("the volume path in ISNODE_FILL_CRASH_CHILD");
    let mut vol = Volume::open(Path::new(&root)).unwrap();
    let bytes = crash_bytes();
    let mut f = Fill::begin_or_resume(&mut vol, &spec("t", bytes.len(), "e")).unwrap();
    push_rest(&mut vol, &mut f, &bytes, &[1000], 1);
    f.finish(&mut vol).unwrap();
}

#[test]
#[cfg_attr(
    not(debug_assertions),
    ignore = "crash points exist only in debug builds"
)]
fn a_fill_resumes_after_a_crash_at_every_point() {
    let exe = std::env::current_exe().unwrap();
    let bytes = crash_bytes();
    for (point, least_front) in CRASHES {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("vol");
        let mut vol = Volume::create(&root, params(), None).unwrap();
        let a = ingest(&mut vol, "a", &bytes);
        drop(vol);
        let forking = FORKING.write().unwrap_or_else(|e| e.into_inner());
        let out = std::process::Command::new(&exe)
            .args([
                "--exact",
                "fill_tests::crash_child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, &root)
            .env("ISNODE_CRASH_POINT", point)
            .output()
            .unwrap();
        drop(forking);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("crash point") && !out.status.success(),
            "{point}: the child did not crash there: {}\n{stderr}",
            out.status
        );
        let mut vol = Volume::open(&root).unwrap();
        if point.starts_with("fill-after-finish") {
            let b = vol.object("t").unwrap();
            assert!(vol.filling("t").unwrap().is_none());
            assert_same_as_ingest(&vol, &a, &b, &bytes);
            continue;
        }
        let fo = vol.filling("t").unwrap().expect(point);
        assert!(
            fo.front_codewords >= least_front,
            "{point}: front {}",
            fo.front_codewords
        );
        let got = read_committed(&vol, "t");
        assert_eq!(got, bytes[..got.len()], "{point}");
        let mut f = Fill::begin_or_resume(&mut vol, &spec("t", bytes.len(), "e")).unwrap();
        assert_eq!(f.toi(), fo.record.toi, "{point}: the fill restarted");
        assert_eq!(f.front_codewords(), fo.front_codewords, "{point}");
        push_rest(&mut vol, &mut f, &bytes, &[1000], 1);
        let b = f.finish(&mut vol).unwrap();
        assert_same_as_ingest(&vol, &a, &b, &bytes);
    }
}

#[test]
fn an_older_catalog_gains_the_filling_state_and_keeps_its_tois() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("vol");
    let mut vol = Volume::create(&root, params(), None).unwrap();
    let kept = ingest(&mut vol, "kept", &data(3000, 11));
    let gone = ingest(&mut vol, "gone", &data(100, 12));
    vol.delete("gone").unwrap();
    drop(vol);
    // Make it an older catalog: the objects table of before, no fill tables.
    {
        let conn = rusqlite::Connection::open(root.join("catalog.sqlite")).unwrap();
        conn.execute_batch(
            "PRAGMA foreign_keys = OFF;
             BEGIN;
             DROP TABLE fills; DROP TABLE origin_objects; DROP TABLE pins;
             DROP INDEX objects_filling_name;
             CREATE TABLE old_objects AS SELECT * FROM objects;
             DROP TABLE objects;",
        )
        .unwrap();
        let old_table = "CREATE TABLE objects (
            toi INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL,
            state TEXT NOT NULL CHECK (state IN ('writing', 'complete')),
            size_bytes INTEGER NOT NULL, bitrate_bps INTEGER NOT NULL, duration_s REAL NOT NULL,
            content_type TEXT NOT NULL, symbol_len INTEGER NOT NULL, source_symbols INTEGER NOT NULL,
            repair_symbols INTEGER NOT NULL, codewords INTEGER NOT NULL, content_crc32c INTEGER NOT NULL,
            created_unix INTEGER NOT NULL, replaces INTEGER);
            INSERT INTO objects SELECT * FROM old_objects; DROP TABLE old_objects;
            CREATE UNIQUE INDEX objects_complete_name ON objects(name) WHERE state = 'complete';";
        conn.execute_batch(old_table).unwrap();
        conn.execute(
            "UPDATE sqlite_sequence SET seq = ?1 WHERE name = 'objects'",
            [gone.toi],
        )
        .unwrap();
        conn.execute_batch("COMMIT;").unwrap();
    }
    let mut vol = Volume::open(&root).unwrap();
    assert_eq!(vol.object("kept").unwrap(), kept);
    assert_eq!(read_all(&vol, "kept"), data(3000, 11));
    let f = Fill::begin_or_resume(&mut vol, &spec("t", 10, "e")).unwrap();
    assert!(f.toi() > gone.toi, "TOI {} reused", f.toi());
    f.abandon(&mut vol).unwrap();
    // Foreign keys still cascade from the rebuilt table.
    vol.delete("kept").unwrap();
    assert!(vol
        .catalog()
        .all_block_rows(kept.toi, 100)
        .unwrap()
        .is_empty());
    drop(vol);
    // A second open finds nothing to migrate.
    Volume::open(&root).unwrap();
}

#[test]
fn eviction_takes_the_least_recently_used_unpinned_origin_objects() {
    let _fork = no_fork();
    let dir = tempfile::tempdir().unwrap();
    let mut vol = new_volume(dir.path());
    ingest(&mut vol, "local", &data(3000, 13));
    for name in ["x", "y", "z"] {
        fill(&mut vol, name, &data(3000, 14), &[3000], 1);
    }
    let stored = crate::spool::stored_bytes(params(), 3000).unwrap();
    // Same second: ties go by TOI.
    let names =
        |c: Vec<crate::EvictionCandidate>| c.into_iter().map(|c| c.name).collect::<Vec<_>>();
    assert_eq!(
        names(vol.eviction_candidates(u64::MAX).unwrap()),
        ["x", "y", "z"]
    );
    assert_eq!(names(vol.eviction_candidates(1).unwrap()), ["x"]);
    assert_eq!(
        names(vol.eviction_candidates(stored + 1).unwrap()),
        ["x", "y"]
    );
    assert_eq!(vol.eviction_candidates(0).unwrap(), vec![]);
    // Use x later than the others.
    vol.catalog_mut()
        .touch("x", crate::fill::now_unix() + 100)
        .unwrap();
    assert_eq!(
        names(vol.eviction_candidates(u64::MAX).unwrap()),
        ["y", "z", "x"]
    );
    assert!(vol.touch("z").unwrap());
    assert!(!vol.touch("local").unwrap());
    vol.pin("y").unwrap();
    vol.pin("y").unwrap();
    assert_eq!(vol.pins().unwrap(), ["y"]);
    assert_eq!(
        names(vol.eviction_candidates(u64::MAX).unwrap()),
        ["z", "x"]
    );
    assert!(vol.unpin("y").unwrap());
    assert!(!vol.unpin("y").unwrap());
    // A filling object is never a candidate.
    let f = Fill::begin_or_resume(&mut vol, &spec("w", 100, "e")).unwrap();
    assert!(!names(vol.eviction_candidates(u64::MAX).unwrap()).contains(&"w".to_string()));
    drop(f);
    // The origin check.
    let before = vol.origin("x").unwrap().unwrap();
    assert_eq!(before.etag, "e1");
    assert!(vol
        .set_origin_checked("x", before.checked_unix + 50)
        .unwrap());
    assert_eq!(
        vol.origin("x").unwrap().unwrap().checked_unix,
        before.checked_unix + 50
    );
    assert!(!vol.set_origin_checked("local", 1).unwrap());
    assert!(vol.origin("local").unwrap().is_none());
    assert_eq!(
        vol.eviction_candidates(u64::MAX).unwrap()[0].stored_bytes,
        stored
    );
}

#[test]
fn check_verifies_the_committed_blocks_of_a_filling_object() {
    let _fork = no_fork();
    let dir = tempfile::tempdir().unwrap();
    let mut vol = new_volume(dir.path());
    let bytes = data(20 * 64 * 4, 15);
    let mut f = Fill::begin_or_resume(&mut vol, &spec("t", bytes.len(), "e")).unwrap();
    f.push(&mut vol, &bytes[..3000]).unwrap();
    f.commit(&mut vol).unwrap();
    let report = crate::check(&mut vol, crate::CheckOptions::default(), &mut |_| {}).unwrap();
    assert!(!report.damaged(), "{report:?}");
    assert_eq!(report.filling.len(), 1);
    assert_eq!(report.filling[0].front_codewords, 2);
    assert_eq!(report.filling[0].codewords, 4);
    // One block per member holds committed packets (8 of 44).
    assert_eq!(report.filling[0].blocks, 6);
    // Damage a committed packet of member 1.
    let path = vol.segment_path(1, f.toi());
    let mut file = std::fs::read(&path).unwrap();
    file[100] ^= 1;
    std::fs::write(&path, file).unwrap();
    let report = crate::check(&mut vol, crate::CheckOptions::default(), &mut |_| {}).unwrap();
    assert!(report.damaged());
    assert_eq!(report.damage.len(), 1);
    assert_eq!(
        (report.damage[0].member, report.damage[0].bad_blocks),
        (1, 1)
    );
    drop(f);
}

#[test]
fn recovery_removes_a_dead_ingest_and_keeps_a_filling_object() {
    let _fork = no_fork();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("vol");
    let mut vol = Volume::create(&root, params(), None).unwrap();
    let bytes = data(5000, 16);
    let mut f = Fill::begin_or_resume(&mut vol, &spec("t", bytes.len(), "e")).unwrap();
    f.push(&mut vol, &bytes[..2600]).unwrap();
    f.commit(&mut vol).unwrap();
    let toi = f.toi();
    drop(f);
    // A dead ingest: a `writing` row and a file in tmp/, no lock held.
    let dead = ObjectRecord {
        state: ObjectState::Writing,
        toi: 0,
        name: "dead".into(),
        ..vol.filling("t").unwrap().unwrap().record
    };
    let dead_toi = vol.catalog_mut().begin_object(&dead).unwrap();
    let tmp = vol.members()[0].join("tmp").join(format!("{dead_toi}.seg"));
    std::fs::write(&tmp, b"x").unwrap();
    drop(vol);
    let vol = Volume::open(&root).unwrap();
    assert!(!tmp.exists());
    assert!(vol
        .catalog()
        .entries(ObjectState::Writing)
        .unwrap()
        .is_empty());
    let fo = vol.filling("t").unwrap().unwrap();
    assert_eq!((fo.record.toi, fo.front_codewords), (toi, 2));
    for m in 0..params().members {
        assert!(vol.segment_path(m, toi).is_file());
    }
    // The volume's bytes count the filling object at its full size.
    let full = crate::spool::stored_bytes(params(), bytes.len() as u64).unwrap();
    assert_eq!(crate::spool::volume_bytes(&vol).unwrap(), full);
    let got = read_committed(&vol, "t");
    assert_eq!(got, bytes[..got.len()]);
}

/// A reader in another thread (its own volume handle) reads the blocks holding committed
/// packets while the fill rewrites the straddling ones: every block read after its row
/// verifies against that row, and the committed bytes are the object's.
#[test]
fn blocks_read_during_rewrites_verify_against_the_rows_read_before() {
    use std::os::unix::fs::FileExt;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("vol");
    let mut vol = Volume::create(&root, params(), None).unwrap();
    let bytes = data(20 * 64 * 40, 17);
    let mut f = Fill::begin_or_resume(&mut vol, &spec("t", bytes.len(), "e")).unwrap();
    f.push(&mut vol, &bytes[..1280]).unwrap();
    f.commit(&mut vol).unwrap();
    let toi = f.toi();
    let done = Arc::new(AtomicBool::new(false));
    let reader_done = done.clone();
    let reader_root = root.clone();
    let reader = std::thread::spawn(move || {
        let vol = Volume::open(&reader_root).unwrap();
        let p = *vol.params();
        let mut verified = 0u64;
        for _ in 0..200_000 {
            let finished = reader_done.load(Ordering::SeqCst);
            let Some(fo) = vol.filling("t").unwrap() else {
                break;
            };
            for (m, rows) in vol.fill_blocks(&fo).unwrap().iter().enumerate() {
                let file = std::fs::File::open(vol.segment_path(m as u32, toi)).unwrap();
                let row = rows.last().unwrap();
                let mut block = vec![0u8; p.block_len as usize];
                file.read_exact_at(&mut block, u64::from(p.block_len) * row.block)
                    .unwrap();
                verify_fill_block(&p, row, &block).unwrap();
                verified += 1;
            }
            if finished {
                break;
            }
        }
        verified
    });
    let mut at = 1280;
    while at < bytes.len() {
        let end = (at + 300).min(bytes.len());
        f.push(&mut vol, &bytes[at..end]).unwrap();
        f.commit(&mut vol).unwrap();
        at = end;
    }
    done.store(true, Ordering::SeqCst);
    let verified = reader.join().unwrap();
    assert!(verified > 0);
    let got = read_committed(&vol, "t");
    assert_eq!(got, bytes[..got.len()]);
    f.finish(&mut vol).unwrap();
    assert_eq!(read_all(&vol, "t"), bytes);
}
