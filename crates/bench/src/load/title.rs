//! The titles a load run serves.

use std::sync::Arc;

/// One title: its name, bitrate and bytes.
#[derive(Clone)]
pub(crate) struct Title {
    /// File name.
    pub(super) name: String,
    /// Bitrate, bits per second.
    pub(super) bitrate_bps: u64,
    /// The MPEG-TS bytes.
    pub(super) bytes: Arc<Vec<u8>>,
}
