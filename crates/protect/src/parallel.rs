//! HLS AES-128 segments encrypted by several threads at once, read back in order: each
//! segment is its own CBC chain (its own IV), so segments are independent. The ingest reads
//! the ciphertext straight from here ([`Segments::read_into`]): nothing is written to a
//! spool and read back. Workers run at most a window of bytes ahead of the reader, so
//! memory stays bounded whatever the title's length.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use isnode_keys::content::ContentKey;
use isnode_keys::IV_LEN;

use crate::{io, ProtectError};

/// How far (clear bytes) workers may run ahead of the reader, beyond the segment it waits
/// for.
pub const WINDOW_BYTES: u64 = 64 << 20;

/// Most worker threads used, whatever the machine has.
pub const MAX_THREADS: usize = 4;

/// How long the reader waits for one segment before it gives up: encrypting the largest
/// segment allowed ([`crate::ts::MAX_SEGMENT_BYTES`]) takes about half a second with AES-NI.
const SEGMENT_DEADLINE: Duration = Duration::from_secs(120);

/// One segment to encrypt: where its clear bytes are, and its IV.
#[derive(Clone, Copy, Debug)]
pub struct Cut {
    /// Offset in the clear input, bytes.
    pub clear_offset: u64,
    /// Length in the clear input, bytes.
    pub clear_len: u64,
    /// Its IV.
    pub iv: [u8; IV_LEN],
}

/// A clear input and its segments, to encrypt under one key.
#[derive(Debug)]
pub struct Segments {
    /// The clear input (read with positioned reads only).
    pub file: File,
    /// Its segments, in order.
    pub cuts: Vec<Cut>,
    /// The content key.
    pub key: ContentKey,
}

/// What the workers and the reader share.
#[derive(Default)]
struct State {
    /// The next segment a worker takes.
    next_take: usize,
    /// The segment the reader waits for.
    next_read: usize,
    /// Encrypted segments not yet read, by index.
    done: BTreeMap<usize, Vec<u8>>,
    /// Buffers the reader is done with, for the workers to reuse.
    free: Vec<Vec<u8>>,
    /// Set by the reader when it stops (done or failed): the workers stop too.
    stop: bool,
    /// The first worker's failure.
    failed: Option<ProtectError>,
}

struct Shared<'a> {
    segs: &'a Segments,
    state: Mutex<State>,
    changed: Condvar,
}

impl Shared<'_> {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A worker panicking while it holds the lock leaves the state as it was: go on.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether segment `i` is within the window ahead of the reader.
    fn in_window(&self, st: &State, i: usize) -> bool {
        if i <= st.next_read + 1 {
            return true;
        }
        let ahead: u64 = self
            .segs
            .cuts
            .get(st.next_read..i)
            .unwrap_or_default()
            .iter()
            .map(|c| c.clear_len)
            .sum();
        ahead < WINDOW_BYTES
    }

    /// One worker: takes the next segment within the window, encrypts it, hands it over.
    fn work(&self) {
        loop {
            let (i, mut buf) = {
                let mut st = self.lock();
                loop {
                    if st.stop || st.failed.is_some() || st.next_take >= self.segs.cuts.len() {
                        return;
                    }
                    let i = st.next_take;
                    if self.in_window(&st, i) {
                        st.next_take += 1;
                        let buf = st.free.pop().unwrap_or_default();
                        break (i, buf);
                    }
                    // Woken when the reader moves on; the timeout only re-checks.
                    st = self
                        .changed
                        .wait_timeout(st, Duration::from_millis(200))
                        .map_or_else(|p| p.into_inner().0, |(g, _)| g);
                }
            };
            let result = self.encrypt_one(i, &mut buf);
            let mut st = self.lock();
            match result {
                Ok(()) => {
                    st.done.insert(i, buf);
                }
                Err(e) => {
                    st.failed.get_or_insert(e);
                }
            }
            self.changed.notify_all();
        }
    }

    /// Segment `i` read into `buf` and encrypted there.
    fn encrypt_one(&self, i: usize, buf: &mut Vec<u8>) -> Result<(), ProtectError> {
        let cut =
            self.segs.cuts.get(i).copied().ok_or_else(|| {
                ProtectError::Unsupported(format!("segment {i} is not in the plan"))
            })?;
        let len = usize::try_from(cut.clear_len)
            .map_err(|_| ProtectError::Unsupported("a segment over the address space".into()))?;
        buf.clear();
        buf.reserve(len + 16);
        buf.resize(len, 0);
        self.segs
            .file
            .read_exact_at(buf, cut.clear_offset)
            .map_err(io("reading a segment of the input"))?;
        isnode_keys::segment::encrypt_in_place(&self.segs.key, &cut.iv, buf);
        Ok(())
    }
}

/// The reader's side: the ciphertext in order.
struct Ordered<'a, 'b> {
    shared: &'b Shared<'a>,
    current: Vec<u8>,
    at: usize,
}

impl Ordered<'_, '_> {
    /// Waits for the next segment; `None` after the last one.
    fn next_segment(&mut self) -> Result<Option<Vec<u8>>, ProtectError> {
        let deadline = Instant::now() + SEGMENT_DEADLINE;
        let mut st = self.shared.lock();
        let previous = std::mem::take(&mut self.current);
        st.free.push(previous);
        loop {
            if let Some(e) = st.failed.take() {
                st.stop = true;
                return Err(e);
            }
            let i = st.next_read;
            if i >= self.shared.segs.cuts.len() {
                return Ok(None);
            }
            if let Some(buf) = st.done.remove(&i) {
                st.next_read += 1;
                self.shared.changed.notify_all();
                return Ok(Some(buf));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                st.stop = true;
                return Err(ProtectError::Unsupported(format!(
                    "segment {i} was not encrypted within {} s",
                    SEGMENT_DEADLINE.as_secs()
                )));
            }
            st = self
                .shared
                .changed
                .wait_timeout(st, left)
                .map_or_else(|p| p.into_inner().0, |(g, _)| g);
        }
    }
}

impl Read for Ordered<'_, '_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.at >= self.current.len() {
            match self.next_segment().map_err(std::io::Error::other)? {
                Some(buf) => {
                    self.current = buf;
                    self.at = 0;
                }
                None => return Ok(0),
            }
        }
        let src = self.current.get(self.at..).unwrap_or_default();
        let n = src.len().min(out.len());
        out.get_mut(..n)
            .unwrap_or_default()
            .copy_from_slice(src.get(..n).unwrap_or_default());
        self.at += n;
        Ok(n)
    }
}

impl Drop for Ordered<'_, '_> {
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        st.stop = true;
        self.shared.changed.notify_all();
    }
}

/// The number of worker threads to use here.
pub fn threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, MAX_THREADS)
}

impl Segments {
    /// Runs `consume` on a reader of the ciphertext of every segment in order (each
    /// AES-128-CBC with PKCS#7 under its IV), encrypted by `threads` workers meanwhile.
    pub fn read_into<T>(&self, threads: usize, consume: impl FnOnce(&mut dyn Read) -> T) -> T {
        let shared = Shared {
            segs: self,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        };
        std::thread::scope(|s| {
            for _ in 0..threads.max(1) {
                s.spawn(|| shared.work());
            }
            let mut reader = Ordered {
                shared: &shared,
                current: Vec::new(),
                at: 0,
            };
            consume(&mut reader)
            // The reader is dropped here: workers still running stop, and the scope
            // joins them.
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn every_thread_count_reads_the_serial_ciphertext_in_order() {
        let clear: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&clear).unwrap();
        let key = ContentKey::generate();
        let mut cuts = Vec::new();
        let mut at = 0u64;
        for (i, len) in [1u64, 188 * 100, 700_001, 0, 15, 2_000_000]
            .iter()
            .enumerate()
        {
            let iv = [i as u8; IV_LEN];
            cuts.push(Cut {
                clear_offset: at,
                clear_len: *len,
                iv,
            });
            at += len;
        }
        let tail = clear.len() as u64 - at;
        cuts.push(Cut {
            clear_offset: at,
            clear_len: tail,
            iv: [9; IV_LEN],
        });
        let mut expected = Vec::new();
        for c in &cuts {
            let seg = &clear[c.clear_offset as usize..(c.clear_offset + c.clear_len) as usize];
            expected.extend(isnode_keys::segment::encrypt(&key, &c.iv, seg));
        }
        let segs = Segments { file, cuts, key };
        for threads in [1, 2, 3, 8] {
            let got = segs.read_into(threads, |r| {
                let mut v = Vec::new();
                r.read_to_end(&mut v).map(|_| v)
            });
            assert!(got.unwrap() == expected, "{threads} threads");
        }
        // A reader that stops early: the workers stop, nothing hangs.
        let first = segs.read_into(2, |r| {
            let mut b = [0u8; 10];
            r.read_exact(&mut b).map(|_| b)
        });
        assert_eq!(&first.unwrap()[..], &expected[..10]);
    }

    #[test]
    fn an_input_shorter_than_its_cuts_fails_the_read() {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&[1u8; 1000]).unwrap();
        let cuts = vec![
            Cut {
                clear_offset: 0,
                clear_len: 500,
                iv: [0; IV_LEN],
            },
            Cut {
                clear_offset: 500,
                clear_len: 5000,
                iv: [1; IV_LEN],
            },
        ];
        let segs = Segments {
            file,
            cuts,
            key: ContentKey::generate(),
        };
        let e = segs
            .read_into(2, |r| r.read_to_end(&mut Vec::new()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("reading a segment"), "{e}");
    }
}
