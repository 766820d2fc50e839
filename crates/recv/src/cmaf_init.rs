//! The initialization segment of a clear fragmented MP4 (CMAF) title, for a play that
//! starts past its first byte: the stored bytes from a later fragment on do not play alone
//! (no `moov`), so the client writes the title's init segment first (the bytes its
//! playlist's `EXT-X-MAP` names, fetched by byte range), less its `sidx` (whose offsets
//! name the whole file's fragments). An encrypted title's clear init segment is written by
//! the decrypting writer instead (`decrypt`).

use isnode_proto::SessionInfo;

use crate::control::ControlClient;

/// The clear init segment to write before the output of session `info` (less its
/// `sidx`): `None` for an encrypted title, a title that is not fragmented MP4, an output
/// from the first byte, or an init segment that cannot be had (said in the log: the output
/// is then the stored bytes alone, as before).
pub(crate) fn clear_init(control: &ControlClient, info: &SessionInfo) -> Option<Vec<u8>> {
    let from_start = crate::decrypt::output_start(info).map_or(true, |s| s == 0);
    if info.encrypted || from_start || info.object.content_type != "video/mp4" {
        return None;
    }
    let name = &info.object.name;
    let fetched = control.hls_playlist(name).and_then(|text| {
        let text = text.ok_or_else(|| anyhow::anyhow!("the server has no playlist of it"))?;
        crate::decrypt::fetch_init(control, name, &text)
    });
    let init = match fetched {
        Ok(bytes) => bytes,
        Err(e) => {
            tracing::warn!("{name:?} from a later point: no init segment written ({e:#})");
            return None;
        }
    };
    let kept = without_sidx(&init);
    if kept.is_none() {
        tracing::warn!("{name:?}: its init segment is not whole MP4 boxes: not written");
    }
    kept
}

/// `init`'s top-level boxes less any `sidx`; `None` if they are not whole boxes.
pub fn without_sidx(init: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(init.len());
    let mut rest = init;
    while !rest.is_empty() {
        let size = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?) as u64;
        let kind = rest.get(4..8)?;
        let len = match size {
            1 => u64::from_be_bytes(rest.get(8..16)?.try_into().ok()?),
            0 => rest.len() as u64,
            n => n,
        };
        let len = usize::try_from(len).ok().filter(|&l| l >= 8)?;
        let (this, next) = (rest.get(..len)?, rest.get(len..)?);
        if kind != b"sidx" {
            out.extend_from_slice(this);
        }
        rest = next;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mp4_box(kind: &[u8; 4], body: &[u8]) -> Vec<u8> {
        let mut b = ((8 + body.len()) as u32).to_be_bytes().to_vec();
        b.extend_from_slice(kind);
        b.extend_from_slice(body);
        b
    }

    #[test]
    fn an_init_segment_keeps_every_box_but_its_sidx() {
        let (ftyp, moov) = (mp4_box(b"ftyp", b"cmfc"), mp4_box(b"moov", &[7; 20]));
        let init = [&ftyp[..], &mp4_box(b"sidx", &[1; 12]), &moov].concat();
        assert_eq!(without_sidx(&init), Some([ftyp.clone(), moov].concat()));
        // A largesize box, and a box to the end (size 0).
        let mut large = 1u32.to_be_bytes().to_vec();
        large.extend_from_slice(b"free");
        large.extend_from_slice(&20u64.to_be_bytes());
        large.extend_from_slice(&[0; 4]);
        let to_end = [&0u32.to_be_bytes()[..], b"mdat", &[9; 3]].concat();
        let both = [&large[..], &to_end].concat();
        assert_eq!(without_sidx(&both), Some(both.clone()));
    }

    #[test]
    fn an_init_segment_of_broken_boxes_is_none() {
        for bad in [
            &[0u8, 0, 0, 9, b'f', b't', b'y', b'p'][..], // longer than what is there
            &[0, 0, 0, 4, b'f', b't', b'y', b'p'],       // shorter than a header
            &[0, 0, 0],                                  // not a header
        ] {
            assert_eq!(without_sidx(bad), None, "{bad:?}");
        }
    }
}
