//! Batched UDP receive (`recvmmsg`, with `UDP_GRO` where the kernel has it: coalesced
//! datagrams are split back into packets) and socket options.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

/// `SOL_UDP`: the socket level of UDP options and control messages.
const SOL_UDP: libc::c_int = 17;
/// `UDP_GRO` (Linux >= 5.0): as a socket option, asks the kernel to deliver coalesced
/// datagrams (a GSO super-packet stays whole); as a control message, the segment size.
const UDP_GRO: libc::c_int = 104;
/// Receive buffer of one datagram with `UDP_GRO`: a super-packet is at most 64 KiB.
const GRO_SLOT_BYTES: usize = 65536;
/// Control buffer of one datagram: room for the `UDP_GRO` message (an int), 8-byte multiple.
const CONTROL_BYTES: usize = 64;
/// Bound on the packets taken from one datagram (the kernel coalesces at most 64 or 128);
/// anything beyond is one last packet, flagged truncated.
const MAX_SEGMENTS: usize = 1024;

/// Whether a socket receives coalesced datagrams (`UDP_GRO`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Coalescing {
    /// `UDP_GRO` is set: a datagram may be several packets, split by [`Batch`].
    Gro,
    /// Plain datagrams, one packet each.
    Off,
}

/// Sets `UDP_GRO` on `socket`; where the kernel refuses it, says so once in the log (per
/// process) and the socket receives plain datagrams.
pub(crate) fn enable_gro(socket: &UdpSocket) -> Coalescing {
    static REFUSED: std::sync::Once = std::sync::Once::new();
    let on: libc::c_int = 1;
    // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from a valid c_int.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            SOL_UDP,
            UDP_GRO,
            (&raw const on).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        return Coalescing::Gro;
    }
    let err = io::Error::last_os_error();
    REFUSED.call_once(|| {
        tracing::info!("UDP_GRO refused ({err}): receiving plain datagrams");
    });
    Coalescing::Off
}

/// One packet of a receive: where it lies in the batch's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Packet {
    /// The datagram (receive slot) it came in.
    datagram: usize,
    /// Offset in the batch's buffer.
    start: usize,
    /// Length (at most the batch's packet limit).
    len: usize,
    /// The packet was cut: longer than the limit, or the kernel truncated its datagram.
    truncated: bool,
}

/// A packet inside one received datagram: offset and length in the datagram, and whether
/// it was cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Segment {
    /// Offset in the datagram.
    pub(crate) offset: usize,
    /// Length, at most the packet limit.
    pub(crate) len: usize,
    /// Cut to the packet limit, or the last packet of a datagram the kernel truncated.
    pub(crate) truncated: bool,
}

/// The packets of a received datagram of `len` bytes (sans IO): one per `segment_size`
/// bytes when the kernel coalesced it (`UDP_GRO`; the last may be shorter), else one. Each is
/// cut to `packet_max` bytes and flagged truncated if longer; the last is flagged truncated
/// if the kernel truncated the datagram (`kernel_truncated`). At most [`MAX_SEGMENTS`]
/// packets: the rest of a datagram coalesced from more is one last, truncated packet.
pub(crate) fn segments(
    len: usize,
    segment_size: Option<usize>,
    packet_max: usize,
    kernel_truncated: bool,
) -> impl Iterator<Item = Segment> {
    let size = segment_size.filter(|s| *s > 0).unwrap_or(len).max(1);
    let count = len.div_ceil(size).clamp(1, MAX_SEGMENTS);
    (0..count).map(move |i| {
        let offset = i * size;
        let last = i + 1 == count;
        let whole = if last { len - offset } else { size };
        Segment {
            offset,
            len: whole.min(packet_max),
            truncated: whole > packet_max || (last && (kernel_truncated || offset + size < len)),
        }
    })
}

/// The `UDP_GRO` segment size in a received control buffer (sans IO), if there is one.
pub(crate) fn gro_segment_size(control: &[u8]) -> Option<usize> {
    let header = std::mem::size_of::<libc::cmsghdr>();
    let align = std::mem::size_of::<usize>();
    let data_offset = header.next_multiple_of(align);
    let mut at = 0usize;
    while let Some(bytes) = control.get(at..at.checked_add(header)?) {
        // SAFETY: `bytes` holds `size_of::<cmsghdr>()` bytes; cmsghdr is a plain C struct
        // valid for any bytes, and the read is unaligned.
        let cmsg: libc::cmsghdr = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
        let cmsg_len = cmsg.cmsg_len as usize;
        if cmsg_len < header {
            return None;
        }
        if cmsg.cmsg_level == SOL_UDP && cmsg.cmsg_type == UDP_GRO {
            if cmsg_len < data_offset + 4 {
                return None;
            }
            let data = control.get(at + data_offset..at + data_offset + 4)?;
            let value = i32::from_ne_bytes(data.try_into().ok()?);
            return usize::try_from(value).ok().filter(|s| *s > 0);
        }
        at = at.checked_add(cmsg_len.next_multiple_of(align))?;
    }
    None
}

/// A set of receive buffers filled by one `recvmmsg` call, and the packets they hold: with
/// `UDP_GRO` a datagram may be several packets, which the batch splits, so that consumers
/// always see one packet at a time with its source address. Memory: 32 slots of 64 KiB
/// (2 MiB) with `UDP_GRO`, else `slots` times the packet limit.
pub(crate) struct Batch {
    /// Bytes of each receive slot.
    slot: usize,
    /// Longest packet taken whole; a longer one is cut and flagged truncated.
    packet_max: usize,
    buf: Vec<u8>,
    control: Vec<u8>,
    /// Source address of each datagram, as the kernel wrote it.
    sources: Vec<libc::sockaddr_storage>,
    /// The packets of the last receive, in order.
    packets: Vec<Packet>,
    /// Datagrams taken by the last receive.
    received: usize,
}

impl Batch {
    /// `slots` datagrams (at most 1024) of packets of at most `packet_max` bytes each (64 to
    /// 65536); with [`Coalescing::Gro`] each slot holds a whole super-packet.
    pub(crate) fn new(slots: usize, packet_max: usize, coalescing: Coalescing) -> Batch {
        let slots = slots.clamp(1, 1024);
        let packet_max = packet_max.clamp(64, GRO_SLOT_BYTES);
        let slot = match coalescing {
            Coalescing::Gro => GRO_SLOT_BYTES,
            Coalescing::Off => packet_max,
        };
        Batch {
            slot,
            packet_max,
            buf: vec![0u8; slots * slot],
            control: vec![0u8; slots * CONTROL_BYTES],
            // SAFETY: sockaddr_storage is a plain C struct for which all-zero bytes are valid.
            sources: (0..slots).map(|_| unsafe { std::mem::zeroed() }).collect(),
            packets: Vec::with_capacity(slots),
            received: 0,
        }
    }

    /// Receives up to the batch size of datagrams: blocks until one arrives or the socket's
    /// read timeout expires (then returns 0), and takes whatever else is already queued.
    /// Returns the number of packets received (a coalesced datagram counts its packets).
    pub(crate) fn recv(&mut self, socket: &UdpSocket) -> io::Result<usize> {
        let slots = self.sources.len();
        let mut iovecs: Vec<libc::iovec> = self
            .buf
            .chunks_mut(self.slot)
            .map(|chunk| libc::iovec {
                iov_base: chunk.as_mut_ptr().cast(),
                iov_len: chunk.len(),
            })
            .collect();
        // SAFETY: mmsghdr is a plain C struct for which all-zero bytes are a valid value.
        let mut hdrs: Vec<libc::mmsghdr> =
            (0..slots).map(|_| unsafe { std::mem::zeroed() }).collect();
        for (((hdr, iov), source), control) in hdrs
            .iter_mut()
            .zip(iovecs.iter_mut())
            .zip(self.sources.iter_mut())
            .zip(self.control.chunks_mut(CONTROL_BYTES))
        {
            hdr.msg_hdr.msg_iov = iov;
            hdr.msg_hdr.msg_iovlen = 1;
            hdr.msg_hdr.msg_name = (source as *mut libc::sockaddr_storage).cast();
            hdr.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
            hdr.msg_hdr.msg_control = control.as_mut_ptr().cast();
            hdr.msg_hdr.msg_controllen = control.len() as _;
        }
        self.packets.clear();
        self.received = 0;
        // SAFETY: `hdrs` holds `slots` headers, each pointing at one iovec of `iovecs`, each
        // pointing at a distinct `slot`-byte chunk of `self.buf`, at a distinct
        // sockaddr_storage of `self.sources` with its size, and at a distinct
        // `CONTROL_BYTES` chunk of `self.control` with its size; all outlive the call and
        // nothing else accesses them meanwhile.
        let n = unsafe {
            libc::recvmmsg(
                socket.as_raw_fd(),
                hdrs.as_mut_ptr(),
                slots as libc::c_uint,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let err = io::Error::last_os_error();
            return match err.kind() {
                io::ErrorKind::WouldBlock
                | io::ErrorKind::TimedOut
                | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(err),
            };
        }
        self.received = n as usize;
        for (i, hdr) in hdrs.iter().take(n as usize).enumerate() {
            self.take_datagram(i, &hdr.msg_hdr, hdr.msg_len as usize);
        }
        Ok(self.packets.len())
    }

    /// Splits datagram `i` of `len` bytes, as the kernel described it in `msg`, into packets.
    fn take_datagram(&mut self, i: usize, msg: &libc::msghdr, len: usize) {
        if msg.msg_namelen == 0 {
            // No source (not a connectionless socket): never taken for any address.
            self.sources[i].ss_family = libc::AF_UNSPEC as libc::sa_family_t;
        }
        let control_len = msg.msg_controllen.min(CONTROL_BYTES);
        let control = &self.control[i * CONTROL_BYTES..i * CONTROL_BYTES + control_len];
        let segment_size = gro_segment_size(control);
        let kernel_truncated = msg.msg_flags & libc::MSG_TRUNC != 0 || len > self.slot;
        let len = len.min(self.slot);
        let start = i * self.slot;
        for s in segments(len, segment_size, self.packet_max, kernel_truncated) {
            self.packets.push(Packet {
                datagram: i,
                start: start + s.offset,
                len: s.len,
                truncated: s.truncated,
            });
        }
    }

    /// Packet `i` of the last receive (mutable, for impairment), and whether it was cut
    /// (longer than the packet limit, or its datagram did not fit the slot).
    pub(crate) fn packet_mut(&mut self, i: usize) -> (&mut [u8], bool) {
        match self.packets.get(i) {
            Some(p) => (&mut self.buf[p.start..p.start + p.len], p.truncated),
            None => (&mut [], true),
        }
    }
}

impl Batch {
    /// Whether the last receive took as many datagrams as the batch holds (the socket may
    /// hold more).
    pub(crate) fn was_full(&self) -> bool {
        self.received == self.sources.len()
    }

    /// Packet `i` of the last receive (empty if there is none).
    pub(crate) fn packet(&self, i: usize) -> &[u8] {
        match self.packets.get(i) {
            Some(p) => &self.buf[p.start..p.start + p.len],
            None => &[],
        }
    }

    /// The receive slot (datagram) packet `i` of the last receive came in (None if there is
    /// no such packet): packets of one datagram are consecutive.
    pub(crate) fn datagram(&self, i: usize) -> Option<usize> {
        self.packets.get(i).map(|p| p.datagram)
    }

    /// Source address of packet `i` of the last receive (None if the kernel gave none).
    pub(crate) fn source(&self, i: usize) -> Option<SocketAddr> {
        socket_addr(self.sources.get(self.packets.get(i)?.datagram)?)
    }
}

/// A `sockaddr_storage` filled by the kernel as a Rust address (IPv4 or IPv6, else None).
fn socket_addr(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match libc::c_int::from(storage.ss_family) {
        libc::AF_INET => {
            // SAFETY: the kernel wrote a sockaddr_in when the family is AF_INET, and
            // sockaddr_storage is large and aligned enough for every sockaddr type.
            let a =
                unsafe { &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for sockaddr_in6 and AF_INET6.
            let a = unsafe {
                &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            let ip = Ipv6Addr::from(a.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// Sets the socket's receive buffer to at least `bytes` if the system allows (the privileged
/// `SO_RCVBUFFORCE` first, then `SO_RCVBUF`); failures are ignored: it is an optimisation.
pub(crate) fn grow_recv_buffer(socket: &UdpSocket, bytes: usize) {
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
        // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from a valid c_int.
        let rc = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&value as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            return;
        }
    }
}

/// Blocking socket with a read timeout, so that receive loops wake up to check their limits.
pub(crate) fn set_poll_timeout(socket: &UdpSocket, timeout: Duration) -> io::Result<()> {
    socket.set_nonblocking(false)?;
    socket.set_read_timeout(Some(timeout.max(Duration::from_millis(1))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_receives_queued_datagrams_and_times_out() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        set_poll_timeout(&rx, Duration::from_millis(20)).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut batch = Batch::new(4, 64, Coalescing::Off);
        assert_eq!(batch.recv(&rx).unwrap(), 0, "timeout gives an empty batch");
        for i in 0..6u8 {
            let len = if i == 5 { 100 } else { usize::from(i) + 1 };
            tx.send_to(&vec![i; len], rx.local_addr().unwrap()).unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
        let mut got = Vec::new();
        for _ in 0..10 {
            let n = batch.recv(&rx).unwrap();
            for i in 0..n {
                assert_eq!(batch.source(i), Some(tx.local_addr().unwrap()));
                let (p, truncated) = batch.packet_mut(i);
                got.push((p.to_vec(), truncated));
            }
            if got.len() == 6 {
                break;
            }
        }
        assert_eq!(got.len(), 6);
        for (i, (p, truncated)) in got.iter().enumerate().take(5) {
            assert_eq!(p, &vec![i as u8; i + 1]);
            assert!(!truncated);
        }
        assert_eq!(got[5].0.len(), 64);
        assert!(
            got[5].1,
            "a datagram larger than the slot is flagged truncated"
        );
    }
}

#[cfg(test)]
mod gro_tests {
    use super::*;

    fn split(len: usize, size: Option<usize>, max: usize, cut: bool) -> Vec<(usize, usize, bool)> {
        segments(len, size, max, cut)
            .map(|s| (s.offset, s.len, s.truncated))
            .collect()
    }

    #[test]
    fn a_coalesced_datagram_splits_into_equal_segments_and_a_shorter_last() {
        assert_eq!(
            split(3 * 1436 + 100, Some(1436), 2048, false),
            vec![
                (0, 1436, false),
                (1436, 1436, false),
                (2872, 1436, false),
                (4308, 100, false)
            ]
        );
        assert_eq!(
            split(2 * 1436, Some(1436), 2048, false),
            vec![(0, 1436, false), (1436, 1436, false)]
        );
    }

    #[test]
    fn a_plain_datagram_is_one_packet() {
        assert_eq!(split(1436, None, 2048, false), vec![(0, 1436, false)]);
        assert_eq!(split(1436, Some(0), 2048, false), vec![(0, 1436, false)]);
        assert_eq!(split(0, None, 2048, false), vec![(0, 0, false)], "empty");
        assert_eq!(
            split(500, Some(1436), 2048, false),
            vec![(0, 500, false)],
            "one short segment"
        );
    }

    #[test]
    fn packets_longer_than_the_limit_or_cut_by_the_kernel_are_flagged_truncated() {
        assert_eq!(
            split(3000, Some(1500), 1436, false),
            vec![(0, 1436, true), (1500, 1436, true)]
        );
        assert_eq!(split(3000, None, 2048, false), vec![(0, 2048, true)]);
        assert_eq!(
            split(2048, None, 2048, true),
            vec![(0, 2048, true)],
            "kernel MSG_TRUNC"
        );
        assert_eq!(
            split(300, Some(100), 2048, true),
            vec![(0, 100, false), (100, 100, false), (200, 100, true)],
            "only the last segment of a truncated datagram"
        );
    }

    #[test]
    fn segments_per_datagram_are_bounded() {
        let got = split(MAX_SEGMENTS + 10, Some(1), 2048, false);
        assert_eq!(got.len(), MAX_SEGMENTS);
        assert_eq!(got[MAX_SEGMENTS - 2], (MAX_SEGMENTS - 2, 1, false));
        assert_eq!(
            got[MAX_SEGMENTS - 1],
            (MAX_SEGMENTS - 1, 11, true),
            "the rest is one truncated packet"
        );
    }

    /// A control buffer holding messages of (level, type, int value), laid out as the kernel does.
    fn control(messages: &[(libc::c_int, libc::c_int, i32)]) -> Vec<u8> {
        let header = std::mem::size_of::<libc::cmsghdr>();
        let align = std::mem::size_of::<usize>();
        let mut buf = Vec::new();
        for &(level, kind, value) in messages {
            // SAFETY: cmsghdr is a plain C struct for which all-zero bytes are valid.
            let mut cmsg: libc::cmsghdr = unsafe { std::mem::zeroed() };
            cmsg.cmsg_len = (header.next_multiple_of(align) + 4) as _;
            cmsg.cmsg_level = level;
            cmsg.cmsg_type = kind;
            // SAFETY: reads the `header` bytes of a live, initialised cmsghdr.
            let bytes =
                unsafe { std::slice::from_raw_parts((&raw const cmsg).cast::<u8>(), header) };
            buf.extend_from_slice(bytes);
            buf.resize(buf.len().next_multiple_of(align), 0);
            buf.extend_from_slice(&value.to_ne_bytes());
            buf.resize(buf.len().next_multiple_of(align), 0);
        }
        buf
    }

    #[test]
    fn the_gro_segment_size_is_found_among_control_messages() {
        assert_eq!(
            gro_segment_size(&control(&[(SOL_UDP, UDP_GRO, 1436)])),
            Some(1436)
        );
        assert_eq!(
            gro_segment_size(&control(&[
                (libc::SOL_SOCKET, libc::SO_TIMESTAMP, 7),
                (SOL_UDP, UDP_GRO, 1200)
            ])),
            Some(1200),
            "after another message"
        );
        assert_eq!(gro_segment_size(&[]), None, "no control messages");
        assert_eq!(gro_segment_size(&control(&[(SOL_UDP, 103, 1436)])), None);
        assert_eq!(gro_segment_size(&control(&[(SOL_UDP, UDP_GRO, 0)])), None);
        assert_eq!(gro_segment_size(&control(&[(SOL_UDP, UDP_GRO, -5)])), None);
        let whole = control(&[(SOL_UDP, UDP_GRO, 1436)]);
        let value_end = std::mem::size_of::<libc::cmsghdr>().next_multiple_of(8) + 4;
        for cut in 0..value_end {
            // A message cut short (e.g. MSG_CTRUNC) is never read past its end.
            assert!(gro_segment_size(&whole[..cut]).is_none(), "cut at {cut}");
        }
        let mut zero_len = control(&[(SOL_UDP, UDP_GRO, 1436)]);
        zero_len[..std::mem::size_of::<usize>()].fill(0);
        assert_eq!(
            gro_segment_size(&zero_len),
            None,
            "a zero cmsg_len ends the walk"
        );
        let mut short_len = control(&[(SOL_UDP, UDP_GRO, 1436)]);
        let header = std::mem::size_of::<libc::cmsghdr>();
        short_len[..std::mem::size_of::<usize>()].copy_from_slice(&header.to_ne_bytes());
        assert_eq!(
            gro_segment_size(&short_len),
            None,
            "a message without its int"
        );
    }

    /// Sets the socket-wide GSO segment size: every send larger than it is cut by the kernel.
    fn set_udp_segment(socket: &UdpSocket, size: u16) -> io::Result<()> {
        let size = libc::c_int::from(size);
        // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from a valid c_int.
        let rc = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                SOL_UDP,
                103, // UDP_SEGMENT
                (&raw const size).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Packet `seq` of `len` bytes: its number, then bytes derived from it.
    fn packet(seq: u32, len: usize) -> Vec<u8> {
        let mut p = seq.to_be_bytes().to_vec();
        p.extend((4..len).map(|i| (seq as usize * 31 + i) as u8));
        p
    }

    #[test]
    fn gso_runs_to_a_gro_batch_arrive_as_packets_exactly_once_and_intact() {
        const LEN: usize = 1436;
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        grow_recv_buffer(&rx, 8 << 20);
        set_poll_timeout(&rx, Duration::from_millis(20)).unwrap();
        let coalescing = enable_gro(&rx);
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let gso = set_udp_segment(&tx, LEN as u16).is_ok();
        // Runs of 1 to 40 packets; the last of some runs shorter.
        let mut sent: Vec<Vec<u8>> = Vec::new();
        let mut batch = Batch::new(8, 2048, coalescing);
        let mut got: Vec<Vec<u8>> = Vec::new();
        let mut coalesced = false;
        let mut seq = 0u32;
        for run in 0..40usize {
            let mut buf = Vec::new();
            for k in 0..=run {
                let short = run % 3 == 0 && k == run;
                let p = packet(seq, if short { 700 } else { LEN });
                seq += 1;
                buf.extend_from_slice(&p);
                sent.push(p);
            }
            if gso {
                tx.send_to(&buf, rx.local_addr().unwrap()).unwrap();
            } else {
                for p in buf.chunks(LEN) {
                    tx.send_to(p, rx.local_addr().unwrap()).unwrap();
                }
            }
            // Drain as we go, so that the socket buffer never overflows.
            coalesced |= receive_into(&mut batch, &rx, &tx, &mut got);
        }
        for _ in 0..50 {
            if got.len() >= sent.len() {
                break;
            }
            coalesced |= receive_into(&mut batch, &rx, &tx, &mut got);
        }
        if gso && coalescing == Coalescing::Gro {
            assert!(
                coalesced,
                "the kernel delivered super-packets, split by the batch"
            );
        } else {
            eprintln!("no GSO or no GRO on this kernel: plain datagrams only");
        }
        assert_eq!(
            got.len(),
            sent.len(),
            "every packet once (gso {gso}, {coalescing:?})"
        );
        assert!(got == sent, "every packet intact and in order");
    }

    /// Receives once into `got`; returns whether a datagram held more than one packet.
    fn receive_into(
        batch: &mut Batch,
        rx: &UdpSocket,
        tx: &UdpSocket,
        got: &mut Vec<Vec<u8>>,
    ) -> bool {
        let n = batch.recv(rx).unwrap();
        let coalesced = batch
            .packets
            .windows(2)
            .any(|w| w[0].datagram == w[1].datagram);
        for i in 0..n {
            assert_eq!(batch.source(i), Some(tx.local_addr().unwrap()));
            let (p, truncated) = batch.packet_mut(i);
            assert!(!truncated);
            got.push(p.to_vec());
        }
        coalesced
    }
}
