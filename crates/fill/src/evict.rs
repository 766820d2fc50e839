//! Room for a fill. The volume is a cache of the origin: before a fill, titles filled from
//! the origin that no session, broadcast or fill uses and that are not pinned are deleted,
//! least recently used first, and then the filling objects no fill writes (fills that
//! failed or were not resumed), oldest first. Locally ingested titles are never evicted.
//!
//! Two bounds, checked in this order:
//! - the cache's share, `cache_max_bytes` (0: 90 % of `max_volume_bytes`, or of what the
//!   volume holds plus its free space): soft. When not enough can be evicted the fill goes
//!   on (logged): serving a title beats refusing it, and the next fills evict again.
//! - the volume's quota (`max_volume_bytes`) and its free space: hard. When evicting
//!   cannot make room the fill is refused (`507`), as an upload would be.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use isnode_store::spool::{self, SpoolNeed};
use isnode_store::{StoreError, Volume};

use crate::fills::Fills;

/// The share of the volume the cache takes by default, percent.
const DEFAULT_CACHE_SHARE_PERCENT: u64 = 90;
/// Rounds of "evict, check again" before a fill is refused for room.
const ROOM_ROUNDS: usize = 4;

/// Makes room for a title of `size_bytes` called `name`: descriptors to keep it open
/// ([`StoreError::NoDescriptors`] otherwise), within the cache's share (evicting, else
/// filling anyway) and within the quota and free space (evicting, else
/// [`StoreError::NoRoom`]). A resumed fill's bytes are on the volume already.
pub(super) fn make_room(
    fills: &Arc<Fills>,
    vol: &mut Volume,
    name: &str,
    size_bytes: u64,
) -> Result<(), StoreError> {
    if vol.filling(name)?.is_some() {
        return Ok(());
    }
    fills
        .env
        .descriptors
        .check_one_more()
        .map_err(|e| StoreError::NoDescriptors(e.to_string()))?;
    let stored = spool::stored_bytes(*vol.params(), size_bytes)?;
    let cfg = fills.env.config.load();
    let max = cache_max_bytes(vol, cfg.cache_max_bytes, cfg.max_volume_bytes)?;
    let over = (spool::volume_bytes(vol)? + stored).saturating_sub(max);
    let freed = evict(fills, vol, name, over)?;
    if freed < over {
        tracing::warn!(title = %name, over_bytes = over - freed, "cache_max_bytes: not enough unused titles to evict; filling anyway");
    }
    for _ in 0..ROOM_ROUNDS {
        match spool::check_room(vol, size_bytes, SpoolNeed::None, cfg.max_volume_bytes) {
            Err(StoreError::NoRoom {
                needed_bytes,
                available_bytes,
                ..
            }) if evict(
                fills,
                vol,
                name,
                needed_bytes.saturating_sub(available_bytes),
            )? > 0 => {}
            other => return other,
        }
    }
    spool::check_room(vol, size_bytes, SpoolNeed::None, cfg.max_volume_bytes)
}

/// The cache's share in force: `configured`, or by default (0) 90 % of the quota, or of
/// what the volume holds plus its free space.
fn cache_max_bytes(
    vol: &Volume,
    configured: u64,
    max_volume_bytes: Option<u64>,
) -> Result<u64, StoreError> {
    if configured > 0 {
        return Ok(configured);
    }
    let room = match max_volume_bytes {
        Some(q) => q,
        None => spool::volume_bytes(vol)?.saturating_add(spool::free_bytes(vol)?),
    };
    Ok(room / 100 * DEFAULT_CACHE_SHARE_PERCENT)
}

/// Evicts unused titles filled from the origin, then idle filling objects, until `over`
/// bytes are freed (or none is left); the bytes freed.
fn evict(fills: &Arc<Fills>, vol: &mut Volume, name: &str, over: u64) -> Result<u64, StoreError> {
    if over == 0 {
        return Ok(0);
    }
    let mut freed = 0u64;
    // Every candidate, least recently used first: some are skipped (in use).
    for c in vol.eviction_candidates(u64::MAX)? {
        if freed >= over {
            return Ok(freed);
        }
        if c.name == name || fills.is_filling(&c.name) {
            continue;
        }
        let mut deleted = None;
        let mut delete = || deleted = Some(fills.env.objects.delete(&c.name));
        (fills.env.unless_in_use)(&c.name, c.toi, &mut delete);
        match deleted {
            None => {} // in use
            Some(Ok(_)) => {
                freed += c.stored_bytes;
                counted(fills);
                tracing::info!(title = %c.name, bytes = c.stored_bytes, last_use_unix = c.last_use_unix, "evicted to make room");
            }
            Some(Err(e)) => tracing::warn!(title = %c.name, "evicting: {e}"),
        }
    }
    let mut idle = vol.filling_objects()?;
    idle.sort_by_key(|f| (f.record.created_unix, f.record.toi));
    for f in idle {
        if freed >= over {
            break;
        }
        let n = &f.record.name;
        if n == name || fills.is_filling(n) {
            continue;
        }
        let bytes = spool::stored_bytes(*vol.params(), f.record.size_bytes)?;
        match vol.delete_filling(n) {
            Ok(_) => {
                freed += bytes;
                counted(fills);
                tracing::info!(title = %n, bytes, "evicted a partial fill no fill writes");
            }
            Err(e) => tracing::warn!(title = %n, "evicting a partial fill: {e}"),
        }
    }
    Ok(freed)
}

fn counted(fills: &Fills) {
    fills
        .counters
        .titles_evicted
        .fetch_add(1, Ordering::Relaxed);
}
