//! The manifests of titles with renditions, pure text from catalog records: the HLS
//! multivariant playlist, the media playlist of a fragmented MP4 (CMAF) rendition, and the
//! static DASH MPD (docs/protocol.md, "Titles with renditions: HLS and DASH").

use std::fmt::Write as _;

use isnode_store::renditions::{DescriptorRecord, FragmentsRecord, KeyFramesRecord};

/// Segments are at least this long where the key frames allow (as MPEG-TS playlists').
pub(super) const MIN_SEGMENT_S: f64 = 2.0;

/// A segment of a fragmented MP4: whole fragments from one starting with a sync sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct CmafSegment {
    /// First byte (of its first `moof`).
    pub offset: u64,
    /// Bytes (to the end of its last fragment).
    pub len: u64,
    /// Decode start, ticks.
    pub start: u64,
    /// Duration, ticks.
    pub ticks: u64,
    /// Bytes from `offset` to the end of its key frame (the first fragment's
    /// `key_length_bytes` when that starts with a sync sample).
    pub key_len: Option<u64>,
}

/// Cuts the fragments into segments: a fragment starting with a sync sample starts a new
/// segment once the current one lasts [`MIN_SEGMENT_S`] (less 50 ms, the rounding of
/// encoders' first fragments); others join the current segment.
pub(super) fn cmaf_segments(f: &FragmentsRecord) -> Vec<CmafSegment> {
    let min_ticks = ((MIN_SEGMENT_S - 0.05) * f64::from(f.timescale)) as u64;
    let mut out: Vec<CmafSegment> = Vec::new();
    for g in &f.fragments {
        match out.last_mut() {
            Some(s) if !(g.sync && s.ticks >= min_ticks) => {
                s.len = g.offset_bytes + g.length_bytes - s.offset;
                s.ticks = s.ticks.saturating_add(g.duration);
            }
            _ => out.push(CmafSegment {
                offset: g.offset_bytes,
                len: g.length_bytes,
                start: g.decode_start,
                ticks: g.duration,
                key_len: g.key_length_bytes.filter(|_| g.sync),
            }),
        }
    }
    out
}

/// Seconds of `ticks`.
fn secs(ticks: u64, timescale: u32) -> f64 {
    ticks as f64 / f64::from(timescale.max(1))
}

/// The HLS media playlist (RFC 8216 version 7) of a fragmented MP4 at `uri`: the init
/// segment as `EXT-X-MAP` with its byte range, each segment as an `EXT-X-BYTERANGE`.
pub(super) fn cmaf_playlist(uri: &str, f: &FragmentsRecord) -> String {
    let segs = cmaf_segments(f);
    let target = segs
        .iter()
        .map(|s| secs(s.ticks, f.timescale).round() as u64)
        .max()
        .unwrap_or(1)
        .max(1);
    let mut m = format!(
        "#EXTM3U\n#EXT-X-VERSION:7\n#EXT-X-TARGETDURATION:{target}\n#EXT-X-PLAYLIST-TYPE:VOD\n\
         #EXT-X-MEDIA-SEQUENCE:0\n#EXT-X-INDEPENDENT-SEGMENTS\n\
         #EXT-X-MAP:URI=\"{uri}\",BYTERANGE=\"{}@{}\"\n",
        f.init.1, f.init.0
    );
    for s in &segs {
        let _ = write!(
            m,
            "#EXTINF:{:.3},\n#EXT-X-BYTERANGE:{}@{}\n{uri}\n",
            secs(s.ticks, f.timescale),
            s.len,
            s.offset
        );
    }
    m.push_str("#EXT-X-ENDLIST\n");
    m
}

/// The HLS I-frame playlist (RFC 8216 section 4.3.3.6, `EXT-X-I-FRAMES-ONLY`) of a
/// fragmented MP4 at `uri`: one entry per segment of [`cmaf_playlist`], the byte range of
/// its `moof` and key frame, lasting until the next key frame. `None` when a segment's key
/// frame extent is unknown.
pub(super) fn iframe_playlist(uri: &str, f: &FragmentsRecord) -> Option<String> {
    let segs = cmaf_segments(f);
    if segs.is_empty() || segs.iter().any(|s| s.key_len.is_none()) {
        return None;
    }
    let target = segs
        .iter()
        .map(|s| secs(s.ticks, f.timescale).round() as u64)
        .max()
        .unwrap_or(1)
        .max(1);
    let mut m = format!(
        "#EXTM3U\n#EXT-X-VERSION:7\n#EXT-X-TARGETDURATION:{target}\n#EXT-X-PLAYLIST-TYPE:VOD\n\
         #EXT-X-MEDIA-SEQUENCE:0\n#EXT-X-I-FRAMES-ONLY\n\
         #EXT-X-MAP:URI=\"{uri}\",BYTERANGE=\"{}@{}\"\n",
        f.init.1, f.init.0
    );
    for s in &segs {
        let _ = write!(
            m,
            "#EXTINF:{:.3},\n#EXT-X-BYTERANGE:{}@{}\n{uri}\n",
            secs(s.ticks, f.timescale),
            s.key_len.unwrap_or(0),
            s.offset
        );
    }
    m.push_str("#EXT-X-ENDLIST\n");
    Some(m)
}

/// The peak bitrate of a fragmented MP4's I-frame playlist (key frame bytes over the time
/// to the next), `None` without one.
fn iframe_peak_bps(f: &FragmentsRecord) -> Option<u64> {
    let segs = cmaf_segments(f);
    if segs.is_empty() || segs.iter().any(|s| s.key_len.is_none()) {
        return None;
    }
    Some(peak_bps(segs.iter().map(|s| {
        (s.key_len.unwrap_or(0), secs(s.ticks, f.timescale))
    })))
}

/// Each key frame of an MPEG-TS object lasting `duration_s` as `(offset, length,
/// seconds to the next key frame or the end)`.
fn ts_iframes(k: &KeyFramesRecord, duration_s: f64) -> Vec<(u64, u64, f64)> {
    let ends = k
        .frames
        .iter()
        .skip(1)
        .map(|f| f.time_s)
        .chain([duration_s.max(k.frames.last().map_or(0.0, |f| f.time_s))]);
    k.frames
        .iter()
        .zip(ends)
        .map(|(f, end)| (f.offset_bytes, f.length_bytes, (end - f.time_s).max(0.0)))
        .collect()
}

/// The HLS I-frame playlist (RFC 8216 section 4.3.3.6) of an MPEG-TS object at `uri`
/// lasting `duration_s`: each key frame's packets as an `EXT-X-BYTERANGE` (from the packet
/// starting its PES to the end of its last video packet), lasting until the next key frame;
/// the PAT + PMT as `EXT-X-MAP` when known (version 5, which `EXT-X-MAP` in an I-frame
/// playlist needs; 4 otherwise). `None` without key frames.
pub(super) fn ts_iframe_playlist(
    uri: &str,
    k: &KeyFramesRecord,
    duration_s: f64,
) -> Option<String> {
    let frames = ts_iframes(k, duration_s);
    if frames.is_empty() {
        return None;
    }
    let target = frames
        .iter()
        .map(|f| f.2.round() as u64)
        .max()
        .unwrap_or(1)
        .max(1);
    let version = if k.init.is_some() { 5 } else { 4 };
    let mut m = format!(
        "#EXTM3U\n#EXT-X-VERSION:{version}\n#EXT-X-TARGETDURATION:{target}\n\
         #EXT-X-PLAYLIST-TYPE:VOD\n#EXT-X-MEDIA-SEQUENCE:0\n#EXT-X-I-FRAMES-ONLY\n"
    );
    if let Some((offset, len)) = k.init {
        let _ = writeln!(m, "#EXT-X-MAP:URI=\"{uri}\",BYTERANGE=\"{len}@{offset}\"");
    }
    for (offset, len, d) in frames {
        let _ = write!(
            m,
            "#EXTINF:{d:.3},\n#EXT-X-BYTERANGE:{len}@{offset}\n{uri}\n"
        );
    }
    m.push_str("#EXT-X-ENDLIST\n");
    Some(m)
}

/// One variant of a title, as its manifests list it.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Variant {
    /// Its media playlist (HLS) or content (DASH `BaseURL`), relative to the manifest.
    pub uri: String,
    /// Peak bitrate: the largest segment's bits over its duration, bits per second.
    pub peak_bps: u64,
    /// Average bitrate (the object's), bits per second.
    pub average_bps: u64,
    /// The descriptor (codecs, resolution, frame rate), if known.
    pub descriptor: Option<DescriptorRecord>,
    /// The fragment index (CMAF renditions only).
    pub fragments: Option<FragmentsRecord>,
    /// The key frames (MPEG-TS renditions only), for their I-frame playlists.
    pub key_frames: Option<KeyFramesRecord>,
    /// Duration, seconds.
    pub duration_s: f64,
    /// CENC `cbcs` with W3C Clear Key (issue 32), when the object is so encrypted.
    pub protection: Option<Protection>,
}

/// What an MPD says of an encrypted variant.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Protection {
    /// The content key's id (`cenc:default_KID`).
    pub key_id: [u8; 16],
    /// The Clear Key licence URL (`dashif:Laurl`, `clearkey:Laurl`), its token carried.
    pub licence_url: String,
}

/// A key id as a UUID (`cenc:default_KID`).
fn uuid(id: &[u8; 16]) -> String {
    let h = isnode_keys::hex(id);
    let part = |a: usize, b: usize| h.get(a..b).unwrap_or_default();
    format!(
        "{}-{}-{}-{}-{}",
        part(0, 8),
        part(8, 12),
        part(12, 16),
        part(16, 20),
        part(20, 32)
    )
}

/// The `ContentProtection` elements of an adaptation set whose representations are `p`'s:
/// the common encryption scheme with its default key id, and W3C Clear Key with its
/// licence URL (both DASH-IF spellings) under both system ids players know it by: the
/// DASH-IF Clear Key id and the W3C common id (the `pssh` in the init segment).
fn content_protection(m: &mut String, p: &Protection) {
    let url = xml(&p.licence_url);
    let _ = write!(
        m,
        "<ContentProtection schemeIdUri=\"urn:mpeg:dash:mp4protection:2011\" value=\"cbcs\" \
         cenc:default_KID=\"{}\"/>\n\
         <ContentProtection schemeIdUri=\"urn:uuid:{}\" value=\"ClearKey1.0\">\n\
         <clearkey:Laurl Lic_type=\"EME-1.0\">{url}</clearkey:Laurl>\n\
         <dashif:Laurl>{url}</dashif:Laurl>\n</ContentProtection>\n\
         <ContentProtection schemeIdUri=\"urn:uuid:{}\" value=\"ClearKey1.0\">\n\
         <clearkey:Laurl Lic_type=\"EME-1.0\">{url}</clearkey:Laurl>\n\
         <dashif:Laurl>{url}</dashif:Laurl>\n</ContentProtection>\n",
        uuid(&p.key_id),
        uuid(&isnode_media::cenc::CLEAR_KEY_SYSTEM_ID),
        uuid(&isnode_media::cenc::COMMON_SYSTEM_ID),
    );
}

/// RFC 6381 codec prefixes of audio (a rendition whose codecs are all audio is audio-only).
const AUDIO_CODECS: [&str; 6] = ["mp4a", "ac-3", "ec-3", "opus", "Opus", "fLaC"];

/// Whether `d` describes an audio-only rendition: no video size, every codec an audio one.
pub(super) fn audio_only_descriptor(d: &DescriptorRecord) -> bool {
    d.width.is_none()
        && !d.codecs.is_empty()
        && d.codecs
            .split(',')
            .all(|c| AUDIO_CODECS.iter().any(|a| c.trim().starts_with(a)))
}

impl Variant {
    /// Whether it is an audio-only rendition ([`audio_only_descriptor`]): the title's
    /// audio, listed as an `EXT-X-MEDIA` audio group (HLS) and an audio adaptation set
    /// (DASH) rather than as a variant of its own.
    pub(super) fn audio_only(&self) -> bool {
        self.descriptor.as_ref().is_some_and(audio_only_descriptor)
    }

    /// The peak bitrate as manifests state it (at least the average, at least 1).
    fn bandwidth(&self) -> u64 {
        self.peak_bps.max(self.average_bps).max(1)
    }

    /// Its codecs, if known.
    fn codecs(&self) -> Option<&str> {
        self.descriptor
            .as_ref()
            .map(|d| d.codecs.as_str())
            .filter(|c| !c.is_empty())
    }
}

/// The HLS audio group of a title's audio-only renditions.
const AUDIO_GROUP: &str = "audio";

/// The largest `bytes × 8 / seconds` over `(bytes, seconds)` pairs with a duration.
pub(super) fn peak_bps(segments: impl Iterator<Item = (u64, f64)>) -> u64 {
    segments
        .filter(|&(_, d)| d > 0.0)
        .map(|(b, d)| (b as f64 * 8.0 / d).ceil() as u64)
        .max()
        .unwrap_or(0)
}

/// The HLS multivariant playlist of `variants` (in the title's order). Audio-only
/// renditions, when the title also has video ones, are an `EXT-X-MEDIA` audio group
/// (`GROUP-ID="audio"`, the first the default) that every video variant names: its
/// `BANDWIDTH` and `AVERAGE-BANDWIDTH` then add the largest audio rendition's, and its
/// `CODECS` the first audio rendition's codecs.
pub(super) fn master_playlist(variants: &[Variant]) -> String {
    let version = match variants.iter().any(|v| v.fragments.is_some()) {
        true => 7,
        false => 4,
    };
    let mut m = format!("#EXTM3U\n#EXT-X-VERSION:{version}\n#EXT-X-INDEPENDENT-SEGMENTS\n");
    let (audio, video): (Vec<&Variant>, Vec<&Variant>) =
        variants.iter().partition(|v| v.audio_only());
    let (audio, video) = match video.is_empty() {
        true => (Vec::new(), audio),
        false => (audio, video),
    };
    for (i, a) in audio.iter().enumerate() {
        let default = if i == 0 { "YES" } else { "NO" };
        let _ = writeln!(
            m,
            "#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"{AUDIO_GROUP}\",NAME=\"audio {i}\",\
             DEFAULT={default},AUTOSELECT=YES,URI=\"{}\"",
            a.uri
        );
    }
    let audio_peak = audio.iter().map(|a| a.bandwidth()).max().unwrap_or(0);
    let audio_avg = audio.iter().map(|a| a.average_bps).max().unwrap_or(0);
    let audio_codecs = audio.first().and_then(|a| a.codecs());
    for v in video {
        let avg = v.average_bps.max(1) + audio_avg;
        let _ = write!(
            m,
            "#EXT-X-STREAM-INF:BANDWIDTH={},AVERAGE-BANDWIDTH={avg}",
            (v.bandwidth() + audio_peak).max(avg)
        );
        stream_inf_attributes(&mut m, v, audio_codecs);
        let _ = write!(m, "\n{}\n", v.uri);
    }
    for v in variants.iter().filter(|v| !v.audio_only()) {
        iframe_stream_inf(&mut m, v);
    }
    m
}

/// The `EXT-X-I-FRAME-STREAM-INF` of variant `v` when it has an I-frame playlist (a CMAF
/// rendition's fragments or an MPEG-TS rendition's key frames; its media playlist's URI
/// with `iframes.m3u8` for `index.m3u8`): `BANDWIDTH` the I-frame playlist's peak,
/// `RESOLUTION`, and `CODECS` of the video only.
fn iframe_stream_inf(m: &mut String, v: &Variant) {
    let Some(d) = &v.descriptor else {
        return;
    };
    let peak = match (&v.fragments, &v.key_frames) {
        (Some(f), _) => iframe_peak_bps(f),
        (None, Some(k)) if !k.frames.is_empty() => Some(peak_bps(
            ts_iframes(k, v.duration_s)
                .into_iter()
                .map(|(_, len, d)| (len, d)),
        )),
        (None, _) => None,
    };
    let (Some(peak), Some(uri)) = (peak, iframe_uri(&v.uri)) else {
        return;
    };
    let _ = write!(m, "#EXT-X-I-FRAME-STREAM-INF:BANDWIDTH={}", peak.max(1));
    if let (Some(w), Some(h)) = (d.width, d.height) {
        let _ = write!(m, ",RESOLUTION={w}x{h}");
    }
    let video: Vec<&str> = d
        .codecs
        .split(',')
        .filter(|c| !AUDIO_CODECS.iter().any(|a| c.trim().starts_with(a)))
        .collect();
    if !video.is_empty() && !video.iter().any(|c| c.is_empty()) {
        let _ = write!(m, ",CODECS=\"{}\"", video.join(","));
    }
    let _ = writeln!(m, ",URI=\"{uri}\"");
}

/// The I-frame playlist URI beside media playlist `uri` (`.../index.m3u8?token=T` →
/// `.../iframes.m3u8?token=T`).
fn iframe_uri(uri: &str) -> Option<String> {
    let (path, query) = uri
        .split_once('?')
        .map_or((uri, None), |(p, q)| (p, Some(q)));
    let dir = path.strip_suffix("index.m3u8")?;
    Some(match query {
        Some(q) => format!("{dir}iframes.m3u8?{q}"),
        None => format!("{dir}iframes.m3u8"),
    })
}

/// `RESOLUTION`, `CODECS` (with `audio_codecs` and `AUDIO` when the title has an audio
/// group) and `FRAME-RATE` of one `EXT-X-STREAM-INF`.
fn stream_inf_attributes(m: &mut String, v: &Variant, audio_codecs: Option<&str>) {
    let Some(d) = &v.descriptor else { return };
    if let (Some(w), Some(h)) = (d.width, d.height) {
        let _ = write!(m, ",RESOLUTION={w}x{h}");
    }
    match (d.codecs.is_empty(), audio_codecs) {
        (false, Some(a)) => {
            let _ = write!(m, ",CODECS=\"{},{a}\"", d.codecs);
        }
        (false, None) => {
            let _ = write!(m, ",CODECS=\"{}\"", d.codecs);
        }
        (true, _) => {}
    }
    if let Some(fps) = d.fps() {
        let _ = write!(m, ",FRAME-RATE={fps:.3}");
    }
    if audio_codecs.is_some() {
        let _ = write!(m, ",AUDIO=\"{AUDIO_GROUP}\"");
    }
}

/// `s` with XML's five special characters escaped.
fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

/// An ISO 8601 duration of `s` seconds (`PT6.000S`).
fn iso_duration(s: f64) -> String {
    format!("PT{:.3}S", s.max(0.0))
}

/// The static DASH MPD (ISO/IEC 23009-1, `isoff-main` profile) of CMAF `variants` (each
/// with its fragment index): an adaptation set of the video renditions (or of all, when
/// none is audio-only) and one of the audio-only renditions, a representation per variant
/// whose `SegmentList` names the init segment and every segment by byte range of its
/// `BaseURL`, with a `SegmentTimeline` of their exact decode times.
pub(super) fn mpd(variants: &[Variant]) -> String {
    let duration = variants.iter().map(|v| v.duration_s).fold(0.0, f64::max);
    let mut m = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <MPD xmlns=\"urn:mpeg:dash:schema:mpd:2011\" xmlns:cenc=\"urn:mpeg:cenc:2013\" \
         xmlns:clearkey=\"http://dashif.org/guidelines/clearKey\" \
         xmlns:dashif=\"https://dashif.org/CPS\" profiles=\"urn:mpeg:dash:profile:isoff-main:2011\" \
         type=\"static\" mediaPresentationDuration=\"{}\" minBufferTime=\"PT{MIN_BUFFER_S}S\">\n\
         <Period id=\"0\" start=\"PT0S\">\n",
        iso_duration(duration)
    );
    let sets = [
        (
            "video",
            false,
            " segmentAlignment=\"true\" startWithSAP=\"1\"",
        ),
        (
            "audio",
            true,
            " segmentAlignment=\"true\" startWithSAP=\"1\" lang=\"und\"",
        ),
    ];
    let has_video = variants.iter().any(|v| !v.audio_only());
    for (set, (kind, audio, attrs)) in sets.iter().enumerate() {
        let members: Vec<(usize, &Variant)> = variants
            .iter()
            .enumerate()
            .filter(|(_, v)| v.fragments.is_some() && (v.audio_only() && has_video) == *audio)
            .collect();
        if members.is_empty() {
            continue;
        }
        let _ = writeln!(
            m,
            "<AdaptationSet id=\"{set}\" contentType=\"{kind}\" mimeType=\"{kind}/mp4\"{attrs}>"
        );
        // One key per adaptation set: encrypted titles are single objects for now.
        if let Some(p) = members.iter().find_map(|(_, v)| v.protection.as_ref()) {
            content_protection(&mut m, p);
        }
        for (i, v) in members {
            if let Some(f) = &v.fragments {
                representation(&mut m, i, v, f);
            }
        }
        m.push_str("</AdaptationSet>\n");
    }
    m.push_str("</Period>\n</MPD>\n");
    m
}

/// The MPD's `minBufferTime`, seconds: two segments of [`MIN_SEGMENT_S`] (ffmpeg's DASH
/// muxer states the same for its 2 s segments).
const MIN_BUFFER_S: u32 = 4;

/// A representation's `@bandwidth` as ISO/IEC 23009-1 defines it with `@minBufferTime`:
/// the smallest rate of a constant-bit-rate channel over which a client that starts at any
/// segment and buffers `min_buffer_s` first has each later segment whole before its
/// presentation starts. `segments` are `(bytes, start seconds)` in order: the largest
/// `bits(i..=j) / (min_buffer_s + start(j) - start(i))` over `i <= j` (at least the
/// average rate; with a one-segment buffer it would be the peak segment's, HLS's
/// `BANDWIDTH`). Stating the peak with a 2 s buffer, as before, made dash.js pick a rung
/// below the one an ffmpeg-made MPD of the same encodes gets at the same throughput.
///
/// Found by bisection on the rate `r` (each test one pass over the segments: some window
/// has `bits(i..=j) >= r * (min_buffer_s + start(j) - start(i))`), so a two-hour title of
/// 3 600 segments costs about 60 passes rather than 6.5 M window sums per request.
pub(super) fn dash_bandwidth_bps(segments: &[(u64, f64)], min_buffer_s: f64) -> u64 {
    let buffer_s = min_buffer_s.max(1e-3);
    let total_bits: f64 = segments.iter().map(|&(b, _)| b as f64 * 8.0).sum();
    // No window has more bits than the title nor a shorter time than the buffer.
    let (mut lo, mut hi) = (0.0f64, total_bits / buffer_s);
    for _ in 0..BANDWIDTH_BISECTIONS {
        let mid = (lo + hi) / 2.0;
        match some_window_needs(segments, buffer_s, mid) {
            true => lo = mid,
            false => hi = mid,
        }
    }
    // `hi` is above the rate by at most the last interval (far below 1e-6 bit/s): a rate
    // of a whole number of bits per second stays that number.
    (hi - 1e-6).ceil().max(0.0) as u64
}

/// Bisections of [`dash_bandwidth_bps`]: the rate to well under a bit per second.
const BANDWIDTH_BISECTIONS: u32 = 64;

/// Whether some window of segments `i..=j` needs at least `rate_bps` over the buffer and
/// its span: `(P(j) - rate * t(j)) - (P(i - 1) - rate * t(i)) >= rate * buffer_s`, with
/// `P` the bits up to a segment, the second term's least value over `i <= j` kept.
fn some_window_needs(segments: &[(u64, f64)], buffer_s: f64, rate_bps: f64) -> bool {
    let mut bits_before = 0.0f64;
    let mut least_start = f64::INFINITY;
    for &(bytes, t) in segments {
        least_start = least_start.min(bits_before - rate_bps * t);
        bits_before += bytes as f64 * 8.0;
        if bits_before - rate_bps * t - least_start >= rate_bps * buffer_s {
            return true;
        }
    }
    false
}

/// The URL of segment `seg` (a number or `init`) of the representation whose `BaseURL` is
/// `uri`, relative to it: its last path segment (and query) with `isnode_seg=SEG` added,
/// which the content route ignores. Each segment has a URL of its own so that players that
/// match a request to its Resource Timing entry by URL (dash.js 5 does, for byte-range
/// requests too, taking the first entry of that URL) measure each segment's own transfer,
/// not the first one's (the initialization segment's: dash.js then never left the bottom
/// rung at 8 Mbit/s).
fn segment_url(uri: &str, seg: &str) -> String {
    let last = uri.rsplit('/').next().unwrap_or(uri);
    match last.contains('?') {
        true => format!("{last}&isnode_seg={seg}"),
        false => format!("{last}?isnode_seg={seg}"),
    }
}

/// One `Representation` of [`mpd`].
fn representation(m: &mut String, id: usize, v: &Variant, f: &FragmentsRecord) {
    let segs = cmaf_segments(f);
    let timed = segs.iter().map(|s| {
        (
            s.len,
            secs(
                s.start
                    .saturating_sub(f.fragments.first().map_or(0, |g| g.decode_start)),
                f.timescale,
            ),
        )
    });
    let bandwidth = dash_bandwidth_bps(&timed.collect::<Vec<_>>(), MIN_BUFFER_S as f64);
    let _ = write!(
        m,
        "<Representation id=\"{id}\" bandwidth=\"{}\"",
        bandwidth.max(1)
    );
    if let Some(d) = &v.descriptor {
        if let (Some(w), Some(h)) = (d.width, d.height) {
            let _ = write!(m, " width=\"{w}\" height=\"{h}\"");
        }
        if let Some((n, den)) = d.frame_rate {
            match den {
                1 => {
                    let _ = write!(m, " frameRate=\"{n}\"");
                }
                _ => {
                    let _ = write!(m, " frameRate=\"{n}/{den}\"");
                }
            }
        }
        if !d.codecs.is_empty() {
            let _ = write!(m, " codecs=\"{}\"", xml(&d.codecs));
        }
    }
    let _ = write!(
        m,
        ">\n<BaseURL>{}</BaseURL>\n<SegmentList timescale=\"{}\">\n\
         <Initialization sourceURL=\"{}\" range=\"{}-{}\"/>\n<SegmentTimeline>\n",
        xml(&v.uri),
        f.timescale,
        xml(&segment_url(&v.uri, "init")),
        f.init.0,
        (f.init.0 + f.init.1).saturating_sub(1)
    );
    for s in &segs {
        let _ = writeln!(m, "<S t=\"{}\" d=\"{}\"/>", s.start, s.ticks);
    }
    m.push_str("</SegmentTimeline>\n");
    for (n, s) in segs.iter().enumerate() {
        let _ = writeln!(
            m,
            "<SegmentURL media=\"{}\" mediaRange=\"{}-{}\"/>",
            xml(&segment_url(&v.uri, &n.to_string())),
            s.offset,
            s.offset + s.len - 1
        );
    }
    m.push_str("</SegmentList>\n</Representation>\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use isnode_store::renditions::FragmentRecord;

    fn frags() -> FragmentsRecord {
        let f = |i: u64, d: u64, sync: bool| FragmentRecord {
            offset_bytes: 1000 + i * 500,
            length_bytes: 500,
            decode_start: i * 12_800,
            duration: d,
            sync,
            key_length_bytes: sync.then_some(300),
        };
        FragmentsRecord {
            track_id: 1,
            timescale: 12_800,
            init: (0, 1000),
            index_range: None,
            complete: true,
            // 1 s fragments: pairs make 2 s segments; a non-sync fragment joins its segment.
            fragments: vec![
                f(0, 12_800, true),
                f(1, 12_800, true),
                f(2, 12_800, true),
                f(3, 12_800, false),
                f(4, 12_800, true),
            ],
        }
    }

    #[test]
    fn cmaf_segments_join_fragments_to_two_seconds_at_sync_samples() {
        let segs = cmaf_segments(&frags());
        let got: Vec<(u64, u64, u64)> = segs.iter().map(|s| (s.offset, s.len, s.ticks)).collect();
        assert_eq!(
            got,
            [
                (1000, 1000, 25_600),
                (2000, 1000, 25_600),
                (3000, 500, 12_800)
            ]
        );
        let p = cmaf_playlist("content?ext=.mp4", &frags());
        assert!(p.starts_with("#EXTM3U\n#EXT-X-VERSION:7\n#EXT-X-TARGETDURATION:2\n"));
        assert!(p.contains("#EXT-X-MAP:URI=\"content?ext=.mp4\",BYTERANGE=\"1000@0\"\n"));
        assert!(p.contains("#EXTINF:2.000,\n#EXT-X-BYTERANGE:1000@2000\ncontent?ext=.mp4\n"));
        assert!(p.ends_with("#EXT-X-ENDLIST\n"));
    }

    #[test]
    fn master_and_mpd_list_every_variant() {
        let d = DescriptorRecord {
            codecs: "avc1.42C01E,mp4a.40.2".into(),
            width: Some(640),
            height: Some(360),
            frame_rate: Some((25, 1)),
        };
        let v = |uri: &str, avg: u64| Variant {
            uri: uri.into(),
            peak_bps: avg + 100,
            average_bps: avg,
            descriptor: Some(d.clone()),
            fragments: Some(frags()),
            key_frames: None,
            duration_s: 5.0,
            protection: None,
        };
        let vs = [v("../a%400/index.m3u8?token=ab", 1000), v("b", 2000)];
        let m = master_playlist(&vs);
        assert!(m.contains(
            "#EXT-X-STREAM-INF:BANDWIDTH=1100,AVERAGE-BANDWIDTH=1000,RESOLUTION=640x360,\
             CODECS=\"avc1.42C01E,mp4a.40.2\",FRAME-RATE=25.000\n../a%400/index.m3u8?token=ab\n"
        ));
        let x = mpd(&vs);
        assert_eq!(x.matches("<Representation ").count(), 2);
        assert!(x.contains("mediaPresentationDuration=\"PT5.000S\""));
        assert!(x.contains(
            "<BaseURL>../a%400/index.m3u8?token=ab</BaseURL>\n<SegmentList timescale=\"12800\">\n\
             <Initialization sourceURL=\"index.m3u8?token=ab&amp;isnode_seg=init\" range=\"0-999\"/>"
        ));
        assert!(x.contains("<S t=\"25600\" d=\"25600\"/>"));
        assert!(x.contains("<SegmentURL media=\"b?isnode_seg=2\" mediaRange=\"3000-3499\"/>"));
        assert_eq!(peak_bps([(1000, 2.0), (10, 0.0)].into_iter()), 4000);
        // 4 s of buffer: a 1000-byte segment alone is 2000 bit/s, two of them over 6 s
        // are 2667; a burst (3000 bytes) after two small ones sets it.
        assert_eq!(dash_bandwidth_bps(&[(1000, 0.0), (1000, 2.0)], 4.0), 2667);
        assert_eq!(dash_bandwidth_bps(&[(1000, 0.0)], 4.0), 2000);
        assert_eq!(dash_bandwidth_bps(&[], 4.0), 0);
        assert_eq!(
            dash_bandwidth_bps(&[(100, 0.0), (100, 2.0), (3000, 4.0)], 4.0),
            6000
        );
        // An I-frame playlist per rung: the moof and key frame of each segment's start.
        assert!(m.contains(
            "#EXT-X-I-FRAME-STREAM-INF:BANDWIDTH=2400,RESOLUTION=640x360,\
             CODECS=\"avc1.42C01E\",URI=\"../a%400/iframes.m3u8?token=ab\"\n"
        ));
        let p = iframe_playlist("c", &frags()).unwrap_or_default();
        assert!(p.contains("#EXT-X-I-FRAMES-ONLY\n"));
        assert!(p.contains("#EXTINF:2.000,\n#EXT-X-BYTERANGE:300@2000\nc\n"));
        assert!(p.contains("#EXTINF:1.000,\n#EXT-X-BYTERANGE:300@3000\nc\n"));
    }

    #[test]
    fn an_encrypted_variant_names_its_key_id_and_licence() {
        let mut v = Variant {
            uri: "../../../o/enc.mp4?token=ab".into(),
            peak_bps: 1000,
            average_bps: 900,
            descriptor: None,
            fragments: Some(frags()),
            key_frames: None,
            duration_s: 5.0,
            protection: Some(Protection {
                key_id: [0xbf; 16],
                licence_url: "http://h:1/v1/objects/enc.mp4/license?token=ab".into(),
            }),
        };
        let x = mpd(std::slice::from_ref(&v));
        assert!(x.contains(
            "<ContentProtection schemeIdUri=\"urn:mpeg:dash:mp4protection:2011\" value=\"cbcs\" \
             cenc:default_KID=\"bfbfbfbf-bfbf-bfbf-bfbf-bfbfbfbfbfbf\"/>"
        ));
        assert!(x.contains("urn:uuid:e2719d58-a985-b3c9-781a-b030af78d30e"));
        assert!(x.contains("urn:uuid:1077efec-c0b2-4d02-ace3-3c1e52e2fb4b"));
        assert_eq!(
            x.matches(
                "<dashif:Laurl>http://h:1/v1/objects/enc.mp4/license?token=ab</dashif:Laurl>"
            )
            .count(),
            2
        );
        assert!(x.contains("xmlns:cenc=\"urn:mpeg:cenc:2013\""));
        v.protection = None;
        assert!(!mpd(&[v]).contains("ContentProtection"));
    }

    #[test]
    fn an_audio_only_rendition_is_the_audio_group_and_adaptation_set() {
        let video = Variant {
            uri: "../t%400/index.m3u8".into(),
            peak_bps: 1100,
            average_bps: 1000,
            descriptor: Some(DescriptorRecord {
                codecs: "avc1.42C01E".into(),
                width: Some(640),
                height: Some(360),
                frame_rate: Some((25, 1)),
            }),
            fragments: Some(frags()),
            key_frames: None,
            duration_s: 5.0,
            protection: None,
        };
        let audio = Variant {
            uri: "../t%401/index.m3u8".into(),
            peak_bps: 70,
            average_bps: 64,
            descriptor: Some(DescriptorRecord {
                codecs: "mp4a.40.2".into(),
                width: None,
                height: None,
                frame_rate: None,
            }),
            ..video.clone()
        };
        assert!(audio.audio_only() && !video.audio_only());
        let m = master_playlist(&[video.clone(), audio.clone()]);
        assert!(m.contains(
            "#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"audio\",NAME=\"audio 0\",DEFAULT=YES,\
             AUTOSELECT=YES,URI=\"../t%401/index.m3u8\"\n"
        ));
        assert!(m.contains(
            "#EXT-X-STREAM-INF:BANDWIDTH=1170,AVERAGE-BANDWIDTH=1064,RESOLUTION=640x360,\
             CODECS=\"avc1.42C01E,mp4a.40.2\",FRAME-RATE=25.000,AUDIO=\"audio\"\n"
        ));
        assert_eq!(m.matches("#EXT-X-STREAM-INF").count(), 1);
        let x = mpd(&[video, audio]);
        assert!(x.contains("<AdaptationSet id=\"1\" contentType=\"audio\" mimeType=\"audio/mp4\""));
        assert_eq!(x.matches("<AdaptationSet ").count(), 2);
    }

    #[test]
    fn an_mpeg_ts_rung_has_an_i_frame_playlist_of_its_key_frames() {
        use isnode_store::renditions::KeyFrameRecord;
        let k = KeyFramesRecord {
            init: Some((188, 376)),
            frames: vec![
                KeyFrameRecord {
                    time_s: 0.0,
                    offset_bytes: 564,
                    length_bytes: 18_800,
                },
                KeyFrameRecord {
                    time_s: 2.0,
                    offset_bytes: 100_000,
                    length_bytes: 9_400,
                },
            ],
        };
        let p = ts_iframe_playlist("content?isnode_version=3", &k, 3.5).unwrap_or_default();
        assert_eq!(
            p,
            "#EXTM3U\n#EXT-X-VERSION:5\n#EXT-X-TARGETDURATION:2\n#EXT-X-PLAYLIST-TYPE:VOD\n\
             #EXT-X-MEDIA-SEQUENCE:0\n#EXT-X-I-FRAMES-ONLY\n\
             #EXT-X-MAP:URI=\"content?isnode_version=3\",BYTERANGE=\"376@188\"\n\
             #EXTINF:2.000,\n#EXT-X-BYTERANGE:18800@564\ncontent?isnode_version=3\n\
             #EXTINF:1.500,\n#EXT-X-BYTERANGE:9400@100000\ncontent?isnode_version=3\n\
             #EXT-X-ENDLIST\n"
        );
        let v = Variant {
            uri: "../t%400/index.m3u8".into(),
            peak_bps: 1100,
            average_bps: 1000,
            descriptor: Some(DescriptorRecord {
                codecs: "avc1.42C01E,mp4a.40.2".into(),
                width: Some(640),
                height: Some(360),
                frame_rate: Some((25, 1)),
            }),
            fragments: None,
            key_frames: Some(k.clone()),
            duration_s: 3.5,
            protection: None,
        };
        // The peak: 18 800 bytes over 2 s.
        assert!(master_playlist(std::slice::from_ref(&v)).contains(
            "#EXT-X-I-FRAME-STREAM-INF:BANDWIDTH=75200,RESOLUTION=640x360,\
             CODECS=\"avc1.42C01E\",URI=\"../t%400/iframes.m3u8\"\n"
        ));
        let none = KeyFramesRecord {
            init: None,
            frames: vec![],
        };
        assert_eq!(ts_iframe_playlist("c", &none, 3.5), None);
        let no_init = KeyFramesRecord { init: None, ..k };
        let p = ts_iframe_playlist("c", &no_init, 3.5).unwrap_or_default();
        assert!(p.starts_with("#EXTM3U\n#EXT-X-VERSION:4\n") && !p.contains("EXT-X-MAP"));
    }

    /// Every window's rate, the definition written out (the bisection's reference).
    fn bandwidth_by_every_window(segments: &[(u64, f64)], min_buffer_s: f64) -> f64 {
        let mut best = 0.0f64;
        for (i, &(_, t0)) in segments.iter().enumerate() {
            let mut bits = 0.0;
            for &(bytes, t) in &segments[i..] {
                bits += bytes as f64 * 8.0;
                best = best.max(bits / (min_buffer_s + (t - t0)));
            }
        }
        best
    }

    proptest::proptest! {
        #[test]
        fn the_bisection_finds_every_windows_largest_rate(
            sizes in proptest::collection::vec((1u64..2_000_000, 0.5f64..6.0), 0..60),
            buffer_s in 0.5f64..10.0,
        ) {
            let mut t = 0.0;
            let segments: Vec<(u64, f64)> = sizes
                .iter()
                .map(|&(bytes, d)| {
                    let s = (bytes, t);
                    t += d;
                    s
                })
                .collect();
            let exact = bandwidth_by_every_window(&segments, buffer_s);
            let found = dash_bandwidth_bps(&segments, buffer_s) as f64;
            proptest::prop_assert!(
                (found - exact.ceil()).abs() <= 1.0,
                "{found} against {exact}"
            );
        }
    }
}
