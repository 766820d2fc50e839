//! isnode benchmarks: measurement code called by `isnode bench ...`.
//!
//! Each benchmark is a library function returning a serialisable report, so the CLI can print
//! a table or write JSON. See [`codec`] for the Reed-Solomon codec benchmark, [`peers`] for
//! the codecs it compares ours with, and [`serve`] for the send engines side by side.

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod codec;
mod common;
pub mod cputime;
pub mod load;
pub mod peers;
pub mod serve;
mod udp;
