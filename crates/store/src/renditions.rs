//! The rendition tables (issue 31; docs/format.md, "Rendition tables"): each object's
//! descriptor and fragment index, written with its time index at ingest (and at the end of
//! a fill), and the titles that group renditions. Added after format version 2 shipped like
//! the media index: created when missing, so an older catalog opens and its objects simply
//! have no descriptor (their playlists say less) and no titles.

use rusqlite::{params, Connection, OptionalExtension, Transaction};

use crate::catalog::{db, Catalog};
pub use crate::media_records::{
    rendition_name, DescriptorRecord, FragmentRecord, FragmentsRecord, KeyFrameRecord,
    KeyFramesRecord, MediaDetail, TitleRecord, TitleRendition, MAX_CODECS_LEN, MAX_FRAGMENT_ROWS,
    MAX_TITLE_RENDITIONS,
};
use crate::StoreError;

/// The tables, created when missing at every open.
pub(crate) const RENDITION_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS media_descriptor (
    toi            INTEGER PRIMARY KEY REFERENCES objects(toi) ON DELETE CASCADE,
    codecs         TEXT NOT NULL,
    width          INTEGER,
    height         INTEGER,
    frame_rate_num INTEGER,
    frame_rate_den INTEGER
);
CREATE TABLE IF NOT EXISTS media_fragments_meta (
    toi          INTEGER PRIMARY KEY REFERENCES objects(toi) ON DELETE CASCADE,
    track_id     INTEGER NOT NULL,
    timescale    INTEGER NOT NULL,
    init_length  INTEGER NOT NULL,
    index_offset INTEGER,
    index_length INTEGER,
    complete     INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS media_fragments (
    toi          INTEGER NOT NULL REFERENCES objects(toi) ON DELETE CASCADE,
    seq          INTEGER NOT NULL,
    offset_bytes INTEGER NOT NULL,
    length_bytes INTEGER NOT NULL,
    decode_start INTEGER NOT NULL,
    duration     INTEGER NOT NULL,
    sync         INTEGER NOT NULL,
    key_length   INTEGER,
    PRIMARY KEY (toi, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS titles (
    name         TEXT PRIMARY KEY,
    created_unix INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS title_renditions (
    title       TEXT NOT NULL REFERENCES titles(name) ON DELETE CASCADE,
    seq         INTEGER NOT NULL,
    object      TEXT NOT NULL,
    bitrate_bps INTEGER NOT NULL,
    width       INTEGER,
    height      INTEGER,
    codecs      TEXT NOT NULL,
    PRIMARY KEY (title, seq)
) WITHOUT ROWID;
";

/// Adds `media_fragments.key_length` to a catalog whose table was made before it (its
/// rows then have none: no I-frame playlist for those objects until ingested again).
pub(crate) fn add_key_length_column(conn: &Connection) -> Result<(), StoreError> {
    let ctx = "adding media_fragments.key_length";
    let has: bool = conn
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM pragma_table_info('media_fragments') WHERE name = 'key_length')",
            [],
            |r| r.get(0),
        )
        .map_err(db(ctx))?;
    if !has {
        conn.execute_batch("ALTER TABLE media_fragments ADD COLUMN key_length INTEGER")
            .map_err(db(ctx))?;
    }
    Ok(())
}

/// The catalog's form of what [`isnode_media::Indexer::finish`] found of a rendition.
pub fn media_detail(ix: &isnode_media::MediaIndex) -> MediaDetail {
    let descriptor = ix.rendition.as_ref().map(|r| {
        let v = r.video.as_ref();
        let mut codecs = r.codecs();
        if codecs.len() > MAX_CODECS_LEN {
            codecs.clear();
        }
        DescriptorRecord {
            codecs,
            width: v.and_then(|v| v.width),
            height: v.and_then(|v| v.height),
            frame_rate: v.and_then(|v| v.frame_rate).map(|f| (f.num, f.den)),
        }
    });
    let fragments = ix
        .fragments
        .as_ref()
        .filter(|f| f.timescale > 0)
        .map(|f| FragmentsRecord {
            track_id: f.track_id,
            timescale: f.timescale,
            init: (f.init.offset, f.init.length),
            index_range: f.index_range.map(|r| (r.offset, r.length)),
            complete: f.complete,
            fragments: f
                .fragments
                .iter()
                .filter(|g| g.bytes.length > 0)
                .map(|g| FragmentRecord {
                    offset_bytes: g.bytes.offset,
                    length_bytes: g.bytes.length,
                    decode_start: g.decode_start,
                    duration: g.duration,
                    sync: g.starts_with_sync,
                    key_length_bytes: g.first_sample_end.map(|e| e.saturating_sub(g.bytes.offset)),
                })
                .collect(),
        });
    MediaDetail {
        descriptor,
        fragments,
        key_frames: ix
            .ts_key_frames
            .as_ref()
            .map(crate::key_frames::key_frames_record),
    }
}

/// An integer column as stored (i64) to the type used, or a row problem.
fn as_u<T: TryFrom<i64>>(v: i64, what: &str) -> Result<T, String> {
    T::try_from(v).map_err(|_| format!("{what} {v} is out of range"))
}

/// An optional integer column.
fn opt_u<T: TryFrom<i64>>(v: Option<i64>, what: &str) -> Result<Option<T>, String> {
    v.map(|v| as_u(v, what)).transpose()
}

/// Writes object `toi`'s descriptor and fragment index in `tx` (replacing any).
pub(crate) fn put_media_detail(
    tx: &Transaction<'_>,
    toi: u32,
    detail: &MediaDetail,
) -> Result<(), StoreError> {
    let ctx = "recording the rendition descriptor";
    for table in [
        "media_descriptor",
        "media_fragments_meta",
        "media_fragments",
    ] {
        tx.execute(&format!("DELETE FROM {table} WHERE toi = ?1"), [toi])
            .map_err(db(ctx))?;
    }
    if let Some(d) = &detail.descriptor {
        tx.execute(
            "INSERT INTO media_descriptor (toi, codecs, width, height, frame_rate_num, frame_rate_den)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                toi,
                d.codecs,
                d.width,
                d.height,
                d.frame_rate.map(|f| f.0),
                d.frame_rate.map(|f| f.1)
            ],
        )
        .map_err(db(ctx))?;
    }
    crate::key_frames::put(tx, toi, detail.key_frames.as_ref())?;
    let Some(f) = &detail.fragments else {
        return Ok(());
    };
    tx.execute(
        "INSERT INTO media_fragments_meta (toi, track_id, timescale, init_length, index_offset,
         index_length, complete) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![
            toi,
            f.track_id,
            f.timescale,
            f.init.1 as i64,
            f.index_range.map(|r| r.0 as i64),
            f.index_range.map(|r| r.1 as i64),
            f.complete
        ],
    )
    .map_err(db(ctx))?;
    let mut st = tx
        .prepare(
            "INSERT INTO media_fragments (toi, seq, offset_bytes, length_bytes, decode_start,
             duration, sync, key_length) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )
        .map_err(db(ctx))?;
    for (seq, g) in f.fragments.iter().take(MAX_FRAGMENT_ROWS).enumerate() {
        st.execute(params![
            toi,
            seq as i64,
            g.offset_bytes as i64,
            g.length_bytes as i64,
            i64::try_from(g.decode_start).unwrap_or(i64::MAX),
            i64::try_from(g.duration).unwrap_or(i64::MAX),
            g.sync,
            g.key_length_bytes.map(|k| k as i64)
        ])
        .map_err(db(ctx))?;
    }
    Ok(())
}

/// Reads object `toi`'s descriptor, validated.
fn read_descriptor(conn: &Connection, toi: u32) -> Result<Option<DescriptorRecord>, StoreError> {
    type Row = (String, Option<i64>, Option<i64>, Option<i64>, Option<i64>);
    let row: Option<Row> = conn
        .query_row(
            "SELECT codecs, width, height, frame_rate_num, frame_rate_den FROM media_descriptor WHERE toi = ?1",
            [toi],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .optional()
        .map_err(db("reading the rendition descriptor"))?;
    let Some((codecs, w, h, num, den)) = row else {
        return Ok(None);
    };
    let check = || -> Result<DescriptorRecord, String> {
        if codecs.len() > MAX_CODECS_LEN || codecs.chars().any(|c| c.is_control() || c == '"') {
            return Err(format!("codecs {codecs:?} is not an RFC 6381 list"));
        }
        let rate = match (
            opt_u::<u32>(num, "frame_rate_num")?,
            opt_u::<u32>(den, "frame_rate_den")?,
        ) {
            (Some(n), Some(d)) if n > 0 && d > 0 => Some((n, d)),
            (None, None) => None,
            _ => return Err("the frame rate is not a positive fraction".into()),
        };
        Ok(DescriptorRecord {
            codecs: codecs.clone(),
            width: opt_u(w, "width")?,
            height: opt_u(h, "height")?,
            frame_rate: rate,
        })
    };
    check()
        .map(Some)
        .map_err(|p| StoreError::Corrupt(format!("object TOI {toi}: descriptor: {p}")))
}

/// The `media_fragments_meta` row of `toi`.
type MetaRow = (i64, i64, i64, Option<i64>, Option<i64>, bool);

/// Reads object `toi`'s fragment index (at most [`MAX_FRAGMENT_ROWS`] + 1 rows), validated
/// against its `size_bytes`: the init inside the object, fragments after it in increasing,
/// non-overlapping order, each inside the object.
fn read_fragments(
    conn: &Connection,
    toi: u32,
    size_bytes: u64,
) -> Result<Option<FragmentsRecord>, StoreError> {
    let ctx = "reading the fragment index";
    let meta: Option<MetaRow> = conn
        .query_row(
            "SELECT track_id, timescale, init_length, index_offset, index_length, complete
             FROM media_fragments_meta WHERE toi = ?1",
            [toi],
            |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                ))
            },
        )
        .optional()
        .map_err(db(ctx))?;
    let Some(meta) = meta else {
        return Ok(None);
    };
    let mut q = conn
        .prepare(
            "SELECT seq, offset_bytes, length_bytes, decode_start, duration, sync, key_length
             FROM media_fragments WHERE toi = ?1 ORDER BY seq LIMIT ?2",
        )
        .map_err(db(ctx))?;
    let limit = MAX_FRAGMENT_ROWS as i64 + 1;
    let rows = q
        .query_map(params![toi, limit], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                [r.get::<_, i64>(1)?, r.get(2)?, r.get(3)?, r.get(4)?],
                r.get::<_, bool>(5)?,
                r.get::<_, Option<i64>>(6)?,
            ))
        })
        .map_err(db(ctx))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(db(ctx))?;
    validate_fragments(meta, &rows, size_bytes)
        .map(Some)
        .map_err(|p| StoreError::Corrupt(format!("object TOI {toi}: fragment index: {p}")))
}

/// A stored fragment row: `seq`, `[offset, length, decode_start, duration]`, `sync`,
/// `key_length`.
type FragmentRow = (i64, [i64; 4], bool, Option<i64>);

fn validate_fragments(
    meta: MetaRow,
    rows: &[FragmentRow],
    size_bytes: u64,
) -> Result<FragmentsRecord, String> {
    let (track_id, timescale, init_len, index_offset, index_length, complete) = meta;
    let timescale: u32 = as_u(timescale, "timescale")?;
    let init_len: u64 = as_u(init_len, "init_length")?;
    if timescale == 0 || init_len == 0 || init_len > size_bytes {
        return Err(format!(
            "timescale {timescale} or init length {init_len} is impossible"
        ));
    }
    if rows.len() > MAX_FRAGMENT_ROWS {
        return Err(format!("more than {MAX_FRAGMENT_ROWS} fragments"));
    }
    let index_range = match (
        opt_u::<u64>(index_offset, "index_offset")?,
        opt_u(index_length, "index_length")?,
    ) {
        (Some(o), Some(l)) if o.checked_add(l).is_some_and(|e| e <= size_bytes) => Some((o, l)),
        (None, None) => None,
        _ => return Err("the sidx range is outside the object".into()),
    };
    let mut fragments: Vec<FragmentRecord> = Vec::with_capacity(rows.len());
    let mut next = init_len;
    for (i, (seq, [off, len, dts, dur], sync, key)) in rows.iter().enumerate() {
        let (offset_bytes, length_bytes): (u64, u64) =
            (as_u(*off, "offset")?, as_u(*len, "length")?);
        let end = offset_bytes.saturating_add(length_bytes);
        if *seq != i as i64 || offset_bytes < next || length_bytes == 0 || end > size_bytes {
            return Err(format!(
                "fragment {i} (seq {seq}, bytes {off}+{len}) is out of order or outside the object"
            ));
        }
        next = end;
        let key_length_bytes: Option<u64> = opt_u(*key, "key_length")?;
        if key_length_bytes.is_some_and(|k| k == 0 || k > length_bytes) {
            return Err(format!(
                "fragment {i}: key_length {key:?} is outside the fragment"
            ));
        }
        fragments.push(FragmentRecord {
            offset_bytes,
            length_bytes,
            decode_start: as_u(*dts, "decode_start")?,
            duration: as_u(*dur, "duration")?,
            sync: *sync,
            key_length_bytes,
        });
    }
    Ok(FragmentsRecord {
        track_id: as_u(track_id, "track_id")?,
        timescale,
        init: (0, init_len),
        index_range,
        complete,
        fragments,
    })
}

impl Catalog {
    /// Object `toi`'s descriptor, fragment index and key frames (empty for an object ingested before
    /// they were kept), validated against its `size_bytes` ([`StoreError::Corrupt`] when a
    /// row breaks a rule of docs/format.md).
    pub fn media_detail(&self, toi: u32, size_bytes: u64) -> Result<MediaDetail, StoreError> {
        Ok(MediaDetail {
            descriptor: read_descriptor(&self.conn, toi)?,
            fragments: read_fragments(&self.conn, toi, size_bytes)?,
            key_frames: crate::key_frames::read(&self.conn, toi, size_bytes)?,
        })
    }

    /// Records title `t` (its renditions' objects must exist already), replacing a title of
    /// the same name when `replace`; refuses a name a complete object has.
    pub fn put_title(&mut self, t: &TitleRecord, replace: bool) -> Result<(), StoreError> {
        crate::validate::validate_name(&t.name)?;
        if t.renditions.is_empty() || t.renditions.len() > MAX_TITLE_RENDITIONS {
            return Err(StoreError::BadParams(format!(
                "a title has 1 to {MAX_TITLE_RENDITIONS} renditions, not {}",
                t.renditions.len()
            )));
        }
        let ctx = "recording a title";
        let tx = self.write_transaction(ctx)?;
        let object: bool = tx
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM objects WHERE name = ?1 AND state = 'complete')",
                [&t.name],
                |r| r.get(0),
            )
            .map_err(db(ctx))?;
        if object {
            return Err(StoreError::NameExists(t.name.clone()));
        }
        let n = tx
            .execute("DELETE FROM titles WHERE name = ?1", [&t.name])
            .map_err(db(ctx))?;
        if n > 0 && !replace {
            return Err(StoreError::NameExists(t.name.clone()));
        }
        tx.execute(
            "INSERT INTO titles (name, created_unix) VALUES (?1, ?2)",
            params![t.name, t.created_unix],
        )
        .map_err(db(ctx))?;
        for r in &t.renditions {
            let other: Option<String> = tx
                .query_row(
                    "SELECT title FROM title_renditions WHERE object = ?1 AND title != ?2 LIMIT 1",
                    params![r.object, t.name],
                    |row| row.get(0),
                )
                .optional()
                .map_err(db(ctx))?;
            if let Some(title) = other {
                return Err(StoreError::InOtherTitle {
                    object: r.object.clone(),
                    title,
                });
            }
        }
        for (seq, r) in t.renditions.iter().enumerate() {
            tx.execute(
                "INSERT INTO title_renditions (title, seq, object, bitrate_bps, width, height, codecs)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![t.name, seq as i64, r.object, r.bitrate_bps as i64, r.width, r.height, r.codecs],
            )
            .map_err(db(ctx))?;
        }
        tx.commit().map_err(db(ctx))
    }

    /// The title called `name`, `None` when there is none.
    pub fn title(&self, name: &str) -> Result<Option<TitleRecord>, StoreError> {
        let ctx = "reading a title";
        let created: Option<i64> = self
            .conn
            .query_row(
                "SELECT created_unix FROM titles WHERE name = ?1",
                [name],
                |r| r.get(0),
            )
            .optional()
            .map_err(db(ctx))?;
        let Some(created_unix) = created else {
            return Ok(None);
        };
        let mut q = self
            .conn
            .prepare(
                "SELECT object, bitrate_bps, width, height, codecs FROM title_renditions
                 WHERE title = ?1 ORDER BY seq LIMIT ?2",
            )
            .map_err(db(ctx))?;
        let rows = q
            .query_map(params![name, MAX_TITLE_RENDITIONS as i64], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                ))
            })
            .map_err(db(ctx))?
            .collect::<Result<Vec<(String, i64, Option<i64>, Option<i64>, String)>, _>>()
            .map_err(db(ctx))?;
        let bad = |p: String| StoreError::Corrupt(format!("title {name:?}: {p}"));
        let mut renditions = Vec::with_capacity(rows.len());
        for (object, bitrate, w, h, codecs) in rows {
            crate::validate::validate_name(&object).map_err(|e| bad(e.to_string()))?;
            renditions.push(TitleRendition {
                object,
                bitrate_bps: as_u(bitrate, "bitrate_bps").map_err(bad)?,
                width: opt_u(w, "width").map_err(bad)?,
                height: opt_u(h, "height").map_err(bad)?,
                codecs,
            });
        }
        Ok(Some(TitleRecord {
            name: name.to_string(),
            created_unix,
            renditions,
        }))
    }

    /// Every title, by name.
    pub fn titles(&self) -> Result<Vec<TitleRecord>, StoreError> {
        let ctx = "listing titles";
        let mut q = self
            .conn
            .prepare("SELECT name FROM titles ORDER BY name")
            .map_err(db(ctx))?;
        let names = q
            .query_map([], |r| r.get::<_, String>(0))
            .map_err(db(ctx))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(db(ctx))?;
        names
            .iter()
            .filter_map(|n| self.title(n).transpose())
            .collect()
    }

    /// Removes the title row `name` (not its renditions' objects); whether there was one.
    pub fn delete_title_row(&mut self, name: &str) -> Result<bool, StoreError> {
        let n = self
            .conn
            .execute("DELETE FROM titles WHERE name = ?1", [name])
            .map_err(db("deleting a title"))?;
        Ok(n > 0)
    }
}

impl crate::Volume {
    /// Records title `t` ([`Catalog::put_title`]) once each of its renditions is a complete
    /// object ([`StoreError::NotFound`] naming the first that is not).
    pub fn put_title(&mut self, t: &TitleRecord, replace: bool) -> Result<(), StoreError> {
        for r in &t.renditions {
            if self.catalog().complete_toi(&r.object)?.is_none() {
                return Err(StoreError::NotFound(r.object.clone()));
            }
        }
        self.catalog_mut().put_title(t, replace)
    }

    /// Deletes title `name`'s row only (its renditions stay, listed as objects): the first
    /// step of a delete of the title whose caller then deletes each rendition itself (the
    /// server, through its object cache). Whether there was such a title.
    pub fn forget_title(&mut self, name: &str) -> Result<bool, StoreError> {
        self.catalog_mut().delete_title_row(name)
    }

    /// Deletes title `name` and its renditions' objects: the title row first (so a crash
    /// leaves renditions without a title, listed as objects, never a title without them),
    /// then each rendition object with its files. Returns the title, `NotFound` without one.
    pub fn delete_title(&mut self, name: &str) -> Result<TitleRecord, StoreError> {
        let title = self
            .catalog()
            .title(name)?
            .ok_or_else(|| StoreError::NotFound(name.to_string()))?;
        self.catalog_mut().delete_title_row(name)?;
        for r in &title.renditions {
            match self.delete(&r.object) {
                Ok(_) | Err(StoreError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(title)
    }
}

#[cfg(test)]
mod tests;
