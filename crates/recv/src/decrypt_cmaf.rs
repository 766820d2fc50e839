//! `isnode play` of a CMAF title stored as CENC `cbcs` (issue 32): a writer under the
//! playout that walks the object's top-level boxes as their bytes arrive and writes the
//! clear file (`isnode_media::cenc_clear`): the `moov` without its protection boxes, each
//! `moof` + `mdat` decrypted once both are whole, an `mfra`'s offsets moved back, any other
//! box as it is. The playout, repair and resume stay on the ciphertext.

use std::io::{self, Write};

use isnode_keys::content::{BlockKey, ContentKey};
use isnode_media::cenc::Track;
use isnode_media::cenc_clear::{clear_fragment, clear_moov, BlockDecipher};

/// Largest `moov` or `mfra` held, bytes (as `ingest --encrypt` reads them).
const MAX_MOOV_BYTES: u64 = 64 << 20;
/// Largest `mdat` of one fragment held, bytes (as `ingest --encrypt` reads them).
const MAX_MDAT_BYTES: u64 = 512 << 20;

/// The content key as `isnode_media`'s block decipher.
struct Decipher(BlockKey);

impl BlockDecipher for Decipher {
    fn decrypt_block(&self, block: &mut [u8; 16]) {
        self.0.decrypt_block(block);
    }
}

/// A top-level box header: its type, header length and total length.
#[derive(Clone, Copy, Debug)]
struct Header {
    kind: [u8; 4],
    len: u64,
}

/// The header of the box at the start of `buf` (`None`: not all of it is there yet);
/// `left` is how many bytes of the object remain from there (a size of 0 runs to its end).
fn header(buf: &[u8], left: u64) -> io::Result<Option<Header>> {
    let (Some(size), Some(kind)) = (buf.get(..4), buf.get(4..8)) else {
        return Ok(None);
    };
    let mut k = [0u8; 4];
    k.copy_from_slice(kind);
    let size32 = u32::from_be_bytes([size[0], size[1], size[2], size[3]]);
    let (hdr, len) = match size32 {
        0 => (8, left),
        1 => match buf.get(8..16) {
            Some(b) => {
                let mut l = [0u8; 8];
                l.copy_from_slice(b);
                (16, u64::from_be_bytes(l))
            }
            None => return Ok(None),
        },
        n => (8, u64::from(n)),
    };
    if len < hdr || len > left {
        return Err(io::Error::other(format!(
            "a box {:?} of {len} bytes where {left} remain: not the CMAF title's boxes",
            String::from_utf8_lossy(&k)
        )));
    }
    Ok(Some(Header { kind: k, len }))
}

/// Writes the clear CMAF file of the ciphertext written to it (from the object's first
/// byte).
pub(crate) struct CmafWriter {
    inner: Box<dyn Write + Send>,
    key: Decipher,
    /// Past this the key decrypts no further fragment (the licence's expiry).
    expires_unix_s: Option<u64>,
    /// The object's length, bytes.
    object_len: u64,
    /// Object bytes taken so far (`buf` starts at `taken - buf.len()`).
    taken: u64,
    /// Clear bytes written so far.
    written: u64,
    buf: Vec<u8>,
    /// Bytes of a box copied as it is still to pass through.
    passing: u64,
    /// The encrypted tracks and the constant IV, once the `moov` is read.
    tracks: Option<(Vec<Track>, [u8; 16])>,
    /// Each fragment's first byte in the object and in the clear file (for `mfra`).
    moved: Vec<(u64, u64)>,
    /// What becomes of an `mfra`.
    mfra: Mfra,
}

/// What the writer does with an `mfra` (the fragment random-access index).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mfra {
    /// Writes it with its offsets moved to the clear file's fragments (from the start).
    Remap,
    /// Leaves it out (from a later fragment: it names fragments not written).
    Drop,
}

impl CmafWriter {
    /// A writer of the clear file to `out`, for an object of `object_len` bytes encrypted
    /// under `key`.
    pub(crate) fn new(
        out: Box<dyn Write + Send>,
        key: &ContentKey,
        object_len: u64,
        expires_unix_s: Option<u64>,
    ) -> Self {
        CmafWriter {
            inner: out,
            key: Decipher(BlockKey::new(key)),
            expires_unix_s,
            object_len,
            taken: 0,
            written: 0,
            buf: Vec::new(),
            passing: 0,
            tracks: None,
            moved: Vec::new(),
            mfra: Mfra::Remap,
        }
    }

    /// This writer fed from object byte `start` (a fragment's first) instead of the first:
    /// it first writes the clear form of `init` (the object's bytes before its first
    /// fragment, which must end with the `moov`), and leaves the `mfra` out.
    pub(crate) fn starting_at_fragment(mut self, init: &[u8], start: u64) -> io::Result<Self> {
        let init_len = init.len() as u64;
        if start < init_len || start > self.object_len {
            return Err(io::Error::other(format!(
                "byte {start} is not a fragment of the encrypted title (its init segment is \
                 {init_len} bytes of {})",
                self.object_len
            )));
        }
        self.write_all(init)?;
        if self.tracks.is_none() || self.passing > 0 || !self.buf.is_empty() {
            return Err(io::Error::other(
                "the encrypted title's init segment does not end with its moov",
            ));
        }
        self.taken = start;
        self.mfra = Mfra::Drop;
        Ok(self)
    }

    /// The object byte `buf` starts at.
    fn at(&self) -> u64 {
        self.taken - self.buf.len() as u64
    }

    /// Writes clear bytes on.
    fn emit(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.inner.write_all(bytes)?;
        self.written += bytes.len() as u64;
        Ok(())
    }

    /// Handles what `buf` holds: whole boxes, or a box passing through.
    fn drain(&mut self) -> io::Result<()> {
        loop {
            if self.passing > 0 {
                let n = self.passing.min(self.buf.len() as u64) as usize;
                if n == 0 {
                    return Ok(());
                }
                let chunk: Vec<u8> = self.buf.drain(..n).collect();
                self.emit(&chunk)?;
                self.passing -= n as u64;
                continue;
            }
            let left = self.object_len.saturating_sub(self.at());
            let Some(h) = header(&self.buf, left)? else {
                return Ok(());
            };
            if !self.one_box(h, left)? {
                return Ok(());
            }
        }
    }

    /// Handles the box `h` at the start of `buf` if it is whole there (or starts passing
    /// it through); whether it did.
    fn one_box(&mut self, h: Header, left: u64) -> io::Result<bool> {
        let len = usize::try_from(h.len).map_err(io::Error::other)?;
        match &h.kind {
            b"moov" | b"mfra" if h.len > MAX_MOOV_BYTES => Err(too_big(h, MAX_MOOV_BYTES)),
            b"moov" | b"mfra" if self.buf.len() < len => Ok(false),
            b"moov" => {
                let boxed: Vec<u8> = self.buf.drain(..len).collect();
                let cm = clear_moov(boxed.get(8..).unwrap_or_default()).map_err(cenc)?;
                self.emit(&cm.moov)?;
                self.tracks = Some((cm.tracks, cm.iv));
                Ok(true)
            }
            b"mfra" if self.mfra == Mfra::Drop => {
                self.buf.drain(..len);
                Ok(true)
            }
            b"mfra" => {
                let boxed: Vec<u8> = self.buf.drain(..len).collect();
                let moved = &self.moved;
                let find = |old: u64| {
                    let i = moved.binary_search_by_key(&old, |m| m.0).ok()?;
                    moved.get(i).map(|m| m.1)
                };
                let out = isnode_media::cenc_fragment::remap_mfra(
                    boxed.get(8..).unwrap_or_default(),
                    &find,
                )
                .map_err(cenc)?;
                self.emit(&out)?;
                Ok(true)
            }
            b"moof" => self.fragment(h, left),
            _ if self.mfra == Mfra::Drop && self.moved.is_empty() => {
                Err(io::Error::other(format!(
                    "byte {} of the encrypted CMAF title starts no fragment (a {:?})",
                    self.at(),
                    String::from_utf8_lossy(&h.kind)
                )))
            }
            b"mdat" => Err(io::Error::other(
                "an mdat outside a fragment: not a CMAF title",
            )),
            _ => {
                self.passing = h.len;
                Ok(true)
            }
        }
    }

    /// Decrypts the fragment (`moof` `h` and the `mdat` after it) once both are in `buf`;
    /// whether it did.
    fn fragment(&mut self, h: Header, left: u64) -> io::Result<bool> {
        let moof_len = usize::try_from(h.len).map_err(io::Error::other)?;
        if h.len > isnode_media::cenc::MAX_MOOF_BYTES as u64 {
            return Err(too_big(h, isnode_media::cenc::MAX_MOOF_BYTES as u64));
        }
        let rest = self.buf.get(moof_len..).unwrap_or_default();
        let Some(m) = header(rest, left - h.len)? else {
            return Ok(false);
        };
        if &m.kind != b"mdat" {
            return Err(io::Error::other(
                "a moof not followed by its mdat: not a CMAF title",
            ));
        }
        if m.len > MAX_MDAT_BYTES {
            return Err(too_big(m, MAX_MDAT_BYTES));
        }
        let mdat_len = usize::try_from(m.len).map_err(io::Error::other)?;
        if rest.len() < mdat_len {
            return Ok(false);
        }
        if let Some(e) = self
            .expires_unix_s
            .filter(|&e| e <= crate::decrypt::now_unix_s())
        {
            return Err(io::Error::other(format!(
                "the title's key expired at {e} (seconds since the epoch) before the fragment \
                 at byte {}",
                self.at()
            )));
        }
        let Some((tracks, iv)) = &self.tracks else {
            return Err(io::Error::other("a moof before the moov: not a CMAF title"));
        };
        let (old_at, new_at) = (self.at(), self.written);
        let moof: Vec<u8> = self.buf.drain(..moof_len).collect();
        let mut mdat: Vec<u8> = self.buf.drain(..mdat_len).collect();
        let out = clear_fragment(&moof, &mut mdat, tracks, iv, &self.key).map_err(|e| {
            io::Error::other(format!(
                "the fragment at byte {old_at} of the encrypted title: {e} (its bytes were lost)"
            ))
        })?;
        self.emit(&out)?;
        self.emit(&mdat)?;
        self.moved.push((old_at, new_at));
        Ok(true)
    }
}

fn too_big(h: Header, max: u64) -> io::Error {
    io::Error::other(format!(
        "a {:?} of {} bytes (at most {max} are held)",
        String::from_utf8_lossy(&h.kind),
        h.len
    ))
}

fn cenc(e: isnode_media::cenc::CencError) -> io::Error {
    io::Error::other(format!("the encrypted CMAF title: {e}"))
}

impl Write for CmafWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.taken.saturating_add(data.len() as u64) > self.object_len {
            return Err(io::Error::other("bytes past the encrypted title's end"));
        }
        self.buf.extend_from_slice(data);
        self.taken += data.len() as u64;
        self.drain()?;
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}
