//! The CPU and disk priority of background work (scrub, rebuild): the calling thread is
//! put at the lowest CPU priority of the normal policy (nice 19) and the lowest level of
//! the best-effort I/O class, so that where the CPU or a disk queue is contended the
//! viewers' threads go first. Neither is the idle class: the work still progresses (a
//! rebuild keeps its minimum rate where the machine has any time left), it only loses
//! every contest.
//!
//! Threads and processes started by the thread afterwards inherit both.
//!
//! `ISNODE_BACKGROUND_PRIORITY=normal` in the environment leaves the priority as it is (the
//! behaviour before, for before/after measurements: `isnode bench background
//! --background-priority normal`).

use std::io;

/// The nice value of background work: the lowest priority of the normal policy.
pub const BACKGROUND_NICE: i32 = 19;
/// `IOPRIO_CLASS_BE` (best effort) of `ioprio_set(2)`.
const IOPRIO_CLASS_BE: u32 = 2;
/// The class's lowest level.
const IOPRIO_LOWEST_LEVEL: u32 = 7;
/// `IOPRIO_WHO_PROCESS`: a thread id (or 0, the caller).
const IOPRIO_WHO_PROCESS: i32 = 1;
/// Bits of the level below the class in an I/O priority.
const IOPRIO_CLASS_SHIFT: u32 = 13;

/// The environment variable that keeps background work at normal priority (`normal`).
pub const PRIORITY_ENV: &str = "ISNODE_BACKGROUND_PRIORITY";

/// What [`lower_this_thread`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    /// The thread runs at background priority now.
    Lowered,
    /// [`PRIORITY_ENV`] said `normal`: nothing changed.
    KeptNormal,
}

/// Puts the calling thread at background priority (CPU and I/O), unless [`PRIORITY_ENV`]
/// says `normal`; an error says which call failed.
pub fn lower_this_thread() -> io::Result<Applied> {
    if std::env::var(PRIORITY_ENV).is_ok_and(|v| v == "normal") {
        return Ok(Applied::KeptNormal);
    }
    lower_unconditionally()?;
    Ok(Applied::Lowered)
}

/// [`lower_this_thread`] whatever the environment says.
fn lower_unconditionally() -> io::Result<()> {
    // SAFETY: gettid has no preconditions.
    #[allow(unsafe_code)]
    let tid = unsafe { libc::gettid() };
    // SAFETY: setpriority with PRIO_PROCESS and a thread id of ours changes that thread's
    // nice value only.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, BACKGROUND_NICE) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("setpriority(nice 19): {e}"),
        ));
    }
    let prio = (IOPRIO_CLASS_BE << IOPRIO_CLASS_SHIFT) | IOPRIO_LOWEST_LEVEL;
    // SAFETY: ioprio_set takes three integers; it changes our own thread's I/O priority.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::syscall(libc::SYS_ioprio_set, IOPRIO_WHO_PROCESS, tid, prio) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("ioprio_set(best effort 7): {e}"),
        ));
    }
    Ok(())
}

/// The calling thread's nice value.
pub fn this_thread_nice() -> io::Result<i32> {
    // SAFETY: gettid has no preconditions.
    #[allow(unsafe_code)]
    let tid = unsafe { libc::gettid() };
    // getpriority returns -1 both as a value and as an error: errno tells them apart.
    // SAFETY: clearing errno through its thread-local location, then a plain getpriority.
    #[allow(unsafe_code)]
    let nice = unsafe {
        *libc::__errno_location() = 0;
        libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t)
    };
    let err = io::Error::last_os_error();
    match (nice, err.raw_os_error()) {
        (-1, Some(code)) if code != 0 => Err(err),
        _ => Ok(nice),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lowered_thread_runs_at_nice_19_and_others_keep_theirs() {
        let before = this_thread_nice().unwrap();
        let lowered = std::thread::spawn(|| {
            lower_unconditionally().unwrap();
            this_thread_nice().unwrap()
        })
        .join()
        .unwrap();
        assert_eq!(lowered, BACKGROUND_NICE);
        assert_eq!(
            this_thread_nice().unwrap(),
            before,
            "the caller's thread was lowered"
        );
    }
}
