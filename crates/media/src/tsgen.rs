//! Deterministic constant-bitrate MPEG-TS test-stream generator.

use std::io::Write;

use crate::ts::{NULL_PID, PACKET_LEN, PAT_PID, PCR_HZ, PCR_MODULUS, SYNC_BYTE};
use crate::{crc32_mpeg2, MediaError};

/// PID of the Program Map Table written by the generator.
const PMT_PID: u16 = 0x1000;
/// PID of the MPEG-2 video elementary stream, also the PCR PID.
const VIDEO_PID: u16 = 0x100;
/// Stream type written in the PMT: MPEG-2 video.
const STREAM_TYPE_MPEG2_VIDEO: u8 = 0x02;
const PROGRAM_NUMBER: u16 = 1;
const TRANSPORT_STREAM_ID: u16 = 1;

/// PCRs are written so that consecutive ones are at most this far apart (30 ms).
const PCR_INTERVAL: u64 = PCR_HZ * 30 / 1000;
/// PAT + PMT are repeated about every 100 ms.
const PSI_INTERVAL: u64 = PCR_HZ / 10;
/// Video frame period: 25 frames per second.
const FRAME_PERIOD: u64 = PCR_HZ / 25;
/// Presentation delay of a frame after it enters the multiplexer: 500 ms, in 90 kHz units.
const PTS_DELAY_90K: u64 = 45_000;
const PTS_MODULUS: u64 = 1 << 33;
/// Smallest video frame (PES header + MPEG-2 headers + a few slice bytes).
const MIN_FRAME: usize = 64;

/// Lowest bitrate the generator accepts: below it, PSI repetition and PCR spacing no longer fit.
pub const MIN_BITRATE_BPS: u64 = 100_000;
/// Highest bitrate the generator accepts (10 Gbit/s).
pub const MAX_BITRATE_BPS: u64 = 10_000_000_000;

/// The first PCR written by [`generate_ts`]: 1 s, in 27 MHz ticks.
pub const DEFAULT_FIRST_PCR: u64 = PCR_HZ;

/// Parameters of a generated test stream.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TsGenConfig {
    /// Constant multiplex bitrate in bits per second (100 kbit/s ..= 10 Gbit/s).
    pub bitrate_bps: u64,
    /// Duration in seconds; the stream has `bitrate_bps × duration_s / 8` bytes rounded to
    /// whole 188-byte packets.
    pub duration_s: f64,
    /// Seed of the pseudo-random video payload and frame sizes.
    pub seed: u64,
}

impl TsGenConfig {
    /// How many 188-byte packets the stream will have, or why the configuration is invalid.
    pub fn packet_count(&self) -> Result<u64, MediaError> {
        if !(MIN_BITRATE_BPS..=MAX_BITRATE_BPS).contains(&self.bitrate_bps) {
            return Err(MediaError::InvalidConfig(format!(
                "bitrate {} bit/s is outside {MIN_BITRATE_BPS}..={MAX_BITRATE_BPS}",
                self.bitrate_bps
            )));
        }
        if !self.duration_s.is_finite() || self.duration_s <= 0.0 {
            return Err(MediaError::InvalidConfig(format!(
                "duration {} s must be a positive finite number",
                self.duration_s
            )));
        }
        let packets = (self.bitrate_bps as f64 * self.duration_s / 8.0 / PACKET_LEN as f64).round();
        if packets < 3.0 {
            return Err(MediaError::InvalidConfig(format!(
                "duration {} s at {} bit/s is shorter than the 3 packets (PAT, PMT, PCR) of a minimal stream",
                self.duration_s, self.bitrate_bps
            )));
        }
        if packets > (u64::MAX / PACKET_LEN as u64 / 2) as f64 {
            return Err(MediaError::InvalidConfig(format!(
                "duration {} s is too long",
                self.duration_s
            )));
        }
        Ok(packets as u64)
    }

    /// The length in bytes of the stream [`generate_ts`] writes for this configuration.
    pub fn byte_len(&self) -> Result<u64, MediaError> {
        Ok(self.packet_count()? * PACKET_LEN as u64)
    }
}

/// SplitMix64: small, fast, deterministic.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Big-endian bit writer for the MPEG-2 video headers.
struct Bits {
    out: Vec<u8>,
    acc: u64,
    n: u32,
}

impl Bits {
    fn new() -> Self {
        Bits {
            out: Vec::new(),
            acc: 0,
            n: 0,
        }
    }

    /// Appends the low `width` (<= 32) bits of `v`.
    fn put(&mut self, width: u32, v: u64) -> &mut Self {
        self.acc = (self.acc << width) | (v & ((1 << width) - 1));
        self.n += width;
        while self.n >= 8 {
            self.n -= 8;
            self.out.push((self.acc >> self.n) as u8);
        }
        self
    }

    /// Pads with zero bits to a byte boundary.
    fn align(&mut self) -> &mut Self {
        if self.n > 0 {
            self.put(8 - self.n, 0);
        }
        self
    }
}

/// Sequence header + sequence extension + picture header + picture coding extension of an
/// MPEG-2 Main Profile @ Main Level, 720x576, 25 fps, progressive, intra-only frame
/// (ISO/IEC 13818-2 §6.2.2, §6.2.3).
fn mpeg2_frame_headers(bitrate_bps: u64) -> Vec<u8> {
    let mut b = Bits::new();
    b.put(32, 0x0000_01B3) // sequence_header_code
        .put(12, 720) // horizontal_size_value
        .put(12, 576) // vertical_size_value
        .put(4, 2) // aspect_ratio_information: 4:3
        .put(4, 3) // frame_rate_code: 25
        .put(18, (bitrate_bps / 400).clamp(1, 0x3_FFFF)) // bit_rate_value, 400 bit/s units
        .put(1, 1) // marker_bit
        .put(10, 112) // vbv_buffer_size_value (x 16 kbit)
        .put(1, 0) // constrained_parameters_flag
        .put(1, 0) // load_intra_quantiser_matrix
        .put(1, 0) // load_non_intra_quantiser_matrix
        .align();
    b.put(32, 0x0000_01B5) // extension_start_code
        .put(4, 1) // sequence_extension
        .put(8, 0x48) // profile_and_level: Main@Main
        .put(1, 1) // progressive_sequence
        .put(2, 1) // chroma_format: 4:2:0
        .put(2, 0) // horizontal_size_extension
        .put(2, 0) // vertical_size_extension
        .put(12, 0) // bit_rate_extension
        .put(1, 1) // marker_bit
        .put(8, 0) // vbv_buffer_size_extension
        .put(1, 1) // low_delay
        .put(2, 0) // frame_rate_extension_n
        .put(5, 0) // frame_rate_extension_d
        .align();
    b.put(32, 0x0000_0100) // picture_start_code
        .put(10, 0) // temporal_reference
        .put(3, 1) // picture_coding_type: I
        .put(16, 0xFFFF) // vbv_delay: variable
        .put(1, 0) // extra_bit_picture
        .align();
    b.put(32, 0x0000_01B5) // extension_start_code
        .put(4, 8) // picture_coding_extension
        .put(16, 0xFFFF) // f_codes: unused in I pictures
        .put(2, 0) // intra_dc_precision: 8 bits
        .put(2, 3) // picture_structure: frame
        .put(1, 0) // top_field_first
        .put(1, 1) // frame_pred_frame_dct
        .put(1, 0) // concealment_motion_vectors
        .put(1, 0) // q_scale_type
        .put(1, 0) // intra_vlc_format
        .put(1, 0) // alternate_scan
        .put(1, 0) // repeat_first_field
        .put(1, 1) // chroma_420_type
        .put(1, 1) // progressive_frame
        .put(1, 0) // composite_display_flag
        .align();
    b.out
}

/// Writes a generated constant-bitrate MPEG-TS to `out`; returns the number of bytes written.
///
/// The stream is one program (PAT on PID 0, PMT on PID 0x1000 announcing an MPEG-2 video stream
/// (type 0x02) on PID 0x100, which is also the PCR PID). PAT and PMT are repeated about every
/// 100 ms with valid CRC-32/MPEG-2. Video frames (25 per second) are PES packets with a PTS
/// (500 ms after the frame enters the multiplexer) holding syntactically valid MPEG-2 headers
/// (720x576 intra pictures) and one slice of pseudo-random bytes; sizes (0.5x to 1.5x of about
/// 70 % of the multiplex rate) and content derive from `seed`. The video is not decodable:
/// it is a container test signal;
/// each PES starts a packet (payload_unit_start) and its last packet is padded with
/// adaptation-field stuffing. A PCR is written at least every 30 ms, in an adaptation-field-only
/// packet when no video is waiting. Continuity counters increase per PID on payload packets.
/// Null packets (PID 0x1FFF) fill the rest, so the multiplex rate is exactly constant: the PCR
/// in the packet starting at byte `b` is `first PCR + (b + 10) × 8 × 27 MHz / bitrate`.
///
/// Output is written in 64 KiB chunks (no need for a `BufWriter`). The first PCR is
/// [`DEFAULT_FIRST_PCR`]; use [`generate_ts_with_first_pcr`] to choose it (e.g. to test a wrap).
pub fn generate_ts<W: Write + ?Sized>(cfg: &TsGenConfig, out: &mut W) -> Result<u64, MediaError> {
    generate_ts_with_first_pcr(cfg, DEFAULT_FIRST_PCR, out)
}

/// [`generate_ts`] with a chosen first PCR (27 MHz ticks, taken modulo the PCR period, so a
/// value just below [`crate::ts::PCR_MODULUS`] makes the PCR wrap inside the stream).
pub fn generate_ts_with_first_pcr<W: Write + ?Sized>(
    cfg: &TsGenConfig,
    first_pcr: u64,
    out: &mut W,
) -> Result<u64, MediaError> {
    let packets = cfg.packet_count()?;
    let mut mux = Mux::new(cfg, first_pcr % PCR_MODULUS);
    let mut buf = Vec::with_capacity(PACKET_LEN * 349);
    for i in 0..packets {
        mux.packet(i, &mut buf);
        if buf.len() + PACKET_LEN > buf.capacity() {
            out.write_all(&buf)?;
            buf.clear();
        }
    }
    out.write_all(&buf)?;
    Ok(packets * PACKET_LEN as u64)
}

struct Mux {
    bitrate: u128,
    first_pcr: u64,
    rng: Rng,
    mean_frame: usize,
    last_pcr: Option<u64>,
    last_psi: Option<u64>,
    pmt_pending: bool,
    cc_pat: u8,
    cc_pmt: u8,
    cc_video: u8,
    /// Frames released to the multiplexer so far (frame k is released at k × 40 ms).
    frames_released: u64,
    /// Frames turned into PES packets so far.
    frames_started: u64,
    /// The PES being sent and how much of it is sent.
    pes: Vec<u8>,
    pes_sent: usize,
    pat: Vec<u8>,
    pmt: Vec<u8>,
    /// The MPEG-2 video headers that open every frame.
    es_headers: Vec<u8>,
}

impl Mux {
    fn new(cfg: &TsGenConfig, first_pcr: u64) -> Self {
        // Per 40 ms frame period: the multiplex carries bitrate/8/25 bytes; leave room for the
        // PAT+PMT (0.8 packets), PCR adaptation fields, one stuffed PES tail, and 25 % headroom.
        let per_frame = cfg.bitrate_bps as f64 / 8.0 / 25.0 * 184.0 / 188.0;
        let budget = per_frame - 0.8 * PACKET_LEN as f64 - 16.0 - 184.0;
        let mean_frame = ((budget * 0.75) as usize).max(MIN_FRAME);
        Mux {
            bitrate: u128::from(cfg.bitrate_bps),
            first_pcr,
            rng: Rng(cfg.seed ^ 0x6973_6E6F_6465_5453),
            mean_frame,
            last_pcr: None,
            last_psi: None,
            pmt_pending: false,
            cc_pat: 0,
            cc_pmt: 0,
            cc_video: 0,
            frames_released: 0,
            frames_started: 0,
            pes: Vec::new(),
            pes_sent: 0,
            pat: pat_section(),
            pmt: pmt_section(),
            es_headers: mpeg2_frame_headers(cfg.bitrate_bps),
        }
    }

    /// Time (27 MHz ticks since the first byte) of the PCR byte of packet `i`.
    fn time(&self, i: u64) -> u64 {
        let bits = (u128::from(i) * PACKET_LEN as u128 + 10) * 8;
        u64::try_from(bits * u128::from(PCR_HZ) / self.bitrate).unwrap_or(u64::MAX)
    }

    fn packet(&mut self, i: u64, out: &mut Vec<u8>) {
        let t = self.time(i);
        let t_next = self.time(i + 1);
        while self.frames_released * FRAME_PERIOD <= t {
            self.frames_released += 1;
        }
        let pcr_due = match self.last_pcr {
            None => self.last_psi.is_some() && !self.pmt_pending,
            Some(last) => t_next - last > PCR_INTERVAL,
        };
        let psi_due = self
            .last_psi
            .is_none_or(|last| t_next - last > PSI_INTERVAL);
        if pcr_due {
            self.last_pcr = Some(t);
            let pcr = (self.first_pcr + t % PCR_MODULUS) % PCR_MODULUS;
            self.video_packet(Some(pcr), out);
        } else if psi_due {
            self.last_psi = Some(t);
            self.pmt_pending = true;
            let cc = next_cc(&mut self.cc_pat);
            psi_packet(PAT_PID, cc, &self.pat, out);
        } else if self.pmt_pending {
            self.pmt_pending = false;
            let cc = next_cc(&mut self.cc_pmt);
            psi_packet(PMT_PID, cc, &self.pmt, out);
        } else if self.video_waiting() {
            self.video_packet(None, out);
        } else {
            write_packet(out, NULL_PID, false, 0, None, &[]);
        }
    }

    fn video_waiting(&self) -> bool {
        self.pes_sent < self.pes.len() || self.frames_started < self.frames_released
    }

    /// A video packet: the next chunk of the current PES (starting the next frame if needed),
    /// with a PCR if given; adaptation-field only if there is no video to send.
    fn video_packet(&mut self, pcr: Option<u64>, out: &mut Vec<u8>) {
        if self.pes_sent >= self.pes.len() && self.frames_started < self.frames_released {
            self.start_frame();
        }
        let room = if pcr.is_some() { 176 } else { 184 };
        let left = self.pes.len() - self.pes_sent;
        if left == 0 {
            // Adaptation field only: continuity counter does not advance.
            write_packet(
                out,
                VIDEO_PID,
                false,
                self.cc_video.wrapping_sub(1) & 0x0F,
                pcr,
                &[],
            );
            return;
        }
        let n = left.min(room);
        let pusi = self.pes_sent == 0;
        let cc = next_cc(&mut self.cc_video);
        write_packet(
            out,
            VIDEO_PID,
            pusi,
            cc,
            pcr,
            &self.pes[self.pes_sent..self.pes_sent + n],
        );
        self.pes_sent += n;
    }

    fn start_frame(&mut self) {
        let k = self.frames_started;
        self.frames_started += 1;
        let jitter = self.rng.next() % 1001; // 0.5x .. 1.5x the mean
        let size = (self.mean_frame as u64 * (500 + jitter) / 1000) as usize;
        let size = size.max(MIN_FRAME);
        let pts = (self.first_pcr / 300 + PTS_DELAY_90K + k * (FRAME_PERIOD / 300)) % PTS_MODULUS;
        self.pes.clear();
        self.pes_sent = 0;
        // PES header: start code, stream_id 0xE0 (video), PES_packet_length 0 (unbounded),
        // '10' + data_alignment_indicator, PTS only, header length 5.
        self.pes
            .extend_from_slice(&[0x00, 0x00, 0x01, 0xE0, 0x00, 0x00, 0x84, 0x80, 0x05]);
        self.pes.extend_from_slice(&[
            0x21 | ((pts >> 29) as u8 & 0x0E),
            (pts >> 22) as u8,
            ((pts >> 14) as u8 & 0xFE) | 1,
            (pts >> 7) as u8,
            ((pts << 1) as u8 & 0xFE) | 1,
        ]);
        // An MPEG-2 intra frame: sequence header + extension, picture header + coding
        // extension, then one slice of pseudo-random bytes with no zero byte (so no start code).
        self.pes.extend_from_slice(&self.es_headers);
        self.pes.extend_from_slice(&[0x00, 0x00, 0x01, 0x01]);
        while self.pes.len() < size {
            let r = self.rng.next().to_le_bytes();
            for b in r {
                if self.pes.len() < size {
                    self.pes.push(if b == 0 { 0xA5 } else { b });
                }
            }
        }
    }
}

fn next_cc(cc: &mut u8) -> u8 {
    let now = *cc;
    *cc = (now + 1) & 0x0F;
    now
}

/// Appends one 188-byte packet. `payload` (at most 184 bytes, 176 with a PCR) is placed at the
/// end; the gap is filled with an adaptation field (PCR if given, then 0xFF stuffing).
fn write_packet(out: &mut Vec<u8>, pid: u16, pusi: bool, cc: u8, pcr: Option<u64>, payload: &[u8]) {
    debug_assert!(payload.len() <= if pcr.is_some() { 176 } else { 184 });
    let start = out.len();
    let has_payload = !payload.is_empty();
    let has_af = pcr.is_some() || payload.len() < 184;
    let afc = match (has_af, has_payload) {
        (false, _) => 0b01,
        (true, true) => 0b11,
        (true, false) => 0b10,
    };
    out.extend_from_slice(&[
        SYNC_BYTE,
        (u8::from(pusi) << 6) | (pid >> 8) as u8 & 0x1F,
        pid as u8,
        (afc << 4) | (cc & 0x0F),
    ]);
    if has_af {
        let af_len = 183 - payload.len();
        out.push(af_len as u8);
        if af_len > 0 {
            match pcr {
                Some(pcr) => {
                    let base = pcr / 300;
                    let ext = pcr % 300;
                    out.extend_from_slice(&[
                        0x10,
                        (base >> 25) as u8,
                        (base >> 17) as u8,
                        (base >> 9) as u8,
                        (base >> 1) as u8,
                        ((base as u8 & 1) << 7) | 0x7E | (ext >> 8) as u8,
                        ext as u8,
                    ]);
                }
                None => out.push(0x00),
            }
        }
    }
    out.resize(start + PACKET_LEN - payload.len(), 0xFF);
    out.extend_from_slice(payload);
    debug_assert_eq!(out.len() - start, PACKET_LEN);
}

/// A PSI packet: pointer_field 0, the section, 0xFF stuffing.
fn psi_packet(pid: u16, cc: u8, section: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[
        SYNC_BYTE,
        0x40 | (pid >> 8) as u8,
        pid as u8,
        0x10 | cc,
        0x00,
    ]);
    out.extend_from_slice(section);
    out.resize(start + PACKET_LEN, 0xFF);
}

/// Completes a PSI section: fills in section_length and appends the CRC.
fn finish_section(mut s: Vec<u8>) -> Vec<u8> {
    let section_length = s.len() - 3 + 4;
    s[1] = 0xB0 | (section_length >> 8) as u8;
    s[2] = section_length as u8;
    let crc = crc32_mpeg2(&s);
    s.extend_from_slice(&crc.to_be_bytes());
    s
}

fn pat_section() -> Vec<u8> {
    let [ts_hi, ts_lo] = TRANSPORT_STREAM_ID.to_be_bytes();
    let [pn_hi, pn_lo] = PROGRAM_NUMBER.to_be_bytes();
    finish_section(vec![
        0x00, // table_id: program_association_section
        0,
        0, // section_syntax_indicator etc. + length, filled in
        ts_hi,
        ts_lo,
        0xC1, // reserved, version 0, current_next 1
        0x00, // section_number
        0x00, // last_section_number
        pn_hi,
        pn_lo,
        0xE0 | (PMT_PID >> 8) as u8,
        PMT_PID as u8,
    ])
}

fn pmt_section() -> Vec<u8> {
    let [pn_hi, pn_lo] = PROGRAM_NUMBER.to_be_bytes();
    finish_section(vec![
        0x02, // table_id: TS_program_map_section
        0,
        0,
        pn_hi,
        pn_lo,
        0xC1,
        0x00,
        0x00,
        0xE0 | (VIDEO_PID >> 8) as u8, // PCR_PID
        VIDEO_PID as u8,
        0xF0, // program_info_length 0
        0x00,
        STREAM_TYPE_MPEG2_VIDEO,
        0xE0 | (VIDEO_PID >> 8) as u8,
        VIDEO_PID as u8,
        0xF0, // ES_info_length 0
        0x00,
    ])
}
