//! The volume as a cache of the origin (`cache_max_bytes`): before a fill, the least
//! recently used titles filled from the origin that no session, broadcast or fill uses and
//! that are not pinned are deleted until the new title fits. Locally ingested titles are
//! never evicted. When not enough can be evicted the fill goes on (logged): serving a
//! title beats refusing it, and the next fills evict again.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use isnode_store::{StoreError, Volume};

use crate::fills::Fills;

/// Makes room for a title of `size_bytes` called `name` under `cache_max_bytes`.
pub(super) fn make_room(
    fills: &Arc<Fills>,
    vol: &mut Volume,
    name: &str,
    size_bytes: u64,
) -> Result<(), StoreError> {
    let max = fills.env.config.load().cache_max_bytes;
    if max == 0 {
        return Ok(());
    }
    // A resumed fill's bytes are counted already; a new one's are added.
    let needed = match vol.filling(name)? {
        Some(_) => 0,
        None => isnode_store::spool::stored_bytes(*vol.params(), size_bytes)?,
    };
    let used = isnode_store::spool::volume_bytes(vol)?;
    let over = (used + needed).saturating_sub(max);
    if over == 0 {
        return Ok(());
    }
    let mut freed = 0u64;
    // Every candidate, least recently used first: some are skipped (in use).
    for c in vol.eviction_candidates(u64::MAX)? {
        if freed >= over {
            break;
        }
        if c.name == name || in_use(fills, &c.name) {
            continue;
        }
        match fills.env.objects.delete(&c.name) {
            Ok(_) => {
                freed += c.stored_bytes;
                fills
                    .counters
                    .titles_evicted
                    .fetch_add(1, Ordering::Relaxed);
                tracing::info!(title = %c.name, bytes = c.stored_bytes, last_use_unix = c.last_use_unix, "evicted (cache_max_bytes)");
            }
            Err(e) => tracing::warn!(title = %c.name, "evicting: {e}"),
        }
    }
    if freed < over {
        tracing::warn!(title = %name, over_bytes = over - freed, "cache_max_bytes: not enough unused titles to evict; filling anyway");
    }
    Ok(())
}

/// Whether a session, broadcast or fill uses the title `name`.
fn in_use(fills: &Fills, name: &str) -> bool {
    (fills.env.in_use)(name) || fills.is_filling(name)
}
