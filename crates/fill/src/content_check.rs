//! The content check of a fill against the origin's ETag, sans-IO: when the ETag is a plain
//! MD5 (32 hex digits: an S3 single-part upload, as Garage, MinIO and AWS give them), the
//! fill hashes the object's bytes in order and a mismatch at completion keeps the object
//! from becoming complete ([`super::run`]). A multipart ETag (`HEX-PARTS`), a weak one or
//! any other form (a `file://` origin's) is not a content hash: nothing is checked.

use md5::{Digest, Md5};

/// The running MD5 of a fill's bytes `0..hashed_bytes`, and the digest its ETag promises.
#[derive(Clone)]
pub(crate) struct ContentCheck {
    /// The ETag it was made for.
    etag: String,
    expected: [u8; 16],
    hasher: Md5,
    hashed_bytes: u64,
}

/// The MD5 an ETag is, if it is a plain one: 32 hex digits, quoted or not.
pub(crate) fn md5_of_etag(etag: &str) -> Option<[u8; 16]> {
    let t = etag.trim();
    let t = t
        .strip_prefix('"')
        .and_then(|x| x.strip_suffix('"'))
        .unwrap_or(t);
    if t.len() != 32 || !t.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(t.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

impl ContentCheck {
    /// The check of the version with `etag`, `None` when the ETag is no MD5.
    pub(crate) fn for_etag(etag: &str) -> Option<ContentCheck> {
        Some(ContentCheck {
            etag: etag.to_string(),
            expected: md5_of_etag(etag)?,
            hasher: Md5::new(),
            hashed_bytes: 0,
        })
    }

    /// The ETag it checks against.
    pub(crate) fn etag(&self) -> &str {
        &self.etag
    }

    /// Bytes hashed so far (the object's bytes `0..hashed_bytes`).
    pub(crate) fn hashed_bytes(&self) -> u64 {
        self.hashed_bytes
    }

    /// The object's next bytes, in order.
    pub(crate) fn update(&mut self, bytes: &[u8]) {
        self.hasher.update(bytes);
        self.hashed_bytes += bytes.len() as u64;
    }

    /// Starts again from byte 0 (a resume re-reads the stored prefix).
    pub(crate) fn restart(&mut self) {
        self.hasher = Md5::new();
        self.hashed_bytes = 0;
    }

    /// After the last byte: `Ok` when the bytes' MD5 is the ETag's, else why not.
    pub(crate) fn verdict(&self) -> Result<(), String> {
        let got: [u8; 16] = self.hasher.clone().finalize().into();
        if got == self.expected {
            return Ok(());
        }
        Err(format!(
            "the MD5 of the {} bytes received is {}, not the origin's ETag {}: the body is garbled",
            self.hashed_bytes,
            hex(&got),
            self.etag
        ))
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn only_plain_md5_etags_are_checked() {
        let md5 = "\"900150983cd24fb0d6963f7d28e17f72\"";
        assert_eq!(md5_of_etag(md5).map(|d| d[0]), Some(0x90));
        assert!(md5_of_etag("900150983CD24FB0D6963F7D28E17F72").is_some());
        for not in [
            "\"900150983cd24fb0d6963f7d28e17f72-3\"", // multipart
            "W/\"900150983cd24fb0d6963f7d28e17f72\"", // weak
            "\"1c2e3-5f1a-2000\"",                    // a file:// origin's
            "\"900150983cd24fb0d6963f7d28e17f7g\"",
            "",
        ] {
            assert!(ContentCheck::for_etag(not).is_none(), "{not}");
        }
    }

    #[test]
    fn a_flipped_byte_is_found() {
        let etag = "\"900150983cd24fb0d6963f7d28e17f72\""; // MD5("abc")
        let mut c = ContentCheck::for_etag(etag).unwrap();
        c.update(b"abc");
        assert_eq!(c.verdict(), Ok(()));
        let mut c = ContentCheck::for_etag(etag).unwrap();
        c.update(b"abd");
        let why = c.verdict().unwrap_err();
        assert!(why.contains("garbled"), "{why}");
        c.restart();
        c.update(b"ab");
        c.update(b"c");
        assert_eq!((c.verdict(), c.hashed_bytes()), (Ok(()), 3));
    }

    proptest! {
        /// However the bytes come in pieces, the verdict is the whole content's.
        #[test]
        fn chunking_does_not_matter(data in proptest::collection::vec(any::<u8>(), 0..4096), cuts in proptest::collection::vec(0usize..4096, 0..8), flip in proptest::option::of(0usize..4096)) {
            let etag = format!("\"{}\"", hex(&Md5::digest(&data)));
            let mut data = data;
            let flipped = match flip {
                Some(i) if i < data.len() => { data[i] ^= 1; true }
                _ => false,
            };
            let mut c = ContentCheck::for_etag(&etag).unwrap();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|x| x.min(data.len())).collect();
            cuts.sort_unstable();
            let mut at = 0;
            for cut in cuts.into_iter().chain([data.len()]) {
                c.update(&data[at..cut]);
                at = cut;
            }
            prop_assert_eq!(c.hashed_bytes(), data.len() as u64);
            prop_assert_eq!(c.verdict().is_ok(), !flipped);
        }
    }
}
