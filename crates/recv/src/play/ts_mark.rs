//! Marks a rung switch in an MPEG-TS output as players expect it: the first packet of each
//! PID after the switch gets its adaptation field's `discontinuity_indicator` set (ISO/IEC
//! 13818-1 §2.4.3.5: the continuity counter and the PCR may jump there), where that packet
//! has an adaptation field (a key-frame packet does: ffmpeg's muxer sets its
//! `random_access_indicator`, and the PCR rides on it). A packet without one is left as it
//! is (adding one would shift its payload): PAT, PMT and audio packets rarely carry one.
//! Only the bytes of a packet's 6-byte head are held while they arrive; the rest streams
//! through, and after [`MARK_PACKETS`] packets the writer is a plain pass-through.

use std::io::{self, Write};

/// Packets looked at after a switch (about 0.4 MB: every PID of a segment shows up).
pub(super) const MARK_PACKETS: u32 = 2000;
/// PIDs remembered (a stream has a handful).
const MAX_PIDS: usize = 64;
const TS_PACKET: usize = 188;
const HEAD: usize = 6;

/// `inner` with the first packet of each PID marked (see the module documentation).
pub(super) struct TsDiscontinuity<W: Write> {
    inner: W,
    head: [u8; HEAD],
    /// Bytes of `head` received.
    have: usize,
    /// Bytes of the current packet after its head still to pass.
    rest: usize,
    seen: Vec<u16>,
    /// Packets still to look at.
    left: u32,
}

impl<W: Write> TsDiscontinuity<W> {
    /// Marks the stream written to `inner` from its first byte, a packet's first byte.
    pub(super) fn new(inner: W) -> TsDiscontinuity<W> {
        TsDiscontinuity {
            inner,
            head: [0; HEAD],
            have: 0,
            rest: 0,
            seen: Vec::new(),
            left: MARK_PACKETS,
        }
    }

    fn mark(&mut self) {
        let h = &mut self.head;
        if h[0] != 0x47 {
            // Not a packet start: the stream is not what was expected, leave it alone.
            self.left = 0;
            return;
        }
        let pid = u16::from_be_bytes([h[1] & 0x1f, h[2]]);
        if self.seen.contains(&pid) || self.seen.len() >= MAX_PIDS {
            return;
        }
        self.seen.push(pid);
        let adaptation = (h[3] >> 4) & 0x3;
        if (adaptation == 2 || adaptation == 3) && h[4] > 0 {
            h[5] |= 0x80;
        }
    }
}

impl<W: Write> Write for TsDiscontinuity<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut i = 0;
        while i < buf.len() {
            if self.left == 0 && self.have == 0 && self.rest == 0 {
                self.inner.write_all(&buf[i..])?;
                break;
            }
            if self.rest > 0 {
                let n = self.rest.min(buf.len() - i);
                self.inner.write_all(&buf[i..i + n])?;
                self.rest -= n;
                i += n;
                continue;
            }
            let n = (HEAD - self.have).min(buf.len() - i);
            self.head[self.have..self.have + n].copy_from_slice(&buf[i..i + n]);
            self.have += n;
            i += n;
            if self.have == HEAD {
                if self.left > 0 {
                    self.mark();
                    self.left = self.left.saturating_sub(1);
                }
                self.inner.write_all(&self.head)?;
                self.have = 0;
                self.rest = TS_PACKET - HEAD;
            }
        }
        Ok(buf.len())
    }

    /// Flushes what passed (a packet head still arriving, at most 5 bytes, is held).
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl<W: Write> Drop for TsDiscontinuity<W> {
    fn drop(&mut self) {
        // A stream that ends inside a packet head (not a whole packet): its last bytes.
        if self.have > 0 {
            if let Err(e) = self.inner.write_all(&self.head[..self.have]) {
                tracing::warn!("writing the output's last {} bytes: {e}", self.have);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(pid: u16, adaptation: bool, cc: u8) -> Vec<u8> {
        let mut p = vec![0xff; TS_PACKET];
        p[0] = 0x47;
        p[1] = (pid >> 8) as u8;
        p[2] = pid as u8;
        p[3] = if adaptation { 0x30 } else { 0x10 } | (cc & 0xf);
        if adaptation {
            p[4] = 1;
            p[5] = 0x40; // random_access_indicator
        }
        p
    }

    /// The first packet of each PID with an adaptation field is marked, later ones and
    /// packets without one are not; the bytes are otherwise unchanged, however they are
    /// cut into writes.
    #[test]
    fn marks_the_first_packet_of_each_pid() {
        let stream: Vec<u8> = [
            packet(0, false, 3),
            packet(0x100, true, 7),
            packet(0x101, false, 1),
            packet(0x100, true, 8),
            packet(0x101, true, 2),
        ]
        .concat();
        for chunk in [1, 5, 6, 7, 188, 500, 4096] {
            let mut out = Vec::new();
            {
                let mut w = TsDiscontinuity::new(&mut out);
                for c in stream.chunks(chunk) {
                    w.write_all(c).unwrap();
                }
                w.flush().unwrap();
            }
            let mut expected = stream.clone();
            expected[TS_PACKET + 5] |= 0x80;
            assert_eq!(out, expected, "writes of {chunk}");
        }
    }

    /// A stream that is not packets is passed unchanged.
    #[test]
    fn leaves_other_bytes_alone() {
        let junk: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let mut out = Vec::new();
        {
            let mut w = TsDiscontinuity::new(&mut out);
            w.write_all(&junk[..3]).unwrap();
            w.write_all(&junk[3..]).unwrap();
        }
        assert_eq!(out, junk);
    }
}
