//! Background scrub (`scrub_rate_bps`, 0: off): a thread that runs the store's scrub
//! ([`isnode_store::scrub`]) over the whole volume again and again, paced by the viewers.
//!
//! Its reads go through a token bucket whose rate is [`paced_rate_bps`] of the
//! configured rate and of what the server sees of its viewers ([`LoadSampler`]), sampled
//! every [`SAMPLE_MS`] ms: the data plane's playback slack (`plane/slack.rs`: the live
//! streams, the smallest slack, the late ones: the scrub slows down as the smallest slack
//! falls and stops while a stream is late), a packet skipped or a burst sent more than
//! 100 ms late since the last sample (a stream that missed its block or its time: counted
//! as late), and the session block reads since the
//! last sample (pool misses: the scrub slows to a quarter, its reads yield to the
//! sessions'). The same load is written for the other processes on the volume
//! (`viewer_pace.rs`).
//!
//! The thread runs at background priority ([`isnode_sys::priority`]: nice 19, the lowest
//! best-effort I/O level), so that its digests and parity checks take CPU only where the
//! viewers' threads leave some.
//!
//! Between passes it waits [`PASS_PAUSE_S`] s. Progress and findings are counters of
//! [`ScrubState`], in the metrics (`isnode_scrub_*`) and `GET /v1/status` (`scrub`).

use std::ops::ControlFlow;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use isnode_plane::counters::PlaneCounters;
use isnode_pool::cache::Cache;
use isnode_serve_config::ConfigCell;
use isnode_serve_core::slack::SlackBoard;
use isnode_store::pace::{paced_rate_bps, Clock, RateSignal, SignalPace, ViewerLoad};
use isnode_sys::event::{Event, IDLE_WAIT};
use isnode_sys::stop::Stop;
/// Pause between two passes, seconds.
pub(crate) const PASS_PAUSE_S: u64 = 60;

/// The background scrub's counters (all zero while it is off).
#[derive(Debug, Default)]
pub(crate) struct ScrubState {
    /// Passes finished.
    pub passes: AtomicU64,
    /// Bytes read from the members, in all.
    pub bytes_read: AtomicU64,
    /// Bytes of the pass in progress done, and its total.
    pub pass_done_bytes: AtomicU64,
    pub pass_total_bytes: AtomicU64,
    /// The rate in force now (after pacing by the viewers), bits per second.
    pub rate_bps: AtomicU64,
    /// Bad blocks and bad packets found, in all passes.
    pub bad_blocks: AtomicU64,
    pub bad_packets: AtomicU64,
    /// Objects with damage in the last finished pass.
    pub damaged_objects: AtomicU64,
}

/// A point-in-time copy of [`ScrubState`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ScrubSnapshot {
    /// Passes finished.
    pub passes: u64,
    /// Bytes read, in all.
    pub bytes_read: u64,
    /// Bytes of the pass in progress done.
    pub pass_done_bytes: u64,
    /// Bytes of the pass in progress in all.
    pub pass_total_bytes: u64,
    /// The paced rate in force, bits per second.
    pub rate_bps: u64,
    /// Bad blocks found, in all passes.
    pub bad_blocks: u64,
    /// Bad packets found, in all passes.
    pub bad_packets: u64,
    /// Objects with damage in the last finished pass.
    pub damaged_objects: u64,
}

impl ScrubState {
    /// A copy of the counters.
    pub(crate) fn snapshot(&self) -> ScrubSnapshot {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ScrubSnapshot {
            passes: l(&self.passes),
            bytes_read: l(&self.bytes_read),
            pass_done_bytes: l(&self.pass_done_bytes),
            pass_total_bytes: l(&self.pass_total_bytes),
            rate_bps: l(&self.rate_bps),
            bad_blocks: l(&self.bad_blocks),
            bad_packets: l(&self.bad_packets),
            damaged_objects: l(&self.damaged_objects),
        }
    }
}

/// What the server sees of its viewers, the handles a paced background worker reads.
#[derive(Clone)]
pub(crate) struct Viewers {
    /// The data plane's playback slack.
    pub slack: Arc<SlackBoard>,
    /// The pool (its misses are the sessions' block reads).
    pub cache: Cache,
    /// The data plane's counters (its skipped packets are late streams).
    pub plane: Arc<PlaneCounters>,
}

/// The background scrub's worker: what it holds, and nothing of the rest of the server.
pub(crate) struct Scrub {
    /// The volume's directory.
    pub root: std::path::PathBuf,
    /// The configuration in force (`scrub_rate_bps`).
    pub config: ConfigCell,
    /// Its progress and findings.
    pub state: Arc<ScrubState>,
    /// The server's stop.
    pub stop: Arc<Stop>,
    /// Set by a reload of the configuration: asleep while off, it looks at its rate again.
    pub reloaded: Arc<Event>,
    /// The viewers it yields to.
    pub viewers: Viewers,
}

/// The thread's body: passes while the server runs (idle while `scrub_rate_bps` is 0).
pub(crate) fn run(sh: Scrub) {
    // Its CPU and reads lose every contest with the viewers' threads.
    if let Err(e) = isnode_sys::priority::lower_this_thread() {
        tracing::warn!("background scrub: its priority stays the server's: {e}");
    }
    while !sh.stop.is_stopped() {
        if sh.config.load().scrub_rate_bps == 0 {
            sh.state.rate_bps.store(0, Ordering::Relaxed);
            // Off until a reload turns it on (that wakes it) or the server stops.
            let events = [sh.stop.as_fd(), sh.reloaded.as_fd()];
            if isnode_sys::event::wait_any(&events, IDLE_WAIT) == Some(1) {
                sh.reloaded.clear();
            }
            continue;
        }
        let pause = match pass(&sh) {
            Ok(ControlFlow::Break(())) => return,
            Ok(ControlFlow::Continue(())) => Duration::from_secs(PASS_PAUSE_S),
            Err(e) => {
                tracing::warn!("background scrub: {e}");
                Duration::from_secs(PASS_PAUSE_S)
            }
        };
        if sh.stop.sleep_unless_stopped(pause).is_break() {
            return;
        }
    }
}

/// One pass over the volume; `Break` when the server stops.
fn pass(sh: &Scrub) -> Result<ControlFlow<()>, isnode_store::StoreError> {
    let vol = isnode_store::Volume::open(&sh.root)?;
    let signal = ScrubSignal {
        sh,
        sampler: LoadSampler::new(sh.viewers.clone()),
    };
    let mut pace = SignalPace::new(signal, ShutdownClock(&sh.stop));
    let state = &sh.state;
    let report = isnode_store::scrub(&vol, &mut pace, &mut |p| {
        state.pass_done_bytes.store(p.bytes_done, Ordering::Relaxed);
        state
            .pass_total_bytes
            .store(p.bytes_total, Ordering::Relaxed);
    })?;
    state
        .bytes_read
        .fetch_add(report.bytes_read, Ordering::Relaxed);
    let bad_blocks: u64 = report.members.iter().map(|m| m.bad_blocks).sum();
    let bad_packets: u64 = report.object_results.iter().map(|o| o.bad_packets).sum();
    state.bad_blocks.fetch_add(bad_blocks, Ordering::Relaxed);
    state.bad_packets.fetch_add(bad_packets, Ordering::Relaxed);
    if report.stopped {
        // Stopped by the server's end, or by a reload that set the rate to 0.
        return Ok(match sh.stop.is_stopped() {
            true => ControlFlow::Break(()),
            false => ControlFlow::Continue(()),
        });
    }
    let damaged = report.object_results.iter().filter(|o| o.damaged()).count() as u64;
    state.damaged_objects.store(damaged, Ordering::Relaxed);
    state.passes.fetch_add(1, Ordering::Relaxed);
    if report.damaged() {
        for o in report.object_results.iter().filter(|o| o.damaged()) {
            for f in &o.findings {
                tracing::warn!(object = %o.object, member = f.member, block = ?f.block, "scrub: {}", f.problem);
            }
        }
        for p in &report.member_problems {
            tracing::warn!("scrub: {p}");
        }
        tracing::warn!("scrub found damage: repair with `isnode volume check --repair`");
    } else {
        tracing::info!(
            objects = report.objects,
            bytes = report.bytes_read,
            "scrub pass clean"
        );
    }
    Ok(ControlFlow::Continue(()))
}

/// What the server sees of its viewers, sampled: the data plane's playback slack, and
/// the packets skipped, bursts sent late and pool misses since the previous sample.
pub(crate) struct LoadSampler {
    viewers: Viewers,
    skipped: u64,
    late_bursts: u64,
    misses: u64,
}

impl LoadSampler {
    /// Counts from now.
    pub(crate) fn new(viewers: Viewers) -> LoadSampler {
        LoadSampler {
            skipped: viewers.plane.packets_skipped.load(Ordering::Relaxed),
            late_bursts: viewers.plane.bursts_late.load(Ordering::Relaxed),
            misses: viewers.cache.stats().misses.load(Ordering::Relaxed),
            viewers,
        }
    }

    /// The load now: a packet skipped, or a burst sent more than 100 ms late, since the
    /// last sample counts as a late stream (the slack is a snapshot: a burst late between
    /// two samples is seen only by the counter; `bench background` found 29 such bursts
    /// beside a scrub with a busy core while every sampled slack was above 800 ms).
    pub(crate) fn sample(&mut self) -> ViewerLoad {
        let skipped = self.viewers.plane.packets_skipped.load(Ordering::Relaxed);
        let late_bursts = self.viewers.plane.bursts_late.load(Ordering::Relaxed);
        let misses = self.viewers.cache.stats().misses.load(Ordering::Relaxed);
        let slack = self.viewers.slack.total();
        let missed = skipped > self.skipped || late_bursts > self.late_bursts;
        let load = ViewerLoad {
            streams: slack.streams,
            min_slack_ms: slack.min_slack_ms,
            session_reads: u32::try_from(misses.saturating_sub(self.misses)).unwrap_or(u32::MAX),
            late_streams: slack.late_streams + u32::from(missed),
        };
        (self.skipped, self.late_bursts, self.misses) = (skipped, late_bursts, misses);
        load
    }
}

/// The background scrub's rate: the configured rate scaled by the viewers' load; stops
/// when the server does or the rate is set to 0.
struct ScrubSignal<'a> {
    sh: &'a Scrub,
    sampler: LoadSampler,
}

impl RateSignal for ScrubSignal<'_> {
    fn rate_bps(&mut self) -> Option<u64> {
        let base = self.sh.config.load().scrub_rate_bps;
        if self.sh.stop.is_stopped() || base == 0 {
            return None;
        }
        let rate = paced_rate_bps(base, self.sampler.sample());
        self.sh.state.rate_bps.store(rate, Ordering::Relaxed);
        Some(rate)
    }
}

/// The real clock, whose waits end when the server stops.
struct ShutdownClock<'a>(&'a Stop);

impl Clock for ShutdownClock<'_> {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn sleep(&mut self, d: Duration) -> ControlFlow<()> {
        self.0.sleep_unless_stopped(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn viewers() -> Viewers {
        Viewers {
            slack: Arc::new(SlackBoard::new(1)),
            cache: Cache::new(4, 4096),
            plane: Arc::new(PlaneCounters::default()),
        }
    }

    #[test]
    fn a_burst_sent_late_between_two_samples_counts_as_a_late_stream_once() {
        let v = viewers();
        let mut sampler = LoadSampler::new(v.clone());
        assert_eq!(sampler.sample().late_streams, 0);
        v.plane.bursts_late.fetch_add(3, Ordering::Relaxed);
        assert_eq!(
            sampler.sample().late_streams,
            1,
            "the late bursts were not seen"
        );
        assert_eq!(
            sampler.sample().late_streams,
            0,
            "counted again with no new one"
        );
        v.plane.packets_skipped.fetch_add(1, Ordering::Relaxed);
        assert_eq!(sampler.sample().late_streams, 1);
    }
}
