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
    if name.chars().any(is_invisible_or_reordering) {
        return bad("the name contains a bidirectional control or an invisible character");
    }
    if name.trim() != name {
        return bad("the name starts or ends with white space");
    }
    Ok(())
}

/// Whether `c` reorders or hides text where a name is shown (a listing, a log, the status
/// page): the bidirectional embeddings, overrides and isolates, the zero-width characters,
/// the byte-order mark, the line and paragraph separators. A name holding one can pass for
/// another.
fn is_invisible_or_reordering(c: char) -> bool {
    matches!(
        c,
        '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2028}'..='\u{2029}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{2069}'
            | '\u{FEFF}'
    )
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

#[cfg(test)]
mod tests {
    use super::validate_name;

    #[test]
    fn names_that_reorder_or_hide_text_are_refused() {
        for bad in [
            "film\u{202E}st.ts",
            "a\u{200B}b.ts",
            "\u{FEFF}a.ts",
            "a\u{2066}b\u{2069}.ts",
            "a\u{2028}b.ts",
            "a\u{2060}.ts",
        ] {
            let e = validate_name(bad).unwrap_err().to_string();
            assert!(e.contains("invisible"), "{bad:?}: {e}");
        }
        for good in ["film.ts", "Été à Paris.ts", "映画.ts", "a-b_c 1.ts"] {
            validate_name(good).unwrap();
        }
    }
}
