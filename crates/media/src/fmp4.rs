//! The fragment index of a fragmented MP4 / CMAF file (a `moov` with `mvex`, then
//! `moof`+`mdat` pairs, perhaps with `sidx` boxes): its init segment's byte range and, for
//! each fragment, its bytes, times and whether it starts with a sync sample.
//!
//! Sans-IO: a builder (private) is given the top-level boxes as the walker of
//! [`crate::index`] meets them (`moov`, `moof` and `sidx` contents held in memory, bounded),
//! and builds a [`FragmentIndex`]. Every count read from the input is bounded by the bytes
//! that hold its entries (or by [`MAX_FRAGMENTS`]) before it sizes anything.

use crate::boxes::{be32, be64, child, children, track_id_timescale, tracks};

/// Most fragments an index keeps (later ones are not listed and the index is marked
/// [`FragmentIndex::complete`] `false`).
pub const MAX_FRAGMENTS: usize = 1 << 20;
/// Largest `moof` or `sidx` box kept in memory to be parsed.
pub const MAX_MOOF_BYTES: u64 = 16 << 20;

/// `sample_is_non_sync_sample` in ISO/IEC 14496-12 sample flags.
const NON_SYNC: u32 = 0x0001_0000;

/// A range of bytes of the object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteRange {
    /// First byte.
    pub offset: u64,
    /// Number of bytes.
    pub length: u64,
}

impl ByteRange {
    /// One past the last byte.
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(self.length)
    }
}

/// One fragment: a `moof` and the `mdat` box(es) right after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fragment {
    /// Bytes: from the first byte of the `moof` to the end of the last `mdat` that follows
    /// it directly (clamped to the bytes fed).
    pub bytes: ByteRange,
    /// Decode time of the reference track's first sample in the fragment, in
    /// [`FragmentIndex::timescale`] ticks: `tfdt` (`baseMediaDecodeTime`), or, without one,
    /// the previous fragment's decode start plus its duration.
    pub decode_start: u64,
    /// Earliest presentation time, in ticks: from a consistent `sidx` when the fragment
    /// starts one of its subsegments ([`SidxUse::Used`]), else the least over the fragment's
    /// samples of decode time + `trun` composition offset (negative offsets allowed).
    pub presentation_start: i64,
    /// Sum of the reference track's sample durations (`trun` per-sample durations, else
    /// `tfhd` default, else `trex` default), in ticks.
    pub duration: u64,
    /// Samples of the reference track in the fragment (0: the `moof` has no `traf` for it).
    pub samples: u32,
    /// The first sample of the reference track is a sync sample: its flags (`trun`
    /// first-sample-flags, else its own `trun` sample flags, else `tfhd` then `trex` default
    /// flags) do not set `sample_is_non_sync_sample`.
    pub starts_with_sync: bool,
    /// One past the last byte of the reference track's first sample (the key frame of a
    /// fragment that starts with one), from the `trun` data offset and sample size (`trun`,
    /// else `tfhd`, else `trex` default); `None` without a `trun` data offset or when it
    /// falls outside the fragment. `bytes.offset..first_sample_end` is what an HLS I-frame
    /// playlist names: the `moof` and that sample.
    pub first_sample_end: Option<u64>,
}

/// Whether a `sidx` was used for the fragment times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SidxUse {
    /// No `sidx` for the reference track.
    Absent,
    /// Its subsegments start exactly at fragment starts and cover every fragment once, in
    /// order: their earliest presentation times were used.
    Used,
    /// Present but not consistent with the fragments walked (or hierarchical): ignored, the
    /// times come from the `moof`s.
    Inconsistent,
}

/// The fragment index of a fragmented MP4 ([`crate::MediaIndex::fragments`]).
#[derive(Clone, Debug, PartialEq)]
pub struct FragmentIndex {
    /// The reference track: the first video track of the `moov`, else its first track.
    pub track_id: u32,
    /// The reference track's media timescale (`mdhd`), ticks per second.
    pub timescale: u32,
    /// The init segment: every byte before the first `moof` or the first `sidx` after the
    /// `moov` (normally `ftyp` + `moov`).
    pub init: ByteRange,
    /// The first `sidx` box after the `moov`, if any (a DASH on-demand `indexRange`).
    pub index_range: Option<ByteRange>,
    /// The fragments, in file order.
    pub fragments: Vec<Fragment>,
    /// How the `sidx` boxes were used.
    pub sidx: SidxUse,
    /// `false` when fragments were left out: more than [`MAX_FRAGMENTS`], a `moof` over
    /// [`MAX_MOOF_BYTES`] or one that does not parse (nothing after it is listed).
    pub complete: bool,
}

impl FragmentIndex {
    /// From the first fragment's decode start to the last one's end, seconds (`None`
    /// without fragments).
    pub fn duration_s(&self) -> Option<f64> {
        let first = self.fragments.first()?;
        let last = self.fragments.last()?;
        let end = i128::from(last.decode_start) + i128::from(last.duration);
        Some(self.seconds(end - i128::from(first.decode_start)))
    }

    /// Seconds of `ticks` of the reference track.
    pub fn seconds(&self, ticks: i128) -> f64 {
        if self.timescale == 0 {
            return 0.0;
        }
        ticks as f64 / f64::from(self.timescale)
    }
}

/// Defaults for a track from `mvex/trex`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct TrackDefaults {
    duration: u32,
    size: u32,
    flags: u32,
}

/// What the `moov` tells about the fragments: the reference track and its `trex` defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MoovContext {
    track_id: u32,
    timescale: u32,
    trex: TrackDefaults,
}

impl MoovContext {
    /// The context of a `moov` (its content) that has `mvex`; `None` for an unfragmented one.
    pub(crate) fn from_moov(moov: &[u8]) -> Option<MoovContext> {
        let mvex = child(moov, b"mvex")?;
        let trak = tracks(moov)
            .find(|(h, _)| h == b"vide")
            .or_else(|| tracks(moov).next())
            .map(|(_, t)| t)?;
        let (track_id, timescale) = track_id_timescale(trak)?;
        let trex = children(mvex)
            .filter(|(k, _)| k == b"trex")
            .find(|(_, c)| be32(c, 4) == Some(track_id))
            .map(|(_, c)| TrackDefaults {
                duration: be32(c, 12).unwrap_or(0),
                size: be32(c, 16).unwrap_or(0),
                flags: be32(c, 20).unwrap_or(0),
            })
            .unwrap_or_default();
        Some(MoovContext {
            track_id,
            timescale,
            trex,
        })
    }
}

/// The reference track's timing in one `moof`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct FragTiming {
    tfdt: Option<u64>,
    duration: u64,
    samples: u32,
    /// Least composition offset over the samples (0 without offsets).
    min_cto: i64,
    sync: bool,
    /// The first sample's data: `(base_data_offset, trun data offset, size)` (the base
    /// `None`: the `moof`'s first byte).
    first_sample: Option<(Option<u64>, i64, u32)>,
}

/// The `tfhd` fields that matter for timing (and the first sample's place).
struct Tfhd {
    defaults: TrackDefaults,
    base_data_offset: Option<u64>,
}

fn parse_tfhd(tfhd: &[u8], trex: TrackDefaults) -> Option<(u32, Tfhd)> {
    let flags = be32(tfhd, 0)? & 0x00FF_FFFF;
    let track_id = be32(tfhd, 4)?;
    let mut at = 8usize;
    let mut defaults = trex;
    let mut base_data_offset = None;
    for (bit, len) in [(0x01, 8), (0x02, 4), (0x08, 4), (0x10, 4), (0x20, 4)] {
        if flags & bit == 0 {
            continue;
        }
        match bit {
            0x01 => base_data_offset = Some(be64(tfhd, at)?),
            0x08 => defaults.duration = be32(tfhd, at)?,
            0x10 => defaults.size = be32(tfhd, at)?,
            0x20 => defaults.flags = be32(tfhd, at)?,
            _ => {}
        }
        at += len;
    }
    Some((
        track_id,
        Tfhd {
            defaults,
            base_data_offset,
        },
    ))
}

/// Adds one `trun` to `t` (its samples after those already counted).
fn add_trun(trun: &[u8], d: TrackDefaults, base: Option<u64>, t: &mut FragTiming) -> Option<()> {
    let version = *trun.first()?;
    let flags = be32(trun, 0)? & 0x00FF_FFFF;
    let count = be32(trun, 4)?;
    let mut at = 8usize;
    let data_offset = if flags & 0x001 != 0 {
        at += 4;
        Some(i64::from(be32(trun, 8)? as i32))
    } else {
        None
    };
    let first_flags = if flags & 0x004 != 0 {
        let f = be32(trun, at)?;
        at += 4;
        Some(f)
    } else {
        None
    };
    let fields = [0x100, 0x200, 0x400, 0x800];
    let entry = fields.iter().filter(|&&b| flags & b != 0).count() * 4;
    let first_of_fragment = t.samples == 0;
    let entries = trun.get(at..)?;
    // Per-sample entries bound the count by the bytes that hold them.
    let walked = entries
        .len()
        .checked_div(entry)
        .map_or(0, |n| count.min(u32::try_from(n).unwrap_or(u32::MAX)));
    for i in 0..walked as usize {
        let e = entries.get(i * entry..(i + 1) * entry)?;
        let mut f = 0usize;
        let mut field = |bit: u32| -> Option<u32> {
            if flags & bit == 0 {
                return None;
            }
            let v = be32(e, f);
            f += 4;
            v
        };
        let dur = field(0x100).unwrap_or(d.duration);
        let size = field(0x200).unwrap_or(d.size);
        let sflags = field(0x400).unwrap_or(d.flags);
        let cto = field(0x800).map_or(0, |c| match version {
            0 => i64::from(c),
            _ => i64::from(c as i32),
        });
        if first_of_fragment && i == 0 {
            t.sync = first_flags.unwrap_or(sflags) & NON_SYNC == 0;
            t.min_cto = cto;
            t.first_sample = data_offset.map(|o| (base, o, size));
        }
        t.min_cto = t.min_cto.min(cto);
        t.duration = t.duration.saturating_add(u64::from(dur));
    }
    if entry == 0 && count > 0 {
        if first_of_fragment {
            t.sync = first_flags.unwrap_or(d.flags) & NON_SYNC == 0;
            t.first_sample = data_offset.map(|o| (base, o, d.size));
        }
        t.duration = t
            .duration
            .saturating_add(u64::from(count).saturating_mul(u64::from(d.duration)));
    }
    let added = if entry == 0 { count } else { walked };
    t.samples = t.samples.saturating_add(added);
    Some(())
}

/// The reference track's timing in a `moof` (its content); `None` when it does not parse.
fn parse_moof(moof: &[u8], ctx: &MoovContext) -> Option<FragTiming> {
    let mut t = FragTiming::default();
    for (_, traf) in children(moof).filter(|(k, _)| k == b"traf") {
        let (track_id, tfhd) = parse_tfhd(child(traf, b"tfhd")?, ctx.trex)?;
        if track_id != ctx.track_id {
            continue;
        }
        if let Some(tfdt) = child(traf, b"tfdt") {
            t.tfdt = match tfdt.first()? {
                1 => be64(tfdt, 4),
                _ => be32(tfdt, 4).map(u64::from),
            };
        }
        for (_, trun) in children(traf).filter(|(k, _)| k == b"trun") {
            add_trun(trun, tfhd.defaults, tfhd.base_data_offset, &mut t)?;
        }
    }
    Some(t)
}

/// One subsegment of a `sidx`: its bytes and earliest presentation time (sidx timescale).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Subsegment {
    bytes: ByteRange,
    ept: u64,
}

/// A parsed `sidx`: its reference ID, timescale and media subsegments; `None` when it does
/// not parse or references another `sidx` (hierarchical, not followed).
fn parse_sidx(sidx: &[u8], sidx_end: u64) -> Option<(u32, u32, Vec<Subsegment>)> {
    let version = *sidx.first()?;
    let reference_id = be32(sidx, 4)?;
    let timescale = be32(sidx, 8)?;
    let (mut ept, first_offset, at) = match version {
        0 => (
            u64::from(be32(sidx, 12)?),
            u64::from(be32(sidx, 16)?),
            20usize,
        ),
        _ => (be64(sidx, 12)?, be64(sidx, 20)?, 28usize),
    };
    let count = usize::from(crate::boxes::be16(sidx, at + 2)?);
    let refs = sidx.get(at + 4..)?;
    let mut pos = sidx_end.checked_add(first_offset)?;
    let mut out = Vec::with_capacity(count.min(refs.len() / 12));
    for r in refs.chunks_exact(12).take(count) {
        let size_word = be32(r, 0)?;
        if size_word & 0x8000_0000 != 0 {
            return None;
        }
        let length = u64::from(size_word);
        out.push(Subsegment {
            bytes: ByteRange {
                offset: pos,
                length,
            },
            ept,
        });
        pos = pos.checked_add(length)?;
        ept = ept.checked_add(u64::from(be32(r, 4)?))?;
    }
    (out.len() == count).then_some((reference_id, timescale, out))
}

/// Builds a [`FragmentIndex`] from the top-level boxes in file order.
#[derive(Debug, Default)]
pub(crate) struct FragmentBuilder {
    ctx: Option<MoovContext>,
    init_end: Option<u64>,
    index_range: Option<ByteRange>,
    timings: Vec<(Fragment, Option<u64>)>,
    /// The last fragment may still grow by a directly following `mdat`.
    open: bool,
    subsegments: Vec<Subsegment>,
    sidx_timescale: Option<u32>,
    sidx_bad: bool,
    stopped: bool,
}

impl FragmentBuilder {
    /// The `moov` (its content) is complete.
    pub(crate) fn moov(&mut self, moov: &[u8]) {
        if self.ctx.is_none() {
            self.ctx = MoovContext::from_moov(moov);
        }
    }

    /// A top-level box of `kind` starts at `start` and ends at `end` (`u64::MAX`: to the
    /// end of the object). Returns whether its content should be kept for
    /// [`FragmentBuilder::moof`] / [`FragmentBuilder::sidx`].
    pub(crate) fn box_start(&mut self, kind: [u8; 4], start: u64, end: u64) -> bool {
        if self.ctx.is_none() || self.stopped {
            return false;
        }
        let small = end.saturating_sub(start) <= MAX_MOOF_BYTES;
        match &kind {
            b"mdat" if self.open => {
                if let Some((f, _)) = self.timings.last_mut() {
                    f.bytes.length = end.saturating_sub(f.bytes.offset);
                }
                false
            }
            b"moof" => {
                self.open = false;
                self.init_end.get_or_insert(start);
                if !small {
                    self.stopped = true;
                }
                small
            }
            b"sidx" => {
                self.open = false;
                self.init_end.get_or_insert(start);
                if self.index_range.is_none() && self.timings.is_empty() {
                    self.index_range = Some(ByteRange {
                        offset: start,
                        length: end.saturating_sub(start),
                    });
                }
                small
            }
            _ => {
                self.open = false;
                false
            }
        }
    }

    /// The content of the `moof` box that starts at `start` and ends at `end`.
    pub(crate) fn moof(&mut self, content: &[u8], start: u64, end: u64) {
        let Some(ctx) = self.ctx else { return };
        if self.stopped {
            return;
        }
        let Some(t) = parse_moof(content, &ctx) else {
            self.stopped = true;
            return;
        };
        if self.timings.len() >= MAX_FRAGMENTS {
            self.stopped = true;
            return;
        }
        let decode_start = match (t.tfdt, self.timings.last()) {
            (Some(d), _) => d,
            (None, Some((f, _))) => f.decode_start.saturating_add(f.duration),
            (None, None) => 0,
        };
        let presentation_start = i64::try_from(decode_start)
            .unwrap_or(i64::MAX)
            .saturating_add(t.min_cto);
        let fragment = Fragment {
            bytes: ByteRange {
                offset: start,
                length: end.saturating_sub(start),
            },
            decode_start,
            presentation_start,
            duration: t.duration,
            samples: t.samples,
            starts_with_sync: t.samples > 0 && t.sync,
            first_sample_end: t.first_sample.and_then(|(base, off, size)| {
                base.unwrap_or(start)
                    .checked_add_signed(off)?
                    .checked_add(u64::from(size))
            }),
        };
        self.timings.push((fragment, t.tfdt));
        self.open = true;
    }

    /// The content of a `sidx` box that ends at `end`.
    pub(crate) fn sidx(&mut self, content: &[u8], end: u64) {
        let Some(ctx) = self.ctx else { return };
        match parse_sidx(content, end) {
            Some((id, _, _)) if id != ctx.track_id => {}
            Some((_, ts, subs)) => {
                if *self.sidx_timescale.get_or_insert(ts) != ts
                    || self.subsegments.len().saturating_add(subs.len()) > MAX_FRAGMENTS
                {
                    self.sidx_bad = true;
                } else {
                    self.subsegments.extend(subs);
                }
            }
            None => self.sidx_bad = true,
        }
    }

    /// The index, once `fed` bytes were given; `None` for an unfragmented MP4.
    pub(crate) fn finish(self, fed: u64) -> Option<FragmentIndex> {
        let ctx = self.ctx?;
        let init_end = self.init_end.unwrap_or(fed).min(fed);
        let mut fragments: Vec<Fragment> = self.timings.into_iter().map(|(f, _)| f).collect();
        for f in &mut fragments {
            f.bytes.length = f.bytes.length.min(fed.saturating_sub(f.bytes.offset));
            let moof_past = f.bytes.offset;
            f.first_sample_end = f
                .first_sample_end
                .filter(|&e| e > moof_past && e <= f.bytes.end());
        }
        let sidx = match (self.sidx_bad, self.subsegments.is_empty()) {
            (false, true) => SidxUse::Absent,
            (true, _) => SidxUse::Inconsistent,
            (false, false) => apply_sidx(
                &self.subsegments,
                self.sidx_timescale.unwrap_or(0),
                ctx.timescale,
                &mut fragments,
            ),
        };
        Some(FragmentIndex {
            track_id: ctx.track_id,
            timescale: ctx.timescale,
            init: ByteRange {
                offset: 0,
                length: init_end,
            },
            index_range: self.index_range,
            fragments,
            sidx,
            complete: !self.stopped,
        })
    }
}

/// Checks that `subs` start at fragment starts and cover every fragment once, in order;
/// if so sets the presentation start of each subsegment's first fragment from the `sidx`.
fn apply_sidx(
    subs: &[Subsegment],
    sidx_timescale: u32,
    timescale: u32,
    fragments: &mut [Fragment],
) -> SidxUse {
    if sidx_timescale == 0 {
        return SidxUse::Inconsistent;
    }
    let mut firsts = Vec::with_capacity(subs.len());
    let mut next = 0usize;
    for s in subs {
        let Some(f) = fragments.get(next) else {
            return SidxUse::Inconsistent;
        };
        if f.bytes.offset != s.bytes.offset {
            return SidxUse::Inconsistent;
        }
        firsts.push(next);
        // The subsegment ends at the end of one of the fragments from `next` on.
        let Some(last) = fragments
            .get(next..)
            .and_then(|rest| rest.iter().position(|f| f.bytes.end() == s.bytes.end()))
        else {
            return SidxUse::Inconsistent;
        };
        next += last + 1;
    }
    if next != fragments.len() {
        return SidxUse::Inconsistent;
    }
    for (s, &i) in subs.iter().zip(&firsts) {
        let ticks = u128::from(s.ept) * u128::from(timescale) / u128::from(sidx_timescale);
        if let Some(f) = fragments.get_mut(i) {
            f.presentation_start = i64::try_from(ticks).unwrap_or(i64::MAX);
        }
    }
    SidxUse::Used
}

#[cfg(test)]
mod tests;
