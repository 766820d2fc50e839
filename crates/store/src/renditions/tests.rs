//! The rendition tables: descriptor and fragment rows written at ingest and read back
//! validated, titles recorded, listed and deleted with their renditions.

use super::*;
use crate::records::MediaIndexRecord;
use crate::{IngestOptions, Volume, VolumeParams};

fn volume() -> (tempfile::TempDir, Volume) {
    let dir = tempfile::tempdir().unwrap();
    let params = VolumeParams {
        symbol_len: 1024,
        source_symbols: 20,
        repair_symbols: 4,
        members: 6,
        block_len: 1 << 16,
    };
    let vol = Volume::create(&dir.path().join("vol"), params, None).unwrap();
    (dir, vol)
}

fn ingest_ts(vol: &mut Volume, name: &str, bitrate_bps: u64) -> crate::ObjectRecord {
    let cfg = isnode_media::TsGenConfig {
        bitrate_bps,
        duration_s: 2.0,
        seed: 7,
    };
    let mut data = Vec::new();
    isnode_media::generate_ts(&cfg, &mut data).unwrap();
    let opts = IngestOptions {
        name: name.into(),
        bitrate_bps,
        content_type: "video/mp2t".into(),
        replace: false,
    };
    crate::ingest(
        vol,
        &opts,
        &mut data.as_slice(),
        data.len() as u64,
        &mut |_| {},
    )
    .unwrap()
}

fn fragments(size: u64) -> FragmentsRecord {
    FragmentsRecord {
        track_id: 1,
        timescale: 12_800,
        init: (0, 700),
        index_range: None,
        complete: true,
        fragments: (0..3u64)
            .map(|i| FragmentRecord {
                offset_bytes: 700 + i * 1000,
                length_bytes: if i == 2 { size - 2700 } else { 1000 },
                decode_start: i * 25_600,
                duration: 25_600,
                sync: true,
                key_length_bytes: (i != 1).then_some(400),
            })
            .collect(),
    }
}

#[test]
fn descriptor_and_fragments_round_trip_and_bad_rows_are_refused() {
    let (_d, mut vol) = volume();
    let rec = ingest_ts(&mut vol, "a", 1_000_000);
    // Ingest recorded a descriptor for the TS (no fragments).
    let detail = vol.catalog().media_detail(rec.toi, rec.size_bytes).unwrap();
    assert!(detail.descriptor.is_some());
    assert_eq!(detail.fragments, None);
    assert!(detail.key_frames.is_some(), "a TS's key frames are kept");
    let want = MediaDetail {
        descriptor: Some(DescriptorRecord {
            codecs: "avc1.64001F,mp4a.40.2".into(),
            width: Some(640),
            height: Some(360),
            frame_rate: Some((25, 1)),
        }),
        fragments: Some(fragments(rec.size_bytes)),
        key_frames: Some(KeyFramesRecord {
            init: Some((188, 376)),
            frames: vec![KeyFrameRecord {
                time_s: 0.5,
                offset_bytes: 700,
                length_bytes: 300,
            }],
        }),
    };
    let ix = MediaIndexRecord {
        container: "mp4".into(),
        moov_at_front: Some(true),
        points: vec![(0.0, 700)],
        detail: Some(want.clone()),
    };
    vol.catalog_mut().set_media_index(rec.toi, &ix).unwrap();
    let got = vol.catalog().media_detail(rec.toi, rec.size_bytes).unwrap();
    assert_eq!(got, want);
    // A fragment past the object's end, or overlapping the previous one, is refused.
    assert!(vol.catalog().media_detail(rec.toi, 2000).is_err());
    vol.catalog()
        .conn
        .execute(
            "UPDATE media_fragments SET offset_bytes = 100 WHERE toi = ?1 AND seq = 1",
            [rec.toi],
        )
        .unwrap();
    let e = vol
        .catalog()
        .media_detail(rec.toi, rec.size_bytes)
        .unwrap_err();
    assert!(e.to_string().contains("fragment 1"), "{e}");
}

#[test]
fn a_title_groups_renditions_and_goes_with_them() {
    let (_d, mut vol) = volume();
    let names: Vec<String> = (0..2).map(|i| rendition_name("movie", i)).collect();
    assert_eq!(names, ["movie@0", "movie@1"]);
    let recs: Vec<_> = names
        .iter()
        .zip([500_000, 1_000_000])
        .map(|(n, b)| ingest_ts(&mut vol, n, b))
        .collect();
    let title = TitleRecord {
        name: "movie".into(),
        created_unix: 1,
        renditions: recs
            .iter()
            .map(|r| TitleRendition {
                object: r.name.clone(),
                bitrate_bps: r.bitrate_bps,
                width: Some(640),
                height: Some(360),
                codecs: "avc1.64001F".into(),
            })
            .collect(),
    };
    vol.catalog_mut().put_title(&title, false).unwrap();
    assert!(matches!(
        vol.catalog_mut().put_title(&title, false),
        Err(StoreError::NameExists(_))
    ));
    vol.catalog_mut().put_title(&title, true).unwrap();
    assert_eq!(vol.catalog().title("movie").unwrap(), Some(title.clone()));
    assert_eq!(vol.catalog().titles().unwrap(), vec![title.clone()]);
    // A title may not take an object's name.
    let mut clash = title.clone();
    clash.name = "movie@0".into();
    assert!(matches!(
        vol.catalog_mut().put_title(&clash, true),
        Err(StoreError::NameExists(_))
    ));
    // An object belongs to one title: another title naming it is refused, whole.
    let mut other = title.clone();
    other.name = "trailer".into();
    assert!(matches!(
        vol.catalog_mut().put_title(&other, false),
        Err(StoreError::InOtherTitle { ref object, ref title }) if object == "movie@0" && title == "movie"
    ));
    assert_eq!(vol.catalog().title("trailer").unwrap(), None);
    assert_eq!(vol.delete_title("movie").unwrap(), title);
    assert_eq!(vol.catalog().title("movie").unwrap(), None);
    assert!(vol.entries().unwrap().is_empty());
    assert!(matches!(
        vol.delete_title("movie"),
        Err(StoreError::NotFound(_))
    ));
}

#[test]
fn an_older_catalog_gains_the_key_length_column_and_its_rows_have_none() {
    let (d, mut vol) = volume();
    let rec = ingest_ts(&mut vol, "a", 1_000_000);
    let detail = MediaDetail {
        descriptor: None,
        fragments: Some(fragments(rec.size_bytes)),
        key_frames: None,
    };
    let ix = MediaIndexRecord {
        container: "mp4".into(),
        moov_at_front: Some(true),
        points: vec![(0.0, 700)],
        detail: Some(detail),
    };
    vol.catalog_mut().set_media_index(rec.toi, &ix).unwrap();
    // The table as it was before the column.
    vol.catalog()
        .conn
        .execute_batch("ALTER TABLE media_fragments DROP COLUMN key_length")
        .unwrap();
    drop(vol);
    let vol = Volume::open(&d.path().join("vol")).unwrap();
    let got = vol.catalog().media_detail(rec.toi, rec.size_bytes).unwrap();
    let f = got.fragments.expect("the fragment rows");
    assert_eq!(f.fragments.len(), 3);
    assert!(f.fragments.iter().all(|g| g.key_length_bytes.is_none()));
}
