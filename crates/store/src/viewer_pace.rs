//! The viewers' pacing signal shared through the volume: `isnode serve` samples what its
//! data plane sees of its viewers (streams, late streams, smallest playback slack, session
//! reads) every [`SAMPLE_EVERY_MS`] while there are viewers, and rewrites
//! `VOLUME/run/viewer-pace.json` when a change would change the pace ([`WriteRule`]), and
//! otherwise every [`HEARTBEAT_MS`]; the background work of other processes on the same
//! volume (`isnode volume rebuild`, `isnode volume scrub`) reads it and paces itself
//! exactly as the server's own background scrub does ([`crate::pace::paced_rate_bps`]). A
//! file older than [`FRESH_MS`], missing or unreadable means no server runs: full rate
//! (docs/format.md, "viewer-pace.json").

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::pace::{paced_rate_bps, RateSignal, ViewerLoad};

/// How often the server samples its viewers' load while it has viewers, milliseconds
/// (without viewers it samples every [`HEARTBEAT_MS`], and at once when a stream starts).
pub const SAMPLE_EVERY_MS: u64 = 200;
/// The longest the server goes without rewriting the file (its liveness), milliseconds.
pub const HEARTBEAT_MS: u64 = 1_000;
/// A file written longer ago than this (or later than this in the future) is stale: three
/// heartbeats, so that a late one is not taken for a server gone.
pub const FRESH_MS: u64 = 3 * HEARTBEAT_MS;
/// A change of the smallest playback slack (within the range that scales the pace) of at
/// least this much is written at once, milliseconds (about 5 % of the pace).
pub const SLACK_STEP_MS: i64 = 50;
/// The file's version.
pub const VERSION: u32 = 1;
/// Largest file read (a larger one is ignored).
const MAX_FILE_BYTES: u64 = 4096;

/// The file's contents.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewerPaceFile {
    /// [`VERSION`].
    pub version: u32,
    /// When it was written, unix time in milliseconds.
    pub written_unix_ms: u64,
    /// Live streams.
    pub streams: u32,
    /// Streams whose next block is late.
    pub late_streams: u32,
    /// The smallest playback slack, milliseconds (`null` without streams).
    pub min_slack_ms: Option<i64>,
    /// Session block reads (pool misses) in the last interval.
    pub session_reads: u32,
}

impl ViewerPaceFile {
    /// The file for `load` written at `now`.
    pub fn new(load: ViewerLoad, now: SystemTime) -> ViewerPaceFile {
        ViewerPaceFile {
            version: VERSION,
            written_unix_ms: unix_ms(now),
            streams: load.streams,
            late_streams: load.late_streams,
            min_slack_ms: load.min_slack_ms,
            session_reads: load.session_reads,
        }
    }

    /// The load it says, if it is of this version and fresh at `now`.
    pub fn load_at(&self, now: SystemTime) -> Option<ViewerLoad> {
        let now_ms = unix_ms(now);
        let age_ms = now_ms.abs_diff(self.written_unix_ms);
        (self.version == VERSION && age_ms <= FRESH_MS).then_some(ViewerLoad {
            streams: self.streams,
            min_slack_ms: self.min_slack_ms,
            session_reads: self.session_reads,
            late_streams: self.late_streams,
        })
    }
}

/// When the server rewrites the file (sans-IO: the caller gives the loads and the clock):
/// at the first sample, when a change would change the pace of background work (streams
/// come or go, a stream is late or no longer, session reads start or stop, the smallest
/// slack moves by [`SLACK_STEP_MS`] within the scaling range), and otherwise every
/// [`HEARTBEAT_MS`]. The exact counts of a file are thus at most a heartbeat old.
#[derive(Clone, Copy, Debug, Default)]
pub struct WriteRule {
    /// The load last written and when (ms on the caller's clock).
    last: Option<(ViewerLoad, u64)>,
}

impl WriteRule {
    /// Whether `load` sampled at `now_ms` is to be written; if so it counts as written.
    pub fn due(&mut self, load: ViewerLoad, now_ms: u64) -> bool {
        let due = match self.last {
            None => true,
            Some((last, at_ms)) => {
                now_ms.saturating_sub(at_ms) >= HEARTBEAT_MS || paces_differently(last, load)
            }
        };
        if due {
            self.last = Some((load, now_ms));
        }
        due
    }
}

/// Whether readers could pace `b` differently from `a` ([`paced_rate_bps`]).
fn paces_differently(a: ViewerLoad, b: ViewerLoad) -> bool {
    use crate::pace::{COMFORTABLE_SLACK_MS, CRITICAL_SLACK_MS};
    let slack = |l: ViewerLoad| {
        l.min_slack_ms
            .map(|ms| ms.clamp(CRITICAL_SLACK_MS, COMFORTABLE_SLACK_MS))
    };
    let slack_moved = match (slack(a), slack(b)) {
        (Some(x), Some(y)) => x.abs_diff(y) >= SLACK_STEP_MS.unsigned_abs(),
        (x, y) => x.is_some() != y.is_some(),
    };
    (a.streams > 0) != (b.streams > 0)
        || (a.late_streams > 0) != (b.late_streams > 0)
        || (a.session_reads > 0) != (b.session_reads > 0)
        || slack_moved
}

fn unix_ms(t: SystemTime) -> u64 {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `VOLUME/run/viewer-pace.json`.
pub fn path(volume: &Path) -> PathBuf {
    volume.join("run").join("viewer-pace.json")
}

/// Writes the file atomically (a temporary file renamed over it; not fsynced: it only
/// matters while the server runs).
pub fn write(volume: &Path, file: &ViewerPaceFile) -> std::io::Result<()> {
    let dest = path(volume);
    let dir = volume.join("run");
    std::fs::create_dir_all(&dir)?;
    let tmp = dir.join("viewer-pace.json.tmp");
    let body = serde_json::to_vec(file).map_err(std::io::Error::other)?;
    std::fs::write(&tmp, body)?;
    std::fs::rename(&tmp, &dest)
}

/// Removes the file (the server stops: no viewers to yield to).
pub fn remove(volume: &Path) {
    let _ = std::fs::remove_file(path(volume));
}

/// Reads the file: `None` when missing, too large or not parsing.
pub fn read(volume: &Path) -> Option<ViewerPaceFile> {
    use std::io::Read;
    let f = std::fs::File::open(path(volume)).ok()?;
    let mut body = Vec::new();
    f.take(MAX_FILE_BYTES + 1).read_to_end(&mut body).ok()?;
    parse(&body)
}

/// The file's bytes as a [`ViewerPaceFile`]: `None` when larger than 4 KiB or not parsing.
pub fn parse(body: &[u8]) -> Option<ViewerPaceFile> {
    if body.len() as u64 > MAX_FILE_BYTES {
        return None;
    }
    serde_json::from_slice(body).ok()
}

/// The rate a command beside a server scales by the viewers' load when it was given no
/// rate of its own: 1 Gbit/s (125 MB/s, about one disk's sequential rate).
pub const BESIDE_SERVER_RATE_BPS: u64 = 1_000_000_000;

/// The [`RateSignal`] of a command beside a server: without a fresh file, its `--rate-bps`
/// (or no limit); with one, that rate (or [`BESIDE_SERVER_RATE_BPS`]) scaled by the
/// file's load ([`paced_rate_bps`]: nothing while a stream is late).
#[derive(Debug)]
pub struct FileSignal {
    volume: PathBuf,
    cap_bps: Option<u64>,
    /// The load last read (for reporting), `None` while no server runs.
    pub last: Option<ViewerLoad>,
    /// Samples during which a fresh file held the work back (rate below the cap).
    pub held_back: u64,
}

impl FileSignal {
    /// Reads `VOLUME/run/viewer-pace.json` of `volume`; `cap_bps` is the most the work
    /// may use (`None`: no limit of its own).
    pub fn new(volume: &Path, cap_bps: Option<u64>) -> FileSignal {
        FileSignal {
            volume: volume.to_path_buf(),
            cap_bps,
            last: None,
            held_back: 0,
        }
    }
}

impl RateSignal for FileSignal {
    fn rate_bps(&mut self) -> Option<u64> {
        self.last = read(&self.volume).and_then(|f| f.load_at(SystemTime::now()));
        let Some(load) = self.last else {
            return Some(self.cap_bps.unwrap_or(u64::MAX));
        };
        let base = self.cap_bps.unwrap_or(BESIDE_SERVER_RATE_BPS);
        let rate = paced_rate_bps(base, load);
        if rate < base {
            self.held_back += 1;
        }
        Some(rate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn late_load() -> ViewerLoad {
        ViewerLoad {
            streams: 2,
            min_slack_ms: Some(-20),
            session_reads: 1,
            late_streams: 1,
        }
    }

    #[test]
    fn a_fresh_file_paces_a_stale_or_missing_one_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let mut sig = FileSignal::new(dir.path(), Some(8_000_000));
        assert_eq!(sig.rate_bps(), Some(8_000_000), "no file: full rate");
        write(
            dir.path(),
            &ViewerPaceFile::new(late_load(), SystemTime::now()),
        )
        .unwrap();
        assert_eq!(sig.rate_bps(), Some(0), "a late stream: nothing");
        assert_eq!(sig.last, Some(late_load()));
        let old = SystemTime::now() - Duration::from_millis(FRESH_MS + 500);
        write(dir.path(), &ViewerPaceFile::new(late_load(), old)).unwrap();
        assert_eq!(sig.rate_bps(), Some(8_000_000), "stale: full rate");
        std::fs::write(path(dir.path()), b"{not json").unwrap();
        assert_eq!(sig.rate_bps(), Some(8_000_000), "unreadable: full rate");
        std::fs::write(path(dir.path()), vec![b' '; 5000]).unwrap();
        assert!(read(dir.path()).is_none(), "too large");
        remove(dir.path());
        assert!(read(dir.path()).is_none());
        let mut uncapped = FileSignal::new(dir.path(), None);
        assert_eq!(uncapped.rate_bps(), Some(u64::MAX), "no server: no limit");
        let calm = ViewerLoad {
            streams: 1,
            min_slack_ms: Some(5_000),
            ..ViewerLoad::default()
        };
        write(dir.path(), &ViewerPaceFile::new(calm, SystemTime::now())).unwrap();
        assert_eq!(uncapped.rate_bps(), Some(BESIDE_SERVER_RATE_BPS));
        assert_eq!(uncapped.held_back, 0);
    }

    fn streams(n: u32, slack_ms: i64) -> ViewerLoad {
        ViewerLoad {
            streams: n,
            min_slack_ms: Some(slack_ms),
            ..ViewerLoad::default()
        }
    }

    #[test]
    fn written_when_the_pace_would_change_else_at_the_heartbeat() {
        let mut rule = WriteRule::default();
        let idle = ViewerLoad::default();
        assert!(rule.due(idle, 0), "the first sample");
        assert!(!rule.due(idle, 200), "no change");
        assert!(rule.due(idle, HEARTBEAT_MS), "the heartbeat");
        let t = HEARTBEAT_MS;
        assert!(rule.due(streams(1, 850), t + 10), "a stream came");
        assert!(
            !rule.due(streams(7, 860), t + 20),
            "more streams, slack within a step"
        );
        assert!(rule.due(streams(7, 790), t + 30), "the slack fell a step");
        assert!(
            !rule.due(streams(7, 780), t + 40),
            "within a step of the last written"
        );
        assert!(
            rule.due(streams(7, 780), t + 30 + HEARTBEAT_MS),
            "the heartbeat"
        );
        let mut r = WriteRule::default();
        assert!(r.due(streams(3, 1_500), 0));
        assert!(
            !r.due(streams(3, 9_000), 10),
            "both comfortable: the same pace"
        );
        assert!(
            !r.due(streams(3, 990), 20),
            "10 ms below comfortable: within a step"
        );
        assert!(r.due(streams(3, 900), 25), "a step below comfortable");
        let late = ViewerLoad {
            late_streams: 1,
            ..streams(3, 1_500)
        };
        assert!(r.due(late, 30), "a late stream");
        let reads = ViewerLoad {
            session_reads: 2,
            ..late
        };
        assert!(r.due(reads, 40), "session reads began");
        assert!(!r.due(
            ViewerLoad {
                session_reads: 9,
                ..reads
            },
            50
        ));
        assert!(r.due(idle, 60), "the streams went");
    }

    #[test]
    fn a_file_a_heartbeat_late_is_still_fresh() {
        let now = SystemTime::now();
        let f = ViewerPaceFile::new(late_load(), now - Duration::from_millis(2 * HEARTBEAT_MS));
        assert_eq!(f.load_at(now), Some(late_load()));
        let gone = ViewerPaceFile::new(late_load(), now - Duration::from_millis(FRESH_MS + 1));
        assert_eq!(gone.load_at(now), None);
    }

    #[test]
    fn the_file_round_trips_and_checks_its_version() {
        let now = SystemTime::now();
        let f = ViewerPaceFile::new(late_load(), now);
        let back: ViewerPaceFile =
            serde_json::from_slice(&serde_json::to_vec(&f).unwrap()).unwrap();
        assert_eq!(back, f);
        assert_eq!(back.load_at(now), Some(late_load()));
        let v2 = ViewerPaceFile { version: 2, ..f };
        assert_eq!(v2.load_at(now), None);
    }
}
