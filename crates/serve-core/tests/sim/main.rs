//! A deterministic simulation of the server's data plane (issue 21), in the manner of
//! TigerBeetle's VOPR: one seed fixes everything (objects, faults, sessions, the network),
//! time is virtual (1 ms ticks), and invariants are checked after every step. A failing
//! seed is printed with the one command that replays it.
//!
//! **Real** (the production code, driven as the data plane drives it):
//! - the packets: objects encoded with the real encoder (`isnode_recv::sender::
//!   object_packets`: RFC 5052 partitioning, `isnode_fec` Reed-Solomon, sealed isnode
//!   data packets) and laid out in segment-file blocks by the real [`isnode_store::Layout`];
//!   each block's CRC32C is what the catalog holds, checked on load by the real
//!   `isnode_store::codeword::verify_block` (as `cache::BlockCache` does);
//! - admission: [`isnode_serve_core::admission::admit_unvalidated`] for a request awaiting its token's
//!   echo (some never echo), then [`isnode_serve_core::admission::admit`] at the echo (per client and
//!   /64, bitrate budget, block pool);
//! - one [`isnode_serve_core::pacer::Pacer`] per session (start, pause, resume, seek, stop), sending
//!   the bursts it says when it says;
//! - the cache's state machine ([`isnode_serve_core::cache_core::CacheCore`]: lookup, victim choice
//!   by next use, pins, failed-block memory), with next use from the sessions' positions;
//! - the degraded path's rebuild: an unreadable block's packets rebuilt from the other
//!   members' blocks in the pool by `isnode_store::codeword::read_codeword` and framed by
//!   `isnode_wire::build_data_packet` (as `plane::degraded` does);
//! - the client's receive core ([`isnode_recv::receiver::Receiver`]: CRC, packet digests
//!   (the catalog's, booked all at once), reorder, Reed-Solomon decode, in-order release),
//!   one per played range.
//!
//! **Modelled**: the disk (reads complete after 0.2–2 ms, some 20–80 ms; persistent block
//! faults: EIO, a flipped byte, a lost member), the pool's memory (one buffer per slot,
//! written by the read), the network (loss, corruption, duplication, reordering within a
//! tick's batch, stray packets of another session, CRC-invalid forgeries, and forgeries
//! with a valid CRC32C that only the packet digests the client checks tell apart), the send
//! engine (a burst is sent at once from the slot and keeps its pin 0–3 ms, like a
//! zero-copy send in flight), and viewers' behaviour (when sessions start, pause, seek,
//! stop), and the degraded path's driver (which blocks to pin, when to retry). Start-up
//! bursts are the pacer's own (half the sessions get one); adaptive repair is the real
//! policy applied to the clients' loss reports (`world/repair.rs`); unicast repair is the
//! client's real repair loop against the server's answer (`world/unicast.rs`).
//!
//! Two more worlds on the same seeds: broadcast channels and their receivers
//! (`broadcast.rs`: the real plans, channel pacers restored at their phase after a restart,
//! the receivers' tune-in and unicast repair), and member
//! health with hedged reads (`health.rs`: the real health core against disks that turn
//! slow, fail, or die and are rebuilt). The FDT's bytes are not simulated.
//!
//! **Fault budget** (as VOPR keeps one good copy): the disk faults never make more than m
//! symbols of a codeword unreadable (so the server rebuilds every block), and the network
//! never takes more than m symbols of a codeword from one client (so it decodes every
//! codeword).
//!
//! **Invariants**, checked after every step: every packet sent (read or rebuilt) is
//! byte-equal to the stored packet of its session's object for that SBN and ESI; no
//! session sends faster than its send rate allows (bytes sent since its start or seek,
//! less paused time, within one burst and one codeword of `send_rate × time`); the
//! admitted sessions' rates stay within the bitrate budget; no block is overwritten while
//! a send pins it (a shadow of the pool's memory, independent of the core's counters); the
//! ready slots stay within the pool; every client's output is in order, byte-identical to
//! the object, with no lost range, reaches at least the codewords the server finished
//! sending, and keeps ahead of its playout (500 ms after the range starts, at the media
//! bitrate); every admitted session ends before the virtual deadline and every pin is
//! released.
//!
//! Run: `cargo test -p isnode-serve-core --test sim` (200 seeds of the data plane, 40 of
//! each other world); more seeds with `ISNODE_SIM_SEEDS=5000`; replay one with
//! `ISNODE_SIM_SEED=S` (see docs/simulation.md).

mod broadcast;
mod health;
mod store;
#[cfg(test)]
mod tests;
mod world;

pub(crate) use world::{replay_command, run, SimConfig, SimMutation, SimReport, Violation};

/// xorshift64*: deterministic per seed, no dependency.
pub(crate) struct Rng(u64);

impl Rng {
    /// A generator for `seed` (any value).
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (0 when n is 0).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// True once in `n` on average.
    pub(crate) fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }

    /// Uniform in `lo..hi`.
    pub(crate) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo))
    }
}
