//! Defect 3 of issue 7, at the receiver: an FDT packet whose EXT_FTI announces a huge
//! Transfer-Length must not size an allocation. A counting allocator records the largest
//! allocation of the test's own thread.

use std::time::Duration;

use isnode_recv::receiver::{FdtCheck, PacketClass, Receiver, ReceiverConfig, SessionParams};
use isnode_wire::fdt::MAX_FDT_LEN_BYTES;

#[path = "../../wire/tests/support/fdt_alloc.rs"]
mod support;

use support::{announcing, largest_allocation_of};

#[test]
fn fdt_packet_announcing_4_gib_allocates_nothing_large() {
    let params = SessionParams {
        tsi: 9,
        toi: 1,
        transfer_length: 10_000,
        symbol_len: 100,
        max_source_block_len: 10,
        repair_symbols: 2,
        start_codeword: 0,
    };
    let mut rx = Receiver::new(params, ReceiverConfig::default()).unwrap();
    // EXT_FTI of 65535 symbols of 65535 bytes (about 4 GiB), CRC resealed.
    let p = announcing(65_535 * 65_535, 65_535, 65_535);
    let largest = largest_allocation_of(|| {
        for _ in 0..3 {
            assert_eq!(rx.push(&p, Duration::ZERO), PacketClass::Fdt);
        }
    });
    assert!(
        largest <= MAX_FDT_LEN_BYTES as usize,
        "allocated {largest} bytes"
    );
    assert_eq!(rx.fdt_check(), &FdtCheck::NotReceived);
}
