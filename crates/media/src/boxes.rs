//! ISO-BMFF box helpers over bytes held in memory: a leaf shared by the sample-table walk
//! ([`crate::index_mp4`]), the fragment index ([`crate::fmp4`]) and the rendition descriptor.
//! Every read is checked: a short or malformed box reads as absent, never a panic.

/// The children of a box's content, as (type, content) pairs; stops at the first bad size.
pub(crate) fn children(mut data: &[u8]) -> impl Iterator<Item = ([u8; 4], &[u8])> {
    std::iter::from_fn(move || {
        let hdr = data.get(..8)?;
        let size32 = u32::from_be_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
        let kind = [hdr[4], hdr[5], hdr[6], hdr[7]];
        let (size, hlen) = match size32 {
            0 => (data.len(), 8),
            1 => {
                let large = u64::from_be_bytes(data.get(8..16)?.try_into().ok()?);
                (usize::try_from(large).ok()?, 16)
            }
            n => (usize::try_from(n).ok()?, 8),
        };
        let content = data.get(hlen..size)?;
        data = data.get(size..)?;
        Some((kind, content))
    })
}

/// The content of the first child of type `kind`.
pub(crate) fn child<'a>(data: &'a [u8], kind: &[u8; 4]) -> Option<&'a [u8]> {
    children(data).find(|(k, _)| k == kind).map(|(_, c)| c)
}

/// The big-endian `u16` at `at`.
pub(crate) fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(
        b.get(at..at.checked_add(2)?)?.try_into().ok()?,
    ))
}

/// The big-endian `u32` at `at`.
pub(crate) fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

/// The big-endian `u64` at `at`.
pub(crate) fn be64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// The `trak` boxes of a `moov`'s content with their handler type (`vide`, `soun`, ...).
pub(crate) fn tracks(moov: &[u8]) -> impl Iterator<Item = ([u8; 4], &[u8])> {
    children(moov)
        .filter(|(k, _)| k == b"trak")
        .filter_map(|(_, trak)| {
            let hdlr = child(child(trak, b"mdia")?, b"hdlr")?;
            let handler: [u8; 4] = hdlr.get(8..12)?.try_into().ok()?;
            Some((handler, trak))
        })
}

/// A track's ID (`tkhd`) and media timescale (`mdhd`).
pub(crate) fn track_id_timescale(trak: &[u8]) -> Option<(u32, u32)> {
    let tkhd = child(trak, b"tkhd")?;
    let id = match tkhd.first()? {
        1 => be32(tkhd, 20)?,
        _ => be32(tkhd, 12)?,
    };
    let mdhd = child(child(trak, b"mdia")?, b"mdhd")?;
    let timescale = match mdhd.first()? {
        1 => be32(mdhd, 20)?,
        _ => be32(mdhd, 12)?,
    };
    Some((id, timescale))
}
