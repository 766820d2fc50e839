//! Before an ingest: the spool that holds an input of unknown length or one that cannot
//! be read twice (stdin, an HTTP upload), the probe that tells its bitrate and type, and
//! the room check that refuses an object the volume cannot hold (its free space, or a
//! quota), shared by `isnode ingest` and `PUT /v1/objects/{name}`.
//!
//! The spool is an anonymous file (`O_TMPFILE`) in the volume's `tmp/`: it has no name,
//! so a killed process leaves nothing behind.

use std::fs::File;
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::path::Path;

use crate::records::ObjectState;
use crate::{Layout, StoreError, Volume, VolumeParams};

/// Bytes read from the input per write into the spool.
const SPOOL_CHUNK_BYTES: usize = 1 << 20;

/// The most bytes a spool may take, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpoolBound {
    /// The bound, bytes.
    pub bytes: u64,
    /// What sets it.
    pub reason: SpoolLimit,
}

/// What bounds a spool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpoolLimit {
    /// The announced size (`--size`, `Content-Length`).
    Size,
    /// The caller's own limit (`--max-spool-bytes`).
    Flag,
    /// Half the free space of the volume's file system (the object's segments need the rest).
    FreeSpace,
    /// The volume's quota (`max_volume_bytes`): what it has left.
    Quota,
}

impl SpoolLimit {
    /// The limit in words, for an error message.
    pub fn explain(self) -> &'static str {
        match self {
            SpoolLimit::Size => "the --size given",
            SpoolLimit::Flag => "the --max-spool-bytes limit; raise it, or give --size",
            SpoolLimit::FreeSpace => {
                "half the free space of the volume's file system (the object's segments need the rest)"
            }
            SpoolLimit::Quota => "what the volume's quota (max_volume_bytes) has left",
        }
    }
}

impl SpoolBound {
    /// The bound from the announced size, the caller's limit and the free bytes (pure):
    /// the smallest of them, with half the free bytes standing for the file system.
    pub fn new(size: Option<u64>, max_spool_bytes: u64, free_bytes: u64) -> SpoolBound {
        let by_free = SpoolBound {
            bytes: free_bytes / 2,
            reason: SpoolLimit::FreeSpace,
        };
        let asked = match size {
            Some(bytes) => SpoolBound {
                bytes,
                reason: SpoolLimit::Size,
            },
            None => SpoolBound {
                bytes: max_spool_bytes,
                reason: SpoolLimit::Flag,
            },
        };
        if asked.bytes.min(max_spool_bytes) <= by_free.bytes {
            SpoolBound {
                bytes: asked.bytes.min(max_spool_bytes),
                reason: if asked.bytes <= max_spool_bytes {
                    asked.reason
                } else {
                    SpoolLimit::Flag
                },
            }
        } else {
            by_free
        }
    }

    /// This bound, or the quota's room if that is smaller.
    pub fn within_quota(self, quota_left_bytes: Option<u64>) -> SpoolBound {
        match quota_left_bytes {
            Some(left) if left < self.bytes => SpoolBound {
                bytes: left,
                reason: SpoolLimit::Quota,
            },
            _ => self,
        }
    }
}

/// Copies `src` into an anonymous file in `tmp_dir` (gone on error or if the process
/// dies) and returns it positioned at its start, refusing more than `bound` bytes and,
/// when `expected` is given, any other length. `progress` gets the bytes copied so far.
pub fn spool(
    tmp_dir: &Path,
    src: &mut dyn Read,
    expected: Option<u64>,
    bound: SpoolBound,
    progress: &mut dyn FnMut(u64),
) -> Result<File, StoreError> {
    if let Some(e) = expected.filter(|e| *e > bound.bytes) {
        return Err(StoreError::SpoolFull {
            bytes: e,
            bound,
            when: SpoolStage::Announced,
        });
    }
    let mut file = spool_file(tmp_dir)?;
    let copied = copy_bounded(src, &mut file, bound.bytes.saturating_add(1), progress)?;
    if let Some(expected) = expected {
        if copied < expected {
            return Err(StoreError::Truncated {
                got: copied,
                expected,
            });
        }
        if copied > expected {
            return Err(StoreError::BadParams(format!(
                "the input is longer than the announced {expected} bytes (stopped reading)"
            )));
        }
    }
    if copied > bound.bytes {
        return Err(StoreError::SpoolFull {
            bytes: copied,
            bound,
            when: SpoolStage::Midway,
        });
    }
    file.seek(SeekFrom::Start(0))
        .map_err(StoreError::io("rewinding the spool file"))?;
    Ok(file)
}

/// A new, empty spool file in `tmp_dir`: anonymous (`O_TMPFILE`), gone with its last
/// descriptor.
pub fn spool_file(tmp_dir: &Path) -> Result<File, StoreError> {
    tempfile::tempfile_in(tmp_dir).map_err(StoreError::io(format!(
        "creating a spool file in {}",
        tmp_dir.display()
    )))
}

/// Copies at most `limit` bytes of `src` to `dst` in large writes; the bytes copied.
fn copy_bounded(
    src: &mut dyn Read,
    dst: &mut File,
    limit: u64,
    progress: &mut dyn FnMut(u64),
) -> Result<u64, StoreError> {
    let mut buf = vec![0u8; SPOOL_CHUNK_BYTES];
    let mut copied = 0u64;
    while copied < limit {
        let want = usize::try_from(limit - copied).map_or(buf.len(), |l| l.min(buf.len()));
        let n = match src.read(&mut buf[..want]) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(source) => {
                return Err(StoreError::Io {
                    context: "reading the input".into(),
                    source,
                })
            }
        };
        dst.write_all(&buf[..n])
            .map_err(StoreError::io("writing the spool file"))?;
        copied += n as u64;
        progress(copied);
    }
    Ok(copied)
}

/// When a spool was found too large.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpoolStage {
    /// From the announced size, before reading.
    Announced,
    /// While reading (nothing was stored).
    Midway,
}

/// What probing found, with the caller's overrides applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Described {
    /// Bitrate, bits per second.
    pub bitrate_bps: u64,
    /// MIME type.
    pub content_type: String,
}

/// Probes `len` bytes of `file` (container, bitrate); `bitrate_bps` and `content_type`,
/// when given, override what probing finds.
pub fn describe<R: isnode_media::ReadAt + ?Sized>(
    file: &R,
    len: u64,
    bitrate_bps: Option<u64>,
    content_type: Option<String>,
) -> Result<Described, StoreError> {
    let info = isnode_media::probe(file, len).map_err(|source| StoreError::Media {
        context: "examining the input".into(),
        source,
    })?;
    let bitrate_bps = match bitrate_bps {
        Some(0) => {
            return Err(StoreError::BadParams(
                "the bitrate must be greater than 0".into(),
            ))
        }
        Some(b) => b,
        None => info.require_bitrate().map_err(|source| StoreError::Media {
            context: "cannot tell the bitrate".into(),
            source,
        })?,
    };
    Ok(Described {
        bitrate_bps,
        content_type: content_type.unwrap_or_else(|| info.content_type.to_string()),
    })
}

/// What an upload of known length keeps of its bytes for the probe once they are all in:
/// the first and last [`isnode_media::PROBE_WINDOW`] bytes, in memory, when they are all
/// the probe of an MPEG-TS (or of an unknown container) reads; a spool of every byte
/// when the start says MP4 (its `moov` may be anywhere).
pub struct ProbeCopy {
    len: u64,
    tmp_dir: std::path::PathBuf,
    pos: u64,
    head: Vec<u8>,
    tail: Vec<u8>,
    tail_start: u64,
    spool: Option<File>,
    decided: bool,
}

impl ProbeCopy {
    /// A copy of an input of `len` bytes; a spool, if needed, goes to `tmp_dir`.
    pub fn new(tmp_dir: &Path, len: u64) -> ProbeCopy {
        let window = isnode_media::PROBE_WINDOW as u64;
        let tail_start = len.saturating_sub(window);
        ProbeCopy {
            len,
            tmp_dir: tmp_dir.to_path_buf(),
            pos: 0,
            head: Vec::new(),
            // Bounded: at most PROBE_WINDOW bytes.
            tail: vec![0u8; usize::try_from(len - tail_start).unwrap_or(0)],
            tail_start,
            spool: None,
            decided: false,
        }
    }

    /// Takes the next bytes of the input (past `len`: ignored, the ingest refuses them).
    pub fn write(&mut self, data: &[u8]) -> Result<(), StoreError> {
        let start = self.pos;
        let room = (self.len - start.min(self.len)) as usize;
        let data = &data[..data.len().min(room)];
        let window = isnode_media::PROBE_WINDOW as u64;
        if start < window {
            let take = usize::try_from(window - start).map_or(data.len(), |w| w.min(data.len()));
            self.head.extend_from_slice(&data[..take]);
        }
        let end = start + data.len() as u64;
        if end > self.tail_start {
            let from = start.max(self.tail_start);
            let src = &data[(from - start) as usize..];
            let at = (from - self.tail_start) as usize;
            if let Some(dst) = self.tail.get_mut(at..at + src.len()) {
                dst.copy_from_slice(src);
            }
        }
        self.pos = end;
        if let Some(f) = &mut self.spool {
            return f
                .write_all(data)
                .map_err(StoreError::io("writing the spool file"));
        }
        if !self.decided && (self.head.len() >= isnode_media::DETECT_LEN || end == self.len) {
            self.decided = true;
            let sniff = &self.head[..self.head.len().min(isnode_media::DETECT_LEN)];
            if isnode_media::detect(sniff) == isnode_media::Container::Mp4 {
                let mut f = spool_file(&self.tmp_dir)?;
                // The head holds every byte so far but those of `data` past it.
                let past = self.head.len() as u64 - start;
                f.write_all(&self.head)
                    .and_then(|()| f.write_all(data.get(past as usize..).unwrap_or(&[])))
                    .map_err(StoreError::io("writing the spool file"))?;
                self.spool = Some(f);
            }
        }
        Ok(())
    }

    /// Probes what was kept ([`describe`]).
    pub fn describe(
        &self,
        bitrate_bps: Option<u64>,
        content_type: Option<String>,
    ) -> Result<Described, StoreError> {
        match &self.spool {
            Some(f) => describe(f, self.len, bitrate_bps, content_type),
            None => describe(self, self.len, bitrate_bps, content_type),
        }
    }
}

impl isnode_media::ReadAt for ProbeCopy {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        let (from, at) = if offset < self.head.len() as u64 {
            (&self.head, offset as usize)
        } else if offset >= self.tail_start && offset < self.len {
            (&self.tail, (offset - self.tail_start) as usize)
        } else if offset >= self.len {
            return Ok(0);
        } else {
            return Err(std::io::Error::other(
                "the probe read bytes the upload did not keep",
            ));
        };
        let src = from.get(at..).unwrap_or(&[]);
        let n = src.len().min(buf.len());
        buf[..n].copy_from_slice(&src[..n]);
        Ok(n)
    }
}

/// What limits the room for a new object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoomLimit {
    /// The free space of a file system of the volume.
    FreeSpace,
    /// The volume's quota (`max_volume_bytes`).
    Quota,
}

impl std::fmt::Display for RoomLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RoomLimit::FreeSpace => "the free space of the volume's file system",
            RoomLimit::Quota => "what the volume's quota (max_volume_bytes) leaves",
        })
    }
}

/// Whether the input still has to be spooled (its bytes count against the free space).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpoolNeed {
    /// The input goes through a spool not yet written.
    ToSpool,
    /// No spool, or one written already.
    None,
}

/// Bytes the segment files of an object of `len` bytes take on a volume of `params`.
pub fn stored_bytes(params: VolumeParams, len: u64) -> Result<u64, StoreError> {
    let layout = Layout::new(params, len)?;
    Ok((0..params.members).fold(0u64, |sum, m| {
        sum.saturating_add(layout.segment_len_bytes(m))
    }))
}

/// Bytes the segment files of every object of `vol` take (complete ones and those being
/// written or filled: an upload or fill under way counts).
pub fn volume_bytes(vol: &Volume) -> Result<u64, StoreError> {
    let mut sum = 0u64;
    for state in [
        ObjectState::Complete,
        ObjectState::Writing,
        ObjectState::Filling,
    ] {
        for entry in vol.catalog().entries(state)? {
            let rec = entry.record();
            // A bad row counts as nothing: its layout may be impossible.
            let bytes = vol
                .layout(rec)
                .map(|l| {
                    (0..l.params().members)
                        .map(|m| l.segment_len_bytes(m))
                        .sum()
                })
                .unwrap_or(0u64);
            sum = sum.saturating_add(bytes);
        }
    }
    Ok(sum)
}

/// What the quota leaves, bytes (`None`: no quota).
pub fn quota_left(vol: &Volume, max_volume_bytes: Option<u64>) -> Result<Option<u64>, StoreError> {
    match max_volume_bytes {
        None => Ok(None),
        Some(max) => Ok(Some(max.saturating_sub(volume_bytes(vol)?))),
    }
}

/// The fewest free bytes of the volume's scratch directory and members.
pub fn free_bytes(vol: &Volume) -> Result<u64, StoreError> {
    let mut dirs = vec![vol.tmp_dir()];
    dirs.extend(vol.members().iter().cloned());
    let mut least = u64::MAX;
    for d in dirs {
        let free = crate::io::free_bytes(&d).map_err(StoreError::io(format!(
            "reading the free space of {}",
            d.display()
        )))?;
        least = least.min(free);
    }
    Ok(least)
}

/// Refuses, with [`StoreError::NoRoom`], an object of `len` bytes that would not fit the
/// volume's free space (with its spool when `spool` says so) or its quota.
pub fn check_room(
    vol: &Volume,
    len: u64,
    spool: SpoolNeed,
    max_volume_bytes: Option<u64>,
) -> Result<(), StoreError> {
    let stored = stored_bytes(*vol.params(), len)?;
    if let Some(left) = quota_left(vol, max_volume_bytes)? {
        if stored > left {
            return Err(StoreError::NoRoom {
                needed_bytes: stored,
                available_bytes: left,
                limit: RoomLimit::Quota,
            });
        }
    }
    let needed = match spool {
        SpoolNeed::ToSpool => stored.saturating_add(len),
        SpoolNeed::None => stored,
    };
    let free = free_bytes(vol)?;
    if needed > free {
        return Err(StoreError::NoRoom {
            needed_bytes: needed,
            available_bytes: free,
            limit: RoomLimit::FreeSpace,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spool_takes_the_smallest_bound() {
        let b = SpoolBound::new(None, 1000, 10_000);
        assert_eq!((b.bytes, b.reason), (1000, SpoolLimit::Flag));
        let b = SpoolBound::new(None, 1000, 1000);
        assert_eq!((b.bytes, b.reason), (500, SpoolLimit::FreeSpace));
        let b = SpoolBound::new(Some(300), 1000, 10_000);
        assert_eq!((b.bytes, b.reason), (300, SpoolLimit::Size));
        let b = SpoolBound::new(Some(3000), 1000, 10_000);
        assert_eq!((b.bytes, b.reason), (1000, SpoolLimit::Flag));
        let b = SpoolBound::new(Some(3000), 10_000, 4000);
        assert_eq!((b.bytes, b.reason), (2000, SpoolLimit::FreeSpace));
        let b = SpoolBound::new(Some(3000), 10_000, 40_000).within_quota(Some(100));
        assert_eq!((b.bytes, b.reason), (100, SpoolLimit::Quota));
        let b = SpoolBound::new(Some(3000), 10_000, 40_000).within_quota(None);
        assert_eq!((b.bytes, b.reason), (3000, SpoolLimit::Size));
    }

    #[test]
    fn a_spool_refuses_a_wrong_length_and_keeps_the_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
        let bound = SpoolBound::new(None, 10_000, u64::MAX);
        let mut f = spool(dir.path(), &mut &data[..], Some(5000), bound, &mut |_| {}).unwrap();
        let mut back = Vec::new();
        f.read_to_end(&mut back).unwrap();
        assert_eq!(back, data);
        let short = spool(dir.path(), &mut &data[..], Some(6000), bound, &mut |_| {});
        assert!(matches!(
            short,
            Err(StoreError::Truncated { got: 5000, .. })
        ));
        let long = spool(dir.path(), &mut &data[..], Some(4000), bound, &mut |_| {});
        assert!(matches!(long, Err(StoreError::BadParams(_))));
        let small = SpoolBound::new(None, 100, u64::MAX);
        let over = spool(dir.path(), &mut &data[..], None, small, &mut |_| {});
        assert!(matches!(
            over,
            Err(StoreError::SpoolFull {
                when: SpoolStage::Midway,
                ..
            })
        ));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    /// A probe of the kept head and tail finds what a probe of the whole file finds.
    #[test]
    fn a_probe_copy_probes_like_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut ts = Vec::new();
        let cfg = isnode_media::TsGenConfig {
            bitrate_bps: 8_000_000,
            duration_s: 10.0,
            seed: 3,
        };
        isnode_media::generate_ts(&cfg, &mut ts).unwrap();
        let len = ts.len() as u64;
        for piece in [1000usize, 4096, 333_333, 5 << 20] {
            let mut copy = ProbeCopy::new(dir.path(), len);
            for p in ts.chunks(piece) {
                copy.write(p).unwrap();
            }
            assert!(copy.spool.is_none(), "an MPEG-TS is not spooled");
            let d = copy.describe(None, None).unwrap();
            assert_eq!(d, describe(&ts, len, None, None).unwrap());
            assert_eq!(d.bitrate_bps, 8_000_000);
        }
    }
}
