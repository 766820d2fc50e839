//! The HTTP mirror: codewords of objects players read, held once as contiguous original
//! bytes in page-cache pages (an in-memory file per object, [`ViewFile`]), so that every
//! response sends them with `sendfile` (the connection's writer sees the body's bytes lie
//! in a view, `isnode_http::conns`) instead of copying them out of the stored packets and
//! again into the socket, once per reader.
//!
//! A codeword is gathered out of the pool once (by the first response that needs it) and
//! then shared by every response until its extent is the least recently used one when room
//! is needed (`http_mirror_bytes`; [`MirrorBook`] decides). Memory is taken and given back
//! in extents of whole folios: with files in memory of their own (`memfd`), a folio is a
//! page (or the largest huge page the kernel may give them: `largest_folio_bytes`) and a
//! codeword's slot is an extent; with files in a tmpfs mounted with huge pages
//! (`--http-mirror-dir`), an extent is a huge page holding the slots of several codewords
//! one after another. Giving an extent back removes whole folios: a socket still holding
//! one keeps the old pages, never pages zeroed or rewritten under it. A response that finds
//! its codeword being filled by another, or no room, copies it as before.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use axum::body::Bytes;
use isnode_pool::objects::ObjectInfo;
use isnode_serve_core::mirror_book::{Claim, ExtentKey, FillEnd, MirrorBook, Place, RegionKey};
use isnode_sys::fileview::{huge_page_bytes, largest_folio_bytes, ViewFile, PAGE_BYTES};

/// Most objects with a file in the mirror at once (each holds one descriptor).
const MAX_FILES: usize = 256;

/// The mirror of one server: its book, its files and its counters.
pub(crate) struct Mirror {
    inner: Mutex<Inner>,
    /// Frames sent from the mirror.
    pub frames: AtomicU64,
    /// Codewords gathered into it.
    pub fills: AtomicU64,
    /// Frames that could not use it (being filled by another, no room).
    pub bypasses: AtomicU64,
}

struct Inner {
    book: MirrorBook,
    /// What an extent is a multiple of: the largest folio the kernel may give the files
    /// (memory given back must be whole folios).
    folio_bytes: usize,
    /// Where the files are made: `None` for `memfd`s.
    dir: Option<PathBuf>,
    files: HashMap<u32, Arc<ObjectFile>>,
}

/// One object's file, laid out by its shape.
struct ObjectFile {
    view: ViewFile,
    shape: Shape,
}

/// How an object's file is laid out: extents of `extent_bytes`, each holding `per_extent`
/// slots of `slot_bytes` from its start (codeword `sbn` in extent `sbn / per_extent`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Shape {
    slot_bytes: usize,
    per_extent: u32,
    extent_bytes: usize,
}

impl Shape {
    /// The shape for codewords of at most `data_bytes` and folios of `folio_bytes` (a
    /// power of two, at least a page).
    fn of(data_bytes: usize, folio_bytes: usize) -> Shape {
        let slot_bytes = round_up(data_bytes, PAGE_BYTES);
        let extent_bytes = round_up(slot_bytes, folio_bytes);
        let per_extent = u32::try_from(extent_bytes / slot_bytes).unwrap_or(1).max(1);
        Shape {
            slot_bytes,
            per_extent,
            extent_bytes,
        }
    }

    /// Where codeword `sbn`'s slot begins in the file.
    fn offset(&self, sbn: u32) -> usize {
        let extent = (sbn / self.per_extent) as usize * self.extent_bytes;
        extent + (sbn % self.per_extent) as usize * self.slot_bytes
    }

    /// Codeword `sbn` of object `toi`'s extent in the book's terms.
    fn place(&self, toi: u32, sbn: u32) -> Place {
        Place {
            extent: ExtentKey {
                toi,
                index: sbn / self.per_extent,
            },
            extent_bytes: self.extent_bytes as u64,
        }
    }

    /// Bytes of the file of an object of `codewords`.
    fn file_bytes(&self, codewords: u32) -> Option<usize> {
        let extents = codewords.div_ceil(self.per_extent) as usize;
        self.extent_bytes.checked_mul(extents)
    }
}

/// What a response gets for one codeword.
pub(crate) enum Held {
    /// Held: frames of it are sent from the mirror.
    Ready(Region),
    /// The caller's to fill ([`Filling::fill`]), or it is given back when dropped.
    Fill(Filling),
    /// Copy it without the mirror.
    Bypass,
}

/// A pinned, ready codeword of the mirror.
pub(crate) struct Region {
    mirror: Arc<Mirror>,
    file: Arc<ObjectFile>,
    key: RegionKey,
    data_len: usize,
}

/// A codeword the caller fills; failed (forgotten) if dropped unfilled.
pub(crate) struct Filling(Option<Region>);

impl Mirror {
    /// A mirror of at most `budget_bytes` (0: none), its files `memfd`s or (`dir`) unnamed
    /// files in that directory (a tmpfs with huge pages: extents of a huge page).
    pub(crate) fn new(budget_bytes: u64, dir: Option<PathBuf>) -> Option<Arc<Mirror>> {
        (budget_bytes > 0).then(|| {
            let folio_bytes = match dir {
                Some(_) => huge_page_bytes(),
                None => memfd_folio_bytes(),
            };
            Arc::new(Mirror {
                inner: Mutex::new(Inner {
                    book: MirrorBook::new(budget_bytes),
                    folio_bytes,
                    dir,
                    files: HashMap::new(),
                }),
                frames: AtomicU64::new(0),
                fills: AtomicU64::new(0),
                bypasses: AtomicU64::new(0),
            })
        })
    }

    /// Bytes held now.
    pub(crate) fn held_bytes(&self) -> u64 {
        self.lock().book.held_bytes()
    }

    /// Changes the budget (the memory gate shrinks it as readers come under a memory
    /// limit); codewords no response pins are given back until what is held fits.
    pub(crate) fn set_budget(&self, budget_bytes: u64) {
        let mut inner = self.lock();
        if inner.book.budget_bytes() != budget_bytes {
            let evicted = inner.book.set_budget(budget_bytes);
            inner.give_back(&evicted);
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Codeword `sbn` of `obj` (a stored object, not one still filling): held, to fill,
    /// or not for the mirror.
    pub(crate) fn claim(self: &Arc<Self>, obj: &ObjectInfo, sbn: u32) -> Held {
        let layout = &obj.layout;
        let data_len = layout.codeword_data_len(sbn) as usize;
        let key = RegionKey {
            toi: obj.rec.toi,
            sbn,
        };
        let mut inner = self.lock();
        let shape = Shape::of(layout.codeword_data_len(0) as usize, inner.folio_bytes);
        let fill = match inner.book.claim(key, shape.place(key.toi, sbn)) {
            Claim::Ready => false,
            Claim::Fill { evicted } => {
                inner.give_back(&evicted);
                true
            }
            Claim::Bypass => {
                drop(inner);
                return self.bypass();
            }
        };
        // A file only for an object with a codeword held: a claim bypassed opens none.
        let Some(file) = inner.file(obj, shape) else {
            match fill {
                true => inner.book.filled(key, FillEnd::Failed),
                false => inner.book.unpin(key),
            }
            drop(inner);
            return self.bypass();
        };
        drop(inner);
        let region = Region {
            mirror: self.clone(),
            file,
            key,
            data_len,
        };
        match fill {
            false => Held::Ready(region),
            true => Held::Fill(Filling(Some(region))),
        }
    }

    fn bypass(&self) -> Held {
        self.bypasses.fetch_add(1, Ordering::Relaxed);
        Held::Bypass
    }
}

impl Inner {
    /// `obj`'s file, made if it has none and there is room for one more.
    fn file(&mut self, obj: &ObjectInfo, shape: Shape) -> Option<Arc<ObjectFile>> {
        let toi = obj.rec.toi;
        if let Some(f) = self.files.get(&toi) {
            return Some(f.clone());
        }
        if self.files.len() >= MAX_FILES {
            self.files.retain(|t, _| self.book.holds_object(*t));
            if self.files.len() >= MAX_FILES {
                return None;
            }
        }
        let len = shape.file_bytes(obj.layout.codewords())?;
        let made = match &self.dir {
            Some(dir) => ViewFile::new_in(dir, len),
            None => ViewFile::new(&format!("isnode-mirror-{toi}"), len),
        };
        let view = match made {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(object = %obj.rec.name, "HTTP mirror file: {e}");
                return None;
            }
        };
        let file = Arc::new(ObjectFile { view, shape });
        self.files.insert(toi, file.clone());
        Some(file)
    }

    /// Gives back the pages of `evicted` (under the lock: no fill of a codeword in them
    /// can start before their old pages are gone); a file left with no codeword is closed.
    fn give_back(&mut self, evicted: &[ExtentKey]) {
        for key in evicted {
            let Some(file) = self.files.get(&key.toi) else {
                continue;
            };
            let extent_bytes = file.shape.extent_bytes;
            let at = key.index as usize * extent_bytes;
            if let Err(e) = file.view.punch(at, extent_bytes) {
                tracing::warn!("HTTP mirror: giving back extent {}: {e}", key.index);
            }
            if !self.book.holds_object(key.toi) {
                self.files.remove(&key.toi);
            }
        }
    }
}

impl Region {
    /// Bytes `from..to` of the codeword's data as a body frame that keeps the codeword
    /// pinned until it is sent.
    pub(crate) fn frame(self, from: usize, to: usize) -> Option<Bytes> {
        let to = to.min(self.data_len);
        if from >= to {
            return None;
        }
        self.mirror.frames.fetch_add(1, Ordering::Relaxed);
        Some(Bytes::from_owner(Frame {
            region: self,
            from,
            to,
        }))
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        self.mirror.lock().book.unpin(self.key);
    }
}

/// A frame of a pinned region (the owner of a body [`Bytes`]).
struct Frame {
    region: Region,
    from: usize,
    to: usize,
}

impl AsRef<[u8]> for Frame {
    fn as_ref(&self) -> &[u8] {
        let at = self.region.file.shape.offset(self.region.key.sbn);
        self.region
            .file
            .view
            .bytes(at + self.from..at + self.to)
            .unwrap_or(&[])
    }
}

impl Filling {
    /// Writes the codeword's whole data (`data`) into its slot: ready, shared from now on.
    pub(crate) fn fill(mut self, data: &[u8]) -> Option<Region> {
        let region = self.0.take()?;
        let at = region.file.shape.offset(region.key.sbn);
        let written = (data.len() == region.data_len)
            .then(|| region.file.view.write(at, data).ok())
            .flatten();
        let end = match written {
            Some(()) => FillEnd::Ready,
            None => FillEnd::Failed,
        };
        region.mirror.lock().book.filled(region.key, end);
        region.mirror.fills.fetch_add(1, Ordering::Relaxed);
        (end == FillEnd::Ready).then_some(region)
    }

    /// Bytes of the codeword's data.
    pub(crate) fn data_len(&self) -> usize {
        self.0.as_ref().map_or(0, |r| r.data_len)
    }
}

impl Drop for Filling {
    fn drop(&mut self) {
        if let Some(region) = self.0.take() {
            region
                .mirror
                .lock()
                .book
                .filled(region.key, FillEnd::Failed);
        }
    }
}

/// The largest folio the kernel may give the mirror's `memfd` files; huge pages (the
/// kernel's `shmem_enabled`) are said.
fn memfd_folio_bytes() -> usize {
    let folio_bytes = largest_folio_bytes();
    if folio_bytes > PAGE_BYTES {
        tracing::info!(
            folio_bytes,
            "the HTTP mirror's memfd files get huge pages (the kernel's shmem_enabled): memory \
             comes and goes a huge page at a time"
        );
    }
    folio_bytes
}

fn round_up(n: usize, align: usize) -> usize {
    n.div_ceil(align).max(1) * align
}
