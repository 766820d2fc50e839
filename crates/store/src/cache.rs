//! The volume as a cache of the origin: per object filled from the origin, its ETag, when
//! it was last checked against the origin and last used; pinned names; the least recently
//! used objects to evict. Objects ingested locally (no origin record) are never eviction
//! candidates: the origin may not have them. Tables `origin_objects` and `pins` in
//! `docs/format.md`.

use serde::Serialize;

use crate::fill::now_unix;
use crate::fill_rows::OriginRecord;
use crate::{StoreError, Volume};

/// A complete object the cache may evict.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EvictionCandidate {
    /// Object name.
    pub name: String,
    /// Its TOI.
    pub toi: u32,
    /// Bytes its segment files take (what evicting it frees).
    pub stored_bytes: u64,
    /// Its last use, seconds since the Unix epoch.
    pub last_use_unix: i64,
}

impl Volume {
    /// Records a use of the object called `name` (complete or filling) now: one catalog
    /// update (a durable write: call it at most every few seconds per object). Whether an
    /// object filled from the origin has that name (a local object has no use record).
    pub fn touch(&mut self, name: &str) -> Result<bool, StoreError> {
        self.catalog_mut().touch(name, now_unix())
    }

    /// Pins `name`: whichever object has that name (now or later) is never an eviction
    /// candidate. Pinning a pinned name does nothing.
    pub fn pin(&mut self, name: &str) -> Result<(), StoreError> {
        crate::validate::validate_name(name)?;
        self.catalog_mut().pin(name, now_unix())
    }

    /// Unpins `name`; whether it was pinned.
    pub fn unpin(&mut self, name: &str) -> Result<bool, StoreError> {
        self.catalog_mut().unpin(name)
    }

    /// The pinned names, sorted.
    pub fn pins(&self) -> Result<Vec<String>, StoreError> {
        self.catalog().pins()
    }

    /// The origin record (ETag, last check, last use) of the complete object called
    /// `name`; `None` if there is none or it was not filled from the origin.
    pub fn origin(&self, name: &str) -> Result<Option<OriginRecord>, StoreError> {
        self.catalog().origin(name)
    }

    /// The origin's ETag of the complete object called `name` (see [`Volume::origin`]).
    pub fn origin_etag(&self, name: &str) -> Result<Option<String>, StoreError> {
        Ok(self.origin(name)?.map(|o| o.etag))
    }

    /// Records that the complete object called `name` was found unchanged at the origin at
    /// `unix` (seconds since the epoch); whether it has an origin record.
    pub fn set_origin_checked(&mut self, name: &str, unix: i64) -> Result<bool, StoreError> {
        self.catalog_mut().set_origin_checked(name, unix)
    }

    /// The complete objects filled from the origin that may be evicted to free
    /// `bytes_needed`: least recently used first (ties by TOI), never a pinned name, never
    /// a filling object, never a locally ingested one; as many as it takes for their
    /// `stored_bytes` to reach `bytes_needed` (all of them if they do not). The caller
    /// skips those in use (a session or broadcast reading them) and may ask again for
    /// more. Objects whose rows are impossible are left out.
    pub fn eviction_candidates(
        &self,
        bytes_needed: u64,
    ) -> Result<Vec<EvictionCandidate>, StoreError> {
        let mut out = Vec::new();
        let mut sum = 0u64;
        for (entry, last_use_unix) in self.catalog().unpinned_origin_objects()? {
            if sum >= bytes_needed {
                break;
            }
            let Some(rec) = entry.valid() else { continue };
            let stored_bytes =
                crate::spool::stored_bytes(*self.layout(&rec)?.params(), rec.size_bytes)?;
            sum = sum.saturating_add(stored_bytes);
            out.push(EvictionCandidate {
                name: rec.name,
                toi: rec.toi,
                stored_bytes,
                last_use_unix,
            });
        }
        Ok(out)
    }
}
