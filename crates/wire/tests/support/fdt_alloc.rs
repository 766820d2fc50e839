//! Shared by the FDT allocation tests of `isnode-wire` and `isnode-recv` (each includes it
//! with `#[path]`): a counting global allocator that records the largest allocation of the
//! test's own thread, and a forged FDT packet announcing a chosen Transfer-Length.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use isnode_wire::fdt::{build_fdt_packets, FdtInstance};

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

pub(crate) fn largest_allocation_of(f: impl FnOnce()) -> usize {
    LARGEST.with(|l| l.set(0));
    f();
    LARGEST.with(Cell::get)
}

/// One CRC-valid FDT packet whose EXT_FTI announces `len` bytes in symbols of `e` bytes,
/// `b` symbols per block.
pub(crate) fn announcing(len: u64, e: u16, b: u32) -> Vec<u8> {
    let fdt = FdtInstance {
        instance_id: 1,
        expires: 1,
        files: vec![],
    };
    let mut p = build_fdt_packets(&fdt, 9, 1000).unwrap().remove(0);
    p[22..28].copy_from_slice(&len.to_be_bytes()[2..]);
    p[30..32].copy_from_slice(&e.to_be_bytes());
    p[32..36].copy_from_slice(&b.to_be_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&p[..40]), &p[44..]);
    p[40..44].copy_from_slice(&crc.to_be_bytes());
    p
}
