//! The queue between the receive loop and the playout thread, bounded in bytes.
//!
//! The receive loop must never block (a blocked socket loses datagrams), so the bound is
//! kept by back-pressure on the receive core rather than on the socket: the loop asks
//! [`Producer::has_room`] before it takes a piece out of the core, and leaves it there
//! when the queue is full. The core's window is bounded too, so a server that sends faster
//! than the playout drains fills the window, after which the core gives up codewords the
//! stream has moved past (they become erasures, like lost ones, for the unicast repair or
//! the zero fill). Memory stays bounded by the queue's limit (plus one piece) and the
//! window, whatever the server does.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;

use crate::receiver::Output;

/// A bounded queue of `limit_bytes` of output pieces (a lost piece counts its length: it
/// stands for playing time, which is what the playout drains).
pub fn bounded(limit_bytes: u64) -> (Producer, Consumer) {
    let (tx, rx) = mpsc::channel();
    let queued = Arc::new(AtomicU64::new(0));
    let closed = Arc::new(AtomicBool::new(false));
    (
        Producer {
            tx,
            queued: queued.clone(),
            closed: closed.clone(),
            limit_bytes,
            peak_bytes: 0,
            full_events: 0,
            was_full: false,
        },
        Consumer { rx, queued, closed },
    )
}

/// The receive loop's end of the queue.
#[derive(Debug)]
pub struct Producer {
    tx: mpsc::Sender<Output>,
    queued: Arc<AtomicU64>,
    /// Set when the consumer is dropped (the playout thread ended).
    closed: Arc<AtomicBool>,
    limit_bytes: u64,
    peak_bytes: u64,
    full_events: u64,
    was_full: bool,
}

/// The playout thread was gone when a piece was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the playout thread has stopped")]
pub struct PlayoutGone;

/// What the queue saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct QueueStats {
    /// The queue's bound in bytes.
    pub limit_bytes: u64,
    /// The most bytes it held.
    pub peak_bytes: u64,
    /// How many times it filled up and held the output back (the server sent faster than
    /// the playout drains).
    pub full_events: u64,
}

impl Producer {
    /// Whether another piece may be sent: fewer than `limit_bytes` are queued. Counts a
    /// full event when the queue turns full.
    pub fn has_room(&mut self) -> bool {
        let room = self.queued.load(Ordering::Acquire) < self.limit_bytes;
        if !room && !self.was_full {
            self.full_events += 1;
        }
        self.was_full = !room;
        room
    }

    /// Whether the playout's end is gone (nothing will ever make room again).
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Queues `piece`.
    pub fn send(&mut self, piece: Output) -> Result<(), PlayoutGone> {
        let len = piece.len();
        let now = self.queued.fetch_add(len, Ordering::AcqRel) + len;
        self.peak_bytes = self.peak_bytes.max(now);
        self.tx.send(piece).map_err(|_| PlayoutGone)
    }

    /// What the queue saw so far.
    pub fn stats(&self) -> QueueStats {
        QueueStats {
            limit_bytes: self.limit_bytes,
            peak_bytes: self.peak_bytes,
            full_events: self.full_events,
        }
    }
}

/// The playout thread's end of the queue.
#[derive(Debug)]
pub struct Consumer {
    rx: mpsc::Receiver<Output>,
    queued: Arc<AtomicU64>,
    closed: Arc<AtomicBool>,
}

impl Drop for Consumer {
    fn drop(&mut self) {
        self.closed.store(true, Ordering::Release);
    }
}

impl Consumer {
    /// The next piece, waiting at most until `deadline` (None: without limit); None once
    /// the producer is gone and the queue is empty, or at the deadline.
    pub fn recv(&self, deadline: Option<Instant>) -> Option<Output> {
        match deadline {
            None => self.rx.recv().ok(),
            Some(d) => self
                .rx
                .recv_timeout(d.saturating_duration_since(Instant::now()))
                .ok(),
        }
    }

    /// `bytes` of a piece were played out: room for more.
    pub fn played(&self, bytes: u64) {
        self.queued.fetch_sub(bytes, Ordering::AcqRel);
    }

    /// Whether no piece waits (every byte sent was played out).
    pub fn is_drained(&self) -> bool {
        self.queued.load(Ordering::Acquire) == 0
    }
}

/// An unbounded queue fed by a plain channel (tests, and callers that bound it themselves).
impl From<mpsc::Receiver<Output>> for Consumer {
    fn from(rx: mpsc::Receiver<Output>) -> Consumer {
        Consumer {
            rx,
            queued: Arc::new(AtomicU64::new(0)),
            closed: Arc::new(AtomicBool::new(false)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(len: usize) -> Output {
        Output::Data {
            sbn: 0,
            offset: 0,
            bytes: vec![1; len],
        }
    }

    #[test]
    fn room_follows_what_is_played() {
        let (mut p, c) = bounded(1000);
        assert!(p.has_room());
        p.send(data(600)).unwrap();
        assert!(p.has_room());
        p.send(data(600)).unwrap();
        assert!(!p.has_room(), "1200 queued of 1000");
        assert!(!p.has_room());
        let piece = c.recv(None).unwrap();
        c.played(piece.len());
        assert!(p.has_room());
        p.send(data(600)).unwrap();
        assert!(!p.has_room());
        let s = p.stats();
        assert_eq!(
            (s.limit_bytes, s.peak_bytes, s.full_events),
            (1000, 1200, 2)
        );
        assert!(!p.is_closed());
        drop(c);
        assert!(
            p.is_closed(),
            "a full queue whose playout is gone never drains"
        );
        assert_eq!(p.send(data(1)), Err(PlayoutGone));
    }

    #[test]
    fn recv_stops_at_its_deadline() {
        let (_p, c) = bounded(10);
        let t = Instant::now() + std::time::Duration::from_millis(30);
        assert!(c.recv(Some(t)).is_none());
        assert!(Instant::now() >= t);
    }
}
