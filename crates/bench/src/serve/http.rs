//! The HTTP rows of `bench serve`: paced readers of the content route
//! (`GET /v1/objects/{name}/content`, docs/protocol.md "Content over HTTP"), so the CPU the
//! server spends per GB served to ordinary players stands next to its UDP engines' in one run.
//!
//! Two reading patterns, each reader holding one persistent connection:
//! - `http-progressive`: what a progressive player does: one `GET` of the whole object,
//!   read at the stream's bitrate (TCP's flow control holds the server back), then again;
//! - `http-range`: random 1 MiB `Range` requests at the stream's bitrate (a seeking player,
//!   an HLS client, an HTTP cache filling itself).
//!
//! Delivered bytes are the response bodies' bytes: the title's bytes, with no parity and no
//! headers (the UDP rows count UDP payloads, which carry both).

use std::io::Read;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Bytes of one `http-range` request.
const RANGE_BYTES: u64 = 1 << 20;
/// Bytes read per `read` call (and the pacing step).
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// How the readers read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pattern {
    /// Whole-object `GET`s read at the bitrate.
    Progressive,
    /// Random 1 MiB ranges at the bitrate.
    Range,
}

impl Pattern {
    /// The pattern an engine name of `bench serve` stands for (`None`: a UDP engine).
    pub(crate) fn from_engine(engine: &str) -> Option<Pattern> {
        match engine {
            "http-progressive" => Some(Pattern::Progressive),
            "http-range" => Some(Pattern::Range),
            _ => None,
        }
    }
}

/// Running readers and what they have received.
pub(crate) struct Readers {
    bytes: Arc<AtomicU64>,
    errors: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// What one reader reads: the object, its length, the pace.
#[derive(Clone)]
struct Job {
    url: String,
    len_bytes: u64,
    bitrate_bps: u64,
    pattern: Pattern,
    seed: u64,
}

impl Readers {
    /// Starts `streams` readers over `objects` (round robin) of the server at `base`.
    pub(crate) fn start(
        base: &str,
        objects: &[String],
        streams: usize,
        bitrate_bps: u64,
        pattern: Pattern,
    ) -> anyhow::Result<Readers> {
        let lens = objects
            .iter()
            .map(|o| object_len(base, o))
            .collect::<anyhow::Result<Vec<u64>>>()?;
        let mut r = Readers {
            bytes: Arc::new(AtomicU64::new(0)),
            errors: Arc::new(AtomicU64::new(0)),
            stop: Arc::new(AtomicBool::new(false)),
            threads: Vec::with_capacity(streams),
        };
        for i in 0..streams {
            let o = i % objects.len();
            let job = Job {
                url: format!("{base}/v1/objects/{}/content", objects[o]),
                len_bytes: lens[o],
                bitrate_bps: bitrate_bps.max(1),
                pattern,
                seed: i as u64 + 1,
            };
            let (bytes, errors, stop) = (r.bytes.clone(), r.errors.clone(), r.stop.clone());
            r.threads.push(std::thread::spawn(move || {
                read_paced(&job, &bytes, &errors, &stop)
            }));
        }
        Ok(r)
    }

    /// Body bytes received so far, by all readers.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Stops the readers; fails if any request failed (a refused or broken read would make
    /// the row's figure meaningless).
    pub(crate) fn stop(self) -> anyhow::Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
        match self.errors.load(Ordering::Relaxed) {
            0 => Ok(()),
            n => bail!("{n} HTTP reads failed (see the messages above)"),
        }
    }
}

/// The object's length, from a `HEAD` of its content.
fn object_len(base: &str, object: &str) -> anyhow::Result<u64> {
    let resp = ureq::head(format!("{base}/v1/objects/{object}/content"))
        .call()
        .with_context(|| format!("HEAD of {object}'s content"))?;
    resp.headers()
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .context("the content has no Content-Length")
}

/// One reader: requests as its pattern says, each body read at the bitrate, until `stop`.
fn read_paced(job: &Job, bytes: &AtomicU64, errors: &AtomicU64, stop: &AtomicBool) {
    let agent = ureq::Agent::new_with_defaults();
    let mut rng = StdRng::seed_from_u64(job.seed);
    let mut buf = vec![0u8; READ_CHUNK_BYTES];
    let start = Instant::now();
    let mut read_bytes = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let range = next_range(job, &mut rng);
        let mut req = agent.get(&job.url);
        if let Some((from, to)) = range {
            req = req.header("range", format!("bytes={from}-{to}"));
        }
        let outcome = req
            .call()
            .map_err(anyhow::Error::from)
            .and_then(|mut resp| {
                let mut body = resp.body_mut().with_config().limit(u64::MAX).reader();
                loop {
                    if stop.load(Ordering::Relaxed) {
                        return Ok(());
                    }
                    let n = body.read(&mut buf).context("reading the body")?;
                    if n == 0 {
                        return Ok(());
                    }
                    bytes.fetch_add(n as u64, Ordering::Relaxed);
                    read_bytes += n as u64;
                    pace(start, read_bytes, job.bitrate_bps, stop);
                }
            });
        if let Err(e) = outcome {
            if !stop.load(Ordering::Relaxed) {
                eprintln!("bench serve: HTTP reader of {}: {e:#}", job.url);
                errors.fetch_add(1, Ordering::Relaxed);
            }
            return;
        }
    }
}

/// The next request's range (inclusive ends), or `None` for the whole object.
fn next_range(job: &Job, rng: &mut StdRng) -> Option<(u64, u64)> {
    match job.pattern {
        Pattern::Progressive => None,
        Pattern::Range => {
            let span = job.len_bytes.saturating_sub(RANGE_BYTES).max(1);
            let from = rng.random_range(0..span);
            let to = (from + RANGE_BYTES).min(job.len_bytes).saturating_sub(1);
            Some((from, to))
        }
    }
}

/// Sleeps until `read_bytes` is due at `bitrate_bps` since `start` (in short naps, so a
/// stop is seen soon).
fn pace(start: Instant, read_bytes: u64, bitrate_bps: u64, stop: &AtomicBool) {
    let due = Duration::from_secs_f64(read_bytes as f64 * 8.0 / bitrate_bps as f64);
    while let Some(ahead) = due.checked_sub(start.elapsed()) {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        std::thread::sleep(ahead.min(Duration::from_millis(100)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_stay_inside_the_object() {
        for len in [1u64, 1000, RANGE_BYTES, RANGE_BYTES + 1, 50 << 20] {
            let job = Job {
                url: String::new(),
                len_bytes: len,
                bitrate_bps: 1,
                pattern: Pattern::Range,
                seed: 7,
            };
            let mut rng = StdRng::seed_from_u64(1);
            for _ in 0..1000 {
                let (from, to) = next_range(&job, &mut rng).expect("a range");
                assert!(from <= to && to < len, "{from}-{to} of {len}");
                assert!(to - from < RANGE_BYTES);
            }
        }
    }

    #[test]
    fn engine_names() {
        assert_eq!(Pattern::from_engine("http-range"), Some(Pattern::Range));
        assert_eq!(
            Pattern::from_engine("http-progressive"),
            Some(Pattern::Progressive)
        );
        assert_eq!(Pattern::from_engine("gso"), None);
    }
}
