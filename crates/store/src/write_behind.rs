//! Block writes behind the writer: a few threads write full blocks (O_DIRECT, one
//! `pwrite` each) while the writer fills the next ones, so that several writes are in
//! flight at once instead of the writer waiting for each in turn (a direct write returns
//! only once the device has the data).
//!
//! Memory is bounded and allocated at start: `spare` block buffers besides the one each
//! segment writer holds. A writer hands a full buffer over with [`WriteBehind::submit`]
//! and takes a written one back with [`WriteBehind::take`], which waits (with a deadline)
//! when every spare buffer is in flight. A failed write is reported by the next
//! [`WriteBehind::take`] or [`WriteBehind::wait_idle`].

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::io::{AlignedBuf, BlockFile};
use crate::StoreError;

/// Longest wait for one block write to come back before the writer gives up.
const WRITE_WAIT: Duration = Duration::from_secs(120);
/// How often an idle write thread checks that the writer is still there.
const IDLE_POLL: Duration = Duration::from_secs(1);

/// One block to write.
struct BlockWrite {
    file: Arc<BlockFile>,
    offset: u64,
    buf: AlignedBuf,
    /// What is written, for an error message.
    what: String,
}

/// One block written (or not).
struct Written {
    buf: AlignedBuf,
    result: Result<(), StoreError>,
}

/// Threads writing blocks for the writers of one ingest.
pub(crate) struct WriteBehind {
    queue: Mutex<Option<SyncSender<BlockWrite>>>,
    written: Mutex<Receiver<Written>>,
    free: Mutex<Vec<AlignedBuf>>,
    in_flight: AtomicUsize,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl WriteBehind {
    /// Starts `threads` write threads with `spare` buffers of `block_len` bytes.
    pub(crate) fn start(
        threads: usize,
        spare: usize,
        block_len: usize,
    ) -> Result<Arc<WriteBehind>, StoreError> {
        let (queue_tx, queue_rx) = mpsc::sync_channel::<BlockWrite>(spare.max(1));
        let (written_tx, written_rx) = mpsc::channel::<Written>();
        let queue_rx = Arc::new(Mutex::new(queue_rx));
        let mut handles = Vec::new();
        for i in 0..threads.max(1) {
            let (rx, tx) = (Arc::clone(&queue_rx), written_tx.clone());
            let handle = std::thread::Builder::new()
                .name(format!("write-behind-{i}"))
                .spawn(move || write_blocks(&rx, &tx))
                .map_err(StoreError::io("starting a block write thread"))?;
            handles.push(handle);
        }
        Ok(Arc::new(WriteBehind {
            queue: Mutex::new(Some(queue_tx)),
            written: Mutex::new(written_rx),
            free: Mutex::new((0..spare).map(|_| AlignedBuf::new(block_len)).collect()),
            in_flight: AtomicUsize::new(0),
            threads: Mutex::new(handles),
        }))
    }

    /// Writes `buf` at `offset` of `file` behind the caller.
    pub(crate) fn submit(
        &self,
        file: Arc<BlockFile>,
        offset: u64,
        buf: AlignedBuf,
        what: String,
    ) -> Result<(), StoreError> {
        let queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        let tx = queue.as_ref().ok_or_else(stopped)?;
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let job = BlockWrite {
            file,
            offset,
            buf,
            what,
        };
        tx.send(job).map_err(|_| {
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            stopped()
        })
    }

    /// A buffer to fill: a spare one, or the next one written.
    pub(crate) fn take(&self) -> Result<AlignedBuf, StoreError> {
        if let Some(buf) = self
            .free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
        {
            return Ok(buf);
        }
        self.next_written()
    }

    /// Waits until every block submitted is written; the first failed write's error.
    pub(crate) fn wait_idle(&self) -> Result<(), StoreError> {
        while self.in_flight.load(Ordering::SeqCst) > 0 {
            let buf = self.next_written()?;
            self.free
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(buf);
        }
        Ok(())
    }

    fn next_written(&self) -> Result<AlignedBuf, StoreError> {
        let rx = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        let w = match rx.recv_timeout(WRITE_WAIT) {
            Ok(w) => w,
            Err(RecvTimeoutError::Timeout) => {
                return Err(StoreError::Corrupt(format!(
                    "a block write did not complete within {WRITE_WAIT:?}"
                )))
            }
            Err(RecvTimeoutError::Disconnected) => return Err(stopped()),
        };
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        w.result.map(|()| w.buf)
    }
}

fn stopped() -> StoreError {
    StoreError::Corrupt("the block write threads stopped".into())
}

impl Drop for WriteBehind {
    fn drop(&mut self) {
        // Closing the queue ends each thread at its next poll.
        *self.queue.lock().unwrap_or_else(PoisonError::into_inner) = None;
        let handles =
            std::mem::take(&mut *self.threads.lock().unwrap_or_else(PoisonError::into_inner));
        for h in handles {
            let _ = h.join();
        }
    }
}

/// A write thread: writes the blocks of the queue until it closes or the writer is gone.
fn write_blocks(queue: &Mutex<Receiver<BlockWrite>>, written: &Sender<Written>) {
    loop {
        let next = queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .recv_timeout(IDLE_POLL);
        let job = match next {
            Ok(job) => job,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        let result = job
            .file
            .write_block(&job.buf, job.offset)
            .map_err(StoreError::io(job.what));
        if written
            .send(Written {
                buf: job.buf,
                result,
            })
            .is_err()
        {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks written behind land at their offsets; buffers come back for reuse.
    #[test]
    fn blocks_land_where_submitted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("seg");
        let file = Arc::new(BlockFile::create(&path).expect("create"));
        let wb = WriteBehind::start(3, 2, 4096).expect("start");
        for b in 0..10u8 {
            let mut buf = wb.take().expect("buffer");
            buf.as_mut_slice().fill(b);
            let what = format!("block {b}");
            wb.submit(Arc::clone(&file), u64::from(b) * 4096, buf, what)
                .expect("submit");
        }
        wb.wait_idle().expect("written");
        let bytes = std::fs::read(&path).expect("read");
        assert_eq!(bytes.len(), 10 * 4096);
        for (i, chunk) in bytes.chunks(4096).enumerate() {
            assert!(chunk.iter().all(|&x| x == i as u8), "block {i}");
        }
    }

    /// A write that fails is reported, not lost.
    #[test]
    fn a_failed_write_is_reported() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("seg");
        std::fs::write(&path, b"").expect("create");
        // Opened for reading only: every write fails.
        let file = Arc::new(BlockFile::open_read(&path).expect("open"));
        let wb = WriteBehind::start(1, 1, 4096).expect("start");
        let buf = wb.take().expect("buffer");
        wb.submit(file, 0, buf, "block 0".into()).expect("submit");
        let e = wb.wait_idle().expect_err("the write failed");
        assert!(e.to_string().contains("block 0"), "{e}");
    }
}
