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
/// HLS `METHOD=AES-128` (MPEG-TS: each segment AES-128-CBC, PKCS#7).
pub const METHOD_AES_128: &str = "aes-128";
/// CENC `cbcs` (a fragmented MP4 / CMAF title): one segment row covering the object, its
/// IV the constant IV of the title's `tenc` (docs/format.md, "Protection tables").
pub const METHOD_CENC_CBCS: &str = "cenc-cbcs";
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
/// method and wrap, segments in order covering `[0, size_bytes)`, lengths multiples of 16
/// (AES-128; any length for `cenc-cbcs`, whose samples keep their lengths), finite times.
pub fn check_protection(rec: &ProtectionRecord, size_bytes: u64) -> Result<(), String> {
    let cbcs = rec.method == METHOD_CENC_CBCS;
    if !(rec.method == METHOD_AES_128 || cbcs) || rec.wrap != WRAP_AES_KW_256 {
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
            && (cbcs || s.length_bytes % 16 == 0)
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

/// A key row as read from SQLite: method, key id, wrap, wrapped key, node key id.
type RawKeyRow = (String, Vec<u8>, String, Vec<u8>, Vec<u8>);

/// One object's wrapped key (what a rewrap reads and writes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WrappedKey {
    /// The object.
    pub toi: u32,
    /// Its content key, wrapped.
    pub wrapped_key: [u8; WRAPPED_KEY_LEN],
    /// The node key that wrapped it.
    pub node_key_id: [u8; NODE_KEY_ID_LEN],
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
        let raw: Option<RawKeyRow> = self
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

    /// Every object's wrapped key (what a rewrap reads).
    pub fn wrapped_keys(&self) -> Result<Vec<WrappedKey>, StoreError> {
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
            out.push(WrappedKey {
                toi,
                wrapped_key: w,
                node_key_id: n,
            });
        }
        Ok(out)
    }

    /// Replaces the wrapped keys of `rows` in one transaction (a rewrap under a new node
    /// key: all or none).
    pub fn rewrap_keys(&mut self, rows: &[WrappedKey]) -> Result<(), StoreError> {
        let ctx = "rewrapping the keys";
        let tx = self.write_transaction(ctx)?;
        for r in rows {
            tx.execute(
                "UPDATE object_keys SET wrapped_key = ?2, node_key_id = ?3 WHERE toi = ?1",
                params![r.toi, &r.wrapped_key[..], &r.node_key_id[..]],
            )
            .map_err(db(ctx))?;
        }
        tx.commit().map_err(db(ctx))
    }
}

impl crate::volume::Volume {
    /// [`Catalog::rewrap_keys`] on this volume's catalog (`isnode volume rekey`).
    pub fn rewrap_keys(&mut self, rows: &[WrappedKey]) -> Result<(), StoreError> {
        self.catalog_mut().rewrap_keys(rows)
    }
}

fn bad_row(toi: u32, why: String) -> StoreError {
    StoreError::Corrupt(format!("object TOI {toi}: bad key row: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::{ingest_protected, IngestOptions, Protected};
    use crate::records::MediaIndexRecord;
    use crate::volume::Volume;
    use isnode_layout::VolumeParams;

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

    /// A record of `n` segments of 4800 bytes each (what a 4799-byte clear cut pads to).
    fn record(n: u64) -> ProtectionRecord {
        ProtectionRecord {
            method: METHOD_AES_128.into(),
            key_id: [7; KEY_ID_LEN],
            wrap: WRAP_AES_KW_256.into(),
            wrapped_key: [9; WRAPPED_KEY_LEN],
            node_key_id: [3; NODE_KEY_ID_LEN],
            segments: (0..n)
                .map(|i| ProtectedSegment {
                    offset_bytes: i * 4800,
                    length_bytes: 4800,
                    clear_offset: i * 4799,
                    clear_length: 4799,
                    start_s: i as f64 * 2.0,
                    duration_s: 2.0,
                    iv: [i as u8; IV_LEN],
                })
                .collect(),
        }
    }

    fn ingest(vol: &mut Volume, name: &str, rec: &ProtectionRecord) -> crate::ObjectRecord {
        let len: u64 = rec.segments.iter().map(|s| s.length_bytes).sum();
        let data = vec![0x5au8; len as usize];
        let opts = IngestOptions {
            name: name.into(),
            bitrate_bps: 1_000_000,
            content_type: "video/mp2t".into(),
            replace: true,
        };
        let protected = Protected {
            index: MediaIndexRecord {
                container: "mpeg-ts".into(),
                moov_at_front: None,
                points: rec
                    .segments
                    .iter()
                    .map(|s| (s.start_s, s.offset_bytes))
                    .collect(),
                detail: None,
            },
            protection: rec.clone(),
            origin_etag: None,
        };
        ingest_protected(
            vol,
            &opts,
            &mut data.as_slice(),
            len,
            &mut |_| {},
            &protected,
        )
        .unwrap()
    }

    #[test]
    fn the_key_and_segments_commit_with_the_object_and_go_with_it() {
        let (_d, mut vol) = volume();
        let rec = record(3);
        let obj = ingest(&mut vol, "a.ts", &rec);
        assert_eq!(
            vol.catalog().protection(obj.toi).unwrap(),
            Some(rec.clone())
        );
        let ix = vol.catalog().media_index(obj.toi).unwrap().unwrap();
        assert_eq!(ix.points, [(0.0, 0), (2.0, 4800), (4.0, 9600)]);
        // Rewrapped: one transaction, read back.
        let mut rows = vol.catalog().wrapped_keys().unwrap();
        assert_eq!(rows.len(), 1);
        rows[0].wrapped_key = [1; WRAPPED_KEY_LEN];
        rows[0].node_key_id = [2; NODE_KEY_ID_LEN];
        vol.catalog_mut().rewrap_keys(&rows).unwrap();
        let back = vol.catalog().protection(obj.toi).unwrap().unwrap();
        assert_eq!((back.wrapped_key, back.node_key_id), ([1; 24], [2; 8]));
        // Replaced (`--replace`): the old rows go with the old object.
        let replaced = ingest(&mut vol, "a.ts", &record(2));
        assert_eq!(vol.catalog().wrapped_keys().unwrap().len(), 1);
        assert!(vol.catalog().protection(obj.toi).unwrap().is_none());
        assert_eq!(
            vol.catalog()
                .protection(replaced.toi)
                .unwrap()
                .unwrap()
                .segments
                .len(),
            2
        );
        // Deleted: no key row is left.
        vol.delete("a.ts").unwrap();
        assert!(vol.catalog().wrapped_keys().unwrap().is_empty());
    }

    /// An encrypted fill's origin row commits with its object: a catalog opened at the
    /// moment it commits (another process's listing, or a crash right after) already
    /// finds the origin ETag; an object that never commits leaves no origin row.
    #[cfg_attr(not(debug_assertions), ignore = "needs crash points (debug builds)")]
    #[test]
    fn an_encrypted_fills_origin_etag_commits_with_the_object() {
        let (dir, mut vol) = volume();
        let root = dir.path().join("vol");
        let rec = record(2);
        let len: u64 = rec.segments.iter().map(|s| s.length_bytes).sum();
        let data = vec![0x5au8; len as usize];
        let opts = IngestOptions {
            name: "f.ts".into(),
            bitrate_bps: 1_000_000,
            content_type: "video/mp2t".into(),
            replace: false,
        };
        let protected = Protected {
            index: MediaIndexRecord {
                container: "mpeg-ts".into(),
                moov_at_front: None,
                points: vec![(0.0, 0), (2.0, 4800)],
                detail: None,
            },
            protection: rec,
            origin_etag: Some("\"v1\"".into()),
        };
        let me = std::thread::current().id();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(None));
        let seen_in_hook = seen.clone();
        let hook_root = root.clone();
        let hook = crate::crash::hook::set(move |name| {
            if name == "after-commit" && std::thread::current().id() == me {
                let other = Volume::open(&hook_root).unwrap();
                *seen_in_hook.lock().unwrap() = Some(other.origin_etag("f.ts").unwrap());
            }
        });
        let mut src = data.as_slice();
        let obj = ingest_protected(&mut vol, &opts, &mut src, len, &mut |_| {}, &protected);
        drop(hook);
        let obj = obj.unwrap();
        assert_eq!(
            *seen.lock().unwrap(),
            Some(Some("\"v1\"".to_string())),
            "the origin ETag was not there when the object committed"
        );
        assert_eq!(vol.origin_etag("f.ts").unwrap().as_deref(), Some("\"v1\""));
        assert!(vol.catalog().protection(obj.toi).unwrap().is_some());
        // One that fails (short input) leaves no origin row behind.
        let short = vec![0u8; 100];
        let mut failing = protected.clone();
        failing.origin_etag = Some("\"v2\"".into());
        let opts2 = IngestOptions {
            name: "g.ts".into(),
            ..opts
        };
        let mut src = short.as_slice();
        assert!(ingest_protected(&mut vol, &opts2, &mut src, len, &mut |_| {}, &failing).is_err());
        assert_eq!(vol.origin_etag("g.ts").unwrap(), None);
        let rows = vol.catalog().count_origin_rows_for_tests().unwrap();
        assert_eq!(rows, 1, "only f.ts has an origin row");
        // Too long an ETag is refused before anything is written.
        failing.origin_etag = Some("x".repeat(crate::fill::MAX_ETAG_LEN + 1));
        let mut src = data.as_slice();
        assert!(ingest_protected(&mut vol, &opts2, &mut src, len, &mut |_| {}, &failing).is_err());
    }

    #[test]
    fn segments_that_do_not_cover_the_object_are_refused() {
        let mut rec = record(3);
        assert!(check_protection(&rec, 14_400).is_ok());
        assert!(check_protection(&rec, 14_416).is_err());
        rec.segments[1].offset_bytes += 16;
        assert!(check_protection(&rec, 14_400).is_err());
        let mut rec = record(2);
        rec.segments[1].length_bytes = 4801;
        assert!(check_protection(&rec, 9601).is_err());
        let mut rec = record(1);
        rec.method = "sample-aes".into();
        assert!(check_protection(&rec, 4800).is_err());
        // cbcs: one row of any length covering the object.
        let mut rec = record(1);
        rec.method = METHOD_CENC_CBCS.into();
        rec.segments[0].length_bytes = 4801;
        assert!(check_protection(&rec, 4801).is_ok());
        assert!(check_protection(&rec, 4800).is_err());
        // An ingest with such segments writes nothing.
        let (_d, mut vol) = volume();
        let bad = record(2);
        let opts = IngestOptions {
            name: "b.ts".into(),
            bitrate_bps: 1_000_000,
            content_type: "video/mp2t".into(),
            replace: false,
        };
        let p = Protected {
            index: MediaIndexRecord {
                container: "mpeg-ts".into(),
                moov_at_front: None,
                points: vec![],
                detail: None,
            },
            protection: bad,
            origin_etag: None,
        };
        let data = vec![0u8; 9000];
        let e = ingest_protected(&mut vol, &opts, &mut data.as_slice(), 9000, &mut |_| {}, &p);
        assert!(e.is_err());
        assert!(vol.catalog().complete_toi("b.ts").unwrap().is_none());
    }
}
