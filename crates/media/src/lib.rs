//! Media container handling for isnode ingest.
//!
//! At ingest the node needs each object's **bitrate** (to pace its streams later), its duration and
//! a content type, and it must refuse truncated uploads. This crate provides:
//!
//! * [`probe`]: detect the container (MPEG-TS, MP4/ISO-BMFF, unknown) of an object reachable
//!   through [`ReadAt`] (a byte slice, a `Vec<u8>`, a [`std::fs::File`]), check it is not
//!   truncated, and measure its bitrate and duration. Only the first and last
//!   [`PROBE_WINDOW`] bytes of an MPEG-TS are read, and only box headers plus `moov/mvhd` of an
//!   MP4, so probing a multi-GB file costs a few MB of I/O.
//! * sans-IO building blocks: [`detect`], [`probe_ts`] (over a head and a tail slice),
//!   [`probe_mp4`].
//! * [`Indexer`]: the time index (random-access points) of an object fed in order, at ingest
//!   (see [`index`]).
//! * [`fmp4`]: the fragment index of a fragmented MP4 / CMAF ([`MediaIndex::fragments`]).
//! * [`descriptor`]: a rendition's RFC 6381 codecs, resolution and frame rate
//!   ([`MediaIndex::rendition`], [`describe_moov`], [`describe_ts`]).
//! * [`align`]: [`check_aligned`], whether renditions' key frames and durations match.
//! * [`generate_ts`]: a deterministic constant-bitrate MPEG-TS test-stream generator.
//!
//! Parsing never panics, whatever the input bytes.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod access_point;
pub mod align;
mod boxes;
pub mod cenc;
pub mod cenc_clear;
pub mod cenc_fragment;
mod crc;
mod describe_ts;
pub mod descriptor;
pub mod fmp4;
mod h264;
pub mod index;
mod index_mp4;
mod mp4;
pub mod segments;
pub mod ts;
mod tsgen;

use std::fmt;
use std::io;

pub use access_point::AccessPoint;
pub use align::{check_aligned, AlignmentError, RenditionTiming, Tolerance};
pub use crc::crc32_mpeg2;
pub use describe_ts::{describe_ts, DESCRIBE_TS_BYTES};
pub use descriptor::{
    describe_moov, AudioDescriptor, FrameRate, FrameRateSource, RenditionDescriptor,
    VideoDescriptor,
};
pub use fmp4::{ByteRange, Fragment, FragmentIndex, SidxUse};
pub use index::{Indexer, MediaIndex, TsKeyFrame, TsKeyFrames};
pub use mp4::probe_mp4;
pub use ts::probe_ts;
pub use tsgen::{
    generate_ts, generate_ts_with_first_pcr, TsGenConfig, DEFAULT_FIRST_PCR, MAX_BITRATE_BPS,
    MIN_BITRATE_BPS,
};

/// How many bytes of an MPEG-TS [`probe`] reads from its start and from its end.
pub const PROBE_WINDOW: usize = 4 << 20;

/// How many bytes [`probe`] reads first to [`detect`] the container.
pub const DETECT_LEN: usize = 4096;

/// A container format recognised by [`detect`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Container {
    /// MPEG-2 transport stream (ISO/IEC 13818-1), 188-byte packets.
    MpegTs,
    /// ISO base media file format (MP4, MOV, fragmented MP4 / CMAF).
    Mp4,
    /// Anything else; stored as opaque bytes.
    Unknown,
}

impl Container {
    /// The MIME type to serve objects of this container with.
    pub fn content_type(self) -> &'static str {
        match self {
            Container::MpegTs => "video/mp2t",
            Container::Mp4 => "video/mp4",
            Container::Unknown => "application/octet-stream",
        }
    }

    /// A short human-readable name ("MPEG-TS", "MP4", "unknown container").
    pub fn name(self) -> &'static str {
        match self {
            Container::MpegTs => "MPEG-TS",
            Container::Mp4 => "MP4",
            Container::Unknown => "unknown container",
        }
    }
}

impl fmt::Display for Container {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why [`probe`] could not determine a bitrate (see [`MediaInfo::bitrate_unknown`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BitrateUnknown {
    /// The MPEG-TS carries no PCR in its first [`PROBE_WINDOW`] bytes.
    NoPcr,
    /// Only one PCR was found, or the PCRs do not advance, so no rate can be measured.
    SinglePcr,
    /// The MP4 has no `moov` box.
    Mp4NoMoov,
    /// The MP4 `moov` box has no `mvhd` box.
    Mp4NoMvhd,
    /// The MP4 movie duration (from `mvhd`, or `mvex/mehd` for fragmented files) is zero or unknown,
    /// or the timescale is zero.
    Mp4NoDuration,
    /// The container is not recognised, so nothing is known about its timing.
    UnknownContainer,
}

impl fmt::Display for BitrateUnknown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BitrateUnknown::NoPcr => "no PCR found in the MPEG-TS",
            BitrateUnknown::SinglePcr => {
                "the MPEG-TS has fewer than two distinct PCR values, so its bitrate cannot be measured"
            }
            BitrateUnknown::Mp4NoMoov => "the MP4 has no moov box",
            BitrateUnknown::Mp4NoMvhd => "the MP4 moov box has no mvhd box",
            BitrateUnknown::Mp4NoDuration => {
                "the MP4 movie duration (mvhd/mehd) is zero or unknown"
            }
            BitrateUnknown::UnknownContainer => {
                "the file is neither MPEG-TS nor MP4, so its bitrate is unknown"
            }
        })
    }
}

/// What [`probe`] learned about an object.
#[derive(Debug, Clone, PartialEq)]
pub struct MediaInfo {
    /// The detected container.
    pub container: Container,
    /// Average bitrate in bits per second, if it could be measured.
    pub bitrate_bps: Option<u64>,
    /// Duration in seconds, if known.
    pub duration_s: Option<f64>,
    /// MIME type, as [`Container::content_type`].
    pub content_type: &'static str,
    /// Why `bitrate_bps` is `None` (always `Some` exactly when `bitrate_bps` is `None`).
    pub bitrate_unknown: Option<BitrateUnknown>,
}

impl MediaInfo {
    /// An info with no timing, for `container`, whose bitrate is unknown for `why`.
    pub fn without_bitrate(container: Container, why: BitrateUnknown) -> Self {
        MediaInfo {
            container,
            bitrate_bps: None,
            duration_s: None,
            content_type: container.content_type(),
            bitrate_unknown: Some(why),
        }
    }

    /// The bitrate, or [`MediaError::NoBitrate`] explaining why it is unknown
    /// (its message ends with "pass --bitrate").
    pub fn require_bitrate(&self) -> Result<u64, MediaError> {
        match self.bitrate_bps {
            Some(b) => Ok(b),
            None => Err(MediaError::NoBitrate(
                self.bitrate_unknown
                    .unwrap_or(BitrateUnknown::UnknownContainer),
            )),
        }
    }
}

/// Errors from probing and generating media.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MediaError {
    /// The object is shorter than its structure says: an incomplete upload.
    #[error("{container} is truncated: {reason}")]
    Truncated {
        /// The detected container.
        container: Container,
        /// What exactly is missing.
        reason: String,
    },
    /// The object is structurally invalid in a way that is not just truncation.
    #[error("{container} is malformed: {reason}")]
    Malformed {
        /// The detected container.
        container: Container,
        /// What is wrong.
        reason: String,
    },
    /// The bitrate could not be determined (from [`MediaInfo::require_bitrate`]).
    #[error("{0}: pass --bitrate")]
    NoBitrate(BitrateUnknown),
    /// A [`TsGenConfig`] that cannot produce a valid stream.
    #[error("invalid MPEG-TS generator configuration: {0}")]
    InvalidConfig(String),
    /// Arguments to a probe function that contradict each other (a caller bug).
    #[error("invalid probe arguments: {0}")]
    InvalidArgument(String),
    /// Reading or writing failed.
    #[error("media I/O error")]
    Io(#[from] io::Error),
}

/// Positioned reads from an immutable source, so that probing needs neither `&mut` nor the whole
/// object in memory.
///
/// Implemented for `[u8]`, `Vec<u8>`, [`std::fs::File`] (via `pread` on Unix) and references.
pub trait ReadAt {
    /// Reads up to `buf.len()` bytes starting at `offset`; returns how many were read
    /// (0 at or past the end of the source).
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize>;

    /// Reads until `buf` is full or the source ends; returns how many bytes were read.
    /// Retries on [`io::ErrorKind::Interrupted`].
    fn read_full_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let mut done = 0usize;
        while done < buf.len() {
            let Some(off) = offset.checked_add(done as u64) else {
                break;
            };
            match self.read_at(off, &mut buf[done..]) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }
}

impl ReadAt for [u8] {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let Ok(start) = usize::try_from(offset) else {
            return Ok(0);
        };
        let Some(avail) = self.get(start..) else {
            return Ok(0);
        };
        let n = avail.len().min(buf.len());
        buf[..n].copy_from_slice(&avail[..n]);
        Ok(n)
    }
}

impl ReadAt for Vec<u8> {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.as_slice().read_at(offset, buf)
    }
}

impl<T: ReadAt + ?Sized> ReadAt for &T {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        (**self).read_at(offset, buf)
    }
}

impl ReadAt for std::fs::File {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        #[cfg(unix)]
        {
            std::os::unix::fs::FileExt::read_at(self, buf, offset)
        }
        #[cfg(windows)]
        {
            std::os::windows::fs::FileExt::seek_read(self, buf, offset)
        }
        #[cfg(not(any(unix, windows)))]
        {
            let _ = (offset, buf);
            Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "positioned reads are not supported on this platform",
            ))
        }
    }
}

/// Reads exactly `buf.len()` bytes at `offset`, which the caller has checked lie inside the
/// object's declared length; a short read means the data ends early, i.e. it is truncated.
pub(crate) fn read_region<R: ReadAt + ?Sized>(
    src: &R,
    container: Container,
    offset: u64,
    buf: &mut [u8],
    total_len: u64,
) -> Result<(), MediaError> {
    let n = src.read_full_at(offset, buf)?;
    if n < buf.len() {
        return Err(MediaError::Truncated {
            container,
            reason: format!(
                "the data ends at byte {}, before the declared length of {total_len} bytes",
                offset.saturating_add(n as u64)
            ),
        });
    }
    Ok(())
}

/// Detects the container from the first bytes of an object (pass at least 1 KiB when available).
///
/// * MPEG-TS: the sync byte 0x47 at offsets 0, 188, 376, … (up to 8 packets checked, at least two
///   unless `head` is exactly one packet).
/// * MP4: the first box has a known top-level type (`ftyp`, `moov`, `mdat`, `free`, `skip`,
///   `styp`, `wide`, `pdin`, `uuid`) and a plausible size.
/// * Otherwise [`Container::Unknown`].
pub fn detect(head: &[u8]) -> Container {
    if ts::looks_like_ts(head) {
        Container::MpegTs
    } else if mp4::looks_like_mp4(head) {
        Container::Mp4
    } else {
        Container::Unknown
    }
}

/// Probes an object of `total_len` bytes readable through `src`.
///
/// Detects the container from the first [`DETECT_LEN`] bytes, then:
///
/// * MPEG-TS: checks the length is a whole number of 188-byte packets and that the last packet
///   starts with the sync byte (else [`MediaError::Truncated`]), then measures the bitrate from
///   the first PCR in the first [`PROBE_WINDOW`] bytes and the last PCR in the last
///   [`PROBE_WINDOW`] bytes (see [`probe_ts`]).
/// * MP4: walks the top-level boxes (a box running past `total_len` is
///   [`MediaError::Truncated`]), reads `moov/mvhd` wherever it is, bitrate = `total_len` × 8 /
///   duration (see [`probe_mp4`]).
/// * Unknown: no checks, no bitrate.
///
/// `total_len` is the object's authoritative length; if `src` ends before it, the object is
/// reported as truncated.  A missing bitrate is not an error here: see
/// [`MediaInfo::bitrate_unknown`] and [`MediaInfo::require_bitrate`].
pub fn probe<R: ReadAt + ?Sized>(src: &R, total_len: u64) -> Result<MediaInfo, MediaError> {
    let mut sniff = [0u8; DETECT_LEN];
    let sniff_len = usize::try_from(total_len.min(DETECT_LEN as u64)).unwrap_or(DETECT_LEN);
    let got = src.read_full_at(0, &mut sniff[..sniff_len])?;
    match detect(&sniff[..got]) {
        Container::MpegTs => {
            if total_len % ts::PACKET_LEN as u64 != 0 {
                return Err(ts::not_whole_packets(total_len));
            }
            let head_len = usize::try_from(total_len.min(PROBE_WINDOW as u64)).unwrap_or(0);
            let mut head = vec![0u8; head_len];
            read_region(src, Container::MpegTs, 0, &mut head, total_len)?;
            let tail = if total_len <= head.len() as u64 {
                Vec::new()
            } else {
                // Start the tail on a packet boundary so no partial packet is read.
                let start = total_len.saturating_sub(PROBE_WINDOW as u64);
                let start = start.div_ceil(ts::PACKET_LEN as u64) * ts::PACKET_LEN as u64;
                let len = usize::try_from(total_len - start).unwrap_or(0);
                let mut tail = vec![0u8; len];
                read_region(src, Container::MpegTs, start, &mut tail, total_len)?;
                tail
            };
            probe_ts(&head, &tail, total_len)
        }
        Container::Mp4 => probe_mp4(src, total_len),
        Container::Unknown => Ok(MediaInfo::without_bitrate(
            Container::Unknown,
            BitrateUnknown::UnknownContainer,
        )),
    }
}
