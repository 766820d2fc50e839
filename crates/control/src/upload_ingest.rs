//! An upload's blocking side, with no HTTP in it: the check before a byte is read (the name
//! under `If-None-Match: *`, the free space and the quota, the room reserved), then the
//! body spooled, probed and ingested (as it arrives when its length is known; spooled whole
//! first when chunked, its quota room grown as it arrives). The API's handler
//! (`api/upload.rs`) parses the request, feeds the body at its pace, and renders the result.

use std::io::{BufReader, Read};

use isnode_store::spool::{self, SpoolBound, SpoolNeed};
use isnode_store::{IngestOptions, ObjectRecord, StoreError, Volume};

use isnode_serve_config::EncryptDefault;

use crate::handles::Control;
use crate::uploads::Reservation;

/// Read buffer of the ingest over the spool.
const INGEST_READ_BYTES: usize = 1 << 20;

/// What to do with an object of the same name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Existing {
    /// Replace it (atomically, when the upload commits).
    Replace,
    /// Refuse the upload (`If-None-Match: *`): `412`.
    Refuse,
}

/// One upload as asked.
#[derive(Clone, Debug)]
pub struct Upload {
    /// The object's name.
    pub name: String,
    /// The body's announced length (`None`: chunked).
    pub len: Option<u64>,
    /// What to do with an object of the same name.
    pub existing: Existing,
    /// Overrides the probed bitrate.
    pub bitrate_bps: Option<u64>,
    /// Overrides the probed content type.
    pub content_type: Option<String>,
    /// Whether to store it encrypted (`None`: the configuration's `encrypt`).
    pub encrypt: Option<EncryptDefault>,
}

/// Before a byte of the body is read: `412` for a name taken under `If-None-Match: *`,
/// and `507` when the announced length would not fit the free space or the quota, or the
/// open files limit leaves no descriptors for another object; the
/// quota room the upload holds meanwhile (`crate::uploads`: nothing yet for a body of
/// unknown length).
pub fn precheck(sh: &Control, up: &Upload) -> Result<Reservation, StoreError> {
    sh.descriptors
        .check_one_more()
        .map_err(|e| StoreError::NoDescriptors(e.to_string()))?;
    sh.objects.with_volume(|vol| {
        if up.existing == Existing::Refuse && vol.catalog().complete_toi(&up.name)?.is_some() {
            return Err(StoreError::NameExists(up.name.clone()));
        }
        let stored = match up.len {
            Some(len) => spool::stored_bytes(*vol.params(), len)?,
            None => 0,
        };
        let room = sh
            .uploads
            .reserve(vol, &up.name, stored, sh.config().max_volume_bytes)?;
        if let Some(len) = up.len {
            spool::check_room(vol, len, SpoolNeed::ToSpool, None)?;
        }
        Ok(room)
    })
}

/// The blocking side: spool, probe, check the room, ingest.
pub fn ingest_upload(
    sh: &Control,
    up: &Upload,
    src: impl Read,
    room: Reservation,
) -> Result<ObjectRecord, StoreError> {
    let mut vol = Volume::open(sh.objects.root())?;
    let encrypt = up.encrypt.unwrap_or(sh.config().encrypt);
    match (encrypt, up.len) {
        (EncryptDefault::On, _) => {
            crate::upload_protect::spool_then_encrypt(sh, &mut vol, up, src, &room)
        }
        (EncryptDefault::Off, Some(len)) => ingest_while_spooling(&mut vol, up, src, len),
        (EncryptDefault::Off, None) => spool_then_ingest(sh, &mut vol, up, src, &room),
    }
}

/// A body of known length (its room checked already): ingested as it arrives; what the
/// probe needs is kept on the way ([`spool::ProbeCopy`]) and probed once the last byte is
/// in, before the commit.
fn ingest_while_spooling<R: Read>(
    vol: &mut Volume,
    up: &Upload,
    src: R,
    len: u64,
) -> Result<ObjectRecord, StoreError> {
    let copy = std::cell::RefCell::new(spool::ProbeCopy::new(&vol.tmp_dir(), len));
    let mut tee = Tee { src, copy: &copy };
    let opts = IngestOptions {
        name: up.name.clone(),
        // Provisional: the probe at the end gives the real ones.
        bitrate_bps: up.bitrate_bps.unwrap_or(1),
        content_type: up.content_type.clone().unwrap_or_default(),
        replace: up.existing == Existing::Replace,
    };
    let mut describe = || {
        copy.borrow()
            .describe(up.bitrate_bps, up.content_type.clone())
            .map(Some)
    };
    isnode_store::ingest_then_describe(vol, &opts, &mut tee, len, &mut |_| {}, &mut describe)
}

/// A chunked body: spooled whole (bounded by the free space and the quota, its quota
/// room reserved as it arrives), probed, checked against the room, then ingested.
fn spool_then_ingest<R: Read>(
    sh: &Control,
    vol: &mut Volume,
    up: &Upload,
    src: R,
    room: &Reservation,
) -> Result<ObjectRecord, StoreError> {
    let (file, len) = spool_body(sh, vol, up, src, room)?;
    let described = spool::describe(&file, len, up.bitrate_bps, up.content_type.clone())?;
    room.resize(
        vol,
        spool::stored_bytes(*vol.params(), len)?,
        sh.config().max_volume_bytes,
    )?;
    spool::check_room(vol, len, SpoolNeed::None, None)?;
    let opts = IngestOptions {
        name: up.name.clone(),
        bitrate_bps: described.bitrate_bps,
        content_type: described.content_type,
        replace: up.existing == Existing::Replace,
    };
    let mut reader = BufReader::with_capacity(INGEST_READ_BYTES, file);
    isnode_store::ingest(vol, &opts, &mut reader, len, &mut |_| {})
}

/// Spools the whole body (bounded by its announced length, the free space and the quota,
/// its quota room reserved as it arrives); the spool, read back from its start, and its
/// length.
pub(crate) fn spool_body<R: Read>(
    sh: &Control,
    vol: &Volume,
    up: &Upload,
    src: R,
    room: &Reservation,
) -> Result<(std::fs::File, u64), StoreError> {
    let max = sh.config().max_volume_bytes;
    let bound = SpoolBound::new(up.len, u64::MAX, spool::free_bytes(vol)?)
        .within_quota(spool::quota_left(vol, max)?);
    let tmp = vol.tmp_dir();
    let mut src = Reserving::new(src, vol, room, max);
    let spooled = spool::spool(&tmp, &mut src, up.len, bound, &mut |_| {});
    let file = match (spooled, src.refused.take()) {
        (_, Some(over)) => return Err(over),
        (r, None) => r?,
    };
    let len = file
        .metadata()
        .map_err(StoreError::io("reading the size of the spool"))?
        .len();
    Ok((file, len))
}

/// A body of unknown length grows its reservation every this many bytes.
const RESERVE_STEP_BYTES: u64 = 8 << 20;

/// A body of unknown length, its quota room reserved as it arrives (every
/// [`RESERVE_STEP_BYTES`], and whole at its end): once what has arrived does not fit, the
/// read fails and `refused` says why.
struct Reserving<'a, R> {
    src: R,
    vol: &'a Volume,
    room: &'a Reservation,
    max: Option<u64>,
    read_bytes: u64,
    next_at: u64,
    refused: Option<StoreError>,
}

impl<'a, R: Read> Reserving<'a, R> {
    fn new(src: R, vol: &'a Volume, room: &'a Reservation, max: Option<u64>) -> Self {
        Reserving {
            src,
            vol,
            room,
            max,
            read_bytes: 0,
            next_at: RESERVE_STEP_BYTES,
            refused: None,
        }
    }

    /// Reserves the room of what has arrived; the next time is a step further.
    fn reserve_arrived(&mut self) -> Result<(), StoreError> {
        let stored = spool::stored_bytes(*self.vol.params(), self.read_bytes)?;
        self.room.resize(self.vol, stored, self.max)?;
        self.next_at = self.read_bytes.saturating_add(RESERVE_STEP_BYTES);
        Ok(())
    }
}

impl<R: Read> Read for Reserving<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.src.read(buf)?;
        self.read_bytes += n as u64;
        if self.read_bytes >= self.next_at && n > 0 {
            if let Err(e) = self.reserve_arrived() {
                let text = e.to_string();
                self.refused = Some(e);
                return Err(std::io::Error::other(text));
            }
        }
        Ok(n)
    }
}

/// The body as the ingest reads it, given to the probe's copy on the way.
struct Tee<'a, R> {
    src: R,
    copy: &'a std::cell::RefCell<spool::ProbeCopy>,
}

impl<R: Read> Read for Tee<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.src.read(buf)?;
        self.copy
            .borrow_mut()
            .write(&buf[..n])
            // An OS error stays one (a full disk is a 507).
            .map_err(|e| match e {
                StoreError::Io { source, .. } => source,
                e => std::io::Error::other(e),
            })?;
        Ok(n)
    }
}
