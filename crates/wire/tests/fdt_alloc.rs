//! Defect 3 of issue 7: FDT reassembly must bound what it allocates by a maximum FDT size,
//! not by the Transfer-Length a packet announces. A counting allocator records the largest
//! allocation of the test's own thread.

use isnode_wire::fdt::{
    build_fdt_packets, reassemble_fdt, FdtAssembler, FdtInstance, MAX_FDT_LEN_BYTES,
};
use isnode_wire::parse_packet;

#[path = "support/fdt_alloc.rs"]
mod support;

use support::{announcing, largest_allocation_of};

#[test]
fn fdt_announcing_4_gib_allocates_nothing_large() {
    // 65535 symbols of 65535 bytes: about 4 GiB, in the 65535 symbols an FDT may have.
    let p = announcing(65_535 * 65_535, 65_535, 65_535);
    let parsed = parse_packet(&p).unwrap();
    let largest = largest_allocation_of(|| {
        assert_eq!(reassemble_fdt(&[parsed], 1), None);
    });
    assert!(
        largest <= MAX_FDT_LEN_BYTES as usize,
        "allocated {largest} bytes"
    );
}

#[test]
fn fdt_assembler_allocates_at_most_the_announced_length() {
    let p = announcing(3000, 1000, 3);
    let parsed = parse_packet(&p).unwrap();
    let largest = largest_allocation_of(|| {
        let mut a = FdtAssembler::new(1);
        assert_eq!(a.push(&parsed), None);
    });
    assert!(largest <= 4096, "allocated {largest} bytes");
}

#[test]
fn fdt_assembler_skips_a_refused_announcement_and_completes_once() {
    let fdt = FdtInstance {
        instance_id: 1,
        expires: 7,
        files: vec![],
    };
    let packets = build_fdt_packets(&fdt, 9, 40).unwrap();
    assert!(packets.len() > 2);
    let too_big = announcing(MAX_FDT_LEN_BYTES + 1, 1000, 2000);
    let mut a = FdtAssembler::new(1);
    assert_eq!(a.push(&parse_packet(&too_big).unwrap()), None);
    let parsed: Vec<_> = packets.iter().map(|p| parse_packet(p).unwrap()).collect();
    // In reverse, the first one twice; a symbol of the wrong length is ignored.
    let mut short = packets[1].clone();
    short.truncate(short.len() - 1);
    let crc = crc32c::crc32c_append(crc32c::crc32c(&short[..40]), &short[44..]);
    short[40..44].copy_from_slice(&crc.to_be_bytes());
    assert_eq!(a.push(&parse_packet(&short).unwrap()), None);
    let mut got = None;
    for p in parsed.iter().rev().chain(&parsed[..1]) {
        assert!(!a.is_done() || got.is_some());
        if let Some(xml) = a.push(p) {
            assert!(got.is_none(), "handed out once");
            got = Some(xml);
        }
    }
    assert!(a.is_done());
    assert_eq!(got.unwrap(), fdt.to_xml().into_bytes());
}
