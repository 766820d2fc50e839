//! Content keys: one AES-128 key per encrypted object, its id, and its wrapped form.

use rand::RngCore;
use zeroize::Zeroizing;

use crate::{KeyError, CONTENT_KEY_LEN, KEY_ID_LEN};

/// An AES-128 content key. `Debug` shows nothing of it; the bytes are wiped on drop.
#[derive(Clone)]
pub struct ContentKey(Zeroizing<[u8; CONTENT_KEY_LEN]>);

impl std::fmt::Debug for ContentKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ContentKey(..)")
    }
}

impl ContentKey {
    /// A new random key (the operating system's generator).
    pub fn generate() -> Self {
        let mut k = Zeroizing::new([0u8; CONTENT_KEY_LEN]);
        rand::rng().fill_bytes(k.as_mut());
        ContentKey(k)
    }

    /// The key of `bytes` (a derived key).
    pub fn from_array(bytes: [u8; CONTENT_KEY_LEN]) -> Self {
        ContentKey(Zeroizing::new(bytes))
    }

    /// The key from its bytes (an unwrapped key, a key fetched from the key route).
    pub fn from_slice(bytes: &[u8]) -> Result<Self, KeyError> {
        let arr: [u8; CONTENT_KEY_LEN] = bytes.try_into().map_err(|_| KeyError::Length {
            what: "a content key",
            got: bytes.len(),
            want: CONTENT_KEY_LEN,
        })?;
        Ok(ContentKey(Zeroizing::new(arr)))
    }

    /// The key's bytes: what the key route answers a viewer, and the cipher's input.
    /// Nothing else should take them (never a log, an error or a metric).
    pub fn expose(&self) -> &[u8; CONTENT_KEY_LEN] {
        &self.0
    }
}

/// A new random key id (names a content key in the catalog and on the key route).
pub fn new_key_id() -> [u8; KEY_ID_LEN] {
    let mut id = [0u8; KEY_ID_LEN];
    rand::rng().fill_bytes(&mut id);
    id
}

/// AES-128 under a content key, one block at a time (CENC `cbcs` chains it itself).
/// `Debug` shows nothing of the key.
pub struct BlockKey(aes::Aes128);

impl std::fmt::Debug for BlockKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BlockKey(..)")
    }
}

impl BlockKey {
    /// The cipher of `key`.
    pub fn new(key: &ContentKey) -> Self {
        use aes::cipher::KeyInit;
        BlockKey(aes::Aes128::new(key.expose().into()))
    }

    /// Encrypts one block in place.
    pub fn encrypt_block(&self, block: &mut [u8; 16]) {
        use aes::cipher::BlockEncrypt;
        self.0.encrypt_block(block.into());
    }

    /// Decrypts one block in place.
    pub fn decrypt_block(&self, block: &mut [u8; 16]) {
        use aes::cipher::BlockDecrypt;
        self.0.decrypt_block(block.into());
    }
}
