//! The kind of origin an `origin` setting names (`s3://BUCKET` or `file:///DIR`).

use std::path::PathBuf;

/// The kind of origin an `origin` setting names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OriginKind {
    /// `s3://BUCKET`.
    S3 {
        /// The bucket.
        bucket: String,
    },
    /// `file:///DIR`: keys are paths under the directory.
    Dir(PathBuf),
}

impl OriginKind {
    /// Parses an `origin` setting (`s3://BUCKET` or `file:///DIR`).
    pub fn parse(origin: &str) -> Result<OriginKind, String> {
        if let Some(bucket) = origin.strip_prefix("s3://") {
            let bucket = bucket.trim_end_matches('/');
            let ok = !bucket.is_empty()
                && bucket.len() <= 63
                && bucket
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-.".contains(&b));
            return match ok {
                true => Ok(OriginKind::S3 {
                    bucket: bucket.to_string(),
                }),
                false => Err(format!(
                    "{origin:?}: a bucket name is 1 to 63 lower-case letters, digits, '-' or '.'"
                )),
            };
        }
        if let Some(dir) = origin.strip_prefix("file://") {
            if !dir.starts_with('/') {
                return Err(format!("{origin:?}: a file origin is file:///ABSOLUTE/DIR"));
            }
            return Ok(OriginKind::Dir(PathBuf::from(dir)));
        }
        Err(format!(
            "{origin:?}: an origin is s3://BUCKET or file:///DIR"
        ))
    }
}
