//! Resuming a fill: the spec of a filling object of the same version (no probe again).

use isnode_store::{FillSpec, StoreError, Volume};

use crate::origin::OriginMeta;

/// The spec of `name`'s filling object when it is the version `meta` describes (same ETag
/// and size): the fill resumes from its durable front without probing again.
pub(super) fn resumable_spec(
    vol: &Volume,
    name: &str,
    meta: &OriginMeta,
) -> Result<Option<FillSpec>, StoreError> {
    let Some(f) = vol.filling(name)? else {
        return Ok(None);
    };
    if f.origin_etag != meta.etag || f.record.size_bytes != meta.size_bytes {
        return Ok(None);
    }
    Ok(Some(FillSpec {
        name: name.to_string(),
        size_bytes: f.record.size_bytes,
        bitrate_bps: f.record.bitrate_bps,
        content_type: f.record.content_type.clone(),
        origin_etag: f.origin_etag,
    }))
}
