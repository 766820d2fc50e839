//! Rendition descriptors: what a player's manifest says of a rendition (its codecs as
//! RFC 6381 strings, video resolution and frame rate), read from the media itself.
//!
//! * MP4 / fragmented MP4 ([`describe_moov`]): from the `moov` sample descriptions.
//! * MPEG-TS ([`crate::describe_ts`]): from the PMT stream types, the first H.264/HEVC SPS of
//!   the video PES and the first ADTS header of an AAC PES.
//!
//! Each field's doc says where it comes from. Unknown fields are `None`, never guessed;
//! nothing here panics on any bytes.

use crate::boxes::{be16, be32, child, children, tracks};
use crate::h264::{hevc_codec, parse_sps, reduce};

/// A frame rate as a fraction `num / den` frames per second, in lowest terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameRate {
    /// Numerator.
    pub num: u32,
    /// Denominator (not zero).
    pub den: u32,
}

impl FrameRate {
    /// Frames per second.
    pub fn fps(&self) -> f64 {
        f64::from(self.num) / f64::from(self.den.max(1))
    }

    /// One frame's duration, seconds.
    pub fn frame_s(&self) -> f64 {
        f64::from(self.den) / f64::from(self.num.max(1))
    }

    pub(crate) fn from_ratio(num: u64, den: u64) -> Option<FrameRate> {
        reduce(num, den).map(|(num, den)| FrameRate { num, den })
    }
}

/// Where a [`VideoDescriptor::frame_rate`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameRateSource {
    /// The H.264 SPS VUI timing info: `time_scale / (2 × num_units_in_tick)`.
    SpsVui,
    /// Sample durations: MP4 `stts` (its first entry), else `trex` default duration, else
    /// the median fragment's samples over its duration; MPEG-TS: the least positive step
    /// between the first video PTS values.
    SampleDurations,
}

/// The video of a rendition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VideoDescriptor {
    /// RFC 6381 codec: `avc1.PPCCLL` (`avc3` when that is the MP4 sample entry) with profile,
    /// constraint flags and level from `avcC` (MP4) or the SPS (TS), upper-case hex;
    /// `hvc1`/`hev1.…` per ISO/IEC 14496-15 Annex E from `hvcC` (MP4) or the SPS
    /// profile_tier_level (TS, as `hev1`); otherwise the sample entry type.
    pub codec: String,
    /// Width in pixels: the H.264 SPS (cropped); else the visual sample entry (MP4).
    pub width: Option<u32>,
    /// Height in pixels, as `width`.
    pub height: Option<u32>,
    /// Frames per second, see [`VideoDescriptor::frame_rate_source`].
    pub frame_rate: Option<FrameRate>,
    /// Where `frame_rate` came from (`None` when it is unknown).
    pub frame_rate_source: Option<FrameRateSource>,
}

/// One audio stream of a rendition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AudioDescriptor {
    /// RFC 6381 codec: `mp4a.OO.A` (object type indication in hex, then the audio object
    /// type from the AudioSpecificConfig) from `esds` (MP4) or `mp4a.40.A` with A = ADTS
    /// profile + 1 (TS AAC); `ac-3`, `ec-3`, `Opus`, `fLaC`, `mp4a.40.34` (MPEG audio in
    /// TS) by sample entry / stream type.
    pub codec: String,
    /// Samples per second: the AudioSpecificConfig or ADTS sampling-frequency index, else
    /// the audio sample entry (MP4).
    pub sample_rate: Option<u32>,
    /// Channel configuration (ADTS / AudioSpecificConfig), else the sample entry count.
    pub channels: Option<u8>,
}

/// What a manifest says of one rendition.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RenditionDescriptor {
    /// The first video stream (first `vide` track, first video stream of the PMT).
    pub video: Option<VideoDescriptor>,
    /// The audio streams, in track / PMT order.
    pub audio: Vec<AudioDescriptor>,
}

impl RenditionDescriptor {
    /// The `CODECS` attribute value: the video codec then each audio codec, comma-separated.
    pub fn codecs(&self) -> String {
        let v = self.video.iter().map(|v| v.codec.as_str());
        let a = self.audio.iter().map(|a| a.codec.as_str());
        v.chain(a).collect::<Vec<_>>().join(",")
    }
}

/// Most streams of either kind described (a PMT or `moov` listing more is cut there).
pub(crate) const MAX_STREAMS: usize = 16;

/// The rendition descriptor of an MP4 from its `moov` box's content (without the box
/// header). For a fragmented MP4 whose `moov` has no sample durations and whose SPS has no
/// VUI timing, [`crate::Indexer`] fills the frame rate from the fragments.
pub fn describe_moov(moov: &[u8]) -> RenditionDescriptor {
    let mut out = RenditionDescriptor::default();
    for (handler, trak) in tracks(moov).take(MAX_STREAMS) {
        let Some(stbl) = child(trak, b"mdia")
            .and_then(|m| child(m, b"minf"))
            .and_then(|m| child(m, b"stbl"))
        else {
            continue;
        };
        let Some((kind, entry)) = child(stbl, b"stsd")
            .and_then(|s| s.get(8..))
            .and_then(|e| children(e).next())
        else {
            continue;
        };
        let kind = crate::cenc::original_format(kind, entry);
        match &handler {
            b"vide" if out.video.is_none() => {
                let mut v = video_entry(kind, entry);
                if v.frame_rate.is_none() {
                    v.frame_rate = stts_rate(trak, stbl, moov);
                    v.frame_rate_source = v.frame_rate.map(|_| FrameRateSource::SampleDurations);
                }
                out.video = Some(v);
            }
            b"soun" => out.audio.push(audio_entry(kind, entry)),
            _ => {}
        }
    }
    out
}

fn fourcc(kind: [u8; 4]) -> String {
    kind.escape_ascii().to_string()
}

/// A visual sample entry (its content): the codec from `avcC`/`hvcC`, the size from the
/// SPS or the entry's width/height fields.
fn video_entry(kind: [u8; 4], entry: &[u8]) -> VideoDescriptor {
    let name = fourcc(kind);
    let boxes = entry.get(78..).unwrap_or(&[]);
    let mut v = VideoDescriptor {
        codec: name.clone(),
        width: be16(entry, 24).map(u32::from),
        height: be16(entry, 26).map(u32::from),
        frame_rate: None,
        frame_rate_source: None,
    };
    if let Some(avcc) = child(boxes, b"avcC") {
        if let Some(pcl) = avcc.get(1..4) {
            v.codec = format!("{name}.{:02X}{:02X}{:02X}", pcl[0], pcl[1], pcl[2]);
        }
        let sps_len = be16(avcc, 6).map_or(0, usize::from);
        if let Some(sps) = avcc.get(8..8 + sps_len).and_then(parse_sps) {
            v.width = Some(sps.width);
            v.height = Some(sps.height);
            v.frame_rate = sps.frame_rate.map(|(num, den)| FrameRate { num, den });
            v.frame_rate_source = v.frame_rate.map(|_| FrameRateSource::SpsVui);
        }
    } else if let Some(s) = child(boxes, b"hvcC").and_then(|h| hevc_codec(&name, h.get(1..13)?)) {
        v.codec = s;
    }
    v
}

/// The frame rate from the first `stts` entry, else the `trex` default duration.
fn stts_rate(trak: &[u8], stbl: &[u8], moov: &[u8]) -> Option<FrameRate> {
    let (id, timescale) = crate::boxes::track_id_timescale(trak)?;
    let delta = child(stbl, b"stts")
        .filter(|s| be32(s, 4).is_some_and(|n| n > 0))
        .and_then(|s| be32(s, 12))
        .or_else(|| {
            children(child(moov, b"mvex")?)
                .filter(|(k, _)| k == b"trex")
                .find(|(_, c)| be32(c, 4) == Some(id))
                .and_then(|(_, c)| be32(c, 12))
        })?;
    FrameRate::from_ratio(u64::from(timescale), u64::from(delta))
}

/// AAC sampling frequencies by index (ISO/IEC 14496-3 Table 1.18).
pub(crate) const AAC_RATES: [u32; 13] = [
    96_000, 88_200, 64_000, 48_000, 44_100, 32_000, 24_000, 22_050, 16_000, 12_000, 11_025, 8_000,
    7_350,
];

/// An audio sample entry (its content).
fn audio_entry(kind: [u8; 4], entry: &[u8]) -> AudioDescriptor {
    let version = be16(entry, 8).unwrap_or(0);
    let mut a = AudioDescriptor {
        codec: match &kind {
            b"opus" => "Opus".into(),
            _ => fourcc(kind),
        },
        channels: be16(entry, 16).and_then(|c| u8::try_from(c).ok()),
        sample_rate: be32(entry, 24).map(|r| r >> 16).filter(|&r| r > 0),
    };
    let extra = match version {
        1 => 16,
        2 => 36,
        _ => 0,
    };
    let boxes = entry.get(28 + extra..).unwrap_or(&[]);
    if &kind == b"mp4a" {
        if let Some((oti, asc)) = child(boxes, b"esds").and_then(esds) {
            a.codec = match asc.and_then(audio_specific_config) {
                Some((aot, rate, channels)) => {
                    a.sample_rate = rate.or(a.sample_rate);
                    a.channels = channels.or(a.channels);
                    format!("mp4a.{oti:02X}.{aot}")
                }
                None => format!("mp4a.{oti:02X}"),
            };
        }
    }
    a
}

/// A descriptor's tag, content and what follows it (sizes of 1 to 4 bytes of 7 bits).
fn descriptor(data: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let tag = *data.first()?;
    let mut len = 0usize;
    let mut at = 1;
    loop {
        let b = *data.get(at)?;
        len = (len << 7) | usize::from(b & 0x7F);
        at += 1;
        if b & 0x80 == 0 || at > 4 {
            break;
        }
    }
    let content = data.get(at..at.checked_add(len)?)?;
    Some((tag, content, data.get(at + len..)?))
}

/// The object type indication and AudioSpecificConfig of an `esds` box (its content).
fn esds(esds: &[u8]) -> Option<(u8, Option<&[u8]>)> {
    let (tag, es, _) = descriptor(esds.get(4..)?)?;
    if tag != 0x03 {
        return None;
    }
    let flags = *es.get(2)?;
    let mut at = 3;
    if flags & 0x80 != 0 {
        at += 2;
    }
    if flags & 0x40 != 0 {
        at += 1 + usize::from(*es.get(at)?);
    }
    if flags & 0x20 != 0 {
        at += 2;
    }
    let (tag, dcd, _) = descriptor(es.get(at..)?)?;
    if tag != 0x04 {
        return None;
    }
    let oti = *dcd.first()?;
    let asc = dcd
        .get(13..)
        .and_then(descriptor)
        .filter(|(t, _, _)| *t == 0x05)
        .map(|(_, c, _)| c);
    Some((oti, asc))
}

/// Audio object type, sampling rate and channel configuration of an AudioSpecificConfig.
fn audio_specific_config(asc: &[u8]) -> Option<(u8, Option<u32>, Option<u8>)> {
    let bits = u32::from(be16(asc, 0).or_else(|| asc.first().map(|&b| u16::from(b) << 8))?);
    let bits = (bits << 16) | u32::from(be16(asc, 2).unwrap_or(0));
    let aot = (bits >> 27) as u8;
    if aot == 31 {
        // Escaped object type: 32 + 6 bits; rate/channels not read.
        return Some((32 + ((bits >> 21) & 0x3F) as u8, None, None));
    }
    let index = ((bits >> 23) & 0x0F) as usize;
    // Index 15 (an explicit 24-bit rate) is left unknown.
    let rate = AAC_RATES.get(index).copied();
    let channels = Some(((bits >> 19) & 0x0F) as u8);
    Some((aot, rate.filter(|&r| r > 0), channels.filter(|&c| c > 0)))
}

#[cfg(test)]
mod tests;
