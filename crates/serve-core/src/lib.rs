//! The server's sans-IO core: the decisions of the data plane and of admission, as pure
//! state machines that take `now` and return what to do. No tokio, io-uring, libc or
//! sockets here (CI checks it with `cargo tree`); the shells around them do the I/O.
//!
//! - [`pacer`]: what a session sends when (bursts, repair, the start-up burst);
//!   [`channel`]: the same for a broadcast's logical channels; [`schedule`]: either, as the
//!   data plane steps it.
//! - [`batch`]: how much pacing slack a data-plane thread takes per wake-up;
//!   [`slack`]: the viewers' playback slack, which paces background work.
//! - [`admission`]: whether a new session fits (rates, per-client limits, the block pool's
//!   working sets, the disks' read rate).
//! - [`cache_core`]: the block cache's slots, pins and eviction (interval caching), over
//!   the identities and errors of [`block`].
//! - [`mirror_book`]: which codewords the HTTP mirror holds as contiguous bytes for
//!   `sendfile`, and which it gives back for room.
//! - [`repair_policy`]: how many repair symbols a loss report asks for.
//! - [`member_health`]: the members' health from their reads (failed, slow), which
//!   member's bursts are rebuilt or hedged, and when a failed member is read again.
//!
//! The virtual-clock simulation that drives these together lives in `tests/sim`.

pub mod admission;
pub mod batch;
pub mod block;
pub mod cache_core;
pub mod channel;
pub mod member_health;
pub mod mirror_book;
pub mod pacer;
pub mod repair_policy;
pub mod schedule;
pub mod slack;
