//! [`AccessPoint`], the element of a time index: a leaf shared by the index itself
//! ([`crate::index`]) and the MP4 sample-table walk that produces points for it.

/// One random-access point.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AccessPoint {
    /// Presentation (TS) or decode (MP4) time from the start of the title, seconds.
    pub time_s: f64,
    /// Byte offset in the object where decoding can start.
    pub offset_bytes: u64,
}
