//! UDP helpers of the benchmarks: `UDP_GRO` on a socket, one `recvmsg` that returns a
//! datagram and, for a coalesced run, its segment size, integer socket options, and the
//! server IP of a control API's base URL.

use std::net::UdpSocket;
use std::os::fd::AsRawFd;

/// `SOL_UDP`: the socket level of UDP options and control messages.
const SOL_UDP: libc::c_int = 17;
/// `UDP_GRO` (Linux >= 5.0): as an option, deliver coalesced datagrams whole; as a control
/// message, their segment size.
const UDP_GRO: libc::c_int = 104;

/// Sets an integer socket option; false if the kernel refuses (the callers' options are
/// best effort: a smaller buffer or an unmarked datagram still works).
pub(crate) fn set_int_option(
    socket: &UdpSocket,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> bool {
    // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from a valid c_int.
    #[allow(unsafe_code)]
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            name,
            (&raw const value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    rc == 0
}

/// The IP of a control API's base URL (`http://IP:PORT`, `http://[IPv6]:PORT`).
pub(crate) fn server_ip(base: &str) -> anyhow::Result<std::net::IpAddr> {
    use anyhow::Context as _;
    let host = base
        .trim_start_matches("http://")
        .rsplit_once(':')
        .map_or(base, |(h, _)| h);
    host.trim_matches(|c| c == '[' || c == ']')
        .parse()
        .with_context(|| format!("the server address of {base}"))
}

/// Sets `UDP_GRO` on a receiver: a GSO run sent to it on loopback is delivered whole rather
/// than segmented into datagrams on the sender's time. False if the kernel refuses.
pub(crate) fn enable_gro(socket: &UdpSocket) -> bool {
    set_int_option(socket, SOL_UDP, UDP_GRO, 1)
}

/// The packets in a received datagram of `len` bytes: one per `segment_size` bytes (the
/// last may be shorter) when the kernel coalesced it, else one.
pub(crate) fn packets_in(len: usize, segment_size: Option<usize>) -> u64 {
    match segment_size.filter(|s| *s > 0) {
        Some(size) => len.div_ceil(size).max(1) as u64,
        None => 1,
    }
}

/// Receives one datagram (a coalesced run or a plain datagram) into `buf` without waiting:
/// its length and, for a coalesced run, its segment size.
pub(crate) fn recv_gro(
    socket: &UdpSocket,
    buf: &mut [u8],
) -> std::io::Result<(usize, Option<usize>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // Room for a few control messages, aligned for cmsghdr.
    let mut control = [0u64; 8];
    // SAFETY: msghdr is a plain C struct for which all-zero bytes are valid.
    #[allow(unsafe_code)]
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: `msg` points at `iov` (over `buf`) and at `control`, with their sizes; all
    // outlive the call.
    #[allow(unsafe_code)]
    let n = unsafe { libc::recvmsg(socket.as_raw_fd(), &raw mut msg, libc::MSG_DONTWAIT) };
    let len = usize::try_from(n).map_err(|_| std::io::Error::last_os_error())?;
    let mut segment_size = None;
    // SAFETY: the kernel filled `msg.msg_control` with `msg.msg_controllen` bytes of
    // well-formed control messages; CMSG_FIRSTHDR/NXTHDR stay within them, and the UDP_GRO
    // message carries an int (read unaligned).
    #[allow(unsafe_code)]
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&raw const msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == SOL_UDP && (*cmsg).cmsg_type == UDP_GRO {
                let size = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>());
                segment_size = usize::try_from(size).ok();
            }
            cmsg = libc::CMSG_NXTHDR(&raw const msg, cmsg);
        }
    }
    Ok((len, segment_size.filter(|s| *s > 0)))
}
