//! What io_uring this kernel offers, and the pool's buffers registered with a ring (the
//! block reads' `READ_FIXED` here, the `uring-zc` engine's `SEND_ZC` in the plane).

use std::io;

use io_uring::{opcode, IoUring};

use crate::cache::Cache;

/// Most buffers io_uring lets a ring register (indices are u16).
const MAX_REGISTERED: usize = 1 << 14;
/// True if this kernel lets us create a ring that supports every opcode in `codes`.
pub fn supports(codes: &[u8]) -> bool {
    let Ok(ring) = IoUring::new(8) else {
        return false;
    };
    let mut probe = io_uring::Probe::new();
    if ring.submitter().register_probe(&mut probe).is_err() {
        return false;
    }
    codes.iter().all(|&c| probe.is_supported(c))
}

/// True if this kernel lets us create a ring that supports `SEND_ZC`.
pub fn available() -> bool {
    supports(&[opcode::SendZc::CODE])
}

/// Registers the pool's buffers (as many as io_uring allows) with `ring` as fixed buffers;
/// returns how many, which are the slots `0..n`.
///
/// # Safety
/// The pool behind `cache` must stay alive as long as `ring`.
pub unsafe fn register_pool(ring: &IoUring, cache: &Cache) -> io::Result<usize> {
    let mut iovecs = cache.iovecs();
    iovecs.truncate(MAX_REGISTERED);
    // SAFETY: the iovecs point into the pool, which the caller keeps alive for the ring's life.
    unsafe { ring.submitter().register_buffers(&iovecs) }?;
    Ok(iovecs.len())
}

/// True if this kernel lets us create a ring that supports `SEND_ZC`.
pub fn send_zc_available() -> bool {
    supports(&[opcode::SendZc::CODE])
}
