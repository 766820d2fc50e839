//! The `uring-zc` engine: io_uring `SEND_ZC` straight from the registered pool buffers,
//! with the GSO segment size set on the socket (an io_uring send carries no cmsg), so one
//! submission sends a whole run. A buffer stays pinned until the kernel's notification
//! says it no longer uses the memory; the notification also tells whether the kernel
//! really sent from our pages or had to copy them (`IORING_NOTIF_USAGE_ZC_COPIED`: always
//! the case on loopback, where the receiving socket gets the data through a copy).

use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, types, IoUring};

use isnode_pool::cache::{Cache, Pinned};
use isnode_pool::uring_probe::register_pool;
use isnode_serve_config::EngineKind;

use crate::deps::PlaneDeps;
use crate::stream::{Expiry, StreamShared};
use isnode_sys::net::{self, RawAddr};

const RING_ENTRIES: u32 = 256;
/// `IORING_SEND_ZC_REPORT_USAGE` (Linux 6.2): report in the notification whether data was copied.
const IORING_SEND_ZC_REPORT_USAGE: u16 = 1 << 3;
/// `IORING_NOTIF_USAGE_ZC_COPIED`: set in a notification's result when the kernel copied.
const IORING_NOTIF_USAGE_ZC_COPIED: u32 = 1 << 31;

struct InFlight {
    _pin: Pinned,
    /// The destination must stay valid until the kernel has consumed the submission.
    _addr: Box<RawAddr>,
    /// The session the packets belong to, counted when the kernel completes the send.
    session: Arc<StreamShared>,
    /// Packets and bytes submitted, and the packet size.
    packets: u64,
    bytes: u64,
    seg: usize,
}

/// What one completed send delivered to the kernel: counted only on completion, so a
/// send that fails is an error, not bytes sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Settled {
    /// Bytes (and whole packets) the kernel took.
    Sent {
        /// Packets.
        packets: u64,
        /// Bytes.
        bytes: u64,
    },
    /// The send failed with this errno.
    Failed(i32),
}

/// Settles a send completion's result `res` for a submission of `bytes` in `seg`-byte packets.
pub(crate) fn settle(res: i32, bytes: u64, seg: usize) -> Settled {
    if res < 0 {
        return Settled::Failed(-res);
    }
    let sent = u64::from(res.unsigned_abs()).min(bytes);
    let packets = sent.div_ceil(seg.max(1) as u64);
    Settled::Sent {
        packets,
        bytes: sent,
    }
}

/// One data-plane thread's io_uring sender.
pub(crate) struct UringSender {
    ring: IoUring,
    registered: usize,
    sockets: HashMap<(bool, usize), UdpSocket>,
    inflight: HashMap<u64, InFlight>,
    next_id: u64,
    deps: Arc<PlaneDeps>,
    logged_copy: bool,
    logged_zc: bool,
    /// Keeps the registered memory alive as long as the ring (declared after it: dropped after).
    _cache: Cache,
}

impl UringSender {
    /// A ring with the pool's buffers registered (as many as io_uring allows).
    pub(crate) fn new(cache: &Cache, deps: Arc<PlaneDeps>) -> io::Result<UringSender> {
        let ring = IoUring::new(RING_ENTRIES)?;
        // SAFETY: `_cache` keeps the pool alive for the ring's life.
        let registered = match unsafe { register_pool(&ring, cache) } {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!("io_uring: registering the block pool failed ({e}); sending without fixed buffers");
                0
            }
        };
        Ok(UringSender {
            ring,
            registered,
            sockets: HashMap::new(),
            inflight: HashMap::new(),
            next_id: 1,
            deps,
            logged_copy: false,
            logged_zc: false,
            _cache: cache.clone(),
        })
    }

    /// Sends still waiting for their notification.
    pub(crate) fn in_flight(&self) -> usize {
        self.inflight.len()
    }

    fn socket(&mut self, dest: &SocketAddr, seg: usize) -> io::Result<i32> {
        let key = (dest.is_ipv6(), seg);
        if let Some(s) = self.sockets.get(&key) {
            return Ok(s.as_raw_fd());
        }
        let s = net::send_socket(dest, self.deps.multicast)?;
        net::set_gso_size(&s, u16::try_from(seg).map_err(io::Error::other)?)?;
        let fd = s.as_raw_fd();
        self.sockets.insert(key, s);
        Ok(fd)
    }

    /// Queues a zero-copy send of `pin[range]` (a run of `seg`-byte packets) to `dest`.
    pub(crate) fn send(
        &mut self,
        session: &Arc<StreamShared>,
        raw: &RawAddr,
        pin: Pinned,
        range: Range<usize>,
        seg: usize,
    ) -> io::Result<()> {
        assert!(range.len() <= net::MAX_SEND_BYTES && range.end <= pin.bytes().len());
        let fd = self.socket(&session.dest, seg)?;
        let (packets, bytes) = (range.len().div_ceil(seg) as u64, range.len() as u64);
        let addr = Box::new(*raw);
        let data = &pin.bytes()[range];
        let id = self.next_id;
        self.next_id += 1;
        let mut op = opcode::SendZc::new(types::Fd(fd), data.as_ptr(), data.len() as u32)
            .dest_addr(addr.as_ptr())
            .dest_addr_len(addr.len())
            .zc_flags(IORING_SEND_ZC_REPORT_USAGE);
        if (pin.pool_slot() as usize) < self.registered {
            op = op.buf_index(Some(pin.pool_slot() as u16));
        }
        let sqe = op.build().user_data(id);
        self.inflight.insert(
            id,
            InFlight {
                _pin: pin,
                _addr: addr,
                session: session.clone(),
                packets,
                bytes,
                seg,
            },
        );
        for attempt in 0..100 {
            // SAFETY: the buffer (pinned) and the address (boxed) live in `inflight` until
            // the kernel's last completion for this id.
            if unsafe { self.ring.submission().push(&sqe) }.is_ok() {
                return Ok(());
            }
            if attempt > 0 {
                // Submission queue full with completions pending: wait for one.
                self.ring.submit_and_wait(1)?;
            } else {
                self.ring.submit()?;
            }
            self.reap();
        }
        self.inflight.remove(&id);
        Err(io::Error::other("io_uring submission queue stays full"))
    }

    /// Submits queued sends and handles completions.
    pub(crate) fn flush(&mut self) {
        if let Err(e) = self.ring.submit() {
            tracing::warn!("io_uring submit: {e}");
        }
        self.reap();
    }

    fn reap(&mut self) {
        let mut done = Vec::new();
        let cqes: Vec<(u64, i32, u32)> = self
            .ring
            .completion()
            .map(|c| (c.user_data(), c.result(), c.flags()))
            .collect();
        for (id, res, flags) in cqes {
            if cqueue::notif(flags) {
                self.deps.counters.zc_sends.fetch_add(1, Ordering::Relaxed);
                if (res as u32) & IORING_NOTIF_USAGE_ZC_COPIED != 0 {
                    self.deps.counters.zc_copied.fetch_add(1, Ordering::Relaxed);
                    if !self.logged_copy {
                        self.logged_copy = true;
                        tracing::warn!(
                            "uring-zc: the kernel COPIED the data instead of sending from the pool \
                             (always so on loopback, or with a NIC lacking scatter-gather/checksum offload): \
                             zero-copy is not effective on this path"
                        );
                    }
                } else if !self.logged_zc {
                    self.logged_zc = true;
                    tracing::info!("uring-zc: zero-copy confirmed by the kernel (data sent from the pool's pages)");
                }
                done.push(id);
            } else {
                if let Some(f) = self.inflight.get(&id) {
                    debug_assert_eq!(f.packets, f.bytes.div_ceil(f.seg as u64));
                    self.settle(f.session.clone(), settle(res, f.bytes, f.seg));
                }
                if !cqueue::more(flags) {
                    done.push(id);
                }
            }
        }
        for id in done {
            self.inflight.remove(&id);
        }
    }

    fn settle(&self, session: Arc<StreamShared>, settled: Settled) {
        match settled {
            Settled::Sent { packets, bytes } => {
                self.deps.counters.sent(EngineKind::UringZc, packets, bytes);
                let before = session.packets_sent.fetch_add(packets, Ordering::Relaxed);
                if before == 0 && session.expiry == Expiry::Keepalive {
                    let now = self.deps.clock.now_ns();
                    (self.deps.first_packet)(now.saturating_sub(session.created_ns));
                }
                session.bytes_sent.fetch_add(bytes, Ordering::Relaxed);
            }
            Settled::Failed(errno) => {
                let e = io::Error::from_raw_os_error(errno);
                if self
                    .deps
                    .counters
                    .send_errors
                    .fetch_add(1, Ordering::Relaxed)
                    == 0
                {
                    tracing::warn!("uring-zc send failed: {e}");
                }
            }
        }
    }

    /// Waits (bounded) until the kernel has released every buffer.
    pub(crate) fn drain(&mut self, limit: Duration) {
        let deadline = Instant::now() + limit;
        while !self.inflight.is_empty() && Instant::now() < deadline {
            let _ = self.ring.submitter().submit_with_args(
                1,
                &types::SubmitArgs::new().timespec(&types::Timespec::new().nsec(10_000_000)),
            );
            self.reap();
        }
        if !self.inflight.is_empty() {
            tracing::warn!(
                "uring-zc: {} sends still in flight at shutdown; leaking their buffers",
                self.inflight.len()
            );
            // The kernel may still read these pages: never free them.
            std::mem::forget(std::mem::take(&mut self.inflight));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_send_counts_no_bytes() {
        assert_eq!(
            settle(-libc::EACCES, 2872, 1436),
            Settled::Failed(libc::EACCES)
        );
    }

    #[test]
    fn a_completed_send_counts_what_the_kernel_took() {
        assert_eq!(
            settle(2872, 2872, 1436),
            Settled::Sent {
                packets: 2,
                bytes: 2872
            }
        );
        assert_eq!(
            settle(1436, 2872, 1436),
            Settled::Sent {
                packets: 1,
                bytes: 1436
            }
        );
    }
}
