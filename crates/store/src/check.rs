//! Verifying a volume block by block and packet by packet, and repairing it
//! from the code: a damaged or lost member segment is rebuilt from the other
//! members, byte-identical to what ingest wrote.

use std::fs;

use serde::Serialize;

use crate::codeword::{verify_block, verify_packet, Want};
use crate::io::{AlignedBuf, BlockFile};
use crate::lock::{FileLock, LockWait, REPAIR_LOCK_FILE};
use crate::read::{ObjectReader, ReadOrder};
use crate::records::{BlockRecord, ObjectRecord};
use crate::rows::CatalogEntry;
use crate::segment::SegmentWriter;
use crate::{Layout, StoreError, Volume};

/// How to check.
#[derive(Clone, Copy, Debug, Default)]
pub struct CheckOptions {
    /// Rewrite damaged segments from the rest of each codeword.
    pub repair: bool,
}

/// Damage found on one member of one object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Damage {
    /// Object name.
    pub object: String,
    /// Object TOI.
    pub toi: u32,
    /// Member index.
    pub member: u32,
    /// What is wrong, in words.
    pub problem: String,
    /// Blocks whose checksum failed or that could not be read.
    pub bad_blocks: u64,
    /// Packets missing or failing their own checks.
    pub bad_packets: u64,
    /// Whether the damage was repaired in this run.
    pub repaired: bool,
}

/// The outcome of a check.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CheckReport {
    /// Objects checked.
    pub objects: u64,
    /// Blocks verified.
    pub blocks: u64,
    /// Packets verified.
    pub packets: u64,
    /// The catalog's state of every member (ok, failed, rebuilding with its progress).
    pub member_states: Vec<crate::MemberState>,
    /// Problems with member directories themselves.
    pub member_problems: Vec<String>,
    /// Whether the member directories were recreated in this run.
    pub members_repaired: bool,
    /// Damage per object and member.
    pub damage: Vec<Damage>,
    /// Codewords that lost more than the code can rebuild (data loss).
    pub unrecoverable: Vec<String>,
    /// Objects whose catalog rows are impossible (never served; `--repair` cannot fix
    /// them: replace them with `isnode ingest --replace`).
    pub bad_objects: Vec<BadObjectReport>,
    /// Objects being filled from the origin, with their committed blocks verified
    /// (`--repair` leaves them to their fill; damage among their committed blocks is in
    /// `damage`, never repaired here).
    pub filling: Vec<FillingReport>,
}

/// A filling object as the check found it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FillingReport {
    /// Object name.
    pub object: String,
    /// Object TOI.
    pub toi: u32,
    /// Its durable fill front (codewords committed).
    pub front_codewords: u32,
    /// Its codewords in all.
    pub codewords: u32,
    /// Blocks holding committed packets, verified against their rows.
    pub blocks: u64,
}

/// An object whose catalog rows break an invariant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BadObjectReport {
    /// Object name (as well as it reads).
    pub object: String,
    /// Object TOI (as well as it reads).
    pub toi: u32,
    /// The invariant broken.
    pub problem: String,
}

impl CheckReport {
    /// True while damage remains (not repaired, or unrecoverable).
    pub fn damaged(&self) -> bool {
        !self.unrecoverable.is_empty()
            || !self.bad_objects.is_empty()
            || self.damage.iter().any(|d| !d.repaired)
            || (!self.member_problems.is_empty() && !self.members_repaired)
    }
}

/// Checks (and with `opts.repair`, repairs) every object of the volume.
pub fn check(
    vol: &mut Volume,
    opts: CheckOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<CheckReport, StoreError> {
    // Repairs run one at a time (they rewrite the same segment files through the same
    // temporary paths): a second `check --repair` waits, then checks what the first left.
    let _repair_lock = match opts.repair {
        true => FileLock::exclusive(&vol.root().join(REPAIR_LOCK_FILE), LockWait::Block)?,
        false => None,
    };
    let mut report = CheckReport {
        member_states: vol.member_states()?,
        members_repaired: opts.repair,
        ..CheckReport::default()
    };
    for m in 0..vol.params().members {
        if let Err(e) = vol.member_identity_ok(m) {
            report.member_problems.push(format!("member {m}: {e}"));
            // A missing member (a replaced disk) is recreated; a directory of
            // another volume is left alone for the operator to sort out.
            let replaced = !vol.member_identity_present(m);
            if opts.repair && replaced {
                vol.prepare_member(m)?;
            } else {
                report.members_repaired = false;
            }
        }
    }
    for entry in vol.entries()? {
        report.objects += 1;
        match entry {
            CatalogEntry::Valid(rec) => {
                progress(&rec.name);
                check_object(vol, &rec, opts, &mut report)?;
            }
            CatalogEntry::Bad(bad) => {
                progress(&bad.record.name);
                report.bad_objects.push(BadObjectReport {
                    object: bad.record.name,
                    toi: bad.record.toi,
                    problem: bad.problem,
                });
            }
        }
    }
    check_filling(vol, &mut report)?;
    if opts.repair && !report.damaged() {
        mark_verified_members_ok(vol, &mut report)?;
    }
    Ok(report)
}

/// Verifies every block holding committed packets of every filling object against its
/// row ([`crate::fill::verify_fill_block`]); a bad or unreadable one is damage.
fn check_filling(vol: &Volume, report: &mut CheckReport) -> Result<(), StoreError> {
    for fo in vol.filling_objects()? {
        let rec = &fo.record;
        let rows = match vol.fill_blocks(&fo) {
            Ok(rows) => rows,
            Err(StoreError::BadObject { name, problem }) => {
                report.bad_objects.push(BadObjectReport {
                    object: name,
                    toi: rec.toi,
                    problem,
                });
                continue;
            }
            Err(e) => return Err(e),
        };
        let layout = vol.layout(rec)?;
        let params = *layout.params();
        let mut buf = AlignedBuf::new(params.block_len as usize);
        let mut blocks = 0u64;
        for (m, member_rows) in rows.iter().enumerate() {
            let path = vol.segment_path(m as u32, rec.toi);
            let file = BlockFile::open_read(&path);
            let mut bad = 0u64;
            for row in member_rows {
                blocks += 1;
                let ok = file.as_ref().is_ok_and(|f| {
                    f.read_block(&mut buf, layout.block_offset(row.block))
                        .is_ok()
                        && crate::fill::verify_fill_block(&params, row, buf.as_slice()).is_ok()
                });
                bad += u64::from(!ok);
            }
            if bad > 0 {
                report.damage.push(Damage {
                    object: rec.name.clone(),
                    toi: rec.toi,
                    member: m as u32,
                    problem: format!(
                        "filling object: {bad} committed block(s) of {} unreadable or failing their CRC32C",
                        path.display()
                    ),
                    bad_blocks: bad,
                    bad_packets: 0,
                    repaired: false,
                });
            }
        }
        report.blocks += blocks;
        report.filling.push(FillingReport {
            object: rec.name.clone(),
            toi: rec.toi,
            front_codewords: fo.front_codewords,
            codewords: rec.codewords,
            blocks,
        });
    }
    Ok(())
}

/// After a repair that left no damage, every segment of every member was verified (or
/// rewritten): a member failed or left `rebuilding` is ok again, unless a degraded ingest
/// committed without it meanwhile (it stays as it is for the next repair or rebuild).
fn mark_verified_members_ok(vol: &mut Volume, report: &mut CheckReport) -> Result<(), StoreError> {
    for (m, state) in report.member_states.iter_mut().enumerate() {
        if state.is_degraded() && vol.catalog_mut().finish_rebuild(m as u32)? {
            tracing::info!(member = m, "member verified after repair: ok");
            *state = crate::MemberState::Ok;
        }
    }
    Ok(())
}

/// Codewords whose digest rows are read at once by [`check_digest_rows`].
const DIGEST_ROWS_AT_ONCE: u32 = 1024;

/// An object with packet digests must have one row per codeword, each of its encoding
/// symbols' digests ([`StoreError::BadObject`] otherwise: a client would ask for the
/// missing ones again and again).
fn check_digest_rows(vol: &Volume, rec: &ObjectRecord, layout: &Layout) -> Result<(), StoreError> {
    let catalog = vol.catalog();
    if !catalog.has_digests(rec.toi)? {
        return Ok(());
    }
    let bad = |problem: String| StoreError::BadObject {
        name: rec.name.clone(),
        problem,
    };
    let codewords = layout.codewords();
    let mut from = 0u32;
    while from < codewords {
        let count = DIGEST_ROWS_AT_ONCE.min(codewords - from);
        let mut expect = from..from + count;
        for (sbn, row) in catalog.digests(rec.toi, from, count)? {
            let Some(want) = expect.next() else { break };
            if sbn != want {
                return Err(bad(format!("no packet digests for codeword {want}")));
            }
            let len = layout.encoding_symbols(sbn) as usize * isnode_wire::digest::DIGEST_LEN;
            if row.len() != len {
                return Err(bad(format!(
                    "the packet digests of codeword {sbn} are {} bytes, not {len}",
                    row.len()
                )));
            }
        }
        if let Some(missing) = expect.next() {
            return Err(bad(format!("no packet digests for codeword {missing}")));
        }
        from += count;
    }
    Ok(())
}

fn check_object(
    vol: &mut Volume,
    rec: &ObjectRecord,
    opts: CheckOptions,
    report: &mut CheckReport,
) -> Result<(), StoreError> {
    let layout = vol.layout(rec)?;
    let members = layout.params().members;
    let blocks = match vol.blocks(rec, &layout).and_then(|b| {
        vol.media_index(rec)?;
        check_digest_rows(vol, rec, &layout)?;
        Ok(b)
    }) {
        Ok(b) => b,
        Err(StoreError::BadObject { name, problem }) => {
            report.bad_objects.push(BadObjectReport {
                object: name,
                toi: rec.toi,
                problem,
            });
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    // Pass 1: every block against its catalog checksum; packets of bad blocks one by one.
    let mut bad_packets: Vec<Vec<bool>> = Vec::with_capacity(members as usize);
    let mut damaged_members = Vec::new();
    for m in 0..members {
        let member_blocks = blocks.get(m as usize).map_or(&[][..], |b| &b[..]);
        let (bad, damage) = check_segment(vol, rec, &layout, (m, member_blocks), report)?;
        if let Some(d) = damage {
            report.damage.push(d);
            damaged_members.push(m);
        }
        bad_packets.push(bad);
    }
    // Pass 2: can every codeword still be decoded?
    let mut lost_codewords = Vec::new();
    for sbn in 0..layout.codewords() {
        let mut lost = 0;
        for m in 0..members {
            let run = layout.member_run(sbn, m);
            let start = run.first_packet as usize;
            lost += bad_packets[m as usize][start..start + run.esis.len()]
                .iter()
                .filter(|b| **b)
                .count();
        }
        if lost > layout.params().repair_symbols as usize {
            lost_codewords.push(sbn);
            report.unrecoverable.push(format!(
                "object {:?} codeword {sbn}: {lost} symbols lost, the code rebuilds at most {}",
                rec.name,
                layout.params().repair_symbols
            ));
        }
    }
    if opts.repair && lost_codewords.is_empty() && !damaged_members.is_empty() {
        for m in &damaged_members {
            rebuild_segment(vol, rec, &layout, *m)?;
        }
        for d in report.damage.iter_mut().filter(|d| d.toi == rec.toi) {
            d.repaired = true;
        }
    }
    Ok(())
}

/// Verifies one segment file; returns a bad-packet map and the damage found.
fn check_segment(
    vol: &Volume,
    rec: &ObjectRecord,
    layout: &Layout,
    (member, block_records): (u32, &[BlockRecord]),
    report: &mut CheckReport,
) -> Result<(Vec<bool>, Option<Damage>), StoreError> {
    let packets = layout.member_packets(member) as usize;
    let blocks = layout.member_blocks(member);
    let damage = |problem: String, bad_blocks: u64, bad_packets: u64| Damage {
        object: rec.name.clone(),
        toi: rec.toi,
        member,
        problem,
        bad_blocks,
        bad_packets,
        repaired: false,
    };
    let path = vol.segment_path(member, rec.toi);
    let file = match BlockFile::open_read(&path) {
        Ok(f) => f,
        Err(e) => {
            let d = damage(
                format!("segment {} unreadable: {e}", path.display()),
                blocks,
                packets as u64,
            );
            return Ok((vec![true; packets], Some(d)));
        }
    };
    // Expected CRC32C of every block, indexed by block number.
    let mut expected_crcs = vec![None; blocks as usize];
    for r in block_records {
        if let Some(slot) = expected_crcs.get_mut(r.block as usize) {
            *slot = Some(r.crc32c);
        }
    }
    let mut problems = Vec::new();
    let expected_len = layout.segment_len_bytes(member);
    match file.size_bytes() {
        Ok(len) if len != expected_len => {
            problems.push(format!("segment is {len} bytes, expected {expected_len}"))
        }
        Err(e) => problems.push(format!("segment size unknown: {e}")),
        Ok(_) => {}
    }
    let scan = SegmentScan {
        layout,
        tsi: vol.tsi(),
        toi: rec.toi,
        member,
    };
    let (bad, bad_blocks) = scan.run(&file, &expected_crcs, report, &mut problems);
    let bad_count = bad.iter().filter(|b| **b).count() as u64;
    if bad_blocks > 0 {
        problems.push(format!(
            "{bad_blocks} block(s) fail their checksum, {bad_count} packet(s) damaged"
        ));
    }
    if problems.is_empty() {
        return Ok((bad, None));
    }
    Ok((
        bad,
        Some(damage(problems.join("; "), bad_blocks, bad_count)),
    ))
}

/// Verifies one segment's blocks against the catalog, and the packets of failing blocks
/// one by one.
struct SegmentScan<'a> {
    layout: &'a Layout,
    tsi: u32,
    toi: u32,
    member: u32,
}

impl SegmentScan<'_> {
    /// Returns the bad-packet map and the number of bad blocks; says what it found in
    /// `problems`.
    fn run(
        &self,
        file: &BlockFile,
        expected_crcs: &[Option<u32>],
        report: &mut CheckReport,
        problems: &mut Vec<String>,
    ) -> (Vec<bool>, u64) {
        let (layout, member) = (self.layout, self.member);
        let params = layout.params();
        let mut bad = vec![false; layout.member_packets(member) as usize];
        let mut bad_blocks = 0u64;
        let mut buf = AlignedBuf::new(params.block_len as usize);
        let per_block = u64::from(params.packets_per_block());
        for (block, expected) in expected_crcs.iter().enumerate() {
            let block = block as u64;
            let first = (block * per_block) as usize;
            let count = layout.packets_in_block(member, block) as usize;
            report.blocks += 1;
            report.packets += count as u64;
            let read = file.read_block(&mut buf, layout.block_offset(block));
            let crc_ok = read.is_ok()
                && expected.is_some()
                && verify_block(buf.as_slice(), *expected).is_ok();
            if crc_ok {
                continue;
            }
            bad_blocks += 1;
            if let Err(e) = read {
                problems.push(format!("block {block} unreadable: {e}"));
                bad[first..first + count].fill(true);
                continue;
            }
            self.find_bad_packets(buf.as_slice(), first, count, &mut bad);
        }
        (bad, bad_blocks)
    }

    /// Marks which of the `count` packets of a block failing its checksum are damaged.
    fn find_bad_packets(&self, block: &[u8], first: usize, count: usize, bad: &mut [bool]) {
        let params = self.layout.params();
        let packet_len = params.packet_len() as usize;
        for slot in 0..count {
            let index = (first + slot) as u64;
            let bytes = &block[slot * packet_len..(slot + 1) * packet_len];
            let ok = expected_id(self.layout, self.tsi, self.toi, self.member, index)
                .is_some_and(|id| verify_packet(bytes, &id, params.symbol_len as usize).is_some());
            bad[index as usize] = !ok;
        }
    }
}

/// The identifiers the packet at `index` of `member`'s segment must carry.
fn expected_id(
    layout: &Layout,
    tsi: u32,
    toi: u32,
    member: u32,
    index: u64,
) -> Option<isnode_wire::DataPacketId> {
    // Codewords are stored in order: find the one whose run on this member holds `index`.
    let (mut lo, mut hi) = (0u32, layout.codewords());
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let run = layout.member_run(mid, member);
        if run.first_packet + run.esis.len() as u64 <= index {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    if lo >= layout.codewords() {
        return None;
    }
    let run = layout.member_run(lo, member);
    let esi = run.esis.start + u32::try_from(index.checked_sub(run.first_packet)?).ok()?;
    Some(isnode_wire::DataPacketId {
        tsi,
        toi,
        sbn: lo,
        esi: u8::try_from(esi).ok()?,
    })
}

/// Rewrites `member`'s segment of an object from the code, then swaps it in.
fn rebuild_segment(
    vol: &mut Volume,
    rec: &ObjectRecord,
    layout: &Layout,
    member: u32,
) -> Result<(), StoreError> {
    if !vol.member_identity_present(member) {
        vol.prepare_member(member)?;
    }
    let tmp = vol.rebuild_segment_path(member, rec.toi);
    let mut writer = SegmentWriter::create(&tmp, member, layout)?;
    let mut reader = ObjectReader::for_record(vol, rec.clone(), ReadOrder::Any)?;
    for sbn in 0..layout.codewords() {
        reader.read_codeword(sbn, Want::All)?;
        for esi in layout.member_run(sbn, member).esis {
            let id = isnode_wire::DataPacketId {
                tsi: vol.tsi(),
                toi: rec.toi,
                sbn,
                esi: esi as u8,
            };
            writer.push(&id, reader.symbol(esi))?;
        }
    }
    let blocks = writer.finish()?;
    let dest = vol.segment_path(member, rec.toi);
    fs::rename(&tmp, &dest).map_err(StoreError::io(format!("replacing {}", dest.display())))?;
    let dir = vol.members()[member as usize].join("objects");
    crate::io::sync_dir(&dir).map_err(StoreError::io(format!("syncing {}", dir.display())))?;
    vol.catalog_mut().replace_blocks(rec.toi, member, &blocks)?;
    tracing::info!(object = %rec.name, member, "segment rebuilt");
    Ok(())
}
