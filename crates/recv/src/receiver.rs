//! The sans-IO receive core: verify, reorder, decode, and release the object in order.
//!
//! A [`Receiver`] is fed raw datagrams with [`Receiver::push`] and hands out the object's bytes
//! in order with [`Receiver::poll_output`]. It does no I/O and reads no clock: the caller
//! passes the time, so it runs the same in a test as behind a socket.
//!
//! Rules:
//!
//! - A datagram counts only if it is an isnode data packet whose CRC32C matches
//!   ([`isnode_wire::parse_data_packet`]), of this session's TSI and TOI, with an SBN of the
//!   object at or after the start codeword, an ESI below the codeword's `k + m`, and a symbol of
//!   E bytes. Anything that fails the parse or the CRC is *corrupt*; a valid packet of another
//!   session or out of range is *foreign*. Either way it is an erasure.
//! - Only codewords inside a window ahead of the release point (the next codeword to release,
//!   [`ReceiverConfig::window_codewords`]) are collected: a packet of a codeword further ahead
//!   is *foreign* too, so that one stray datagram cannot make the receiver give up the
//!   codewords before it. If the stream really is that far ahead (an outage longer than the
//!   window), the receiver follows it once k distinct symbols of one such codeword have
//!   arrived: the codewords more than `loss_horizon` before it are given up.
//! - FDT packets (TOI 0, valid CRC) are assembled as they come ([`FdtAssembler`]: each packet
//!   is looked at once, the XML bounded by [`isnode_wire::fdt::MAX_FDT_LEN_BYTES`]) until one FDT instance is
//!   complete; it is then checked against the session parameters ([`Receiver::fdt_check`]).
//! - A codeword is decoded ([`isnode_fec::Code::reconstruct`]) as soon as k distinct symbols of
//!   it are in. Symbols that arrive later are counted, not used.
//! - A codeword is declared unrecoverable once a valid packet of a codeword more than
//!   `loss_horizon` codewords later has arrived (the stream has moved on), or at
//!   [`Receiver::finish`] (end of stream or timeout).
//! - Output is strictly in order and covers the object from the start codeword to its end
//!   exactly, once. With [`Release::Instant`] (the default; the code is systematic), the
//!   source symbols of the codeword at the release point are released as soon as they are in
//!   and every source symbol before them is too: a stream without loss comes out symbol by
//!   symbol, as it arrives. Only when a source symbol before the release point is missing does
//!   the output wait, for the codeword's decode. With [`Release::Codeword`] a codeword is
//!   released whole, once decoded.
//! - A codeword that cannot be recovered is released as [`Output::Lost`] (a byte range for the
//!   caller to fill, e.g. with zeros). Under [`Release::Instant`] its intact prefix (the source
//!   symbols received up to the first missing one) may already be out as [`Output::Data`]:
//!   those bytes passed the CRC32C check, so they are the original bytes and nothing later can
//!   contradict them; the `Lost` piece then covers exactly the rest of the codeword, from the
//!   first byte not released to its end. Data and Lost pieces of one codeword together cover
//!   its byte range exactly ([`ReceiverStats::lost_ranges`] lists the Lost pieces).

use std::collections::BTreeMap;
use std::time::Duration;

use isnode_fec::Code;

use crate::digests::{DigestBook, Verdict};
use isnode_wire::fdt::{FdtAssembler, FdtInstance, FecOti};
use isnode_wire::partition::Partition;
use isnode_wire::{parse_data_packet, parse_packet, CrcStatus, DataPacket, FEC_ENCODING_ID_RS28};

/// What the receiver needs to know about the session: identifiers and FEC parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionParams {
    /// FLUTE Transport Session Identifier of the stream.
    pub tsi: u32,
    /// FLUTE Transport Object Identifier of the object.
    pub toi: u32,
    /// Transfer length L of the object in bytes.
    pub transfer_length: u64,
    /// Encoding symbol length E in bytes.
    pub symbol_len: u32,
    /// Maximum source block length B (source symbols of a full codeword).
    pub max_source_block_len: u32,
    /// Repair symbols m of every codeword (max_n - B).
    pub repair_symbols: u32,
    /// First codeword the stream sends.
    pub start_codeword: u32,
}

impl SessionParams {
    /// The FEC OTI these parameters describe (FEC Encoding ID 5).
    pub fn fec_oti(&self) -> FecOti {
        FecOti {
            encoding_id: FEC_ENCODING_ID_RS28,
            max_source_block_len: self.max_source_block_len,
            symbol_len: self.symbol_len,
            max_encoding_symbols: self.max_source_block_len + self.repair_symbols,
        }
    }

    /// The RFC 5052 partitioning of the object, checked (E, B, m within RFC 5510's limits).
    pub fn partition(&self) -> Result<Partition, ReceiverError> {
        let n = u64::from(self.max_source_block_len) + u64::from(self.repair_symbols);
        if self.repair_symbols == 0 || n > 255 {
            return Err(ReceiverError::Params(format!(
                "B = {} and m = {} must satisfy m >= 1 and B + m <= 255",
                self.max_source_block_len, self.repair_symbols
            )));
        }
        let p = self
            .fec_oti()
            .partition(self.transfer_length)
            .map_err(|e| ReceiverError::Params(e.to_string()))?;
        if self.start_codeword > p.blocks() {
            return Err(ReceiverError::Params(format!(
                "start codeword {} is past the {} codewords of the object",
                self.start_codeword,
                p.blocks()
            )));
        }
        Ok(p)
    }
}

/// Errors of the receive core (bad session parameters only: bad packets are counted, not errors).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReceiverError {
    /// The session parameters are inconsistent or out of range.
    #[error("invalid session parameters: {0}")]
    Params(String),
}

/// When the source symbols of a codeword are released.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Release {
    /// As soon as they and every source symbol before them are in (the code is systematic):
    /// the output waits for a decode only when a source symbol before the release point is
    /// missing.
    #[default]
    Instant,
    /// A codeword at a time, once decoded (k symbols in), as before instant start.
    Codeword,
}

/// Tuning of a [`Receiver`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReceiverConfig {
    /// When source symbols are released. Default [`Release::Instant`].
    pub release: Release,
    /// A codeword still short of k symbols is declared unrecoverable when a valid packet of a
    /// codeword more than this many codewords later arrives. Default 2.
    pub loss_horizon: u32,
    /// Codewords collected ahead of the release point (the next codeword to release): a packet
    /// of codeword `release + window_codewords` or later is foreign. Raised to
    /// `loss_horizon + 2` if smaller, so that the loss horizon can be reached. Bounds the
    /// codewords held in memory. Default 16.
    pub window_codewords: u32,
}

impl Default for ReceiverConfig {
    fn default() -> Self {
        ReceiverConfig {
            release: Release::Instant,
            loss_horizon: 2,
            window_codewords: 16,
        }
    }
}

impl ReceiverConfig {
    /// The window in effect: `window_codewords`, at least `loss_horizon + 2`.
    pub fn effective_window_codewords(&self) -> u32 {
        self.window_codewords
            .max(self.loss_horizon.saturating_add(2))
    }
}

/// How [`Receiver::push`] classified a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PacketClass {
    /// A new symbol of a codeword still being collected; `decoded` if it completed the codeword.
    Symbol {
        /// Source Block Number.
        sbn: u32,
        /// Encoding Symbol ID.
        esi: u8,
        /// Whether this symbol was the k-th and the codeword is now decoded.
        decoded: bool,
    },
    /// A valid symbol of a codeword already decoded, declared lost, or released.
    Redundant,
    /// A symbol already received.
    Duplicate,
    /// Failed the packet parse or the CRC32C check.
    Corrupt,
    /// Valid, but of another session/object, out of the object's range, or of a codeword
    /// beyond the window ahead of the release point.
    Foreign,
    /// A valid FDT packet (TOI 0).
    Fdt,
    /// Its digest does not match the server's ([`Receiver::authenticate`]).
    Forged,
    /// Its codeword's digests are not known yet: dropped, like a loss.
    Unverified,
}

/// A piece of the object, released in order by [`Receiver::poll_output`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// The original bytes of codeword `sbn`, at `offset` in the object.
    Data {
        /// Source Block Number.
        sbn: u32,
        /// Byte offset in the object.
        offset: u64,
        /// The codeword's bytes (padding removed).
        bytes: Vec<u8>,
    },
    /// Codeword `sbn` could not be recovered: `len` bytes at `offset` are missing.
    Lost {
        /// Source Block Number.
        sbn: u32,
        /// Byte offset in the object.
        offset: u64,
        /// Number of bytes missing.
        len: u64,
    },
}

impl Output {
    /// Byte offset of this piece in the object.
    pub fn offset(&self) -> u64 {
        match self {
            Output::Data { offset, .. } | Output::Lost { offset, .. } => *offset,
        }
    }

    /// Length of this piece in bytes.
    pub fn len(&self) -> u64 {
        match self {
            Output::Data { bytes, .. } => bytes.len() as u64,
            Output::Lost { len, .. } => *len,
        }
    }

    /// True for an empty piece (never produced: every codeword holds at least one byte).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Result of checking an FDT instance against the session.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "status", content = "detail")]
pub enum FdtCheck {
    /// No complete FDT instance has been received.
    NotReceived,
    /// The FDT describes the object exactly as the session does.
    Verified,
    /// The FDT contradicts the session parameters.
    Mismatch(String),
}

/// A byte range of the output released as [`Output::Lost`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LostRange {
    /// Source Block Number of the codeword that could not be recovered.
    pub sbn: u32,
    /// Byte offset in the object.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

/// Counters of a [`Receiver`].
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReceiverStats {
    /// Datagrams pushed.
    pub packets_received: u64,
    /// Distinct valid symbols of this object received (used or not).
    pub packets_valid: u64,
    /// Datagrams that failed the parse or the CRC32C check.
    pub packets_corrupt: u64,
    /// Valid datagrams of another session or out of range.
    pub packets_foreign: u64,
    /// Symbols received more than once.
    pub packets_duplicate: u64,
    /// Valid FDT packets.
    pub packets_fdt: u64,
    /// Packets of this object whose digest did not match the server's (with packet
    /// authentication, [`Receiver::authenticate`]): forged, or corrupt past their CRC.
    pub packets_forged: u64,
    /// Packets of this object dropped because their codeword's digests were not known yet.
    pub packets_unverified: u64,
    /// Symbols of this object that were expected (n per released codeword) but never arrived
    /// valid: expected − valid − corrupt (a corrupt packet stands for one expected symbol),
    /// never below 0.
    pub packets_lost: u64,
    /// Symbols not (yet) received valid that lie below the highest ESI received of their
    /// codeword, in every codeword so far, released or still collected (all k source symbols
    /// of a codeword released without any symbol): the loss the client can see whatever
    /// number of repair symbols the server chose to send (adaptive repair), unlike
    /// `packets_lost`, which expects all n of released codewords only. A symbol that arrives
    /// late, reordered, leaves it again.
    pub packets_missed: u64,
    /// Source symbols rebuilt by the Reed-Solomon decoder.
    pub symbols_repaired: u64,
    /// Codewords of the stream (from the start codeword to the end of the object).
    pub codewords_total: u32,
    /// Codewords decoded and released.
    pub codewords_decoded: u32,
    /// SBNs of the codewords declared unrecoverable, in order.
    pub codewords_unrecoverable: Vec<u32>,
    /// The byte ranges released as lost, in order: one per unrecoverable codeword, the part
    /// of it not released as data before (its whole range unless an intact prefix was).
    pub lost_ranges: Vec<LostRange>,
    /// Object bytes released as data.
    pub bytes_recovered: u64,
    /// Object bytes released as lost.
    pub bytes_lost: u64,
}

/// State of one codeword in the window.
enum State {
    /// Symbols being collected: `buf` holds n slots of E bytes.
    Collecting { buf: Vec<u8>, present: Vec<bool> },
    /// Decoded: the codeword's bytes, waiting for release.
    Decoded(Vec<u8>),
    /// Released (as data or lost): only the bookkeeping is kept.
    Released,
}

/// A set of ESIs (8 bits each).
#[derive(Clone, Copy, Debug, Default)]
struct EsiSet {
    /// Bit i of word i/64 is set if ESI i is in.
    bits: [u64; 4],
    /// Number of bits set.
    len: u32,
}

impl EsiSet {
    /// Adds `esi`; false if it was in already.
    fn insert(&mut self, esi: u8) -> bool {
        let (word, bit) = (usize::from(esi / 64), 1u64 << (esi % 64));
        if self.bits[word] & bit != 0 {
            return false;
        }
        self.bits[word] |= bit;
        self.len += 1;
        true
    }
}

struct Slot {
    /// ESIs received valid.
    seen: EsiSet,
    /// One past the highest ESI seen.
    high: u32,
    /// Source symbols of this codeword already released (a prefix).
    released: u32,
    state: State,
}

impl Slot {
    fn new() -> Slot {
        Slot {
            seen: EsiSet::default(),
            high: 0,
            released: 0,
            state: State::Collecting {
                buf: Vec::new(),
                present: Vec::new(),
            },
        }
    }
}

/// Codewords beyond the window whose symbols are tallied (without their bytes) to tell a
/// stream that moved on from strays.
const MAX_AHEAD_CANDIDATES: usize = 8;

/// The receive state machine of one session (see the module documentation).
pub struct Receiver {
    params: SessionParams,
    config: ReceiverConfig,
    /// [`ReceiverConfig::effective_window_codewords`].
    window_codewords: u32,
    partition: Partition,
    /// Codes for the (at most two) codeword sizes, keyed by k.
    codes: Vec<Code>,
    /// One past the last codeword.
    end: u32,
    /// Next codeword to release.
    next_release: u32,
    /// Highest SBN of a valid packet of this object, if any.
    max_sbn: Option<u32>,
    /// Set by [`Receiver::finish`]: everything not decoded is lost.
    finished: bool,
    /// Codewords before this one that are not decoded are lost ([`Receiver::give_up_before`]).
    give_up_below: u32,
    slots: BTreeMap<u32, Slot>,
    /// Codewords beyond the window and the ESIs seen of each (see [`Receiver::watch_ahead`]).
    ahead: BTreeMap<u32, EsiSet>,
    /// Symbols missing from codewords retired from `slots` or released without any symbol.
    missing_retired: u64,
    /// The same for [`ReceiverStats::packets_missed`] (below the highest ESI seen).
    missed_retired: u64,
    stats: ReceiverStats,
    /// The FDT instance being assembled, until one is complete.
    fdt: Option<FdtAssembler>,
    fdt_check: FdtCheck,
    first_symbol_at: Option<Duration>,
    last_symbol_at: Option<Duration>,
    /// Packet authentication: the digests packets are checked against (None: CRC only).
    digests: Option<DigestBook>,
}

impl std::fmt::Debug for Receiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver")
            .field("params", &self.params)
            .field("next_release", &self.next_release)
            .field("end", &self.end)
            .field("max_sbn", &self.max_sbn)
            .finish_non_exhaustive()
    }
}

impl Receiver {
    /// A receiver for one session.
    pub fn new(params: SessionParams, config: ReceiverConfig) -> Result<Receiver, ReceiverError> {
        let partition = params.partition()?;
        let m = params.repair_symbols as usize;
        let mut codes = Vec::new();
        for k in [partition.a_large, partition.a_small] {
            if k > 0
                && !codes
                    .iter()
                    .any(|c: &Code| c.source_symbols() == k as usize)
            {
                let code = Code::new(k as usize, k as usize + m)
                    .map_err(|e| ReceiverError::Params(e.to_string()))?;
                codes.push(code);
            }
        }
        let end = partition.blocks();
        let stats = ReceiverStats {
            codewords_total: end - params.start_codeword,
            ..Default::default()
        };
        Ok(Receiver {
            next_release: params.start_codeword,
            params,
            window_codewords: config.effective_window_codewords(),
            config,
            partition,
            codes,
            end,
            max_sbn: None,
            finished: false,
            give_up_below: 0,
            slots: BTreeMap::new(),
            ahead: BTreeMap::new(),
            missing_retired: 0,
            missed_retired: 0,
            stats,
            fdt: None,
            fdt_check: FdtCheck::NotReceived,
            first_symbol_at: None,
            last_symbol_at: None,
            digests: None,
        })
    }

    /// From now on, takes a data packet only if its digest matches the server's
    /// ([`crate::digests`]); the digests come with [`Receiver::add_digests`], and up to
    /// `capacity` codewords' are kept (those before the release point are dropped).
    pub fn authenticate(&mut self, capacity: usize) {
        self.digests
            .get_or_insert_with(|| DigestBook::with_capacity(capacity));
    }

    /// Whether packets are authenticated.
    pub fn is_authenticating(&self) -> bool {
        self.digests.is_some()
    }

    /// Adds the digests of codeword `sbn` (a no-op without authentication).
    pub fn add_digests(&mut self, sbn: u32, digests: Box<[u8]>) {
        if let Some(book) = &mut self.digests {
            book.insert(sbn, digests);
        }
    }

    /// The digests booked for codeword `sbn` (None without authentication or not booked).
    pub fn digests_of(&self, sbn: u32) -> Option<&[u8]> {
        self.digests.as_ref()?.get(sbn)
    }

    /// The first codeword from the release point up to `ahead` codewords on whose digests
    /// are missing (None without authentication, or none missing): what to fetch next.
    pub fn digests_missing(&self, ahead: u32) -> Option<u32> {
        let book = self.digests.as_ref()?;
        let from = self.next_release.max(self.give_up_below);
        let to = from.saturating_add(ahead).min(self.end);
        book.first_missing(from..to)
    }

    /// The session parameters.
    pub fn params(&self) -> &SessionParams {
        &self.params
    }

    /// The next codeword to release (every codeword before it is out).
    pub fn next_release(&self) -> u32 {
        self.next_release
    }

    /// The object's partitioning.
    pub fn partition(&self) -> &Partition {
        &self.partition
    }

    /// Byte offset in the object where the output starts (the start codeword's first byte).
    pub fn output_start(&self) -> u64 {
        self.partition.block_offset(self.params.start_codeword)
    }

    /// Number of bytes the output covers: from the start codeword to the end of the object.
    pub fn output_len(&self) -> u64 {
        self.params.transfer_length - self.output_start()
    }

    /// Handles one datagram received at time `now` (any clock, as long as it is monotonic).
    pub fn push(&mut self, bytes: &[u8], now: Duration) -> PacketClass {
        self.push_digested(bytes, now, None)
    }

    /// [`Receiver::push`] of a datagram whose digest ([`isnode_wire::digest::packet_digest`]
    /// of `bytes`) the caller computed already (`digest`; None: computed here if needed), as
    /// a receive loop does for a batch of packets at once, in lanes
    /// ([`isnode_wire::digest::packet_digests_each`]).
    pub fn push_digested(
        &mut self,
        bytes: &[u8],
        now: Duration,
        digest: Option<&isnode_wire::digest::Digest>,
    ) -> PacketClass {
        self.stats.packets_received += 1;
        let Some((packet, verdict)) = self.checked(bytes, digest) else {
            return self.push_non_data(bytes);
        };
        let id = packet.id;
        if !self.is_in_object(&packet) {
            self.stats.packets_foreign += 1;
            return PacketClass::Foreign;
        }
        match verdict {
            None | Some(Verdict::Authentic) => {}
            Some(Verdict::Forged) => {
                self.stats.packets_forged += 1;
                return PacketClass::Forged;
            }
            Some(Verdict::Unknown) => {
                self.stats.packets_unverified += 1;
                return PacketClass::Unverified;
            }
        }
        if u64::from(id.sbn) >= u64::from(self.next_release) + u64::from(self.window_codewords) {
            self.stats.packets_foreign += 1;
            self.watch_ahead(id.sbn, id.esi);
            return PacketClass::Foreign;
        }
        self.first_symbol_at.get_or_insert(now);
        self.last_symbol_at = Some(now);
        self.saw_codeword(id.sbn);
        if id.sbn < self.next_release && !self.slots.contains_key(&id.sbn) {
            // Released and retired long ago: cannot tell a duplicate from a late symbol.
            return PacketClass::Redundant;
        }
        self.push_symbol(id.sbn, id.esi, packet.symbol)
    }

    /// The data packet in `bytes` if it is one and intact, and (when packets are
    /// authenticated and it is of the object) what its digest says. An authentic packet is
    /// taken on its digest alone: SHA-256 over every byte the CRC32C covers, matching the
    /// stored packet's, says more than the CRC can, which is then not computed. Any other
    /// packet must pass its CRC32C (one that fails is corrupt, as without authentication,
    /// whatever its digest). None: not a data packet with a valid CRC32C.
    fn checked<'b>(
        &self,
        bytes: &'b [u8],
        digest: Option<&isnode_wire::digest::Digest>,
    ) -> Option<(DataPacket<'b>, Option<Verdict>)> {
        let (unverified, _) = isnode_wire::parse_data_packet_unverified(bytes).ok()?;
        let verdict = match &self.digests {
            Some(book) if self.is_in_object(&unverified) => {
                let id = unverified.id;
                let digest = || match digest {
                    Some(d) => *d,
                    None => isnode_wire::digest::packet_digest(bytes),
                };
                Some(book.check_digest(id.sbn, id.esi, digest))
            }
            _ => None,
        };
        if verdict == Some(Verdict::Authentic) {
            return Some((unverified, verdict));
        }
        let packet = parse_data_packet(bytes).ok()?;
        Some((packet, verdict))
    }

    /// Whether a valid data packet is of this session and object and within its ranges.
    fn is_in_object(&self, packet: &DataPacket<'_>) -> bool {
        let id = packet.id;
        id.tsi == self.params.tsi
            && id.toi == self.params.toi
            && id.sbn >= self.params.start_codeword
            && id.sbn < self.end
            && u32::from(id.esi) < self.encoding_symbols(id.sbn)
            && packet.symbol.len() == self.params.symbol_len as usize
    }

    /// A valid packet of codeword `sbn` arrived: the stream is at least there.
    fn saw_codeword(&mut self, sbn: u32) {
        self.max_sbn = Some(self.max_sbn.map_or(sbn, |m| m.max(sbn)));
    }

    /// Tallies a symbol of codeword `sbn` beyond the window. Once k distinct symbols of one such
    /// codeword are in, the stream has moved on (an outage longer than the window, not a
    /// stray): the receiver follows it, giving up what is more than the loss horizon behind.
    fn watch_ahead(&mut self, sbn: u32, esi: u8) {
        let window_end = u64::from(self.next_release) + u64::from(self.window_codewords);
        self.ahead.retain(|&s, _| u64::from(s) >= window_end);
        if !self.ahead.contains_key(&sbn) && self.ahead.len() >= MAX_AHEAD_CANDIDATES {
            let fewest = self.ahead.iter().min_by_key(|(&s, set)| (set.len, s));
            if let Some(&victim) = fewest.map(|(s, _)| s) {
                self.ahead.remove(&victim);
            }
        }
        let set = self.ahead.entry(sbn).or_default();
        set.insert(esi);
        if set.len >= self.partition.source_symbols(sbn) {
            self.ahead.clear();
            self.saw_codeword(sbn);
        }
    }

    /// A symbol of codeword `sbn` inside the window: stores it, decodes at k.
    fn push_symbol(&mut self, sbn: u32, esi: u8, symbol: &[u8]) -> PacketClass {
        let k = self.partition.source_symbols(sbn);
        let n = self.encoding_symbols(sbn) as usize;
        let e = self.params.symbol_len as usize;
        let slot = self.slots.entry(sbn).or_insert_with(Slot::new);
        if !slot.seen.insert(esi) {
            self.stats.packets_duplicate += 1;
            return PacketClass::Duplicate;
        }
        slot.high = slot.high.max(u32::from(esi) + 1);
        self.stats.packets_valid += 1;
        let State::Collecting { buf, present } = &mut slot.state else {
            return PacketClass::Redundant;
        };
        if buf.is_empty() {
            *buf = vec![0u8; n * e];
            *present = vec![false; n];
        }
        let at = usize::from(esi) * e;
        buf[at..at + e].copy_from_slice(symbol);
        present[usize::from(esi)] = true;
        let decoded = slot.seen.len >= k;
        if decoded {
            let code = self.codes.iter().find(|c| c.source_symbols() == k as usize);
            let block_bytes = self.partition.block_bytes(sbn) as usize;
            let (state, repaired) = decode(code, std::mem::take(buf), present, e, block_bytes);
            slot.state = state;
            self.stats.symbols_repaired += repaired;
        }
        PacketClass::Symbol { sbn, esi, decoded }
    }

    /// A datagram that is not a valid isnode data packet: an FDT packet or a corrupt one.
    fn push_non_data(&mut self, bytes: &[u8]) -> PacketClass {
        let Ok(p) = parse_packet(bytes) else {
            self.stats.packets_corrupt += 1;
            return PacketClass::Corrupt;
        };
        if p.crc != CrcStatus::Valid || p.lct.toi != 0 || p.fdt_instance_id.is_none() {
            // A data-packet header that fails the strict parse, a bad CRC, or a packet
            // without EXT_CRC (isnode seals every packet it sends).
            self.stats.packets_corrupt += 1;
            return PacketClass::Corrupt;
        }
        if p.lct.tsi != u64::from(self.params.tsi) {
            self.stats.packets_foreign += 1;
            return PacketClass::Foreign;
        }
        self.stats.packets_fdt += 1;
        if self.fdt_check != FdtCheck::NotReceived {
            return PacketClass::Fdt;
        }
        let Some(instance) = p.fdt_instance_id else {
            return PacketClass::Fdt;
        };
        let assembler = match &mut self.fdt {
            // A new instance replaces a partial older one.
            Some(a) if a.instance_id() == instance => a,
            other => other.insert(FdtAssembler::new(instance)),
        };
        if let Some(xml) = assembler.push(&p) {
            self.fdt_check = match verify_fdt(&xml, &self.params) {
                Ok(()) => FdtCheck::Verified,
                Err(reason) => FdtCheck::Mismatch(reason),
            };
            self.fdt = None;
        }
        PacketClass::Fdt
    }

    /// Declares the end of the stream: every codeword not decoded yet is unrecoverable.
    pub fn finish(&mut self) {
        self.finished = true;
    }

    /// Declares every codeword before `sbn` that is not decoded unrecoverable: the next
    /// [`Receiver::poll_output`] calls release them (their intact prefix, then the rest as
    /// lost). For a receiver whose codewords have deadlines (a broadcast's playing times).
    pub fn give_up_before(&mut self, sbn: u32) {
        self.give_up_below = self.give_up_below.max(sbn);
    }

    /// True once every codeword has been released (decoded or lost).
    pub fn is_complete(&self) -> bool {
        self.next_release >= self.end
    }

    /// True once a valid symbol of the last codeword has arrived.
    pub fn saw_last_codeword(&self) -> bool {
        self.end > 0 && self.max_sbn == Some(self.end - 1)
    }

    /// Time of the first and the last valid symbol of this object, as passed to `push`.
    pub fn symbol_times(&self) -> (Option<Duration>, Option<Duration>) {
        (self.first_symbol_at, self.last_symbol_at)
    }

    /// The FDT check so far.
    pub fn fdt_check(&self) -> &FdtCheck {
        &self.fdt_check
    }

    /// Whether codeword `sbn` (not yet decoded) is given up.
    fn given_up(&self, sbn: u32) -> bool {
        self.finished
            || sbn < self.give_up_below
            || self.max_sbn.is_some_and(|max| {
                u64::from(max) > u64::from(sbn) + u64::from(self.config.loss_horizon)
            })
    }

    /// The next piece of the object in order, if it is decided (see the module documentation).
    pub fn poll_output(&mut self) -> Option<Output> {
        if self.next_release >= self.end {
            return None;
        }
        let sbn = self.next_release;
        let decoded = matches!(
            self.slots.get(&sbn),
            Some(Slot {
                state: State::Decoded(_),
                ..
            })
        );
        if !decoded {
            if self.config.release == Release::Instant {
                if let Some(piece) = self.release_prefix(sbn) {
                    return Some(piece);
                }
            }
            if !self.given_up(sbn) {
                return None;
            }
        }
        let e = u64::from(self.params.symbol_len);
        let released = self.slots.get(&sbn).map_or(0, |s| u64::from(s.released));
        let offset = self.partition.block_offset(sbn) + released * e;
        self.next_release += 1;
        if !self.slots.contains_key(&sbn) {
            self.missing_retired += u64::from(self.encoding_symbols(sbn));
            self.missed_retired += u64::from(self.partition.source_symbols(sbn));
        }
        let out = match self.slots.get_mut(&sbn) {
            Some(slot) if decoded => {
                let State::Decoded(mut bytes) = std::mem::replace(&mut slot.state, State::Released)
                else {
                    unreachable!("checked above")
                };
                bytes.drain(..((released * e) as usize).min(bytes.len()));
                self.stats.codewords_decoded += 1;
                self.stats.bytes_recovered += bytes.len() as u64;
                Output::Data { sbn, offset, bytes }
            }
            other => {
                if let Some(slot) = other {
                    slot.state = State::Released;
                }
                let len = self.partition.block_bytes(sbn) - released * e;
                self.stats.codewords_unrecoverable.push(sbn);
                self.stats.lost_ranges.push(LostRange { sbn, offset, len });
                self.stats.bytes_lost += len;
                Output::Lost { sbn, offset, len }
            }
        };
        self.retire();
        if let Some(book) = &mut self.digests {
            book.forget_before(self.next_release);
        }
        Some(out)
    }

    /// [`Release::Instant`]: the source symbols of codeword `sbn` (not decoded) that are in,
    /// from its release point up to the first one missing, as one piece; `None` if the
    /// symbol at the release point is missing.
    fn release_prefix(&mut self, sbn: u32) -> Option<Output> {
        let e = self.params.symbol_len as usize;
        let k = self.partition.source_symbols(sbn) as usize;
        let block_bytes = self.partition.block_bytes(sbn) as usize;
        let offset = self.partition.block_offset(sbn);
        let slot = self.slots.get_mut(&sbn)?;
        let State::Collecting { buf, present } = &slot.state else {
            return None;
        };
        let from = slot.released as usize;
        let to = (from..k.min(present.len()))
            .find(|&i| !present[i])
            .unwrap_or(k.min(present.len()));
        if to <= from {
            return None;
        }
        // Never past the codeword's bytes (a Collecting codeword misses a source symbol, so
        // `to < k`; the bound keeps the padding out whatever happens).
        let (a, z) = (from * e, (to * e).min(block_bytes));
        let bytes = buf.get(a..z)?.to_vec();
        slot.released = to as u32;
        self.stats.bytes_recovered += bytes.len() as u64;
        Some(Output::Data {
            sbn,
            offset: offset + a as u64,
            bytes,
        })
    }

    /// Forgets released codewords the stream has moved past (their late symbols are redundant).
    fn retire(&mut self) {
        let horizon = u64::from(self.config.loss_horizon);
        let max = self.max_sbn.map_or(0, u64::from);
        while let Some(&sbn) = self.slots.keys().next() {
            let released = sbn < self.next_release;
            if !released || (!self.finished && u64::from(sbn) + horizon >= max) {
                break;
            }
            if let Some((sbn, slot)) = self.slots.pop_first() {
                self.missing_retired +=
                    u64::from(self.encoding_symbols(sbn).saturating_sub(slot.seen.len));
                self.missed_retired += u64::from(slot.high.saturating_sub(slot.seen.len));
            }
        }
    }

    /// Number of encoding symbols n = k + m of codeword `sbn`.
    fn encoding_symbols(&self, sbn: u32) -> u32 {
        self.partition.source_symbols(sbn) + self.params.repair_symbols
    }

    /// Counters so far. `packets_lost` covers the released codewords: all n symbols of a
    /// codeword the stream has moved past (or after [`Receiver::finish`]) are expected; of a
    /// codeword just decoded, only those below the highest ESI seen (its remaining repair
    /// symbols may still be on their way, or were never waited for).
    pub fn stats(&self) -> ReceiverStats {
        let mut s = self.stats.clone();
        let recent: u64 = self
            .slots
            .range(..self.next_release)
            .map(|(&sbn, slot)| {
                let expected = if self.finished {
                    self.encoding_symbols(sbn)
                } else {
                    slot.high
                };
                u64::from(expected.saturating_sub(slot.seen.len))
            })
            .sum();
        s.packets_lost = (self.missing_retired + recent).saturating_sub(s.packets_corrupt);
        // Every codeword in the window, released or not: a loss must show before its
        // codeword is decided (the server adapts the codewords that follow to it).
        let missed: u64 = self
            .slots
            .values()
            .map(|slot| u64::from(slot.high.saturating_sub(slot.seen.len)))
            .sum();
        s.packets_missed = self.missed_retired + missed;
        s
    }
}

/// Decodes a codeword from `buf` (n symbols of `e` bytes, `present` marking those received,
/// at least k of them): the decoded state (its first `block_bytes` bytes) and the number of
/// source symbols rebuilt.
fn decode(
    code: Option<&Code>,
    mut buf: Vec<u8>,
    present: &[bool],
    e: usize,
    block_bytes: usize,
) -> (State, u64) {
    let Some(code) = code else {
        // Cannot happen: there is a code for every k of the partition. Keep it an erasure.
        return (State::Released, 0);
    };
    let mut shards: Vec<&mut [u8]> = buf.chunks_mut(e).collect();
    if code.reconstruct(&mut shards, present).is_err() {
        // Cannot happen with k distinct symbols and a code for k; keep it an erasure.
        return (State::Released, 0);
    }
    let k = code.source_symbols();
    let repaired = present[..k].iter().filter(|p| !**p).count() as u64;
    buf.truncate(block_bytes);
    (State::Decoded(buf), repaired)
}

/// Checks an FDT instance (XML) against the session: the object's File element (by TOI)
/// must give the same transfer length and FEC OTI. Returns the first difference.
pub fn verify_fdt(xml: &[u8], params: &SessionParams) -> Result<(), String> {
    let fdt = FdtInstance::from_xml(xml).map_err(|e| format!("unreadable FDT: {e}"))?;
    let file = fdt
        .files
        .iter()
        .find(|f| f.toi == params.toi)
        .ok_or_else(|| format!("the FDT has no File with TOI {}", params.toi))?;
    if file.transfer_length != params.transfer_length {
        return Err(format!(
            "FDT Transfer-Length {} differs from the session's {}",
            file.transfer_length, params.transfer_length
        ));
    }
    let want = params.fec_oti();
    match file.fec_oti {
        Some(oti) if oti == want => Ok(()),
        Some(oti) => Err(format!(
            "FDT FEC OTI {oti:?} differs from the session's {want:?}"
        )),
        None => Err("the FDT File has no FEC OTI".to_string()),
    }
}

mod at_risk;
pub use at_risk::AtRisk;
mod rebind;

#[cfg(test)]
mod tests;
