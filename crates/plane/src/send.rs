//! Sending from the pool: a burst is a run of stored packets of one block, sent as they
//! are with the thread's engine (GSO `sendmsg`, `sendmmsg`, or io_uring `SEND_ZC`); the
//! FDT and rebuilt packets, which this thread builds, go from its own buffer.
//!
//! The `gso` engine joins the start of a session's next bursts to the one it sends, up to
//! one 64 KiB datagram ([`Worker::send_joined`]): a member's run of one codeword is 32
//! packets where a datagram holds 45, and each call pays the UDP send path and, for a
//! local receiver, its receive path. The packets and their order are unchanged.

use std::net::{SocketAddr, UdpSocket};
use std::ops::Range;

use smallvec::SmallVec;

use isnode_pool::cache::{BlockKey, FetchError, Pinned};
use isnode_pool::demand::LazyDemand;
use isnode_serve_config::EngineKind;

use crate::active::{Active, Dest, Mode, Sent};
use crate::rebuild::Hedge;
use crate::stream::Expiry;
use crate::worker::Worker;
use isnode_serve_core::member_health::{read_or_rebuild, ReadOrRebuild};
use isnode_serve_core::pacer::{Burst, Step};
use isnode_sys::net;

impl Worker {
    pub(crate) fn socket(&mut self, dest: &SocketAddr) -> std::io::Result<&UdpSocket> {
        let slot = if dest.is_ipv4() {
            &mut self.v4
        } else {
            &mut self.v6
        };
        if slot.is_none() {
            *slot = Some(net::send_socket(dest, self.deps.multicast)?);
        }
        slot.as_ref()
            .ok_or_else(|| std::io::Error::other("no socket"))
    }

    pub(crate) fn count(&self, a: &Active, engine: EngineKind, packets: u64, bytes: u64) {
        self.deps.counters.sent(engine, packets, bytes);
        if a.repair_dest.is_some() {
            let m = &self.deps.counters;
            m.broadcast_packets
                .fetch_add(packets, std::sync::atomic::Ordering::Relaxed);
            m.broadcast_bytes
                .fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
        }
        let before =
            a.s.packets_sent
                .fetch_add(packets, std::sync::atomic::Ordering::Relaxed);
        if before == 0 && a.s.expiry == Expiry::Keepalive {
            let now = self.deps.clock.now_ns();
            (self.deps.first_packet)(now.saturating_sub(a.s.created_ns));
        }
        a.s.bytes_sent
            .fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
    }

    pub(crate) fn send_error(&self, e: &std::io::Error) {
        let errors = &self.deps.counters.send_errors;
        if errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed) == 0 {
            tracing::warn!("send failed: {e}");
        }
    }

    pub(crate) fn send_fdt(&mut self, a: &Active) {
        // The session's own FDT (its `Expires` counts from the session's start).
        let session = a.s.clone();
        // Counted under the session's engine (the FDT is a few small datagrams: sendto).
        let engine = self.mode.engine();
        for p in &session.fdt_packets {
            let r = self
                .socket(&a.dest.addr)
                .and_then(|s| net::send_to(s, &a.dest.raw, p));
            match r {
                Ok(()) => self.count(a, engine, 1, p.len() as u64),
                Err(e) => self.send_error(&e),
            }
        }
    }

    /// Sends a run of packets that this thread built (rebuilt symbols), synchronously.
    pub(crate) fn send_built(&mut self, a: &Active, b: &Burst, len: usize, seg: usize) {
        let packets = len.div_ceil(seg) as u64;
        let gso = !matches!(self.mode, Mode::Mmsg);
        let dest = a.dest_for(b);
        if let Err(e) = self.socket(&dest.addr) {
            return self.send_error(&e);
        }
        let sock = if dest.addr.is_ipv4() {
            &self.v4
        } else {
            &self.v6
        };
        let Some(sock) = sock else { return };
        let data = &self.out[..len];
        let r = if gso {
            net::send_gso(sock, &dest.raw, data, seg)
        } else {
            net::send_mmsg(sock, &dest.raw, data, seg)
        };
        match r {
            Ok(()) => self.count(a, self.mode.engine(), packets, len as u64),
            Err(e) => self.send_error(&e),
        }
    }

    /// Sends one burst from the pool (with the `gso` engine, joined to the start of the
    /// bursts after it: [`Worker::send_joined`]); [`Sent::Later`] when its block is not in
    /// memory yet (its read is started) or the pool is full.
    pub(crate) fn send_burst(&mut self, a: &mut Active, b: &Burst, now: u64) -> Sent {
        let obj = a.s.object.clone();
        let p = obj.layout.params().packet_len() as usize;
        let key = BlockKey {
            toi: obj.rec.toi,
            member: b.member,
            block: b.block,
        };
        if !self.deps.cache.contains(&key) {
            match self.read_or_rebuild(a, b.member) {
                ReadOrRebuild::Read => {}
                ReadOrRebuild::Rebuild => return self.degraded(a, &obj, b, Hedge::No),
                ReadOrRebuild::Hedge => return self.degraded(a, &obj, b, Hedge::Member(b.member)),
            }
        }
        let demand = LazyDemand::new(&self.deps.positions);
        // A failed read has gone to `member_read_failed` through the reader's callback.
        let pin = match self.reader.fetch(key, &*obj, &demand) {
            Ok(pin) => pin,
            Err(FetchError::Failed(_)) | Err(FetchError::Unavailable(_)) => {
                return self.degraded(a, &obj, b, Hedge::No);
            }
            Err(FetchError::Busy) | Err(FetchError::Full) => return Sent::Later,
        };
        let range = b.first_in_block as usize * p..(b.first_in_block + b.len()) as usize * p;
        assert!(range.end <= pin.bytes().len(), "burst beyond its block");
        if matches!(self.mode, Mode::Gso) && a.pacer.session_mut().is_some() {
            return self.send_joined(a, b, (pin, range), p, now);
        }
        self.send_pinned(a, a.dest_for(b), pin, range, p);
        Sent::Yes
    }

    /// `gso`: sends burst `b` (`first`: its pinned block and byte range) and, in the same
    /// `sendmsg`, the start of the session's next bursts that are due within
    /// [`JOIN_AHEAD_NS`] and whose blocks are in the pool, up to one datagram
    /// ([`joined_packets`]); the pacer moves past every packet sent. The packets and their
    /// order are unchanged; only the number of calls (each paying the UDP send path and, on
    /// a local receiver, its receive path) falls: a member's run of one codeword is 32
    /// packets, a 64 KiB datagram holds 45 of 1436 bytes.
    fn send_joined(
        &mut self,
        a: &mut Active,
        b: &Burst,
        first: (Pinned, Range<usize>),
        seg: usize,
        now: u64,
    ) -> Sent {
        let limit = joined_packets(seg);
        let mut packets = b.len();
        // On the stack: a joined send allocates nothing.
        let mut parts: SmallVec<[(Pinned, Range<usize>); net::MAX_GSO_PARTS]> = SmallVec::new();
        parts.push(first);
        a.pacer.advance(now);
        while packets < limit && parts.len() < net::MAX_GSO_PARTS {
            let Some((pin, range, take)) = self.join_next(a, seg, now, limit - packets) else {
                break;
            };
            if let Some(pacer) = a.pacer.session_mut() {
                pacer.advance_packets(take);
            }
            parts.push((pin, range));
            packets += take;
        }
        let dest = a.dest_for(b);
        let bytes: usize = parts.iter().map(|(_, r)| r.len()).sum();
        let slices: SmallVec<[&[u8]; net::MAX_GSO_PARTS]> =
            parts.iter().map(|(p, r)| &p.bytes()[r.clone()]).collect();
        let sent = self
            .socket(&dest.addr)
            .and_then(|sock| net::send_gso_parts(sock, &dest.raw, &slices, seg));
        match sent {
            Ok(()) => self.count(a, EngineKind::Gso, u64::from(packets), bytes as u64),
            Err(e) if gso_refused(&e) => {
                tracing::warn!("the kernel refuses UDP GSO ({e}): falling back to sendmmsg");
                self.mode = Mode::Mmsg;
                for s in slices {
                    let sent = self
                        .socket(&dest.addr)
                        .and_then(|sock| net::send_mmsg(sock, &dest.raw, s, seg));
                    match sent {
                        Ok(()) => {
                            let n = s.len().div_ceil(seg) as u64;
                            self.count(a, EngineKind::Sendmmsg, n, s.len() as u64);
                        }
                        Err(e) => self.send_error(&e),
                    }
                }
            }
            Err(e) => self.send_error(&e),
        }
        Sent::Taken
    }

    /// The session's next step if it is a burst due within [`JOIN_AHEAD_NS`], readable and
    /// in the pool: its block pinned, the byte range of its first packets (at most `room`),
    /// and how many they are. Nothing is read here (a block not in the pool ends the join).
    fn join_next(
        &mut self,
        a: &mut Active,
        seg: usize,
        now: u64,
        room: u32,
    ) -> Option<(Pinned, Range<usize>, u32)> {
        let Some(Step::Burst(next)) = a.pacer.peek(now.saturating_add(JOIN_AHEAD_NS)) else {
            return None;
        };
        let obj = &a.s.object;
        if !obj.readable(next.sbn) {
            return None;
        }
        let key = BlockKey {
            toi: obj.rec.toi,
            member: next.member,
            block: next.block,
        };
        if !self.deps.cache.contains(&key) {
            return None;
        }
        let demand = LazyDemand::new(&self.deps.positions);
        let pin = self.reader.fetch(key, &**obj, &demand).ok()?;
        let take = next.len().min(room);
        let start = next.first_in_block as usize * seg;
        let range = start..start + take as usize * seg;
        (range.end <= pin.bytes().len()).then_some((pin, range, take))
    }

    fn send_pinned(
        &mut self,
        a: &Active,
        dest: &Dest,
        pin: Pinned,
        range: Range<usize>,
        seg: usize,
    ) {
        if let Mode::Uring(u) = &mut self.mode {
            // Counted when the kernel completes the send (`uring.rs`).
            if let Err(e) = u.send(&a.s, &dest.raw, pin, range, seg) {
                self.send_error(&e);
            }
            return;
        }
        let packets = range.len().div_ceil(seg) as u64;
        let bytes = range.len() as u64;
        if matches!(self.mode, Mode::Gso) {
            let sock = match self.socket(&dest.addr) {
                Ok(s) => s,
                Err(e) => return self.send_error(&e),
            };
            match net::send_gso(sock, &dest.raw, &pin.bytes()[range.clone()], seg) {
                Ok(()) => return self.count(a, EngineKind::Gso, packets, bytes),
                Err(e) if gso_refused(&e) => {
                    tracing::warn!("the kernel refuses UDP GSO ({e}): falling back to sendmmsg");
                    self.mode = Mode::Mmsg;
                }
                Err(e) => return self.send_error(&e),
            }
        }
        let sock = match self.socket(&dest.addr) {
            Ok(s) => s,
            Err(e) => return self.send_error(&e),
        };
        match net::send_mmsg(sock, &dest.raw, &pin.bytes()[range], seg) {
            Ok(()) => self.count(a, EngineKind::Sendmmsg, packets, bytes),
            Err(e) => self.send_error(&e),
        }
    }
}

/// How far ahead of its due time a burst may start in a send joined to an earlier one: at
/// 10 Mbit/s, 45 packets take 44 ms, so every joined send fills its datagram (32 ms, the
/// largest pacing slack, left 35 packets per send on average). A packet leaves at most
/// this early: one 64 KB datagram ahead at 10 Mbit/s, within any client's buffer. Measured
/// (`bench load`, gso, 50 streams behind veth, one run): 32 ms 0.595 / 0.561 s per title
/// GB, 48 ms 0.549 / 0.480, no join 0.653 / 0.630.
const JOIN_AHEAD_NS: u64 = 48_000_000;

/// Most packets of `seg` bytes one GSO datagram carries (45 of 1436 bytes).
fn joined_packets(seg: usize) -> u32 {
    let n = (net::MAX_SEND_BYTES / seg.max(1)).clamp(1, net::MAX_GSO_SEGMENTS);
    u32::try_from(n).unwrap_or(1)
}

impl Worker {
    /// [`ReadOrRebuild`] for a burst of `a` from `member` whose block is not in memory
    /// ([`read_or_rebuild`]: a session that has waited `hedge_after_ms` for it makes the
    /// member slow; the one slow member's bursts are hedged).
    fn read_or_rebuild(&self, a: &Active, member: u32) -> ReadOrRebuild {
        let now = self.deps.clock.now_ns();
        let waited_ns = match a.waiting_since_ns {
            0 => 0,
            since => now.saturating_sub(since),
        };
        let policy = (
            self.deps.members.hedge_after(),
            self.deps.config.load().degraded,
        );
        read_or_rebuild(&self.deps.members.health, member, policy, waited_ns, now)
    }
}

/// Whether a GSO send failed because the kernel or device cannot segment.
fn gso_refused(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EIO) | Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) | Some(libc::ENOPROTOOPT)
    )
}
