//! The protection tables (issue 32; docs/format.md, "Protection tables"): the wrapped
//! content key of each encrypted object and its segments (where each lies in the stored
//! ciphertext and in the clear media, its times and its IV). Added after format version 2
//! shipped like the rendition tables: created when missing at every open, so an older
//! catalog opens with no encrypted object; an older isnode ignores them (and would serve
//! an encrypted object's ciphertext with a clear playlist that does not play).
//!
//! The store keeps the key wrapped and never unwraps it: the node key is not the store's
//! (`isnode-keys`). A row is written in the ingest's own steps, before the object commits,
//! so an object never appears without its key.

use rusqlite::{params, OptionalExtension, Transaction};

use crate::catalog::{db, Catalog};
use crate::StoreError;

/// Length of a wrapped content key (AES-KW of 16 bytes).
pub const WRAPPED_KEY_LEN: usize = 24;
/// Length of a key id.
pub const KEY_ID_LEN: usize = 16;
/// Length of a node key's id.
pub const NODE_KEY_ID_LEN: usize = 8;
/// Length of a segment's IV.
pub const IV_LEN: usize = 16;
/// Most segments of one encrypted object (a day of 2 s segments, with room).
pub const MAX_SEGMENT_ROWS: usize = 100_000;
/// The one method written: HLS `METHOD=AES-128` (each segment AES-128-CBC, PKCS#7).
pub const METHOD_AES_128: &str = "aes-128";
/// The one wrap written: AES-KW (RFC 3394) with a 256-bit key-encryption key.
pub const WRAP_AES_KW_256: &str = "aes-kw-256";

/// The tables, created when missing at every open.
pub(crate) const PROTECTION_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS object_keys (
    toi         INTEGER PRIMARY KEY REFERENCES objects(toi) ON DELETE CASCADE,
    method      TEXT NOT NULL,
    key_id      BLOB NOT NULL,
    wrap        TEXT NOT NULL,
    wrapped_key BLOB NOT NULL,
    node_key_id BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS protected_segments (
    toi          INTEGER NOT NULL REFERENCES objects(toi) ON DELETE CASCADE,
    seq          INTEGER NOT NULL,
    offset_bytes INTEGER NOT NULL,
    length_bytes INTEGER NOT NULL,
    clear_offset INTEGER NOT NULL,
    clear_length INTEGER NOT NULL,
    start_s      REAL NOT NULL,
    duration_s   REAL NOT NULL,
    iv           BLOB NOT NULL,
    PRIMARY KEY (toi, seq)
) WITHOUT ROWID;
";

/// One encrypted segment (`protected_segments`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProtectedSegment {
    /// First byte of its ciphertext in the object.
    pub offset_bytes: u64,
    /// Bytes of ciphertext (a multiple of 16).
    pub length_bytes: u64,
    /// First byte of its clear text in the media ingested.
    pub clear_offset: u64,
    /// Bytes of clear text.
    pub clear_length: u64,
    /// Its start, seconds from the title's start.
    pub start_s: f64,
    /// Its duration, seconds.
    pub duration_s: f64,
    /// Its CBC initialisation vector (not secret: the playlist carries it).
    pub iv: [u8; IV_LEN],
}

/// The key of an encrypted object (`object_keys`) and its segments. The key is wrapped:
/// what this holds may be printed.
#[derive(Clone, Debug, PartialEq)]
pub struct ProtectionRecord {
    /// The method ([`METHOD_AES_128`]).
    pub method: String,
    /// The content key's id.
    pub key_id: [u8; KEY_ID_LEN],
    /// How the key is wrapped ([`WRAP_AES_KW_256`]).
    pub wrap: String,
    /// The content key wrapped by the node key.
    pub wrapped_key: [u8; WRAPPED_KEY_LEN],
    /// The id of the node key that wrapped it.
    pub node_key_id: [u8; NODE_KEY_ID_LEN],
    /// The segments, in order, covering the object.
    pub segments: Vec<ProtectedSegment>,
}

/// A blob column of exactly `N` bytes.
fn fixed<const N: usize>(v: Vec<u8>, what: &str) -> Result<[u8; N], String> {
    let got = v.len();
    v.try_into()
        .map_err(|_| format!("{what} is {got} bytes, not {N}"))
}

/// Whether `rec` is a record the server can use for an object of `size_bytes`: known
/// method and wrap, segments in order covering `[0, size_bytes)`, lengths multiples of 16,
/// finite times.
pub fn check_protection(rec: &ProtectionRecord, size_bytes: u64) -> Result<(), String> {
    if rec.method != METHOD_AES_128 || rec.wrap != WRAP_AES_KW_256 {
        return Err(format!(
            "unknown method {:?} or wrap {:?}",
            rec.method, rec.wrap
        ));
    }
    if rec.segments.is_empty() || rec.segments.len() > MAX_SEGMENT_ROWS {
        return Err(format!("{} segments", rec.segments.len()));
    }
    let mut at = 0u64;
    for (i, s) in rec.segments.iter().enumerate() {
        let ok = s.offset_bytes == at
            && s.length_bytes > 0
            && s.length_bytes % 16 == 0
            && s.start_s.is_finite()
            && s.duration_s.is_finite()
            && s.start_s >= 0.0
            && s.duration_s >= 0.0;
        if !ok {
            return Err(format!(
                "segment {i} does not follow the one before or is malformed"
            ));
        }
        at = s.offset_bytes.saturating_add(s.length_bytes);
    }
    match at == size_bytes {
        true => Ok(()),
        false => Err(format!(
            "segments end at byte {at}, the object at {size_bytes}"
        )),
    }
}

/// Writes object `toi`'s key and segments in `tx` (replacing any).
pub(crate) fn put_protection(
    tx: &Transaction<'_>,
    toi: u32,
    rec: &ProtectionRecord,
) -> Result<(), StoreError> {
    let ctx = "recording the object's key";
    for table in ["object_keys", "protected_segments"] {
        tx.execute(&format!("DELETE FROM {table} WHERE toi = ?1"), [toi])
            .map_err(db(ctx))?;
    }
    tx.execute(
        "INSERT INTO object_keys (toi, method, key_id, wrap, wrapped_key, node_key_id)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![
            toi,
            rec.method,
            &rec.key_id[..],
            rec.wrap,
            &rec.wrapped_key[..],
            &rec.node_key_id[..]
        ],
    )
    .map_err(db(ctx))?;
    let mut q = tx
        .prepare(
            "INSERT INTO protected_segments (toi, seq, offset_bytes, length_bytes, clear_offset,
             clear_length, start_s, duration_s, iv) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        )
        .map_err(db(ctx))?;
    for (seq, s) in rec.segments.iter().enumerate() {
        q.execute(params![
            toi,
            seq as i64,
            s.offset_bytes as i64,
            s.length_bytes as i64,
            s.clear_offset as i64,
            s.clear_length as i64,
            s.start_s,
            s.duration_s,
            &s.iv[..]
        ])
        .map_err(db(ctx))?;
    }
    Ok(())
}

/// The key row of `toi` as stored, its columns checked.
type KeyRow = (
    String,
    [u8; KEY_ID_LEN],
    String,
    [u8; WRAPPED_KEY_LEN],
    [u8; NODE_KEY_ID_LEN],
);

impl Catalog {
    /// Records the key and segments of object `toi` (still `writing`: they go with it).
    pub fn set_protection(&mut self, toi: u32, rec: &ProtectionRecord) -> Result<(), StoreError> {
        let ctx = "recording the object's key";
        let tx = self.write_transaction(ctx)?;
        put_protection(&tx, toi, rec)?;
        tx.commit().map_err(db(ctx))
    }

    /// The key and segments of object `toi`; `None` for an object stored in the clear.
    /// A row that breaks the rules is an error naming the object ([`check_protection`]).
    pub fn protection(&self, toi: u32) -> Result<Option<ProtectionRecord>, StoreError> {
        let Some(key) = self.key_row(toi)? else {
            return Ok(None);
        };
        let segments = self.protected_segments(toi)?;
        let (method, key_id, wrap, wrapped_key, node_key_id) = key;
        let rec = ProtectionRecord {
            method,
            key_id,
            wrap,
            wrapped_key,
            node_key_id,
            segments,
        };
        let size: i64 = self
            .conn
            .query_row(
                "SELECT size_bytes FROM objects WHERE toi = ?1",
                [toi],
                |r| r.get(0),
            )
            .map_err(db("reading the object's size"))?;
        check_protection(&rec, u64::try_from(size).unwrap_or(u64::MAX))
            .map_err(|why| bad_row(toi, why))?;
        Ok(Some(rec))
    }

    fn key_row(&self, toi: u32) -> Result<Option<KeyRow>, StoreError> {
        let raw: Option<(String, Vec<u8>, String, Vec<u8>, Vec<u8>)> = self
            .conn
            .query_row(
                "SELECT method, key_id, wrap, wrapped_key, node_key_id FROM object_keys WHERE toi = ?1",
                [toi],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
            )
            .optional()
            .map_err(db("reading the object's key"))?;
        let Some((method, id, wrap, wrapped, node)) = raw else {
            return Ok(None);
        };
        let row = (|| {
            Ok::<_, String>((
                method,
                fixed(id, "key_id")?,
                wrap,
                fixed(wrapped, "wrapped_key")?,
                fixed(node, "node_key_id")?,
            ))
        })()
        .map_err(|why| bad_row(toi, why))?;
        Ok(Some(row))
    }

    fn protected_segments(&self, toi: u32) -> Result<Vec<ProtectedSegment>, StoreError> {
        let ctx = "reading the object's segments";
        let mut q = self
            .conn
            .prepare(
                "SELECT offset_bytes, length_bytes, clear_offset, clear_length, start_s, duration_s, iv
                 FROM protected_segments WHERE toi = ?1 ORDER BY seq LIMIT ?2",
            )
            .map_err(db(ctx))?;
        let rows = q
            .query_map(params![toi, MAX_SEGMENT_ROWS as i64 + 1], |r| {
                Ok((
                    [r.get::<_, i64>(0)?, r.get(1)?, r.get(2)?, r.get(3)?],
                    r.get::<_, f64>(4)?,
                    r.get::<_, f64>(5)?,
                    r.get::<_, Vec<u8>>(6)?,
                ))
            })
            .map_err(db(ctx))?;
        let mut out = Vec::new();
        for row in rows {
            let (ints, start_s, duration_s, iv) = row.map_err(db(ctx))?;
            let [o, l, co, cl] = ints.map(|v| u64::try_from(v).unwrap_or(u64::MAX));
            out.push(ProtectedSegment {
                offset_bytes: o,
                length_bytes: l,
                clear_offset: co,
                clear_length: cl,
                start_s,
                duration_s,
                iv: fixed(iv, "iv").map_err(|why| bad_row(toi, why))?,
            });
        }
        Ok(out)
    }

    /// Every key row: `(toi, wrapped key, node key id)` (what a rewrap reads).
    pub fn wrapped_keys(
        &self,
    ) -> Result<Vec<(u32, [u8; WRAPPED_KEY_LEN], [u8; NODE_KEY_ID_LEN])>, StoreError> {
        let ctx = "reading the wrapped keys";
        let mut q = self
            .conn
            .prepare("SELECT toi, wrapped_key, node_key_id FROM object_keys ORDER BY toi")
            .map_err(db(ctx))?;
        let rows = q
            .query_map([], |r| {
                Ok((
                    r.get::<_, u32>(0)?,
                    r.get::<_, Vec<u8>>(1)?,
                    r.get::<_, Vec<u8>>(2)?,
                ))
            })
            .map_err(db(ctx))?;
        let mut out = Vec::new();
        for row in rows {
            let (toi, w, n) = row.map_err(db(ctx))?;
            let w = fixed(w, "wrapped_key").map_err(|why| bad_row(toi, why))?;
            let n = fixed(n, "node_key_id").map_err(|why| bad_row(toi, why))?;
            out.push((toi, w, n));
        }
        Ok(out)
    }

    /// Replaces the wrapped keys of `rows` `(toi, wrapped key, node key id)` in one
    /// transaction (a rewrap under a new node key: all or none).
    pub fn rewrap_keys(
        &mut self,
        rows: &[(u32, [u8; WRAPPED_KEY_LEN], [u8; NODE_KEY_ID_LEN])],
    ) -> Result<(), StoreError> {
        let ctx = "rewrapping the keys";
        let tx = self.write_transaction(ctx)?;
        for (toi, w, n) in rows {
            tx.execute(
                "UPDATE object_keys SET wrapped_key = ?2, node_key_id = ?3 WHERE toi = ?1",
                params![toi, &w[..], &n[..]],
            )
            .map_err(db(ctx))?;
        }
        tx.commit().map_err(db(ctx))
    }
}

fn bad_row(toi: u32, why: String) -> StoreError {
    StoreError::Corrupt(format!("object TOI {toi}: bad key row: {why}"))
}
