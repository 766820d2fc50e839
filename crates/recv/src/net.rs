//! Batched UDP receive (`recvmmsg`) and socket options.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

/// A set of receive buffers filled by one `recvmmsg` call.
pub(crate) struct Batch {
    slot: usize,
    buf: Vec<u8>,
    lens: Vec<usize>,
    truncated: Vec<bool>,
    /// Source address of each datagram, as the kernel wrote it.
    sources: Vec<libc::sockaddr_storage>,
}

impl Batch {
    /// `slots` datagrams of at most `slot` bytes each.
    pub(crate) fn new(slots: usize, slot: usize) -> Batch {
        let slots = slots.clamp(1, 1024);
        let slot = slot.clamp(64, 65536);
        Batch {
            slot,
            buf: vec![0u8; slots * slot],
            lens: vec![0; slots],
            truncated: vec![false; slots],
            // SAFETY: sockaddr_storage is a plain C struct for which all-zero bytes are valid.
            sources: (0..slots).map(|_| unsafe { std::mem::zeroed() }).collect(),
        }
    }

    /// Receives up to the batch size of datagrams: blocks until one arrives or the socket's
    /// read timeout expires (then returns 0), and takes whatever else is already queued.
    pub(crate) fn recv(&mut self, socket: &UdpSocket) -> io::Result<usize> {
        let slots = self.lens.len();
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
        for ((hdr, iov), source) in hdrs
            .iter_mut()
            .zip(iovecs.iter_mut())
            .zip(self.sources.iter_mut())
        {
            hdr.msg_hdr.msg_iov = iov;
            hdr.msg_hdr.msg_iovlen = 1;
            hdr.msg_hdr.msg_name = (source as *mut libc::sockaddr_storage).cast();
            hdr.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
        }
        // SAFETY: `hdrs` holds `slots` headers, each pointing at one iovec of `iovecs`, each
        // pointing at a distinct `slot`-byte chunk of `self.buf`, and at a distinct
        // sockaddr_storage of `self.sources` with its size; all outlive the call and nothing
        // else accesses them meanwhile. No control buffers are passed.
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
        let n = n as usize;
        for (i, hdr) in hdrs.iter().take(n).enumerate() {
            let len = hdr.msg_len as usize;
            self.truncated[i] = hdr.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 || len > self.slot;
            self.lens[i] = len.min(self.slot);
            if hdr.msg_hdr.msg_namelen == 0 {
                // No source (not a connectionless socket): never taken for any address.
                self.sources[i].ss_family = libc::AF_UNSPEC as libc::sa_family_t;
            }
        }
        Ok(n)
    }

    /// Datagram `i` of the last receive (mutable, for impairment), and whether the kernel
    /// truncated it because it did not fit the slot.
    pub(crate) fn packet_mut(&mut self, i: usize) -> (&mut [u8], bool) {
        let start = i * self.slot;
        (
            &mut self.buf[start..start + self.lens[i]],
            self.truncated[i],
        )
    }
}

impl Batch {
    /// Source address of datagram `i` of the last receive (None if the kernel gave none).
    pub(crate) fn source(&self, i: usize) -> Option<SocketAddr> {
        socket_addr(self.sources.get(i)?)
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
        let mut batch = Batch::new(4, 64);
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
