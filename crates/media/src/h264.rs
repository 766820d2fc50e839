//! Video parameter sets: the H.264 sequence parameter set (ITU-T H.264 §7.3.2.1.1 and
//! Annex E VUI) and the HEVC profile/tier/level (ITU-T H.265 §7.3.3), read for the
//! rendition descriptor. A leaf: bytes in, values out, every read checked.

/// What an H.264 SPS tells the descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sps {
    /// `profile_idc`, the constraint-flags byte and `level_idc`: the `PPCCLL` of `avc1.PPCCLL`.
    pub(crate) profile_compat_level: [u8; 3],
    pub(crate) width: u32,
    pub(crate) height: u32,
    /// Frames per second as `time_scale / (2 × num_units_in_tick)` from the VUI timing info.
    pub(crate) frame_rate: Option<(u32, u32)>,
}

/// The RBSP of a NAL unit payload: emulation-prevention bytes (`00 00 03`) removed.
pub(crate) fn unescape(nal: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(nal.len());
    let mut zeros = 0;
    for &b in nal {
        if zeros >= 2 && b == 3 {
            zeros = 0;
            continue;
        }
        zeros = if b == 0 { zeros + 1 } else { 0 };
        out.push(b);
    }
    out
}

/// An MSB-first bit reader with Exp-Golomb codes.
struct Bits<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Bits<'_> {
    fn bit(&mut self) -> Option<u32> {
        let byte = self.data.get(self.pos / 8)?;
        let b = (byte >> (7 - self.pos % 8)) & 1;
        self.pos += 1;
        Some(u32::from(b))
    }

    fn bits(&mut self, n: u32) -> Option<u32> {
        (0..n).try_fold(0u32, |acc, _| Some((acc << 1) | self.bit()?))
    }

    fn ue(&mut self) -> Option<u32> {
        let mut zeros = 0;
        while self.bit()? == 0 {
            zeros += 1;
            if zeros > 31 {
                return None;
            }
        }
        let rest = self.bits(zeros)?;
        u32::try_from((1u64 << zeros) - 1 + u64::from(rest)).ok()
    }

    fn se(&mut self) -> Option<i64> {
        let k = i64::from(self.ue()?);
        Some(if k % 2 == 1 { (k + 1) / 2 } else { -(k / 2) })
    }
}

/// Profiles whose SPS carries chroma format, bit depths and scaling matrices.
const HIGH_PROFILES: [u8; 13] = [100, 110, 122, 244, 44, 83, 86, 118, 128, 138, 139, 134, 135];

/// Skips a `scaling_list` of `size` entries.
fn skip_scaling_list(r: &mut Bits<'_>, size: usize) -> Option<()> {
    let (mut last, mut next) = (8i64, 8i64);
    for _ in 0..size {
        if next != 0 {
            next = (last + r.se()? + 256).rem_euclid(256);
        }
        if next != 0 {
            last = next;
        }
    }
    Some(())
}

/// Reads the chroma format (skipping bit depths and scaling matrices) of a high-profile SPS.
fn chroma_format(r: &mut Bits<'_>) -> Option<(u32, bool)> {
    let chroma = r.ue()?;
    let separate = chroma == 3 && r.bit()? == 1;
    r.ue()?;
    r.ue()?;
    r.bit()?;
    if r.bit()? == 1 {
        let lists = if chroma == 3 { 12 } else { 8 };
        for i in 0..lists {
            if r.bit()? == 1 {
                skip_scaling_list(r, if i < 6 { 16 } else { 64 })?;
            }
        }
    }
    Some((chroma, separate))
}

/// Skips the picture-order-count fields of an SPS.
fn skip_poc(r: &mut Bits<'_>) -> Option<()> {
    r.ue()?; // log2_max_frame_num_minus4
    match r.ue()? {
        0 => {
            r.ue()?;
        }
        1 => {
            r.bit()?;
            r.se()?;
            r.se()?;
            let cycle = r.ue()?;
            if cycle > 255 {
                return None;
            }
            for _ in 0..cycle {
                r.se()?;
            }
        }
        _ => {}
    }
    Some(())
}

/// Parses an H.264 SPS NAL unit (starting with its NAL header byte, type 7).
pub(crate) fn parse_sps(nal: &[u8]) -> Option<Sps> {
    if nal.first()? & 0x1F != 7 {
        return None;
    }
    let rbsp = unescape(nal.get(1..)?);
    let pcl = [*rbsp.first()?, *rbsp.get(1)?, *rbsp.get(2)?];
    let mut r = Bits {
        data: &rbsp,
        pos: 24,
    };
    r.ue()?; // seq_parameter_set_id
    let (chroma, separate) = if HIGH_PROFILES.contains(&pcl[0]) {
        chroma_format(&mut r)?
    } else {
        (1, false)
    };
    skip_poc(&mut r)?;
    r.ue()?; // max_num_ref_frames
    r.bit()?;
    let width_mbs = u64::from(r.ue()?) + 1;
    let height_units = u64::from(r.ue()?) + 1;
    let frame_mbs_only = u64::from(r.bit()?);
    if frame_mbs_only == 0 {
        r.bit()?;
    }
    r.bit()?;
    let crop = if r.bit()? == 1 {
        [r.ue()?, r.ue()?, r.ue()?, r.ue()?].map(u64::from)
    } else {
        [0; 4]
    };
    let array_type = if separate { 0 } else { chroma };
    let (sub_w, sub_h) = match array_type {
        1 => (2, 2),
        2 => (2, 1),
        _ => (1, 1),
    };
    let (unit_x, unit_y) = match array_type {
        0 => (1, 2 - frame_mbs_only),
        _ => (sub_w, sub_h * (2 - frame_mbs_only)),
    };
    let width = (width_mbs * 16).checked_sub(unit_x * (crop[0] + crop[1]))?;
    let height =
        ((2 - frame_mbs_only) * height_units * 16).checked_sub(unit_y * (crop[2] + crop[3]))?;
    let frame_rate = if r.bit()? == 1 {
        vui_timing(&mut r)
    } else {
        None
    };
    Some(Sps {
        profile_compat_level: pcl,
        width: u32::try_from(width).ok()?,
        height: u32::try_from(height).ok()?,
        frame_rate,
    })
}

/// The frame rate from the VUI's timing info, reduced; `None` without timing info.
fn vui_timing(r: &mut Bits<'_>) -> Option<(u32, u32)> {
    if r.bit()? == 1 && r.bits(8)? == 255 {
        r.bits(32)?; // sar_width, sar_height
    }
    if r.bit()? == 1 {
        r.bit()?;
    }
    if r.bit()? == 1 {
        r.bits(4)?;
        if r.bit()? == 1 {
            r.bits(24)?;
        }
    }
    if r.bit()? == 1 {
        r.ue()?;
        r.ue()?;
    }
    if r.bit()? == 0 {
        return None;
    }
    let units = r.bits(32)?;
    let scale = r.bits(32)?;
    let den = u64::from(units) * 2;
    reduce(u64::from(scale), den)
}

/// `num / den` in lowest terms, both non-zero and fitting `u32`.
pub(crate) fn reduce(num: u64, den: u64) -> Option<(u32, u32)> {
    if num == 0 || den == 0 {
        return None;
    }
    let (mut a, mut b) = (num, den);
    while b != 0 {
        (a, b) = (b, a % b);
    }
    Some((u32::try_from(num / a).ok()?, u32::try_from(den / a).ok()?))
}

/// The RFC 6381 / ISO/IEC 14496-15 Annex E codec string of an HEVC stream from its
/// general profile/tier/level: the 12 bytes of `profile_tier_level` (the same bytes as
/// `hvcC` bytes 1..13).
pub(crate) fn hevc_codec(fourcc: &str, ptl: &[u8]) -> Option<String> {
    let b0 = *ptl.first()?;
    let space = ["", "A", "B", "C"][usize::from(b0 >> 6)];
    let tier = if b0 & 0x20 != 0 { 'H' } else { 'L' };
    let profile = b0 & 0x1F;
    let compat = u32::from_be_bytes(ptl.get(1..5)?.try_into().ok()?).reverse_bits();
    let level = *ptl.get(11)?;
    let mut s = format!("{fourcc}.{space}{profile}.{compat:X}.{tier}{level}");
    let constraints = ptl.get(5..11)?;
    let used = constraints
        .iter()
        .rposition(|&c| c != 0)
        .map_or(0, |i| i + 1);
    for c in constraints.get(..used).unwrap_or(&[]) {
        s.push_str(&format!(".{c:X}"));
    }
    Some(s)
}

/// The 12 general profile/tier/level bytes of an HEVC SPS NAL unit (type 33).
pub(crate) fn hevc_sps_ptl(nal: &[u8]) -> Option<Vec<u8>> {
    if (nal.first()? >> 1) & 0x3F != 33 {
        return None;
    }
    let rbsp = unescape(nal.get(2..)?);
    rbsp.get(1..13).map(<[u8]>::to_vec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn x264_sps_320x180_25fps() {
        // x264's SPS for 320x180 High@1.2 with VUI timing 50/2 (from an ffmpeg-made file).
        let sps = [
            0x67, 0x64, 0x00, 0x0c, 0xac, 0xd9, 0x41, 0x41, 0x9f, 0x9f, 0x01, 0x10, 0x00, 0x00,
            0x03, 0x00, 0x10, 0x00, 0x00, 0x03, 0x03, 0x20, 0xf1, 0x42, 0x99, 0x60,
        ];
        let s = parse_sps(&sps).expect("parses");
        assert_eq!(s.profile_compat_level, [0x64, 0x00, 0x0c]);
        assert_eq!((s.width, s.height), (320, 180));
        assert_eq!(s.frame_rate, Some((25, 1)));
    }

    #[test]
    fn hevc_codec_strings() {
        // Main profile, Main tier, level 3.1, progressive-source constraint flag.
        let ptl = [0x01, 0x60, 0, 0, 0, 0x90, 0, 0, 0, 0, 0, 93];
        assert_eq!(hevc_codec("hvc1", &ptl).unwrap(), "hvc1.1.6.L93.90");
        assert_eq!(reduce(30_000, 2002), Some((15_000, 1001)));
        assert_eq!(reduce(0, 1), None);
    }

    #[test]
    fn garbage_does_not_panic() {
        for n in 0..64u8 {
            let v: Vec<u8> = (0..n).map(|i| i.wrapping_mul(37) ^ n).collect();
            let _ = parse_sps(&[&[0x67], &v[..]].concat());
            let _ = hevc_sps_ptl(&[&[0x42, 0x01], &v[..]].concat());
            let _ = hevc_codec("hvc1", &v);
        }
    }
}
