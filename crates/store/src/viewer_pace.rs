//! The viewers' pacing signal shared through the volume: `isnode serve` samples what its
//! data plane sees of its viewers (streams, late streams, smallest playback slack, session
//! reads) every [`SAMPLE_EVERY_MS`] while there are viewers and rewrites
//! `VOLUME/run/viewer-pace.json` when a change would change the pace of background work
//! (other changes at most every [`REFRESH_MS`]: [`WriteRule`]); the background work of
//! other processes on the same volume (`isnode volume rebuild`, `isnode volume scrub`)
//! reads it and paces itself exactly as the server's own background scrub does
//! ([`crate::pace::paced_rate_bps`]). The server holds an exclusive flock on
//! `VOLUME/run/viewer-pace.lock` while it runs ([`ServerMark`]): the file counts only while
//! that lock is held ([`server_running`]), so an idle server need not rewrite it to say it
//! is alive, and a server that died (its lock released by the kernel) is seen gone at once.
//! A file that is missing, unreadable, of another version, or without the lock held means
//! no server runs: full rate (docs/format.md, "viewer-pace.json").

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::pace::{paced_rate_bps, RateSignal, ViewerLoad};

/// How often the server samples its viewers' load while it has viewers, milliseconds
/// (without viewers it samples every [`IDLE_SAMPLE_MS`], and at once when a stream starts).
pub const SAMPLE_EVERY_MS: u64 = 200;
/// How often the server samples without viewers, milliseconds.
pub const IDLE_SAMPLE_MS: u64 = 1_000;
/// A change that does not change the pace (the count of streams, say) is written at most
/// this long after the last write, milliseconds.
pub const REFRESH_MS: u64 = 1_000;
/// A change of the smallest playback slack (within the range that scales the pace) of at
/// least this much is written at once, milliseconds (about 5 % of the pace).
pub const SLACK_STEP_MS: i64 = 50;
/// The file's version (2: the lock says whether it counts; version 1 files were fresh for
/// 1 s after their write).
pub const VERSION: u32 = 2;
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

    /// The load it says, if it is of this version (whether it counts is the lock's to
    /// say: [`server_running`]).
    pub fn load(&self) -> Option<ViewerLoad> {
        (self.version == VERSION).then_some(ViewerLoad {
            streams: self.streams,
            min_slack_ms: self.min_slack_ms,
            session_reads: self.session_reads,
            late_streams: self.late_streams,
        })
    }
}

/// When the server rewrites the file (sans-IO: the caller gives the loads and the clock):
/// at the first sample; at once when a change would change the pace of background work
/// (streams come or go, a stream is late or no longer, session reads start or stop, the
/// smallest slack moves by [`SLACK_STEP_MS`] within the scaling range); any other change
/// [`REFRESH_MS`] after the last write at the latest; never while nothing changes.
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
                paces_differently(last, load)
                    || (last != load && now_ms.saturating_sub(at_ms) >= REFRESH_MS)
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

/// `VOLUME/run/viewer-pace.lock`.
pub fn lock_path(volume: &Path) -> PathBuf {
    volume.join("run").join("viewer-pace.lock")
}

/// A running server's mark: an exclusive flock on [`lock_path`], held until dropped (and
/// released by the kernel if the process dies).
#[derive(Debug)]
pub struct ServerMark {
    _file: File,
}

impl ServerMark {
    /// Takes the mark of a server on `volume` (an exclusive flock) without waiting;
    /// `Ok(None)` while another process holds the lock (another server on the volume, or a
    /// reader looking for a few microseconds: try again later).
    pub fn take(volume: &Path) -> std::io::Result<Option<ServerMark>> {
        std::fs::create_dir_all(volume.join("run"))?;
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(lock_path(volume))?;
        Ok(match try_flock(&file, libc::LOCK_EX)? {
            Locked::Yes => Some(ServerMark { _file: file }),
            Locked::Busy => None,
        })
    }
}

/// Whether a non-blocking flock was taken.
enum Locked {
    Yes,
    Busy,
}

/// Tries the flock `op` (`LOCK_EX` or `LOCK_SH`) on `file` without waiting.
fn try_flock(file: &File, op: libc::c_int) -> std::io::Result<Locked> {
    // SAFETY: flock on a valid open descriptor.
    if unsafe { libc::flock(file.as_raw_fd(), op | libc::LOCK_NB) } == 0 {
        return Ok(Locked::Yes);
    }
    let err = std::io::Error::last_os_error();
    match err.raw_os_error() == Some(libc::EWOULDBLOCK) {
        true => Ok(Locked::Busy),
        false => Err(err),
    }
}

/// Whether a server holds its mark on `volume` ([`ServerMark`]): a shared lock cannot be
/// taken (readers' shared locks never stand in each other's way). No lock file, or one
/// nobody holds: no server.
pub fn server_running(volume: &Path) -> bool {
    let Ok(file) = File::open(lock_path(volume)) else {
        return false;
    };
    // A shared lock taken is released with `file`.
    matches!(try_flock(&file, libc::LOCK_SH), Ok(Locked::Busy))
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

/// The least share of its rate a rebuild beside a server keeps while the viewers hold it
/// back: one part in this many ([`rebuild_floor_bps`]).
pub const REBUILD_FLOOR_PARTS: u64 = 32;

/// The default floor of a rebuild beside a server whose rate is `cap_bps` (`None`:
/// [`BESIDE_SERVER_RATE_BPS`]): a member being rebuilt is what makes the viewers' reads
/// costly (each of its blocks rebuilt from all the others), so the rebuild never stops.
pub fn rebuild_floor_bps(cap_bps: Option<u64>) -> u64 {
    cap_bps.unwrap_or(BESIDE_SERVER_RATE_BPS) / REBUILD_FLOOR_PARTS
}

/// The [`RateSignal`] of a command beside a server: without a fresh file, its `--rate-bps`
/// (or no limit); with one, that rate (or [`BESIDE_SERVER_RATE_BPS`]) scaled by the
/// file's load ([`paced_rate_bps`]: nothing while a stream is late), but never below its
/// floor ([`FileSignal::with_floor_bps`]).
#[derive(Debug)]
pub struct FileSignal {
    volume: PathBuf,
    cap_bps: Option<u64>,
    floor_bps: u64,
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
            floor_bps: 0,
            last: None,
            held_back: 0,
        }
    }

    /// The least rate it keeps beside a server, however its viewers fare (never more
    /// than its rate; 0: none, the viewers may stop it).
    pub fn with_floor_bps(mut self, floor_bps: u64) -> FileSignal {
        self.floor_bps = floor_bps;
        self
    }
}

impl RateSignal for FileSignal {
    fn rate_bps(&mut self) -> Option<u64> {
        self.last = read(&self.volume)
            .filter(|_| server_running(&self.volume))
            .and_then(|f| f.load());
        let Some(load) = self.last else {
            return Some(self.cap_bps.unwrap_or(u64::MAX));
        };
        let base = self.cap_bps.unwrap_or(BESIDE_SERVER_RATE_BPS);
        let rate = paced_rate_bps(base, load).max(self.floor_bps.min(base));
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
    fn the_file_counts_while_a_server_holds_its_mark() {
        let dir = tempfile::tempdir().unwrap();
        let mut sig = FileSignal::new(dir.path(), Some(8_000_000));
        assert_eq!(sig.rate_bps(), Some(8_000_000), "no file: full rate");
        let now = SystemTime::now();
        write(dir.path(), &ViewerPaceFile::new(late_load(), now)).unwrap();
        assert!(!server_running(dir.path()));
        assert_eq!(
            sig.rate_bps(),
            Some(8_000_000),
            "no server holds the lock: full rate"
        );
        let mark = ServerMark::take(dir.path())
            .unwrap()
            .expect("no other server");
        assert!(server_running(dir.path()));
        assert!(
            server_running(dir.path()),
            "looking does not take the mark away"
        );
        assert_eq!(sig.rate_bps(), Some(0), "a late stream: nothing");
        assert_eq!(sig.last, Some(late_load()));
        // However old: the server writes only when the load changes.
        let old = now - Duration::from_secs(3600);
        write(dir.path(), &ViewerPaceFile::new(late_load(), old)).unwrap();
        assert_eq!(
            sig.rate_bps(),
            Some(0),
            "an old file of a running server counts"
        );
        std::fs::write(path(dir.path()), b"{not json").unwrap();
        assert_eq!(sig.rate_bps(), Some(8_000_000), "unreadable: full rate");
        std::fs::write(path(dir.path()), vec![b' '; 5000]).unwrap();
        assert!(read(dir.path()).is_none(), "too large");
        remove(dir.path());
        assert!(read(dir.path()).is_none());
        let mut uncapped = FileSignal::new(dir.path(), None);
        assert_eq!(uncapped.rate_bps(), Some(u64::MAX), "no file: no limit");
        let calm = ViewerLoad {
            streams: 1,
            min_slack_ms: Some(5_000),
            ..ViewerLoad::default()
        };
        write(dir.path(), &ViewerPaceFile::new(calm, SystemTime::now())).unwrap();
        assert_eq!(uncapped.rate_bps(), Some(BESIDE_SERVER_RATE_BPS));
        assert_eq!(uncapped.held_back, 0);
        write(dir.path(), &ViewerPaceFile::new(late_load(), now)).unwrap();
        assert!(
            ServerMark::take(dir.path()).unwrap().is_none(),
            "one mark at a time"
        );
        drop(mark);
        assert!(!server_running(dir.path()), "the server went (or died)");
        assert_eq!(sig.rate_bps(), Some(8_000_000), "left behind: full rate");
    }

    fn streams(n: u32, slack_ms: i64) -> ViewerLoad {
        ViewerLoad {
            streams: n,
            min_slack_ms: Some(slack_ms),
            ..ViewerLoad::default()
        }
    }

    #[test]
    fn written_when_the_pace_would_change_other_changes_later_no_change_never() {
        let mut rule = WriteRule::default();
        let idle = ViewerLoad::default();
        assert!(rule.due(idle, 0), "the first sample");
        assert!(!rule.due(idle, 200), "no change");
        assert!(!rule.due(idle, 100 * REFRESH_MS), "no change, however long");
        let t = 100 * REFRESH_MS;
        assert!(rule.due(streams(1, 850), t + 10), "a stream came");
        assert!(
            !rule.due(streams(7, 860), t + 20),
            "more streams, slack within a step: later"
        );
        assert!(rule.due(streams(7, 790), t + 30), "the slack fell a step");
        assert!(
            !rule.due(streams(7, 780), t + 40),
            "within a step of the last written"
        );
        assert!(
            rule.due(streams(7, 780), t + 30 + REFRESH_MS),
            "a change, a refresh later"
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
        let more_reads = ViewerLoad {
            session_reads: 9,
            ..reads
        };
        assert!(!r.due(more_reads, 50), "more reads: the same pace");
        assert!(r.due(idle, 60), "the streams went");
    }

    #[test]
    fn the_file_round_trips_and_checks_its_version() {
        let now = SystemTime::now();
        let f = ViewerPaceFile::new(late_load(), now);
        let back: ViewerPaceFile =
            serde_json::from_slice(&serde_json::to_vec(&f).unwrap()).unwrap();
        assert_eq!(back, f);
        assert_eq!(back.load(), Some(late_load()));
        let v1 = ViewerPaceFile { version: 1, ..f };
        assert_eq!(v1.load(), None);
    }

    #[test]
    fn a_floor_keeps_a_rebuild_moving_while_a_stream_is_late() {
        let dir = tempfile::tempdir().unwrap();
        let _mark = ServerMark::take(dir.path())
            .unwrap()
            .expect("no other server");
        write(
            dir.path(),
            &ViewerPaceFile::new(late_load(), SystemTime::now()),
        )
        .unwrap();
        let mut none = FileSignal::new(dir.path(), Some(8_000_000));
        assert_eq!(none.rate_bps(), Some(0), "no floor: held at 0");
        let floor = rebuild_floor_bps(Some(8_000_000));
        assert_eq!(floor, 250_000);
        let mut floored = FileSignal::new(dir.path(), Some(8_000_000)).with_floor_bps(floor);
        assert_eq!(floored.rate_bps(), Some(250_000));
        assert_eq!(floored.held_back, 1, "still held back below its rate");
        let mut capped = FileSignal::new(dir.path(), Some(100)).with_floor_bps(1_000);
        assert_eq!(capped.rate_bps(), Some(100), "never above its rate");
        assert_eq!(rebuild_floor_bps(None), BESIDE_SERVER_RATE_BPS / 32);
    }
}
