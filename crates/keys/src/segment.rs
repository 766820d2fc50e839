//! HLS AES-128 segments (RFC 8216 §5.2): AES-128-CBC with PKCS#7 padding, one IV each.

use aes::cipher::{block_padding::Pkcs7, BlockDecryptMut, BlockEncryptMut, KeyIvInit};
use rand::RngCore;

use crate::content::ContentKey;
use crate::{KeyError, IV_LEN};

type Enc = cbc::Encryptor<aes::Aes128>;
type Dec = cbc::Decryptor<aes::Aes128>;

/// The length of `clear_len` bytes once encrypted: padded to the next multiple of 16
/// (PKCS#7 always adds 1 to 16 bytes).
pub fn cipher_len(clear_len: u64) -> u64 {
    (clear_len / 16 + 1) * 16
}

/// A new random IV.
pub fn random_iv() -> [u8; IV_LEN] {
    let mut iv = [0u8; IV_LEN];
    rand::rng().fill_bytes(&mut iv);
    iv
}

/// `clear` encrypted under `key` and `iv`, padded (PKCS#7).
pub fn encrypt(key: &ContentKey, iv: &[u8; IV_LEN], clear: &[u8]) -> Vec<u8> {
    Enc::new(key.expose().into(), iv.into()).encrypt_padded_vec_mut::<Pkcs7>(clear)
}

/// `buf` (clear bytes) encrypted in place under `key` and `iv`, padded (PKCS#7): it grows
/// to [`cipher_len`] of its clear length. The same bytes as [`encrypt`], without a second
/// buffer (reserve 16 bytes beyond the clear ones to spare a reallocation).
pub fn encrypt_in_place(key: &ContentKey, iv: &[u8; IV_LEN], buf: &mut Vec<u8>) {
    let clear_len = buf.len();
    buf.resize(clear_len - clear_len % 16 + 16, 0);
    // The buffer holds a whole padded block more than the clear bytes: padding cannot fail.
    if let Ok(c) =
        Enc::new(key.expose().into(), iv.into()).encrypt_padded_mut::<Pkcs7>(buf, clear_len)
    {
        let n = c.len();
        buf.truncate(n);
    }
}

/// `cipher` decrypted under `key` and `iv`, its padding removed.
pub fn decrypt(key: &ContentKey, iv: &[u8; IV_LEN], cipher: &[u8]) -> Result<Vec<u8>, KeyError> {
    if cipher.is_empty() || cipher.len() % 16 != 0 {
        return Err(KeyError::Decrypt(
            "its length is not a positive multiple of 16",
        ));
    }
    Dec::new(key.expose().into(), iv.into())
        .decrypt_padded_vec_mut::<Pkcs7>(cipher)
        .map_err(|_| KeyError::Decrypt("bad padding (wrong key or IV)"))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn round_trips_and_pads_every_length() {
        let key = ContentKey::generate();
        let iv = random_iv();
        for len in [0usize, 1, 15, 16, 17, 188 * 7, 4096] {
            let clear: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let c = encrypt(&key, &iv, &clear);
            assert_eq!(c.len() as u64, cipher_len(len as u64));
            assert_eq!(decrypt(&key, &iv, &c).expect("decrypts"), clear);
        }
    }

    #[test]
    fn in_place_gives_the_same_bytes_as_a_second_buffer() {
        let key = ContentKey::generate();
        let iv = random_iv();
        for len in [0usize, 1, 15, 16, 17, 188 * 7, 65_537] {
            let clear: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            let mut buf = clear.clone();
            encrypt_in_place(&key, &iv, &mut buf);
            assert_eq!(buf, encrypt(&key, &iv, &clear), "length {len}");
        }
    }

    #[test]
    fn matches_the_nist_cbc_vector() {
        // NIST SP 800-38A F.2.1, CBC-AES128.Encrypt, first block (then PKCS#7's block).
        let key = ContentKey::from_slice(&h("2b7e151628aed2a6abf7158809cf4f3c")).unwrap();
        let iv: [u8; 16] = h("000102030405060708090a0b0c0d0e0f").try_into().unwrap();
        let c = encrypt(&key, &iv, &h("6bc1bee22e409f96e93d7e117393172a"));
        assert_eq!(crate::hex(&c[..16]), "7649abac8119b246cee98e9b12e9197d");
        assert_eq!(c.len(), 32);
    }

    #[test]
    fn a_wrong_key_does_not_decrypt_to_the_clear_text() {
        let (a, b) = (ContentKey::generate(), ContentKey::generate());
        let iv = random_iv();
        let clear = vec![0x47u8; 188 * 10];
        let c = encrypt(&a, &iv, &clear);
        assert!(decrypt(&b, &iv, &c).map_or(true, |d| d != clear));
        assert!(decrypt(&a, &iv, &c[..17]).is_err());
    }

    pub(crate) fn h(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }
}
