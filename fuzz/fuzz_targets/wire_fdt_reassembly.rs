//! Fuzz FDT reassembly ([`FdtAssembler`]) with sequences of packets: the real packets of an
//! FDT instance in any order, copies with forged EXT_FTI fields or ESIs (CRC resealed),
//! packets of another instance, and raw bytes. It must never panic, never hand out more
//! than [`MAX_FDT_LEN_BYTES`] nor anything but the announced length, hand out at most once,
//! and, fed only real packets, hand out exactly the instance's XML.
#![no_main]

use isnode_wire::fdt::{build_fdt_packets, FdtAssembler, FdtFile, FdtInstance, MAX_FDT_LEN_BYTES};
use isnode_wire::parse_packet;
use libfuzzer_sys::fuzz_target;

fn instance(id: u32, files: u32) -> FdtInstance {
    FdtInstance {
        instance_id: id,
        expires: 3_900_000_000,
        files: (1..=files)
            .map(|toi| FdtFile {
                toi,
                content_location: format!("movies/{toi}.ts"),
                content_length: u64::from(toi) * 1000,
                transfer_length: u64::from(toi) * 1000,
                ..FdtFile::default()
            })
            .collect(),
    }
}

/// Recomputes the CRC32C of an FDT packet (EXT_CRC value at bytes 40..44).
fn reseal(p: &mut [u8]) {
    let crc = crc32c::crc32c_append(crc32c::crc32c(&p[..40]), &p[44..]);
    p[40..44].copy_from_slice(&crc.to_be_bytes());
}

fuzz_target!(|data: &[u8]| {
    let Some((&shape, mut data)) = data.split_first() else {
        return;
    };
    let payload_len = 16 + usize::from(shape % 64) * 8;
    let xml = instance(1, 1 + u32::from(shape >> 6)).to_xml().into_bytes();
    let ours = build_fdt_packets(&instance(1, 1 + u32::from(shape >> 6)), 7, payload_len).unwrap();
    let theirs = build_fdt_packets(&instance(2, 1), 7, payload_len).unwrap();
    let mut assembler = FdtAssembler::new(1);
    let mut forged = false;
    let mut handed_out = 0;
    while let [op, a, b, rest @ ..] = data {
        data = rest;
        let index = usize::from(*a);
        let mut packet = match op % 4 {
            0 => ours[index % ours.len()].clone(),
            1 => theirs[index % theirs.len()].clone(),
            2 => {
                // A real packet with one forged field: L (6 bytes), E, B, or the ESI.
                forged = true;
                let mut p = ours[index % ours.len()].clone();
                let (at, len) = [(22, 6), (30, 2), (32, 4), (46, 2)][usize::from(*b % 4)];
                let (value, tail) = rest.split_at(len.min(rest.len()));
                data = tail;
                p[at..at + value.len()].copy_from_slice(value);
                reseal(&mut p);
                p
            }
            _ => {
                forged = true;
                let (raw, tail) = rest.split_at(usize::from(*a).min(rest.len()));
                data = tail;
                raw.to_vec()
            }
        };
        if op & 0x80 != 0 && packet.len() > 44 {
            // Truncated, CRC resealed: a symbol of the wrong length.
            forged = true;
            packet.truncate(packet.len() - 1);
            reseal(&mut packet);
        }
        let Ok(parsed) = parse_packet(&packet) else {
            continue;
        };
        if let Some(got) = assembler.push(&parsed) {
            handed_out += 1;
            assert!(got.len() as u64 <= MAX_FDT_LEN_BYTES);
            assert_eq!(
                Some(got.len() as u64),
                parsed.fti.map(|f| f.transfer_length)
            );
            if !forged {
                assert_eq!(got, xml);
            }
        }
    }
    assert!(handed_out <= 1);
    assert_eq!(assembler.is_done(), handed_out == 1);
});
