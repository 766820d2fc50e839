//! Content protection keys (issue 32; docs/format.md, "Protection tables").
//!
//! - The **node key** ([`node_key::NodeKey`]): 32 random bytes in a file of their own
//!   (64 hexadecimal digits), mode 0600 and refused when its group or others may read it;
//!   `node.key` in the volume unless the configuration names another file, made on first
//!   use with `O_EXCL`. It wraps the content keys and never leaves the node.
//! - A **content key** per encrypted object ([`content::ContentKey`]): 16 random bytes
//!   (AES-128), kept in the catalog only wrapped by the node key with AES-KW (RFC 3394,
//!   AES-256 key-encryption key), 24 bytes; named by a random 16-byte key id.
//! - **Segments** ([`segment`]): HLS `METHOD=AES-128`, each segment AES-128-CBC with
//!   PKCS#7 padding under its own random IV (RFC 8216 §5.2).
//!
//! No type here prints key bytes: `Debug` is written by hand and shows ids only, and the
//! errors never carry key material.

pub mod b64url;
pub mod cluster;
pub mod content;
pub mod hkdf;
pub mod node_key;
pub mod segment;

/// Name of the node key file in the volume directory when the configuration names none.
pub const NODE_KEY_FILE: &str = "node.key";
/// Length of a content key, bytes (AES-128).
pub const CONTENT_KEY_LEN: usize = 16;
/// Length of a content key wrapped with AES-KW, bytes.
pub const WRAPPED_KEY_LEN: usize = CONTENT_KEY_LEN + 8;
/// Length of a key id, bytes.
pub const KEY_ID_LEN: usize = 16;
/// Length of an AES-CBC initialisation vector, bytes.
pub const IV_LEN: usize = 16;
/// Length of a node key, bytes (AES-256 key-encryption key).
pub const NODE_KEY_LEN: usize = 32;
/// Length of a node key's id, bytes (a hash of the key: which node key wrapped a row).
pub const NODE_KEY_ID_LEN: usize = 8;

/// What can go wrong with keys. No variant carries key bytes.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// Reading or writing a key file.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, naming the file.
        context: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A node key file that may not be used, and why.
    #[error("{what} {path}: {why}")]
    BadFile {
        /// Which kind of key file (a node key file, a cluster key file).
        what: &'static str,
        /// The file.
        path: String,
        /// Why it is refused.
        why: String,
    },
    /// A wrapped key that does not unwrap under this node key.
    #[error(
        "a content key does not unwrap under node key {node_key_id} (wrapped under \
         another node key, or the row is damaged)"
    )]
    Unwrap {
        /// The id of the node key tried.
        node_key_id: String,
    },
    /// A stored value of the wrong length.
    #[error("{what} is {got} bytes, not {want}")]
    Length {
        /// What it is.
        what: &'static str,
        /// Its length.
        got: usize,
        /// The length it must have.
        want: usize,
    },
    /// A ciphertext that does not decrypt (wrong key or IV, or not a multiple of 16).
    #[error("a segment does not decrypt: {0}")]
    Decrypt(&'static str),
}

/// Lowercase hexadecimal of `bytes` (ids and IVs; never keys outside the key route).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
