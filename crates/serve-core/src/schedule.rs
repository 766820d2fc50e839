//! What a data-plane entry follows: a unicast session's [`Pacer`], or one channel of a
//! broadcast ([`ChannelPacer`]). The loop asks both the same questions.

use crate::channel::ChannelPacer;
use crate::pacer::{Pacer, PacerError, RepairCounts, Step};

/// The pacing core of one data-plane entry.
#[derive(Clone, Debug)]
pub enum Schedule {
    /// A unicast session.
    Session(Pacer),
    /// One channel of a broadcast (never done: the broadcast is stopped from outside).
    Channel(ChannelPacer),
}

impl Schedule {
    /// The next step if it is due at `now_ns`.
    #[inline]
    pub fn peek(&mut self, now_ns: u64) -> Option<Step> {
        match self {
            Schedule::Session(p) => p.peek(now_ns),
            Schedule::Channel(c) => c.peek(now_ns),
        }
    }

    /// The current step went out (at `now_ns`).
    #[inline]
    pub fn advance(&mut self, now_ns: u64) {
        match self {
            Schedule::Session(p) => p.advance(),
            Schedule::Channel(c) => c.advance(now_ns),
        }
    }

    /// A session's pacer, which can take a burst in pieces ([`Pacer::advance_packets`]); a
    /// channel takes whole steps only.
    pub fn session_mut(&mut self) -> Option<&mut Pacer> {
        match self {
            Schedule::Session(p) => Some(p),
            Schedule::Channel(_) => None,
        }
    }

    /// How early (ns) this entry's steps may leave, given the thread's pacing slack: a
    /// session's client buffers ahead, so the slack; a channel's none. Receivers join a
    /// channel at the plan's times (`recv::broadcast::tune`), 250 ms ahead when they can,
    /// but one arriving just before a transmission starts joins at once, and a burst sent
    /// before it had joined was lost to it: its codeword came a slot late, from the unicast
    /// repair (seen with a 32 ms slack in `broadcast_play`).
    #[inline]
    pub fn early_ns(&self, slack_ns: u64) -> u64 {
        match self {
            Schedule::Session(_) => slack_ns,
            Schedule::Channel(_) => 0,
        }
    }

    /// When the next step is due.
    #[inline]
    pub fn next_due(&self) -> Option<u64> {
        match self {
            Schedule::Session(p) => p.next_due(),
            Schedule::Channel(c) => c.next_due(),
        }
    }

    /// When the client plays the next step (`None` while paused or done): a session's
    /// nominal schedule; a channel's receivers have no lead, its due time.
    #[inline]
    pub fn playback_deadline_ns(&self) -> Option<u64> {
        match self {
            Schedule::Session(p) => p.playback_deadline_ns(),
            Schedule::Channel(c) => c.next_due(),
        }
    }

    /// The codeword being sent.
    #[inline]
    pub fn codeword(&self) -> u32 {
        match self {
            Schedule::Session(p) => p.codeword(),
            Schedule::Channel(c) => c.codeword(),
        }
    }

    /// True once a session has sent everything (a channel never is).
    #[inline]
    pub fn is_done(&self) -> bool {
        match self {
            Schedule::Session(p) => p.is_done(),
            Schedule::Channel(_) => false,
        }
    }

    /// Adaptive repair (sessions only: a channel sends every stored repair symbol, on
    /// its repair group).
    pub fn set_repair_limit(&mut self, repair: Option<u32>) {
        if let Schedule::Session(p) = self {
            p.set_repair_limit(repair);
        }
    }

    /// Repair packets sent and skipped (sessions; zero for a channel).
    #[inline]
    pub fn repair_counts(&self) -> RepairCounts {
        match self {
            Schedule::Session(p) => p.repair_counts(),
            Schedule::Channel(_) => RepairCounts::default(),
        }
    }

    /// Pauses a session (a channel ignores it).
    #[inline]
    pub fn pause(&mut self, now_ns: u64) {
        if let Schedule::Session(p) = self {
            p.pause(now_ns);
        }
    }

    /// Resumes a session (a channel ignores it).
    #[inline]
    pub fn resume(&mut self, now_ns: u64) {
        if let Schedule::Session(p) = self {
            p.resume(now_ns);
        }
    }

    /// Starts a session after its token's echo, with `burst` (a channel ignores it).
    pub fn start(&mut self, burst: crate::pacer::StartBurst, now_ns: u64) {
        if let Schedule::Session(p) = self {
            *p = p.clone().with_start_burst(burst);
            p.resume(now_ns);
        }
    }

    /// Seeks a session (a channel refuses).
    pub fn seek(&mut self, codeword: u32, now_ns: u64) -> Result<(), PacerError> {
        match self {
            Schedule::Session(p) => p.seek(codeword, now_ns),
            Schedule::Channel(_) => Err(PacerError::BadParam("a broadcast channel cannot seek")),
        }
    }
}
