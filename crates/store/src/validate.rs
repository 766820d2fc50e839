//! The rules every object's name and description follow, checked at ingest and again
//! when a catalog row is read (one place for both: [`crate::ingest`] and [`crate::rows`]).

use crate::StoreError;

/// Largest bitrate an object may have, bits per second (100 Gbit/s): more is not a
/// media rate, and a value past `i64::MAX` would be stored negative.
pub const MAX_BITRATE_BPS: u64 = 100_000_000_000;
/// Longest content type stored, bytes.
pub const MAX_CONTENT_TYPE_LEN: usize = 255;
/// Checks an object name: non-empty, at most 255 bytes, no `/`, no `..`, no control characters.
pub fn validate_name(name: &str) -> Result<(), StoreError> {
    let bad = |why| {
        Err(StoreError::BadName {
            name: name.to_string(),
            why,
        })
    };
    if name.is_empty() {
        return bad("the name is empty");
    }
    if name.len() > 255 {
        return bad("the name is longer than 255 bytes");
    }
    if name.contains('/') {
        return bad("the name contains '/'");
    }
    if name.contains("..") {
        return bad("the name contains '..'");
    }
    if name.chars().any(char::is_control) {
        return bad("the name contains control characters");
    }
    if name.trim() != name {
        return bad("the name starts or ends with white space");
    }
    Ok(())
}

/// Refuses a bitrate of 0 or one past [`MAX_BITRATE_BPS`].
pub fn check_bitrate(bitrate_bps: u64) -> Result<(), String> {
    if bitrate_bps == 0 {
        return Err("bitrate_bps is 0 (it must be at least 1)".into());
    }
    if bitrate_bps > MAX_BITRATE_BPS {
        return Err(format!(
            "bitrate_bps = {bitrate_bps} is more than the largest accepted ({MAX_BITRATE_BPS})"
        ));
    }
    Ok(())
}

/// Refuses a content type longer than [`MAX_CONTENT_TYPE_LEN`].
pub fn check_content_type(content_type: &str) -> Result<(), String> {
    if content_type.len() > MAX_CONTENT_TYPE_LEN {
        return Err(format!(
            "content_type is {} bytes, more than {MAX_CONTENT_TYPE_LEN}",
            content_type.len()
        ));
    }
    Ok(())
}
