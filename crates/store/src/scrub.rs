//! Scrub: read every block of every object, verify each block's CRC32C, each packet's
//! CRC32C, identifiers and digest, and each codeword's parity ([`crate::verify`]), and
//! report what is wrong per member and per object. Reads nothing twice and writes
//! nothing (`volume check --repair` and `volume rebuild` repair). The reads are paced by
//! the caller's [`Pace`] (a fixed rate on the command line, the viewers' slack in the
//! server).

use std::collections::HashMap;
use std::ops::ControlFlow;

use isnode_fec::Code;
use isnode_wire::DataPacketId;
use serde::Serialize;

use crate::check::BadObjectReport;
use crate::codeword::verify_block;
use crate::io::{AlignedBuf, BlockFile};
use crate::members::MemberState;
use crate::pace::Pace;
use crate::records::ObjectRecord;
use crate::rows::CatalogEntry;
use crate::verify::{verify_codeword, ParityCheck, StoredCodeword, SymbolVerdict};
use crate::{Layout, StoreError, Volume};

/// Findings listed per object at most (the counters count them all).
pub const MAX_FINDINGS_PER_OBJECT: usize = 64;

/// One thing found wrong, where it is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Member index.
    pub member: u32,
    /// Block of the member's segment file (`None`: the whole segment).
    pub block: Option<u64>,
    /// Codeword, for a packet finding.
    pub sbn: Option<u32>,
    /// Symbol, for a packet finding.
    pub esi: Option<u32>,
    /// What is wrong.
    pub problem: String,
}

/// Per-member totals.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MemberScrub {
    /// Member index.
    pub member: u32,
    /// The catalog's state of the member.
    pub state: Option<MemberState>,
    /// Blocks read.
    pub blocks: u64,
    /// Blocks failing their catalog CRC32C or unreadable.
    pub bad_blocks: u64,
    /// Packets verified.
    pub packets: u64,
    /// Packets unreadable (member, file or block).
    pub missing_packets: u64,
    /// Packets failing CRC32C, framing or identifiers.
    pub corrupt_packets: u64,
    /// Packets differing from their digest.
    pub digest_mismatches: u64,
    /// Repair packets differing from the re-encoded parity.
    pub parity_mismatches: u64,
}

impl MemberScrub {
    fn damaged(&self) -> bool {
        self.bad_blocks
            + self.missing_packets
            + self.corrupt_packets
            + self.digest_mismatches
            + self.parity_mismatches
            > 0
    }
}

/// Per-object result.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ObjectScrub {
    /// Object name.
    pub object: String,
    /// Object TOI.
    pub toi: u32,
    /// Codewords verified.
    pub codewords: u64,
    /// Codewords whose parity was re-encoded and compared.
    pub parity_checked: u64,
    /// Blocks failing their checksum or unreadable.
    pub bad_blocks: u64,
    /// Packets not good (missing, corrupt, digest or parity mismatch).
    pub bad_packets: u64,
    /// Codewords with fewer than k good symbols (data lost until repaired elsewhere).
    pub unrecoverable_codewords: u64,
    /// The first [`MAX_FINDINGS_PER_OBJECT`] findings.
    pub findings: Vec<Finding>,
}

impl ObjectScrub {
    /// Whether anything is wrong with the object.
    pub fn damaged(&self) -> bool {
        self.bad_blocks + self.bad_packets + self.unrecoverable_codewords > 0
    }

    fn find(&mut self, f: Finding) {
        if self.findings.len() < MAX_FINDINGS_PER_OBJECT {
            self.findings.push(f);
        }
    }
}

/// The outcome of a scrub.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ScrubReport {
    /// Objects scrubbed.
    pub objects: u64,
    /// Codewords verified.
    pub codewords: u64,
    /// Bytes read from the members.
    pub bytes_read: u64,
    /// Whether the pace stopped the scrub before the end.
    pub stopped: bool,
    /// Problems with member directories (identity missing or of another volume).
    pub member_problems: Vec<String>,
    /// Totals per member.
    pub members: Vec<MemberScrub>,
    /// Results per object (every object scrubbed).
    pub object_results: Vec<ObjectScrub>,
    /// Objects whose catalog rows are impossible (not scrubbed).
    pub bad_objects: Vec<BadObjectReport>,
}

impl ScrubReport {
    /// Whether damage was found (exit status 1).
    pub fn damaged(&self) -> bool {
        !self.member_problems.is_empty()
            || !self.bad_objects.is_empty()
            || self.members.iter().any(MemberScrub::damaged)
            || self.object_results.iter().any(ObjectScrub::damaged)
    }
}

/// Where a scrub is.
#[derive(Clone, Copy, Debug)]
pub struct ScrubProgress<'a> {
    /// Bytes of segment files read so far.
    pub bytes_done: u64,
    /// Bytes of segment files there are.
    pub bytes_total: u64,
    /// The object being read.
    pub object: &'a str,
}

/// Scrubs every complete object of `vol`, pacing its reads with `pace`.
pub fn scrub(
    vol: &Volume,
    pace: &mut dyn Pace,
    progress: &mut dyn FnMut(ScrubProgress<'_>),
) -> Result<ScrubReport, StoreError> {
    let params = *vol.params();
    let states = vol.catalog().member_states()?;
    let mut report = ScrubReport {
        members: (0..params.members)
            .map(|m| MemberScrub {
                member: m,
                state: states.get(m as usize).cloned(),
                ..MemberScrub::default()
            })
            .collect(),
        ..ScrubReport::default()
    };
    for m in 0..params.members {
        if let Err(e) = vol.member_identity_ok(m) {
            report.member_problems.push(format!("member {m}: {e}"));
        }
    }
    let mut valid = Vec::new();
    for entry in vol.entries()? {
        match entry {
            CatalogEntry::Valid(rec) => valid.push(rec),
            CatalogEntry::Bad(bad) => report.bad_objects.push(BadObjectReport {
                object: bad.record.name,
                toi: bad.record.toi,
                problem: bad.problem,
            }),
        }
    }
    let mut total = 0u64;
    for rec in &valid {
        let layout = vol.layout(rec)?;
        total += (0..params.members)
            .map(|m| layout.segment_len_bytes(m))
            .sum::<u64>();
    }
    let mut done = 0u64;
    for rec in &valid {
        report.objects += 1;
        let mut tick = |bytes: u64| {
            done += bytes;
            progress(ScrubProgress {
                bytes_done: done,
                bytes_total: total,
                object: &rec.name,
            })
        };
        match scrub_object(vol, rec, pace, &mut report, &mut tick) {
            Ok(ControlFlow::Continue(())) => {}
            Ok(ControlFlow::Break(())) => {
                report.stopped = true;
                break;
            }
            Err(StoreError::BadObject { name, problem }) => {
                report.bad_objects.push(BadObjectReport {
                    object: name,
                    toi: rec.toi,
                    problem,
                })
            }
            Err(e) => return Err(e),
        }
    }
    Ok(report)
}

/// How one block read went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BlockRead {
    Good,
    ChecksumFailed,
    Unreadable,
}

/// One member's segment file of the object being scrubbed and its last block read.
struct Segment {
    file: Option<BlockFile>,
    buf: AlignedBuf,
    current: Option<(u64, BlockRead)>,
}

/// The blocks of one object, each read once (codewords are stored in order) and checked
/// against its catalog CRC32C as it is read.
struct ScrubBlocks<'a> {
    layout: &'a Layout,
    crcs: Vec<Vec<u32>>,
    segments: Vec<Segment>,
}

impl ScrubBlocks<'_> {
    /// Makes block `block` of `member` current, reading it if needed (paced);
    /// `Ok(None)` when already current.
    fn load(
        &mut self,
        member: u32,
        block: u64,
        pace: &mut dyn Pace,
    ) -> ControlFlow<(), Option<BlockRead>> {
        let block_len = self.layout.params().block_len;
        let Some(seg) = self.segments.get_mut(member as usize) else {
            return ControlFlow::Continue(None);
        };
        if seg.current.is_some_and(|(b, _)| b == block) {
            return ControlFlow::Continue(None);
        }
        let read = match &seg.file {
            None => BlockRead::Unreadable,
            Some(file) => {
                pace.pace(u64::from(block_len))?;
                let expected = self
                    .crcs
                    .get(member as usize)
                    .and_then(|c| c.get(block as usize))
                    .copied();
                match file.read_block(&mut seg.buf, self.layout.block_offset(block)) {
                    Err(_) => BlockRead::Unreadable,
                    Ok(())
                        if expected.is_some()
                            && verify_block(seg.buf.as_slice(), expected).is_ok() =>
                    {
                        BlockRead::Good
                    }
                    Ok(()) => BlockRead::ChecksumFailed,
                }
            }
        };
        seg.current = Some((block, read));
        ControlFlow::Continue(Some(read))
    }

    /// The packet at `offset` of the current block of `member`, if it was readable.
    fn packet(&self, member: u32, offset: usize) -> Option<&[u8]> {
        let seg = self.segments.get(member as usize)?;
        let len = self.layout.params().packet_len() as usize;
        match seg.current {
            Some((_, BlockRead::Unreadable)) | None => None,
            Some(_) => seg.buf.as_slice().get(offset..offset + len),
        }
    }
}

fn scrub_object(
    vol: &Volume,
    rec: &ObjectRecord,
    pace: &mut dyn Pace,
    report: &mut ScrubReport,
    tick: &mut dyn FnMut(u64),
) -> Result<ControlFlow<()>, StoreError> {
    let layout = vol.layout(rec)?;
    let blocks = vol.blocks(rec, &layout)?;
    let mut result = ObjectScrub {
        object: rec.name.clone(),
        toi: rec.toi,
        ..ObjectScrub::default()
    };
    let src = open_segments(vol, rec, &layout, &blocks, &mut result);
    let has_digests = vol.catalog().has_digests(rec.toi)?;
    let mut scan = ObjectScan::new(vol, rec, &layout, src, result);
    let mut flow = ControlFlow::Continue(());
    for sbn in 0..layout.codewords() {
        let digests = match has_digests {
            true => vol
                .catalog()
                .digests(rec.toi, sbn, 1)?
                .pop()
                .map(|(_, d)| d),
            false => None,
        };
        let ControlFlow::Continue(present) = scan.read_codeword(sbn, pace, report, tick) else {
            flow = ControlFlow::Break(());
            break;
        };
        scan.check_codeword(sbn, &present, digests.as_deref(), report)?;
    }
    report.object_results.push(scan.result);
    Ok(flow)
}

/// The scrub of one object, codeword by codeword: its blocks as read, the packets of the
/// codeword being checked, and what was found.
struct ObjectScan<'a> {
    vol: &'a Volume,
    rec: &'a ObjectRecord,
    layout: &'a Layout,
    src: ScrubBlocks<'a>,
    /// The RS codes met so far, by k.
    codes: HashMap<u32, Code>,
    /// The packets of the codeword being checked, by ESI, `packet_len` bytes each.
    copy: Vec<u8>,
    /// Repair symbols computed by the parity check.
    scratch: Vec<u8>,
    result: ObjectScrub,
}

impl<'a> ObjectScan<'a> {
    fn new(
        vol: &'a Volume,
        rec: &'a ObjectRecord,
        layout: &'a Layout,
        src: ScrubBlocks<'a>,
        result: ObjectScrub,
    ) -> ObjectScan<'a> {
        let params = layout.params();
        let max_n = (params.source_symbols + params.repair_symbols) as usize;
        ObjectScan {
            vol,
            rec,
            layout,
            src,
            codes: HashMap::new(),
            copy: vec![0u8; max_n * params.packet_len() as usize],
            scratch: Vec::new(),
            result,
        }
    }

    /// Reads (paced) the blocks holding the symbols of codeword `sbn`, noting each block
    /// read and ticking its bytes, and copies the packets that were readable; which ESIs
    /// are present, or Break if the pace stopped the scrub.
    fn read_codeword(
        &mut self,
        sbn: u32,
        pace: &mut dyn Pace,
        report: &mut ScrubReport,
        tick: &mut dyn FnMut(u64),
    ) -> ControlFlow<(), Vec<bool>> {
        let params = *self.layout.params();
        let packet_len = params.packet_len() as usize;
        let n = self.layout.encoding_symbols(sbn);
        let mut present = vec![false; n as usize];
        for esi in 0..n {
            let at = self.layout.symbol_location(sbn, esi);
            if let Some(read) = self.src.load(at.member, at.block, pace)? {
                note_block(
                    report,
                    &mut self.result,
                    at.member,
                    at.block,
                    read,
                    params.block_len,
                );
                tick(u64::from(params.block_len));
            }
            if let Some(p) = self.src.packet(at.member, at.offset) {
                let slot = esi as usize * packet_len;
                self.copy[slot..slot + packet_len].copy_from_slice(p);
                present[esi as usize] = true;
            }
        }
        ControlFlow::Continue(present)
    }

    /// Verifies codeword `sbn` from its `present` packets (and the catalog's `digests`),
    /// noting its verdict per symbol and counting it.
    fn check_codeword(
        &mut self,
        sbn: u32,
        present: &[bool],
        digests: Option<&[u8]>,
        report: &mut ScrubReport,
    ) -> Result<(), StoreError> {
        let params = self.layout.params();
        let packet_len = params.packet_len() as usize;
        let (k, n) = (
            self.layout.source_symbols(sbn),
            self.layout.encoding_symbols(sbn),
        );
        let packets: Vec<Option<&[u8]>> = (0..n as usize)
            .map(|i| present[i].then(|| &self.copy[i * packet_len..(i + 1) * packet_len]))
            .collect();
        let code = match self.codes.entry(k) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(Code::new(k as usize, n as usize)?)
            }
        };
        let cw = StoredCodeword {
            first_id: DataPacketId {
                tsi: self.vol.tsi(),
                toi: self.rec.toi,
                sbn,
                esi: 0,
            },
            k,
            symbol_len: params.symbol_len as usize,
            packets: &packets,
            digests,
        };
        let verdict = verify_codeword(&cw, code, &mut self.scratch);
        let result = &mut self.result;
        note_codeword(report, result, self.layout, sbn, &verdict.symbols);
        result.codewords += 1;
        report.codewords += 1;
        if verdict.parity == ParityCheck::Checked {
            result.parity_checked += 1;
        }
        if !verdict.recoverable(k) {
            result.unrecoverable_codewords += 1;
        }
        Ok(())
    }
}

/// Opens each member's segment, noting missing files and wrong sizes.
fn open_segments<'a>(
    vol: &Volume,
    rec: &ObjectRecord,
    layout: &'a Layout,
    blocks: &[Vec<crate::records::BlockRecord>],
    result: &mut ObjectScrub,
) -> ScrubBlocks<'a> {
    let params = layout.params();
    let segments = (0..params.members)
        .map(|m| {
            let path = vol.segment_path(m, rec.toi);
            let file = match BlockFile::open_read(&path) {
                Ok(f) => Some(f),
                Err(e) => {
                    result.find(Finding {
                        member: m,
                        block: None,
                        sbn: None,
                        esi: None,
                        problem: format!("segment {} unreadable: {e}", path.display()),
                    });
                    None
                }
            };
            let expected = layout.segment_len_bytes(m);
            if let Some(len) = file.as_ref().and_then(|f| f.size_bytes().ok()) {
                if len != expected {
                    result.find(Finding {
                        member: m,
                        block: None,
                        sbn: None,
                        esi: None,
                        problem: format!("segment is {len} bytes, expected {expected}"),
                    });
                }
            }
            Segment {
                file,
                buf: AlignedBuf::new(params.block_len as usize),
                current: None,
            }
        })
        .collect();
    let crcs = blocks
        .iter()
        .map(|b| b.iter().map(|r| r.crc32c).collect())
        .collect();
    ScrubBlocks {
        layout,
        crcs,
        segments,
    }
}

fn note_block(
    report: &mut ScrubReport,
    result: &mut ObjectScrub,
    member: u32,
    block: u64,
    read: BlockRead,
    block_len: u32,
) {
    let Some(m) = report.members.get_mut(member as usize) else {
        return;
    };
    m.blocks += 1;
    if read != BlockRead::Unreadable {
        report.bytes_read += u64::from(block_len);
    }
    let problem = match read {
        BlockRead::Good => return,
        BlockRead::ChecksumFailed => "block fails its catalog CRC32C",
        BlockRead::Unreadable => "block unreadable",
    };
    m.bad_blocks += 1;
    result.bad_blocks += 1;
    // A missing segment was said once already, not once per block.
    if read == BlockRead::ChecksumFailed
        || !result
            .findings
            .iter()
            .any(|f| f.member == member && f.block.is_none())
    {
        result.find(Finding {
            member,
            block: Some(block),
            sbn: None,
            esi: None,
            problem: problem.to_string(),
        });
    }
}

fn note_codeword(
    report: &mut ScrubReport,
    result: &mut ObjectScrub,
    layout: &Layout,
    sbn: u32,
    verdicts: &[SymbolVerdict],
) {
    for (esi, v) in verdicts.iter().enumerate() {
        let at = layout.symbol_location(sbn, esi as u32);
        let Some(m) = report.members.get_mut(at.member as usize) else {
            continue;
        };
        m.packets += 1;
        let problem = match v {
            SymbolVerdict::Good => continue,
            SymbolVerdict::Missing => {
                m.missing_packets += 1;
                result.bad_packets += 1;
                continue;
            }
            SymbolVerdict::Corrupt => {
                m.corrupt_packets += 1;
                "packet fails its CRC32C, framing or identifiers"
            }
            SymbolVerdict::DigestMismatch => {
                m.digest_mismatches += 1;
                "packet differs from its digest"
            }
            SymbolVerdict::ParityMismatch => {
                m.parity_mismatches += 1;
                "repair packet differs from the codeword's parity"
            }
        };
        result.bad_packets += 1;
        result.find(Finding {
            member: at.member,
            block: Some(at.block),
            sbn: Some(sbn),
            esi: Some(esi as u32),
            problem: problem.to_string(),
        });
    }
}
