//! Memory to NIC: the data plane, found at once. One thread per core (by default) owns its
//! streams; each turn it applies their control requests, asks each pacer what is due
//! (`isnode_serve_core`), looks the blocks up in the shared pool (`isnode_pool`) and sends
//! the stored packets as they are with its engine: `gso` (`send.rs`: `sendmsg` with
//! `UDP_SEGMENT`), `uring-zc` (`uring.rs`: io_uring `SEND_ZC` from registered buffers),
//! `sendmmsg`, `sendfile` (`sendfile.rs`: page cache to socket) or the seeds' `traditional`
//! baseline (`traditional.rs`). A block that cannot be read is rebuilt from the other
//! members (`degraded.rs`). No tokio, axum or hyper here (CI checks it with `cargo tree`).
//!
//! The rest of the server sees [`Plane`] (start, submit, wake), the hand-off record of each
//! stream ([`stream::StreamShared`]) and the counters ([`counters::PlaneCounters`]).

mod active;
mod baseline;
mod codes;
pub mod counters;
mod degraded;
pub mod deps;
mod handle;
mod msg;
mod rebuild;
mod segment_files;
mod send;
mod sendfile;
pub mod stream;
mod traditional;
mod uring;
mod worker;

pub use handle::{Plane, PlaneBusy};
pub use msg::NewSession;
pub use worker::readable_end;
