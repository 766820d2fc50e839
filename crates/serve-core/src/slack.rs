//! The viewers' playback slack, for pacing background work (scrub, rebuild).
//!
//! A stream's playback deadline for its next step is when the client plays it on the
//! nominal schedule (the session's start plus the step's media time, without the
//! start-up burst's gain: see `Pacer::playback_deadline_ns`) plus [`LATE_BURST_NS`], the
//! lateness a burst is allowed before it counts as late (`isnode_bursts_late`). Its
//! slack is that deadline minus now: about the start-up burst's lead (plus 100 ms) for a
//! stream on schedule, falling while its next block waits for a read, and at or below 0
//! once the stream is late.
//!
//! Each data-plane thread folds its streams' slack when it publishes its positions
//! (every few milliseconds, not per packet) into its own row of atomics on the
//! [`SlackBoard`]; readers sum the rows. No lock anywhere.

use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};

/// A burst sent later than this after its due time counts as late (`bursts_late`).
pub const LATE_BURST_NS: u64 = 100_000_000;

/// What the data plane says of its live streams' playback slack.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PlaybackSlack {
    /// Live streams (sessions streaming and not paused, broadcast channels).
    pub streams: u32,
    /// Streams whose slack is at or below 0 (late).
    pub late_streams: u32,
    /// The smallest slack, milliseconds (`None` without streams).
    pub min_slack_ms: Option<i64>,
}

impl PlaybackSlack {
    /// Folds the streams' playback deadlines (ns on the server's clock; `None`: paused or
    /// done, not counted) at `now_ns`.
    pub fn of(deadlines: impl Iterator<Item = Option<u64>>, now_ns: u64) -> PlaybackSlack {
        let mut s = PlaybackSlack::default();
        for d in deadlines.flatten() {
            let slack_ns = i128::from(d) + i128::from(LATE_BURST_NS) - i128::from(now_ns);
            let ms = i64::try_from(slack_ns / 1_000_000).unwrap_or(i64::MAX);
            s.streams += 1;
            if slack_ns <= 0 {
                s.late_streams += 1;
            }
            s.min_slack_ms = Some(s.min_slack_ms.map_or(ms, |m| m.min(ms)));
        }
        s
    }

    /// Both together (two threads' streams).
    fn merge(self, o: PlaybackSlack) -> PlaybackSlack {
        let min_slack_ms = match (self.min_slack_ms, o.min_slack_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        PlaybackSlack {
            streams: self.streams + o.streams,
            late_streams: self.late_streams + o.late_streams,
            min_slack_ms,
        }
    }
}

/// One thread's row.
#[derive(Debug, Default)]
struct Row {
    streams: AtomicU32,
    late: AtomicU32,
    /// `i64::MAX`: no stream.
    min_slack_ms: AtomicI64,
}

/// Each data-plane thread's [`PlaybackSlack`], one row of atomics per thread.
#[derive(Debug)]
pub struct SlackBoard {
    rows: Vec<Row>,
}

impl SlackBoard {
    /// A board for `threads` threads, all without streams.
    pub fn new(threads: usize) -> SlackBoard {
        let rows = (0..threads)
            .map(|_| Row {
                min_slack_ms: AtomicI64::new(i64::MAX),
                ..Row::default()
            })
            .collect();
        SlackBoard { rows }
    }

    /// Thread `index`'s streams now.
    pub fn publish(&self, index: usize, s: PlaybackSlack) {
        if let Some(r) = self.rows.get(index) {
            r.streams.store(s.streams, Ordering::Relaxed);
            r.late.store(s.late_streams, Ordering::Relaxed);
            r.min_slack_ms
                .store(s.min_slack_ms.unwrap_or(i64::MAX), Ordering::Relaxed);
        }
    }

    /// All threads' streams.
    pub fn total(&self) -> PlaybackSlack {
        self.rows
            .iter()
            .map(|r| {
                let streams = r.streams.load(Ordering::Relaxed);
                let min = r.min_slack_ms.load(Ordering::Relaxed);
                PlaybackSlack {
                    streams,
                    late_streams: r.late.load(Ordering::Relaxed),
                    min_slack_ms: (streams > 0 && min != i64::MAX).then_some(min),
                }
            })
            .fold(PlaybackSlack::default(), PlaybackSlack::merge)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn slack_is_the_smallest_lead_over_the_playback_deadline() {
        let now = 10_000 * MS;
        // Ahead by 750 ms, on schedule, 150 ms overdue (late), paused.
        let deadlines = [Some(now + 750 * MS), Some(now), Some(now - 150 * MS), None];
        let s = PlaybackSlack::of(deadlines.into_iter(), now);
        assert_eq!(s.streams, 3);
        assert_eq!(s.late_streams, 1);
        assert_eq!(s.min_slack_ms, Some(-50));
        let calm = PlaybackSlack::of([Some(now + 750 * MS), Some(now)].into_iter(), now);
        assert_eq!(calm.late_streams, 0);
        assert_eq!(calm.min_slack_ms, Some(100));
        let none = PlaybackSlack::of([None].into_iter(), now);
        assert_eq!(none, PlaybackSlack::default());
    }

    #[test]
    fn the_board_sums_the_threads() {
        let b = SlackBoard::new(3);
        assert_eq!(b.total(), PlaybackSlack::default());
        b.publish(
            0,
            PlaybackSlack {
                streams: 2,
                late_streams: 0,
                min_slack_ms: Some(800),
            },
        );
        b.publish(
            2,
            PlaybackSlack {
                streams: 1,
                late_streams: 1,
                min_slack_ms: Some(-5),
            },
        );
        b.publish(7, PlaybackSlack::default());
        let t = b.total();
        assert_eq!(
            (t.streams, t.late_streams, t.min_slack_ms),
            (3, 1, Some(-5))
        );
        b.publish(2, PlaybackSlack::default());
        assert_eq!(b.total().min_slack_ms, Some(800));
    }
}
