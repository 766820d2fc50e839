//! The playout buffer: writes the object's bytes in order, paced at its bitrate, and
//! measures what a player would see (start-up time, underruns, bitrate of every second).
//!
//! The writer runs on its own thread and is fed [`Output`] pieces in order (with instant
//! release, pieces of a symbol or a few as they arrive; nothing here waits for a whole
//! codeword). Paced playout starts `prebuffer` after the first piece arrives (`isnode play`:
//! no prebuffer with instant release, the server's start-up burst building the lead); byte `x` of the output is then due at
//! `start + x·8 / bitrate`, and goes out with its write slot ([`SLOT`] of media), when the
//! slot's first byte is due: one wake-up per slot, however small the pieces. A piece that arrives after its due time is an *underrun* (when later
//! than [`UNDERRUN_TOLERANCE`]): the schedule slides by the lateness, as a player that stalls
//! and resumes. Unpaced playout (`--as-fast-as-possible`) writes each piece as it arrives.
//! A lost piece is written as zeros, so the output keeps its length and positions.
//! The output is flushed whenever the writer would wait (for its next due time, or for the
//! next piece), so buffered output (stdout, `--out FILE`) never holds back bytes a player
//! could already have: the first bytes reach it as soon as they are released.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use anyhow::Context as _;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::queue::Consumer;
use crate::receiver::Output;

/// Lateness below this is scheduling noise, not an underrun.
pub const UNDERRUN_TOLERANCE: Duration = Duration::from_millis(20);

/// Media time of a paced write slot: the writer wakes at most once per slot (when the
/// slot's first byte is due) and writes what it has of the slot at once. Every wake-up
/// costs a thread switch (30-40 µs on the machines measured, more than the bytes it
/// writes): 200 ms keeps them at 5 a second, and a player buffers far more than that.
pub const SLOT: Duration = Duration::from_millis(200);

/// How the playout buffer writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlayoutConfig {
    /// The object's bitrate in bit/s; 0 disables pacing.
    pub bitrate_bps: u64,
    /// Whether the output is paced at the bitrate.
    pub pacing: Pacing,
    /// Time between the first piece and the start of paced playout.
    pub prebuffer: Duration,
    /// Wall-clock bound (`--max-seconds`): what happens then is [`PlayoutConfig::at_deadline`].
    pub deadline: Option<Instant>,
    /// What the playout does at its deadline.
    pub at_deadline: AtDeadline,
}

/// What the playout does at [`PlayoutConfig::deadline`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AtDeadline {
    /// Stops: whatever is not written yet is dropped, the output ends there.
    #[default]
    Stop,
    /// Writes the rest without pacing (`--keep-length`: the output keeps its length).
    Unpaced,
}

/// How the playout buffer times its writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pacing {
    /// Byte `x` is written at `start + x·8 / bitrate` (no pacing if the bitrate is 0).
    AtBitrate,
    /// Each piece is written as soon as it arrives (`--as-fast-as-possible`).
    AsFastAsPossible,
}

/// What the playout buffer measured.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlayoutStats {
    /// Bytes written (data and zeros).
    pub bytes_written: u64,
    /// Bytes written as zeros for lost codewords.
    pub zero_bytes_written: u64,
    /// When playout started (the first byte was due), if it did.
    pub started_at: Option<Instant>,
    /// Bits written in each second since the start of playout (the last one may be partial).
    pub per_second_bitrate_bps: Vec<u64>,
    /// Pieces that arrived later than their due time (paced playout only).
    pub underruns: u64,
    /// Total time the playout stalled waiting for data, in milliseconds.
    pub stall_ms: u64,
}

/// Bytes per second of playout, binned by whole seconds since a start instant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PerSecond {
    bytes: Vec<u64>,
}

impl PerSecond {
    /// Counts `bytes` written `since_start` after the start of playout.
    pub fn add(&mut self, since_start: Duration, bytes: u64) {
        let bin = since_start.as_secs() as usize;
        if self.bytes.len() <= bin {
            self.bytes.resize(bin + 1, 0);
        }
        self.bytes[bin] += bytes;
    }

    /// Bits per second of each bin.
    pub fn bitrates(&self) -> Vec<u64> {
        self.bytes.iter().map(|b| b * 8).collect()
    }
}

/// Time at which the byte `rel` bytes after the start of the output is due.
pub fn due_time(start: Instant, rel: u64, bitrate_bps: u64) -> Instant {
    if bitrate_bps == 0 {
        return start;
    }
    let nanos = u128::from(rel) * 8 * 1_000_000_000 / u128::from(bitrate_bps);
    start + Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

static ZEROS: [u8; 65536] = [0u8; 65536];

/// Starts the writer thread. It ends when the sender side of `pieces` is dropped and every
/// piece has been played out (or at its deadline), and returns its measurements, or the
/// first write error. Each piece written is reported to `pieces` ([`Consumer::played`]).
pub fn spawn(
    mut out: Box<dyn Write + Send>,
    config: PlayoutConfig,
    pieces: impl Into<Consumer>,
) -> io::Result<JoinHandle<io::Result<PlayoutStats>>> {
    let pieces = pieces.into();
    std::thread::Builder::new()
        .name("isnode-playout".into())
        .spawn(move || {
            let stats = run(&mut *out, config, pieces)?;
            out.flush()?;
            Ok(stats)
        })
}

/// Whether `deadline` has passed.
fn past(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| Instant::now() >= d)
}

fn run(out: &mut dyn Write, config: PlayoutConfig, pieces: Consumer) -> io::Result<PlayoutStats> {
    let mut playout = Playout::new(config);
    loop {
        let Some(piece) = pieces.recv(playout.deadline) else {
            if !past(playout.deadline) {
                break; // the receive loop is done and everything is written
            }
            match config.at_deadline {
                AtDeadline::Stop => break,
                AtDeadline::Unpaced => {
                    playout.unpace();
                    continue;
                }
            }
        };
        let start = playout.start_of(Instant::now());
        if playout.write_piece(out, &piece, start)? == Flow::Stop {
            return Ok(playout.finish());
        }
        pieces.played(piece.len());
        if pieces.is_drained() {
            // Nothing else is here yet: hand the player what it has instead of holding it in
            // the output buffer until the buffer fills (the first bytes, above all).
            out.flush()?;
        }
    }
    Ok(playout.finish())
}

/// Whether the writer thread goes on after a piece.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flow {
    /// Take the next piece.
    Go,
    /// The deadline passed under [`AtDeadline::Stop`]: stop here.
    Stop,
}

/// The writer thread's schedule and measurements.
struct Playout {
    config: PlayoutConfig,
    /// Whether writes are paced at the bitrate (false once the deadline passed under
    /// `AtDeadline::Unpaced`).
    paced: bool,
    /// The deadline still ahead (None once it passed under `AtDeadline::Unpaced`).
    deadline: Option<Instant>,
    /// Most bytes per write.
    piece_len: usize,
    /// Bytes of a write slot when paced ([`SLOT`] of media): the writer wakes once per
    /// slot, when its first byte is due.
    slot_len: u64,
    stats: PlayoutStats,
    bins: PerSecond,
    /// Schedule origin (slides on underruns); the fixed start of playout is in `stats`.
    origin: Option<Instant>,
    /// Bytes written so far (the schedule's position).
    rel: u64,
}

impl Playout {
    fn new(config: PlayoutConfig) -> Playout {
        let paced = config.pacing == Pacing::AtBitrate && config.bitrate_bps > 0;
        // 20 ms of media per write when paced, within [1 KiB, 64 KiB].
        let piece_len = if paced {
            (config.bitrate_bps / 8 / 50).clamp(1024, 65536) as usize
        } else {
            65536
        };
        let slot_bits = u128::from(config.bitrate_bps) * SLOT.as_nanos() / 1_000_000_000;
        let slot_len = u64::try_from(slot_bits / 8).unwrap_or(u64::MAX).max(1024);
        Playout {
            config,
            paced,
            deadline: config.deadline,
            piece_len,
            slot_len,
            stats: PlayoutStats::default(),
            bins: PerSecond::default(),
            origin: None,
            rel: 0,
        }
    }

    /// Stops pacing and forgets the deadline (it passed under `AtDeadline::Unpaced`).
    fn unpace(&mut self) {
        (self.paced, self.deadline) = (false, None);
    }

    /// The start of playout, for a piece that `arrived` then: set by the first piece (after
    /// the prebuffer when paced); a later paced piece that is late counts an underrun (if
    /// beyond the tolerance) and slides the schedule by its lateness.
    fn start_of(&mut self, arrived: Instant) -> Instant {
        match (self.stats.started_at, self.origin) {
            (Some(start), Some(o)) => {
                if self.paced {
                    let due = due_time(o, self.rel, self.config.bitrate_bps);
                    if arrived > due {
                        let late = arrived - due;
                        if late > UNDERRUN_TOLERANCE {
                            self.stats.underruns += 1;
                            self.stats.stall_ms += late.as_millis() as u64;
                        }
                        self.origin = Some(o + late);
                    }
                }
                start
            }
            _ => {
                let start = if self.paced {
                    arrived + self.config.prebuffer
                } else {
                    arrived
                };
                self.stats.started_at = Some(start);
                self.origin = Some(start);
                start
            }
        }
    }

    /// Writes `piece` in writes of `piece_len` bytes, each when due if paced;
    /// [`Flow::Stop`] if the deadline passed under `AtDeadline::Stop`.
    fn write_piece(
        &mut self,
        out: &mut dyn Write,
        piece: &Output,
        start: Instant,
    ) -> io::Result<Flow> {
        let total = piece.len();
        let mut done = 0u64;
        while done < total {
            let n = (total - done).min(self.slot_room()) as usize;
            self.wait_due(out)?;
            if past(self.deadline) {
                match self.config.at_deadline {
                    AtDeadline::Stop => return Ok(Flow::Stop),
                    AtDeadline::Unpaced => self.unpace(),
                }
            }
            write_part(out, piece, done as usize, n)?;
            if let Output::Lost { .. } = piece {
                self.stats.zero_bytes_written += n as u64;
            }
            self.bins
                .add(Instant::now().saturating_duration_since(start), n as u64);
            done += n as u64;
            self.rel += n as u64;
            self.stats.bytes_written += n as u64;
        }
        Ok(Flow::Go)
    }

    /// Bytes of the next write: at most `piece_len`, and, paced, never across the end of
    /// the schedule position's write slot.
    fn slot_room(&self) -> u64 {
        let len = self.piece_len as u64;
        if self.paced {
            len.min(self.slot_len - self.rel % self.slot_len)
        } else {
            len
        }
    }

    /// When paced, flushes what is written and sleeps until the write slot of the next byte
    /// is due (the due time of the slot's first byte; or the deadline, if sooner). Bytes of
    /// a slot that is due go out at once: pieces smaller than a slot (instant release hands
    /// out a few symbols at a time) cost one wake-up per slot, not one each, and a byte
    /// never goes out more than a slot ([`SLOT`]) before its own due time.
    fn wait_due(&self, out: &mut dyn Write) -> io::Result<()> {
        if !self.paced {
            return Ok(());
        }
        if let Some(o) = self.origin {
            let slot_start = self.rel - self.rel % self.slot_len;
            let due = due_time(o, slot_start, self.config.bitrate_bps);
            let wake = self.deadline.map_or(due, |d| due.min(d));
            let now = Instant::now();
            if wake > now {
                // What is written is due: the player gets it before we wait.
                out.flush()?;
                std::thread::sleep(wake - now);
            }
        }
        Ok(())
    }

    /// The measurements, with the bitrate of each second.
    fn finish(mut self) -> PlayoutStats {
        self.stats.per_second_bitrate_bps = self.bins.bitrates();
        self.stats
    }
}

/// Writes bytes `done..done + n` of `piece`: its data, or zeros for a lost piece.
fn write_part(out: &mut dyn Write, piece: &Output, done: usize, n: usize) -> io::Result<()> {
    match piece {
        Output::Data { bytes, .. } => out.write_all(&bytes[done..done + n]),
        Output::Lost { .. } => {
            let mut left = n;
            while left > 0 {
                let z = left.min(ZEROS.len());
                out.write_all(&ZEROS[..z])?;
                left -= z;
            }
            Ok(())
        }
    }
}

/// The writer of `--out`: nothing (`None`: bytes only counted), stdout (`-`) or a file.
pub(crate) fn open_output(out: Option<&Path>) -> anyhow::Result<Box<dyn Write + Send>> {
    Ok(match out {
        None => Box::new(io::sink()),
        Some(p) if p.as_os_str() == "-" => {
            Box::new(BufWriter::with_capacity(1 << 16, io::stdout()))
        }
        Some(p) => Box::new(BufWriter::with_capacity(
            1 << 20,
            File::create(p).with_context(|| format!("creating {}", p.display()))?,
        )),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn per_second_bins() {
        let mut b = PerSecond::default();
        b.add(Duration::from_millis(10), 100);
        b.add(Duration::from_millis(999), 25);
        b.add(Duration::from_millis(2500), 1);
        assert_eq!(b.bitrates(), vec![1000, 0, 8]);
    }

    #[test]
    fn due_times() {
        let t = Instant::now();
        assert_eq!(
            due_time(t, 1_000_000, 8_000_000),
            t + Duration::from_secs(1)
        );
        assert_eq!(due_time(t, 5, 0), t);
    }

    #[test]
    fn writes_in_order_with_zeros_and_paces() {
        let sink = Shared::default();
        let (tx, rx) = mpsc::channel();
        // 400 kbit/s: 20 000 bytes take 400 ms.
        let cfg = PlayoutConfig {
            bitrate_bps: 400_000,
            pacing: Pacing::AtBitrate,
            prebuffer: Duration::from_millis(50),
            deadline: None,
            at_deadline: AtDeadline::Stop,
        };
        let t = Instant::now();
        let h = spawn(Box::new(sink.clone()), cfg, rx).unwrap();
        tx.send(Output::Data {
            sbn: 0,
            offset: 0,
            bytes: vec![7; 10_000],
        })
        .unwrap();
        tx.send(Output::Lost {
            sbn: 1,
            offset: 10_000,
            len: 5_000,
        })
        .unwrap();
        tx.send(Output::Data {
            sbn: 2,
            offset: 15_000,
            bytes: vec![9; 5_000],
        })
        .unwrap();
        drop(tx);
        let stats = h.join().unwrap().unwrap();
        let took = t.elapsed();
        let out = sink.0.lock().unwrap().clone();
        assert_eq!(out.len(), 20_000);
        assert!(out[..10_000].iter().all(|&b| b == 7));
        assert!(out[10_000..15_000].iter().all(|&b| b == 0));
        assert!(out[15_000..].iter().all(|&b| b == 9));
        assert_eq!(stats.bytes_written, 20_000);
        assert_eq!(stats.zero_bytes_written, 5_000);
        assert_eq!(stats.underruns, 0);
        // Paced in slots of 200 ms of media (10 000 bytes): the second slot goes out when
        // its first byte is due, prebuffer + 200 ms after the first piece, not before.
        assert!(took >= Duration::from_millis(250), "{took:?}");
        assert_eq!(stats.per_second_bitrate_bps.iter().sum::<u64>(), 20_000 * 8);
    }

    #[test]
    fn counts_underruns() {
        let (tx, rx) = mpsc::channel();
        let cfg = PlayoutConfig {
            bitrate_bps: 8_000_000,
            pacing: Pacing::AtBitrate,
            prebuffer: Duration::ZERO,
            deadline: None,
            at_deadline: AtDeadline::Stop,
        };
        let h = spawn(Box::new(io::sink()), cfg, rx).unwrap();
        tx.send(Output::Lost {
            sbn: 0,
            offset: 0,
            len: 1000,
        })
        .unwrap();
        std::thread::sleep(Duration::from_millis(150));
        tx.send(Output::Lost {
            sbn: 1,
            offset: 1000,
            len: 1000,
        })
        .unwrap();
        drop(tx);
        let stats = h.join().unwrap().unwrap();
        assert_eq!(stats.underruns, 1);
        assert!(stats.stall_ms >= 100, "{}", stats.stall_ms);
    }

    /// A 2 s title, paced, with a deadline 300 ms in: `Stop` ends the output there,
    /// `Unpaced` writes the rest at once.
    fn played_until_deadline(at_deadline: AtDeadline) -> PlayoutStats {
        let (tx, rx) = mpsc::channel();
        let cfg = PlayoutConfig {
            bitrate_bps: 80_000,
            pacing: Pacing::AtBitrate,
            prebuffer: Duration::ZERO,
            deadline: Some(Instant::now() + Duration::from_millis(300)),
            at_deadline,
        };
        let h = spawn(Box::new(io::sink()), cfg, rx).unwrap();
        for sbn in 0..10 {
            tx.send(Output::Data {
                sbn,
                offset: u64::from(sbn) * 2_000,
                bytes: vec![1; 2_000],
            })
            .unwrap();
        }
        // The sender stays open past the deadline (a receive loop still running): only the
        // deadline stops the pacing.
        let holder = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(500));
            drop(tx);
        });
        let stats = h.join().unwrap().unwrap();
        holder.join().unwrap();
        stats
    }

    #[test]
    fn stops_at_the_deadline() {
        let stats = played_until_deadline(AtDeadline::Stop);
        assert!(stats.bytes_written > 0);
        assert!(stats.bytes_written < 20_000, "{}", stats.bytes_written);
        let stats = played_until_deadline(AtDeadline::Unpaced);
        assert_eq!(stats.bytes_written, 20_000);
    }
}
