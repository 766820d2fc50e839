//! The node key: the key-encryption key of the content keys, in a file of its own.

use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use aes_kw::KekAes256;
use rand::RngCore;
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use crate::content::ContentKey;
use crate::{KeyError, CONTENT_KEY_LEN, NODE_KEY_ID_LEN, NODE_KEY_LEN, WRAPPED_KEY_LEN};

/// Largest node key file read, bytes (64 hexadecimal digits and a line end, with room).
const MAX_FILE_BYTES: u64 = 256;

/// The node key. `Debug` shows its id only; the bytes are wiped on drop.
pub struct NodeKey {
    bytes: Zeroizing<[u8; NODE_KEY_LEN]>,
    id: [u8; NODE_KEY_ID_LEN],
}

impl std::fmt::Debug for NodeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeKey")
            .field("id", &self.id_hex())
            .finish_non_exhaustive()
    }
}

impl NodeKey {
    fn from_bytes(bytes: Zeroizing<[u8; NODE_KEY_LEN]>) -> Self {
        let mut h = Sha256::new();
        h.update(b"isnode node key id v1\0");
        h.update(bytes.as_ref());
        let digest = h.finalize();
        let mut id = [0u8; NODE_KEY_ID_LEN];
        id.copy_from_slice(&digest[..NODE_KEY_ID_LEN]);
        NodeKey { bytes, id }
    }

    /// A new random node key (not written anywhere).
    pub fn generate() -> Self {
        let mut k = Zeroizing::new([0u8; NODE_KEY_LEN]);
        rand::rng().fill_bytes(k.as_mut());
        Self::from_bytes(k)
    }

    /// The key's id: the first 8 bytes of a SHA-256 of it (recorded beside each wrapped
    /// key, so that a key wrapped under another node key is named as such).
    pub fn id(&self) -> [u8; NODE_KEY_ID_LEN] {
        self.id
    }

    /// The id in hexadecimal.
    pub fn id_hex(&self) -> String {
        crate::hex(&self.id)
    }

    /// Reads the node key at `path`: a regular file of 64 hexadecimal digits (a line end
    /// allowed) that neither its group nor others may read or write.
    pub fn load(path: &Path) -> Result<Self, KeyError> {
        read_key_file(path, "node key file").map(Self::from_bytes)
    }

    /// Writes a new random node key to `path` (which must not exist: `O_EXCL`, mode 0600,
    /// synced) and returns it.
    pub fn create(path: &Path) -> Result<Self, KeyError> {
        let key = Self::generate();
        let io = |context: &str| {
            let context = format!("{context} node key file {}", path.display());
            move |e| KeyError::Io { context, source: e }
        };
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map_err(io("creating"))?;
        let mut text = Zeroizing::new(crate::hex(key.bytes.as_ref()));
        text.push('\n');
        f.write_all(text.as_bytes()).map_err(io("writing"))?;
        f.sync_all().map_err(io("syncing"))?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(io("syncing the directory of"))?;
        }
        Ok(key)
    }

    /// The node key at `path`, made there first when there is no file (a fresh volume);
    /// `true` when it was made now. Two processes racing to make it: one makes it, the
    /// other reads it.
    pub fn load_or_create(path: &Path) -> Result<(Self, bool), KeyError> {
        match Self::create(path) {
            Ok(k) => Ok((k, true)),
            Err(KeyError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::AlreadyExists =>
            {
                Self::load(path).map(|k| (k, false))
            }
            Err(e) => Err(e),
        }
    }

    /// `key` wrapped with AES-KW (RFC 3394) under this node key.
    pub fn wrap(&self, key: &ContentKey) -> [u8; WRAPPED_KEY_LEN] {
        let kek = KekAes256::from(*self.bytes);
        let mut out = [0u8; WRAPPED_KEY_LEN];
        // 16 bytes in, 24 out: the only errors are of lengths, fixed here.
        if kek.wrap(key.expose(), &mut out).is_err() {
            unreachable!("AES-KW of 16 bytes into 24");
        }
        out
    }

    /// The content key `wrapped` holds, checked by AES-KW's integrity value.
    pub fn unwrap(&self, wrapped: &[u8]) -> Result<ContentKey, KeyError> {
        if wrapped.len() != WRAPPED_KEY_LEN {
            return Err(KeyError::Length {
                what: "a wrapped content key",
                got: wrapped.len(),
                want: WRAPPED_KEY_LEN,
            });
        }
        let kek = KekAes256::from(*self.bytes);
        let mut out = Zeroizing::new([0u8; CONTENT_KEY_LEN]);
        kek.unwrap(wrapped, out.as_mut())
            .map_err(|_| KeyError::Unwrap {
                node_key_id: self.id_hex(),
            })?;
        ContentKey::from_slice(out.as_ref())
    }
}

/// The 32 bytes of the key file at `path` (`what` names its kind in errors): a regular
/// file of 64 hexadecimal digits (a line end allowed) that neither its group nor others
/// may read or write, not a symbolic link.
pub(crate) fn read_key_file(
    path: &Path,
    what: &'static str,
) -> Result<Zeroizing<[u8; NODE_KEY_LEN]>, KeyError> {
    let bad = |why: String| KeyError::BadFile {
        what,
        path: path.display().to_string(),
        why,
    };
    let io = |context: &str| {
        let context = format!("{context} {what} {}", path.display());
        move |e| KeyError::Io { context, source: e }
    };
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(io("opening"))?;
    let meta = f.metadata().map_err(io("reading"))?;
    if !meta.is_file() {
        return Err(bad("not a regular file".into()));
    }
    let mode = meta.mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(bad(format!(
            "mode {mode:04o} lets its group or others use it; it must be 0600 \
             (chmod 600 the file)"
        )));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(bad(format!("{} bytes: not a key file", meta.len())));
    }
    let mut text = Zeroizing::new(String::new());
    (&mut f)
        .take(MAX_FILE_BYTES)
        .read_to_string(&mut text)
        .map_err(io("reading"))?;
    parse_hex(text.trim()).ok_or_else(|| {
        bad(format!(
            "not {} hexadecimal digits (make one with `isnode ingest --encrypt` on a \
             fresh volume, or `head -c 32 /dev/urandom | xxd -p -c 64`)",
            NODE_KEY_LEN * 2
        ))
    })
}

/// 32 bytes from 64 hexadecimal digits.
fn parse_hex(s: &str) -> Option<Zeroizing<[u8; NODE_KEY_LEN]>> {
    if s.len() != NODE_KEY_LEN * 2 || !s.is_ascii() {
        return None;
    }
    let mut out = Zeroizing::new([0u8; NODE_KEY_LEN]);
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn made_once_with_mode_0600_and_read_back() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("node.key");
        let (a, made) = NodeKey::load_or_create(&p).unwrap();
        assert!(made);
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let (b, made) = NodeKey::load_or_create(&p).unwrap();
        assert!(!made);
        assert_eq!(a.id(), b.id());
        let ck = ContentKey::generate();
        assert_eq!(b.unwrap(&a.wrap(&ck)).unwrap().expose(), ck.expose());
    }

    #[test]
    fn a_key_file_others_can_read_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("node.key");
        NodeKey::create(&p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = NodeKey::load(&p).unwrap_err().to_string();
        assert!(e.contains("0644") && e.contains("0600"), "{e}");
        std::fs::write(d.path().join("short"), "abcd").unwrap();
        let short = d.path().join("short");
        std::fs::set_permissions(&short, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(NodeKey::load(&short).is_err());
    }

    #[test]
    fn another_node_key_does_not_unwrap_and_nothing_prints_a_key() {
        let (a, b) = (NodeKey::generate(), NodeKey::generate());
        let ck = ContentKey::generate();
        let w = a.wrap(&ck);
        let e = b.unwrap(&w).unwrap_err().to_string();
        assert!(e.contains(&b.id_hex()), "{e}");
        let key_hex = crate::hex(ck.expose());
        let node_hex = crate::hex(a.bytes.as_ref());
        for text in [format!("{ck:?}"), format!("{a:?}"), e] {
            assert!(
                !text.contains(&key_hex) && !text.contains(&node_hex),
                "{text}"
            );
        }
    }

    #[test]
    fn matches_the_rfc_3394_vector() {
        // RFC 3394 §4.3: 128 bits of key data with a 256-bit KEK.
        let h = crate::segment::tests::h;
        let kek: [u8; 32] = h("000102030405060708090A0B0C0D0E0F101112131415161718191A1B1C1D1E1F")
            .try_into()
            .unwrap();
        let node = NodeKey::from_bytes(Zeroizing::new(kek));
        let ck = ContentKey::from_slice(&h("00112233445566778899AABBCCDDEEFF")).unwrap();
        assert_eq!(
            crate::hex(&node.wrap(&ck)),
            "64e8c3f9ce0f5ba263e9777905818a2a93c8191e7d6e8ae7"
        );
    }
}
