//! The room that uploads under way hold against the volume's quota (`max_volume_bytes`;
//! `api/upload.rs`, docs/protocol.md "Upload").
//!
//! Each upload reserves what its object will take on the volume before it writes: the
//! stored size of its announced length at once, or, for a body of unknown length, the
//! stored size of what has arrived, grown as it arrives. An upload fits only if the
//! volume's settled objects, every other upload's reservation and its own fit the quota
//! together, checked and reserved under one lock: two concurrent uploads cannot both
//! pass a quota that only one of them fits. An upload's `writing` row counts through its
//! reservation, not twice. A reservation ends with its [`Reservation`] (the upload
//! committed, failed, or its request was dropped).

use std::sync::{Arc, Mutex, MutexGuard};

use isnode_store::spool::{self, RoomLimit};
use isnode_store::{ObjectState, StoreError, Volume};

/// The reservations of the uploads under way.
#[derive(Default)]
pub struct Uploads {
    held: Mutex<Held>,
}

/// The reservations, and the pure arithmetic over them.
#[derive(Default, Debug)]
struct Held {
    next_id: u64,
    entries: Vec<Entry>,
}

#[derive(Debug)]
struct Entry {
    id: u64,
    name: String,
    stored_bytes: u64,
}

/// A quota that does not fit: what was asked and what was left.
#[derive(Debug, PartialEq, Eq)]
struct Over {
    needed_bytes: u64,
    available_bytes: u64,
}

impl Held {
    /// Bytes reserved by the uploads other than `except`.
    fn reserved_bytes(&self, except: Option<u64>) -> u64 {
        self.entries
            .iter()
            .filter(|e| Some(e.id) != except)
            .fold(0u64, |sum, e| sum.saturating_add(e.stored_bytes))
    }

    /// Whether upload `id` (or a new one) may hold `stored_bytes` when the settled
    /// objects take `settled_bytes` of a quota of `max_bytes`.
    fn fits(
        &self,
        id: Option<u64>,
        stored_bytes: u64,
        settled_bytes: u64,
        max_bytes: u64,
    ) -> Result<(), Over> {
        let left = max_bytes
            .saturating_sub(settled_bytes)
            .saturating_sub(self.reserved_bytes(id));
        match stored_bytes <= left {
            true => Ok(()),
            false => Err(Over {
                needed_bytes: stored_bytes,
                available_bytes: left,
            }),
        }
    }

    fn add(&mut self, name: &str, stored_bytes: u64) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.entries.push(Entry {
            id,
            name: name.to_string(),
            stored_bytes,
        });
        id
    }

    fn set(&mut self, id: u64, stored_bytes: u64) {
        if let Some(e) = self.entries.iter_mut().find(|e| e.id == id) {
            e.stored_bytes = stored_bytes;
        }
    }

    fn remove(&mut self, id: u64) {
        self.entries.retain(|e| e.id != id);
    }

    fn holds_name(&self, name: &str) -> bool {
        self.entries.iter().any(|e| e.name == name)
    }
}

impl From<Over> for StoreError {
    fn from(o: Over) -> StoreError {
        StoreError::NoRoom {
            needed_bytes: o.needed_bytes,
            available_bytes: o.available_bytes,
            limit: RoomLimit::Quota,
        }
    }
}

/// Bytes the volume's objects take, the rows being written by uploads under way left out
/// (their reservations stand for them).
fn settled_bytes(vol: &Volume, held: &Held) -> Result<u64, StoreError> {
    let total = spool::volume_bytes(vol)?;
    let mut ours = 0u64;
    for entry in vol.catalog().entries(ObjectState::Writing)? {
        let rec = entry.record();
        if !held.holds_name(&rec.name) {
            continue;
        }
        let bytes: u64 = vol.layout(rec).map_or(0, |l| {
            (0..l.params().members)
                .map(|m| l.segment_len_bytes(m))
                .sum()
        });
        ours = ours.saturating_add(bytes);
    }
    Ok(total.saturating_sub(ours))
}

impl Uploads {
    fn lock(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reserves `stored_bytes` for an upload of `name` if it fits the quota `max_bytes`
    /// (none: always) with the volume's objects and the other reservations; `507`'s
    /// [`StoreError::NoRoom`] otherwise.
    pub fn reserve(
        self: &Arc<Self>,
        vol: &Volume,
        name: &str,
        stored_bytes: u64,
        max_bytes: Option<u64>,
    ) -> Result<Reservation, StoreError> {
        let mut held = self.lock();
        if let Some(max) = max_bytes {
            let settled = settled_bytes(vol, &held)?;
            held.fits(None, stored_bytes, settled, max)?;
        }
        let id = held.add(name, stored_bytes);
        Ok(Reservation {
            uploads: self.clone(),
            id,
        })
    }

    /// Bytes reserved by every upload under way.
    pub fn reserved_bytes(&self) -> u64 {
        self.lock().reserved_bytes(None)
    }
}

/// The room one upload holds; given back when dropped.
pub struct Reservation {
    uploads: Arc<Uploads>,
    id: u64,
}

impl Reservation {
    /// Makes the reservation `stored_bytes` (a body of unknown length as it arrives, and
    /// at its end) if that fits, as [`Uploads::reserve`]; unchanged otherwise.
    pub fn resize(
        &self,
        vol: &Volume,
        stored_bytes: u64,
        max_bytes: Option<u64>,
    ) -> Result<(), StoreError> {
        let mut held = self.uploads.lock();
        if let Some(max) = max_bytes {
            let settled = settled_bytes(vol, &held)?;
            held.fits(Some(self.id), stored_bytes, settled, max)?;
        }
        held.set(self.id, stored_bytes);
        Ok(())
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.uploads.lock().remove(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_share_one_quota() {
        let mut h = Held::default();
        // Settled 100 of 1000: 900 left.
        assert_eq!(h.fits(None, 600, 100, 1000), Ok(()));
        let a = h.add("a", 600);
        // A second 600 fits alone, not with the first.
        assert_eq!(
            h.fits(None, 600, 100, 1000),
            Err(Over {
                needed_bytes: 600,
                available_bytes: 300
            })
        );
        assert_eq!(h.fits(None, 300, 100, 1000), Ok(()));
        // An upload is not counted against itself when it grows.
        assert_eq!(h.fits(Some(a), 900, 100, 1000), Ok(()));
        h.set(a, 900);
        assert_eq!(h.reserved_bytes(None), 900);
        assert!(h.holds_name("a") && !h.holds_name("b"));
        h.remove(a);
        assert_eq!(h.reserved_bytes(None), 0);
        assert_eq!(h.fits(None, 900, 100, 1000), Ok(()));
        // Settled past the quota: nothing fits, without overflow.
        assert!(h.fits(None, 1, 2000, 1000).is_err());
        assert_eq!(h.fits(None, 0, 2000, 1000), Ok(()));
    }

    #[test]
    fn a_reservation_is_given_back_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let vol = Volume::create(dir.path(), crate::test_params(), None).unwrap();
        let uploads = Arc::new(Uploads::default());
        let r = uploads.reserve(&vol, "a", 700, Some(1000)).unwrap();
        let refused = uploads.reserve(&vol, "b", 700, Some(1000));
        assert!(matches!(
            refused,
            Err(StoreError::NoRoom {
                limit: RoomLimit::Quota,
                ..
            })
        ));
        assert!(r.resize(&vol, 1001, Some(1000)).is_err());
        r.resize(&vol, 1000, Some(1000)).unwrap();
        assert_eq!(uploads.reserved_bytes(), 1000);
        drop(r);
        assert_eq!(uploads.reserved_bytes(), 0);
        let _b = uploads.reserve(&vol, "b", 700, Some(1000)).unwrap();
        // No quota: every reservation is taken.
        let _c = uploads.reserve(&vol, "c", u64::MAX, None).unwrap();
    }
}
