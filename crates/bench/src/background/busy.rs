//! A competing CPU load: one thread of the benchmark busy for as long as a phase runs (a
//! node shares its machine with other work), stopped when dropped or at its deadline.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Whether a phase runs beside a competing CPU load.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum CpuLoad {
    /// Nothing else busy.
    Idle,
    /// One thread busy all along (a core's worth of work, wherever the kernel runs it).
    OneCore,
}

/// One busy thread, stopped when dropped.
pub(crate) struct BusyCore {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl BusyCore {
    /// Starts the thread; it stops when dropped, or after `at_most` whatever happens.
    pub(crate) fn start(at_most: Duration) -> anyhow::Result<BusyCore> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("bench-busy".into())
            .spawn(move || spin(&flag, Instant::now() + at_most))?;
        Ok(BusyCore {
            stop,
            handle: Some(handle),
        })
    }
}

/// Works (a xorshift sequence, kept from being optimised away) until `stop` or `deadline`.
fn spin(stop: &AtomicBool, deadline: Instant) {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        std::hint::black_box(x);
    }
}

impl Drop for BusyCore {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_busy_thread_burns_cpu_and_stops_when_dropped() {
        let before = crate::harness::process::threads_cpu_s(std::process::id(), "bench-busy");
        assert_eq!(before, 0.0, "no busy thread yet");
        let busy = BusyCore::start(Duration::from_secs(60)).unwrap();
        // Wait until the kernel has charged it a tick or more (bounded).
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut used = 0.0;
        while used == 0.0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
            used = crate::harness::process::threads_cpu_s(std::process::id(), "bench-busy");
        }
        assert!(used > 0.0, "the busy thread used no CPU");
        drop(busy);
        let after = crate::harness::process::threads_cpu_s(std::process::id(), "bench-busy");
        assert_eq!(after, 0.0, "the thread still runs after the drop");
    }
}
