//! Catalog rows validated when read (sans-IO): every invariant an object row and its
//! block rows must satisfy (`docs/format.md`, "Row invariants"). A row that breaks one
//! makes that object *bad*: it is listed with its problem and never served; every other
//! object is unaffected.

use rusqlite::types::Value;
use serde::Serialize;

use crate::records::{BlockRecord, ObjectRecord, ObjectState};
pub use crate::validate::{check_bitrate, MAX_BITRATE_BPS, MAX_CONTENT_TYPE_LEN};
use crate::{Layout, VolumeParams};

/// Largest accepted difference between a row's `duration_s` and `size * 8 / bitrate`,
/// relative to the latter (the two are computed once at ingest, with f64).
const DURATION_TOLERANCE: f64 = 1e-9;

/// An object row exactly as stored: every column as SQLite returns it, before any
/// conversion (a value of the wrong type or range must not fail the whole listing).
#[derive(Clone, Debug, PartialEq)]
pub struct RawObjectRow {
    /// `toi` (an INTEGER PRIMARY KEY: always an integer).
    pub toi: i64,
    /// The other columns, in [`crate::catalog`] `SELECT_OBJECT` order (`name` first).
    pub columns: Vec<Value>,
}

/// Names of the columns of [`RawObjectRow::columns`], in order.
pub(crate) const OBJECT_COLUMNS: [&str; 13] = [
    "name",
    "state",
    "size_bytes",
    "bitrate_bps",
    "duration_s",
    "content_type",
    "symbol_len",
    "source_symbols",
    "repair_symbols",
    "codewords",
    "content_crc32c",
    "created_unix",
    "replaces",
];

/// An object whose catalog row breaks an invariant: listed, never served.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BadObject {
    /// The row's values, each converted where it fits its type (0 or empty where it
    /// does not): for listing only, never to be trusted.
    pub record: ObjectRecord,
    /// The first invariant the row breaks, in words.
    pub problem: String,
}

/// An object as read from the catalog: valid, or bad with its problem.
#[derive(Clone, Debug, PartialEq)]
pub enum CatalogEntry {
    /// Every invariant holds: the object may be served.
    Valid(ObjectRecord),
    /// A row breaks an invariant: listed, never served.
    Bad(BadObject),
}

impl CatalogEntry {
    /// The record if valid.
    pub fn valid(self) -> Option<ObjectRecord> {
        match self {
            CatalogEntry::Valid(rec) => Some(rec),
            CatalogEntry::Bad(_) => None,
        }
    }

    /// The record: the valid one, or a bad one's values as well as they convert.
    pub fn record(&self) -> &ObjectRecord {
        match self {
            CatalogEntry::Valid(rec) => rec,
            CatalogEntry::Bad(bad) => &bad.record,
        }
    }
}

fn column<'a>(row: &'a RawObjectRow, name: &str) -> &'a Value {
    let i = OBJECT_COLUMNS.iter().position(|c| *c == name);
    i.and_then(|i| row.columns.get(i)).unwrap_or(&Value::Null)
}

/// The integer in `v`, or why there is none.
fn integer(v: &Value, name: &str) -> Result<i64, String> {
    match v {
        Value::Integer(i) => Ok(*i),
        other => Err(format!("{name} is not an integer ({})", type_name(other))),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "NULL",
        Value::Integer(_) => "an integer",
        Value::Real(_) => "a real",
        Value::Text(_) => "text",
        Value::Blob(_) => "a blob",
    }
}

fn unsigned<T: TryFrom<i64>>(v: &Value, name: &str) -> Result<T, String> {
    let i = integer(v, name)?;
    T::try_from(i).map_err(|_| format!("{name} = {i} is out of range"))
}

fn text(v: &Value, name: &str) -> Result<String, String> {
    match v {
        Value::Text(s) => Ok(s.clone()),
        other => Err(format!("{name} is not text ({})", type_name(other))),
    }
}

/// The row as well as it converts: for listing a bad object.
fn lossy(row: &RawObjectRow) -> ObjectRecord {
    let int = |name| integer(column(row, name), name).unwrap_or(0);
    let clamp_u32 = |name| int(name).clamp(0, i64::from(u32::MAX)) as u32;
    let txt = |name| match column(row, name) {
        Value::Text(s) => s.clone(),
        Value::Blob(b) => String::from_utf8_lossy(b).into_owned(),
        _ => String::new(),
    };
    let duration_s = match column(row, "duration_s") {
        Value::Real(f) if f.is_finite() => *f,
        Value::Integer(i) => *i as f64,
        _ => 0.0,
    };
    ObjectRecord {
        toi: row.toi.clamp(0, i64::from(u32::MAX)) as u32,
        name: txt("name"),
        state: state(row).unwrap_or(ObjectState::Writing),
        size_bytes: int("size_bytes").max(0) as u64,
        bitrate_bps: int("bitrate_bps").max(0) as u64,
        duration_s,
        content_type: txt("content_type"),
        symbol_len: clamp_u32("symbol_len"),
        source_symbols: clamp_u32("source_symbols"),
        repair_symbols: clamp_u32("repair_symbols"),
        codewords: clamp_u32("codewords"),
        content_crc32c: clamp_u32("content_crc32c"),
        created_unix: int("created_unix"),
        replaces: None,
    }
}

fn state(row: &RawObjectRow) -> Result<ObjectState, String> {
    match text(column(row, "state"), "state")?.as_str() {
        "complete" => Ok(ObjectState::Complete),
        "writing" => Ok(ObjectState::Writing),
        "filling" => Ok(ObjectState::Filling),
        s => Err(format!(
            "state {s:?} is not \"writing\", \"complete\" or \"filling\""
        )),
    }
}

/// Validates an object row against the volume's parameters: the record, or the object
/// marked bad with the first invariant it breaks.
pub fn validate_object(row: &RawObjectRow, volume: &VolumeParams) -> CatalogEntry {
    match convert(row, volume) {
        Ok(rec) => CatalogEntry::Valid(rec),
        Err(problem) => CatalogEntry::Bad(BadObject {
            record: lossy(row),
            problem,
        }),
    }
}

fn convert(row: &RawObjectRow, volume: &VolumeParams) -> Result<ObjectRecord, String> {
    let toi = u32::try_from(row.toi)
        .ok()
        .filter(|t| *t != 0)
        .ok_or_else(|| format!("toi = {} is not in 1..=2^32-1 (TOI 0 is the FDT)", row.toi))?;
    let name = text(column(row, "name"), "name")?;
    crate::validate::validate_name(&name).map_err(|e| e.to_string())?;
    let rec = ObjectRecord {
        toi,
        name,
        state: state(row)?,
        size_bytes: unsigned(column(row, "size_bytes"), "size_bytes")?,
        bitrate_bps: unsigned(column(row, "bitrate_bps"), "bitrate_bps")?,
        duration_s: match column(row, "duration_s") {
            Value::Real(f) => *f,
            Value::Integer(i) => *i as f64,
            other => return Err(format!("duration_s is not a number ({})", type_name(other))),
        },
        content_type: text(column(row, "content_type"), "content_type")?,
        symbol_len: unsigned(column(row, "symbol_len"), "symbol_len")?,
        source_symbols: unsigned(column(row, "source_symbols"), "source_symbols")?,
        repair_symbols: unsigned(column(row, "repair_symbols"), "repair_symbols")?,
        codewords: unsigned(column(row, "codewords"), "codewords")?,
        content_crc32c: unsigned(column(row, "content_crc32c"), "content_crc32c")?,
        created_unix: integer(column(row, "created_unix"), "created_unix")?,
        replaces: match column(row, "replaces") {
            Value::Null => None,
            v => Some(unsigned(v, "replaces")?),
        },
    };
    check_record(&rec, volume)?;
    Ok(rec)
}

/// The invariants between the fields of a record (types and ranges already hold).
pub fn check_record(rec: &ObjectRecord, volume: &VolumeParams) -> Result<(), String> {
    check_bitrate(rec.bitrate_bps)?;
    crate::validate::check_content_type(&rec.content_type)?;
    let expected_s = rec.size_bytes as f64 * 8.0 / rec.bitrate_bps as f64;
    let off = (rec.duration_s - expected_s).abs();
    if !rec.duration_s.is_finite() || off > DURATION_TOLERANCE * expected_s.max(1.0) {
        return Err(format!(
            "duration_s = {} does not match size_bytes * 8 / bitrate_bps = {expected_s}",
            rec.duration_s
        ));
    }
    let layout = layout_of(rec, volume)?;
    if layout.codewords() != rec.codewords {
        return Err(format!(
            "codewords = {} but {} bytes in codewords of at most {} symbols of {} bytes make {}",
            rec.codewords,
            rec.size_bytes,
            rec.source_symbols,
            rec.symbol_len,
            layout.codewords()
        ));
    }
    if rec.codewords > isnode_wire::MAX_SBN + 1 {
        return Err(format!(
            "{} codewords, more than a 24-bit source block number can address",
            rec.codewords
        ));
    }
    Ok(())
}

/// The layout of `rec` on a volume with `volume`'s members and blocks, or why its coding
/// parameters are impossible (symbol length 0 or past a UDP payload, k + m > 255, ...).
fn layout_of(rec: &ObjectRecord, volume: &VolumeParams) -> Result<Layout, String> {
    let params = VolumeParams {
        symbol_len: rec.symbol_len,
        source_symbols: rec.source_symbols,
        repair_symbols: rec.repair_symbols,
        ..*volume
    };
    Layout::new(params, rec.size_bytes).map_err(|e| e.to_string())
}

/// A block row exactly as stored (`member`, `block`, `packets`, `crc32c`).
pub type RawBlockRow = [Value; 4];

/// Block rows an object laid out as `layout` must have (one per block of every member).
pub fn expected_block_rows(layout: &Layout) -> u64 {
    (0..layout.params().members)
        .map(|m| layout.member_blocks(m))
        .sum()
}

/// Validates every block row of a valid object (as
/// [`crate::catalog::Catalog::all_block_rows`] reads them): the records of each member,
/// by block index. A row naming a member the volume does not have is a problem too.
pub fn validate_all_blocks(
    layout: &Layout,
    rows: &[RawBlockRow],
) -> Result<Vec<Vec<BlockRecord>>, String> {
    let members = layout.params().members;
    let mut per_member: Vec<Vec<RawBlockRow>> = vec![Vec::new(); members as usize];
    for row in rows {
        let m: u32 = unsigned(&row[0], "block member")?;
        let slot = per_member.get_mut(m as usize).ok_or_else(|| {
            format!("a block row names member {m}, but the volume has {members} members")
        })?;
        slot.push(row.clone());
    }
    per_member
        .iter()
        .zip(0..members)
        .map(|(rows, m)| validate_blocks(layout, m, rows))
        .collect()
}

/// The values of a block row, each in its type's range (no check against a layout).
pub(crate) fn block_record(row: &RawBlockRow) -> Result<BlockRecord, String> {
    let [m, b, p, c] = row;
    Ok(BlockRecord {
        member: unsigned(m, "block member")?,
        block: unsigned(b, "block index")?,
        packets: unsigned(p, "block packets")?,
        crc32c: unsigned(c, "block crc32c")?,
    })
}

/// Validates the block rows of one member of a valid object: one row for every block of
/// the member's segment file, each with the number of packets the layout puts there.
pub fn validate_blocks(
    layout: &Layout,
    member: u32,
    rows: &[RawBlockRow],
) -> Result<Vec<BlockRecord>, String> {
    let expected = layout.member_blocks(member);
    let mut out = Vec::with_capacity(rows.len().min(expected as usize));
    for row in rows {
        let [m, b, p, c] = row;
        let rec = BlockRecord {
            member: unsigned(m, "block member")?,
            block: unsigned(b, "block index")?,
            packets: unsigned(p, "block packets")?,
            crc32c: unsigned(c, "block crc32c")?,
        };
        if rec.member != member {
            return Err(format!(
                "a block row of member {member} says member {}",
                rec.member
            ));
        }
        if rec.block >= expected {
            return Err(format!(
                "member {member} has a row for block {}, but its segment has {expected} block(s)",
                rec.block
            ));
        }
        let packets = layout.packets_in_block(member, rec.block);
        if rec.packets != packets {
            return Err(format!(
                "member {member} block {}: {} packets recorded, the layout puts {packets} there",
                rec.block, rec.packets
            ));
        }
        out.push(rec);
    }
    if out.len() as u64 != expected {
        return Err(format!(
            "member {member} has {} block row(s), its segment has {expected} block(s)",
            out.len()
        ));
    }
    Ok(out)
}

/// Most random-access points an object's time index may have.
pub const MAX_MEDIA_POINTS: usize = 1 << 20;

/// An object's time index rows exactly as stored: `media_meta` (`container`,
/// `moov_at_front`) and its `media_index` rows (`seq`, `time_s`, `offset_bytes`), by `seq`.
#[derive(Clone, Debug, PartialEq)]
pub struct RawMediaIndex {
    /// `media_meta.container`.
    pub container: Value,
    /// `media_meta.moov_at_front`.
    pub moov_at_front: Value,
    /// `media_index` rows, by `seq` (at most [`MAX_MEDIA_POINTS`] + 1 read).
    pub points: Vec<[Value; 3]>,
}

/// Validates a time index of an object of `size_bytes` bytes: a known container,
/// `moov_at_front` NULL, 0 or 1, `seq` 0, 1, ..., at most [`MAX_MEDIA_POINTS`] points,
/// each with a finite non-negative time and an offset inside the object, both strictly
/// increasing.
pub fn validate_media_index(
    raw: &RawMediaIndex,
    size_bytes: u64,
) -> Result<crate::records::MediaIndexRecord, String> {
    let container = text(&raw.container, "media container")?;
    if !["mpeg-ts", "mp4", "unknown"].contains(&container.as_str()) {
        return Err(format!(
            "media container {container:?} is not mpeg-ts, mp4 or unknown"
        ));
    }
    let moov_at_front = match &raw.moov_at_front {
        Value::Null => None,
        Value::Integer(0) => Some(false),
        Value::Integer(1) => Some(true),
        other => {
            return Err(format!(
                "moov_at_front is not NULL, 0 or 1 ({})",
                type_name(other)
            ))
        }
    };
    if raw.points.len() > MAX_MEDIA_POINTS {
        return Err(format!(
            "the media index has more than {MAX_MEDIA_POINTS} points"
        ));
    }
    let mut points: Vec<(f64, u64)> = Vec::with_capacity(raw.points.len());
    for (i, [seq, t, off]) in raw.points.iter().enumerate() {
        if integer(seq, "media index seq")? != i as i64 {
            return Err(format!("media index seq {seq:?} where {i} was expected"));
        }
        let time_s = match t {
            Value::Real(f) => *f,
            Value::Integer(n) => *n as f64,
            other => {
                return Err(format!(
                    "media index time is not a number ({})",
                    type_name(other)
                ))
            }
        };
        let offset: u64 = unsigned(off, "media index offset_bytes")?;
        if !time_s.is_finite() || time_s < 0.0 {
            return Err(format!(
                "media index point {i}: time {time_s} is not a finite time >= 0"
            ));
        }
        if offset >= size_bytes {
            return Err(format!(
                "media index point {i}: offset {offset} is past the object's {size_bytes} bytes"
            ));
        }
        if let Some(&(pt, po)) = points.last() {
            if time_s <= pt || offset <= po {
                return Err(format!(
                    "media index point {i} ({time_s} s, byte {offset}) is not after the previous one"
                ));
            }
        }
        points.push((time_s, offset));
    }
    Ok(crate::records::MediaIndexRecord {
        container,
        moov_at_front,
        points,
        detail: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> VolumeParams {
        VolumeParams {
            symbol_len: 16,
            source_symbols: 10,
            repair_symbols: 4,
            members: 4,
            block_len: 4096,
        }
    }

    /// A valid row of a 1000-byte object at 8000 bit/s.
    fn row() -> RawObjectRow {
        let p = params();
        let layout = Layout::new(p, 1000).unwrap();
        RawObjectRow {
            toi: 3,
            columns: vec![
                Value::Text("a.ts".into()),
                Value::Text("complete".into()),
                Value::Integer(1000),
                Value::Integer(8000),
                Value::Real(1.0),
                Value::Text("video/mp2t".into()),
                Value::Integer(16),
                Value::Integer(10),
                Value::Integer(4),
                Value::Integer(i64::from(layout.codewords())),
                Value::Integer(7),
                Value::Integer(1_700_000_000),
                Value::Null,
            ],
        }
    }

    fn with(name: &str, v: Value) -> RawObjectRow {
        let mut r = row();
        let i = OBJECT_COLUMNS.iter().position(|c| *c == name).unwrap();
        r.columns[i] = v;
        r
    }

    #[test]
    fn a_valid_row_converts() {
        let rec = validate_object(&row(), &params()).valid().unwrap();
        assert_eq!((rec.toi, rec.size_bytes, rec.bitrate_bps), (3, 1000, 8000));
    }

    #[test]
    fn every_impossible_value_is_named() {
        let cases = [
            (with("symbol_len", Value::Integer(0)), "symbol size"),
            (with("symbol_len", Value::Integer(100_000)), "UDP payload"),
            (with("symbol_len", Value::Integer(-1)), "symbol_len = -1"),
            (
                with("bitrate_bps", Value::Integer(-8000)),
                "bitrate_bps = -8000",
            ),
            (with("bitrate_bps", Value::Integer(0)), "bitrate_bps is 0"),
            (with("repair_symbols", Value::Integer(250)), "255"),
            (with("source_symbols", Value::Integer(0)), "source symbol"),
            (with("codewords", Value::Integer(99)), "codewords = 99"),
            (with("size_bytes", Value::Integer(-5)), "size_bytes = -5"),
            (with("size_bytes", Value::Integer(2000)), "duration_s"),
            (with("duration_s", Value::Real(f64::NAN)), "duration_s"),
            (with("name", Value::Blob(vec![0xff])), "name is not text"),
            (with("name", Value::Text("a..b".into())), "'..'"),
            (with("state", Value::Text("odd".into())), "state"),
            (
                with("content_crc32c", Value::Text("x".into())),
                "content_crc32c",
            ),
        ];
        for (r, want) in cases {
            let CatalogEntry::Bad(bad) = validate_object(&r, &params()) else {
                panic!("{want:?}: the row passed");
            };
            assert!(
                bad.problem.contains(want),
                "{want:?} not in {:?}",
                bad.problem
            );
        }
        let CatalogEntry::Bad(bad) = validate_object(
            &RawObjectRow {
                toi: 1 << 40,
                ..row()
            },
            &params(),
        ) else {
            panic!("a TOI past 2^32 passed");
        };
        assert!(bad.problem.contains("toi"), "{}", bad.problem);
        assert_eq!(bad.record.name, "a.ts");
    }

    #[test]
    fn block_rows_must_match_the_layout() {
        let layout = Layout::new(params(), 1000).unwrap();
        let blocks = layout.member_blocks(0);
        assert_eq!(blocks, 1);
        let good = |packets: u32| -> RawBlockRow {
            [
                Value::Integer(0),
                Value::Integer(0),
                Value::Integer(i64::from(packets)),
                Value::Integer(5),
            ]
        };
        let p = layout.packets_in_block(0, 0);
        assert_eq!(validate_blocks(&layout, 0, &[good(p)]).unwrap().len(), 1);
        assert!(validate_blocks(&layout, 0, &[])
            .unwrap_err()
            .contains("0 block row"));
        let e = validate_blocks(&layout, 0, &[good(p + 1)]).unwrap_err();
        assert!(e.contains("packets recorded"), "{e}");
        let far = [
            Value::Integer(0),
            Value::Integer(9),
            Value::Integer(1),
            Value::Integer(5),
        ];
        assert!(validate_blocks(&layout, 0, &[good(p), far])
            .unwrap_err()
            .contains("block 9"));
        let negative = [
            Value::Integer(-1),
            Value::Integer(0),
            Value::Integer(1),
            Value::Integer(5),
        ];
        assert!(validate_blocks(&layout, 0, &[negative])
            .unwrap_err()
            .contains("out of range"));
    }

    #[test]
    fn media_index_rows_must_be_ordered_and_inside_the_object() {
        let raw = |points: Vec<(i64, f64, i64)>| RawMediaIndex {
            container: Value::Text("mpeg-ts".into()),
            moov_at_front: Value::Null,
            points: points
                .into_iter()
                .map(|(s, t, o)| [Value::Integer(s), Value::Real(t), Value::Integer(o)])
                .collect(),
        };
        let ok = validate_media_index(&raw(vec![(0, 0.0, 0), (1, 2.0, 500)]), 1000).unwrap();
        assert_eq!(ok.points, vec![(0.0, 0), (2.0, 500)]);
        for (points, want) in [
            (vec![(0, 0.0, 0), (1, 2.0, 1000)], "past the object"),
            (vec![(0, 0.0, -1)], "out of range"),
            (vec![(0, 1.0, 10), (1, 0.5, 20)], "not after"),
            (vec![(0, f64::NAN, 10)], "finite"),
            (vec![(1, 0.0, 0)], "seq"),
        ] {
            let e = validate_media_index(&raw(points), 1000).unwrap_err();
            assert!(e.contains(want), "{want:?} not in {e:?}");
        }
        let mut odd = raw(vec![]);
        odd.container = Value::Text("avi".into());
        assert!(validate_media_index(&odd, 1000).is_err());
    }

    #[test]
    fn a_block_row_of_a_member_the_volume_lacks_is_a_problem() {
        let layout = Layout::new(params(), 1000).unwrap();
        let stray = [
            Value::Integer(9),
            Value::Integer(0),
            Value::Integer(1),
            Value::Integer(5),
        ];
        let e = validate_all_blocks(&layout, &[stray]).unwrap_err();
        assert!(e.contains("member 9"), "{e}");
    }

    #[test]
    fn bitrates_past_the_limit_are_refused() {
        assert!(check_bitrate(MAX_BITRATE_BPS).is_ok());
        assert!(check_bitrate(MAX_BITRATE_BPS + 1).is_err());
        assert!(check_bitrate(u64::MAX).is_err());
        assert!(check_bitrate(0).is_err());
    }
}
