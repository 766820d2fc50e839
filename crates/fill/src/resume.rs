//! Resuming fills: the spec of a filling object of the same version (no probe again), and
//! the fills a server finds at its start, resumed in the background.

use std::sync::Arc;

use isnode_store::{FillSpec, StoreError, Volume};

use crate::fills::Fills;
use crate::job::FillKind;
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

/// Resumes, in the background, every fill the volume holds (a server stopped or killed
/// mid-fill); each goes on from its durable front. Nothing without an origin.
pub fn resume_all(fills: &Arc<Fills>) {
    if fills.origin().is_none() {
        return;
    }
    let names = fills.env.objects.with_volume(|vol| vol.filling_objects());
    let names = match names {
        Ok(f) => f,
        Err(e) => {
            tracing::warn!("listing the fills to resume: {e}");
            return;
        }
    };
    for f in names {
        let name = f.record.name;
        tracing::info!(title = %name, front_codewords = f.front_codewords, "resuming the fill");
        if let Err(e) = crate::start::start_or_join(fills, &name, FillKind::Demand) {
            tracing::warn!(title = %name, "resuming the fill: {e}");
        }
    }
}
