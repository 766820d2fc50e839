//! The receivers: a few threads in the benchmark process that read every stream and record
//! what arrived per tick ([`StreamRecord`]).
//!
//! - isnode streams arrive on a UDP socket of their own with `UDP_GRO` set (the kernel hands
//!   a GSO run over whole; its segment size comes in a control message). Every datagram
//!   must be an isnode data packet whose CRC32C matches (`isnode_wire::parse_data_packet`)
//!   of the session's object, in the order the server sends them (block, then symbol,
//!   never going back), or an FDT packet (TOI 0). The count and bytes of UDP payload are
//!   recorded.
//! - nginx streams (and isnode's `http` engine: `GET /o/NAME`) are HTTP/1.1 GETs over TCP
//!   read at the title's bitrate: the client reads as fast as it can until it holds its
//!   playout buffer, then only as fast as it plays (at most `buffer_cap_s` seconds ahead).
//!   Every body byte is compared with the title.
//! - isnode's `hls` engine is an HLS player: the playlist, then its segments' byte ranges
//!   one after another on one kept-alive connection, read at the same pace.

use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::tls::Wire;
use super::validity::{StreamRecord, TICK_S};

/// `UDP_GRO` (linux/udp.h); not exported by libc for glibc targets.
/// How long a receiver thread waits for readiness per pass.
const POLL_TIMEOUT_MS: i32 = 5;
/// A paced HTTP client reads once it may read this many seconds of the title.
const MIN_READ_S: f64 = 0.005;
/// Longest response head accepted.
const MAX_HEAD_BYTES: usize = 16 << 10;

/// How a stream's bytes arrive.
pub(crate) enum Conn {
    /// An isnode session's UDP socket, with the TOI of its object.
    Udp {
        /// The socket the server sends to.
        socket: UdpSocket,
        /// TOI of the session's object.
        toi: u32,
        /// (SBN, ESI) of the last data packet.
        last: Option<(u32, u8)>,
    },
    /// An HTTP GET of a title (from nginx, or isnode's `/o/NAME`), over TCP or TLS.
    Http {
        /// The connection, request sent.
        stream: Wire,
        /// The title's bytes, to compare with.
        title: Arc<Vec<u8>>,
        /// The response head so far, until it has been parsed whole.
        head: Option<Vec<u8>>,
        /// Body bytes received.
        body_bytes: usize,
        /// Title bytes per second.
        rate_bytes_per_s: f64,
        /// Bytes played before the client starts (the start-up buffer).
        startup_bytes: f64,
        /// Most bytes the client holds ahead of playing.
        cap_bytes: f64,
        /// When playing started.
        playing_since: Option<Instant>,
        /// An HLS player's segments (`None`: one GET of the whole title).
        hls: Option<Hls>,
    },
}

/// An HLS player's segments: byte ranges of the title, asked for one after another on one
/// kept-alive connection, each once the one before is whole.
pub(crate) struct Hls {
    /// The segments' request target (the playlist's URI, resolved).
    pub(crate) target: String,
    /// Offset and length of every segment, in order; they cover the title from its start.
    pub(crate) segments: Vec<(u64, u64)>,
    /// The segment being received.
    pub(crate) current: usize,
    /// Its body bytes still to come.
    pub(crate) left: u64,
}

impl Hls {
    /// The request for the current segment.
    pub(crate) fn request(&self) -> String {
        let (offset, len) = self.segments.get(self.current).copied().unwrap_or((0, 1));
        format!(
            "GET {} HTTP/1.1\r\nHost: localhost\r\nRange: bytes={offset}-{}\r\n\r\n",
            self.target,
            offset + len.max(1) - 1
        )
    }

    /// The segments of an HLS playlist whose segments are byte ranges
    /// (`#EXT-X-BYTERANGE:LEN@OFFSET`) of one URI, checked to follow each other from 0.
    pub(crate) fn parse_playlist(text: &str) -> Result<(String, Vec<(u64, u64)>), String> {
        let mut segments: Vec<(u64, u64)> = Vec::new();
        let mut uri = None;
        let mut lines = text.lines();
        while let Some(line) = lines.next() {
            let Some(range) = line.strip_prefix("#EXT-X-BYTERANGE:") else {
                continue;
            };
            let (len, offset) = range.split_once('@').ok_or(format!("range {range:?}"))?;
            let len: u64 = len.parse().map_err(|_| format!("length in {range:?}"))?;
            let offset: u64 = offset.parse().map_err(|_| format!("offset in {range:?}"))?;
            let at = segments.last().map_or(0, |(o, l)| o + l);
            if offset != at || len == 0 {
                return Err(format!("segment {len}@{offset} does not follow byte {at}"));
            }
            segments.push((offset, len));
            uri = lines.next().map(str::to_string);
        }
        match uri {
            Some(u) if !segments.is_empty() => Ok((u, segments)),
            _ => Err("a playlist without byte-range segments".into()),
        }
    }
}

/// One stream being received.
pub(crate) struct Stream {
    /// Index of the session in the schedule.
    pub(crate) index: usize,
    /// When the client asked.
    pub(crate) requested: Instant,
    /// When the client stops.
    pub(crate) end: Instant,
    /// Where the bytes come from.
    pub(crate) conn: Conn,
    /// What arrived.
    pub(crate) rec: StreamRecord,
}

impl Stream {
    /// A stream asked for at `requested`, watched until `end`.
    pub(crate) fn new(index: usize, requested: Instant, end: Instant, conn: Conn) -> Stream {
        Stream {
            index,
            requested,
            end,
            conn,
            rec: StreamRecord::default(),
        }
    }

    fn record(&mut self, now: Instant, bytes: usize) {
        let since = now.saturating_duration_since(self.requested).as_secs_f64();
        if self.rec.first_byte_s.is_none() {
            self.rec.first_byte_s = Some(since);
        }
        let tick = (since / TICK_S) as usize;
        if self.rec.tick_bytes.len() <= tick {
            self.rec.tick_bytes.resize(tick + 1, 0);
        }
        if let Some(t) = self.rec.tick_bytes.get_mut(tick) {
            *t += bytes as u64;
        }
    }

    /// Whether the stream wants reading now (a paced HTTP client with a full buffer does not).
    fn wants(&self, now: Instant) -> bool {
        match &self.conn {
            Conn::Udp { .. } => true,
            Conn::Http {
                rate_bytes_per_s, ..
            } => self.http_allowance(now) as f64 >= (rate_bytes_per_s * MIN_READ_S).max(1.0),
        }
    }

    /// Bytes the paced HTTP client may read now.
    fn http_allowance(&self, now: Instant) -> usize {
        let Conn::Http {
            body_bytes,
            rate_bytes_per_s,
            cap_bytes,
            playing_since,
            ..
        } = &self.conn
        else {
            return 0;
        };
        let played = playing_since.map_or(0.0, |t| {
            now.saturating_duration_since(t).as_secs_f64() * rate_bytes_per_s
        });
        (played + cap_bytes - *body_bytes as f64).max(0.0) as usize
    }

    /// Whether received bytes wait in the stream's own buffer (TLS plaintext).
    fn buffered(&self) -> bool {
        match &self.conn {
            Conn::Udp { .. } => false,
            Conn::Http { stream, .. } => stream.buffered(),
        }
    }

    /// Reads what is ready; returns false when the stream is over (EOF or error).
    fn read(&mut self, buf: &mut [u8], now: Instant) -> bool {
        match &mut self.conn {
            Conn::Udp { .. } => self.read_udp(buf, now),
            Conn::Http { .. } => self.read_http(buf, now),
        }
    }

    fn read_udp(&mut self, buf: &mut [u8], now: Instant) -> bool {
        for _ in 0..64 {
            let Conn::Udp { socket, .. } = &self.conn else {
                return false;
            };
            let Ok((n, seg)) = crate::udp::recv_gro(socket, buf) else {
                return true;
            };
            let seg = seg.unwrap_or(n);
            let mut payload = 0;
            for packet in buf.get(..n).unwrap_or(&[]).chunks(seg.max(1)) {
                payload += packet.len();
                self.rec.packets += 1;
                self.check_packet(packet);
            }
            self.rec.receives += 1;
            self.record(now, payload);
        }
        true
    }

    fn check_packet(&mut self, packet: &[u8]) {
        let Conn::Udp { toi, last, .. } = &mut self.conn else {
            return;
        };
        if self.rec.content_error.is_some() {
            return;
        }
        let err = match isnode_wire::parse_data_packet(packet) {
            Ok(p) if p.id.toi != *toi => Some(format!("a packet of TOI {}", p.id.toi)),
            Ok(p) => {
                let id = (p.id.sbn, p.id.esi);
                let back = last.is_some_and(|l| id <= l);
                *last = Some(id);
                back.then(|| format!("packet {id:?} after {last:?}"))
            }
            Err(e) => match isnode_wire::parse_packet(packet) {
                Ok(p) if p.lct.toi == 0 => None,
                _ => Some(format!("a datagram that is not a valid data packet: {e}")),
            },
        };
        self.rec.content_error = err;
    }

    fn read_http(&mut self, buf: &mut [u8], now: Instant) -> bool {
        let allowance = self.http_allowance(now).min(buf.len());
        if allowance == 0 {
            return true;
        }
        let Conn::Http { stream, .. } = &mut self.conn else {
            return false;
        };
        let Some(dst) = buf.get_mut(..allowance) else {
            return true;
        };
        match stream.read(dst) {
            Ok(0) => false,
            Ok(n) => {
                let got = dst.get(..n).unwrap_or(&[]).to_vec();
                self.take_http(&got, now);
                true
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => true,
            Err(_) => false,
        }
    }

    /// Strips the response heads, compares the bodies with the title and records them
    /// (an HLS player asks for its next segment when one is whole).
    fn take_http(&mut self, data: &[u8], now: Instant) {
        let mut pending = data.to_vec();
        while !pending.is_empty() && self.rec.content_error.is_none() {
            let Some(body) = self.take_head(pending) else {
                return;
            };
            let (mine, rest) = self.split_segment(body);
            self.take_body(&mine, now);
            self.next_segment();
            pending = rest;
        }
    }

    /// Adds `data` to a response head not yet whole: the bytes after it once it is (its
    /// status checked), `None` until then. Without a head pending, `data` is body.
    fn take_head(&mut self, data: Vec<u8>) -> Option<Vec<u8>> {
        let Conn::Http { head, .. } = &mut self.conn else {
            return None;
        };
        let Some(mut h) = head.take() else {
            return Some(data);
        };
        h.extend_from_slice(&data);
        let Some(end) = find_head_end(&h) else {
            if h.len() > MAX_HEAD_BYTES {
                self.rec.content_error = Some("an endless response head".into());
            }
            *head = Some(h);
            return None;
        };
        let rest = h.split_off(end);
        if !h.starts_with(b"HTTP/1.1 200") && !h.starts_with(b"HTTP/1.1 206") {
            let line = h.split(|&b| b == b'\r').next().unwrap_or(&[]);
            self.rec.content_error = Some(format!(
                "the server answered {:?}",
                String::from_utf8_lossy(line)
            ));
        }
        Some(rest)
    }

    /// An HLS player's body bytes: those of the segment being received, and what follows.
    fn split_segment(&mut self, mut body: Vec<u8>) -> (Vec<u8>, Vec<u8>) {
        let Conn::Http { hls: Some(h), .. } = &mut self.conn else {
            return (body, Vec::new());
        };
        let mine = usize::try_from(h.left)
            .unwrap_or(usize::MAX)
            .min(body.len());
        let rest = body.split_off(mine);
        h.left -= mine as u64;
        (body, rest)
    }

    /// Once an HLS player's segment is whole, asks for the next one.
    fn next_segment(&mut self) {
        let Conn::Http {
            stream,
            head,
            hls: Some(h),
            ..
        } = &mut self.conn
        else {
            return;
        };
        if h.left > 0 || h.current + 1 >= h.segments.len() {
            return;
        }
        h.current += 1;
        h.left = h.segments.get(h.current).map_or(0, |s| s.1);
        *head = Some(Vec::new());
        if let Err(e) = stream.write_all(h.request().as_bytes()) {
            self.rec.content_error = Some(format!("asking for segment {}: {e}", h.current));
        }
    }

    /// Compares body bytes with the title where they belong and records them.
    fn take_body(&mut self, body: &[u8], now: Instant) {
        let Conn::Http {
            title,
            body_bytes,
            startup_bytes,
            playing_since,
            ..
        } = &mut self.conn
        else {
            return;
        };
        let expect = title.get(*body_bytes..*body_bytes + body.len());
        if self.rec.content_error.is_none() && expect != Some(body) {
            self.rec.content_error = Some(format!("body differs near byte {body_bytes}"));
        }
        *body_bytes += body.len();
        if playing_since.is_none() && *body_bytes as f64 >= *startup_bytes {
            *playing_since = Some(now);
        }
        if *body_bytes >= title.len() {
            self.rec.completed = true;
        }
        if !body.is_empty() {
            self.record(now, body.len());
        }
    }

    /// The record, cut to the ticks the client watched whole.
    fn finish(mut self, now: Instant) -> (usize, StreamRecord) {
        let watched = now.min(self.end).saturating_duration_since(self.requested);
        let ticks = (watched.as_secs_f64() / TICK_S) as usize;
        self.rec.tick_bytes.resize(ticks, 0);
        (self.index, self.rec)
    }
}

fn find_head_end(head: &[u8]) -> Option<usize> {
    head.windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|p| p + 4)
}

/// Sets `UDP_GRO` on `socket`.
pub(crate) fn set_udp_gro(socket: &UdpSocket) -> std::io::Result<()> {
    if crate::udp::enable_gro(socket) {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Waits up to `timeout_ms` for any of `fds` to be readable; marks which are.
fn poll_readable(fds: &mut [libc::pollfd], timeout_ms: i32) {
    if fds.is_empty() {
        std::thread::sleep(Duration::from_millis(POLL_TIMEOUT_MS as u64));
        return;
    }
    // SAFETY: `fds` is a valid, writable slice of pollfd of the length passed.
    #[allow(unsafe_code)]
    unsafe {
        libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms)
    };
}

/// The receiver threads.
pub(crate) struct ReceiverPool {
    senders: Vec<Sender<Stream>>,
    next: usize,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    done: Arc<Mutex<Vec<(usize, StreamRecord)>>>,
}

impl ReceiverPool {
    /// Starts `threads` receiver threads.
    pub(crate) fn start(threads: usize) -> ReceiverPool {
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(Mutex::new(Vec::new()));
        let mut pool = ReceiverPool {
            senders: Vec::new(),
            next: 0,
            stop: stop.clone(),
            threads: Vec::new(),
            done: done.clone(),
        };
        for _ in 0..threads.max(1) {
            let (tx, rx) = channel();
            let (stop, done) = (stop.clone(), done.clone());
            pool.senders.push(tx);
            pool.threads
                .push(std::thread::spawn(move || receive(&rx, &stop, &done)));
        }
        pool
    }

    /// Hands a stream to the next thread.
    pub(crate) fn add(&mut self, s: Stream) {
        self.next = (self.next + 1) % self.senders.len().max(1);
        if let Some(tx) = self.senders.get(self.next) {
            let _ = tx.send(s);
        }
    }

    /// Stops every stream now and returns all the records not yet taken.
    pub(crate) fn stop(self) -> Vec<(usize, StreamRecord)> {
        self.stop.store(true, Ordering::Relaxed);
        drop(self.senders);
        for t in self.threads {
            let _ = t.join();
        }
        self.done
            .lock()
            .map(|mut d| std::mem::take(&mut *d))
            .unwrap_or_default()
    }
}

/// One receiver thread: reads its streams until each ends, or until `stop`.
fn receive(rx: &Receiver<Stream>, stop: &AtomicBool, done: &Mutex<Vec<(usize, StreamRecord)>>) {
    let mut streams: Vec<Stream> = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut fds: Vec<libc::pollfd> = Vec::new();
    let mut which: Vec<usize> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        streams.extend(rx.try_iter());
        let now = Instant::now();
        let mut finished = Vec::new();
        let mut i = 0;
        while i < streams.len() {
            if streams.get(i).is_some_and(|s| now >= s.end) {
                finished.push(streams.swap_remove(i).finish(now));
            } else {
                i += 1;
            }
        }
        fds.clear();
        which.clear();
        for (i, s) in streams.iter().enumerate().filter(|(_, s)| s.wants(now)) {
            let fd = match &s.conn {
                Conn::Udp { socket, .. } => socket.as_raw_fd(),
                Conn::Http { stream, .. } => stream.fd(),
            };
            fds.push(libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            });
            which.push(i);
        }
        // Decrypted bytes waiting in a TLS stream make no socket readable: do not wait.
        let buffered = which
            .iter()
            .any(|&i| streams.get(i).is_some_and(Stream::buffered));
        poll_readable(&mut fds, if buffered { 0 } else { POLL_TIMEOUT_MS });
        let now = Instant::now();
        let mut over = Vec::new();
        for (fd, &i) in fds.iter().zip(&which) {
            if let Some(s) = streams.get_mut(i) {
                if fd.revents == 0 && !s.buffered() {
                    continue;
                }
                if !s.read(&mut buf, now) {
                    over.push(i);
                }
            }
        }
        over.sort_unstable();
        for i in over.into_iter().rev() {
            finished.push(streams.swap_remove(i).finish(now));
        }
        if !finished.is_empty() {
            if let Ok(mut d) = done.lock() {
                d.extend(finished);
            }
        }
    }
    let now = Instant::now();
    if let Ok(mut d) = done.lock() {
        d.extend(streams.into_iter().map(|s| s.finish(now)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn playlists_give_contiguous_byte_range_segments() {
        let text = "#EXTM3U\n#EXT-X-VERSION:4\n#EXTINF:2.000,\n#EXT-X-BYTERANGE:1564@0\n\
                    content?ext=.ts\n#EXTINF:2.000,\n#EXT-X-BYTERANGE:1000@1564\n\
                    content?ext=.ts\n#EXT-X-ENDLIST\n";
        let (uri, segs) = Hls::parse_playlist(text).unwrap();
        assert_eq!(uri, "content?ext=.ts");
        assert_eq!(segs, [(0, 1564), (1564, 1000)]);
        let mut h = Hls {
            target: format!("/v1/objects/a.ts/{uri}"),
            segments: segs,
            current: 1,
            left: 1000,
        };
        assert_eq!(
            h.request(),
            "GET /v1/objects/a.ts/content?ext=.ts HTTP/1.1\r\nHost: localhost\r\n\
             Range: bytes=1564-2563\r\n\r\n"
        );
        h.current = 0;
        assert!(h.request().contains("Range: bytes=0-1563\r\n"));
        let gap = "#EXT-X-BYTERANGE:10@0\nc\n#EXT-X-BYTERANGE:10@11\nc\n";
        assert!(Hls::parse_playlist(gap).is_err());
        assert!(Hls::parse_playlist("#EXTM3U\n").is_err());
    }
}
