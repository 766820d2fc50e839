//! Role tokens (docs/protocol.md, "Authentication"): 256-bit random values, kept in the
//! token file only as SHA-256 hashes and compared in constant time.
//!
//! The file is JSON (`{"tokens": [{"name", "roles", "sha256", "created_unix_s"}]}`),
//! written atomically (temp file, fsync, rename) with mode 0600. When each token was last
//! used is kept beside it by the server ([`last_use`]).

pub mod last_use;
pub mod throttle;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Name of the token file in the volume directory when `--tokens-file` is not given.
pub const DEFAULT_TOKENS_FILE: &str = "tokens.json";
/// Length of a token, bytes (sent as 64 lowercase hexadecimal digits).
pub const TOKEN_BYTES: usize = 32;
/// Largest token file read, bytes.
const MAX_FILE_BYTES: u64 = 4 << 20;
/// Longest token name, bytes.
const MAX_NAME_BYTES: usize = 64;

/// What a token may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Objects, sessions, content, HLS, digests, repair packets, broadcast descriptions.
    Viewer,
    /// Upload, delete, broadcasts create/delete, volume operations.
    Operator,
    /// `/metrics` and the status routes.
    Metrics,
}

impl Role {
    /// Every role: the role, its name, a line of help (what the CLI lists).
    pub const CHOICES: &'static [(Role, &'static str, &'static str)] = &[
        (
            Role::Viewer,
            "viewer",
            "Objects, sessions, content, HLS, digests, repair packets, broadcast descriptions",
        ),
        (
            Role::Operator,
            "operator",
            "Upload, delete, broadcasts create/delete, volume operations",
        ),
        (Role::Metrics, "metrics", "`/metrics` and the status routes"),
    ];

    /// The role's name in the token file and in error messages.
    pub fn name(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Metrics => "metrics",
        }
    }
}

/// One token as kept in the file: its hash, never the token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRecord {
    /// Unique name (for `isnode token list` and `revoke`).
    pub name: String,
    /// Roles the token holds (at least one).
    pub roles: Vec<Role>,
    /// SHA-256 of the token's 32 bytes, lowercase hexadecimal.
    pub sha256: String,
    /// When it was made, seconds since the Unix epoch.
    pub created_unix_s: u64,
    /// When it stops being accepted, seconds since the Unix epoch (`None`: never; `isnode
    /// token add --expires-in-s`). Keys and licences handed to it carry this expiry too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_unix_s: Option<u64>,
}

impl TokenRecord {
    /// Whether the token holds `role`.
    pub fn has(&self, role: Role) -> bool {
        self.roles.contains(&role)
    }

    /// Whether the token has expired at `now_unix_s`.
    pub fn expired(&self, now_unix_s: u64) -> bool {
        self.expires_unix_s.is_some_and(|e| now_unix_s >= e)
    }
}

/// Why a token file could not be read, written or changed.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// Reading or writing the file failed.
    #[error("{context} {path}: {source}")]
    Io {
        /// What was being done.
        context: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not a valid token file.
    #[error("token file {path}: {why}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// A request to change the store is not valid.
    #[error("{0}")]
    Usage(String),
}

#[derive(Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct TokenFile {
    tokens: Vec<TokenRecord>,
}

/// The tokens the server accepts, with their hashes decoded.
#[derive(Clone, Debug, Default)]
pub struct TokenStore {
    records: Vec<TokenRecord>,
    hashes: Vec<[u8; 32]>,
}

/// SHA-256 of `token`.
fn hash(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Decodes exactly 32 bytes of lowercase or uppercase hexadecimal.
fn unhex32(s: &str) -> Option<[u8; 32]> {
    let b = s.as_bytes();
    if b.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (o, pair) in out.iter_mut().zip(b.chunks_exact(2)) {
        let s = std::str::from_utf8(pair).ok()?;
        *o = u8::from_str_radix(s, 16).ok()?;
    }
    Some(out)
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.' | b'@'))
}

impl TokenStore {
    /// Parses a token file's text; `path` names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<TokenStore, TokenError> {
        let invalid = |why: String| TokenError::Invalid {
            path: path.to_path_buf(),
            why,
        };
        let file: TokenFile = serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?;
        let mut store = TokenStore::default();
        for r in file.tokens {
            let h = unhex32(&r.sha256).ok_or_else(|| {
                invalid(format!("token {:?}: sha256 is not 64 hex digits", r.name))
            })?;
            if !valid_name(&r.name) || store.find(&r.name).is_some() {
                return Err(invalid(format!(
                    "token name {:?} is invalid or repeated",
                    r.name
                )));
            }
            if r.roles.is_empty() {
                return Err(invalid(format!("token {:?} has no role", r.name)));
            }
            store.records.push(r);
            store.hashes.push(h);
        }
        Ok(store)
    }

    /// Reads the token file at `path`: `None` if it does not exist.
    pub fn load(path: &Path) -> Result<Option<TokenStore>, TokenError> {
        match read_small(path, MAX_FILE_BYTES)? {
            Some(text) => TokenStore::parse(&text, path).map(Some),
            None => Ok(None),
        }
    }

    /// Loads the token file at `path` (empty if missing), applies `change` and writes it
    /// back, under an exclusive lock (`PATH.lock`, `flock`): two `isnode token` commands
    /// at once each see the other's change. What `change` returned.
    pub fn update<T>(
        path: &Path,
        change: impl FnOnce(&mut TokenStore) -> Result<T, TokenError>,
    ) -> Result<T, TokenError> {
        let _lock =
            lock_exclusive(&path.with_extension("json.lock")).map_err(|e| TokenError::Io {
                context: "locking",
                path: path.to_path_buf(),
                source: e,
            })?;
        let mut store = TokenStore::load(path)?.unwrap_or_default();
        let out = change(&mut store)?;
        store.save(path)?;
        Ok(out)
    }

    /// Writes the store to `path` atomically (temp file, fsync, rename, directory fsync),
    /// mode 0600.
    pub fn save(&self, path: &Path) -> Result<(), TokenError> {
        let io = |context, source| TokenError::Io {
            context,
            path: path.to_path_buf(),
            source,
        };
        let file = TokenFile {
            tokens: self.records.clone(),
        };
        let text = serde_json::to_vec_pretty(&file)
            .map_err(|e| io("encoding", std::io::Error::other(e)))?;
        write_private(path, &text).map_err(|(what, e)| io(what, e))
    }

    /// The tokens, in the file's order.
    pub fn records(&self) -> &[TokenRecord] {
        &self.records
    }

    /// The record named `name`.
    pub fn find(&self, name: &str) -> Option<&TokenRecord> {
        self.records.iter().find(|r| r.name == name)
    }

    /// The record of the token sent as `token_hex` (64 hexadecimal digits). Every stored
    /// hash is compared, in constant time each.
    pub fn lookup(&self, token_hex: &str) -> Option<&TokenRecord> {
        let token = unhex32(token_hex)?;
        let h = hash(&token);
        let mut found = None;
        for (r, stored) in self.records.iter().zip(&self.hashes) {
            if bool::from(stored.ct_eq(&h)) {
                found = Some(r);
            }
        }
        found
    }

    /// Adds a new random token named `name` with `roles`; returns it (64 hex digits),
    /// which is shown once and never stored.
    pub fn add(
        &mut self,
        name: &str,
        roles: &[Role],
        now_unix_s: u64,
    ) -> Result<String, TokenError> {
        self.add_expiring(name, roles, now_unix_s, None)
    }

    /// [`TokenStore::add`], the token refused from `expires_unix_s` on (`None`: never).
    pub fn add_expiring(
        &mut self,
        name: &str,
        roles: &[Role],
        now_unix_s: u64,
        expires_unix_s: Option<u64>,
    ) -> Result<String, TokenError> {
        if expires_unix_s.is_some_and(|e| e <= now_unix_s) {
            return Err(TokenError::Usage(
                "a token that expires before it is made".into(),
            ));
        }
        if !valid_name(name) {
            return Err(TokenError::Usage(format!(
                "token name {name:?}: 1 to {MAX_NAME_BYTES} of A-Z a-z 0-9 - _ . @"
            )));
        }
        if self.find(name).is_some() {
            return Err(TokenError::Usage(format!("a token named {name:?} exists")));
        }
        if roles.is_empty() {
            return Err(TokenError::Usage("a token needs at least one role".into()));
        }
        let mut roles = roles.to_vec();
        roles.sort_by_key(|r| r.name());
        roles.dedup();
        let token: [u8; TOKEN_BYTES] = rand::random();
        let h = hash(&token);
        self.records.push(TokenRecord {
            name: name.to_string(),
            roles,
            sha256: hex(&h),
            created_unix_s: now_unix_s,
            expires_unix_s,
        });
        self.hashes.push(h);
        Ok(hex(&token))
    }

    /// Removes the token named `name`; `false` if there is none.
    pub fn revoke(&mut self, name: &str) -> bool {
        match self.records.iter().position(|r| r.name == name) {
            Some(i) => {
                self.records.remove(i);
                self.hashes.remove(i);
                true
            }
            None => false,
        }
    }
}

/// The token file in force: `configured`, or [`DEFAULT_TOKENS_FILE`] in the volume.
pub fn tokens_path(volume_dir: &Path, configured: Option<&Path>) -> PathBuf {
    configured.map_or_else(|| volume_dir.join(DEFAULT_TOKENS_FILE), Path::to_path_buf)
}

#[cfg(test)]
mod tests;

/// An exclusive `flock` on the file at `path` (made, mode 0600, if missing), held until
/// the file is dropped; waited for at most [`LOCK_WAIT`].
fn lock_exclusive(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::fd::AsRawFd as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    loop {
        // SAFETY: flock on a descriptor this function owns; no memory is passed.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(f);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::WouldBlock || std::time::Instant::now() >= deadline {
            return Err(e);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// How long [`TokenStore::update`] waits for another command's lock.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Writes `bytes` to `path` with mode 0600, atomically and durably (a temporary file beside
/// it, fsync, rename, directory fsync); on failure, the step that failed and its error.
pub(crate) fn write_private(
    path: &std::path::Path,
    bytes: &[u8],
) -> Result<(), (&'static str, std::io::Error)> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    // This writer's own temporary file, made new (`O_EXCL`: never an existing file, whose
    // mode it would keep, nor a symlink, which it would follow). A stale one of the same
    // name (a crash) or anything planted there is removed, never followed.
    let tmp = path.with_extension(format!("json.{}.tmp", std::process::id()));
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(("removing a stale temporary file for", e))
        }
        _ => {}
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| ("creating the temporary file for", e))?;
    f.write_all(bytes).map_err(|e| ("writing", e))?;
    f.sync_all().map_err(|e| ("syncing", e))?;
    std::fs::rename(&tmp, path).map_err(|e| ("renaming onto", e))?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| ("syncing the directory of", e))?;
    }
    Ok(())
}

/// The text of the small file at `path` (at most `max_bytes` of it read): `None` if
/// it does not exist.
pub(crate) fn read_small(path: &Path, max_bytes: u64) -> Result<Option<String>, TokenError> {
    let io = |context, source| TokenError::Io {
        context,
        path: path.to_path_buf(),
        source,
    };
    let f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io("opening", e)),
    };
    let mut text = String::new();
    std::io::Read::read_to_string(&mut std::io::Read::take(f, max_bytes), &mut text)
        .map_err(|e| io("reading", e))?;
    Ok(Some(text))
}
