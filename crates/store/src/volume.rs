//! Opening, creating and recovering a volume.
//!
//! ```text
//! DIR/catalog.sqlite        the catalog (SQLite, WAL)
//! DIR/lock                  flock: held exclusively while recovering or starting an ingest
//! DIR/tmp/ingest-TOI.lock   flock held by the live ingest or fill of object TOI
//! DIR/repair.lock           flock held by a repairing check (`volume check --repair`)
//! MEMBER/MEMBER             identity: volume uuid and member index
//! MEMBER/objects/TOI.seg    segment file of a complete or filling object
//! MEMBER/tmp/TOI.seg        segment file being written
//! ```

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

use crate::catalog::Catalog;
use crate::lock::{FileLock, LockWait, REPAIR_LOCK_FILE};
use crate::records::{BlockRecord, ObjectRecord, ObjectState};
use crate::rows::CatalogEntry;
use crate::{StoreError, VolumeParams};

const CATALOG_FILE: &str = "catalog.sqlite";
const MEMBER_ID_FILE: &str = "MEMBER";
/// Suffix of a segment being rebuilt in `MEMBER/tmp` (`TOI.rebuild`).
const REBUILD_SUFFIX: &str = ".rebuild";

/// An open volume.
#[derive(Debug)]
pub struct Volume {
    root: PathBuf,
    catalog: Catalog,
    params: VolumeParams,
    tsi: u32,
    uuid: String,
    members: Vec<PathBuf>,
}

impl Volume {
    /// Creates a volume at `root`. Members default to `root/members/0..M-1`.
    pub fn create(
        root: &Path,
        params: VolumeParams,
        member_dirs: Option<Vec<PathBuf>>,
    ) -> Result<Volume, StoreError> {
        params.validate()?;
        let catalog_path = root.join(CATALOG_FILE);
        if catalog_path.exists() {
            return Err(StoreError::VolumeExists(root.display().to_string()));
        }
        let members: Vec<PathBuf> = match member_dirs {
            Some(dirs) => {
                if dirs.len() != params.members as usize {
                    return Err(StoreError::BadParams(format!(
                        "{} member directories given for {} members",
                        dirs.len(),
                        params.members
                    )));
                }
                let unique: HashSet<_> = dirs.iter().collect();
                if unique.len() != dirs.len() {
                    return Err(StoreError::BadParams(
                        "member directories must be distinct".into(),
                    ));
                }
                dirs.iter()
                    .map(|d| {
                        std::path::absolute(d)
                            .map_err(StoreError::io(format!("resolving {}", d.display())))
                    })
                    .collect::<Result<Vec<_>, _>>()?
            }
            None => (0..params.members)
                .map(|i| PathBuf::from(format!("members/{i}")))
                .collect(),
        };
        fs::create_dir_all(root.join("tmp"))
            .map_err(StoreError::io(format!("creating {}", root.display())))?;
        let uuid = random_hex(16);
        let mut stored = Vec::with_capacity(members.len());
        for (i, m) in members.iter().enumerate() {
            let abs = resolve(root, m);
            prepare_member_dir(&abs, &uuid, i as u32, MemberDir::MustBeNew)?;
            // Default members are stored relative to the volume so it can move as a whole.
            stored.push(
                if m.is_relative() && !m.starts_with("..") && root.join(m) == abs {
                    m.clone()
                } else {
                    fs::canonicalize(&abs)
                        .map_err(StoreError::io(format!("resolving {}", abs.display())))?
                },
            );
        }
        let tsi = loop {
            let t = rand::random::<u32>();
            if t != 0 {
                break t;
            }
        };
        let tmp_catalog = root.join("catalog.sqlite.new");
        let _ = fs::remove_file(&tmp_catalog);
        drop(Catalog::create(&tmp_catalog, &params, &stored, tsi, &uuid)?);
        fs::rename(&tmp_catalog, &catalog_path)
            .map_err(StoreError::io("publishing the catalog"))?;
        crate::io::sync_dir(root).map_err(StoreError::io(format!("syncing {}", root.display())))?;
        Volume::open(root)
    }

    /// Opens the volume at `root`, first removing what a crashed ingest left behind.
    pub fn open(root: &Path) -> Result<Volume, StoreError> {
        let catalog_path = root.join(CATALOG_FILE);
        if !catalog_path.is_file() {
            return Err(StoreError::NoVolume(root.display().to_string()));
        }
        let catalog = Catalog::open(&catalog_path)?;
        let params = catalog.params()?;
        params.validate()?;
        let members = catalog
            .members()?
            .iter()
            .map(|m| resolve(root, m))
            .collect::<Vec<_>>();
        if members.len() != params.members as usize {
            return Err(StoreError::Corrupt(format!(
                "catalog lists {} members, parameters say {}",
                members.len(),
                params.members
            )));
        }
        let mut vol = Volume {
            root: root.to_path_buf(),
            tsi: catalog.tsi()?,
            uuid: catalog.uuid()?,
            catalog,
            params,
            members,
        };
        vol.recover()?;
        Ok(vol)
    }

    /// Opens the volume at `root`, creating it with default parameters if there is none.
    pub fn open_or_create(root: &Path) -> Result<Volume, StoreError> {
        if root.join(CATALOG_FILE).is_file() {
            Volume::open(root)
        } else {
            Volume::create(root, VolumeParams::default(), None)
        }
    }

    /// Removes partial objects of dead ingests, and files no object owns (a `filling`
    /// object stays, with its durable front, for its fill to resume).
    fn recover(&mut self) -> Result<(), StoreError> {
        // Under the volume lock no ingest begins, so every object row and file
        // that appears below belongs to an ingest that already holds its lock.
        let _volume_lock = FileLock::exclusive(&self.volume_lock_path(), LockWait::Block)?;
        self.remove_dead_ingests()?;
        self.remove_unowned_files()
    }

    /// Removes the objects still `writing` whose ingest is dead (its lock is free).
    ///
    /// An ingest may commit (and release its lock) at any moment after the snapshot
    /// of `writing` rows: a free lock alone does not mean a dead ingest. Only rows
    /// still `writing` are deleted, in one transaction, and only their files removed.
    fn remove_dead_ingests(&mut self) -> Result<(), StoreError> {
        // Bad rows too: an impossible row of a dead ingest goes like any other.
        let writing = self
            .catalog
            .entries(ObjectState::Writing)?
            .into_iter()
            .map(|e| match e {
                CatalogEntry::Valid(rec) => rec,
                CatalogEntry::Bad(bad) => bad.record,
            });
        crate::crash::point("recover-snapshot");
        let mut unlocked = Vec::new();
        for rec in writing {
            // A held lock means a live ingest: leave its object alone.
            if let Some(lock) = FileLock::exclusive(&self.ingest_lock_path(rec.toi), LockWait::Try)?
            {
                unlocked.push((rec, lock));
            }
        }
        if unlocked.is_empty() {
            return Ok(());
        }
        let tois: Vec<u32> = unlocked.iter().map(|(rec, _)| rec.toi).collect();
        let deleted: HashSet<u32> = self.catalog.delete_writing(&tois)?.into_iter().collect();
        for (rec, lock) in unlocked {
            if deleted.contains(&rec.toi) {
                tracing::warn!(toi = rec.toi, name = %rec.name, "removed an object whose ingest did not finish");
                self.remove_object_files(rec.toi);
            }
            lock.remove();
        }
        Ok(())
    }

    /// Removes segment files of no object and lock files of finished ingests.
    fn remove_unowned_files(&self) -> Result<(), StoreError> {
        // One statement, one snapshot: a commit cannot fall between two queries.
        let states = self.catalog.object_states()?;
        let live: HashSet<u32> = states.iter().map(|(toi, _)| *toi).collect();
        let writing: HashSet<u32> = states
            .iter()
            .filter(|(_, state)| *state == ObjectState::Writing)
            .map(|(toi, _)| *toi)
            .collect();
        // A filling object's lock file stays: a live fill may hold it.
        let locked: HashSet<u32> = states
            .iter()
            .filter(|(_, state)| *state != ObjectState::Complete)
            .map(|(toi, _)| *toi)
            .collect();
        // Lock files of finished ingests (a crash after the commit leaves one behind).
        for entry in dir_entries(&self.root.join("tmp")) {
            let toi = entry.file_name().to_str().and_then(|n| {
                n.strip_prefix("ingest-")?
                    .strip_suffix(".lock")?
                    .parse::<u32>()
                    .ok()
            });
            if toi.is_some_and(|t| !locked.contains(&t)) {
                let _ = fs::remove_file(entry.path());
            }
        }
        // A repair or rebuild running in another process owns its `.rebuild` files.
        // Held to the end, so none starts meanwhile.
        let repair_lock = FileLock::exclusive(&self.root.join(REPAIR_LOCK_FILE), LockWait::Try)?;
        let repairing = repair_lock.is_none();
        // Finished objects have their files in objects/; only live ingests in tmp/.
        for member in &self.members {
            for (dir, keep) in [("objects", &live), ("tmp", &writing)] {
                for entry in dir_entries(&member.join(dir)) {
                    let name = entry.file_name();
                    if repairing && name.to_str().is_some_and(|n| n.ends_with(REBUILD_SUFFIX)) {
                        continue;
                    }
                    let toi = entry
                        .file_name()
                        .to_str()
                        .and_then(|n| n.strip_suffix(".seg"))
                        .and_then(|n| n.parse::<u32>().ok());
                    if toi.is_none_or(|t| !keep.contains(&t)) {
                        tracing::warn!(path = %entry.path().display(), "removing a file no object owns");
                        let _ = fs::remove_file(entry.path());
                    }
                }
            }
        }
        Ok(())
    }

    /// Deletes the complete object `name`: its catalog rows (block checksums, packet
    /// digests and media index with it) in one transaction, then its segment files (a
    /// crash between leaves files no object owns, removed at the next open). Without a
    /// complete object of that name, the filling object no fill writes
    /// ([`Volume::delete_filling`]: a fill that failed part way). Its TOI.
    pub fn delete(&mut self, name: &str) -> Result<u32, StoreError> {
        match self.catalog.delete_complete(name)? {
            Some(toi) => {
                self.remove_object_files(toi);
                Ok(toi)
            }
            None => self.delete_filling(name),
        }
    }

    pub(crate) fn remove_object_files(&self, toi: u32) {
        for m in 0..self.params.members {
            let _ = fs::remove_file(self.segment_path(m, toi));
            let _ = fs::remove_file(self.tmp_segment_path(m, toi));
            let _ = fs::remove_file(self.rebuild_segment_path(m, toi));
        }
    }

    /// The volume directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Coding and layout parameters.
    pub fn params(&self) -> &VolumeParams {
        &self.params
    }

    /// FLUTE transport session identifier of this volume's packets.
    pub fn tsi(&self) -> u32 {
        self.tsi
    }

    /// Unique identifier of this volume.
    pub fn uuid(&self) -> &str {
        &self.uuid
    }

    /// Member directories.
    pub fn members(&self) -> &[PathBuf] {
        &self.members
    }

    /// The catalog.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    pub(crate) fn catalog_mut(&mut self) -> &mut Catalog {
        &mut self.catalog
    }

    /// The catalog's state of every member, by index (ok, failed, rebuilding).
    pub fn member_states(&self) -> Result<Vec<crate::MemberState>, StoreError> {
        self.catalog.member_states()
    }

    /// Records the state of `member` in the catalog, in one transaction (the server marks
    /// a member failed after repeated read errors; a rebuild moves it on).
    pub fn set_member_state(
        &mut self,
        member: u32,
        state: &crate::MemberState,
    ) -> Result<(), StoreError> {
        self.catalog.set_member_state(member, state)
    }

    /// Complete objects, by TOI, valid ones only (bad ones: [`Volume::entries`]).
    pub fn objects(&self) -> Result<Vec<ObjectRecord>, StoreError> {
        self.catalog.objects(ObjectState::Complete)
    }

    /// Complete objects, by TOI, each valid or bad with its problem.
    pub fn entries(&self) -> Result<Vec<CatalogEntry>, StoreError> {
        self.catalog.entries(ObjectState::Complete)
    }

    /// The complete object called `name` ([`StoreError::BadObject`] if its row is impossible).
    pub fn object(&self, name: &str) -> Result<ObjectRecord, StoreError> {
        match self.catalog.entry_by_name(name)? {
            Some(CatalogEntry::Valid(rec)) => Ok(rec),
            Some(CatalogEntry::Bad(bad)) => Err(StoreError::BadObject {
                name: name.to_string(),
                problem: bad.problem,
            }),
            None => Err(StoreError::NotFound(name.to_string())),
        }
    }

    /// The validated block checksums of every member's segment of `rec` (laid out as
    /// `layout`), by member and block index; [`StoreError::BadObject`] if its block rows
    /// are impossible.
    pub fn blocks(
        &self,
        rec: &ObjectRecord,
        layout: &crate::Layout,
    ) -> Result<Vec<Vec<BlockRecord>>, StoreError> {
        let expected = crate::rows::expected_block_rows(layout);
        let rows = self
            .catalog
            .all_block_rows(rec.toi, expected.saturating_add(1))?;
        crate::rows::validate_all_blocks(layout, &rows).map_err(|problem| bad(rec, problem))
    }

    /// The validated time index of `rec`, `None` when it has none;
    /// [`StoreError::BadObject`] if its rows are impossible.
    pub fn media_index(
        &self,
        rec: &ObjectRecord,
    ) -> Result<Option<crate::records::MediaIndexRecord>, StoreError> {
        let Some(raw) = self.catalog.media_index_rows(rec.toi)? else {
            return Ok(None);
        };
        crate::rows::validate_media_index(&raw, rec.size_bytes)
            .map(Some)
            .map_err(|problem| bad(rec, problem))
    }

    /// The layout of a stored object: its own coding parameters (recorded at ingest) on
    /// this volume's members and blocks.
    pub fn layout(&self, rec: &ObjectRecord) -> Result<crate::Layout, StoreError> {
        let params = VolumeParams {
            symbol_len: rec.symbol_len,
            source_symbols: rec.source_symbols,
            repair_symbols: rec.repair_symbols,
            ..self.params
        };
        Ok(crate::Layout::new(params, rec.size_bytes)?)
    }

    /// Segment file of object `toi` on `member`.
    pub fn segment_path(&self, member: u32, toi: u32) -> PathBuf {
        self.members[member as usize]
            .join("objects")
            .join(format!("{toi}.seg"))
    }

    pub(crate) fn tmp_segment_path(&self, member: u32, toi: u32) -> PathBuf {
        self.members[member as usize]
            .join("tmp")
            .join(format!("{toi}.seg"))
    }

    /// Where a repair or rebuild writes `member`'s segment of `toi` before renaming it
    /// into place (kept by recovery while the repair lock is held).
    pub(crate) fn rebuild_segment_path(&self, member: u32, toi: u32) -> PathBuf {
        self.members[member as usize]
            .join("tmp")
            .join(format!("{toi}{REBUILD_SUFFIX}"))
    }

    pub(crate) fn ingest_lock_path(&self, toi: u32) -> PathBuf {
        self.root.join("tmp").join(format!("ingest-{toi}.lock"))
    }

    pub(crate) fn volume_lock_path(&self) -> PathBuf {
        self.root.join("lock")
    }

    /// Scratch directory of the volume (same file system as the catalog).
    pub fn tmp_dir(&self) -> PathBuf {
        self.root.join("tmp")
    }

    /// True if `member`'s identity file exists (false: the directory is missing or new).
    pub fn member_identity_present(&self, member: u32) -> bool {
        self.members[member as usize].join(MEMBER_ID_FILE).exists()
    }

    /// Checks that `member`'s directory is present and belongs to this volume.
    pub fn member_identity_ok(&self, member: u32) -> Result<(), String> {
        let path = self.members[member as usize].join(MEMBER_ID_FILE);
        let text = fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let expected = member_identity(&self.uuid, member);
        if text != expected {
            return Err(format!(
                "{} belongs to another volume or member",
                path.display()
            ));
        }
        Ok(())
    }

    /// Recreates `member`'s directory structure (after a disk was replaced).
    pub(crate) fn prepare_member(&self, member: u32) -> Result<(), StoreError> {
        prepare_member_dir(
            &self.members[member as usize],
            &self.uuid,
            member,
            MemberDir::Replace,
        )
    }
}

/// The error of an object whose rows are impossible.
fn bad(rec: &ObjectRecord, problem: String) -> StoreError {
    StoreError::BadObject {
        name: rec.name.clone(),
        problem,
    }
}

fn member_identity(uuid: &str, index: u32) -> String {
    format!("isnode member\nvolume {uuid}\nindex {index}\n")
}

/// Whether a member directory may already belong to a volume.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MemberDir {
    /// Creating a volume: a directory that is already a member is refused.
    MustBeNew,
    /// Recreating a member of this volume (after a disk was replaced).
    Replace,
}

fn prepare_member_dir(
    dir: &Path,
    uuid: &str,
    index: u32,
    mode: MemberDir,
) -> Result<(), StoreError> {
    let id_path = dir.join(MEMBER_ID_FILE);
    if mode == MemberDir::MustBeNew && id_path.exists() {
        return Err(StoreError::BadParams(format!(
            "{} is already a member of a volume",
            dir.display()
        )));
    }
    for sub in ["objects", "tmp"] {
        fs::create_dir_all(dir.join(sub)).map_err(StoreError::io(format!(
            "creating member directory {}",
            dir.display()
        )))?;
    }
    fs::write(&id_path, member_identity(uuid, index))
        .map_err(StoreError::io(format!("writing {}", id_path.display())))?;
    Ok(())
}

/// The entries of `dir`; none if it cannot be read (a missing member).
fn dir_entries(dir: &Path) -> impl Iterator<Item = fs::DirEntry> {
    fs::read_dir(dir).into_iter().flatten().flatten()
}

fn resolve(root: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        root.join(p)
    }
}

fn random_hex(bytes: usize) -> String {
    (0..bytes)
        .map(|_| format!("{:02x}", rand::random::<u8>()))
        .collect()
}
