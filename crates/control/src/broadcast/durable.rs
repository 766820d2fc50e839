//! Durable broadcast epochs: the broadcasts started by request (`POST /v1/broadcasts`) are
//! kept in the volume directory ([`FILE`]), so that a server restarted after `kill -9`, a
//! crash or SIGTERM starts them again at the same phase of their timetable: a receiver
//! tuned in before the restart keeps its schedule. The file holds each broadcast's object,
//! scheme, channels' groups and ports, its epoch (τ = 0) and end as wall-clock time; it is
//! rewritten whole on every start and stop (to a temporary file, fsynced, renamed over the
//! old one, the directory fsynced). A server shutting down leaves it as it is; a broadcast
//! stopped by `DELETE` or by its end leaves it. Automatic broadcasts (`--broadcast auto`)
//! are not kept: they start again on demand. Format: `docs/format.md`, "broadcasts.json".

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The file's name in the volume directory.
pub const FILE: &str = "broadcasts.json";
/// The version of the file's format.
pub const VERSION: u32 = 1;
/// The file is refused above this size (it holds at most [`super::MAX_BROADCASTS`]).
pub const MAX_FILE_BYTES: u64 = 4 << 20;

/// One kept broadcast.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Kept {
    /// Its id (kept across the restart).
    pub id: String,
    /// The object's name.
    pub object: String,
    /// The scheme's name and parameters as requested.
    pub scheme: String,
    /// Skyscraper's width cap, if given.
    pub width: Option<u64>,
    /// Quasi-/polyharmonic's m, if given.
    pub m: Option<u32>,
    /// The longest wait of the plan, seconds.
    pub max_wait_s: f64,
    /// Each channel's source and repair group and port.
    pub channels: Vec<(SocketAddr, SocketAddr)>,
    /// Its epoch (τ = 0), unix time, ns.
    pub epoch_unix_ns: u64,
    /// When it ends, unix time, ns.
    pub end_unix_ns: u64,
    /// The title and rung it sends, when it is one rung of a title's broadcast (absent in
    /// files written before titles were broadcast).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rung: Option<isnode_proto::broadcast::BroadcastRung>,
}

/// The file's contents.
#[derive(Debug, Serialize, Deserialize)]
struct KeptFile {
    version: u32,
    broadcasts: Vec<Kept>,
}

/// Why the kept broadcasts could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DurableError {
    /// Reading or writing the file failed.
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    /// The file is not a valid broadcasts file.
    #[error("{0}")]
    Invalid(String),
}

/// Writes `kept` to `dir`/[`FILE`] durably (temporary file, fsync, rename, directory fsync);
/// with nothing to keep, the file is removed (a volume without kept broadcasts has none).
pub fn write(dir: &Path, kept: &[Kept]) -> Result<(), DurableError> {
    let path = dir.join(FILE);
    let tmp = dir.join(format!("{FILE}.tmp"));
    let io = |what: &str| {
        let what = format!("{what} {}", path.display());
        move |e| DurableError::Io(what, e)
    };
    if kept.is_empty() {
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io("removing")(e)),
        }
        return std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io("syncing the directory of"));
    }
    let body = serde_json::to_vec_pretty(&KeptFile {
        version: VERSION,
        broadcasts: kept.to_vec(),
    })
    .map_err(|e| DurableError::Invalid(e.to_string()))?;
    let mut f = std::fs::File::create(&tmp).map_err(io("creating"))?;
    f.write_all(&body).map_err(io("writing"))?;
    f.sync_all().map_err(io("syncing"))?;
    drop(f);
    std::fs::rename(&tmp, &path).map_err(io("publishing"))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("syncing the directory of"))
}

/// The broadcasts kept in `dir` (none if there is no file).
pub fn read(dir: &Path) -> Result<Vec<Kept>, DurableError> {
    let path = dir.join(FILE);
    let io = |what: &str| {
        let what = format!("{what} {}", path.display());
        move |e| DurableError::Io(what, e)
    };
    let len = match std::fs::metadata(&path) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io("reading")(e)),
    };
    if len > MAX_FILE_BYTES {
        return Err(DurableError::Invalid(format!(
            "{} has {len} bytes, more than {MAX_FILE_BYTES}",
            path.display()
        )));
    }
    let body = std::fs::read(&path).map_err(io("reading"))?;
    let file: KeptFile = serde_json::from_slice(&body)
        .map_err(|e| DurableError::Invalid(format!("{}: {e}", path.display())))?;
    if file.version != VERSION {
        return Err(DurableError::Invalid(format!(
            "{}: version {}, this server reads {VERSION}",
            path.display(),
            file.version
        )));
    }
    Ok(file.broadcasts)
}

/// What a kept broadcast is at unix time `now_unix_ns`: `None` once it has ended; else
/// how long its timetable has run and how long it has to run, ns.
pub fn phase(k: &Kept, now_unix_ns: u64) -> Option<(u64, u64)> {
    if now_unix_ns >= k.end_unix_ns {
        return None;
    }
    Some((
        now_unix_ns.saturating_sub(k.epoch_unix_ns),
        k.end_unix_ns - now_unix_ns,
    ))
}

/// The unix time now, ns.
pub fn unix_now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(id: &str) -> Kept {
        Kept {
            id: id.into(),
            object: "t.ts".into(),
            scheme: "fast".into(),
            width: None,
            m: Some(2),
            max_wait_s: 2.0,
            channels: vec![(
                "239.255.0.1:5000".parse().unwrap(),
                "239.255.0.2:5000".parse().unwrap(),
            )],
            epoch_unix_ns: 1_000,
            end_unix_ns: 5_000,
            rung: None,
        }
    }

    #[test]
    fn kept_broadcasts_read_back_as_written() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()).unwrap(), vec![]);
        let mut rung = kept("b");
        rung.rung = Some(isnode_proto::broadcast::BroadcastRung {
            title: "show".into(),
            rendition: 1,
            bitrate_bps: 500_000,
            width: Some(640),
            height: Some(360),
            codecs: "avc1.42C01E,mp4a.40.2".into(),
        });
        let all = vec![kept("a"), rung];
        write(dir.path(), &all).unwrap();
        assert_eq!(read(dir.path()).unwrap(), all);
        write(dir.path(), &all[1..]).unwrap();
        assert_eq!(read(dir.path()).unwrap(), &all[1..]);
        assert!(!dir.path().join(format!("{FILE}.tmp")).exists());
    }

    /// A file written before titles were broadcast (no `rung`) reads as plain broadcasts.
    #[test]
    fn a_file_without_rungs_reads() {
        let dir = tempfile::tempdir().unwrap();
        let old = r#"{"version":1,"broadcasts":[{"id":"a","object":"t.ts","scheme":"fast",
            "width":null,"m":2,"max_wait_s":2.0,
            "channels":[["239.255.0.1:5000","239.255.0.2:5000"]],
            "epoch_unix_ns":1000,"end_unix_ns":5000}]}"#;
        std::fs::write(dir.path().join(FILE), old).unwrap();
        assert_eq!(read(dir.path()).unwrap(), vec![kept("a")]);
    }

    #[test]
    fn a_damaged_file_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE), b"{\"version\":1,\"broad").unwrap();
        let e = read(dir.path()).unwrap_err().to_string();
        assert!(e.contains(FILE), "{e}");
        std::fs::write(dir.path().join(FILE), b"{\"version\":9,\"broadcasts\":[]}").unwrap();
        assert!(read(dir.path())
            .unwrap_err()
            .to_string()
            .contains("version 9"));
    }

    #[test]
    fn the_phase_runs_from_the_epoch_to_the_end() {
        let k = kept("a");
        assert_eq!(phase(&k, 1_500), Some((500, 3_500)));
        assert_eq!(phase(&k, 500), Some((0, 4_500)));
        assert_eq!(phase(&k, 5_000), None);
    }
}
