//! Defect 3 of issue 7, at the receiver: an FDT packet whose EXT_FTI announces a huge
//! Transfer-Length must not size an allocation. A counting allocator records the largest
//! allocation of the test's own thread.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Duration;

use isnode_recv::receiver::{FdtCheck, PacketClass, Receiver, ReceiverConfig, SessionParams};
use isnode_wire::fdt::{build_fdt_packets, FdtInstance, MAX_FDT_LEN_BYTES};

struct Counting;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

/// Refuses (null: the process aborts) anything above this instead of reserving it.
const REFUSE_ABOVE: usize = 256 << 20;

// SAFETY: delegates to the system allocator; only records sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = LARGEST.try_with(|l| l.set(l.get().max(layout.size())));
        if layout.size() > REFUSE_ABOVE {
            return std::ptr::null_mut();
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

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
    let fdt = FdtInstance {
        instance_id: 1,
        expires: 1,
        files: vec![],
    };
    // EXT_FTI of 65535 symbols of 65535 bytes (about 4 GiB), CRC resealed.
    let mut p = build_fdt_packets(&fdt, 9, 1000).unwrap().remove(0);
    p[22..28].copy_from_slice(&(65_535u64 * 65_535).to_be_bytes()[2..]);
    p[30..32].copy_from_slice(&65_535u16.to_be_bytes());
    p[32..36].copy_from_slice(&65_535u32.to_be_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&p[..40]), &p[44..]);
    p[40..44].copy_from_slice(&crc.to_be_bytes());
    LARGEST.with(|l| l.set(0));
    for _ in 0..3 {
        assert_eq!(rx.push(&p, Duration::ZERO), PacketClass::Fdt);
    }
    let largest = LARGEST.with(Cell::get);
    assert!(
        largest <= MAX_FDT_LEN_BYTES as usize,
        "allocated {largest} bytes"
    );
    assert_eq!(rx.fdt_check(), &FdtCheck::NotReceived);
}
