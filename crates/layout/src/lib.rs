//! The volume's geometry, pure and without I/O: its parameters ([`params::VolumeParams`]:
//! symbol size, codeword shape, members, block size) and where each stored packet of an
//! object lives ([`layout::Layout`]: codewords, members, blocks, offsets). The store writes
//! and reads by it; the server's sans-IO core plans reads and admission with it.

pub mod error;
pub mod layout;
pub mod params;

pub use error::ParamsError;
pub use layout::{Layout, SymbolLocation};
pub use params::VolumeParams;
