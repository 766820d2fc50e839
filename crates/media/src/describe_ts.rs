//! The rendition descriptor of an MPEG-TS from its first bytes (see [`crate::descriptor`]):
//! the first program's PMT gives the streams by type; the first PES of the video stream
//! gives the SPS (codec string, size, VUI frame rate) and the first video PTS values (a
//! fallback frame rate); the first PES of an AAC stream gives its ADTS header.

use crate::descriptor::{
    AudioDescriptor, FrameRate, FrameRateSource, RenditionDescriptor, VideoDescriptor, AAC_RATES,
    MAX_STREAMS,
};
use crate::h264::{hevc_codec, hevc_sps_ptl, parse_sps};
use crate::ts::{aligned_packets, packet_pid, single_packet_section, PAT_PID};

/// How many bytes of a TS [`describe_ts`] needs at most (what [`crate::Indexer`] keeps).
pub const DESCRIBE_TS_BYTES: usize = 1 << 20;
/// Most bytes of the first video PES searched for an SPS.
const MAX_PES_BYTES: usize = 64 << 10;
/// Video PTS values gathered for the fallback frame rate.
const PTS_SAMPLES: usize = 32;

/// One elementary stream of the PMT.
#[derive(Clone, Copy, Debug)]
struct Stream {
    pid: u16,
    stream_type: u8,
}

fn is_video(t: u8) -> bool {
    matches!(t, 0x1B | 0x24 | 0x01 | 0x02 | 0x10)
}

fn audio_codec(t: u8) -> Option<&'static str> {
    match t {
        0x0F => Some("mp4a.40.2"),
        0x03 | 0x04 => Some("mp4a.40.34"),
        0x81 => Some("ac-3"),
        0x87 => Some("ec-3"),
        _ => None,
    }
}

/// The streams of the first program's PMT in `head`.
fn pmt_streams(head: &[u8]) -> Vec<Stream> {
    let mut pmt_pid = None;
    for (_, p) in aligned_packets(head, 0) {
        let Some(pid) = packet_pid(p) else { continue };
        match pmt_pid {
            None if pid == PAT_PID => {
                let Some(sec) = single_packet_section(p, 0x00) else {
                    continue;
                };
                let programs = sec.get(8..sec.len().saturating_sub(4)).unwrap_or(&[]);
                pmt_pid = programs
                    .chunks_exact(4)
                    .find(|e| u16::from_be_bytes([e[0], e[1]]) != 0)
                    .map(|e| u16::from_be_bytes([e[2] & 0x1F, e[3]]));
            }
            Some(pmt) if pid == pmt => {
                if let Some(sec) = single_packet_section(p, 0x02) {
                    return section_streams(sec);
                }
            }
            _ => {}
        }
    }
    Vec::new()
}

fn section_streams(sec: &[u8]) -> Vec<Stream> {
    let mut out = Vec::new();
    let info_len = sec
        .get(10..12)
        .map_or(0, |b| usize::from(b[0] & 0x0F) << 8 | usize::from(b[1]));
    let end = sec.len().saturating_sub(4);
    let mut es = sec.get(12 + info_len..end).unwrap_or(&[]);
    while let (Some(h), true) = (es.get(..5), out.len() < MAX_STREAMS) {
        out.push(Stream {
            pid: u16::from_be_bytes([h[1] & 0x1F, h[2]]),
            stream_type: h[0],
        });
        let es_info = usize::from(h[3] & 0x0F) << 8 | usize::from(h[4]);
        es = es.get(5 + es_info..).unwrap_or(&[]);
    }
    out
}

/// A packet's payload and payload_unit_start_indicator.
fn payload(p: &[u8]) -> Option<(bool, &[u8])> {
    let pusi = p.get(1)? & 0x40 != 0;
    let pl = match (p.get(3)? >> 4) & 0x3 {
        0b01 => p.get(4..)?,
        0b11 => p.get(5 + usize::from(*p.get(4)?)..)?,
        _ => return None,
    };
    Some((pusi, pl))
}

/// The PES payload (after its header) and PTS of a PES that starts in `pl`.
fn pes_start(pl: &[u8]) -> Option<(&[u8], Option<u64>)> {
    if pl.get(..3)? != [0, 0, 1] {
        return None;
    }
    let hdr = usize::from(*pl.get(8)?);
    let pts = (pl.get(7)? & 0x80 != 0)
        .then(|| pl.get(9..14))
        .flatten()
        .map(|b| {
            (u64::from(b[0] >> 1 & 0x07) << 30)
                | (u64::from(b[1]) << 22)
                | (u64::from(b[2] >> 1) << 15)
                | (u64::from(b[3]) << 7)
                | u64::from(b[4] >> 1)
        });
    Some((pl.get(9 + hdr..)?, pts))
}

/// The first PES of `pid` in `head` (up to [`MAX_PES_BYTES`]) and the PTS values of its
/// first [`PTS_SAMPLES`] PES packets.
fn first_pes(head: &[u8], pid: u16) -> (Vec<u8>, Vec<u64>) {
    let mut es = Vec::new();
    let mut pts = Vec::new();
    let mut in_first = None;
    for (_, p) in aligned_packets(head, 0) {
        if packet_pid(p) != Some(pid) {
            continue;
        }
        let Some((pusi, pl)) = payload(p) else {
            continue;
        };
        if pusi {
            let Some((data, t)) = pes_start(pl) else {
                continue;
            };
            pts.extend(t);
            in_first = Some(in_first.is_none());
            if in_first == Some(true) {
                es.extend_from_slice(data);
            }
        } else if in_first == Some(true) && es.len() < MAX_PES_BYTES {
            es.extend_from_slice(pl);
        }
        if pts.len() >= PTS_SAMPLES {
            break;
        }
    }
    (es, pts)
}

/// The NAL units of an Annex B byte stream (between `00 00 01` start codes).
fn nal_units(es: &[u8]) -> Vec<&[u8]> {
    let mut starts = Vec::new();
    let mut i = 0;
    while let Some(w) = es.get(i..i + 3) {
        if w == [0, 0, 1] {
            starts.push(i + 3);
            i += 3;
        } else {
            i += 1;
        }
    }
    let ends = starts.iter().skip(1).map(|&s| s - 3).chain([es.len()]);
    starts
        .iter()
        .zip(ends)
        .filter_map(|(&s, e)| es.get(s..e))
        .collect()
}

fn video(s: Stream, head: &[u8]) -> VideoDescriptor {
    let (es, pts) = first_pes(head, s.pid);
    let mut v = VideoDescriptor {
        codec: match s.stream_type {
            0x1B => "avc1",
            0x24 => "hev1",
            0x10 => "mp4v.20",
            _ => "mp2v",
        }
        .to_string(),
        width: None,
        height: None,
        frame_rate: None,
        frame_rate_source: None,
    };
    for nal in nal_units(&es) {
        if s.stream_type == 0x1B {
            if let Some(sps) = parse_sps(nal) {
                let [p, c, l] = sps.profile_compat_level;
                v.codec = format!("avc1.{p:02X}{c:02X}{l:02X}");
                v.width = Some(sps.width);
                v.height = Some(sps.height);
                v.frame_rate = sps.frame_rate.map(|(num, den)| FrameRate { num, den });
                v.frame_rate_source = v.frame_rate.map(|_| FrameRateSource::SpsVui);
                break;
            }
        } else if let Some(c) = hevc_sps_ptl(nal).and_then(|ptl| hevc_codec("hev1", &ptl)) {
            v.codec = c;
            break;
        }
    }
    if v.frame_rate.is_none() {
        v.frame_rate = pts_rate(&pts);
        v.frame_rate_source = v.frame_rate.map(|_| FrameRateSource::SampleDurations);
    }
    v
}

/// 90 kHz over the least positive step between PTS values (frames may be reordered).
fn pts_rate(pts: &[u64]) -> Option<FrameRate> {
    let mut sorted = pts.to_vec();
    sorted.sort_unstable();
    let step = sorted
        .windows(2)
        .map(|w| w[1] - w[0])
        .filter(|&d| d > 0)
        .min()?;
    FrameRate::from_ratio(90_000, step)
}

fn audio(s: Stream, head: &[u8], codec: &str) -> AudioDescriptor {
    let mut a = AudioDescriptor {
        codec: codec.to_string(),
        sample_rate: None,
        channels: None,
    };
    if s.stream_type == 0x0F {
        let (es, _) = first_pes(head, s.pid);
        // ADTS: syncword 0xFFF, then profile (2 bits), sampling index (4), channels (3).
        if let Some(h) = es.get(..4).filter(|h| h[0] == 0xFF && h[1] & 0xF0 == 0xF0) {
            a.codec = format!("mp4a.40.{}", (h[2] >> 6) + 1);
            a.sample_rate = AAC_RATES.get(usize::from(h[2] >> 2 & 0x0F)).copied();
            a.channels = Some((h[2] & 0x01) << 2 | h[3] >> 6).filter(|&c| c > 0);
        }
    }
    a
}

/// The rendition descriptor of an MPEG-TS from its first bytes (at most
/// [`DESCRIBE_TS_BYTES`] are useful): streams from the first program's PMT (which must fit
/// one packet), then as [`VideoDescriptor`] / [`AudioDescriptor`] document. Empty when no
/// PMT is found.
pub fn describe_ts(head: &[u8]) -> RenditionDescriptor {
    let head = head.get(..DESCRIBE_TS_BYTES).unwrap_or(head);
    let mut out = RenditionDescriptor::default();
    for s in pmt_streams(head) {
        if is_video(s.stream_type) && out.video.is_none() {
            out.video = Some(video(s, head));
        } else if let Some(codec) = audio_codec(s.stream_type) {
            out.audio.push(audio(s, head, codec));
        }
    }
    out
}
