//! The time index of an object: its random-access points `(time_s, offset_bytes)`, built
//! at ingest by a sans-IO, incremental [`Indexer`] fed the object's bytes in order.
//!
//! * **MPEG-TS**: a random-access point is the start of a TS packet, on the video PID, that
//!   starts a PES (`payload_unit_start_indicator`) carrying a key frame: the packet's
//!   `random_access_indicator` is set (ffmpeg's mpegts muxer sets it), or its payload holds
//!   an H.264 IDR / SPS NAL unit or an HEVC IRAP NAL unit. The video PID is the first video
//!   elementary stream of the PMT (or, without a PAT/PMT, the first PID whose PES has a
//!   video `stream_id`, 0xE0..=0xEF). Its time is the PES PTS less the first video PTS
//!   (modulo 2^33), or, for a key packet without a PTS, the last PCR less the first PCR.
//!   Memory: one packet of carry-over, whatever the input. Each key frame's extent is
//!   kept too ([`TsKeyFrames`]: from its first packet to the end of the last video packet
//!   before the next PES on the video PID), with the first PAT and PMT's byte range, for
//!   the I-frame playlists of MPEG-TS titles.
//! * **MP4**: the top-level boxes are walked as they stream past; the `moov` box (at most
//!   [`MAX_MOOV_BYTES`]) is kept and, at [`Indexer::finish`], the first video track's
//!   sample tables give each sync sample (`stss`; every sample without one) its byte
//!   offset (`stco`/`co64` + `stsc` + `stsz`/`stz2`) and its decode time (`stts` over the
//!   `mdhd` timescale). Whether `moov` comes before the first `mdat` is recorded too.
//! * **Fragmented MP4 / CMAF** (a `moov` with `mvex`): each `moof` (and `sidx`) is kept
//!   as it streams past and parsed into a fragment ([`crate::fmp4`]); the points are the
//!   fragments that start with a sync sample, at their `moof`'s first byte.
//!
//! Points are kept in increasing time and offset order (a point that would go back is
//! dropped), at most [`MAX_POINTS`]. Nothing here panics on any input.

pub use crate::access_point::AccessPoint;
use crate::describe_ts::{describe_ts, DESCRIBE_TS_BYTES};
use crate::descriptor::{describe_moov, FrameRate, FrameRateSource, RenditionDescriptor};
use crate::fmp4::{ByteRange, FragmentBuilder, FragmentIndex};
use crate::{detect, ts, Container, DETECT_LEN};

/// Most random-access points an index keeps (later ones are dropped).
pub const MAX_POINTS: usize = 1 << 20;
/// Largest `moov` box the MP4 indexer keeps in memory to read its sample tables.
pub const MAX_MOOV_BYTES: u64 = 64 << 20;

/// What [`Indexer::finish`] learned.
#[derive(Clone, Debug, PartialEq)]
pub struct MediaIndex {
    /// The container detected from the first bytes.
    pub container: Container,
    /// Random-access points, in increasing time and offset.
    pub points: Vec<AccessPoint>,
    /// MP4 only: `Some(true)` when `moov` comes before the first `mdat`.
    pub moov_at_front: Option<bool>,
    /// Fragmented MP4 / CMAF only (a `moov` with `mvex`): the init segment and fragments
    /// (see [`crate::fmp4`]); its points are then the starts of the fragments that start
    /// with a sync sample.
    pub fragments: Option<FragmentIndex>,
    /// The codecs, resolution and frame rate (see [`crate::descriptor`]): MPEG-TS from its
    /// first [`DESCRIBE_TS_BYTES`] bytes, MP4 from its `moov`; `None` for an MP4 without a
    /// (kept) `moov` or an unknown container.
    pub rendition: Option<RenditionDescriptor>,
    /// MPEG-TS only: each key frame's byte extent and the PAT + PMT's.
    pub ts_key_frames: Option<TsKeyFrames>,
}

/// The key frames of an MPEG-TS object, for its I-frame playlist.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TsKeyFrames {
    /// The bytes from the first PAT packet to the end of the first PMT packet after it
    /// (a playlist's `EXT-X-MAP`), when both were found within [`MAX_INIT_BYTES`].
    pub init: Option<ByteRange>,
    /// Each key frame (one per random-access point, at most [`MAX_POINTS`]): its first
    /// packet's offset and the bytes to the end of its last video packet, and its time.
    pub frames: Vec<TsKeyFrame>,
}

/// One key frame of an MPEG-TS object.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TsKeyFrame {
    /// Its time, as its random-access point's.
    pub time_s: f64,
    /// Its bytes: the packet starting its PES to the end of the last video packet of that
    /// PES (audio and other packets between them included).
    pub bytes: ByteRange,
}

/// Most bytes from the first PAT to the end of the PMT for them to be an init range.
pub const MAX_INIT_BYTES: u64 = 64 * 188;

impl MediaIndex {
    /// The last point at or before `time_s` (the first point when `time_s` precedes it).
    pub fn point_at(&self, time_s: f64) -> Option<AccessPoint> {
        point_at(&self.points, time_s)
    }
}

/// The last of `points` (sorted by time) at or before `time_s`, else the first one.
pub fn point_at(points: &[AccessPoint], time_s: f64) -> Option<AccessPoint> {
    let after = points.partition_point(|p| p.time_s <= time_s);
    points.get(after.saturating_sub(1)).copied()
}

/// The incremental indexer: [`Indexer::feed`] the object's bytes in order, then
/// [`Indexer::finish`].
#[derive(Debug)]
pub struct Indexer {
    /// Bytes fed so far.
    pos: u64,
    /// The first bytes, kept until the container is known.
    head: Vec<u8>,
    state: State,
    points: Points,
    /// An MPEG-TS's first bytes (at most [`DESCRIBE_TS_BYTES`]), for its descriptor.
    ts_head: Vec<u8>,
}

#[derive(Debug)]
enum State {
    Detecting,
    Ts(Box<TsIndexer>),
    Mp4(Box<Mp4Walker>),
    Other,
}

impl Default for Indexer {
    fn default() -> Self {
        Indexer::new()
    }
}

impl Indexer {
    /// An indexer at the start of an object.
    pub fn new() -> Indexer {
        Indexer {
            pos: 0,
            head: Vec::new(),
            state: State::Detecting,
            points: Points::default(),
            ts_head: Vec::new(),
        }
    }

    /// Takes the next bytes of the object.
    pub fn feed(&mut self, data: &[u8]) {
        if let State::Detecting = self.state {
            let want = DETECT_LEN.saturating_sub(self.head.len()).min(data.len());
            self.head.extend_from_slice(&data[..want]);
            self.pos += want as u64;
            if self.head.len() < DETECT_LEN {
                return;
            }
            self.decide();
            self.feed(&data[want..]);
            return;
        }
        let at = self.pos;
        self.pos += data.len() as u64;
        match &mut self.state {
            State::Ts(t) => {
                t.feed(at, data, &mut self.points);
                let room = DESCRIBE_TS_BYTES.saturating_sub(self.ts_head.len());
                self.ts_head
                    .extend_from_slice(data.get(..room).unwrap_or(data));
            }
            State::Mp4(m) => m.feed(at, data),
            State::Detecting | State::Other => {}
        }
    }

    /// Detects the container from the kept head and replays the head through it.
    fn decide(&mut self) {
        let head = std::mem::take(&mut self.head);
        self.state = match detect(&head) {
            Container::MpegTs => State::Ts(Box::default()),
            Container::Mp4 => State::Mp4(Box::default()),
            Container::Unknown => State::Other,
        };
        match &mut self.state {
            State::Ts(t) => {
                t.feed(0, &head, &mut self.points);
                self.ts_head = head;
            }
            State::Mp4(m) => m.feed(0, &head),
            State::Detecting | State::Other => {}
        }
    }

    /// The random-access points found so far of an MPEG-TS object, in increasing order
    /// (each at a byte already fed); `None` for another container or before the container
    /// is known. An MP4's points come only at [`Indexer::finish`] (from its `moov`).
    pub fn ts_points(&self) -> Option<&[AccessPoint]> {
        match &self.state {
            State::Ts(_) => Some(&self.points.list),
            State::Detecting | State::Mp4(_) | State::Other => None,
        }
    }

    /// The index of everything fed.
    pub fn finish(mut self) -> MediaIndex {
        if let State::Detecting = self.state {
            self.decide();
        }
        match self.state {
            State::Ts(mut t) => MediaIndex {
                container: Container::MpegTs,
                points: self.points.list,
                moov_at_front: None,
                fragments: None,
                rendition: Some(describe_ts(&self.ts_head)),
                ts_key_frames: Some(t.key_frames()),
            },
            State::Mp4(m) => {
                let moov_at_front = m.moov_at_front();
                let mut points = self.points;
                if let Some(moov) = &m.moov {
                    crate::index_mp4::index_moov(moov, &mut |p| points.push(p));
                }
                let fragments = m.frags.finish(self.pos);
                if let Some(f) = &fragments {
                    fragment_points(f, &mut points);
                }
                let rendition = m
                    .moov
                    .as_deref()
                    .map(|moov| mp4_rendition(moov, fragments.as_ref()));
                MediaIndex {
                    container: Container::Mp4,
                    points: points.list,
                    moov_at_front,
                    fragments,
                    rendition,
                    ts_key_frames: None,
                }
            }
            State::Detecting | State::Other => MediaIndex {
                container: Container::Unknown,
                points: Vec::new(),
                moov_at_front: None,
                fragments: None,
                rendition: None,
                ts_key_frames: None,
            },
        }
    }
}

/// Adds a point at each fragment that starts with a sync sample: the `moof`'s offset, at
/// its decode start. Times are from the first fragment's decode start when the `moov`
/// holds no samples (points already pushed from its sample tables keep the `tfdt` scale).
fn fragment_points(f: &FragmentIndex, points: &mut Points) {
    let base = match (points.list.is_empty(), f.fragments.first()) {
        (true, Some(first)) => first.decode_start,
        _ => 0,
    };
    for frag in f.fragments.iter().filter(|g| g.starts_with_sync) {
        let ticks = i128::from(frag.decode_start) - i128::from(base);
        points.push(AccessPoint {
            time_s: f.seconds(ticks),
            offset_bytes: frag.bytes.offset,
        });
    }
}

/// An MP4's descriptor from its `moov`; a fragmented one without a frame rate there takes
/// it from the median fragment (by samples per tick) of its reference track.
fn mp4_rendition(moov: &[u8], fragments: Option<&FragmentIndex>) -> RenditionDescriptor {
    let mut d = describe_moov(moov);
    if let (Some(v), Some(f)) = (d.video.as_mut(), fragments) {
        if v.frame_rate.is_none() {
            let mut rates: Vec<(u64, u64)> = f
                .fragments
                .iter()
                .filter(|g| g.samples > 0 && g.duration > 0)
                .map(|g| (u64::from(g.samples), g.duration))
                .collect();
            rates.sort_by(|a, b| {
                (u128::from(a.0) * u128::from(b.1)).cmp(&(u128::from(b.0) * u128::from(a.1)))
            });
            v.frame_rate = rates.get(rates.len() / 2).and_then(|&(n, d)| {
                FrameRate::from_ratio(n.saturating_mul(u64::from(f.timescale)), d)
            });
            v.frame_rate_source = v.frame_rate.map(|_| FrameRateSource::SampleDurations);
        }
    }
    d
}

/// The points found so far: increasing, bounded.
#[derive(Debug, Default)]
pub(crate) struct Points {
    list: Vec<AccessPoint>,
}

impl Points {
    /// Keeps `p` if it comes after the last point in both time and offset.
    pub(crate) fn push(&mut self, p: AccessPoint) {
        if self.list.len() >= MAX_POINTS || !p.time_s.is_finite() || p.time_s < 0.0 {
            return;
        }
        if let Some(last) = self.list.last() {
            if p.time_s <= last.time_s || p.offset_bytes <= last.offset_bytes {
                return;
            }
        }
        self.list.push(p);
    }
}

/// PTS values wrap at this modulus (33 bits).
const PTS_MODULUS: u64 = 1 << 33;
/// PTS ticks per second.
const PTS_HZ: f64 = 90_000.0;

/// Video codecs the TS indexer recognises key frames of by their NAL units.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum VideoCodec {
    H264,
    Hevc,
    /// Known to be video, key frames known from the random_access_indicator only.
    Other,
}

#[derive(Debug, Default)]
struct TsIndexer {
    carry: Vec<u8>,
    /// A packet without the sync byte was met: the rest is not indexed.
    lost_sync: bool,
    pmt_pid: Option<u16>,
    video: Option<(u16, VideoCodec)>,
    first_pts: Option<u64>,
    first_pcr: Option<u64>,
    last_pcr: Option<u64>,
    /// The first PAT packet's offset, and the PAT + PMT range once the PMT follows it.
    pat_at: Option<u64>,
    init: Option<ByteRange>,
    /// The key frames closed so far, and the open one (its time and first byte).
    frames: Vec<TsKeyFrame>,
    open: Option<(f64, u64)>,
    /// The end of the last packet on the video PID.
    video_end: u64,
}

impl TsIndexer {
    /// Takes `data`, which starts at object offset `at` (a continuation of the last feed).
    fn feed(&mut self, at: u64, mut data: &[u8], points: &mut Points) {
        let mut at = at;
        if !self.carry.is_empty() {
            let want = (ts::PACKET_LEN - self.carry.len()).min(data.len());
            self.carry.extend_from_slice(&data[..want]);
            data = &data[want..];
            at += want as u64;
            if self.carry.len() < ts::PACKET_LEN {
                return;
            }
            let packet = std::mem::take(&mut self.carry);
            self.packet(at - ts::PACKET_LEN as u64, &packet, points);
        }
        let mut chunks = data.chunks_exact(ts::PACKET_LEN);
        for (i, p) in chunks.by_ref().enumerate() {
            self.packet(at + (i * ts::PACKET_LEN) as u64, p, points);
        }
        self.carry.extend_from_slice(chunks.remainder());
    }

    fn packet(&mut self, offset: u64, p: &[u8], points: &mut Points) {
        if self.lost_sync || p.first() != Some(&ts::SYNC_BYTE) {
            self.lost_sync = true;
            return;
        }
        let Some(pid) = ts::packet_pid(p) else { return };
        if let Some(pcr) = ts::packet_pcr(p) {
            self.first_pcr.get_or_insert(pcr);
            self.last_pcr = Some(pcr);
        }
        let pusi = p.get(1).is_some_and(|b| b & 0x40 != 0);
        let on_video = self.video.is_some_and(|(v, _)| v == pid);
        if on_video && !pusi {
            self.video_end = offset + ts::PACKET_LEN as u64;
        }
        if !pusi {
            return;
        }
        if pid == ts::PAT_PID && self.pmt_pid.is_none() {
            self.pmt_pid = pat_pmt_pid(p);
            self.pat_at = Some(offset);
            return;
        }
        if Some(pid) == self.pmt_pid && self.init.is_none() {
            self.init = self
                .pat_at
                .map(|at| ByteRange {
                    offset: at,
                    length: offset + ts::PACKET_LEN as u64 - at,
                })
                .filter(|r| r.length <= MAX_INIT_BYTES);
        }
        if Some(pid) == self.pmt_pid && self.video.is_none() {
            self.video = pmt_video(p);
            return;
        }
        let Some(pes) = payload(p) else { return };
        let Some(stream_id) = pes_stream_id(pes) else {
            return;
        };
        match self.video {
            None if (0xE0..=0xEF).contains(&stream_id) => {
                self.video = Some((pid, VideoCodec::Other));
            }
            Some((v, _)) if v == pid => {}
            _ => return,
        }
        // A PES starts on the video PID: it ends the open key frame.
        self.close_key_frame();
        self.video_end = offset + ts::PACKET_LEN as u64;
        let codec = self.video.map_or(VideoCodec::Other, |v| v.1);
        let pts = pes_pts(pes);
        if let Some(pts) = pts {
            self.first_pts.get_or_insert(pts);
        }
        let key = random_access_indicator(p) || key_nal(pes_payload(pes), codec);
        if !key {
            return;
        }
        let time_s = match (pts, self.first_pts, self.first_pcr, self.last_pcr) {
            (Some(pts), Some(first), _, _) => {
                ((pts + PTS_MODULUS - first) % PTS_MODULUS) as f64 / PTS_HZ
            }
            (None, _, Some(first), Some(last)) => {
                ts::pcr_delta(first, last) as f64 / ts::PCR_HZ as f64
            }
            _ => return,
        };
        let before = points.list.len();
        points.push(AccessPoint {
            time_s,
            offset_bytes: offset,
        });
        if points.list.len() > before {
            self.open = Some((time_s, offset));
        }
    }

    /// Closes the open key frame at the end of the last video packet.
    fn close_key_frame(&mut self) {
        if let Some((time_s, at)) = self.open.take() {
            if self.video_end > at && self.frames.len() < MAX_POINTS {
                self.frames.push(TsKeyFrame {
                    time_s,
                    bytes: ByteRange {
                        offset: at,
                        length: self.video_end - at,
                    },
                });
            }
        }
    }

    /// The key frames and init range found (the open key frame closed).
    fn key_frames(&mut self) -> TsKeyFrames {
        self.close_key_frame();
        TsKeyFrames {
            init: self.init,
            frames: std::mem::take(&mut self.frames),
        }
    }
}

/// The payload of a packet (after any adaptation field), if it has one.
fn payload(p: &[u8]) -> Option<&[u8]> {
    match (p.get(3)? >> 4) & 0x3 {
        0b01 => p.get(4..),
        0b11 => p.get(5 + usize::from(*p.get(4)?)..),
        _ => None,
    }
}

/// The random_access_indicator of a packet's adaptation field.
fn random_access_indicator(p: &[u8]) -> bool {
    let has_af = p.get(3).is_some_and(|b| b & 0x20 != 0);
    has_af && p.get(4).is_some_and(|&len| len > 0) && p.get(5).is_some_and(|b| b & 0x40 != 0)
}

/// The PSI section starting in this packet (pointer field followed), up to the packet's end.
fn section(p: &[u8], table_id: u8) -> Option<&[u8]> {
    let pl = payload(p)?;
    let pointer = usize::from(*pl.first()?);
    let sec = pl.get(1 + pointer..)?;
    if *sec.first()? != table_id {
        return None;
    }
    let len = (usize::from(*sec.get(1)? & 0x0F) << 8) | usize::from(*sec.get(2)?);
    let sec = sec.get(..3 + len)?;
    (len >= 9 && crate::crc32_mpeg2(sec) == 0).then_some(sec)
}

/// The PMT PID of the first program of a PAT that fits in one packet.
fn pat_pmt_pid(p: &[u8]) -> Option<u16> {
    let sec = section(p, 0x00)?;
    let programs = sec.get(8..sec.len().checked_sub(4)?)?;
    programs
        .chunks_exact(4)
        .find(|e| u16::from_be_bytes([e[0], e[1]]) != 0)
        .map(|e| u16::from_be_bytes([e[2] & 0x1F, e[3]]))
}

/// The first video elementary stream of a PMT that fits in one packet.
fn pmt_video(p: &[u8]) -> Option<(u16, VideoCodec)> {
    let sec = section(p, 0x02)?;
    let info_len = (usize::from(*sec.get(10)? & 0x0F) << 8) | usize::from(*sec.get(11)?);
    let mut es = sec.get(12 + info_len..sec.len().checked_sub(4)?)?;
    while es.len() >= 5 {
        let stream_type = es[0];
        let pid = u16::from_be_bytes([es[1] & 0x1F, es[2]]);
        let es_info = (usize::from(es[3] & 0x0F) << 8) | usize::from(es[4]);
        let codec = match stream_type {
            0x1B => Some(VideoCodec::H264),
            0x24 => Some(VideoCodec::Hevc),
            0x01 | 0x02 | 0x10 | 0x42 | 0xEA => Some(VideoCodec::Other),
            _ => None,
        };
        if let Some(c) = codec {
            return Some((pid, c));
        }
        es = es.get(5 + es_info..)?;
    }
    None
}

/// The stream_id of a PES starting at `pes`.
fn pes_stream_id(pes: &[u8]) -> Option<u8> {
    match pes {
        [0, 0, 1, id, ..] => Some(*id),
        _ => None,
    }
}

/// The PTS of a PES header, if it has one.
fn pes_pts(pes: &[u8]) -> Option<u64> {
    let flags = *pes.get(7)?;
    if flags & 0x80 == 0 {
        return None;
    }
    let b = pes.get(9..14)?;
    Some(
        (u64::from(b[0] >> 1 & 0x07) << 30)
            | (u64::from(b[1]) << 22)
            | (u64::from(b[2] >> 1) << 15)
            | (u64::from(b[3]) << 7)
            | u64::from(b[4] >> 1),
    )
}

/// The bytes after a PES header (empty when the header does not fit).
fn pes_payload(pes: &[u8]) -> &[u8] {
    let Some(&hdr_len) = pes.get(8) else {
        return &[];
    };
    pes.get(9 + usize::from(hdr_len)..).unwrap_or(&[])
}

/// Whether `es` (the start of a video access unit) holds a key-frame NAL unit.
fn key_nal(es: &[u8], codec: VideoCodec) -> bool {
    let mut i = 0;
    while let Some(w) = es.get(i..i + 4) {
        if w[..3] == [0, 0, 1] {
            let key = match codec {
                VideoCodec::H264 => matches!(w[3] & 0x1F, 5 | 7),
                VideoCodec::Hevc => matches!((w[3] >> 1) & 0x3F, 16..=21 | 32 | 33),
                VideoCodec::Other => false,
            };
            if key {
                return true;
            }
            i += 3;
        } else {
            i += 1;
        }
    }
    false
}

/// What the walker keeps the content of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Keep {
    Moov,
    Moof,
    Sidx,
}

/// The streaming top-level box walker of an MP4.
#[derive(Debug, Default)]
struct Mp4Walker {
    /// Bytes of the current box header read so far (up to 16).
    header: Vec<u8>,
    /// Bytes walked so far.
    pos: u64,
    /// Where the current box starts and ends (`u64::MAX`: at the end of the object).
    box_at: (u64, u64),
    /// Bytes left of the current box's content (after its header).
    left: u64,
    /// Keeping the current box's content (`moov`, or `moof`/`sidx` of a fragmented MP4).
    keeping: Option<Keep>,
    moov: Option<Vec<u8>>,
    /// The content of the box being kept.
    buf: Vec<u8>,
    seen_moov: bool,
    seen_mdat: bool,
    moov_first: Option<bool>,
    /// The structure broke (bad size): nothing more is walked.
    broken: bool,
    frags: FragmentBuilder,
}

impl Mp4Walker {
    fn feed(&mut self, _at: u64, mut data: &[u8]) {
        while !data.is_empty() && !self.broken {
            if self.left > 0 {
                let n = usize::try_from(self.left)
                    .unwrap_or(usize::MAX)
                    .min(data.len());
                if self.keeping.is_some() {
                    self.buf.extend_from_slice(&data[..n]);
                }
                self.left -= n as u64;
                self.pos += n as u64;
                data = &data[n..];
                if self.left == 0 {
                    self.kept();
                }
                continue;
            }
            let want = if self.header.len() >= 8 && self.header[..4] == [0, 0, 0, 1] {
                16
            } else {
                8
            };
            let n = (want - self.header.len()).min(data.len());
            self.header.extend_from_slice(&data[..n]);
            self.pos += n as u64;
            data = &data[n..];
            if self.header.len() == want && (want == 16 || self.header[..4] != [0, 0, 0, 1]) {
                self.start_box();
            }
        }
    }

    /// The current box's content is all in: hand over what was kept.
    fn kept(&mut self) {
        let Some(keep) = self.keeping.take() else {
            return;
        };
        let buf = std::mem::take(&mut self.buf);
        let (start, end) = self.box_at;
        match keep {
            Keep::Moov => {
                self.frags.moov(&buf);
                self.moov = Some(buf);
            }
            Keep::Moof => self.frags.moof(&buf, start, end),
            Keep::Sidx => self.frags.sidx(&buf, end),
        }
    }

    /// A complete box header is in `self.header`: decide what to do with its content.
    fn start_box(&mut self) {
        let h = std::mem::take(&mut self.header);
        let size32 = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
        let kind = [h[4], h[5], h[6], h[7]];
        let size = match size32 {
            0 => u64::MAX,
            1 => h
                .get(8..16)
                .and_then(|b| b.try_into().ok())
                .map_or(0, u64::from_be_bytes),
            n => u64::from(n),
        };
        let header_len = h.len() as u64;
        let Some(content) = size.checked_sub(header_len) else {
            self.broken = true;
            return;
        };
        let start = self.pos - header_len;
        let end = if size == u64::MAX {
            u64::MAX
        } else {
            start.saturating_add(size)
        };
        self.box_at = (start, end);
        match &kind {
            b"moov" if !self.seen_moov => {
                self.seen_moov = true;
                self.moov_first.get_or_insert(true);
                let keep = content <= MAX_MOOV_BYTES && size != u64::MAX;
                self.keeping = keep.then_some(Keep::Moov);
            }
            b"mdat" => {
                self.seen_mdat = true;
                self.moov_first.get_or_insert(false);
                self.frags.box_start(kind, start, end);
            }
            b"moof" | b"sidx" => {
                let keep = self.frags.box_start(kind, start, end) && size != u64::MAX;
                self.keeping = keep.then_some(if &kind == b"moof" {
                    Keep::Moof
                } else {
                    Keep::Sidx
                });
            }
            _ => {
                self.frags.box_start(kind, start, end);
            }
        }
        self.left = content;
        if self.left == 0 {
            self.kept();
        }
    }

    /// `Some(true)` when `moov` came before any `mdat`, `None` without both.
    fn moov_at_front(&self) -> Option<bool> {
        if !self.seen_moov {
            return None;
        }
        self.moov_first
    }
}

#[cfg(test)]
mod tests;
