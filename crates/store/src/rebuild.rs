//! Rebuilding a replaced member (`isnode volume rebuild --member N`): every object's
//! segment on that member is decoded from the other members and rewritten,
//! byte-identical to what ingest wrote, object by object in TOI order. After each object
//! the segment is synced and renamed into place, and only then is the progress recorded
//! in the catalog (member state `rebuilding`, with its block checksums, in one
//! transaction), so a rebuild killed at any moment resumes after the last object it
//! recorded. The member goes failed (or ok) → rebuilding → ok.
//!
//! A rebuild takes the repair lock (`DIR/repair.lock`, like `volume check --repair`) and
//! nothing else: a running `isnode serve` keeps streaming, through the code while a
//! segment is missing, and from the rebuilt file once it is renamed into place (its
//! blocks are the same bytes, so the same checksums).

use std::fs;

use serde::Serialize;

use crate::codeword::Want;
use crate::lock::{FileLock, LockWait, REPAIR_LOCK_FILE};
use crate::members::MemberState;
use crate::pace::Pace;
use crate::read::{ObjectReader, ReadOrder};
use crate::records::ObjectRecord;
use crate::segment::SegmentWriter;
use crate::{StoreError, Volume};

/// Where a rebuild starts: from nothing, or after the objects a crashed one recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct RebuildStart {
    /// Objects of TOI up to this one are already rebuilt (0: none).
    pub done_toi: u32,
    /// Bytes already rebuilt.
    pub done_bytes: u64,
}

/// Where to start from the member's recorded state (pure): a rebuild in progress
/// resumes; any other state starts from nothing.
pub fn plan_start(state: &MemberState) -> RebuildStart {
    match state {
        MemberState::Rebuilding {
            done_toi,
            done_bytes,
        } => RebuildStart {
            done_toi: *done_toi,
            done_bytes: *done_bytes,
        },
        _ => RebuildStart {
            done_toi: 0,
            done_bytes: 0,
        },
    }
}

/// The objects still to rebuild after `start`, in TOI order (pure).
pub fn plan_objects(start: RebuildStart, objects: &[ObjectRecord]) -> Vec<ObjectRecord> {
    let mut todo: Vec<ObjectRecord> = objects
        .iter()
        .filter(|o| o.toi > start.done_toi)
        .cloned()
        .collect();
    todo.sort_by_key(|o| o.toi);
    todo
}

/// Where a rebuild is.
#[derive(Clone, Copy, Debug)]
pub struct RebuildProgress<'a> {
    /// Bytes of the member's segments written (including those of a resumed run).
    pub bytes_done: u64,
    /// Bytes the member's segments take in all.
    pub bytes_total: u64,
    /// The object being rebuilt.
    pub object: &'a str,
}

/// The outcome of a rebuild.
#[derive(Clone, Debug, Serialize)]
pub struct RebuildReport {
    /// The member rebuilt.
    pub member: u32,
    /// Where it started (`done_toi` > 0: resumed after a crash).
    pub start: RebuildStart,
    /// Objects rebuilt in this run.
    pub objects_rebuilt: u64,
    /// Bytes of segments written in this run.
    pub bytes_written: u64,
    /// Whether the pace stopped it before the end (the state stays `rebuilding`).
    pub stopped: bool,
    /// The member's state at the end.
    pub state: MemberState,
}

/// Rebuilds `member` of `vol` from the others (see the module documentation).
pub fn rebuild_member(
    vol: &mut Volume,
    member: u32,
    pace: &mut dyn Pace,
    progress: &mut dyn FnMut(RebuildProgress<'_>),
) -> Result<RebuildReport, StoreError> {
    let _repair_lock = FileLock::exclusive(&vol.root().join(REPAIR_LOCK_FILE), LockWait::Block)?;
    let state = vol.catalog().member_state(member)?;
    if vol.member_identity_present(member) {
        vol.member_identity_ok(member).map_err(|e| {
            StoreError::BadParams(format!(
                "member {member}: {e}; give the member an empty directory to rebuild onto"
            ))
        })?;
    } else {
        vol.prepare_member(member)?;
    }
    let start = plan_start(&state);
    let mut report = RebuildReport {
        member,
        start,
        objects_rebuilt: 0,
        bytes_written: 0,
        stopped: false,
        state: MemberState::Rebuilding {
            done_toi: start.done_toi,
            done_bytes: start.done_bytes,
        },
    };
    vol.catalog_mut().set_member_state(member, &report.state)?;
    let mut cursor = start;
    // Objects committed while this runs have higher TOIs, or (degraded ingests that began
    // before) a `missing_segments` row: go round until none is left.
    loop {
        let objects = vol.objects()?;
        let todo = plan_round(cursor, &objects, &vol.catalog().missing_segments(member)?);
        if todo.is_empty() {
            if vol.catalog_mut().finish_rebuild(member)? {
                break;
            }
            return Err(StoreError::Corrupt(format!(
                "member {member}: segments listed as missing belong to objects that cannot be \
                 rebuilt (bad rows: see `isnode volume check`)"
            )));
        }
        let total = cursor.done_bytes + bytes_of(vol, member, &todo)?;
        for rec in &todo {
            let mut tick = |written: u64| {
                progress(RebuildProgress {
                    bytes_done: cursor.done_bytes + written,
                    bytes_total: total,
                    object: &rec.name,
                })
            };
            let Some(written) = rebuild_object(vol, rec, (member, cursor), pace, &mut tick)? else {
                report.stopped = true;
                return Ok(report);
            };
            cursor = advance(cursor, rec.toi, written);
            report.bytes_written += written;
            report.objects_rebuilt += 1;
            report.state = MemberState::Rebuilding {
                done_toi: cursor.done_toi,
                done_bytes: cursor.done_bytes,
            };
            crate::crash::point("rebuild-object");
        }
    }
    report.state = MemberState::Ok;
    tracing::info!(member, objects = report.objects_rebuilt, "member rebuilt");
    Ok(report)
}

/// The progress after object `toi` (`written` bytes) is rebuilt: the TOI cursor never
/// goes back (a missing segment of an older object is rebuilt out of order).
fn advance(cursor: RebuildStart, toi: u32, written: u64) -> RebuildStart {
    RebuildStart {
        done_toi: cursor.done_toi.max(toi),
        done_bytes: cursor.done_bytes + written,
    }
}

/// One round's work (pure): the objects after the cursor, then those before it that a
/// degraded ingest committed without the member (`missing`, TOIs), in TOI order.
pub fn plan_round(
    cursor: RebuildStart,
    objects: &[ObjectRecord],
    missing: &[u32],
) -> Vec<ObjectRecord> {
    let mut todo = plan_objects(cursor, objects);
    todo.extend(
        objects
            .iter()
            .filter(|o| o.toi <= cursor.done_toi && missing.contains(&o.toi))
            .cloned(),
    );
    todo.sort_by_key(|o| o.toi);
    todo
}

/// Bytes of `member`'s segments of `objects`.
fn bytes_of(vol: &Volume, member: u32, objects: &[ObjectRecord]) -> Result<u64, StoreError> {
    let mut total = 0;
    for rec in objects {
        total += vol.layout(rec)?.segment_len_bytes(member);
    }
    Ok(total)
}

/// Rebuilds one object's segment on `member` and records it with the progress (the
/// member's progress before it: `cursor`); the bytes written, or `None` when the pace stopped it.
fn rebuild_object(
    vol: &mut Volume,
    rec: &ObjectRecord,
    (member, cursor): (u32, RebuildStart),
    pace: &mut dyn Pace,
    tick: &mut dyn FnMut(u64),
) -> Result<Option<u64>, StoreError> {
    let layout = vol.layout(rec)?;
    let packet_len = u64::from(layout.params().packet_len());
    let tmp = vol.rebuild_segment_path(member, rec.toi);
    let written = layout.segment_len_bytes(member);
    let decoded = (|| -> Result<Option<Vec<crate::records::BlockRecord>>, StoreError> {
        let mut writer = SegmentWriter::create(&tmp, member, &layout)?;
        let mut reader = ObjectReader::for_record(vol, rec.clone(), ReadOrder::Any)?;
        let mut packets = 0u64;
        for sbn in 0..layout.codewords() {
            let k = u64::from(layout.source_symbols(sbn));
            if pace.pace(k * packet_len).is_break() {
                return Ok(None);
            }
            reader.read_codeword(sbn, Want::All)?;
            for esi in layout.member_run(sbn, member).esis {
                let id = isnode_wire::DataPacketId {
                    tsi: vol.tsi(),
                    toi: rec.toi,
                    sbn,
                    esi: u8::try_from(esi)
                        .map_err(|_| StoreError::Corrupt(format!("ESI {esi} > 255")))?,
                };
                writer.push(&id, reader.symbol(esi))?;
                packets += 1;
            }
            tick((packets * packet_len).min(written));
        }
        // Synced before the rename, and the rename before the progress is recorded.
        writer.finish().map(Some)
    })();
    let blocks = match decoded {
        Ok(Some(blocks)) => blocks,
        Ok(None) => {
            let _ = fs::remove_file(&tmp);
            return Ok(None);
        }
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            // An object deleted or replaced while it was read is no longer to rebuild.
            if vol.catalog().complete_toi(&rec.name)? != Some(i64::from(rec.toi)) {
                return Ok(Some(0));
            }
            return Err(e);
        }
    };
    let dest = vol.segment_path(member, rec.toi);
    fs::rename(&tmp, &dest).map_err(StoreError::io(format!("placing {}", dest.display())))?;
    let dir = vol.members()[member as usize].join("objects");
    crate::io::sync_dir(&dir).map_err(StoreError::io(format!("syncing {}", dir.display())))?;
    let next = advance(cursor, rec.toi, written);
    let state = MemberState::Rebuilding {
        done_toi: next.done_toi,
        done_bytes: next.done_bytes,
    };
    let present = vol
        .catalog_mut()
        .record_rebuilt_segment(rec.toi, member, &blocks, &state)?;
    if !present {
        // Deleted meanwhile: its file goes too (the next open would remove it anyway).
        let _ = fs::remove_file(&dest);
    }
    Ok(Some(written))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::ObjectState;

    fn rec(toi: u32) -> ObjectRecord {
        ObjectRecord {
            toi,
            name: format!("o{toi}"),
            state: ObjectState::Complete,
            size_bytes: 1,
            bitrate_bps: 8,
            duration_s: 1.0,
            content_type: "video/mp2t".into(),
            symbol_len: 16,
            source_symbols: 4,
            repair_symbols: 2,
            codewords: 1,
            content_crc32c: 0,
            created_unix: 0,
            replaces: None,
        }
    }

    #[test]
    fn a_rebuild_in_progress_resumes_and_others_start_over() {
        let resumed = plan_start(&MemberState::Rebuilding {
            done_toi: 5,
            done_bytes: 99,
        });
        assert_eq!(
            resumed,
            RebuildStart {
                done_toi: 5,
                done_bytes: 99
            }
        );
        for s in [
            MemberState::Ok,
            MemberState::Failed {
                reason: "gone".into(),
            },
        ] {
            assert_eq!(plan_start(&s).done_toi, 0);
        }
        let objects = [rec(9), rec(2), rec(5), rec(7)];
        let tois: Vec<u32> = plan_objects(resumed, &objects)
            .iter()
            .map(|o| o.toi)
            .collect();
        assert_eq!(tois, vec![7, 9]);
        assert_eq!(
            plan_objects(plan_start(&MemberState::Ok), &objects).len(),
            4
        );
    }

    #[test]
    fn a_late_degraded_object_is_rebuilt_without_moving_the_cursor_back() {
        let cursor = RebuildStart {
            done_toi: 7,
            done_bytes: 10,
        };
        let objects = [rec(2), rec(5), rec(7), rec(9)];
        let tois: Vec<u32> = plan_round(cursor, &objects, &[5, 9])
            .iter()
            .map(|o| o.toi)
            .collect();
        assert_eq!(tois, vec![5, 9]);
        let after = advance(cursor, 5, 3);
        assert_eq!((after.done_toi, after.done_bytes), (7, 13));
        assert_eq!(advance(after, 9, 1).done_toi, 9);
    }
}
