//! MPEG-2 transport stream constants, packet helpers and probing.

use crate::{crc32_mpeg2, BitrateUnknown, Container, MediaError, MediaInfo};

/// Size of a transport stream packet in bytes.
pub const PACKET_LEN: usize = 188;
/// The sync byte every packet starts with.
pub const SYNC_BYTE: u8 = 0x47;
/// PID of the Program Association Table.
pub const PAT_PID: u16 = 0x0000;
/// PID of null (stuffing) packets.
pub const NULL_PID: u16 = 0x1FFF;
/// Frequency of the program clock reference, in Hz.
pub const PCR_HZ: u64 = 27_000_000;
/// PCR values wrap at this modulus (33-bit base × 300, plus the 9-bit extension below 300).
pub const PCR_MODULUS: u64 = (1 << 33) * 300;

/// How many packet starts [`crate::detect`] checks at most.
const DETECT_PACKETS: usize = 8;

/// The PID (13 bits) of a packet, or `None` if it is shorter than 4 bytes or lacks the sync byte.
pub fn packet_pid(packet: &[u8]) -> Option<u16> {
    match packet {
        [SYNC_BYTE, b1, b2, _, ..] => Some((u16::from(*b1 & 0x1F) << 8) | u16::from(*b2)),
        _ => None,
    }
}

/// The PCR carried in a packet's adaptation field, in 27 MHz ticks (base × 300 + extension),
/// or `None` if the packet is malformed, flagged with a transport error, or has no PCR.
pub fn packet_pcr(packet: &[u8]) -> Option<u64> {
    if packet.len() < PACKET_LEN || packet[0] != SYNC_BYTE || packet[1] & 0x80 != 0 {
        return None;
    }
    // adaptation_field_control: 0b10 (AF only) or 0b11 (AF + payload).
    if packet[3] & 0x20 == 0 {
        return None;
    }
    let af_len = usize::from(packet[4]);
    if !(7..=183).contains(&af_len) || packet[5] & 0x10 == 0 {
        return None;
    }
    let p = &packet[6..12];
    let base = (u64::from(p[0]) << 25)
        | (u64::from(p[1]) << 17)
        | (u64::from(p[2]) << 9)
        | (u64::from(p[3]) << 1)
        | (u64::from(p[4]) >> 7);
    let ext = (u64::from(p[4] & 0x01) << 8) | u64::from(p[5]);
    Some(base * 300 + ext)
}

/// Ticks of the 27 MHz clock from PCR `first` to PCR `last`, allowing one wrap of the PCR.
pub fn pcr_delta(first: u64, last: u64) -> u64 {
    let first = first % PCR_MODULUS;
    let last = last % PCR_MODULUS;
    if last >= first {
        last - first
    } else {
        PCR_MODULUS - first + last
    }
}

pub(crate) fn looks_like_ts(head: &[u8]) -> bool {
    if head.len() == PACKET_LEN {
        return head[0] == SYNC_BYTE;
    }
    let starts: Vec<usize> = (0..DETECT_PACKETS)
        .map(|k| k * PACKET_LEN)
        .take_while(|&o| o < head.len())
        .collect();
    starts.len() >= 2 && starts.iter().all(|&o| head[o] == SYNC_BYTE)
}

pub(crate) fn not_whole_packets(total_len: u64) -> MediaError {
    MediaError::Truncated {
        container: Container::MpegTs,
        reason: format!(
            "{total_len} bytes is not a whole number of {PACKET_LEN}-byte packets (last packet has {} bytes)",
            total_len % PACKET_LEN as u64
        ),
    }
}

/// Complete, sync-aligned packets of `data`, which starts at absolute offset `data_offset`,
/// with their absolute offsets. Packets are aligned to multiples of 188 from the object start;
/// packets without the sync byte are skipped.
pub(crate) fn aligned_packets(data: &[u8], data_offset: u64) -> impl Iterator<Item = (u64, &[u8])> {
    let skip = ((PACKET_LEN as u64 - data_offset % PACKET_LEN as u64) % PACKET_LEN as u64) as usize;
    data.get(skip..)
        .unwrap_or(&[])
        .chunks_exact(PACKET_LEN)
        .enumerate()
        .map(move |(i, p)| (data_offset + skip as u64 + (i * PACKET_LEN) as u64, p))
        .filter(|(_, p)| p[0] == SYNC_BYTE)
}

/// The PSI section starting in a packet with payload_unit_start_indicator set, if it fits in the
/// packet, has the expected table_id and a valid CRC.
pub(crate) fn single_packet_section(packet: &[u8], table_id: u8) -> Option<&[u8]> {
    if packet[1] & 0x40 == 0 {
        return None;
    }
    let payload = match (packet[3] >> 4) & 0x3 {
        0b01 => &packet[4..],
        0b11 => packet.get(5 + usize::from(packet[4])..)?,
        _ => return None,
    };
    let pointer = usize::from(*payload.first()?);
    let section = payload.get(1 + pointer..)?;
    if *section.first()? != table_id {
        return None;
    }
    let section_length =
        (usize::from(*section.get(1)? & 0x0F) << 8) | usize::from(*section.get(2)?);
    let section = section.get(..3 + section_length)?;
    if section_length < 9 || crc32_mpeg2(section) != 0 {
        return None;
    }
    Some(section)
}

/// The PCR PID announced by the first program of the PAT/PMT found in `head`.
fn announced_pcr_pid(head: &[u8]) -> Option<u16> {
    let mut pmt_pid = None;
    for (_, p) in aligned_packets(head, 0) {
        let pid = packet_pid(p)?;
        match pmt_pid {
            None if pid == PAT_PID => {
                let Some(sec) = single_packet_section(p, 0x00) else {
                    continue;
                };
                // Program loop: after the 8-byte header, before the 4-byte CRC.
                let programs = sec.get(8..sec.len() - 4)?;
                pmt_pid = programs
                    .chunks_exact(4)
                    .find(|e| u16::from_be_bytes([e[0], e[1]]) != 0)
                    .map(|e| u16::from_be_bytes([e[2] & 0x1F, e[3]]));
            }
            Some(pmt) if pid == pmt => {
                let Some(sec) = single_packet_section(p, 0x02) else {
                    continue;
                };
                let pcr_pid = u16::from_be_bytes([*sec.get(8)? & 0x1F, *sec.get(9)?]);
                return (pcr_pid != NULL_PID).then_some(pcr_pid);
            }
            _ => {}
        }
    }
    None
}

/// Probes an MPEG-TS of `total_len` bytes from two windows of it: `head` = bytes
/// `[0, head.len())` and `tail` = bytes `[total_len - tail.len(), total_len)` (the two may overlap;
/// `tail` may be empty if `head` is the whole object).
///
/// Checks that `total_len` is a whole number of packets and that the last packet starts with the
/// sync byte ([`MediaError::Truncated`] otherwise). The bitrate is measured on the PCR PID
/// announced in the PMT (or, without a PAT/PMT in `head`, the first PID carrying a PCR): from the
/// first PCR in `head` to the last PCR in `tail` (or in `head` when `tail` has none),
/// `bitrate = bytes between the two PCR packets × 8 × 27 MHz / PCR delta`, where the delta allows
/// one wrap of the 33-bit PCR base. Duration = `total_len × 8 / bitrate`.
///
/// Assumes one continuous timeline (no PCR discontinuity between the windows) and a file
/// shorter than the PCR period (about 26.5 hours).
pub fn probe_ts(head: &[u8], tail: &[u8], total_len: u64) -> Result<MediaInfo, MediaError> {
    check_complete(head, tail, total_len)?;
    let announced = announced_pcr_pid(head);
    let on_pcr_pid = |p: &[u8]| match announced {
        Some(pid) => packet_pid(p) == Some(pid),
        None => true,
    };
    let Some((first_off, first_pcr, pcr_pid)) = aligned_packets(head, 0)
        .filter(|(_, p)| on_pcr_pid(p))
        .find_map(|(o, p)| Some((o, packet_pcr(p)?, packet_pid(p)?)))
    else {
        return Ok(MediaInfo::without_bitrate(
            Container::MpegTs,
            BitrateUnknown::NoPcr,
        ));
    };
    let last_pcr_in = |data: &[u8], offset: u64| {
        aligned_packets(data, offset)
            .filter(|(_, p)| packet_pid(p) == Some(pcr_pid))
            .filter_map(|(o, p)| Some((o, packet_pcr(p)?)))
            .last()
    };
    let tail_offset = total_len - tail.len() as u64;
    let last = last_pcr_in(tail, tail_offset).or_else(|| last_pcr_in(head, 0));
    let Some((last_off, last_pcr)) = last else {
        return Ok(MediaInfo::without_bitrate(
            Container::MpegTs,
            BitrateUnknown::SinglePcr,
        ));
    };
    let ticks = pcr_delta(first_pcr, last_pcr);
    if last_off <= first_off || ticks == 0 {
        return Ok(MediaInfo::without_bitrate(
            Container::MpegTs,
            BitrateUnknown::SinglePcr,
        ));
    }
    let bits = u128::from(last_off - first_off) * 8;
    let num = bits * u128::from(PCR_HZ);
    let bitrate = (num + u128::from(ticks) / 2) / u128::from(ticks);
    let bitrate = u64::try_from(bitrate).unwrap_or(u64::MAX).max(1);
    Ok(MediaInfo {
        container: Container::MpegTs,
        bitrate_bps: Some(bitrate),
        duration_s: Some(total_len as f64 * 8.0 / bitrate as f64),
        content_type: Container::MpegTs.content_type(),
        bitrate_unknown: None,
    })
}

/// The checks of [`probe_ts`] on the windows and the object's end: `head` and `tail` fit in
/// `total_len`, which is a non-zero whole number of packets, and the last packet (in `tail`,
/// or in `head` when it is the whole object) starts with the sync byte.
fn check_complete(head: &[u8], tail: &[u8], total_len: u64) -> Result<(), MediaError> {
    if head.len() as u64 > total_len || tail.len() as u64 > total_len {
        return Err(MediaError::InvalidArgument(format!(
            "head ({} bytes) or tail ({} bytes) is longer than the object ({total_len} bytes)",
            head.len(),
            tail.len()
        )));
    }
    if total_len == 0 {
        return Err(MediaError::Truncated {
            container: Container::MpegTs,
            reason: "the object is empty".into(),
        });
    }
    if total_len % PACKET_LEN as u64 != 0 {
        return Err(not_whole_packets(total_len));
    }
    let end = if tail.len() >= PACKET_LEN {
        tail
    } else if head.len() as u64 == total_len {
        head
    } else {
        return Err(MediaError::InvalidArgument(format!(
            "the tail ({} bytes) must hold at least the last {PACKET_LEN}-byte packet",
            tail.len()
        )));
    };
    let last_packet = &end[end.len() - PACKET_LEN..];
    if last_packet[0] != SYNC_BYTE {
        return Err(MediaError::Truncated {
            container: Container::MpegTs,
            reason: format!(
                "the last packet (at byte {}) does not start with the sync byte 0x47 (found 0x{:02X})",
                total_len - PACKET_LEN as u64,
                last_packet[0]
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pcr_delta_wraps() {
        assert_eq!(pcr_delta(10, 30), 20);
        assert_eq!(pcr_delta(PCR_MODULUS - 5, 7), 12);
    }

    #[test]
    fn pcr_field_decodes() {
        let mut p = [0xFFu8; PACKET_LEN];
        p[..4].copy_from_slice(&[0x47, 0x01, 0x00, 0x30]);
        p[4] = 7;
        p[5] = 0x10;
        let base: u64 = (1 << 33) - 1;
        let ext: u64 = 299;
        p[6] = (base >> 25) as u8;
        p[7] = (base >> 17) as u8;
        p[8] = (base >> 9) as u8;
        p[9] = (base >> 1) as u8;
        p[10] = ((base as u8 & 1) << 7) | 0x7E | (ext >> 8) as u8;
        p[11] = ext as u8;
        assert_eq!(packet_pcr(&p), Some(base * 300 + ext));
        assert_eq!(packet_pid(&p), Some(0x100));
    }

    #[test]
    fn detect_rules() {
        assert!(looks_like_ts(&[0x47; PACKET_LEN]));
        assert!(!looks_like_ts(&[0x47; 100]));
        let mut two = vec![0u8; 2 * PACKET_LEN];
        two[0] = 0x47;
        assert!(!looks_like_ts(&two));
        two[PACKET_LEN] = 0x47;
        assert!(looks_like_ts(&two));
    }
}
