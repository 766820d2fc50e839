//! HKDF with SHA-256 (RFC 5869), over HMAC-SHA-256.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use zeroize::Zeroizing;

type HmacSha256 = Hmac<Sha256>;

/// Length of a SHA-256 output, bytes (the pseudorandom key's length).
pub const HASH_LEN: usize = 32;
/// Longest output of one expansion, bytes (RFC 5869: 255 hash lengths).
pub const MAX_OUTPUT_LEN: usize = 255 * HASH_LEN;

/// HKDF-Extract: the pseudorandom key of `ikm` under `salt`. Wiped on drop.
pub fn extract(salt: &[u8], ikm: &[u8]) -> Zeroizing<[u8; HASH_LEN]> {
    let mut mac = new_mac(salt);
    mac.update(ikm);
    let mut prk = Zeroizing::new([0u8; HASH_LEN]);
    prk.copy_from_slice(&mac.finalize().into_bytes());
    prk
}

/// HKDF-Expand: fills `out` (at most [`MAX_OUTPUT_LEN`] bytes; longer is cut there) from
/// `prk` and `info`.
pub fn expand(prk: &[u8; HASH_LEN], info: &[u8], out: &mut [u8]) {
    let n = out.len().min(MAX_OUTPUT_LEN);
    let mut previous: Zeroizing<Vec<u8>> = Zeroizing::new(Vec::new());
    for (i, chunk) in out[..n].chunks_mut(HASH_LEN).enumerate() {
        let mut mac = new_mac(prk);
        mac.update(&previous);
        mac.update(info);
        // At most 255 chunks (the length is bounded above).
        mac.update(&[u8::try_from(i + 1).unwrap_or(u8::MAX)]);
        let t = mac.finalize().into_bytes();
        chunk.copy_from_slice(&t[..chunk.len()]);
        previous = Zeroizing::new(t.to_vec());
    }
}

/// An HMAC-SHA-256 under `key` (HMAC takes keys of any length).
fn new_mac(key: &[u8]) -> HmacSha256 {
    match <HmacSha256 as Mac>::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => unreachable!("HMAC accepts keys of every length"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::tests::h;

    #[test]
    fn matches_rfc_5869_test_case_1() {
        let ikm = h("0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b");
        let salt = h("000102030405060708090a0b0c");
        let info = h("f0f1f2f3f4f5f6f7f8f9");
        let prk = extract(&salt, &ikm);
        assert_eq!(
            crate::hex(prk.as_ref()),
            "077709362c2e32df0ddc3f0dc47bba6390b6c73bb50f9c3122ec844ad7c2b3e5"
        );
        let mut okm = [0u8; 42];
        expand(&prk, &info, &mut okm);
        assert_eq!(
            crate::hex(&okm),
            "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865"
        );
    }

    #[test]
    fn matches_rfc_5869_test_case_3_empty_salt_and_info() {
        let ikm = h("0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b");
        let prk = extract(&[], &ikm);
        let mut okm = [0u8; 42];
        expand(&prk, &[], &mut okm);
        assert_eq!(
            crate::hex(&okm),
            "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8"
        );
    }
}
