//! When each token was last used (`isnode token list`).
//!
//! The server records the time in memory on each successful authentication ([`LastUse::touch`]:
//! a short lock, no I/O) and writes it to a side file next to the token file
//! ([`side_path`]: `tokens.last-used.json` for `tokens.json`) at most every
//! [`FLUSH_INTERVAL_S`] seconds, off the request path, and once more when it stops. The
//! write is crash-safe (temporary file, fsync, rename): a crash loses at most the last
//! interval's times, never the file. The token file itself is written only by
//! `isnode token`, so the two writers never overwrite each other's changes.
//!
//! The side file is JSON, `{"last_used_unix_s": {"<sha256 of the token, hex>": SECONDS}}`,
//! keyed by the token's hash (a name may be reused after a revoke); hashes no longer in
//! the token file are dropped at the next write.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::{read_small, TokenError, TokenStore};

/// Longest time between two writes of the side file while tokens are used, seconds.
pub const FLUSH_INTERVAL_S: u64 = 60;
/// Largest side file read, bytes.
const MAX_FILE_BYTES: u64 = 4 << 20;

/// The side file of the token file at `tokens_path`.
pub fn side_path(tokens_path: &Path) -> PathBuf {
    tokens_path.with_extension("last-used.json")
}

#[derive(Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct SideFile {
    last_used_unix_s: HashMap<String, u64>,
}

/// The times read from the side file at `path` (empty if there is none).
pub fn read(path: &Path) -> Result<HashMap<String, u64>, TokenError> {
    let Some(text) = read_small(path, MAX_FILE_BYTES)? else {
        return Ok(HashMap::new());
    };
    let file: SideFile = serde_json::from_str(&text).map_err(|e| TokenError::Invalid {
        path: path.to_path_buf(),
        why: e.to_string(),
    })?;
    Ok(file.last_used_unix_s)
}

/// Writes `times` to `path` atomically (temporary file, fsync, rename, directory fsync),
/// mode 0600.
fn write(path: &Path, times: HashMap<String, u64>) -> Result<(), TokenError> {
    let io = |context, source| TokenError::Io {
        context,
        path: path.to_path_buf(),
        source,
    };
    let text = serde_json::to_vec_pretty(&SideFile {
        last_used_unix_s: times,
    })
    .map_err(|e| io("encoding", std::io::Error::other(e)))?;
    super::write_private(path, &text).map_err(|(what, e)| io(what, e))
}

#[derive(Default)]
struct Times {
    by_hash: HashMap<String, u64>,
    /// Changed since the last write.
    dirty: bool,
}

/// The last use of each token, in memory, and its side file.
#[derive(Default)]
pub struct LastUse {
    times: Mutex<Times>,
}

impl LastUse {
    /// The times of the side file at `path`; none if it is missing or unreadable (the
    /// times are a record for the operator: a broken file is replaced at the next write).
    pub fn load(path: &Path) -> LastUse {
        let by_hash = read(path).unwrap_or_else(|e| {
            tracing::warn!("token last-use file ignored: {e}");
            HashMap::new()
        });
        LastUse {
            times: Mutex::new(Times {
                by_hash,
                dirty: false,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Times> {
        self.times.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records that the token of hash `sha256` authenticated a request at `now_unix_s`.
    pub fn touch(&self, sha256: &str, now_unix_s: u64) {
        let mut t = self.lock();
        match t.by_hash.get_mut(sha256) {
            Some(s) if *s >= now_unix_s => {}
            Some(s) => {
                *s = now_unix_s;
                t.dirty = true;
            }
            None => {
                t.by_hash.insert(sha256.to_string(), now_unix_s);
                t.dirty = true;
            }
        }
    }

    /// When the token of hash `sha256` was last used, if it was.
    pub fn get(&self, sha256: &str) -> Option<u64> {
        self.lock().by_hash.get(sha256).copied()
    }

    /// Writes the times of the tokens of `tokens` to `path` if they changed since the last
    /// write; whether it wrote. Blocking: call it off the request path.
    pub fn flush(&self, path: &Path, tokens: &TokenStore) -> Result<bool, TokenError> {
        let times = {
            let mut t = self.lock();
            if !t.dirty {
                return Ok(false);
            }
            t.by_hash
                .retain(|h, _| tokens.records().iter().any(|r| r.sha256 == *h));
            t.dirty = false;
            t.by_hash.clone()
        };
        write(path, times).inspect_err(|_| self.lock().dirty = true)?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Role;

    #[test]
    fn uses_are_kept_written_when_changed_and_pruned_of_revoked_tokens() {
        let dir = tempfile::tempdir().unwrap();
        let tokens_path = dir.path().join("tokens.json");
        let path = side_path(&tokens_path);
        assert_eq!(path, dir.path().join("tokens.last-used.json"));
        let mut store = TokenStore::default();
        store.add("a", &[Role::Viewer], 1).unwrap();
        store.add("b", &[Role::Metrics], 1).unwrap();
        let (ha, hb) = (
            store.find("a").unwrap().sha256.clone(),
            store.find("b").unwrap().sha256.clone(),
        );
        let lu = LastUse::load(&path);
        assert!(!lu.flush(&path, &store).unwrap(), "nothing to write");
        assert!(!path.exists());
        lu.touch(&ha, 100);
        lu.touch(&ha, 90); // never back in time
        lu.touch(&hb, 50);
        assert_eq!(lu.get(&ha), Some(100));
        assert!(lu.flush(&path, &store).unwrap());
        assert!(!lu.flush(&path, &store).unwrap(), "unchanged: not written");
        let read_back = read(&path).unwrap();
        assert_eq!(read_back.get(&ha), Some(&100));
        assert_eq!(read_back.get(&hb), Some(&50));
        // Survives a restart, and a revoked token's time goes at the next write.
        let lu = LastUse::load(&path);
        assert_eq!(lu.get(&hb), Some(50));
        assert!(store.revoke("b"));
        lu.touch(&ha, 200);
        assert!(lu.flush(&path, &store).unwrap());
        let read_back = read(&path).unwrap();
        assert_eq!(read_back.len(), 1);
        assert_eq!(read_back.get(&ha), Some(&200));
        // A broken file is ignored on load (and replaced at the next write).
        std::fs::write(&path, "{ nope").unwrap();
        assert!(read(&path).is_err());
        assert_eq!(LastUse::load(&path).get(&ha), None);
    }
}
