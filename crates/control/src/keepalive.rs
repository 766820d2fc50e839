//! The keepalive port: a UDP socket on the control address that takes keepalive
//! datagrams (`isnode_proto::keepalive`), the cheap alternative to
//! `POST /v1/sessions/{id}/keepalive` (one datagram instead of an HTTP request per
//! session per second: measured under `bench load`, the HTTP keepalives were most of the
//! control thread's CPU).
//!
//! One thread drains the socket in batches (`recvmmsg`, [`BATCH`] datagrams per call)
//! and then sleeps [`NAP`]: it wakes a bounded number of times per second whatever the
//! number of sessions, and a keepalive is at most that late against timeouts of seconds.
//! A drain that found nothing blocks until a datagram comes (or the server stops, or
//! [`IDLE_WAIT`] passes): a server without sessions does not wake for nothing.
//! A datagram keeps its session alive only if the session is streaming, the datagram
//! comes from the session's destination IP, carries the MAC the session's secret gives and
//! a counter the session's replay window has not taken.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use isnode_proto::keepalive::{parse_keepalive, KEEPALIVE_LEN};

use crate::counters::ControlCounters;
use crate::registry::Registry;
use crate::registry::SessionState;
use isnode_sys::clock::Clock;
use isnode_sys::event::wait_any;
use isnode_sys::event::IDLE_WAIT;
use isnode_sys::stop::Stop;

/// Datagrams taken per `recvmmsg` call.
const BATCH: usize = 64;
/// Most `recvmmsg` calls per drain: a flood of datagrams cannot hold the thread past a
/// shutdown (what is left waits in the socket buffer, or is dropped when it is full).
const MAX_BATCHES_PER_DRAIN: usize = 64;
/// Sleep between drains that found datagrams (sessions send one a second each; a
/// session's timeout is seconds).
const NAP: Duration = Duration::from_millis(100);
/// Receive buffer asked for (holds a nap's worth of datagrams of many thousand sessions).
const RCVBUF_BYTES: usize = 4 << 20;
/// Bytes kept of each datagram: one more than a keepalive, so a longer one is seen as such.
const SLOT_BYTES: usize = KEEPALIVE_LEN + 1;

/// Binds the keepalive socket on the control API's IP: on its port if that UDP port is
/// free, else on any port. Non-blocking.
pub fn bind(control: SocketAddr) -> std::io::Result<UdpSocket> {
    let sock =
        UdpSocket::bind(control).or_else(|_| UdpSocket::bind(SocketAddr::new(control.ip(), 0)))?;
    sock.set_nonblocking(true)?;
    // A smaller buffer (the kernel's `rmem_max`) still receives: not an error.
    let _ = isnode_sys::net::set_receive_buffer(&sock, RCVBUF_BYTES);
    Ok(sock)
}

/// The keepalive thread: what it holds.
pub struct Keepalives {
    /// The sessions datagrams keep alive.
    pub sessions: Arc<Registry>,
    /// Where datagrams taken and refused are counted.
    pub counters: Arc<ControlCounters>,
    /// The server's clock.
    pub clock: Clock,
    /// The server's stop.
    pub stop: Arc<Stop>,
}

/// The thread body: drains and naps (or, when nothing came, waits for a datagram) until
/// the server shuts down.
pub fn run(sh: Keepalives, sock: UdpSocket) {
    let mut batch = Batch::new();
    while !sh.stop.is_stopped() {
        let mut taken = 0;
        for _ in 0..MAX_BATCHES_PER_DRAIN {
            let n = batch.receive(&sock);
            for i in 0..n {
                let (data, from) = batch.get(i);
                take(&sh, data, from);
            }
            taken += n;
            if n < BATCH {
                break;
            }
        }
        if taken > 0 {
            // More are coming: take them together after the nap.
            if sh.stop.sleep_unless_stopped(NAP).is_break() {
                break;
            }
        } else {
            wait_any(&[sock.as_fd(), sh.stop.as_fd()], IDLE_WAIT);
        }
    }
}

/// Applies one datagram.
/// A version 2 datagram's loss report goes to the session (adaptive repair).
fn take(sh: &Keepalives, data: &[u8], from: Option<IpAddr>) {
    let Some(k) = parse_keepalive(data) else {
        sh.counters
            .keepalives_refused
            .fetch_add(1, Ordering::Relaxed);
        return;
    };
    // An authentic keepalive of a session that has just ended (its client still plays the
    // tail it received) is taken and changes nothing; refused are those of no session, from
    // elsewhere, forged or replayed.
    let kept = sh
        .sessions
        .find(k.id)
        .filter(|s| from == Some(s.dest.ip().to_canonical()))
        .filter(|s| s.owner.is_some_and(|o| k.authentic(&o.secret)))
        .filter(|s| {
            let mut w = s.keepalive_window.lock().unwrap_or_else(|e| e.into_inner());
            w.take(k.counter)
        })
        .map(|s| {
            if s.state() != SessionState::Streaming {
                return;
            }
            s.last_keepalive_ns
                .store(sh.clock.now_ns(), Ordering::Release);
            if let Some(loss) = k.loss {
                s.report_loss(loss);
                sh.counters.loss_reports.fetch_add(1, Ordering::Relaxed);
            }
        })
        .is_some();
    let counter = if kept {
        &sh.counters.keepalives_udp
    } else {
        &sh.counters.keepalives_refused
    };
    counter.fetch_add(1, Ordering::Relaxed);
}

/// Buffers of one `recvmmsg` call, allocated once.
struct Batch {
    bufs: Box<[[u8; SLOT_BYTES]; BATCH]>,
    addrs: Box<[libc::sockaddr_storage; BATCH]>,
    lens: [usize; BATCH],
    addr_lens: [libc::socklen_t; BATCH],
}

impl Batch {
    fn new() -> Batch {
        Batch {
            bufs: Box::new([[0; SLOT_BYTES]; BATCH]),
            // SAFETY: all-zero bytes are a valid sockaddr_storage.
            addrs: Box::new(unsafe { std::mem::zeroed() }),
            lens: [0; BATCH],
            addr_lens: [0; BATCH],
        }
    }

    /// Receives up to [`BATCH`] datagrams without waiting; how many arrived.
    fn receive(&mut self, sock: &UdpSocket) -> usize {
        let mut iov: [libc::iovec; BATCH] = std::array::from_fn(|i| libc::iovec {
            iov_base: self.bufs[i].as_mut_ptr().cast(),
            iov_len: SLOT_BYTES,
        });
        // SAFETY: all-zero bytes are a valid mmsghdr; the pointers set below stay valid
        // for the call (buffers owned by `self`, `iov` on this stack frame).
        let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
        for (i, m) in msgs.iter_mut().enumerate() {
            m.msg_hdr.msg_iov = &mut iov[i];
            m.msg_hdr.msg_iovlen = 1;
            m.msg_hdr.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
            m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
        }
        // SAFETY: `msgs` holds BATCH valid headers (see above).
        let r = unsafe {
            libc::recvmmsg(
                sock.as_raw_fd(),
                msgs.as_mut_ptr(),
                BATCH as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        let n = usize::try_from(r).unwrap_or(0).min(BATCH);
        for (i, m) in msgs.iter().enumerate().take(n) {
            self.lens[i] = (m.msg_len as usize).min(SLOT_BYTES);
            self.addr_lens[i] = m.msg_hdr.msg_namelen;
        }
        n
    }

    /// Datagram `i` of the last batch (cut at [`SLOT_BYTES`]) and its source IP.
    fn get(&self, i: usize) -> (&[u8], Option<IpAddr>) {
        let data = &self.bufs[i][..self.lens[i]];
        (data, source_ip(&self.addrs[i], self.addr_lens[i]))
    }
}

/// The IP of a source address the kernel wrote (canonical: v4-mapped IPv6 becomes IPv4).
fn source_ip(addr: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<IpAddr> {
    let len = len as usize;
    match libc::c_int::from(addr.ss_family) {
        libc::AF_INET if len >= std::mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family and length say the storage holds a sockaddr_in.
            let a =
                unsafe { &*(addr as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            Some(IpAddr::from(u32::from_be(a.sin_addr.s_addr).to_be_bytes()))
        }
        libc::AF_INET6 if len >= std::mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: the family and length say the storage holds a sockaddr_in6.
            let a =
                unsafe { &*(addr as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            Some(IpAddr::from(a.sin6_addr.s6_addr).to_canonical())
        }
        _ => None,
    }
}
