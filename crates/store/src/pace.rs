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

    /// Takes `bytes` at `now` (the bucket may go into debt); returns how long to wait
    /// before using them (zero when the bucket had them). With a rate of 0, `None`:
    /// nothing passes until the rate changes.
    pub fn take(&mut self, now: Instant, bytes: u64) -> Option<Duration> {
        self.refill(now);
        self.tokens_bytes -= bytes as f64;
        self.owed(now)
    }

    /// How long from `now` until the bucket's debt is paid at the current rate (zero
    /// without debt; `None` with debt and a rate of 0).
    pub fn owed(&mut self, now: Instant) -> Option<Duration> {
        self.refill(now);
        if self.tokens_bytes >= 0.0 {
            return Some(Duration::ZERO);
        }
        if self.rate_bps == 0 {
            return None;
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
    /// The smallest playback slack among them (how far ahead of its playback deadline the
    /// stream that is closest to late is), milliseconds; at or below 0 the stream is late;
    /// `None` without streams (or unknown).
    pub min_slack_ms: Option<i64>,
    /// Session block reads (cache misses) since the last sample.
    pub session_reads: u32,
    /// Streams whose next block is already late.
    pub late_streams: u32,
}

/// Slack at and above which background work runs at its full rate.
pub const COMFORTABLE_SLACK_MS: i64 = 1_000;
/// Slack at and below which background work stops (the streams come first).
pub const CRITICAL_SLACK_MS: i64 = 50;
/// How often a paced worker samples the viewers' load, milliseconds.
pub const SAMPLE_MS: u64 = 100;

/// The rate background work may use under `load`, from its configured `base_rate_bps`:
/// all of it without viewers; nothing while a stream is late (a late stream, or a
/// smallest slack at or below [`CRITICAL_SLACK_MS`]); otherwise in proportion to the
/// smallest slack between [`CRITICAL_SLACK_MS`] (nothing) and [`COMFORTABLE_SLACK_MS`]
/// (all), and a quarter of that while session reads are going on (they go first, the
/// background work still moves on).
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

/// Where a paced worker learns the rate it may use now (sampled every [`SAMPLE_MS`]).
pub trait RateSignal {
    /// The rate in force now, bits per second (0: wait, the viewers come first); `None`
    /// stops the work.
    fn rate_bps(&mut self) -> Option<u64>;
}

/// The time line a paced worker waits on: the real one, or a virtual one in tests.
pub trait Clock {
    /// Now.
    fn now(&self) -> Instant;
    /// Waits `d`; `Break` when the work is to stop meanwhile.
    fn sleep(&mut self, d: Duration) -> ControlFlow<()>;
}

/// The real clock; its waits end early when `stop` is set.
#[derive(Clone, Debug)]
pub struct RealClock {
    /// Set to stop the work.
    pub stop: Arc<AtomicBool>,
}

impl Clock for RealClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn sleep(&mut self, d: Duration) -> ControlFlow<()> {
        sleep_unless_stopped(d, &self.stop)
    }
}

/// A [`Pace`] whose token bucket follows a [`RateSignal`] (sampled at most every
/// [`SAMPLE_MS`]): it waits while the rate is 0 and stops when the signal says so.
#[derive(Debug)]
pub struct SignalPace<S, C> {
    signal: S,
    clock: C,
    bucket: TokenBucket,
    sampled: Option<Instant>,
}

impl<S: RateSignal, C: Clock> SignalPace<S, C> {
    /// Paces by `signal` on `clock`.
    pub fn new(signal: S, clock: C) -> SignalPace<S, C> {
        SignalPace {
            signal,
            clock,
            bucket: TokenBucket::new(0),
            sampled: None,
        }
    }

    /// The signal (to read what it saw).
    pub fn signal(&self) -> &S {
        &self.signal
    }

    /// Samples the signal when [`SAMPLE_MS`] has passed; `Break` when it says stop.
    fn sample(&mut self, now: Instant) -> ControlFlow<()> {
        let due = self
            .sampled
            .is_none_or(|t| now.saturating_duration_since(t) >= Duration::from_millis(SAMPLE_MS));
        if due {
            self.sampled = Some(now);
            match self.signal.rate_bps() {
                Some(rate) => self.bucket.set_rate(rate),
                None => return ControlFlow::Break(()),
            }
        }
        ControlFlow::Continue(())
    }
}

impl<S: RateSignal, C: Clock> Pace for SignalPace<S, C> {
    /// Takes the bytes, then waits until the bucket's debt is paid, in steps of at most
    /// [`SAMPLE_MS`] so that a change of the viewers' load (a stream late, or slack back)
    /// changes the wait at once.
    fn pace(&mut self, bytes: u64) -> ControlFlow<()> {
        let now = self.clock.now();
        self.sample(now)?;
        let mut owed = self.bucket.take(now, bytes);
        let step = Duration::from_millis(SAMPLE_MS);
        loop {
            match owed {
                Some(w) if w.is_zero() => return ControlFlow::Continue(()),
                Some(w) => self.clock.sleep(w.min(step))?,
                None => self.clock.sleep(step)?,
            }
            let now = self.clock.now();
            self.sample(now)?;
            owed = self.bucket.owed(now);
        }
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
            min_slack_ms: Some(CRITICAL_SLACK_MS - 10),
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

    proptest::proptest! {
        /// Never more than the configured rate; nothing while a stream is late; a smaller
        /// slack never gets more; session reads never get more.
        #[test]
        fn paced_rate_properties(
            base in 0u64..10_000_000_000,
            streams in 1u32..1000,
            slack in -5_000i64..5_000,
            less in 0i64..5_000,
            reads in 0u32..100,
            late in 0u32..3,
        ) {
            let load = ViewerLoad { streams, min_slack_ms: Some(slack), session_reads: reads, late_streams: late };
            let r = paced_rate_bps(base, load);
            proptest::prop_assert!(r <= base);
            if late > 0 || slack <= CRITICAL_SLACK_MS {
                proptest::prop_assert_eq!(r, 0);
            }
            let tighter = ViewerLoad { min_slack_ms: Some(slack - less), ..load };
            proptest::prop_assert!(paced_rate_bps(base, tighter) <= r);
            let reading = ViewerLoad { session_reads: reads + 1, ..load };
            proptest::prop_assert!(paced_rate_bps(base, reading) <= r);
            let idle = ViewerLoad { streams: 0, ..load };
            proptest::prop_assert_eq!(paced_rate_bps(base, idle), base);
        }
    }

    /// A clock that only moves when the worker sleeps.
    struct VirtualClock {
        t0: Instant,
        now: std::rc::Rc<std::cell::Cell<Duration>>,
    }

    impl Clock for VirtualClock {
        fn now(&self) -> Instant {
            self.t0 + self.now.get()
        }
        fn sleep(&mut self, d: Duration) -> ControlFlow<()> {
            self.now.set(self.now.get() + d);
            ControlFlow::Continue(())
        }
    }

    /// The viewers' load as a script of (from second, slack ms, late streams), read
    /// through a shared virtual time.
    struct Scripted {
        now: std::rc::Rc<std::cell::Cell<Duration>>,
        script: Vec<(u64, i64, u32)>,
        base_rate_bps: u64,
    }

    impl RateSignal for Scripted {
        fn rate_bps(&mut self) -> Option<u64> {
            let t = self.now.get().as_secs();
            let &(_, slack, late) = self.script.iter().rev().find(|(from, ..)| *from <= t)?;
            let load = ViewerLoad {
                streams: 1,
                min_slack_ms: Some(slack),
                session_reads: 0,
                late_streams: late,
            };
            Some(paced_rate_bps(self.base_rate_bps, load))
        }
    }

    /// The pacing policy on a virtual clock: a worker reading 64 KiB blocks at 8 Mbit/s
    /// (1 MB/s) under comfortable slack (0-10 s), half slack (10-20 s), a late stream
    /// (20-30 s) and comfortable again (30-40 s): about 1 MB/s, then half, then nothing
    /// at all (no block is granted while the stream is late), then full again.
    #[test]
    fn signal_pace_follows_the_viewers_on_a_virtual_clock() {
        let now = std::rc::Rc::new(std::cell::Cell::new(Duration::ZERO));
        let half = CRITICAL_SLACK_MS + (COMFORTABLE_SLACK_MS - CRITICAL_SLACK_MS) / 2;
        let signal = Scripted {
            now: now.clone(),
            script: vec![(0, 5_000, 0), (10, half, 0), (20, -30, 1), (30, 5_000, 0)],
            base_rate_bps: 8_000_000,
        };
        let clock = VirtualClock {
            t0: Instant::now(),
            now: now.clone(),
        };
        let mut pace = SignalPace::new(signal, clock);
        let block = 65_536u64;
        let mut per_phase = [0u64; 4];
        while now.get() < Duration::from_secs(40) {
            assert!(pace.pace(block).is_continue());
            let granted_at = now.get();
            let phase = (granted_at.as_secs() / 10).min(3) as usize;
            per_phase[phase] += block;
        }
        let mb = |b: u64| b as f64 / 1e6;
        // 10 s at 1 MB/s, a quarter second of burst and one block of rounding either way.
        assert!((9.6..=10.4).contains(&mb(per_phase[0])), "{per_phase:?}");
        assert!((4.6..=5.5).contains(&mb(per_phase[1])), "{per_phase:?}");
        // At most the block whose wait began before the stream was late.
        assert!(per_phase[2] <= block, "{per_phase:?}");
        assert!((9.4..=10.4).contains(&mb(per_phase[3])), "{per_phase:?}");
    }
}
