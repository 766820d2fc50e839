//! The validity rule, sans IO: what a stream's receiver recorded, and whether the stream was
//! valid.
//!
//! A client asks at time 0, records the bytes it received per [`TICK_S`] tick, starts playing
//! once it holds [`Nominal::startup_buffer_s`] seconds of the stream, then consumes at the
//! nominal rate. The stream is **valid** when
//! - bytes arrived and playing started;
//! - the playout buffer never underran: at the end of every tick after playing started, the
//!   bytes received are at least the bytes consumed (consumption stops at the end of a title
//!   received whole);
//! - every whole 1 s window after playing started (and before the title was received whole,
//!   if it was) delivered at least the nominal rate less [`Nominal::slack_bytes`] (the
//!   receiver's read granularity or one of the server's bursts: a window boundary can fall
//!   inside one);
//! - the content checks of the receiver passed ([`StreamRecord::content_error`]).

use serde::{Deserialize, Serialize};

/// Length of a recording tick, seconds.
pub const TICK_S: f64 = 0.1;
/// Ticks per 1 s window.
const TICKS_PER_WINDOW: usize = 10;

/// The nominal stream a client expects.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Nominal {
    /// Bytes per second the stream must deliver (as counted by the receiver).
    pub rate_bytes_per_s: f64,
    /// Seconds of the stream buffered before playing starts.
    pub startup_buffer_s: f64,
    /// Shortfall a 1 s window may show for the granularity of delivery and reading.
    pub slack_bytes: f64,
}

/// What a receiver recorded of one stream.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamRecord {
    /// Seconds from the request to the first byte, if any arrived.
    pub first_byte_s: Option<f64>,
    /// Bytes received in each tick from the request, for every tick the client watched whole.
    pub tick_bytes: Vec<u64>,
    /// The whole title was received (then nothing more is expected).
    pub completed: bool,
    /// Why the content check failed, if it did.
    pub content_error: Option<String>,
    /// UDP receive calls that returned data (0 for HTTP).
    #[serde(default)]
    pub receives: u64,
    /// Packets those calls returned (a `UDP_GRO` super-packet counts each of its segments).
    #[serde(default)]
    pub packets: u64,
}

/// The judgement of one stream.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// All the rules held.
    pub valid: bool,
    /// Request to first byte, seconds.
    pub startup_s: Option<f64>,
    /// Bytes per second of each whole 1 s window after playing started.
    pub window_rates: Vec<f64>,
    /// Why the stream was not valid (the first rule broken).
    pub reason: Option<String>,
    /// False for a stream watched for less than its start-up buffer and one window (cut
    /// short by the end of the run) and not received whole: too short to judge.
    pub judged: bool,
}

/// Judges `rec` against `nominal`.
pub fn judge(rec: &StreamRecord, nominal: &Nominal) -> Verdict {
    let mut v = Verdict {
        valid: false,
        startup_s: rec.first_byte_s,
        window_rates: Vec::new(),
        reason: None,
        judged: true,
    };
    let watched_s = rec.tick_bytes.len() as f64 * TICK_S;
    if !rec.completed && watched_s + 1e-9 < nominal.startup_buffer_s + 1.0 {
        v.judged = false;
        v.reason = Some("too short to judge".into());
        return v;
    }
    let cum: Vec<u64> = rec
        .tick_bytes
        .iter()
        .scan(0u64, |acc, b| {
            *acc = acc.saturating_add(*b);
            Some(*acc)
        })
        .collect();
    let total = cum.last().copied().unwrap_or(0);
    let startup_bytes = nominal.rate_bytes_per_s * nominal.startup_buffer_s;
    let play = cum
        .iter()
        .position(|&c| c as f64 >= startup_bytes)
        .or_else(|| (rec.completed && total > 0).then(|| cum.len() - 1));
    let Some(play) = play.filter(|_| rec.first_byte_s.is_some()) else {
        v.reason = Some("playing never started".into());
        return v;
    };
    // The tick in which the title was received whole (no windows after it).
    let full = if rec.completed {
        cum.iter().position(|&c| c == total).unwrap_or(cum.len())
    } else {
        cum.len()
    };
    for (j, &have) in cum.iter().enumerate().skip(play + 1) {
        let played_s = (j - play) as f64 * TICK_S;
        let mut consumed = nominal.rate_bytes_per_s * played_s;
        if rec.completed {
            consumed = consumed.min(total as f64);
        }
        if (have as f64) < consumed {
            v.reason = Some(format!("playout buffer underran {played_s:.1} s into play"));
            break;
        }
    }
    let need = nominal.rate_bytes_per_s - nominal.slack_bytes;
    let mut k = play + 1;
    while k + TICKS_PER_WINDOW <= full.min(cum.len()) {
        let bytes: u64 = rec.tick_bytes[k..k + TICKS_PER_WINDOW].iter().sum();
        let rate = bytes as f64;
        if rate < need && v.reason.is_none() {
            v.reason = Some(format!(
                "window {} delivered {:.0} B/s, below {need:.0}",
                v.window_rates.len(),
                rate
            ));
        }
        v.window_rates.push(rate);
        k += TICKS_PER_WINDOW;
    }
    if v.reason.is_none() {
        v.reason = rec.content_error.clone();
    }
    v.valid = v.reason.is_none();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOMINAL: Nominal = Nominal {
        rate_bytes_per_s: 1000.0,
        startup_buffer_s: 1.0,
        slack_bytes: 20.0,
    };

    /// `secs` seconds at `per_tick` bytes per tick, first byte after 0.05 s.
    fn steady(per_tick: u64, secs: usize) -> StreamRecord {
        StreamRecord {
            first_byte_s: Some(0.05),
            tick_bytes: vec![per_tick; secs * TICKS_PER_WINDOW],
            completed: false,
            content_error: None,
            ..StreamRecord::default()
        }
    }

    #[test]
    fn a_stream_at_its_nominal_rate_is_valid() {
        let v = judge(&steady(100, 6), &NOMINAL);
        assert!(v.valid, "{v:?}");
        // Play starts at the end of tick 9 (1000 bytes, 1 s); 5 whole windows follow in 6 s.
        assert_eq!(v.window_rates, vec![1000.0; 5]);
        assert_eq!(v.startup_s, Some(0.05));
    }

    #[test]
    fn a_window_below_the_rate_less_slack_makes_the_stream_invalid() {
        let mut rec = steady(200, 6);
        // A 1 s window at 97% (30 bytes short, slack 20): the buffer (1 s ahead) holds.
        let w: Vec<u64> = vec![97; 10];
        rec.tick_bytes.splice(15..25, w);
        let v = judge(&rec, &NOMINAL);
        assert!(!v.valid);
        assert!(
            v.reason.as_deref().unwrap_or("").contains("window"),
            "{v:?}"
        );
        // 2% short is within the slack.
        let mut rec = steady(200, 6);
        rec.tick_bytes.splice(15..25, vec![98; 10]);
        assert!(judge(&rec, &NOMINAL).valid);
    }

    #[test]
    fn a_stall_longer_than_the_buffer_is_an_underrun() {
        let mut rec = steady(100, 8);
        for b in &mut rec.tick_bytes[20..35] {
            *b = 0;
        }
        let v = judge(&rec, &NOMINAL);
        assert!(!v.valid);
        assert!(
            v.reason.as_deref().unwrap_or("").contains("underran"),
            "{v:?}"
        );
    }

    #[test]
    fn a_stream_cut_before_its_buffer_and_a_window_is_not_judged() {
        let v = judge(&steady(100, 1), &NOMINAL);
        assert!(!v.judged && !v.valid, "{v:?}");
        assert!(judge(&steady(100, 2), &NOMINAL).judged);
    }

    #[test]
    fn no_bytes_or_bad_content_is_invalid() {
        let none = StreamRecord {
            tick_bytes: vec![0; 30],
            ..StreamRecord::default()
        };
        let v = judge(&none, &NOMINAL);
        assert!(v.judged && !v.valid, "{v:?}");
        let mut bad = steady(100, 4);
        bad.content_error = Some("byte 7 differs".into());
        let v = judge(&bad, &NOMINAL);
        assert_eq!(v.reason.as_deref(), Some("byte 7 differs"));
    }

    #[test]
    fn a_title_received_whole_is_not_held_to_the_rate_after_its_end() {
        let mut rec = steady(100, 3);
        rec.tick_bytes.extend(vec![0; 30]);
        rec.completed = true;
        let v = judge(&rec, &NOMINAL);
        assert!(v.valid, "{v:?}");
    }
}
