//! What bounds a phase: each stream's underruns and worst second (the clients' figures),
//! the throttled disk's use of its limit (the group's reads over the limit: near 1, reads
//! queue behind the throttle), the server's CPU and the background work's own (the scrub
//! thread's, the rebuild process's).

use serde::Serialize;

/// One stream, as its client saw it.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct StreamTrace {
    /// Underruns of its playout.
    pub underruns: u64,
    /// Its worst full second, as a fraction of the title's bitrate (0 when it had none).
    pub worst_second: f64,
    /// Whether the stream was valid.
    pub valid: bool,
}

impl StreamTrace {
    /// From a client's `--stats-json`.
    pub(crate) fn of(stats: &serde_json::Value, bitrate_bps: u64) -> StreamTrace {
        let windows: Vec<f64> = stats["per_second_bitrate_bps"]
            .as_array()
            .map(|a| a.iter().filter_map(|x| x.as_f64()).collect())
            .unwrap_or_default();
        let full = windows.split_last().map_or(&[][..], |(_, f)| f);
        let worst = full.iter().copied().fold(f64::INFINITY, f64::min);
        let worst_second = match worst.is_finite() {
            true => worst / (bitrate_bps.max(1) as f64),
            false => 0.0,
        };
        let underruns = stats["underruns"].as_u64();
        StreamTrace {
            underruns: underruns.unwrap_or(u64::MAX),
            worst_second,
            valid: underruns == Some(0) && !full.is_empty() && worst_second >= 0.95,
        }
    }
}

/// A phase's trace.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PhaseTrace {
    /// Each stream, in the clients' order.
    pub streams: Vec<StreamTrace>,
    /// Streams with one underrun or more.
    pub streams_with_underruns: usize,
    /// The worst second of any stream, as a fraction of the bitrate.
    pub worst_second: f64,
    /// The group's reads of the throttled disk over the phase, as a fraction of its limit
    /// (`None`: the kernel's counter was not found).
    pub disk_busy: Option<f64>,
    /// The server's CPU over the phase, seconds (user + sys).
    pub server_cpu_s: f64,
    /// The background work's CPU over the phase, seconds: the server's scrub thread, or
    /// the rebuild process (its whole run).
    pub background_cpu_s: Option<f64>,
    /// Sessions the server refused (admission: its pool, its disk).
    pub refused: u64,
    /// The phase's length, seconds.
    pub elapsed_s: f64,
}

impl PhaseTrace {
    /// The trace of `streams`, with the rest filled in by the caller.
    pub(crate) fn of_streams(streams: Vec<StreamTrace>) -> PhaseTrace {
        PhaseTrace {
            streams_with_underruns: streams.iter().filter(|s| s.underruns > 0).count(),
            worst_second: streams
                .iter()
                .map(|s| s.worst_second)
                .fold(f64::INFINITY, f64::min)
                .min(f64::MAX),
            streams,
            ..PhaseTrace::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_is_valid_only_without_underruns_and_with_every_full_second_at_95_percent() {
        let stats = |underruns: u64, secs: &[f64]| serde_json::json!({"underruns": underruns, "per_second_bitrate_bps": secs});
        let ok = StreamTrace::of(&stats(0, &[1e6, 0.96e6, 0.2e6]), 1_000_000);
        assert!(ok.valid);
        assert!((ok.worst_second - 0.96).abs() < 1e-9, "{ok:?}");
        let slow = StreamTrace::of(&stats(0, &[1e6, 0.94e6, 1e6]), 1_000_000);
        assert!(!slow.valid);
        let stalled = StreamTrace::of(&stats(2, &[1e6, 1e6, 1e6]), 1_000_000);
        assert!(!stalled.valid);
        assert_eq!(stalled.underruns, 2);
        let empty = StreamTrace::of(&serde_json::json!({}), 1_000_000);
        assert!(!empty.valid);
        let t = PhaseTrace::of_streams(vec![ok, slow, stalled]);
        assert_eq!(t.streams_with_underruns, 1);
        assert!((t.worst_second - 0.94).abs() < 1e-9, "{t:?}");
    }
}
