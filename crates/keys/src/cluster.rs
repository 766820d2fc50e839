//! The cluster key: edges that fill the same origin version derive the same content key,
//! key id and IVs from it, so that their ciphertexts are byte-identical (a client's
//! failover from one edge's fill to another's keeps working on encrypted titles).
//!
//! The file is a node key file's twin (32 bytes as 64 hexadecimal digits, mode 0600,
//! refused when its group or others may read it); every edge of a cluster holds the same
//! one. The derivation (docs/format.md, "Keys derived from the cluster key"):
//!
//! - `PRK = HKDF-Extract(salt = "isnode cluster key v1", IKM = the cluster key)`
//! - each value is `HKDF-Expand(PRK, info, 16)` with
//!   `info = label || 0x00 || u32be(len(name)) || name || u32be(len(etag)) || etag`
//!   (and `|| u32be(index)` for a segment's IV); labels `content key`, `key id`, `iv`
//!   (CENC `cbcs`'s constant IV) and `segment iv` (HLS AES-128, one per segment).

use std::path::Path;

use zeroize::Zeroizing;

use crate::content::ContentKey;
use crate::hkdf::{self, HASH_LEN};
use crate::{KeyError, IV_LEN, KEY_ID_LEN};

/// The HKDF salt of every derivation from a cluster key.
const SALT: &[u8] = b"isnode cluster key v1";

/// A cluster key. `Debug` shows nothing of it; the bytes are wiped on drop.
pub struct ClusterKey {
    prk: Zeroizing<[u8; HASH_LEN]>,
}

impl std::fmt::Debug for ClusterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterKey(..)")
    }
}

impl ClusterKey {
    /// Reads the cluster key at `path` (the node key file's format and checks).
    pub fn load(path: &Path) -> Result<Self, KeyError> {
        let bytes = crate::node_key::read_key_file(path, "cluster key file")?;
        Ok(Self::from_bytes(bytes.as_ref()))
    }

    /// The key of `bytes` (tests; a file is read with [`ClusterKey::load`]).
    pub fn from_bytes(bytes: &[u8]) -> Self {
        ClusterKey {
            prk: hkdf::extract(SALT, bytes),
        }
    }

    /// What the title `name` at origin version `etag` is encrypted with.
    pub fn derive(&self, name: &str, etag: &str) -> DerivedTitle {
        let mut info = Vec::with_capacity(64 + name.len() + etag.len());
        for part in [name.as_bytes(), etag.as_bytes()] {
            // Names and ETags are bounded far below 4 GiB (catalog validation).
            info.extend_from_slice(&u32::try_from(part.len()).unwrap_or(u32::MAX).to_be_bytes());
            info.extend_from_slice(part);
        }
        let prk = Zeroizing::new(*self.prk);
        let key = Zeroizing::new(expand16(&prk, b"content key", &info));
        DerivedTitle {
            key: ContentKey::from_array(*key),
            key_id: expand16(&prk, b"key id", &info),
            iv: expand16(&prk, b"iv", &info),
            prk,
            info,
        }
    }
}

/// 16 bytes of `label` over `info`.
fn expand16(prk: &[u8; HASH_LEN], label: &[u8], info: &[u8]) -> [u8; 16] {
    let mut full = Vec::with_capacity(label.len() + 1 + info.len());
    full.extend_from_slice(label);
    full.push(0);
    full.extend_from_slice(info);
    let mut out = [0u8; 16];
    hkdf::expand(prk, &full, &mut out);
    out
}

/// The content key, key id and IVs of one title at one origin version, derived from the
/// cluster key. `Debug` shows the key id only.
pub struct DerivedTitle {
    key: ContentKey,
    key_id: [u8; KEY_ID_LEN],
    iv: [u8; IV_LEN],
    prk: Zeroizing<[u8; HASH_LEN]>,
    info: Vec<u8>,
}

impl std::fmt::Debug for DerivedTitle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DerivedTitle")
            .field("key_id", &crate::hex(&self.key_id))
            .finish_non_exhaustive()
    }
}

impl DerivedTitle {
    /// The content key.
    pub fn key(&self) -> &ContentKey {
        &self.key
    }

    /// The key id.
    pub fn key_id(&self) -> [u8; KEY_ID_LEN] {
        self.key_id
    }

    /// The title's constant IV (CENC `cbcs`).
    pub fn iv(&self) -> [u8; IV_LEN] {
        self.iv
    }

    /// The IV of segment `index` (HLS AES-128).
    pub fn segment_iv(&self, index: u32) -> [u8; IV_LEN] {
        let mut info = self.info.clone();
        info.extend_from_slice(&index.to_be_bytes());
        expand16(&self.prk, b"segment iv", &info)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_same_key_name_and_etag_derive_the_same_values_and_others_do_not() {
        let a = ClusterKey::from_bytes(&[7u8; 32]).derive("movie.ts", "\"e1\"");
        let b = ClusterKey::from_bytes(&[7u8; 32]).derive("movie.ts", "\"e1\"");
        assert_eq!(a.key().expose(), b.key().expose());
        assert_eq!((a.key_id(), a.iv()), (b.key_id(), b.iv()));
        assert_eq!(a.segment_iv(3), b.segment_iv(3));
        assert_ne!(a.segment_iv(3), a.segment_iv(4));
        let others = [
            ClusterKey::from_bytes(&[8u8; 32]).derive("movie.ts", "\"e1\""),
            ClusterKey::from_bytes(&[7u8; 32]).derive("movie.ts", "\"e2\""),
            ClusterKey::from_bytes(&[7u8; 32]).derive("movie.t", "s\"e1\""),
        ];
        for o in &others {
            assert_ne!(o.key().expose(), a.key().expose());
            assert_ne!(o.key_id(), a.key_id());
            assert_ne!(o.iv(), a.iv());
        }
        let distinct = [
            a.key().expose().to_vec(),
            a.key_id().to_vec(),
            a.iv().to_vec(),
        ];
        assert_ne!(distinct[0], distinct[1]);
        assert_ne!(distinct[1], distinct[2]);
    }

    #[test]
    fn the_file_is_checked_like_a_node_key_and_nothing_prints_the_key() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("cluster.key");
        std::fs::write(&p, format!("{}\n", "ab".repeat(32))).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = ClusterKey::load(&p).unwrap_err().to_string();
        assert!(e.contains("cluster key file") && e.contains("0600"), "{e}");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        let k = ClusterKey::load(&p).unwrap();
        let t = k.derive("a", "b");
        let same = ClusterKey::from_bytes(&[0xab; 32]).derive("a", "b");
        assert_eq!(t.key().expose(), same.key().expose());
        let key_hex = crate::hex(t.key().expose());
        for text in [format!("{k:?}"), format!("{t:?}")] {
            assert!(
                !text.contains(&key_hex) && !text.contains(&"ab".repeat(32)),
                "{text}"
            );
        }
    }
}
