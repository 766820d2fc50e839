//! The transactional catalog (SQLite): volume parameters, members, objects,
//! and the checksum of every block. Schema in `docs/format.md`.

use std::path::{Path, PathBuf};

use rusqlite::types::Value;
use rusqlite::{params, Connection, OptionalExtension, Transaction, TransactionBehavior};

use crate::members::MemberState;
pub use crate::records::{BlockRecord, MediaIndexRecord, ObjectRecord, ObjectState, OnNameTaken};
use crate::rows::{
    validate_object, CatalogEntry, RawBlockRow, RawMediaIndex, RawObjectRow, OBJECT_COLUMNS,
};
use crate::{StoreError, VolumeParams};

/// Version of the on-disk format this code reads and writes.
///
/// Version 2 dropped the per-block trailer of RFC 1071 partial checksums that
/// version 1 kept after the packets of every block (no send path used it), so
/// a block holds more packets: the two cannot be read by the same code.
pub const FORMAT_VERSION: u32 = 2;

const SCHEMA: &str = "
CREATE TABLE volume (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE members (
    idx  INTEGER PRIMARY KEY,
    path TEXT NOT NULL
);
CREATE TABLE blocks (
    toi     INTEGER NOT NULL REFERENCES objects(toi) ON DELETE CASCADE,
    member  INTEGER NOT NULL,
    block   INTEGER NOT NULL,
    packets INTEGER NOT NULL,
    crc32c  INTEGER NOT NULL,
    PRIMARY KEY (toi, member, block)
) WITHOUT ROWID;
";

/// The `objects` table, named `{table}` (the migration builds it under another name first).
/// State `filling` was added after format version 2 shipped: an older catalog's table,
/// whose CHECK allows `writing` and `complete` only, is rebuilt at open
/// ([`migrate_filling_state`]).
fn objects_table(table: &str) -> String {
    format!(
        "CREATE TABLE {table} (
    toi            INTEGER PRIMARY KEY AUTOINCREMENT,
    name           TEXT NOT NULL,
    state          TEXT NOT NULL CHECK (state IN ('writing', 'complete', 'filling')),
    size_bytes     INTEGER NOT NULL,
    bitrate_bps    INTEGER NOT NULL,
    duration_s     REAL NOT NULL,
    content_type   TEXT NOT NULL,
    symbol_len     INTEGER NOT NULL,
    source_symbols INTEGER NOT NULL,
    repair_symbols INTEGER NOT NULL,
    codewords      INTEGER NOT NULL,
    content_crc32c INTEGER NOT NULL,
    created_unix   INTEGER NOT NULL,
    replaces       INTEGER
);
"
    )
}

/// The index that keeps one complete object per name (created with the `objects` table).
const COMPLETE_NAME_INDEX: &str =
    "CREATE UNIQUE INDEX IF NOT EXISTS objects_complete_name ON objects(name) WHERE state = 'complete';";

/// The media index tables (added after format version 2 shipped: created when missing, so
/// an older catalog opens and simply has no index for its objects).
const MEDIA_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS media_meta (
    toi           INTEGER PRIMARY KEY REFERENCES objects(toi) ON DELETE CASCADE,
    container     TEXT NOT NULL,
    moov_at_front INTEGER
);
CREATE TABLE IF NOT EXISTS media_index (
    toi          INTEGER NOT NULL REFERENCES objects(toi) ON DELETE CASCADE,
    seq          INTEGER NOT NULL,
    time_s       REAL NOT NULL,
    offset_bytes INTEGER NOT NULL,
    PRIMARY KEY (toi, seq)
) WITHOUT ROWID;
";

/// The packet digests (added after format version 2 shipped, like the media index:
/// created when missing; an object ingested before has no digests and is served
/// unauthenticated). One row per codeword: the digests of its `n` stored packets
/// (`isnode_wire::digest`), 16 bytes each, in ESI order.
const DIGEST_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS packet_digests (
    toi     INTEGER NOT NULL REFERENCES objects(toi) ON DELETE CASCADE,
    sbn     INTEGER NOT NULL,
    digests BLOB NOT NULL,
    PRIMARY KEY (toi, sbn)
) WITHOUT ROWID;
";

/// The fill tables (added after format version 2 shipped, like the media index: created
/// when missing, after the `objects` table allows state `filling`).
const FILL_SCHEMA: &str = "
CREATE UNIQUE INDEX IF NOT EXISTS objects_filling_name ON objects(name) WHERE state = 'filling';
CREATE TABLE IF NOT EXISTS fills (
    toi             INTEGER PRIMARY KEY REFERENCES objects(toi) ON DELETE CASCADE,
    front_codewords INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS origin_objects (
    toi           INTEGER PRIMARY KEY REFERENCES objects(toi) ON DELETE CASCADE,
    etag          TEXT NOT NULL,
    checked_unix  INTEGER NOT NULL,
    last_use_unix INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS pins (
    name        TEXT PRIMARY KEY,
    pinned_unix INTEGER NOT NULL
) WITHOUT ROWID;
";

/// An open catalog.
#[derive(Debug)]
pub struct Catalog {
    pub(crate) conn: Connection,
}

pub(crate) fn db(context: &str) -> impl FnOnce(rusqlite::Error) -> StoreError + '_ {
    move |source| StoreError::Catalog {
        context: context.to_string(),
        source,
    }
}

impl Catalog {
    /// Creates a new catalog at `path` with the given parameters and member paths.
    pub fn create(
        path: &Path,
        params: &VolumeParams,
        members: &[PathBuf],
        tsi: u32,
        uuid: &str,
    ) -> Result<Catalog, StoreError> {
        let conn = Connection::open(path).map_err(db("creating the catalog"))?;
        let mut cat = Catalog { conn };
        cat.configure()?;
        let tx = cat.write_transaction("creating the catalog")?;
        tx.execute_batch(SCHEMA)
            .map_err(db("creating the schema"))?;
        tx.execute_batch(&objects_table("objects"))
            .map_err(db("creating the schema"))?;
        tx.execute_batch(COMPLETE_NAME_INDEX)
            .map_err(db("creating the schema"))?;
        tx.execute_batch(FILL_SCHEMA)
            .map_err(db("creating the schema"))?;
        tx.execute_batch(MEDIA_SCHEMA)
            .map_err(db("creating the schema"))?;
        tx.execute_batch(DIGEST_SCHEMA)
            .map_err(db("creating the schema"))?;
        tx.execute_batch(crate::members::MEMBER_STATE_SCHEMA)
            .map_err(db("creating the schema"))?;
        tx.execute_batch(crate::renditions::RENDITION_SCHEMA)
            .map_err(db("creating the schema"))?;
        tx.execute_batch(crate::key_frames::KEY_FRAME_SCHEMA)
            .map_err(db("creating the schema"))?;
        tx.execute_batch(crate::protection::PROTECTION_SCHEMA)
            .map_err(db("creating the schema"))?;
        let kv = [
            ("format_version", FORMAT_VERSION.to_string()),
            ("uuid", uuid.to_string()),
            ("tsi", tsi.to_string()),
            ("symbol_len", params.symbol_len.to_string()),
            ("source_symbols", params.source_symbols.to_string()),
            ("repair_symbols", params.repair_symbols.to_string()),
            ("members", params.members.to_string()),
            ("block_len", params.block_len.to_string()),
        ];
        for (k, v) in kv {
            tx.execute(
                "INSERT INTO volume (key, value) VALUES (?1, ?2)",
                params![k, v],
            )
            .map_err(db("writing volume parameters"))?;
        }
        for (i, p) in members.iter().enumerate() {
            let s = p.to_str().ok_or_else(|| {
                StoreError::BadParams(format!("member path {} is not UTF-8", p.display()))
            })?;
            tx.execute(
                "INSERT INTO members (idx, path) VALUES (?1, ?2)",
                params![i as i64, s],
            )
            .map_err(db("writing members"))?;
        }
        tx.commit().map_err(db("creating the catalog"))?;
        Ok(cat)
    }

    /// Opens an existing catalog.
    pub fn open(path: &Path) -> Result<Catalog, StoreError> {
        let conn = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE)
            .map_err(db("opening the catalog"))?;
        let mut cat = Catalog { conn };
        cat.configure()?;
        let version: u32 = cat.get_kv("format_version")?;
        check_format_version(path, version)?;
        migrate_filling_state(&mut cat.conn)?;
        cat.conn
            .execute_batch(FILL_SCHEMA)
            .map_err(db("adding the fill tables"))?;
        cat.conn
            .execute_batch(MEDIA_SCHEMA)
            .map_err(db("adding the media index tables"))?;
        cat.conn
            .execute_batch(DIGEST_SCHEMA)
            .map_err(db("adding the packet digest table"))?;
        cat.conn
            .execute_batch(crate::members::MEMBER_STATE_SCHEMA)
            .map_err(db("adding the member state table"))?;
        cat.conn
            .execute_batch(crate::renditions::RENDITION_SCHEMA)
            .map_err(db("adding the rendition tables"))?;
        cat.conn
            .execute_batch(crate::key_frames::KEY_FRAME_SCHEMA)
            .map_err(db("adding the key frame tables"))?;
        cat.conn
            .execute_batch(crate::protection::PROTECTION_SCHEMA)
            .map_err(db("adding the protection tables"))?;
        crate::renditions::add_key_length_column(&cat.conn)?;
        Ok(cat)
    }

    fn configure(&self) -> Result<(), StoreError> {
        self.conn
            .execute_batch(
                "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;",
            )
            .map_err(db("configuring the catalog"))?;
        self.conn
            .busy_timeout(std::time::Duration::from_secs(30))
            .map_err(db("configuring the catalog"))?;
        Ok(())
    }

    /// Begins a transaction that takes the write lock at once: a deferred one that
    /// reads first would fail with SQLITE_BUSY (without waiting) when another
    /// process writes between its read and its first write.
    pub(crate) fn write_transaction(
        &mut self,
        context: &str,
    ) -> Result<Transaction<'_>, StoreError> {
        self.conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(db(context))
    }

    fn get_kv<T: std::str::FromStr>(&self, key: &str) -> Result<T, StoreError> {
        let v: String = self
            .conn
            .query_row("SELECT value FROM volume WHERE key = ?1", [key], |r| {
                r.get(0)
            })
            .map_err(db("reading volume parameters"))?;
        v.parse().map_err(|_| {
            StoreError::Corrupt(format!("catalog: volume key {key} = {v:?} is not valid"))
        })
    }

    /// Volume parameters.
    pub fn params(&self) -> Result<VolumeParams, StoreError> {
        Ok(VolumeParams {
            symbol_len: self.get_kv("symbol_len")?,
            source_symbols: self.get_kv("source_symbols")?,
            repair_symbols: self.get_kv("repair_symbols")?,
            members: self.get_kv("members")?,
            block_len: self.get_kv("block_len")?,
        })
    }

    /// The FLUTE transport session identifier baked into this volume's packets.
    pub fn tsi(&self) -> Result<u32, StoreError> {
        self.get_kv("tsi")
    }

    /// The volume's unique identifier.
    pub fn uuid(&self) -> Result<String, StoreError> {
        self.get_kv("uuid")
    }

    /// Member directories, by index.
    pub fn members(&self) -> Result<Vec<PathBuf>, StoreError> {
        let mut st = self
            .conn
            .prepare("SELECT path FROM members ORDER BY idx")
            .map_err(db("reading members"))?;
        let rows = st
            .query_map([], |r| r.get::<_, String>(0))
            .map_err(db("reading members"))?;
        rows.map(|r| r.map(PathBuf::from).map_err(db("reading members")))
            .collect()
    }

    /// The state of every member, by index (a member without a row is ok).
    pub fn member_states(&self) -> Result<Vec<MemberState>, StoreError> {
        let members = self.params()?.members;
        crate::members::read_all(&self.conn, members)
    }

    /// The state of one member.
    pub fn member_state(&self, member: u32) -> Result<MemberState, StoreError> {
        let members = self.params()?.members;
        check_member(member, members)?;
        crate::members::read_one(&self.conn, member, members)
    }

    /// Records the state of one member (one transaction).
    pub fn set_member_state(&mut self, member: u32, state: &MemberState) -> Result<(), StoreError> {
        check_member(member, self.params()?.members)?;
        let ctx = "recording a member state";
        let tx = self.write_transaction(ctx)?;
        crate::members::write(&tx, member, state)?;
        tx.commit().map_err(db(ctx))
    }

    /// The objects whose segment on `member` a degraded ingest did not write, by TOI.
    pub fn missing_segments(&self, member: u32) -> Result<Vec<u32>, StoreError> {
        let ctx = "reading missing segments";
        let mut q = self
            .conn
            .prepare("SELECT toi FROM missing_segments WHERE member = ?1 ORDER BY toi")
            .map_err(db(ctx))?;
        let rows = q.query_map([member], |r| r.get(0)).map_err(db(ctx))?;
        rows.collect::<Result<Vec<u32>, _>>().map_err(db(ctx))
    }

    /// Ends a rebuild of `member`: sets it ok in one transaction, unless a degraded ingest
    /// committed an object without it meanwhile (then `false`: rebuild those first).
    pub fn finish_rebuild(&mut self, member: u32) -> Result<bool, StoreError> {
        let ctx = "ending a rebuild";
        let tx = self.write_transaction(ctx)?;
        let left: bool = tx
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM missing_segments WHERE member = ?1)",
                [member],
                |r| r.get(0),
            )
            .map_err(db(ctx))?;
        if left {
            return Ok(false);
        }
        crate::members::write(&tx, member, &MemberState::Ok)?;
        tx.commit().map_err(db(ctx))?;
        Ok(true)
    }

    /// After a rebuild wrote `member`'s segment of object `toi` (synced): its block
    /// checksums and the member's new progress, in one transaction. An object deleted
    /// meanwhile gets no rows (the progress is recorded all the same); returns whether
    /// the object is still there.
    pub fn record_rebuilt_segment(
        &mut self,
        toi: u32,
        member: u32,
        blocks: &[BlockRecord],
        progress: &MemberState,
    ) -> Result<bool, StoreError> {
        let ctx = "recording a rebuilt segment";
        let tx = self.write_transaction(ctx)?;
        let present: bool = tx
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM objects WHERE toi = ?1 AND state = 'complete')",
                [toi],
                |r| r.get(0),
            )
            .map_err(db(ctx))?;
        if present {
            tx.execute(
                "DELETE FROM blocks WHERE toi = ?1 AND member = ?2",
                params![toi, member],
            )
            .map_err(db(ctx))?;
            insert_blocks(&tx, toi, blocks)?;
        }
        tx.execute(
            "DELETE FROM missing_segments WHERE toi = ?1 AND member = ?2",
            params![toi, member],
        )
        .map_err(db(ctx))?;
        crate::members::write(&tx, member, progress)?;
        tx.commit().map_err(db(ctx))?;
        Ok(present)
    }

    /// Records a new object in state `writing` and returns its TOI.
    pub fn begin_object(&mut self, rec: &ObjectRecord) -> Result<u32, StoreError> {
        insert_object_row(&self.conn, rec, NewRow::Writing, "recording a new object")
    }

    /// Makes object `toi` complete and visible in one transaction: its block
    /// checksums, its final CRC, and the removal of the complete object of the same name
    /// if `taken` says so (whichever it is now: another `--replace` ingest may have
    /// replaced the one there at the start); returns that object's TOI.
    ///
    /// `missing` lists the members a degraded ingest did not write (their block checksums
    /// are in `blocks` all the same, computed from the blocks a rebuild will write): each
    /// gets a `missing_segments` row, and is marked failed unless it already is.
    pub fn commit_object(
        &mut self,
        toi: u32,
        content_crc32c: u32,
        blocks: &[BlockRecord],
        taken: OnNameTaken,
        missing: &[u32],
    ) -> Result<Option<u32>, StoreError> {
        let members = self.params()?.members;
        let tx = self.write_transaction("committing an object")?;
        let name: String = tx
            .query_row(
                "SELECT name FROM objects WHERE toi = ?1 AND state = 'writing'",
                [toi],
                |r| r.get(0),
            )
            .map_err(db("committing an object"))?;
        insert_blocks(&tx, toi, blocks)?;
        // The replaced object goes in the same transaction; a name taken meanwhile by
        // another ingest fails the unique index and rolls everything back.
        let old: Option<u32> = tx
            .query_row(
                "SELECT toi FROM objects WHERE name = ?1 AND state = 'complete'",
                [&name],
                |r| r.get(0),
            )
            .optional()
            .map_err(db("committing an object"))?;
        if let Some(old_toi) = old {
            if taken == OnNameTaken::Fail {
                return Err(StoreError::NameExists(name));
            }
            tx.execute("DELETE FROM objects WHERE toi = ?1", [old_toi])
                .map_err(db("replacing an object"))?;
        }
        tx.execute(
            "UPDATE objects SET state = 'complete', content_crc32c = ?2 WHERE toi = ?1",
            params![toi, content_crc32c],
        )
        .map_err(db("committing an object"))?;
        for &member in missing {
            record_missing(&tx, toi, &name, member, members)?;
        }
        tx.commit().map_err(db("committing an object"))?;
        Ok(old)
    }

    /// Replaces the block checksums of one member of an object (after repair).
    pub fn replace_blocks(
        &mut self,
        toi: u32,
        member: u32,
        blocks: &[BlockRecord],
    ) -> Result<(), StoreError> {
        let tx = self.write_transaction("updating block checksums")?;
        tx.execute(
            "DELETE FROM blocks WHERE toi = ?1 AND member = ?2",
            params![toi, member],
        )
        .map_err(db("updating block checksums"))?;
        insert_blocks(&tx, toi, blocks)?;
        tx.execute(
            "DELETE FROM missing_segments WHERE toi = ?1 AND member = ?2",
            params![toi, member],
        )
        .map_err(db("updating block checksums"))?;
        tx.commit().map_err(db("updating block checksums"))
    }

    /// Deletes an object row and its blocks.
    pub fn delete_object(&mut self, toi: u32) -> Result<(), StoreError> {
        self.conn
            .execute("DELETE FROM objects WHERE toi = ?1", [toi])
            .map_err(db("deleting an object"))?;
        Ok(())
    }

    /// Sets the bitrate, playing time and content type of object `toi` while it is
    /// still `writing` (an upload's, known once its last byte is read).
    pub fn set_description(
        &mut self,
        toi: u32,
        bitrate_bps: u64,
        duration_s: f64,
        content_type: &str,
    ) -> Result<(), StoreError> {
        let n = self
            .conn
            .execute(
                "UPDATE objects SET bitrate_bps = ?2, duration_s = ?3, content_type = ?4
                 WHERE toi = ?1 AND state = 'writing'",
                params![toi, bitrate_bps as i64, duration_s, content_type],
            )
            .map_err(db("describing an object"))?;
        if n != 1 {
            return Err(StoreError::Corrupt(format!(
                "object {toi} is no longer being written"
            )));
        }
        Ok(())
    }

    /// Deletes the complete object called `name` (its row; its blocks, media index and
    /// digests follow by cascade) in one transaction; its TOI, `None` if there is none.
    pub fn delete_complete(&mut self, name: &str) -> Result<Option<u32>, StoreError> {
        let tx = self.write_transaction("deleting an object")?;
        let toi: Option<u32> = tx
            .query_row(
                "SELECT toi FROM objects WHERE name = ?1 AND state = 'complete'",
                [name],
                |r| r.get(0),
            )
            .optional()
            .map_err(db("deleting an object"))?;
        if let Some(toi) = toi {
            tx.execute("DELETE FROM objects WHERE toi = ?1", [toi])
                .map_err(db("deleting an object"))?;
        }
        tx.commit().map_err(db("deleting an object"))?;
        Ok(toi)
    }

    /// Deletes, in one transaction, those of `tois` that are still `writing`
    /// (an ingest may have committed one since the caller looked); returns the
    /// TOIs actually deleted.
    pub fn delete_writing(&mut self, tois: &[u32]) -> Result<Vec<u32>, StoreError> {
        let tx = self.write_transaction("removing unfinished objects")?;
        let mut deleted = Vec::new();
        for &toi in tois {
            let n = tx
                .execute(
                    "DELETE FROM objects WHERE toi = ?1 AND state = 'writing'",
                    [toi],
                )
                .map_err(db("removing unfinished objects"))?;
            if n > 0 {
                deleted.push(toi);
            }
        }
        tx.commit().map_err(db("removing unfinished objects"))?;
        Ok(deleted)
    }

    /// Every object's TOI and state, read in one statement (one consistent snapshot).
    pub fn object_states(&self) -> Result<Vec<(u32, ObjectState)>, StoreError> {
        let mut q = self
            .conn
            .prepare("SELECT toi, state FROM objects ORDER BY toi")
            .map_err(db("listing objects"))?;
        let rows = q
            .query_map([], |r| Ok((r.get(0)?, state_of(&r.get::<_, String>(1)?))))
            .map_err(db("listing objects"))?;
        rows.map(|r| r.map_err(db("listing objects"))).collect()
    }

    /// Objects in a given state, by TOI, each validated ([`crate::rows`]): a row that
    /// breaks an invariant is a [`crate::rows::BadObject`] and does not fail the others.
    pub fn entries(&self, state: ObjectState) -> Result<Vec<CatalogEntry>, StoreError> {
        let st = state_name(state);
        let volume = self.params()?;
        let mut q = self
            .conn
            .prepare(&format!("{SELECT_OBJECT} WHERE state = ?1 ORDER BY toi"))
            .map_err(db("listing objects"))?;
        let rows = q
            .query_map([st], raw_object_row)
            .map_err(db("listing objects"))?;
        rows.map(|r| {
            r.map(|raw| validate_object(&raw, &volume))
                .map_err(db("listing objects"))
        })
        .collect()
    }

    /// The valid objects in a given state, by TOI (bad ones left out: see [`Catalog::entries`]).
    pub fn objects(&self, state: ObjectState) -> Result<Vec<ObjectRecord>, StoreError> {
        Ok(self
            .entries(state)?
            .into_iter()
            .filter_map(CatalogEntry::valid)
            .collect())
    }

    /// The complete object called `name`, validated.
    pub fn entry_by_name(&self, name: &str) -> Result<Option<CatalogEntry>, StoreError> {
        let volume = self.params()?;
        let raw = self
            .conn
            .query_row(
                &format!("{SELECT_OBJECT} WHERE name = ?1 AND state = 'complete'"),
                [name],
                raw_object_row,
            )
            .optional()
            .map_err(db("looking up an object"))?;
        Ok(raw.map(|raw| validate_object(&raw, &volume)))
    }

    /// The TOI of the complete object called `name`, valid or not.
    pub fn complete_toi(&self, name: &str) -> Result<Option<i64>, StoreError> {
        self.conn
            .query_row(
                "SELECT toi FROM objects WHERE name = ?1 AND state = 'complete'",
                [name],
                |r| r.get(0),
            )
            .optional()
            .map_err(db("looking up an object"))
    }

    /// Records the time index of object `toi` (still `writing`: it goes with the object).
    pub fn set_media_index(&mut self, toi: u32, ix: &MediaIndexRecord) -> Result<(), StoreError> {
        let ctx = "recording the media index";
        let tx = self.write_transaction(ctx)?;
        put_media_index(&tx, toi, ix)?;
        tx.commit().map_err(db(ctx))
    }

    /// Records the packet digests of codewords of object `toi` (still `writing`: they go
    /// with the object), `(sbn, n × 16 bytes)` each, in one transaction.
    pub fn put_digests(&mut self, toi: u32, rows: &[(u32, Vec<u8>)]) -> Result<(), StoreError> {
        let ctx = "recording packet digests";
        let tx = self.write_transaction(ctx)?;
        put_digest_rows(&tx, toi, rows)?;
        tx.commit().map_err(db(ctx))
    }

    /// The packet digests of codewords `from..from + count` of object `toi` that the
    /// catalog has, in SBN order (none for an object ingested before digests).
    pub fn digests(
        &self,
        toi: u32,
        from: u32,
        count: u32,
    ) -> Result<Vec<(u32, Vec<u8>)>, StoreError> {
        let ctx = "reading packet digests";
        let end = i64::from(from) + i64::from(count);
        let mut q = self
            .conn
            .prepare(
                "SELECT sbn, digests FROM packet_digests WHERE toi = ?1 AND sbn >= ?2 AND sbn < ?3 ORDER BY sbn",
            )
            .map_err(db(ctx))?;
        let rows = q
            .query_map(params![toi, from, end], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(db(ctx))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(db(ctx))
    }

    /// Whether object `toi` has packet digests.
    pub fn has_digests(&self, toi: u32) -> Result<bool, StoreError> {
        self.conn
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM packet_digests WHERE toi = ?1)",
                [toi],
                |r| r.get(0),
            )
            .map_err(db("reading packet digests"))
    }

    /// The time index of object `toi`, `None` when it has none (ingested before indexes);
    /// an index that breaks an invariant is [`StoreError::Corrupt`].
    pub fn media_index(&self, toi: u32) -> Result<Option<MediaIndexRecord>, StoreError> {
        let raw = self.media_index_rows(toi)?;
        raw.map(|raw| crate::rows::validate_media_index(&raw, u64::MAX))
            .transpose()
            .map_err(|problem| StoreError::Corrupt(format!("object TOI {toi}: {problem}")))
    }

    /// The time index rows of object `toi` as stored, `None` when it has none; at most
    /// [`crate::rows::MAX_MEDIA_POINTS`] + 1 points are read.
    pub fn media_index_rows(&self, toi: u32) -> Result<Option<RawMediaIndex>, StoreError> {
        let ctx = "reading the media index";
        let meta: Option<(Value, Value)> = self
            .conn
            .query_row(
                "SELECT container, moov_at_front FROM media_meta WHERE toi = ?1",
                [toi],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(db(ctx))?;
        let Some((container, moov_at_front)) = meta else {
            return Ok(None);
        };
        let mut q = self
            .conn
            .prepare(
                "SELECT seq, time_s, offset_bytes FROM media_index WHERE toi = ?1 ORDER BY seq LIMIT ?2",
            )
            .map_err(db(ctx))?;
        let limit = crate::rows::MAX_MEDIA_POINTS as i64 + 1;
        let rows = q
            .query_map(params![toi, limit], |r| {
                Ok([r.get(0)?, r.get(1)?, r.get(2)?])
            })
            .map_err(db(ctx))?;
        let points = rows.collect::<Result<Vec<_>, _>>().map_err(db(ctx))?;
        Ok(Some(RawMediaIndex {
            container,
            moov_at_front,
            points,
        }))
    }

    /// Every block row of object `toi`, by member and block, as stored; at most `limit`
    /// rows are read (validate them with [`crate::rows::validate_blocks`]).
    pub fn all_block_rows(&self, toi: u32, limit: u64) -> Result<Vec<RawBlockRow>, StoreError> {
        let ctx = "reading block checksums";
        let mut q = self
            .conn
            .prepare("SELECT member, block, packets, crc32c FROM blocks WHERE toi = ?1 ORDER BY member, block LIMIT ?2")
            .map_err(db(ctx))?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = q
            .query_map(params![toi, limit], |r| {
                Ok([r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?])
            })
            .map_err(db(ctx))?;
        rows.map(|r| r.map_err(db(ctx))).collect()
    }
}

/// Refuses a member index the volume does not have.
fn check_member(member: u32, members: u32) -> Result<(), StoreError> {
    if member < members {
        return Ok(());
    }
    Err(StoreError::BadParams(format!(
        "member {member}: the volume has members 0..{}",
        members.saturating_sub(1)
    )))
}

/// Refuses a volume of another format version, saying what to do about it.
fn check_format_version(catalog: &Path, version: u32) -> Result<(), StoreError> {
    let volume = catalog.parent().unwrap_or(catalog).display();
    if version < FORMAT_VERSION {
        return Err(StoreError::BadParams(format!(
            "the volume at {volume} has on-disk format version {version}, which this isnode \
             (format version {FORMAT_VERSION}) cannot read: version {FORMAT_VERSION} removed the \
             per-block checksum trailer, so blocks are laid out differently. To keep its objects, \
             export each one with the isnode that wrote the volume (`isnode cat NAME > FILE`), \
             create a new volume with this isnode (`isnode volume create`) and ingest them again"
        )));
    }
    if version > FORMAT_VERSION {
        return Err(StoreError::BadParams(format!(
            "the volume at {volume} has on-disk format version {version}, written by a newer \
             isnode; this isnode reads format version {FORMAT_VERSION} only: use a newer isnode"
        )));
    }
    Ok(())
}

const SELECT_OBJECT: &str =
    "SELECT toi, name, state, size_bytes, bitrate_bps, duration_s, content_type, symbol_len,
    source_symbols, repair_symbols, codewords, content_crc32c, created_unix, replaces FROM objects";

fn raw_object_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawObjectRow> {
    let columns = (1..=OBJECT_COLUMNS.len())
        .map(|i| r.get::<_, Value>(i))
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(RawObjectRow {
        toi: r.get(0)?,
        columns,
    })
}

/// The state stored as `state` (the schema allows only 'writing', 'complete' and 'filling').
fn state_of(stored: &str) -> ObjectState {
    match stored {
        "complete" => ObjectState::Complete,
        "filling" => ObjectState::Filling,
        _ => ObjectState::Writing,
    }
}

/// The name of a state as stored in `objects.state`.
pub(crate) fn state_name(state: ObjectState) -> &'static str {
    match state {
        ObjectState::Writing => "writing",
        ObjectState::Complete => "complete",
        ObjectState::Filling => "filling",
    }
}

/// Rebuilds an older catalog's `objects` table so that its CHECK allows state `filling`
/// (SQLite cannot change a CHECK in place): in one transaction, with foreign keys off so
/// that the rows of other tables that reference objects stay, the table is copied to a new
/// one, the old dropped and the new renamed; the AUTOINCREMENT high-water mark is kept so
/// that no TOI is ever used twice. Nothing happens when the table allows `filling` already
/// (another process may have migrated it meanwhile: checked inside the transaction).
fn migrate_filling_state(conn: &mut Connection) -> Result<(), StoreError> {
    let ctx = "adding the filling state to the objects table";
    let table_sql = |c: &Connection| -> Result<String, StoreError> {
        c.query_row(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'objects'",
            [],
            |r| r.get(0),
        )
        .map_err(db(ctx))
    };
    if table_sql(conn)?.contains("'filling'") {
        return Ok(());
    }
    conn.execute_batch("PRAGMA foreign_keys = OFF")
        .map_err(db(ctx))?;
    let migrated = (|| {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(db(ctx))?;
        if table_sql(&tx)?.contains("'filling'") {
            return Ok(());
        }
        let seq: Option<i64> = tx
            .query_row(
                "SELECT seq FROM sqlite_sequence WHERE name = 'objects'",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(db(ctx))?;
        tx.execute_batch(&objects_table("objects_filling_new"))
            .map_err(db(ctx))?;
        tx.execute_batch(
            "INSERT INTO objects_filling_new SELECT * FROM objects;
             DROP TABLE objects;
             ALTER TABLE objects_filling_new RENAME TO objects;
             DELETE FROM sqlite_sequence WHERE name IN ('objects', 'objects_filling_new');",
        )
        .map_err(db(ctx))?;
        tx.execute_batch(COMPLETE_NAME_INDEX).map_err(db(ctx))?;
        let high: Option<i64> = tx
            .query_row("SELECT max(toi) FROM objects", [], |r| r.get(0))
            .map_err(db(ctx))?;
        if let Some(seq) = seq.max(high) {
            tx.execute(
                "INSERT INTO sqlite_sequence (name, seq) VALUES ('objects', ?1)",
                [seq],
            )
            .map_err(db(ctx))?;
        }
        tx.commit().map_err(db(ctx))
    })();
    conn.execute_batch("PRAGMA foreign_keys = ON")
        .map_err(db(ctx))?;
    migrated
}

/// Records that object `toi` was committed without `member`'s segment, and marks the
/// member failed if it is ok (a rebuild in progress sees the row before it ends).
pub(crate) fn record_missing(
    tx: &Transaction<'_>,
    toi: u32,
    name: &str,
    member: u32,
    members: u32,
) -> Result<(), StoreError> {
    check_member(member, members)?;
    let ctx = "recording a segment not written";
    tx.execute(
        "INSERT OR IGNORE INTO missing_segments (toi, member) VALUES (?1, ?2)",
        params![toi, member],
    )
    .map_err(db(ctx))?;
    if crate::members::read_one(tx, member, members)? == MemberState::Ok {
        let reason = format!("object {name:?} (TOI {toi}) was written without this member");
        crate::members::write(tx, member, &MemberState::Failed { reason })?;
    }
    Ok(())
}

/// Records the time index of object `toi` in `tx`.
pub(crate) fn put_media_index(
    tx: &Transaction<'_>,
    toi: u32,
    ix: &MediaIndexRecord,
) -> Result<(), StoreError> {
    let ctx = "recording the media index";
    tx.execute(
        "INSERT OR REPLACE INTO media_meta (toi, container, moov_at_front) VALUES (?1, ?2, ?3)",
        params![toi, ix.container, ix.moov_at_front],
    )
    .map_err(db(ctx))?;
    tx.execute("DELETE FROM media_index WHERE toi = ?1", [toi])
        .map_err(db(ctx))?;
    let mut st = tx
        .prepare("INSERT INTO media_index (toi, seq, time_s, offset_bytes) VALUES (?1, ?2, ?3, ?4)")
        .map_err(db(ctx))?;
    for (seq, (t, off)) in ix.points.iter().enumerate() {
        st.execute(params![toi, seq as i64, t, *off as i64])
            .map_err(db(ctx))?;
    }
    if let Some(detail) = &ix.detail {
        crate::renditions::put_media_detail(tx, toi, detail)?;
    }
    Ok(())
}

/// Records packet digest rows `(sbn, n × 16 bytes)` of object `toi` in `tx`.
pub(crate) fn put_digest_rows(
    tx: &Transaction<'_>,
    toi: u32,
    rows: &[(u32, Vec<u8>)],
) -> Result<(), StoreError> {
    let ctx = "recording packet digests";
    let mut st = tx
        .prepare("INSERT OR REPLACE INTO packet_digests (toi, sbn, digests) VALUES (?1, ?2, ?3)")
        .map_err(db(ctx))?;
    for (sbn, digests) in rows {
        st.execute(params![toi, sbn, digests]).map_err(db(ctx))?;
    }
    Ok(())
}

fn insert_blocks(tx: &Transaction<'_>, toi: u32, blocks: &[BlockRecord]) -> Result<(), StoreError> {
    let mut st = tx
        .prepare(
            "INSERT INTO blocks (toi, member, block, packets, crc32c) VALUES (?1, ?2, ?3, ?4, ?5)",
        )
        .map_err(db("recording block checksums"))?;
    for b in blocks {
        st.execute(params![toi, b.member, b.block as i64, b.packets, b.crc32c])
            .map_err(db("recording block checksums"))?;
    }
    Ok(())
}

/// The state an object row is created in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NewRow {
    /// Being ingested: its CRC and the object it replaces as `rec` says.
    Writing,
    /// Being filled from an origin: CRC 0 until it completes, replacing nothing.
    Filling,
}

/// Inserts the `objects` row of `rec` in state `state` (the one writer of new rows, for
/// ingest and fills); its TOI.
pub(crate) fn insert_object_row(
    conn: &rusqlite::Connection,
    rec: &ObjectRecord,
    state: NewRow,
    ctx: &'static str,
) -> Result<u32, StoreError> {
    let (state, crc, replaces) = match state {
        NewRow::Writing => ("writing", rec.content_crc32c, rec.replaces),
        NewRow::Filling => ("filling", 0, None),
    };
    conn.execute(
        "INSERT INTO objects (name, state, size_bytes, bitrate_bps, duration_s, content_type, symbol_len,
         source_symbols, repair_symbols, codewords, content_crc32c, created_unix, replaces)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
        params![
            rec.name,
            state,
            rec.size_bytes as i64,
            rec.bitrate_bps as i64,
            rec.duration_s,
            rec.content_type,
            rec.symbol_len,
            rec.source_symbols,
            rec.repair_symbols,
            rec.codewords,
            crc,
            rec.created_unix,
            replaces
        ],
    )
    .map_err(db(ctx))?;
    u32::try_from(conn.last_insert_rowid())
        .map_err(|_| StoreError::Corrupt("catalog: transport object identifiers exhausted".into()))
}
