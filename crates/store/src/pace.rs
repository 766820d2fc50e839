//! Pacing of background reads (scrub, rebuild): a token bucket of bytes, and the pure
//! function that scales its rate by how close the live streams are to being late.

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Asked before each block read or write of a scrub or rebuild.
pub trait Pace {
    /// Waits as long as the rate requires for `bytes` more; `Break` stops the work.
    fn pace(&mut self, bytes: u64) -> ControlFlow<()>;
}

/// No pacing: as fast as the disks go.
#[derive(Clone, Copy, Debug, Default)]
pub struct Unpaced;

impl Pace for Unpaced {
    fn pace(&mut self, _bytes: u64) -> ControlFlow<()> {
        ControlFlow::Continue(())
    }
}

/// A token bucket of bytes (sans-IO: the caller gives the time and does the waiting).
#[derive(Clone, Debug)]
pub struct TokenBucket {
    rate_bps: u64,
    tokens_bytes: f64,
    last: Option<Instant>,
}

/// Seconds of the rate a bucket may save up (the largest burst).
const BURST_S: f64 = 0.25;

impl TokenBucket {
    /// A bucket that lets `rate_bps` bits per second through (0: nothing passes).
    pub fn new(rate_bps: u64) -> TokenBucket {
        TokenBucket {
            rate_bps,
            tokens_bytes: 0.0,
            last: None,
        }
    }

    /// Changes the rate from now on.
    pub fn set_rate(&mut self, rate_bps: u64) {
        self.rate_bps = rate_bps;
    }

    /// The current rate, bits per second.
    pub fn rate_bps(&self) -> u64 {
        self.rate_bps
    }

    fn refill(&mut self, now: Instant) {
        let bytes_per_s = self.rate_bps as f64 / 8.0;
        if let Some(last) = self.last {
            let dt = now.saturating_duration_since(last).as_secs_f64();
            let burst = (bytes_per_s * BURST_S).max(1.0);
            self.tokens_bytes = (self.tokens_bytes + dt * bytes_per_s).min(burst);
        }
        self.last = Some(now);
    }

    /// Takes `bytes` at `now`; returns how long to wait before using them (zero when the
    /// bucket had them). With a rate of 0, `None`: nothing passes until the rate changes.
    pub fn take(&mut self, now: Instant, bytes: u64) -> Option<Duration> {
        self.refill(now);
        if self.rate_bps == 0 {
            return None;
        }
        self.tokens_bytes -= bytes as f64;
        if self.tokens_bytes >= 0.0 {
            return Some(Duration::ZERO);
        }
        let bytes_per_s = self.rate_bps as f64 / 8.0;
        Some(Duration::from_secs_f64(-self.tokens_bytes / bytes_per_s))
    }
}

/// A [`Pace`] that sleeps to keep a fixed rate (the command line's `--rate-bps`), and
/// stops when `stop` is set.
#[derive(Debug)]
pub struct Throttle {
    bucket: TokenBucket,
    stop: Arc<AtomicBool>,
}

impl Throttle {
    /// A throttle at `rate_bps` bits per second (must be > 0).
    pub fn new(rate_bps: u64, stop: Arc<AtomicBool>) -> Throttle {
        Throttle {
            bucket: TokenBucket::new(rate_bps.max(1)),
            stop,
        }
    }
}

impl Pace for Throttle {
    fn pace(&mut self, bytes: u64) -> ControlFlow<()> {
        let wait = self
            .bucket
            .take(Instant::now(), bytes)
            .unwrap_or(Duration::from_secs(1));
        sleep_unless_stopped(wait, &self.stop)
    }
}

/// Sleeps `wait` in short steps; `Break` as soon as `stop` is set.
pub fn sleep_unless_stopped(wait: Duration, stop: &AtomicBool) -> ControlFlow<()> {
    let deadline = Instant::now() + wait;
    loop {
        if stop.load(Ordering::Acquire) {
            return ControlFlow::Break(());
        }
        let now = Instant::now();
        if now >= deadline {
            return ControlFlow::Continue(());
        }
        std::thread::sleep((deadline - now).min(Duration::from_millis(50)));
    }
}

/// What the server's data plane says of its viewers, for pacing background work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ViewerLoad {
    /// Live streams.
    pub streams: u32,
    /// The smallest playback slack among them (how far ahead of its deadline the stream
    /// that is closest to late is), milliseconds; `None` without streams.
    pub min_slack_ms: Option<u64>,
    /// Session block reads queued or in flight.
    pub session_reads: u32,
    /// Streams whose next block is already late.
    pub late_streams: u32,
}

/// Slack at and above which background work runs at its full rate.
pub const COMFORTABLE_SLACK_MS: u64 = 2_000;
/// Slack at and below which background work stops (the streams come first).
pub const CRITICAL_SLACK_MS: u64 = 250;

/// The rate background work may use under `load`, from its configured `base_rate_bps`:
/// all of it without viewers; nothing while a stream is late; otherwise in proportion to
/// the smallest slack between [`CRITICAL_SLACK_MS`] (nothing) and
/// [`COMFORTABLE_SLACK_MS`] (all), and a quarter of that while session reads are going on
/// (they go first, the background work still moves on).
pub fn paced_rate_bps(base_rate_bps: u64, load: ViewerLoad) -> u64 {
    if load.streams == 0 {
        return base_rate_bps;
    }
    if load.late_streams > 0 {
        return 0;
    }
    let slack = load.min_slack_ms.unwrap_or(COMFORTABLE_SLACK_MS);
    let by_slack = if slack >= COMFORTABLE_SLACK_MS {
        base_rate_bps
    } else if slack <= CRITICAL_SLACK_MS {
        0
    } else {
        let span = (COMFORTABLE_SLACK_MS - CRITICAL_SLACK_MS) as u128;
        let part = (slack - CRITICAL_SLACK_MS) as u128;
        (u128::from(base_rate_bps) * part / span) as u64
    };
    match load.session_reads {
        0 => by_slack,
        _ => by_slack / 4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_waits_in_proportion_to_the_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(8_000_000); // 1 MB/s
        assert_eq!(b.take(t0, 500_000), Some(Duration::from_millis(500)));
        // Half a second later the debt is paid; another 1 MB is one more second.
        let t1 = t0 + Duration::from_millis(500);
        assert_eq!(b.take(t1, 1_000_000), Some(Duration::from_secs(1)));
        // A long idle time saves at most a quarter second of rate.
        let t2 = t1 + Duration::from_secs(100);
        assert_eq!(b.take(t2, 250_000), Some(Duration::ZERO));
        assert!(b.take(t2, 1).unwrap() > Duration::ZERO);
        b.set_rate(0);
        assert_eq!(b.take(t2, 1), None);
    }

    #[test]
    fn background_rate_yields_to_viewers() {
        let base = 1_000_000;
        assert_eq!(paced_rate_bps(base, ViewerLoad::default()), base);
        let calm = ViewerLoad {
            streams: 3,
            min_slack_ms: Some(5_000),
            ..ViewerLoad::default()
        };
        assert_eq!(paced_rate_bps(base, calm), base);
        let tight = ViewerLoad {
            min_slack_ms: Some(CRITICAL_SLACK_MS + (COMFORTABLE_SLACK_MS - CRITICAL_SLACK_MS) / 2),
            ..calm
        };
        assert_eq!(paced_rate_bps(base, tight), base / 2);
        let critical = ViewerLoad {
            min_slack_ms: Some(100),
            ..calm
        };
        assert_eq!(paced_rate_bps(base, critical), 0);
        let late = ViewerLoad {
            late_streams: 1,
            ..calm
        };
        assert_eq!(paced_rate_bps(base, late), 0);
        let reading = ViewerLoad {
            session_reads: 2,
            ..calm
        };
        assert_eq!(paced_rate_bps(base, reading), base / 4);
    }

    #[test]
    fn rate_falls_monotonically_with_slack() {
        let mut last = u64::MAX;
        for slack in (0..3_000).step_by(50) {
            let load = ViewerLoad {
                streams: 1,
                min_slack_ms: Some(3_000 - slack),
                ..ViewerLoad::default()
            };
            let r = paced_rate_bps(10_000_000, load);
            assert!(r <= last);
            last = r;
        }
        assert_eq!(last, 0);
    }
}
