//! The prefabrication pipeline of ingest: the caller's thread reads the input codeword by
//! codeword, encoder threads (one per core) encode codewords in parallel, and one writer
//! thread lays their packets out into the members' blocks in codeword order, its full
//! blocks written behind it ([`crate::write_behind`]). Reading, encoding and writing
//! overlap; the bytes written are those of the one-codeword-at-a-time algorithm
//! (`tests/ingest_bytes.rs` pins them).
//!
//! Memory is allocated at start and bounded: [`Pipeline::JOBS_PER_ENCODER`] codeword
//! buffers per encoder circulate reader → encoders → writer → reader; when all are
//! taken, the reader waits for the writer to hand one back (every wait has a deadline).
//!
//! An encoder, for codeword `sbn` (k source symbols, m repair):
//! - computes the m repair symbols straight into their packets' symbol fields,
//! - copies the k source symbols into theirs,
//! - seals each packet (LCT/ALC header and CRC32C) and computes the packets' digests,
//!   eight at a time ([`isnode_wire::digest::packet_digests`]).
//!
//! The reader keeps what needs the input in order (content CRC32C, media index) and the
//! catalog (digest rows as the writer hands the codewords back).

use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use isnode_fec::Code;
use isnode_wire::digest::{packet_digests, DIGEST_LEN};
use isnode_wire::{DataPacketId, DATA_HEADER_LEN};

use crate::crc_shift::ZeroShift;
use crate::records::BlockRecord;
use crate::segment::SegmentWriter;
use crate::{Layout, StoreError};

/// Longest wait for a pipeline thread to hand something on before ingest gives up.
const STALL: Duration = Duration::from_secs(120);
/// How often an idle encoder or the writer checks whether the pipeline has closed.
const IDLE_POLL: Duration = Duration::from_secs(1);

/// One codeword on its way through the pipeline.
pub(crate) struct Job {
    /// Its source block number.
    pub(crate) sbn: u32,
    /// The source symbols as read, back to back (zero after the data).
    source: Vec<u8>,
    /// Every packet of the codeword, back to back, by ESI.
    packets: Vec<u8>,
    /// The packets' digests, by ESI.
    digests: Vec<u8>,
    /// CRC32C of each whole packet (header, CRC field and symbol), by ESI: what a block's
    /// CRC32C is made of.
    packet_crcs: Vec<u32>,
    /// CRC32C of each symbol's bytes, by ESI: what the content CRC32C is made of.
    symbol_crcs: Vec<u32>,
    /// Why the encoder could not encode it.
    failed: Option<StoreError>,
}

impl Job {
    /// The source buffer of the codeword being read: `k × symbol_len` bytes.
    pub(crate) fn source_mut(&mut self, k: usize, symbol_len: usize) -> &mut [u8] {
        &mut self.source[..k * symbol_len]
    }

    /// The digest row of the codeword (n × [`DIGEST_LEN`] bytes).
    pub(crate) fn digest_row(&self, n: usize) -> Vec<u8> {
        self.digests[..n * DIGEST_LEN].to_vec()
    }

    /// `crc32c_append(crc, data)` for the codeword's `data_len` bytes of data, from the
    /// CRC32Cs of its whole symbols (computed by the encoder) and the bytes of a last
    /// partial one.
    pub(crate) fn append_data_crc(&self, mut crc: u32, data_len: usize, crcs: &Crcs) -> u32 {
        let e = crcs.symbol.len();
        let whole = data_len / e;
        for symbol_crc in &self.symbol_crcs[..whole] {
            crc = crcs.symbol.append(crc, *symbol_crc);
        }
        crc32c::crc32c_append(crc, &self.source[whole * e..data_len])
    }
}

/// The CRC32C maps of one volume's packets (see [`crate::crc_shift`]).
pub(crate) struct Crcs {
    /// Over one symbol.
    pub(crate) symbol: ZeroShift,
    /// Over what follows a packet's CRC field (FPI and symbol).
    after_field: ZeroShift,
    /// Over one packet.
    pub(crate) packet: ZeroShift,
}

impl Crcs {
    /// The maps for packets of `symbol_len`-byte symbols.
    pub(crate) fn new(symbol_len: usize) -> Crcs {
        Crcs {
            symbol: ZeroShift::new(symbol_len),
            after_field: ZeroShift::new(DATA_HEADER_LEN - CRC_FIELD.end + symbol_len),
            packet: ZeroShift::new(DATA_HEADER_LEN + symbol_len),
        }
    }

    /// The CRC32C of a sealed packet's whole bytes and of its symbol's, from the CRC32C it
    /// carries (which covers every byte but the field) and its first 28 bytes:
    /// `carried = M(a) ^ crc32c(rest)` where `a` is the CRC32C of the bytes before the
    /// field and `rest` the bytes after it; the whole packet's is `M(a') ^ crc32c(rest)`
    /// with `a'` = `a` carried over the field.
    fn of_sealed(&self, packet: &[u8]) -> (u32, u32) {
        let field = &packet[CRC_FIELD];
        let carried = u32::from_be_bytes([field[0], field[1], field[2], field[3]]);
        let before = crc32c::crc32c(&packet[..CRC_FIELD.start]);
        let through = crc32c::crc32c_append(before, field);
        let rest = carried ^ self.after_field.apply(before);
        let whole = rest ^ self.after_field.apply(through);
        // rest = crc32c(FPI ++ symbol) = M_E(crc32c(FPI)) ^ crc32c(symbol).
        let fpi = crc32c::crc32c(&packet[CRC_FIELD.end..DATA_HEADER_LEN]);
        (whole, rest ^ self.symbol.apply(fpi))
    }
}

/// Where a data packet's CRC32C field is (docs/format.md).
const CRC_FIELD: std::ops::Range<usize> = 20..24;

/// What every thread of the pipeline knows of the object.
pub(crate) struct Shape {
    /// The object's layout.
    pub(crate) layout: Layout,
    /// The volume's TSI, carried by every packet.
    pub(crate) tsi: u32,
    /// The object's TOI, carried by every packet.
    pub(crate) toi: u32,
    /// CRC32C maps for its packets.
    pub(crate) crcs: Crcs,
}

/// The writer thread: the block records of every member once all is written.
pub(crate) type Writer<'scope> =
    std::thread::ScopedJoinHandle<'scope, Result<Vec<BlockRecord>, StoreError>>;

/// The threads of one ingest, and the channels between them and the reader.
pub(crate) struct Pipeline {
    /// Codewords to encode.
    pub(crate) to_encode: Sender<Job>,
    /// Codewords written (in SBN order), their buffers free again.
    pub(crate) written: Receiver<Job>,
    /// Buffers not handed out yet.
    pub(crate) spare: Vec<Job>,
}

impl Pipeline {
    /// Codeword buffers per encoder thread.
    pub(crate) const JOBS_PER_ENCODER: usize = 3;

    /// Encoder threads: one per core the process may use (at most 8).
    pub(crate) fn encoders() -> usize {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            .clamp(1, 8)
    }

    /// Allocates the codeword buffers and starts the encoders and the writer in `scope`.
    /// The writer's handle gives the block records once every codeword is written.
    pub(crate) fn start<'scope>(
        scope: &'scope std::thread::Scope<'scope, '_>,
        shape: &'scope Shape,
        writers: Vec<SegmentWriter>,
    ) -> Result<(Pipeline, Writer<'scope>), StoreError> {
        let p = *shape.layout.params();
        let (e, m) = (p.symbol_len as usize, p.repair_symbols as usize);
        let n_max = (p.source_symbols + p.repair_symbols) as usize;
        let codes = Arc::new(codes_of(&shape.layout)?);
        let encoders = Self::encoders();
        let spare = (0..encoders * Self::JOBS_PER_ENCODER)
            .map(|_| Job {
                sbn: 0,
                source: vec![0; p.source_symbols as usize * e],
                packets: vec![0; n_max * p.packet_len() as usize],
                digests: vec![0; n_max * DIGEST_LEN],
                packet_crcs: vec![0; n_max],
                symbol_crcs: vec![0; n_max],
                failed: None,
            })
            .collect();
        let (to_encode, todo) = mpsc::channel::<Job>();
        let (encoded_tx, encoded) = mpsc::channel::<Job>();
        let (written_tx, written) = mpsc::channel::<Job>();
        let todo = Arc::new(Mutex::new(todo));
        for i in 0..encoders {
            let (todo, out, codes) = (Arc::clone(&todo), encoded_tx.clone(), Arc::clone(&codes));
            std::thread::Builder::new()
                .name(format!("encode-{i}"))
                .spawn_scoped(scope, move || encode_jobs(&todo, &out, &codes, shape, m))
                .map_err(StoreError::io("starting an encoder thread"))?;
        }
        drop(encoded_tx);
        let writer = std::thread::Builder::new()
            .name("ingest-writer".into())
            .spawn_scoped(scope, move || {
                write_in_order(&encoded, &written_tx, writers, shape)
            })
            .map_err(StoreError::io("starting the ingest writer thread"))?;
        let pipeline = Pipeline {
            to_encode,
            written,
            spare,
        };
        Ok((pipeline, writer))
    }

    /// A free codeword buffer: a spare one, or the next written one (with it, the
    /// codeword it held, written). `None`: the writer has stopped (its handle says why).
    pub(crate) fn free_job(&mut self) -> Result<(Job, Option<u32>), Stopped> {
        if let Some(job) = self.spare.pop() {
            return Ok((job, None));
        }
        let job = self.next_written()?;
        let sbn = job.sbn;
        Ok((job, Some(sbn)))
    }

    /// The next codeword written, waiting for it.
    pub(crate) fn next_written(&mut self) -> Result<Job, Stopped> {
        match self.written.recv_timeout(STALL) {
            Ok(job) => Ok(job),
            Err(RecvTimeoutError::Timeout) => Err(Stopped::Stalled),
            Err(RecvTimeoutError::Disconnected) => Err(Stopped::WriterGone),
        }
    }
}

/// Why the reader cannot go on.
#[derive(Debug)]
pub(crate) enum Stopped {
    /// The writer ended early: its result says why.
    WriterGone,
    /// Nothing came back within [`STALL`].
    Stalled,
}

impl Stopped {
    /// The error to report, given the writer's own result.
    pub(crate) fn into_error(self, writer: Option<StoreError>) -> StoreError {
        match (self, writer) {
            (_, Some(e)) => e,
            (Stopped::WriterGone, None) => {
                StoreError::Corrupt("the ingest writer ended before the last codeword".into())
            }
            (Stopped::Stalled, None) => StoreError::Corrupt(format!(
                "the ingest pipeline made no progress within {STALL:?}"
            )),
        }
    }
}

/// The codes an object needs, by k: the full codeword's and a short last one's.
fn codes_of(layout: &Layout) -> Result<HashMap<u32, Code>, StoreError> {
    let m = layout.params().repair_symbols as usize;
    let mut codes = HashMap::new();
    let last = match layout.codewords() {
        0 => return Ok(codes),
        n => n - 1,
    };
    for sbn in [0, last] {
        let k = layout.source_symbols(sbn);
        if let std::collections::hash_map::Entry::Vacant(v) = codes.entry(k) {
            v.insert(Code::new(k as usize, k as usize + m)?);
        }
    }
    Ok(codes)
}

/// An encoder thread: encodes the codewords it takes until the reader closes the queue or
/// the writer is gone.
fn encode_jobs(
    todo: &Mutex<Receiver<Job>>,
    out: &Sender<Job>,
    codes: &HashMap<u32, Code>,
    shape: &Shape,
    m: usize,
) {
    loop {
        let next = todo
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .recv_timeout(IDLE_POLL);
        let mut job = match next {
            Ok(job) => job,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        job.failed = encode(&mut job, codes, shape, m).err();
        if out.send(job).is_err() {
            return;
        }
    }
}

/// Encodes one codeword: repair symbols, packets, digests.
fn encode(
    job: &mut Job,
    codes: &HashMap<u32, Code>,
    shape: &Shape,
    m: usize,
) -> Result<(), StoreError> {
    let p = shape.layout.params();
    let (e, plen) = (p.symbol_len as usize, p.packet_len() as usize);
    let k = shape.layout.source_symbols(job.sbn);
    let code = codes
        .get(&k)
        .ok_or_else(|| StoreError::Corrupt(format!("no code for k = {k}")))?;
    let k = k as usize;
    let n = k + m;
    let source = &job.source[..k * e];
    let (source_packets, repair_packets) = job.packets[..n * plen].split_at_mut(k * plen);
    let src: Vec<&[u8]> = source.chunks_exact(e).collect();
    let mut repair: Vec<&mut [u8]> = repair_packets
        .chunks_exact_mut(plen)
        .map(|packet| &mut packet[DATA_HEADER_LEN..])
        .collect();
    code.encode(&src, &mut repair)?;
    for (packet, symbol) in source_packets.chunks_exact_mut(plen).zip(&src) {
        packet[DATA_HEADER_LEN..].copy_from_slice(symbol);
    }
    let packets = job.packets[..n * plen].chunks_exact_mut(plen);
    let crcs = job.packet_crcs.iter_mut().zip(job.symbol_crcs.iter_mut());
    for (esi, (packet, (packet_crc, symbol_crc))) in packets.zip(crcs).enumerate() {
        let id = DataPacketId {
            tsi: shape.tsi,
            toi: shape.toi,
            sbn: job.sbn,
            esi: esi as u8,
        };
        isnode_wire::seal_data_packet(packet, &id)?;
        (*packet_crc, *symbol_crc) = shape.crcs.of_sealed(packet);
    }
    // Eight packets at a time where the CPU allows (the digests were half of ingest's CPU).
    packet_digests(
        &job.packets[..n * plen],
        plen,
        &mut job.digests[..n * DIGEST_LEN],
    );
    Ok(())
}

/// The writer thread: lays the encoded codewords' packets out in SBN order, hands each
/// codeword back to the reader once its packets are in the blocks, and finishes the
/// segment files after the last one.
fn write_in_order(
    encoded: &Receiver<Job>,
    written: &Sender<Job>,
    mut writers: Vec<SegmentWriter>,
    shape: &Shape,
) -> Result<Vec<BlockRecord>, StoreError> {
    let layout = &shape.layout;
    let plen = layout.params().packet_len() as usize;
    let mut waiting: BTreeMap<u32, Job> = BTreeMap::new();
    let mut next = 0u32;
    let mut idle = Duration::ZERO;
    while next < layout.codewords() {
        match encoded.recv_timeout(IDLE_POLL) {
            Ok(job) => {
                idle = Duration::ZERO;
                waiting.insert(job.sbn, job);
            }
            Err(RecvTimeoutError::Timeout) => {
                idle += IDLE_POLL;
                if idle >= STALL {
                    return Err(StoreError::Corrupt(format!(
                        "codeword {next} was not encoded within {STALL:?}"
                    )));
                }
                continue;
            }
            // The reader stopped (its own error is the one reported).
            Err(RecvTimeoutError::Disconnected) => {
                return Err(StoreError::Corrupt(format!(
                    "the input ended before codeword {next}"
                )))
            }
        }
        while let Some(mut job) = waiting.remove(&next) {
            if let Some(e) = job.failed.take() {
                return Err(e);
            }
            for (member, w) in writers.iter_mut().enumerate() {
                for esi in layout.member_run(next, member as u32).esis {
                    let at = esi as usize * plen;
                    let crc = job.packet_crcs[esi as usize];
                    w.push_framed(&job.packets[at..at + plen], crc, &shape.crcs.packet)?;
                }
            }
            // The reader may be gone (its error is the one reported).
            let _ = written.send(job);
            next += 1;
        }
    }
    let mut blocks = Vec::new();
    for w in writers {
        blocks.extend(w.finish()?);
    }
    Ok(blocks)
}
