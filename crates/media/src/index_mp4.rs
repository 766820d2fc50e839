//! The random-access points of an MP4 from the sample tables of its first video track
//! (see [`crate::index`]): parsed from the `moov` box's content held in memory, every
//! count bounded by the bytes of its table.

use crate::access_point::AccessPoint;
use crate::boxes::{be32, be64, child, children};

/// Most samples walked (about 7.7 days of 25 frame/s video): a table that claims more is
/// cut there, so a small forged `moov` cannot cost billions of steps.
const MAX_SAMPLES: usize = 1 << 24;

/// A full box's table: its entry count (after version/flags at `count_at`) and entries of
/// `entry_len` bytes, the count bounded by the bytes present.
fn table(content: &[u8], count_at: usize, entry_len: usize) -> Option<(usize, &[u8])> {
    let count = usize::try_from(be32(content, count_at)?).ok()?;
    let entries = content.get(count_at + 4..)?;
    Some((count.min(entries.len() / entry_len), entries))
}

/// The sample tables of one track.
struct Tables<'a> {
    timescale: u32,
    stts: (usize, &'a [u8]),
    stss: Option<(usize, &'a [u8])>,
    stsc: (usize, &'a [u8]),
    sizes: SampleSizes<'a>,
    chunks: ChunkOffsets<'a>,
}

enum SampleSizes<'a> {
    Fixed {
        size: u32,
        count: usize,
    },
    Table {
        count: usize,
        bits: u8,
        data: &'a [u8],
    },
}

impl SampleSizes<'_> {
    fn count(&self) -> usize {
        match self {
            SampleSizes::Fixed { count, .. } | SampleSizes::Table { count, .. } => *count,
        }
    }

    fn get(&self, i: usize) -> u64 {
        match self {
            SampleSizes::Fixed { size, .. } => u64::from(*size),
            SampleSizes::Table { bits: 32, data, .. } => be32(data, i * 4).map_or(0, u64::from),
            SampleSizes::Table { bits: 16, data, .. } => data
                .get(i * 2..i * 2 + 2)
                .map_or(0, |b| u64::from(u16::from_be_bytes([b[0], b[1]]))),
            SampleSizes::Table { bits: 8, data, .. } => data.get(i).map_or(0, |&b| u64::from(b)),
            SampleSizes::Table { data, .. } => data.get(i / 2).map_or(0, |&b| {
                u64::from(if i % 2 == 0 { b >> 4 } else { b & 0x0F })
            }),
        }
    }
}

enum ChunkOffsets<'a> {
    Co32(usize, &'a [u8]),
    Co64(usize, &'a [u8]),
}

impl ChunkOffsets<'_> {
    fn count(&self) -> usize {
        match self {
            ChunkOffsets::Co32(n, _) | ChunkOffsets::Co64(n, _) => *n,
        }
    }

    fn get(&self, i: usize) -> Option<u64> {
        match self {
            ChunkOffsets::Co32(_, d) => be32(d, i * 4).map(u64::from),
            ChunkOffsets::Co64(_, d) => be64(d, i * 8),
        }
    }
}

fn sizes(stbl: &[u8]) -> Option<SampleSizes<'_>> {
    if let Some(stsz) = child(stbl, b"stsz") {
        let size = be32(stsz, 4)?;
        let count = usize::try_from(be32(stsz, 8)?).ok()?;
        if size != 0 {
            // Bounded by the stts total below (every sample needs a time).
            return Some(SampleSizes::Fixed { size, count });
        }
        let data = stsz.get(12..)?;
        return Some(SampleSizes::Table {
            count: count.min(data.len() / 4),
            bits: 32,
            data,
        });
    }
    let stz2 = child(stbl, b"stz2")?;
    let bits = *stz2.get(7)?;
    let count = usize::try_from(be32(stz2, 8)?).ok()?;
    let data = stz2.get(12..)?;
    let max = match bits {
        4 => data.len() * 2,
        8 => data.len(),
        16 => data.len() / 2,
        _ => return None,
    };
    Some(SampleSizes::Table {
        count: count.min(max),
        bits,
        data,
    })
}

/// The tables of the first `trak` whose handler is `vide`.
fn video_tables(moov: &[u8]) -> Option<Tables<'_>> {
    children(moov)
        .filter(|(k, _)| k == b"trak")
        .find_map(|(_, trak)| {
            let mdia = child(trak, b"mdia")?;
            let hdlr = child(mdia, b"hdlr")?;
            (hdlr.get(8..12)? == b"vide").then_some(())?;
            let mdhd = child(mdia, b"mdhd")?;
            let timescale = match mdhd.first()? {
                1 => be32(mdhd, 20)?,
                _ => be32(mdhd, 12)?,
            };
            let stbl = child(child(mdia, b"minf")?, b"stbl")?;
            let chunks = match (child(stbl, b"stco"), child(stbl, b"co64")) {
                (Some(c), _) => {
                    let (n, d) = table(c, 4, 4)?;
                    ChunkOffsets::Co32(n, d)
                }
                (None, Some(c)) => {
                    let (n, d) = table(c, 4, 8)?;
                    ChunkOffsets::Co64(n, d)
                }
                _ => return None,
            };
            Some(Tables {
                timescale,
                stts: table(child(stbl, b"stts")?, 4, 8)?,
                stss: child(stbl, b"stss").and_then(|c| table(c, 4, 4)),
                stsc: table(child(stbl, b"stsc")?, 4, 12)?,
                sizes: sizes(stbl)?,
                chunks,
            })
        })
}

/// Walks the samples of `moov`'s first video track in order and gives `push` each sync
/// sample's point. Samples are bounded by the `stts` total and the sizes table.
pub(crate) fn index_moov(moov: &[u8], push: &mut dyn FnMut(AccessPoint)) {
    let Some(t) = video_tables(moov) else { return };
    if t.timescale == 0 {
        return;
    }
    let mut time = Cursor::new(t.stts);
    let mut chunk_runs = Cursor::new(t.stsc);
    let mut sync_next = 0usize;
    let mut sample = 0usize;
    let samples = t.sizes.count().min(MAX_SAMPLES);
    for chunk in 0..t.chunks.count() {
        let Some(mut offset) = t.chunks.get(chunk) else {
            return;
        };
        let Some(per_chunk) = chunk_runs.samples_per_chunk(chunk) else {
            return;
        };
        for _ in 0..per_chunk {
            if sample >= samples {
                return;
            }
            let Some(dts) = time.next_time() else { return };
            // stss lists 1-based sample numbers in increasing order.
            let is_sync = match t.stss {
                None => true,
                Some((n, d)) => {
                    while sync_next < n
                        && be32(d, sync_next * 4).map_or(u64::MAX, u64::from) < sample as u64 + 1
                    {
                        sync_next += 1;
                    }
                    sync_next < n
                        && be32(d, sync_next * 4).map(u64::from) == Some(sample as u64 + 1)
                }
            };
            if is_sync {
                push(AccessPoint {
                    time_s: dts as f64 / f64::from(t.timescale),
                    offset_bytes: offset,
                });
            }
            offset = offset.saturating_add(t.sizes.get(sample));
            sample += 1;
        }
    }
}

/// A reader over `stts` (decode times) or `stsc` (samples per chunk) runs.
struct Cursor<'a> {
    count: usize,
    data: &'a [u8],
    entry: usize,
    /// Samples taken from the current `stts` entry.
    used: u64,
    /// Decode time of the next sample.
    dts: u64,
}

impl<'a> Cursor<'a> {
    fn new((count, data): (usize, &'a [u8])) -> Cursor<'a> {
        Cursor {
            count,
            data,
            entry: 0,
            used: 0,
            dts: 0,
        }
    }

    /// `stts`: the decode time of the next sample, `None` past the table.
    fn next_time(&mut self) -> Option<u64> {
        loop {
            if self.entry >= self.count {
                return None;
            }
            let n = u64::from(be32(self.data, self.entry * 8)?);
            if self.used < n {
                let delta = u64::from(be32(self.data, self.entry * 8 + 4)?);
                let t = self.dts;
                self.dts = self.dts.saturating_add(delta);
                self.used += 1;
                return Some(t);
            }
            self.entry += 1;
            self.used = 0;
        }
    }

    /// `stsc`: samples in chunk `chunk` (0-based; chunks are asked in increasing order).
    fn samples_per_chunk(&mut self, chunk: usize) -> Option<u32> {
        let first_chunk = |i: usize| be32(self.data, i * 12).map(|c| c as usize);
        while self.entry + 1 < self.count && first_chunk(self.entry + 1)? <= chunk + 1 {
            self.entry += 1;
        }
        if self.entry >= self.count || first_chunk(self.entry)? > chunk + 1 {
            return None;
        }
        be32(self.data, self.entry * 12 + 4)
    }
}
