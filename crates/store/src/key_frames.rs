//! The key frames of MPEG-TS renditions (issue 31; docs/format.md, "Rendition tables"):
//! each key frame's byte extent and time, and the PAT + PMT's byte range, written with the
//! time index at ingest (from [`isnode_media::TsKeyFrames`]) so that the server can answer
//! an MPEG-TS rendition's I-frame playlist from the catalog alone. Created when missing
//! (with the other rendition tables): an object ingested before has none and no I-frame
//! playlist until ingested again.

use rusqlite::{params, Connection, OptionalExtension, Transaction};

use crate::catalog::db;
use crate::media_records::{KeyFrameRecord, KeyFramesRecord};
use crate::StoreError;

/// Most key frames kept per object (as the time index's points).
pub const MAX_KEY_FRAME_ROWS: usize = isnode_media::index::MAX_POINTS;

/// The tables (part of the rendition schema).
pub(crate) const KEY_FRAME_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS media_ts_init (
    toi          INTEGER PRIMARY KEY REFERENCES objects(toi) ON DELETE CASCADE,
    offset_bytes INTEGER,
    length_bytes INTEGER
);
CREATE TABLE IF NOT EXISTS media_key_frames (
    toi          INTEGER NOT NULL REFERENCES objects(toi) ON DELETE CASCADE,
    seq          INTEGER NOT NULL,
    time_s       REAL NOT NULL,
    offset_bytes INTEGER NOT NULL,
    length_bytes INTEGER NOT NULL,
    PRIMARY KEY (toi, seq)
) WITHOUT ROWID;
";

/// The catalog's form of the key frames an MPEG-TS indexer found.
pub fn key_frames_record(k: &isnode_media::TsKeyFrames) -> KeyFramesRecord {
    KeyFramesRecord {
        init: k.init.map(|r| (r.offset, r.length)),
        frames: k
            .frames
            .iter()
            .take(MAX_KEY_FRAME_ROWS)
            .map(|f| KeyFrameRecord {
                time_s: f.time_s,
                offset_bytes: f.bytes.offset,
                length_bytes: f.bytes.length,
            })
            .collect(),
    }
}

/// Writes object `toi`'s key frames in `tx`, replacing any (`None`: removes them).
pub(crate) fn put(
    tx: &Transaction<'_>,
    toi: u32,
    k: Option<&KeyFramesRecord>,
) -> Result<(), StoreError> {
    let ctx = "recording the key frames";
    for table in ["media_ts_init", "media_key_frames"] {
        tx.execute(&format!("DELETE FROM {table} WHERE toi = ?1"), [toi])
            .map_err(db(ctx))?;
    }
    let Some(k) = k else { return Ok(()) };
    tx.execute(
        "INSERT INTO media_ts_init (toi, offset_bytes, length_bytes) VALUES (?1, ?2, ?3)",
        params![toi, k.init.map(|r| r.0 as i64), k.init.map(|r| r.1 as i64)],
    )
    .map_err(db(ctx))?;
    let mut st = tx
        .prepare(
            "INSERT INTO media_key_frames (toi, seq, time_s, offset_bytes, length_bytes)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )
        .map_err(db(ctx))?;
    for (seq, f) in k.frames.iter().take(MAX_KEY_FRAME_ROWS).enumerate() {
        st.execute(params![
            toi,
            seq as i64,
            f.time_s,
            f.offset_bytes as i64,
            f.length_bytes as i64
        ])
        .map_err(db(ctx))?;
    }
    Ok(())
}

/// A stored key frame row: `seq`, `time_s`, `offset_bytes`, `length_bytes`.
type Row = (i64, f64, i64, i64);

/// Reads object `toi`'s key frames (at most [`MAX_KEY_FRAME_ROWS`] + 1 rows), validated
/// against its `size_bytes` ([`StoreError::Corrupt`] otherwise); `None` when it has none.
pub(crate) fn read(
    conn: &Connection,
    toi: u32,
    size_bytes: u64,
) -> Result<Option<KeyFramesRecord>, StoreError> {
    let ctx = "reading the key frames";
    let init: Option<(Option<i64>, Option<i64>)> = conn
        .query_row(
            "SELECT offset_bytes, length_bytes FROM media_ts_init WHERE toi = ?1",
            [toi],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .map_err(db(ctx))?;
    let Some(init) = init else { return Ok(None) };
    let mut q = conn
        .prepare(
            "SELECT seq, time_s, offset_bytes, length_bytes FROM media_key_frames
             WHERE toi = ?1 ORDER BY seq LIMIT ?2",
        )
        .map_err(db(ctx))?;
    let limit = MAX_KEY_FRAME_ROWS as i64 + 1;
    let rows = q
        .query_map(params![toi, limit], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .map_err(db(ctx))?
        .collect::<Result<Vec<Row>, _>>()
        .map_err(db(ctx))?;
    validate(init, &rows, size_bytes)
        .map(Some)
        .map_err(|p| StoreError::Corrupt(format!("object TOI {toi}: key frames: {p}")))
}

/// An `(offset, length)` inside an object of `size_bytes`, non-empty.
fn range(offset: i64, length: i64, size_bytes: u64) -> Option<(u64, u64)> {
    let (o, l) = (u64::try_from(offset).ok()?, u64::try_from(length).ok()?);
    (l > 0 && o.checked_add(l)? <= size_bytes).then_some((o, l))
}

/// Validates stored key frames: the init range (both or neither) inside the object; at
/// most [`MAX_KEY_FRAME_ROWS`] frames, `seq` 0, 1, ..., each inside the object, times
/// finite, non-negative and increasing, extents in order without overlap.
fn validate(
    init: (Option<i64>, Option<i64>),
    rows: &[Row],
    size_bytes: u64,
) -> Result<KeyFramesRecord, String> {
    let init = match init {
        (Some(o), Some(l)) => Some(range(o, l, size_bytes).ok_or("the init range is outside")?),
        (None, None) => None,
        _ => return Err("the init range is half stored".into()),
    };
    if rows.len() > MAX_KEY_FRAME_ROWS {
        return Err(format!("more than {MAX_KEY_FRAME_ROWS} key frames"));
    }
    let mut frames: Vec<KeyFrameRecord> = Vec::with_capacity(rows.len());
    let (mut next, mut last_t) = (0u64, -1.0f64);
    for (i, &(seq, time_s, off, len)) in rows.iter().enumerate() {
        let Some((offset_bytes, length_bytes)) = range(off, len, size_bytes) else {
            return Err(format!(
                "key frame {i} (bytes {off}+{len}) is outside the object"
            ));
        };
        if seq != i as i64 || offset_bytes < next || !time_s.is_finite() || time_s <= last_t {
            return Err(format!(
                "key frame {i} (seq {seq}, {time_s} s, byte {off}) is out of order"
            ));
        }
        next = offset_bytes + length_bytes;
        last_t = time_s;
        frames.push(KeyFrameRecord {
            time_s,
            offset_bytes,
            length_bytes,
        });
    }
    Ok(KeyFramesRecord { init, frames })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_takes_ordered_frames_inside_the_object_and_refuses_others() {
        let ok = validate(
            (Some(188), Some(376)),
            &[(0, 0.0, 564, 4000), (1, 2.0, 9000, 3000)],
            20_000,
        )
        .expect("valid");
        assert_eq!(ok.init, Some((188, 376)));
        assert_eq!(ok.frames.len(), 2);
        assert_eq!(ok.frames[1].offset_bytes, 9000);
        for (init, rows) in [
            ((Some(0), None), vec![]),
            ((Some(19_900), Some(376)), vec![]),
            ((None, None), vec![(1, 0.0, 0, 10)]),
            ((None, None), vec![(0, 0.0, 0, 100), (1, 1.0, 50, 10)]),
            ((None, None), vec![(0, 2.0, 0, 10), (1, 1.0, 50, 10)]),
            ((None, None), vec![(0, 0.0, 19_999, 2)]),
            ((None, None), vec![(0, 0.0, 0, 0)]),
            ((None, None), vec![(0, f64::NAN, 0, 10)]),
        ] {
            assert!(validate(init, &rows, 20_000).is_err(), "{init:?} {rows:?}");
        }
    }
}
