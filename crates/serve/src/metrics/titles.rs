//! Sessions and bytes per title, under a bounded label set: the first
//! [`LABELLED_TITLES`] titles served get a label of their own, every later one is counted
//! under `other`. A title keeps its label once it has one, so each series only grows
//! (a "top N" recomputed at each scrape would move counts between series).
//!
//! Bytes of a title are the bytes of its sessions still in the session table plus those
//! of the sessions that left it ([`Titles::retired`], called under the table's lock, as
//! [`Titles::counts`] is, so that a session is never counted twice nor missed).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

/// Titles with a label of their own.
pub(crate) const LABELLED_TITLES: usize = 20;

/// The label of the titles beyond the labelled ones.
pub(crate) const OTHER: &str = "other";

#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    sessions: u64,
    retired_bytes: u64,
}

#[derive(Debug, Default)]
struct Table {
    labelled: HashMap<String, Slot>,
    other: Slot,
}

/// Per-title counters.
#[derive(Debug)]
pub(crate) struct Titles {
    capacity: usize,
    table: Mutex<Table>,
}

/// One series of the per-title families.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TitleCount {
    /// The title's name, or [`OTHER`].
    pub label: String,
    /// Unicast sessions admitted.
    pub sessions: u64,
    /// UDP payload bytes sent to them.
    pub bytes: u64,
}

impl Table {
    /// The slot counting `title`, given one if there is room.
    fn slot(&mut self, title: &str, capacity: usize) -> &mut Slot {
        if !self.labelled.contains_key(title) && self.labelled.len() < capacity {
            self.labelled.insert(title.to_string(), Slot::default());
        }
        match self.labelled.get_mut(title) {
            Some(s) => s,
            None => &mut self.other,
        }
    }
}

impl Titles {
    pub(crate) fn new(capacity: usize) -> Titles {
        Titles {
            capacity,
            table: Mutex::new(Table::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts an admitted unicast session of `title`.
    pub(crate) fn started(&self, title: &str) {
        self.lock().slot(title, self.capacity).sessions += 1;
    }

    /// Adds the bytes of a session of `title` that leaves the session table.
    pub(crate) fn retired(&self, title: &str, bytes: u64) {
        let mut t = self.lock();
        let s = t.slot(title, self.capacity);
        s.retired_bytes = s.retired_bytes.saturating_add(bytes);
    }

    /// Every series: the labelled titles by name, then `other`, with the bytes of the
    /// sessions in the table (`live`: title and bytes sent) added.
    pub(crate) fn counts<'a>(&self, live: impl Iterator<Item = (&'a str, u64)>) -> Vec<TitleCount> {
        let t = self.lock();
        let mut live_bytes: HashMap<&str, u64> = HashMap::new();
        let mut other_live = 0u64;
        for (title, bytes) in live {
            if t.labelled.contains_key(title) {
                *live_bytes.entry(title).or_default() += bytes;
            } else {
                other_live = other_live.saturating_add(bytes);
            }
        }
        let mut v: Vec<TitleCount> = t
            .labelled
            .iter()
            .map(|(name, s)| TitleCount {
                label: name.clone(),
                sessions: s.sessions,
                bytes: s.retired_bytes + live_bytes.get(name.as_str()).copied().unwrap_or(0),
            })
            .collect();
        v.sort_by(|a, b| a.label.cmp(&b.label));
        v.push(TitleCount {
            label: OTHER.to_string(),
            sessions: t.other.sessions,
            bytes: t.other.retired_bytes.saturating_add(other_live),
        });
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_beyond_the_capacity_count_as_other_and_series_only_grow() {
        let t = Titles::new(2);
        t.started("a");
        t.started("b");
        t.started("c");
        t.started("a");
        let c = t.counts([("a", 10), ("c", 5)].into_iter());
        let get = |l: &str| c.iter().find(|x| x.label == l).cloned();
        assert_eq!(get("a").map(|x| (x.sessions, x.bytes)), Some((2, 10)));
        assert_eq!(get("b").map(|x| (x.sessions, x.bytes)), Some((1, 0)));
        assert_eq!(get(OTHER).map(|x| (x.sessions, x.bytes)), Some((1, 5)));
        assert!(get("c").is_none());
        // The session of "a" leaves the table: its bytes stay counted.
        t.retired("a", 12);
        let c = t.counts(std::iter::empty());
        assert_eq!(c.iter().find(|x| x.label == "a").map(|x| x.bytes), Some(12));
        assert_eq!(c.len(), 3);
    }
}
