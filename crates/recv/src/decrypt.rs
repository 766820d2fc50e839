//! `isnode play` of an encrypted title (issue 32). HLS AES-128 (MPEG-TS): the segments and
//! IVs from the title's playlist, the key from the key route (a viewer token), and a writer
//! under the playout that decrypts each segment once its ciphertext is whole and passes the
//! clear bytes on. CENC `cbcs` (CMAF, its playlist `SAMPLE-AES`): the same key, and the
//! writer of [`crate::decrypt_cmaf`], which writes the clear CMAF file. The playout, repair
//! and resume all stay on the ciphertext (the stored bytes).

use std::io::{self, Write};

use anyhow::{bail, Context};
use isnode_keys::content::ContentKey;

use crate::control::ControlClient;

/// Largest init segment (`ftyp` + `moov`) of a CMAF title fetched, bytes.
const MAX_INIT_BYTES: u64 = 64 << 20;
/// Most segments taken from a playlist.
const MAX_SEGMENTS: usize = 100_000;
/// Longest segment decrypted, bytes (held whole while its ciphertext arrives): what
/// `ingest --encrypt` writes at most (512 MiB of clear media, padded).
const MAX_SEGMENT_BYTES: u64 = (512 << 20) + 16;

/// One encrypted segment: its byte range of the object and its IV.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// First byte of its ciphertext in the object.
    pub offset: u64,
    /// Bytes of ciphertext.
    pub len: u64,
    /// Its IV.
    pub iv: [u8; 16],
}

/// How a title is encrypted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// HLS AES-128: these segments, each under its IV.
    Aes128(Vec<Segment>),
    /// CENC `cbcs` of a CMAF file (the IV and the samples are found in its boxes), with its
    /// init segment (what decrypting from a later fragment needs).
    Cbcs(Init),
}

/// The init segment of a CMAF title (the object's bytes before its first fragment).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Init {
    /// Fetched.
    Fetched(Vec<u8>),
    /// Not at hand, and why (an older server's playlist names none; the fetch failed): the
    /// title plays from its first byte only.
    Missing(String),
}

/// What decrypting a title needs. `Debug` shows no key.
#[derive(Clone, Debug)]
pub struct Protection {
    key: ContentKey,
    scheme: Scheme,
    /// When the key stops being good (seconds since the Unix epoch; `None`: never).
    expires_unix_s: Option<u64>,
}

/// Seconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn now_unix_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The segments of an HLS AES-128 playlist (every segment after its `#EXT-X-KEY` with an
/// explicit IV, byte ranges contiguous from 0); an error for anything else.
pub fn parse_playlist(text: &str) -> anyhow::Result<Vec<Segment>> {
    let mut out: Vec<Segment> = Vec::new();
    let mut iv = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("#EXT-X-KEY:") {
            let hex = rest
                .strip_prefix("METHOD=AES-128,")
                .and_then(|r| r.split_once(",IV=0x"))
                .map(|(_, h)| h)
                .context("a key line that is not METHOD=AES-128 with an IV")?;
            iv = Some(parse_iv(hex).context("a malformed IV")?);
        } else if let Some(range) = line.strip_prefix("#EXT-X-BYTERANGE:") {
            let (len, offset) = range.split_once('@').context("a byte range without @")?;
            let seg = Segment {
                offset: offset.trim().parse().context("a byte range's offset")?,
                len: len.trim().parse().context("a byte range's length")?,
                iv: iv.take().context("a segment without its key line")?,
            };
            let at = out.last().map_or(0, |s| s.offset + s.len);
            if seg.offset != at || seg.len == 0 || seg.len % 16 != 0 || seg.len > MAX_SEGMENT_BYTES
            {
                bail!(
                    "segment {} (bytes {}+{}) does not follow the one before",
                    out.len(),
                    seg.offset,
                    seg.len
                );
            }
            if out.len() >= MAX_SEGMENTS {
                bail!("more than {MAX_SEGMENTS} segments");
            }
            out.push(seg);
        }
    }
    if out.is_empty() {
        bail!("the playlist lists no encrypted segment");
    }
    Ok(out)
}

/// The init segment of the CMAF title `name` whose playlist is `text` (a failure is kept
/// for a start past the first byte to report: from the first byte it is not needed).
fn init_segment(control: &ControlClient, name: &str, text: &str) -> Init {
    match fetch_init(control, name, text) {
        Ok(bytes) => Init::Fetched(bytes),
        Err(e) => {
            tracing::debug!("the init segment of {name:?}: {e:#}");
            Init::Missing(format!("{e:#}"))
        }
    }
}

/// The bytes of the init segment the CMAF playlist `text` of title `name` names.
pub(crate) fn fetch_init(
    control: &ControlClient,
    name: &str,
    text: &str,
) -> anyhow::Result<Vec<u8>> {
    let (uri, range) = parse_map(text)?;
    control.object_range(name, &uri, range)
}

/// The init segment of a CMAF playlist: its `EXT-X-MAP`'s URI and byte range (offset,
/// length), starting at the object's first byte and at most [`MAX_INIT_BYTES`].
pub fn parse_map(text: &str) -> anyhow::Result<(String, (u64, u64))> {
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("#EXT-X-MAP:URI=\""))
        .context("a CMAF playlist without an EXT-X-MAP")?;
    let (uri, rest) = line
        .split_once('"')
        .context("an EXT-X-MAP URI without its end")?;
    let range = rest
        .strip_prefix(",BYTERANGE=\"")
        .and_then(|r| r.strip_suffix('"'))
        .context("an EXT-X-MAP without its byte range")?;
    let (len, offset) = range.split_once('@').context("a byte range without @")?;
    let len: u64 = len.parse().context("the init segment's length")?;
    let offset: u64 = offset.parse().context("the init segment's offset")?;
    if offset != 0 || len == 0 || len > MAX_INIT_BYTES {
        bail!("an init segment of {len} bytes at byte {offset} (one at byte 0, at most {MAX_INIT_BYTES})");
    }
    Ok((uri.to_string(), (offset, len)))
}

fn parse_iv(hex: &str) -> Option<[u8; 16]> {
    let hex = hex.trim();
    if hex.len() != 32 || !hex.is_ascii() {
        return None;
    }
    let mut iv = [0u8; 16];
    for (i, b) in iv.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(iv)
}

/// Fetches what decrypting `name` needs from the server: its playlist and its key (the
/// control client's token must hold the viewer role: without one, the server's `401`
/// names the role).
pub fn fetch(control: &ControlClient, name: &str) -> anyhow::Result<Protection> {
    let scheme = match control.hls_playlist(name)? {
        // An older server answers 501 for the HLS of a cbcs title.
        None => Scheme::Cbcs(Init::Missing("the server's playlist names none".into())),
        Some(text) if text.contains("#EXT-X-KEY:METHOD=SAMPLE-AES") => {
            Scheme::Cbcs(init_segment(control, name, &text))
        }
        Some(text) => Scheme::Aes128(
            parse_playlist(&text)
                .with_context(|| format!("reading the segments of the encrypted title {name:?}"))?,
        ),
    };
    let (key, expires_unix_s) = control
        .content_key(name)
        .with_context(|| format!("{name:?} is encrypted and its key is refused"))?;
    let key = ContentKey::from_slice(&key)?;
    if let Some(e) = expires_unix_s.filter(|&e| e <= now_unix_s()) {
        bail!("the key of {name:?} expired at {e} (seconds since the epoch): ask for a new token");
    }
    Ok(Protection {
        key,
        scheme,
        expires_unix_s,
    })
}

/// What decrypting the session `info` needs, and the object byte its output starts at
/// (`None`: a clear title).
pub(crate) fn for_session(
    control: &ControlClient,
    info: &isnode_proto::SessionInfo,
) -> anyhow::Result<Option<(Protection, u64)>> {
    if !info.encrypted {
        return Ok(None);
    }
    let protection = fetch(control, &info.object.name)?;
    Ok(Some((protection, output_start(info)?)))
}

/// The object byte the output of session `info` starts at: its start point, or its first
/// codeword's first byte.
pub(crate) fn output_start(info: &isnode_proto::SessionInfo) -> anyhow::Result<u64> {
    use crate::control::SessionInfoExt;
    Ok(match info.start_offset_bytes {
        Some(offset) => offset,
        None => {
            let part = info.params()?.partition()?;
            match info.start_codeword < part.blocks() {
                true => part.block_offset(info.start_codeword),
                false => 0,
            }
        }
    })
}

impl Protection {
    /// A writer of the clear media to `out`, fed the object's bytes (`object_len` in all)
    /// from byte `start` (which must start a segment; of a CMAF title, a fragment, whose
    /// clear output then starts with the title's clear init segment).
    pub fn writer(
        self,
        out: Box<dyn Write + Send>,
        start: u64,
        object_len: u64,
    ) -> anyhow::Result<Box<dyn Write + Send>> {
        let segments = match self.scheme {
            Scheme::Aes128(s) => s,
            Scheme::Cbcs(init) => {
                let w = crate::decrypt_cmaf::CmafWriter::new(
                    out,
                    &self.key,
                    object_len,
                    self.expires_unix_s,
                );
                return match (start, init) {
                    (0, _) => Ok(Box::new(w)),
                    (_, Init::Fetched(init)) => Ok(Box::new(w.starting_at_fragment(&init, start)?)),
                    (_, Init::Missing(why)) => bail!(
                        "no init segment of this encrypted CMAF title ({why}): it plays from \
                         its start only (byte {start} is not it)"
                    ),
                };
            }
        };
        let Some(next) = segments.iter().position(|s| s.offset == start) else {
            bail!(
                "an encrypted title plays from the start of a segment; byte {start} is not one \
                 (use --start-at SECONDS)"
            );
        };
        Ok(Box::new(DecryptWriter {
            inner: out,
            key: self.key,
            segments,
            expires_unix_s: self.expires_unix_s,
            next,
            buf: Vec::new(),
        }))
    }
}

/// Decrypts each segment once its ciphertext is whole.
struct DecryptWriter {
    inner: Box<dyn Write + Send>,
    key: ContentKey,
    segments: Vec<Segment>,
    /// Past this the key decrypts no further segment (the licence's expiry).
    expires_unix_s: Option<u64>,
    next: usize,
    buf: Vec<u8>,
}

impl Write for DecryptWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(data);
        while let Some(seg) = self.segments.get(self.next).copied() {
            let len = usize::try_from(seg.len).map_err(io::Error::other)?;
            if self.buf.len() < len {
                break;
            }
            if let Some(e) = self.expires_unix_s.filter(|&e| e <= now_unix_s()) {
                return Err(io::Error::other(format!(
                    "the title's key expired at {e} (seconds since the epoch) before segment {}",
                    self.next
                )));
            }
            let clear = isnode_keys::segment::decrypt(&self.key, &seg.iv, &self.buf[..len])
                .map_err(|e| {
                    io::Error::other(format!(
                        "segment {} of the encrypted title: {e} (its bytes were lost)",
                        self.next
                    ))
                })?;
            self.inner.write_all(&clear)?;
            self.buf.drain(..len);
            self.next += 1;
        }
        if self.next >= self.segments.len() && !self.buf.is_empty() {
            return Err(io::Error::other("bytes past the last encrypted segment"));
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn decrypts_segment_by_segment_whatever_the_writes() {
        let key = ContentKey::generate();
        let clear: Vec<Vec<u8>> = vec![vec![1; 1000], vec![2; 16], vec![3; 5]];
        let mut stored = Vec::new();
        let mut playlist = String::from("#EXTM3U\n");
        for (i, c) in clear.iter().enumerate() {
            let iv = [i as u8 + 1; 16];
            let ct = isnode_keys::segment::encrypt(&key, &iv, c);
            playlist.push_str(&format!(
                "#EXT-X-KEY:METHOD=AES-128,URI=\"key\",IV=0x{}\n#EXTINF:2.000,\n\
                 #EXT-X-BYTERANGE:{}@{}\ncontent\n",
                isnode_keys::hex(&iv),
                ct.len(),
                stored.len()
            ));
            stored.extend(ct);
        }
        let segments = parse_playlist(&playlist).unwrap();
        assert_eq!(segments.len(), 3);
        let out = Shared::default();
        let p = Protection {
            key: key.clone(),
            scheme: Scheme::Aes128(segments.clone()),
            expires_unix_s: None,
        };
        let mut w = p.writer(Box::new(out.clone()), 0, 0).unwrap();
        for chunk in stored.chunks(7) {
            w.write_all(chunk).unwrap();
        }
        assert_eq!(*out.0.lock().unwrap(), clear.concat());
        // From the second segment.
        let out = Shared::default();
        let p = Protection {
            key,
            scheme: Scheme::Aes128(segments),
            expires_unix_s: Some(u64::MAX),
        };
        let mut w = p.clone().writer(Box::new(out.clone()), 1008, 0).unwrap();
        w.write_all(&stored[1008..]).unwrap();
        assert_eq!(
            *out.0.lock().unwrap(),
            [&clear[1][..], &clear[2][..]].concat()
        );
        assert!(p.clone().writer(Box::new(io::sink()), 5, 0).is_err());
        // A key past its expiry decrypts nothing.
        let expired = Protection {
            expires_unix_s: Some(1),
            ..p
        };
        let out = Shared::default();
        let mut w = expired.writer(Box::new(out.clone()), 0, 0).unwrap();
        let e = w.write_all(&stored).unwrap_err().to_string();
        assert!(e.contains("expired"), "{e}");
        assert!(out.0.lock().unwrap().is_empty());
    }

    #[test]
    fn a_cmaf_playlists_init_segment_is_its_map_at_byte_0() {
        let text = "#EXTM3U\n#EXT-X-KEY:METHOD=SAMPLE-AES,URI=\"data:k\"\n\
                    #EXT-X-MAP:URI=\"content?isnode_version=3&ext=.mp4\",BYTERANGE=\"1234@0\"\n";
        let (uri, range) = parse_map(text).unwrap();
        assert_eq!(uri, "content?isnode_version=3&ext=.mp4");
        assert_eq!(range, (0, 1234));
        for bad in [
            "#EXT-X-MAP:URI=\"c\",BYTERANGE=\"1234@8\"\n",
            "#EXT-X-MAP:URI=\"c\",BYTERANGE=\"0@0\"\n",
            "#EXT-X-MAP:URI=\"c\",BYTERANGE=\"99999999999@0\"\n",
            "#EXT-X-MAP:URI=\"c\"\n",
            "#EXTM3U\n",
        ] {
            assert!(parse_map(bad).is_err(), "{bad}");
        }
        // A cbcs title from a later byte without its init segment: refused, nothing written.
        let p = Protection {
            key: ContentKey::generate(),
            scheme: Scheme::Cbcs(Init::Missing("none named".into())),
            expires_unix_s: None,
        };
        assert!(p.clone().writer(Box::new(io::sink()), 100, 1000).is_err());
        assert!(p.writer(Box::new(io::sink()), 0, 1000).is_ok());
        // An init segment that is no moov: refused.
        let p = Protection {
            key: ContentKey::generate(),
            scheme: Scheme::Cbcs(Init::Fetched(b"\0\0\0\x08free".to_vec())),
            expires_unix_s: None,
        };
        let e = p.writer(Box::new(io::sink()), 100, 1000).err().unwrap();
        assert!(e.to_string().contains("moov"), "{e}");
    }

    #[test]
    fn refuses_what_is_not_an_aes_128_playlist() {
        assert!(parse_playlist("#EXTM3U\n#EXT-X-BYTERANGE:16@0\ncontent\n").is_err());
        let gap = "#EXT-X-KEY:METHOD=AES-128,URI=\"k\",IV=0x000102030405060708090a0b0c0d0e0f\n\
                   #EXT-X-BYTERANGE:16@16\nc\n";
        assert!(parse_playlist(gap).is_err());
        assert!(parse_playlist("#EXT-X-KEY:METHOD=SAMPLE-AES,URI=\"k\",IV=0x00\n").is_err());
    }
}
