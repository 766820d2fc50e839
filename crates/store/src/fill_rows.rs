//! The catalog rows of origin fills and of the cache bookkeeping: the fill front of each
//! `filling` object, the origin's ETag of every object filled from it with its last use
//! and last check, and the pinned names. Tables in `docs/format.md` ("Fills and the
//! cache"); the byte-level rules of a filling object's blocks in [`crate::fill`].

use rusqlite::{params, OptionalExtension, Transaction};

use crate::catalog::{db, insert_object_row, put_digest_rows, put_media_index, Catalog, NewRow};
use crate::records::{BlockRecord, MediaIndexRecord, ObjectRecord};
use crate::rows::{validate_object, CatalogEntry, RawObjectRow, OBJECT_COLUMNS};
use crate::StoreError;

/// A `filling` object's rows as read: its object row (validated), durable front and the
/// origin's ETag.
#[derive(Clone, Debug)]
pub(crate) struct FillRow {
    pub(crate) entry: CatalogEntry,
    pub(crate) front_codewords: i64,
    pub(crate) etag: String,
}

/// What the catalog knows of an object's copy at the origin.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct OriginRecord {
    /// The origin's ETag of the bytes this object holds.
    pub etag: String,
    /// When the ETag was last checked against the origin (seconds since the Unix epoch;
    /// the fill's start until [`crate::Volume::set_origin_checked`]).
    pub checked_unix: i64,
    /// When the object was last used ([`crate::Volume::touch`]), seconds since the epoch.
    pub last_use_unix: i64,
}

/// The columns of [`crate::catalog`]'s object rows, prefixed `o.`.
fn object_columns() -> String {
    let cols: Vec<String> = OBJECT_COLUMNS.iter().map(|c| format!("o.{c}")).collect();
    format!("o.toi, {}", cols.join(", "))
}

fn raw_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawObjectRow> {
    let columns = (1..=OBJECT_COLUMNS.len())
        .map(|i| r.get::<_, rusqlite::types::Value>(i))
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(RawObjectRow {
        toi: r.get(0)?,
        columns,
    })
}

/// The object, front and ETag of a row of the fill query.
fn fill_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(RawObjectRow, i64, String)> {
    let n = OBJECT_COLUMNS.len();
    Ok((raw_row(r)?, r.get(n + 1)?, r.get(n + 2)?))
}

/// The SELECT of filling objects with their front and ETag (a missing origin row reads as
/// an empty ETag: such an object never resumes).
fn fill_select() -> String {
    format!(
        "SELECT {}, f.front_codewords, coalesce(g.etag, '') FROM objects o
         JOIN fills f ON f.toi = o.toi LEFT JOIN origin_objects g ON g.toi = o.toi
         WHERE o.state = 'filling'",
        object_columns()
    )
}

impl Catalog {
    /// Records a new `filling` object (`rec`, its state ignored), its front 0 and the
    /// origin's ETag, in one transaction; its TOI.
    pub(crate) fn begin_fill(
        &mut self,
        rec: &ObjectRecord,
        etag: &str,
        now_unix: i64,
    ) -> Result<u32, StoreError> {
        let ctx = "recording a new fill";
        let tx = self.write_transaction(ctx)?;
        let toi = insert_object_row(&tx, rec, NewRow::Filling, ctx)?;
        tx.execute(
            "INSERT INTO fills (toi, front_codewords) VALUES (?1, 0)",
            [toi],
        )
        .map_err(db(ctx))?;
        tx.execute(
            "INSERT INTO origin_objects (toi, etag, checked_unix, last_use_unix) VALUES (?1, ?2, ?3, ?3)",
            params![toi, etag, now_unix],
        )
        .map_err(db(ctx))?;
        tx.commit().map_err(db(ctx))?;
        Ok(toi)
    }

    /// The `filling` object called `name`, if any.
    pub(crate) fn fill_by_name(&self, name: &str) -> Result<Option<FillRow>, StoreError> {
        let volume = self.params()?;
        let ctx = "looking up a fill";
        let row = self
            .conn
            .query_row(
                &format!("{} AND o.name = ?1", fill_select()),
                [name],
                fill_row,
            )
            .optional()
            .map_err(db(ctx))?;
        Ok(row.map(|(raw, front_codewords, etag)| FillRow {
            entry: validate_object(&raw, &volume),
            front_codewords,
            etag,
        }))
    }

    /// Every `filling` object, by TOI.
    pub(crate) fn fills(&self) -> Result<Vec<FillRow>, StoreError> {
        let volume = self.params()?;
        let ctx = "listing fills";
        let mut q = self
            .conn
            .prepare(&format!("{} ORDER BY o.toi", fill_select()))
            .map_err(db(ctx))?;
        let rows = q.query_map([], fill_row).map_err(db(ctx))?;
        rows.map(|r| {
            r.map(|(raw, front_codewords, etag)| FillRow {
                entry: validate_object(&raw, &volume),
                front_codewords,
                etag,
            })
            .map_err(db(ctx))
        })
        .collect()
    }

    /// Advances the durable front of filling object `toi` to `front`, in one transaction
    /// with the block records and packet digests of the codewords now committed and the
    /// CRC32C of the data of codewords `0..front`.
    pub(crate) fn commit_fill(
        &mut self,
        toi: u32,
        front: u32,
        crc32c: u32,
        blocks: &[BlockRecord],
        digests: &[(u32, Vec<u8>)],
    ) -> Result<(), StoreError> {
        let ctx = "committing a fill front";
        let tx = self.write_transaction(ctx)?;
        put_fill_rows(&tx, toi, crc32c, blocks, digests)?;
        tx.execute(
            "UPDATE fills SET front_codewords = ?2 WHERE toi = ?1",
            params![toi, front],
        )
        .map_err(db(ctx))?;
        tx.commit().map_err(db(ctx))
    }

    /// Makes filling object `toi` complete in one transaction: the last block records and
    /// digests, its CRC32C, its time index, the member a degraded fill did not write
    /// (`missing_segments`, as a degraded ingest's), the removal of the complete object of
    /// the same name filled from the origin (the fill replaces it), its last use
    /// (`now_unix`); the TOI of the one replaced. [`StoreError::NameExists`] (nothing
    /// changed) when the complete object of that name was ingested or uploaded here.
    pub(crate) fn finish_fill(
        &mut self,
        toi: u32,
        crc32c: u32,
        blocks: &[BlockRecord],
        digests: &[(u32, Vec<u8>)],
        index: Option<&MediaIndexRecord>,
        (missing, now_unix): (Option<u32>, i64),
    ) -> Result<Option<u32>, StoreError> {
        let ctx = "finishing a fill";
        let members = self.params()?.members;
        let tx = self.write_transaction(ctx)?;
        let name = put_fill_rows(&tx, toi, crc32c, blocks, digests)?;
        if let Some(member) = missing {
            crate::catalog::record_missing(&tx, toi, &name, member, members)?;
        }
        if let Some(ix) = index {
            put_media_index(&tx, toi, ix)?;
        }
        let old = replace_complete(&tx, &name)?;
        tx.execute("DELETE FROM fills WHERE toi = ?1", [toi])
            .map_err(db(ctx))?;
        tx.execute(
            "UPDATE objects SET state = 'complete' WHERE toi = ?1",
            [toi],
        )
        .map_err(db(ctx))?;
        tx.execute(
            "UPDATE origin_objects SET last_use_unix = ?2 WHERE toi = ?1",
            params![toi, now_unix],
        )
        .map_err(db(ctx))?;
        tx.commit().map_err(db(ctx))?;
        Ok(old)
    }

    /// Deletes filling object `toi` (its rows follow by cascade); whether it was there.
    pub(crate) fn delete_fill(&mut self, toi: u32) -> Result<bool, StoreError> {
        let n = self
            .conn
            .execute(
                "DELETE FROM objects WHERE toi = ?1 AND state = 'filling'",
                [toi],
            )
            .map_err(db("removing a fill"))?;
        Ok(n > 0)
    }

    /// Records a use of the object called `name` (complete or filling) at `now_unix`;
    /// whether an object filled from the origin has that name.
    pub(crate) fn touch(&mut self, name: &str, now_unix: i64) -> Result<bool, StoreError> {
        let n = self
            .conn
            .execute(
                "UPDATE origin_objects SET last_use_unix = ?2 WHERE toi IN
                 (SELECT toi FROM objects WHERE name = ?1 AND state IN ('complete', 'filling'))",
                params![name, now_unix],
            )
            .map_err(db("recording a use"))?;
        Ok(n > 0)
    }

    /// The row of block `block` of `member`'s segment of object `toi`, if any.
    pub(crate) fn block_row(
        &self,
        toi: u32,
        member: u32,
        block: u64,
    ) -> Result<Option<BlockRecord>, StoreError> {
        let ctx = "reading a block checksum";
        let raw: Option<crate::rows::RawBlockRow> = self
            .conn
            .query_row(
                "SELECT member, block, packets, crc32c FROM blocks
                 WHERE toi = ?1 AND member = ?2 AND block = ?3",
                params![toi, member, block as i64],
                |r| Ok([r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?]),
            )
            .optional()
            .map_err(db(ctx))?;
        raw.map(|r| crate::rows::block_record(&r))
            .transpose()
            .map_err(|e| StoreError::Corrupt(format!("object TOI {toi}: {e}")))
    }

    /// Pins `name` (whether or not an object has it yet).
    pub(crate) fn pin(&mut self, name: &str, now_unix: i64) -> Result<(), StoreError> {
        self.conn
            .execute(
                "INSERT OR IGNORE INTO pins (name, pinned_unix) VALUES (?1, ?2)",
                params![name, now_unix],
            )
            .map_err(db("pinning"))?;
        Ok(())
    }

    /// Unpins `name`; whether it was pinned.
    pub(crate) fn unpin(&mut self, name: &str) -> Result<bool, StoreError> {
        let n = self
            .conn
            .execute("DELETE FROM pins WHERE name = ?1", [name])
            .map_err(db("unpinning"))?;
        Ok(n > 0)
    }

    /// The pinned names, sorted.
    pub(crate) fn pins(&self) -> Result<Vec<String>, StoreError> {
        let ctx = "listing pins";
        let mut q = self
            .conn
            .prepare("SELECT name FROM pins ORDER BY name")
            .map_err(db(ctx))?;
        let rows = q.query_map([], |r| r.get(0)).map_err(db(ctx))?;
        rows.collect::<Result<Vec<String>, _>>().map_err(db(ctx))
    }

    /// The origin record of the complete object called `name`, if it was filled from the
    /// origin.
    pub(crate) fn origin(&self, name: &str) -> Result<Option<OriginRecord>, StoreError> {
        self.conn
            .query_row(
                "SELECT g.etag, g.checked_unix, g.last_use_unix FROM origin_objects g
                 JOIN objects o ON o.toi = g.toi WHERE o.name = ?1 AND o.state = 'complete'",
                [name],
                |r| {
                    Ok(OriginRecord {
                        etag: r.get(0)?,
                        checked_unix: r.get(1)?,
                        last_use_unix: r.get(2)?,
                    })
                },
            )
            .optional()
            .map_err(db("reading an origin record"))
    }

    /// Records object `toi` (being written, not yet committed: an encrypted fill) as
    /// filled from the origin version `etag` at `unix`; the row commits with the object
    /// (and goes with it if it never does).
    pub(crate) fn set_origin_row(
        &mut self,
        toi: u32,
        etag: &str,
        unix: i64,
    ) -> Result<(), StoreError> {
        self.conn
            .execute(
                "INSERT OR REPLACE INTO origin_objects (toi, etag, checked_unix, last_use_unix)
                 VALUES (?1, ?2, ?3, ?3)",
                params![toi, etag, unix],
            )
            .map_err(db("recording an object's origin"))?;
        Ok(())
    }

    /// The number of origin rows, whatever their object's state (tests: none is left
    /// behind).
    #[cfg(test)]
    pub(crate) fn count_origin_rows_for_tests(&self) -> Result<i64, StoreError> {
        self.conn
            .query_row("SELECT COUNT(*) FROM origin_objects", [], |r| r.get(0))
            .map_err(db("counting origin rows"))
    }

    /// Records that the complete object called `name` was checked against the origin at
    /// `unix`; whether it has an origin record.
    pub(crate) fn set_origin_checked(&mut self, name: &str, unix: i64) -> Result<bool, StoreError> {
        let n = self
            .conn
            .execute(
                "UPDATE origin_objects SET checked_unix = ?2 WHERE toi IN
                 (SELECT toi FROM objects WHERE name = ?1 AND state = 'complete')",
                params![name, unix],
            )
            .map_err(db("recording an origin check"))?;
        Ok(n > 0)
    }

    /// The complete objects filled from the origin whose name is not pinned, least
    /// recently used first (ties by TOI), each with its last use.
    pub(crate) fn unpinned_origin_objects(&self) -> Result<Vec<(CatalogEntry, i64)>, StoreError> {
        let volume = self.params()?;
        let ctx = "listing eviction candidates";
        let mut q = self
            .conn
            .prepare(&format!(
                "SELECT {}, g.last_use_unix FROM objects o JOIN origin_objects g ON g.toi = o.toi
                 WHERE o.state = 'complete' AND o.name NOT IN (SELECT name FROM pins)
                 ORDER BY g.last_use_unix, o.toi",
                object_columns()
            ))
            .map_err(db(ctx))?;
        let rows = q
            .query_map([], |r| {
                Ok((raw_row(r)?, r.get::<_, i64>(OBJECT_COLUMNS.len() + 1)?))
            })
            .map_err(db(ctx))?;
        rows.map(|r| {
            r.map(|(raw, last)| (validate_object(&raw, &volume), last))
                .map_err(db(ctx))
        })
        .collect()
    }
}

/// Records block rows (a row of the same block replaced: a partial block grows), digests
/// and the running CRC32C of filling object `toi`; its name (an error if it is no longer
/// filling).
fn put_fill_rows(
    tx: &Transaction<'_>,
    toi: u32,
    crc32c: u32,
    blocks: &[BlockRecord],
    digests: &[(u32, Vec<u8>)],
) -> Result<String, StoreError> {
    let ctx = "recording fill rows";
    let name: Option<String> = tx
        .query_row(
            "SELECT name FROM objects WHERE toi = ?1 AND state = 'filling'",
            [toi],
            |r| r.get(0),
        )
        .optional()
        .map_err(db(ctx))?;
    let name =
        name.ok_or_else(|| StoreError::Corrupt(format!("object TOI {toi} is no longer filling")))?;
    {
        let mut st = tx
            .prepare(
                "INSERT OR REPLACE INTO blocks (toi, member, block, packets, crc32c)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )
            .map_err(db(ctx))?;
        for b in blocks {
            st.execute(params![toi, b.member, b.block as i64, b.packets, b.crc32c])
                .map_err(db(ctx))?;
        }
    }
    put_digest_rows(tx, toi, digests)?;
    tx.execute(
        "UPDATE objects SET content_crc32c = ?2 WHERE toi = ?1",
        params![toi, crc32c],
    )
    .map_err(db(ctx))?;
    Ok(name)
}

/// Deletes the complete object called `name` if there is one; its TOI.
fn replace_complete(tx: &Transaction<'_>, name: &str) -> Result<Option<u32>, StoreError> {
    let ctx = "replacing an object";
    let old: Option<(u32, bool)> = tx
        .query_row(
            "SELECT o.toi, EXISTS(SELECT 1 FROM origin_objects g WHERE g.toi = o.toi) \
             FROM objects o WHERE o.name = ?1 AND o.state = 'complete'",
            [name],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .map_err(db(ctx))?;
    // A fill replaces an older version from the origin, never an object ingested or
    // uploaded here (while the fill ran): that one stays, the fill gives way.
    if let Some((_, false)) = old {
        return Err(StoreError::NameExists(name.to_string()));
    }
    let old = old.map(|(toi, _)| toi);
    if let Some(old_toi) = old {
        tx.execute("DELETE FROM objects WHERE toi = ?1", [old_toi])
            .map_err(db(ctx))?;
    }
    Ok(old)
}
