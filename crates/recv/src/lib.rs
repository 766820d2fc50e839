//! isnode's receiving side: the `isnode play` client and the lossy `isnode relay`.
//!
//! - [`receiver`]: the sans-IO core. Verifies each datagram (CRC32C, TSI/TOI, ranges), collects
//!   the symbols of each codeword, decodes a codeword as soon as k symbols are in, declares the
//!   ones that cannot be recovered, and releases the object in order.
//! - [`impair`]: seeded Gilbert-Elliott loss and byte corruption, for tests and demos.
//! - [`play`]: the client shell: UDP socket, HTTP session control, batched receive, paced playout.
//! - [`abr`]: the rung decision of `isnode play TITLE` (sans-IO).
//! - [`relay`]: a lossy UDP relay between processes.
//! - [`repair`]: unicast repair (hybrid FEC + ARQ) of what the code could not decode.
//! - [`limits`]: plausibility limits on what a server announces, the playout queue's bound.
//! - [`queue`]: the byte-bounded queue between the receive loop and the playout.
//! - [`sender`]: builds an object's packets without a server, for tests and demos.

#![deny(missing_docs)]

pub mod abr;
pub mod broadcast;
pub mod cmaf_init;
pub mod config;
pub mod control;
pub mod decrypt;
mod decrypt_cmaf;
pub mod digest_fetch;
pub mod digests;
pub mod impair;
pub mod limits;
pub mod loss;
mod net;
pub mod play;
pub mod playout;
pub mod queue;
pub mod receiver;
pub mod relay;
pub mod repair;
pub mod sender;
pub mod validate;

pub use config::PlayConfig;
pub use play::{play, play_on, PlayStats};
pub use relay::{relay, Relay, RelayArgs, RelayStats};
