//! The bitrate and type of a title at the origin, probed as an upload's are
//! (`isnode_media`), from as few bytes as possible: an MPEG-TS from the fill's first range
//! (already fetched, pushed afterwards) and one small GET of its last packets; an MP4 from
//! its box headers and `moov`, read on demand in small chunks.

use std::collections::HashMap;
use std::sync::Mutex;

use isnode_media::{Container, ReadAt};

use crate::origin::{Origin, OriginError};

/// Bytes of the tail GET of an MPEG-TS: 348 packets (about 64 KiB).
const TS_TAIL_BYTES: u64 = 188 * 348;
/// Chunk of the on-demand reads of an MP4's boxes.
const CHUNK_BYTES: u64 = 64 << 10;
/// Most chunks an MP4 probe may read (4 MiB: `moov` of a long film fits).
const MAX_CHUNKS: usize = 64;

/// What the probe found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Probed {
    /// Bits per second.
    pub bitrate_bps: u64,
    /// MIME type.
    pub content_type: String,
    /// Origin requests the probe made, and the bytes they brought (counted as fill bytes).
    pub fetched: (u64, u64),
}

/// Why a title cannot be filled.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProbeError {
    /// Reading the origin failed.
    #[error(transparent)]
    Origin(#[from] OriginError),
    /// The bytes do not tell a bitrate (`502`, the object is not playable media).
    #[error("the origin object's bitrate cannot be told: {0}")]
    Media(String),
}

/// Probes the title `key` (`size` bytes, version `etag`) whose first bytes are `head`.
pub(crate) fn probe(
    rt: &tokio::runtime::Handle,
    origin: &Origin,
    key: &str,
    (size, etag): (u64, &str),
    head: &[u8],
) -> Result<Probed, ProbeError> {
    let sniff = &head[..head.len().min(isnode_media::DETECT_LEN)];
    let media = |e: isnode_media::MediaError| ProbeError::Media(e.to_string());
    let mut fetched = (0u64, 0u64);
    let info = match isnode_media::detect(sniff) {
        Container::MpegTs => {
            let tail_len = TS_TAIL_BYTES.min(size);
            let tail = match head.len() as u64 >= size {
                true => bytes::Bytes::new(),
                false => rt.block_on(origin.get_range(key, size - tail_len..size, etag))?,
            };
            if !tail.is_empty() {
                fetched = (1, tail.len() as u64);
            }
            isnode_media::probe_ts(head, &tail, size).map_err(media)?
        }
        Container::Mp4 => {
            let reader = Chunks {
                rt,
                origin,
                key,
                etag,
                size,
                head,
                chunks: Mutex::default(),
                error: Mutex::default(),
            };
            let info = isnode_media::probe(&reader, size);
            if let Some(e) = reader
                .error
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
            {
                return Err(e.into());
            }
            let chunks = reader.chunks.lock().unwrap_or_else(|e| e.into_inner());
            fetched = (
                chunks.len() as u64,
                chunks.values().map(|c| c.len() as u64).sum(),
            );
            drop(chunks);
            info.map_err(media)?
        }
        Container::Unknown => {
            return Err(ProbeError::Media(
                "neither MPEG-TS nor MP4 (an origin fill needs media it can pace)".into(),
            ))
        }
    };
    let bitrate_bps = info.require_bitrate().map_err(media)?;
    Ok(Probed {
        bitrate_bps,
        content_type: info.content_type.to_string(),
        fetched,
    })
}

/// An origin object read in chunks on demand (the first bytes already in `head`).
struct Chunks<'a> {
    rt: &'a tokio::runtime::Handle,
    origin: &'a Origin,
    key: &'a str,
    etag: &'a str,
    size: u64,
    head: &'a [u8],
    chunks: Mutex<HashMap<u64, bytes::Bytes>>,
    error: Mutex<Option<OriginError>>,
}

impl Chunks<'_> {
    fn chunk(&self, index: u64) -> std::io::Result<bytes::Bytes> {
        let mut chunks = self.chunks.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = chunks.get(&index) {
            return Ok(c.clone());
        }
        if chunks.len() >= MAX_CHUNKS {
            return Err(std::io::Error::other(
                "the probe read too much of the origin",
            ));
        }
        let start = index * CHUNK_BYTES;
        let end = (start + CHUNK_BYTES).min(self.size);
        let got = self
            .rt
            .block_on(self.origin.get_range(self.key, start..end, self.etag));
        match got {
            Ok(b) => {
                chunks.insert(index, b.clone());
                Ok(b)
            }
            Err(e) => {
                let msg = e.to_string();
                *self.error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
                Err(std::io::Error::other(msg))
            }
        }
    }
}

impl ReadAt for Chunks<'_> {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        if offset >= self.size {
            return Ok(0);
        }
        if let Some(src) = usize::try_from(offset)
            .ok()
            .and_then(|o| self.head.get(o..))
            .filter(|s| !s.is_empty())
        {
            let n = src.len().min(buf.len());
            buf[..n].copy_from_slice(&src[..n]);
            return Ok(n);
        }
        let chunk = self.chunk(offset / CHUNK_BYTES)?;
        let at = usize::try_from(offset % CHUNK_BYTES).unwrap_or(usize::MAX);
        let src = chunk.get(at..).unwrap_or(&[]);
        let n = src.len().min(buf.len());
        buf[..n].copy_from_slice(&src[..n]);
        Ok(n)
    }
}
