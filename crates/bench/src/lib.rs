//! isnode benchmarks: measurement code called by `isnode bench ...`.
//!
//! Each benchmark is a library function returning a serialisable report, so the CLI can print a
//! table or write JSON. See [`codec`] for the Reed-Solomon codec benchmark, [`peers`] for the
//! codecs it compares ours with ([`contender`]: what both measure), [`serve`] for the send engines
//! side by side, [`load`] for isnode's engines and nginx under the same load, [`startup`] for the
//! start-up delay of `isnode play`, [`background`] for viewers beside a scrub and a rebuild on a
//! disk-bound volume ([`cgroup`]: the disk and memory limits), and [`plot`] for the SVG figures.

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod background;
pub mod cgroup;
pub mod codec;
mod common;
pub mod contender;
pub mod cputime;
mod harness;
pub mod load;
mod netns;
pub mod peers;
pub mod placement;
pub mod plot;
pub mod serve;
pub mod soak;
pub mod startup;
pub mod timelines;
pub mod tmpfs;
mod udp;
pub mod upload;
pub mod verify;
