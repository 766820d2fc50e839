//! CPU time of the calling thread (the benchmark's "per core" clock).

/// CPU time consumed so far by the calling thread, if the platform reports it.
#[cfg(unix)]
pub fn thread_cpu_time() -> Option<std::time::Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_THREAD_CPUTIME_ID needs no other
    // argument.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return None;
    }
    Some(std::time::Duration::new(
        u64::try_from(ts.tv_sec).ok()?,
        u32::try_from(ts.tv_nsec).ok()?,
    ))
}

/// CPU time consumed so far by the calling thread, if the platform reports it.
#[cfg(not(unix))]
pub fn thread_cpu_time() -> Option<std::time::Duration> {
    None
}
