//! The state of each member (disk) as the catalog records it: ok, failed, or being
//! rebuilt (with its progress). Table `member_states` in `docs/format.md`; a member
//! without a row is ok.

use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;

use crate::StoreError;

/// The catalog tables of member states and of the segments a degraded ingest did not
/// write (added after format version 2 shipped: created
/// when missing, so an older catalog opens with every member ok).
pub(crate) const MEMBER_STATE_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS member_states (
    member       INTEGER PRIMARY KEY,
    state        TEXT NOT NULL CHECK (state IN ('ok', 'failed', 'rebuilding')),
    reason       TEXT NOT NULL,
    done_toi     INTEGER NOT NULL,
    done_bytes   INTEGER NOT NULL,
    changed_unix INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS missing_segments (
    toi    INTEGER NOT NULL REFERENCES objects(toi) ON DELETE CASCADE,
    member INTEGER NOT NULL,
    PRIMARY KEY (toi, member)
) WITHOUT ROWID;
";

/// Longest reason kept (longer ones are cut at a character boundary).
pub const MAX_REASON_BYTES: usize = 1024;

/// What the catalog says of one member.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum MemberState {
    /// Serving and written normally.
    Ok,
    /// Not to be trusted: reads go through the code, ingest writes the other members.
    Failed {
        /// Why, in words (read errors, directory missing, operator).
        reason: String,
    },
    /// Being rebuilt from the other members (`isnode volume rebuild`), object by object
    /// in TOI order.
    Rebuilding {
        /// Every complete object of TOI up to this one is rebuilt on the member.
        done_toi: u32,
        /// Bytes of segment files rebuilt so far.
        done_bytes: u64,
    },
}

impl MemberState {
    /// The state's name as stored: `ok`, `failed` or `rebuilding`.
    pub fn name(&self) -> &'static str {
        match self {
            MemberState::Ok => "ok",
            MemberState::Failed { .. } => "failed",
            MemberState::Rebuilding { .. } => "rebuilding",
        }
    }

    /// Whether the member must not be written or trusted (failed or being rebuilt).
    pub fn is_degraded(&self) -> bool {
        !matches!(self, MemberState::Ok)
    }
}

impl std::fmt::Display for MemberState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MemberState::Ok => write!(f, "ok"),
            MemberState::Failed { reason } => write!(f, "failed ({reason})"),
            MemberState::Rebuilding {
                done_toi,
                done_bytes,
            } => write!(
                f,
                "rebuilding (objects up to TOI {done_toi} done, {done_bytes} bytes)"
            ),
        }
    }
}

fn db(context: &'static str) -> impl FnOnce(rusqlite::Error) -> StoreError {
    move |source| StoreError::Catalog {
        context: context.to_string(),
        source,
    }
}

/// A stored row as read, before validation.
type RawRow = (i64, String, String, i64, i64);

/// The state of every member `0..members`; a member without a row is ok. A row that
/// breaks the schema's rules is [`StoreError::Corrupt`].
pub(crate) fn read_all(conn: &Connection, members: u32) -> Result<Vec<MemberState>, StoreError> {
    let ctx = "reading member states";
    let mut states = vec![MemberState::Ok; members as usize];
    let mut q = conn
        .prepare(
            "SELECT member, state, reason, done_toi, done_bytes FROM member_states ORDER BY member LIMIT ?1",
        )
        .map_err(db(ctx))?;
    let rows = q
        .query_map([i64::from(members) + 1], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .map_err(db(ctx))?;
    for row in rows {
        let raw: RawRow = row.map_err(db(ctx))?;
        let (member, state) = validate(raw, members).map_err(StoreError::Corrupt)?;
        states[member as usize] = state;
    }
    Ok(states)
}

/// Checks one stored row: a member of the volume, a known state, progress in range.
fn validate(
    (member, state, reason, done_toi, done_bytes): RawRow,
    members: u32,
) -> Result<(u32, MemberState), String> {
    let m = u32::try_from(member)
        .ok()
        .filter(|m| *m < members)
        .ok_or_else(|| format!("member state row names member {member}, not of this volume"))?;
    let bad = |what: &str| format!("member {m}: state row has {what}");
    let state = match state.as_str() {
        "ok" => MemberState::Ok,
        "failed" if reason.len() <= MAX_REASON_BYTES => MemberState::Failed { reason },
        "failed" => return Err(bad("a reason that is too long")),
        "rebuilding" => MemberState::Rebuilding {
            done_toi: u32::try_from(done_toi).map_err(|_| bad("an impossible TOI"))?,
            done_bytes: u64::try_from(done_bytes).map_err(|_| bad("negative progress"))?,
        },
        other => return Err(bad(&format!("unknown state {other:?}"))),
    };
    Ok((m, state))
}

/// Writes the state of `member` (inside the caller's transaction or connection).
pub(crate) fn write(conn: &Connection, member: u32, state: &MemberState) -> Result<(), StoreError> {
    let (reason, done_toi, done_bytes) = match state {
        MemberState::Ok => ("", 0u32, 0u64),
        MemberState::Failed { reason } => (cut(reason), 0, 0),
        MemberState::Rebuilding {
            done_toi,
            done_bytes,
        } => ("", *done_toi, *done_bytes),
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    conn.execute(
        "INSERT OR REPLACE INTO member_states (member, state, reason, done_toi, done_bytes, changed_unix)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![
            member,
            state.name(),
            reason,
            done_toi,
            i64::try_from(done_bytes).unwrap_or(i64::MAX),
            now
        ],
    )
    .map_err(db("recording a member state"))?;
    Ok(())
}

/// The state of one member (ok without a row).
pub(crate) fn read_one(
    conn: &Connection,
    member: u32,
    members: u32,
) -> Result<MemberState, StoreError> {
    let raw: Option<RawRow> = conn
        .query_row(
            "SELECT member, state, reason, done_toi, done_bytes FROM member_states WHERE member = ?1",
            [member],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .optional()
        .map_err(db("reading a member state"))?;
    match raw {
        None => Ok(MemberState::Ok),
        Some(raw) => Ok(validate(raw, members).map_err(StoreError::Corrupt)?.1),
    }
}

/// `reason` cut to [`MAX_REASON_BYTES`] at a character boundary.
fn cut(reason: &str) -> &str {
    let mut end = reason.len().min(MAX_REASON_BYTES);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    &reason[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn() -> Connection {
        let c = Connection::open_in_memory().unwrap();
        c.execute_batch(MEMBER_STATE_SCHEMA).unwrap();
        c
    }

    #[test]
    fn missing_rows_are_ok_and_states_round_trip() {
        let c = conn();
        assert_eq!(read_all(&c, 3).unwrap(), vec![MemberState::Ok; 3]);
        let failed = MemberState::Failed {
            reason: "read errors".into(),
        };
        let rebuilding = MemberState::Rebuilding {
            done_toi: 7,
            done_bytes: 1 << 40,
        };
        write(&c, 1, &failed).unwrap();
        write(&c, 2, &rebuilding).unwrap();
        assert_eq!(
            read_all(&c, 3).unwrap(),
            vec![MemberState::Ok, failed.clone(), rebuilding.clone()]
        );
        assert_eq!(read_one(&c, 2, 3).unwrap(), rebuilding);
        write(&c, 2, &MemberState::Ok).unwrap();
        assert_eq!(read_one(&c, 2, 3).unwrap(), MemberState::Ok);
    }

    #[test]
    fn impossible_rows_are_corrupt_not_panics() {
        let c = conn();
        c.execute(
            "INSERT INTO member_states VALUES (9, 'ok', '', 0, 0, 0)",
            [],
        )
        .unwrap();
        assert!(matches!(read_all(&c, 3), Err(StoreError::Corrupt(_))));
        let c = conn();
        c.execute(
            "INSERT INTO member_states VALUES (0, 'rebuilding', '', -1, 0, 0)",
            [],
        )
        .unwrap();
        assert!(matches!(read_all(&c, 3), Err(StoreError::Corrupt(_))));
    }

    #[test]
    fn long_reasons_are_cut_on_a_char_boundary() {
        let c = conn();
        let reason = "é".repeat(MAX_REASON_BYTES);
        write(&c, 0, &MemberState::Failed { reason }).unwrap();
        match read_one(&c, 0, 1).unwrap() {
            MemberState::Failed { reason } => assert!(reason.len() <= MAX_REASON_BYTES),
            other => panic!("{other:?}"),
        }
    }
}
