//! The data plane as the rest of the server sees it: [`Plane::start`] spawns its threads;
//! [`Plane::submit`] hands a new stream to one of them (round robin, bounded queues);
//! [`Plane::wake`] makes them apply queued control requests at once.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::deps::PlaneDeps;
use crate::msg::{NewSession, PlaneMsg};
use crate::worker;

/// Most messages waiting for one data-plane thread.
const QUEUE_LEN: usize = 1024;

/// The data plane is busy: a thread's queue is full (try again later).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlaneBusy;

/// Wakes each thread of `workers` whose `queued` flag is clear (see [`Plane::wake`]).
fn wake(workers: &[SyncSender<PlaneMsg>], queued: &[AtomicBool]) {
    for (w, q) in workers.iter().zip(queued) {
        if !q.swap(true, Ordering::AcqRel) && w.try_send(PlaneMsg::Wake).is_err() {
            q.store(false, Ordering::Release);
        }
    }
}

/// The data plane's threads' queues.
pub struct Plane {
    senders: Vec<SyncSender<PlaneMsg>>,
    /// Whether a wake-up is queued for each thread.
    queued: Arc<[AtomicBool]>,
    next: AtomicUsize,
}

impl Plane {
    /// Starts `threads` data-plane threads over `deps`; the handle and their join handles.
    pub fn start(
        deps: Arc<PlaneDeps>,
        threads: usize,
    ) -> std::io::Result<(Arc<Plane>, Vec<JoinHandle<()>>)> {
        let (senders, queues): (Vec<_>, Vec<Receiver<PlaneMsg>>) = (0..threads)
            .map(|_| std::sync::mpsc::sync_channel(QUEUE_LEN))
            .unzip();
        let queued: Arc<[AtomicBool]> = (0..threads).map(|_| AtomicBool::new(false)).collect();
        let plane = Arc::new(Plane {
            senders,
            queued: queued.clone(),
            next: AtomicUsize::new(0),
        });
        let waker = Arc::downgrade(&plane);
        deps.stop.on_stop(Box::new(move || {
            if let Some(p) = waker.upgrade() {
                p.wake();
            }
        }));
        let mut handles = Vec::with_capacity(threads);
        for (index, rx) in queues.into_iter().enumerate() {
            let (deps, queued) = (deps.clone(), queued.clone());
            let h = std::thread::Builder::new()
                .name(format!("isnode-plane-{index}"))
                .spawn(move || worker::worker(deps, queued, index, rx))?;
            handles.push(h);
        }
        Ok((plane, handles))
    }

    /// Hands `session` to the next thread (round robin); refused if its queue is full.
    pub fn submit(&self, session: NewSession) -> Result<(), PlaneBusy> {
        let w = self.next.fetch_add(1, Ordering::Relaxed) % self.senders.len().max(1);
        let q = self.senders.get(w).ok_or(PlaneBusy)?;
        q.try_send(PlaneMsg::New(Box::new(session)))
            .map_err(|_| PlaneBusy)
    }

    /// Wakes each data-plane thread whose queue holds no wake-up yet (one flag per
    /// thread, cleared by the thread when it takes the wake-up): however many control
    /// requests come, a thread's queue holds at most one wake-up.
    pub fn wake(&self) {
        wake(&self.senders, &self.queued);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// However many control requests wake the threads, a thread's queue holds at most one
    /// wake-up, and a new session still finds room (issue 21: wake-ups filled the queue and
    /// session creation answered 503 "data plane busy").
    #[test]
    fn wake_ups_never_fill_the_queue_of_new_sessions() {
        let (tx, rx) = std::sync::mpsc::sync_channel(4);
        let queued = [AtomicBool::new(false)];
        let workers = [tx];
        for _ in 0..1000 {
            wake(&workers, &queued);
        }
        assert_eq!(rx.try_iter().count(), 1, "one wake-up queued");
        // Taken: the next request queues one again.
        queued[0].store(false, Ordering::Release);
        wake(&workers, &queued);
        wake(&workers, &queued);
        assert_eq!(rx.try_iter().count(), 1);
        // A full queue: the flag is not left set (the next wake-up is tried again).
        queued[0].store(false, Ordering::Release);
        for _ in 0..4 {
            workers[0].try_send(PlaneMsg::Wake).unwrap();
        }
        wake(&workers, &queued);
        assert!(!queued[0].load(Ordering::Acquire));
    }
}
