//! Thin, safe wrappers over the UDP send system calls the engines use: `sendmsg` with a
//! `UDP_SEGMENT` control message (GSO), `sendmmsg`, and `sendto`.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

/// `SOL_UDP` (Linux).
pub const SOL_UDP: libc::c_int = 17;
/// `UDP_SEGMENT` (Linux >= 4.18): GSO segment size, as a cmsg or socket option.
pub const UDP_SEGMENT: libc::c_int = 103;
/// Most segments one GSO send may carry (the kernel's `UDP_MAX_SEGMENTS`).
pub const MAX_GSO_SEGMENTS: usize = 64;
/// Largest UDP payload of one send (a GSO send is limited like one datagram).
pub const MAX_SEND_BYTES: usize = 65_507;

/// A destination address in the kernel's format.
#[derive(Clone, Copy)]
pub struct RawAddr {
    storage: libc::sockaddr_storage,
    len: libc::socklen_t,
}

impl std::fmt::Debug for RawAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RawAddr({} bytes)", self.len)
    }
}

impl RawAddr {
    /// Converts a socket address.
    pub fn new(addr: &SocketAddr) -> RawAddr {
        // SAFETY: sockaddr_storage is plain data; all-zero is a valid value.
        let mut storage: libc::sockaddr_storage = unsafe { zeroed() };
        let len = match addr {
            SocketAddr::V4(a) => {
                let sin = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: a.port().to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from_ne_bytes(a.ip().octets()),
                    },
                    sin_zero: [0; 8],
                };
                // SAFETY: sockaddr_storage is larger than sockaddr_in and suitably aligned.
                unsafe { std::ptr::write((&raw mut storage).cast::<libc::sockaddr_in>(), sin) };
                size_of::<libc::sockaddr_in>()
            }
            SocketAddr::V6(a) => {
                let sin6 = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: a.port().to_be(),
                    sin6_flowinfo: a.flowinfo(),
                    sin6_addr: libc::in6_addr {
                        s6_addr: a.ip().octets(),
                    },
                    sin6_scope_id: a.scope_id(),
                };
                // SAFETY: sockaddr_storage is larger than sockaddr_in6 and suitably aligned.
                unsafe { std::ptr::write((&raw mut storage).cast::<libc::sockaddr_in6>(), sin6) };
                size_of::<libc::sockaddr_in6>()
            }
        };
        RawAddr {
            storage,
            len: len as libc::socklen_t,
        }
    }

    /// Pointer for system calls.
    pub fn as_ptr(&self) -> *const libc::sockaddr {
        (&raw const self.storage).cast()
    }

    /// Length for system calls.
    pub fn len(&self) -> libc::socklen_t {
        self.len
    }

    /// Always false.
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// The multicast options of a send socket: TTL (hop limit) and source interface
/// (`isnode serve --multicast-ttl --multicast-if`), passed to every [`send_socket`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Multicast {
    /// TTL / hop limit of multicast sends.
    pub ttl: u8,
    /// Interface index of multicast sends (0: the routing table's choice).
    pub ifindex: u32,
}

impl Default for Multicast {
    /// TTL 1, the routing table's interface.
    fn default() -> Multicast {
        Multicast { ttl: 1, ifindex: 0 }
    }
}

/// Opens an unconnected UDP send socket of the family of `dest`, with a large send buffer
/// and the multicast options `multicast`.
pub fn send_socket(dest: &SocketAddr, multicast: Multicast) -> io::Result<UdpSocket> {
    let sock = match dest {
        SocketAddr::V4(_) => UdpSocket::bind("0.0.0.0:0")?,
        SocketAddr::V6(_) => UdpSocket::bind("[::]:0")?,
    };
    // A smaller buffer (the kernel's `wmem_max`) still sends: its error is not the caller's.
    let _ = set_send_buffer(&sock, 4 << 20);
    apply_multicast(&sock, dest.is_ipv4(), multicast)?;
    Ok(sock)
}

/// Sets the send buffer of the socket `fd` to `bytes` (`SO_SNDBUF`: the kernel doubles it
/// for its bookkeeping, caps it at `net.core.wmem_max`, and stops autotuning it).
pub fn set_send_buffer(fd: &impl AsRawFd, bytes: usize) -> io::Result<()> {
    set_buffer(fd, libc::SO_SNDBUF, bytes)
}

/// Sets the receive buffer of the socket `fd` to `bytes` (`SO_RCVBUF`: doubled by the
/// kernel, capped at `net.core.rmem_max`, no longer autotuned).
pub fn set_receive_buffer(fd: &impl AsRawFd, bytes: usize) -> io::Result<()> {
    set_buffer(fd, libc::SO_RCVBUF, bytes)
}

fn set_buffer(fd: &impl AsRawFd, name: libc::c_int, bytes: usize) -> io::Result<()> {
    let v = libc::c_int::try_from(bytes).map_err(io::Error::other)?;
    // SAFETY: setsockopt with a valid fd and an int option value.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            name,
            (&raw const v).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    match r {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// The index of the interface called `name`, if there is one.
pub fn interface_index(name: &str) -> Option<u32> {
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: a valid NUL-terminated string.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    (i != 0).then_some(i)
}

fn set_int(
    sock: &UdpSocket,
    level: libc::c_int,
    name: libc::c_int,
    v: libc::c_int,
) -> io::Result<()> {
    // SAFETY: setsockopt with a valid fd and an int option value.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            level,
            name,
            (&raw const v).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn apply_multicast(sock: &UdpSocket, ipv4: bool, multicast: Multicast) -> io::Result<()> {
    let ttl = libc::c_int::from(multicast.ttl);
    let ifindex = multicast.ifindex;
    if ipv4 {
        set_int(sock, libc::IPPROTO_IP, libc::IP_MULTICAST_TTL, ttl)?;
        if ifindex != 0 {
            let req = libc::ip_mreqn {
                imr_multiaddr: libc::in_addr { s_addr: 0 },
                imr_address: libc::in_addr { s_addr: 0 },
                imr_ifindex: libc::c_int::try_from(ifindex).map_err(io::Error::other)?,
            };
            // SAFETY: setsockopt with a valid fd and an ip_mreqn value.
            let rc = unsafe {
                libc::setsockopt(
                    sock.as_raw_fd(),
                    libc::IPPROTO_IP,
                    libc::IP_MULTICAST_IF,
                    (&raw const req).cast(),
                    size_of::<libc::ip_mreqn>() as libc::socklen_t,
                )
            };
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
        }
    } else {
        set_int(sock, libc::IPPROTO_IPV6, libc::IPV6_MULTICAST_HOPS, ttl)?;
        if ifindex != 0 {
            let i = libc::c_int::try_from(ifindex).map_err(io::Error::other)?;
            set_int(sock, libc::IPPROTO_IPV6, libc::IPV6_MULTICAST_IF, i)?;
        }
    }
    Ok(())
}

/// Sets the socket-wide GSO segment size (used with io_uring sends, which carry no cmsg).
pub fn set_gso_size(sock: &UdpSocket, seg: u16) -> io::Result<()> {
    let v = libc::c_int::from(seg);
    // SAFETY: setsockopt with a valid fd and an int option value.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            SOL_UDP,
            UDP_SEGMENT,
            (&raw const v).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn retry<F: FnMut() -> isize>(mut f: F) -> io::Result<usize> {
    for _ in 0..1000 {
        let r = f();
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::Interrupted => continue,
            io::ErrorKind::WouldBlock => std::thread::yield_now(),
            _ => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::WouldBlock,
        "send kept failing with EAGAIN",
    ))
}

/// Sends `data` (a run of `data.len() / seg` packets of `seg` bytes, the last may be
/// shorter) with one `sendmsg` and a `UDP_SEGMENT` cmsg: the kernel (or the NIC) cuts it
/// into datagrams. `data` must hold at most [`MAX_GSO_SEGMENTS`] segments and
/// [`MAX_SEND_BYTES`] bytes.
pub fn send_gso(sock: &UdpSocket, dest: &RawAddr, data: &[u8], seg: usize) -> io::Result<()> {
    send_gso_parts(sock, dest, &[data], seg)
}

/// Most parts one [`send_gso_parts`] call gathers.
pub const MAX_GSO_PARTS: usize = 8;

/// [`send_gso`] of the parts joined in order (one `sendmsg`, one iovec per part): runs of
/// packets from different blocks go out as one GSO datagram. Every part but the last must
/// hold whole `seg`-byte packets; together at most [`MAX_GSO_SEGMENTS`] segments and
/// [`MAX_SEND_BYTES`] bytes, in at most [`MAX_GSO_PARTS`] parts.
pub fn send_gso_parts(
    sock: &UdpSocket,
    dest: &RawAddr,
    parts: &[&[u8]],
    seg: usize,
) -> io::Result<()> {
    assert!(seg > 0 && seg <= u16::MAX as usize);
    assert!(!parts.is_empty() && parts.len() <= MAX_GSO_PARTS);
    let len: usize = parts.iter().map(|p| p.len()).sum();
    assert!(len <= MAX_SEND_BYTES && len.div_ceil(seg) <= MAX_GSO_SEGMENTS);
    let (whole, _) = parts.split_at(parts.len() - 1);
    assert!(
        whole.iter().all(|p| p.len() % seg == 0),
        "a part ends mid-packet"
    );
    let empty = libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    };
    let mut iov = [empty; MAX_GSO_PARTS];
    for (v, p) in iov.iter_mut().zip(parts) {
        v.iov_base = p.as_ptr() as *mut libc::c_void;
        v.iov_len = p.len();
    }
    // Room for one cmsg with a u16, 8-byte aligned.
    let mut control = [0u64; 4];
    // SAFETY: msghdr is plain data; zero is valid.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_name = dest.as_ptr() as *mut libc::c_void;
    msg.msg_namelen = dest.len();
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = parts.len();
    if len > seg {
        // SAFETY: CMSG_* on a control buffer large enough for one cmsg of 2 bytes.
        unsafe {
            let space = libc::CMSG_SPACE(size_of::<u16>() as u32) as usize;
            debug_assert!(space <= size_of::<[u64; 4]>());
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = space;
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = SOL_UDP;
            (*cmsg).cmsg_type = UDP_SEGMENT;
            (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<u16>(), seg as u16);
        }
    }
    let fd = sock.as_raw_fd();
    // SAFETY: msg points to live buffers for the duration of the call.
    let sent = retry(|| unsafe { libc::sendmsg(fd, &msg, 0) })?;
    if sent != len {
        return Err(io::Error::other(format!(
            "short GSO send: {sent} of {len} bytes"
        )));
    }
    Ok(())
}

/// Sends each `seg`-byte packet of `data` as its own datagram with `sendmmsg` calls
/// (as few as the kernel allows).
pub fn send_mmsg(sock: &UdpSocket, dest: &RawAddr, data: &[u8], seg: usize) -> io::Result<()> {
    assert!(seg > 0);
    let mut iovs: Vec<libc::iovec> = data
        .chunks(seg)
        .map(|c| libc::iovec {
            iov_base: c.as_ptr() as *mut libc::c_void,
            iov_len: c.len(),
        })
        .collect();
    let mut msgs: Vec<libc::mmsghdr> = iovs
        .iter_mut()
        .map(|iov| {
            // SAFETY: mmsghdr is plain data; zero is valid.
            let mut m: libc::mmsghdr = unsafe { zeroed() };
            m.msg_hdr.msg_name = dest.as_ptr() as *mut libc::c_void;
            m.msg_hdr.msg_namelen = dest.len();
            m.msg_hdr.msg_iov = iov;
            m.msg_hdr.msg_iovlen = 1;
            m
        })
        .collect();
    let fd = sock.as_raw_fd();
    let mut done = 0usize;
    let mut calls = 0;
    while done < msgs.len() {
        calls += 1;
        if calls > 10_000 {
            return Err(io::Error::other("sendmmsg makes no progress"));
        }
        let rest = &mut msgs[done..];
        // SAFETY: the headers point to live iovecs and data.
        let n = retry(|| unsafe {
            libc::sendmmsg(fd, rest.as_mut_ptr(), rest.len() as libc::c_uint, 0) as isize
        })?;
        done += n;
    }
    Ok(())
}

/// Sends one datagram with `sendto`.
pub fn send_to(sock: &UdpSocket, dest: &RawAddr, data: &[u8]) -> io::Result<()> {
    let fd = sock.as_raw_fd();
    // SAFETY: data and dest are live for the call.
    let n = retry(|| unsafe {
        libc::sendto(
            fd,
            data.as_ptr().cast(),
            data.len(),
            0,
            dest.as_ptr(),
            dest.len(),
        )
    })?;
    if n != data.len() {
        return Err(io::Error::other("short sendto"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn receiver() -> (UdpSocket, SocketAddr) {
        let r = UdpSocket::bind("127.0.0.1:0").unwrap();
        r.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let a = r.local_addr().unwrap();
        (r, a)
    }

    fn recv_all(r: &UdpSocket, n: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut buf = [0u8; 2048];
        for _ in 0..n {
            let len = r.recv(&mut buf).unwrap();
            out.push(buf[..len].to_vec());
        }
        out
    }

    #[test]
    fn gso_mmsg_and_sendto_deliver_the_same_datagrams() {
        let data: Vec<u8> = (0..1000u32 * 7 + 300).map(|i| (i % 251) as u8).collect();
        let expected: Vec<Vec<u8>> = data.chunks(1000).map(<[u8]>::to_vec).collect();
        let (r, a) = receiver();
        let s = send_socket(&a, Multicast::default()).unwrap();
        let dest = RawAddr::new(&a);
        send_gso(&s, &dest, &data, 1000).unwrap();
        assert_eq!(recv_all(&r, 8), expected);
        // The same run in three parts (two blocks and a rebuilt tail): the same datagrams.
        let parts = [&data[..2000], &data[2000..5000], &data[5000..]];
        send_gso_parts(&s, &dest, &parts, 1000).unwrap();
        assert_eq!(recv_all(&r, 8), expected);
        send_mmsg(&s, &dest, &data, 1000).unwrap();
        assert_eq!(recv_all(&r, 8), expected);
        for c in data.chunks(1000) {
            send_to(&s, &dest, c).unwrap();
        }
        assert_eq!(recv_all(&r, 8), expected);
    }
}
