//! The session registry: what the control API and the data plane share about each
//! session, and the table of sessions the API knows.
//!
//! The table is behind one short-lived mutex: the API takes it to look a session up, to
//! copy the streaming sessions for admission ([`Registry::snapshot`]) and to insert an
//! admitted one if nothing was inserted since that copy ([`Registry::register`]); it is
//! never held across admission, a catalog lookup or any I/O.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

pub use isnode_plane::stream::{
    Control, Expiry, NewStreamShared, Owner, SessionState, StreamShared,
};

/// The sessions by id.
pub type SessionTable = HashMap<String, Arc<StreamShared>>;

/// The streaming sessions at one moment, and the table's generation then.
pub struct Snapshot {
    /// The sessions in the table then.
    pub sessions: Vec<Arc<StreamShared>>,
    generation: u64,
}

/// Why a session could not be registered.
#[derive(Debug, PartialEq, Eq)]
pub enum RegisterError<E> {
    /// Sessions were registered since the snapshot: admit again over a new one.
    Stale,
    /// The hand-over refused the session.
    HandOver(E),
    /// Its object is being deleted ([`Registry::close_object`]).
    Closed,
}

/// The sessions, the table's generation (bumped by every insertion) and the objects
/// (TOIs) being deleted, which no new session may use.
struct Table {
    sessions: SessionTable,
    generation: u64,
    closed: HashSet<u32>,
}

/// The session table.
pub struct Registry {
    table: Mutex<Table>,
}

/// An object closed to new sessions while it is deleted ([`Registry::close_object`]),
/// open again when dropped (a delete refused, or done: the object no longer exists).
pub struct Closing<'a> {
    registry: &'a Registry,
    toi: u32,
    /// The sessions using the object when it was closed (streaming or awaiting their
    /// token's echo).
    pub users: Vec<Arc<StreamShared>>,
}

impl Drop for Closing<'_> {
    fn drop(&mut self) {
        self.registry.lock().closed.remove(&self.toi);
    }
}

impl Default for Registry {
    fn default() -> Registry {
        Registry::new()
    }
}

impl Registry {
    /// An empty table.
    pub fn new() -> Registry {
        Registry {
            table: Mutex::new(Table {
                sessions: HashMap::new(),
                generation: 0,
                closed: HashSet::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The session table, locked (briefly, please).
    pub fn lock_sessions(&self) -> impl std::ops::DerefMut<Target = SessionTable> + '_ {
        TableGuard(self.lock())
    }

    /// The streaming sessions now.
    pub fn snapshot(&self) -> Snapshot {
        let t = self.lock();
        Snapshot {
            sessions: t
                .sessions
                .values()
                .filter(|s| s.state() == SessionState::Streaming)
                .cloned()
                .collect(),
            generation: t.generation,
        }
    }

    /// Closes object `toi` to new sessions (their registration fails with
    /// [`RegisterError::Closed`]) until the guard is dropped, and lists the sessions that
    /// use it now: under one lock, so that a delete that finds no user deletes an object no
    /// session can have started on meanwhile.
    pub fn close_object(&self, toi: u32) -> Closing<'_> {
        let mut t = self.lock();
        t.closed.insert(toi);
        let users = t
            .sessions
            .values()
            .filter(|s| s.object.rec.toi == toi && s.state() == SessionState::Streaming)
            .cloned()
            .collect();
        drop(t);
        Closing {
            registry: self,
            toi,
            users,
        }
    }

    /// Inserts `s` under a fresh id made by `new_id` if no session was registered since
    /// `snap` was taken, after `hand_over` accepted it (the table stays locked meanwhile,
    /// so `hand_over` must not block).
    pub fn register<E>(
        &self,
        snap: &Snapshot,
        make: impl FnOnce(String) -> Arc<StreamShared>,
        new_id: impl Fn() -> String,
        hand_over: impl FnOnce(&Arc<StreamShared>) -> Result<(), E>,
    ) -> Result<Arc<StreamShared>, RegisterError<E>> {
        let mut t = self.lock();
        if t.generation != snap.generation {
            return Err(RegisterError::Stale);
        }
        let id = loop {
            let id = new_id();
            if !t.sessions.contains_key(&id) {
                break id;
            }
        };
        let s = make(id);
        if t.closed.contains(&s.object.rec.toi) {
            return Err(RegisterError::Closed);
        }
        hand_over(&s).map_err(RegisterError::HandOver)?;
        t.sessions.insert(s.id.clone(), s.clone());
        t.generation += 1;
        Ok(s)
    }

    /// The session `id`.
    pub fn find(&self, id: &str) -> Option<Arc<StreamShared>> {
        self.lock().sessions.get(id).cloned()
    }

    /// Removes and returns the session `id`.
    #[allow(dead_code)] // kept for callers that count nothing at removal
    pub fn remove(&self, id: &str) -> Option<Arc<StreamShared>> {
        self.lock().sessions.remove(id)
    }

    /// Removes and returns the session `id`; `retire` sees it under the table's lock.
    pub fn remove_with(
        &self,
        id: &str,
        retire: impl FnOnce(&StreamShared),
    ) -> Option<Arc<StreamShared>> {
        let mut table = self.lock();
        let s = table.sessions.remove(id)?;
        retire(&s);
        drop(table);
        Some(s)
    }
}

struct TableGuard<'a>(MutexGuard<'a, Table>);

impl std::ops::Deref for TableGuard<'_> {
    type Target = SessionTable;
    fn deref(&self) -> &SessionTable {
        &self.0.sessions
    }
}

impl std::ops::DerefMut for TableGuard<'_> {
    fn deref_mut(&mut self) -> &mut SessionTable {
        &mut self.0.sessions
    }
}

/// Fresh random keys for a unicast session (rand's thread generator: a CSPRNG seeded from
/// the OS).
pub fn random_owner() -> Owner {
    Owner {
        secret: rand::random(),
        token: rand::random(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use isnode_pool::objects::ObjectInfo;
    use isnode_store::{ingest, IngestOptions, Volume};

    fn object() -> Arc<ObjectInfo> {
        let dir = tempfile::tempdir().unwrap();
        let p = crate::test_params();
        let mut vol = Volume::create(dir.path(), p, None).unwrap();
        let bytes = vec![1u8; 30_000];
        let opts = IngestOptions {
            name: "a.ts".into(),
            bitrate_bps: 1_000_000,
            content_type: String::new(),
            replace: false,
        };
        ingest(&mut vol, &opts, &mut &bytes[..], 30_000, &mut |_| {}).unwrap();
        let rec = vol.object("a.ts").unwrap();
        Arc::new(ObjectInfo::new(&vol, rec).unwrap())
    }

    fn make(obj: &Arc<ObjectInfo>) -> impl FnOnce(String) -> Arc<StreamShared> + '_ {
        move |id| {
            Arc::new(StreamShared::new(NewStreamShared {
                id,
                object: obj.clone(),
                fdt_packets: Vec::new(),
                dest: "127.0.0.1:9".parse().unwrap(),
                start_codeword: 0,
                repair_dest: None,
                expiry: Expiry::Keepalive,
                send_rate_bps: None,
                now_ns: 0,
                burst: None,
                owner: None,
                validated: true,
            }))
        }
    }

    fn ok(_: &Arc<StreamShared>) -> Result<(), ()> {
        Ok(())
    }

    #[test]
    fn a_registration_since_the_snapshot_makes_it_stale() {
        let obj = object();
        let r = Registry::new();
        let snap = r.snapshot();
        let other = r.snapshot();
        let ids = std::cell::Cell::new(0u32);
        let new_id = || {
            ids.set(ids.get() + 1);
            format!("s{}", ids.get() / 2)
        };
        // The second id drawn collides with the first and is drawn again.
        let a = r.register(&snap, make(&obj), new_id, ok).unwrap();
        let stale = r.register(&other, make(&obj), new_id, ok);
        assert!(matches!(stale, Err(RegisterError::Stale)));
        let fresh = r.snapshot();
        assert_eq!(fresh.sessions.len(), 1);
        let b = r.register(&fresh, make(&obj), new_id, ok).unwrap();
        assert_ne!(a.id, b.id);
        // A refused hand-over registers nothing.
        let fresh = r.snapshot();
        let refused = r.register(&fresh, make(&obj), new_id, |_| Err(()));
        assert!(matches!(refused, Err(RegisterError::HandOver(()))));
        assert_eq!(r.snapshot().sessions.len(), 2);
        // Ended sessions are not in a snapshot; removal does not make one stale.
        b.end(SessionState::Done, 1);
        let snap = r.snapshot();
        assert_eq!(snap.sessions.len(), 1);
        assert!(r.remove(&a.id).is_some());
        assert!(r.register(&snap, make(&obj), new_id, ok).is_ok());
    }

    #[test]
    fn an_object_being_deleted_takes_no_new_session() {
        let obj = object();
        let r = Registry::new();
        let ids = std::cell::Cell::new(0u32);
        let new_id = || {
            ids.set(ids.get() + 1);
            format!("s{}", ids.get())
        };
        let a = r.register(&r.snapshot(), make(&obj), new_id, ok).unwrap();
        // A session's admission snapshot taken before the delete's check...
        let snap = r.snapshot();
        let closing = r.close_object(obj.rec.toi);
        assert_eq!(
            closing.users.len(),
            1,
            "the delete sees the session already there"
        );
        assert_eq!(closing.users[0].id, a.id);
        // ...cannot register between the check and the delete.
        let late = r.register(&snap, make(&obj), new_id, ok);
        assert!(matches!(late, Err(RegisterError::Closed)));
        assert_eq!(r.snapshot().sessions.len(), 1);
        // A delete refused (or done) opens the object again.
        drop(closing);
        assert!(r.register(&r.snapshot(), make(&obj), new_id, ok).is_ok());
    }
}
