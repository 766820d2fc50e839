//! Packet authentication, the client's side (`isnode_wire::digest`): the digests of the
//! packets the client may still use, fetched over the control channel, and the check of
//! every packet against them. Sans-IO: [`DigestBook`] is fed the server's answers
//! ([`parse_digests`]) and asked about packets; fetching is the shell's business.
//!
//! A packet whose digest does not match is *forged* (or corrupt in a way its CRC missed);
//! one whose codeword's digests are not known yet is *unverified*. Either way the receive
//! core drops it: an erasure, exactly like a CRC failure, so a forged packet costs no byte
//! and changes no byte.

use std::collections::BTreeMap;
use std::ops::Range;

use isnode_wire::digest::{packet_digest, Digest, DIGEST_LEN};

/// Codewords whose digests a unicast session's book holds (about 4 MiB at 255 symbols):
/// far more than its window.
pub const MAX_BOOK_CODEWORDS: usize = 1024;
/// Most codewords a book may be made for (a broadcast receiver may hold a whole title's
/// digests at once: 128 MiB at 255 symbols, a title of about 10 GB).
pub const MAX_BOOK_CAPACITY: usize = 32_768;
/// Most encoding symbols of a codeword (GF(2^8) Reed-Solomon).
const MAX_SYMBOLS: usize = 255;

/// What a packet's digest says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The digest matches the catalog's: the stored packet, unchanged.
    Authentic,
    /// The digest does not match.
    Forged,
    /// The digests of the packet's codeword are not in the book (yet).
    Unknown,
}

/// The digests of a window of codewords, by SBN.
#[derive(Clone, Debug)]
pub struct DigestBook {
    rows: BTreeMap<u32, Box<[u8]>>,
    /// Most codewords held.
    capacity: usize,
}

impl Default for DigestBook {
    fn default() -> Self {
        DigestBook::with_capacity(MAX_BOOK_CODEWORDS)
    }
}

impl DigestBook {
    /// An empty book of [`MAX_BOOK_CODEWORDS`].
    pub fn new() -> DigestBook {
        DigestBook::default()
    }

    /// An empty book holding up to `capacity` codewords (1 to [`MAX_BOOK_CAPACITY`]).
    pub fn with_capacity(capacity: usize) -> DigestBook {
        DigestBook {
            rows: BTreeMap::new(),
            capacity: capacity.clamp(1, MAX_BOOK_CAPACITY),
        }
    }

    /// Adds codeword `sbn`'s digests (`n` × 16 bytes, ESI order). When the book is full the
    /// codeword with the lowest SBN goes (the release point only moves forward).
    pub fn insert(&mut self, sbn: u32, digests: Box<[u8]>) {
        if self.rows.len() >= self.capacity && !self.rows.contains_key(&sbn) {
            self.rows.pop_first();
        }
        self.rows.insert(sbn, digests);
    }

    /// Forgets the codewords before `sbn`.
    pub fn forget_before(&mut self, sbn: u32) {
        self.rows = self.rows.split_off(&sbn);
    }

    /// Forgets codeword `sbn` and those after it (a stream re-bound to another copy of
    /// the object there: their digests are that copy's).
    pub fn forget_from(&mut self, sbn: u32) {
        self.rows.split_off(&sbn);
    }

    /// Whether codeword `sbn`'s digests are in the book.
    pub fn has(&self, sbn: u32) -> bool {
        self.rows.contains_key(&sbn)
    }

    /// Codeword `sbn`'s digests, if in the book.
    pub fn get(&self, sbn: u32) -> Option<&[u8]> {
        self.rows.get(&sbn).map(|r| &r[..])
    }

    /// The first codeword of `range` whose digests are missing, if any.
    pub fn first_missing(&self, range: Range<u32>) -> Option<u32> {
        range.into_iter().find(|s| !self.rows.contains_key(s))
    }

    /// Checks `packet`, which claims to be symbol `esi` of codeword `sbn`.
    pub fn check(&self, sbn: u32, esi: u8, packet: &[u8]) -> Verdict {
        self.check_digest(sbn, esi, || packet_digest(packet))
    }

    /// Checks a packet that claims to be symbol `esi` of codeword `sbn` by its digest, which
    /// `digest` gives (computed only when the codeword's digests are in the book; a caller
    /// that digested a batch of packets together hands the one it has).
    pub fn check_digest(&self, sbn: u32, esi: u8, digest: impl FnOnce() -> Digest) -> Verdict {
        let Some(row) = self.rows.get(&sbn) else {
            return Verdict::Unknown;
        };
        let at = usize::from(esi) * DIGEST_LEN;
        match row.get(at..at + DIGEST_LEN) {
            Some(want) if want == digest() => Verdict::Authentic,
            _ => Verdict::Forged,
        }
    }
}

/// Digests of codewords as the server answers them: `(sbn, n × 16 bytes)`, in SBN order.
pub type DigestRows = Vec<(u32, Box<[u8]>)>;

/// Why an answer of the digest route was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DigestError {
    /// The answer does not parse.
    #[error("malformed digest answer: {0}")]
    Malformed(String),
}

/// Parses an answer of `GET /v1/objects/{name}/digests` (`docs/protocol.md`): `(sbn,
/// digests)` per codeword. Every codeword must lie in `asked`, appear once, in increasing
/// order, with `n` = `symbols(sbn)` digests.
pub fn parse_digests(
    body: &[u8],
    asked: Range<u32>,
    symbols: impl Fn(u32) -> u32,
) -> Result<DigestRows, DigestError> {
    let bad = |why: String| DigestError::Malformed(why);
    let mut rows = Vec::new();
    let mut rest = body;
    let mut last: Option<u32> = None;
    while !rest.is_empty() {
        let (head, tail) = rest
            .split_at_checked(6)
            .ok_or_else(|| bad(format!("{} bytes left, a row header is 6", rest.len())))?;
        let sbn = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
        let n = usize::from(u16::from_be_bytes([head[4], head[5]]));
        if !asked.contains(&sbn) || last.is_some_and(|l| sbn <= l) {
            return Err(bad(format!("codeword {sbn} not asked for or out of order")));
        }
        if n == 0 || n > MAX_SYMBOLS || n != symbols(sbn) as usize {
            return Err(bad(format!("codeword {sbn}: {n} digests")));
        }
        let (digests, tail) = tail.split_at_checked(n * DIGEST_LEN).ok_or_else(|| {
            bad(format!(
                "codeword {sbn}: the answer ends inside its digests"
            ))
        })?;
        rows.push((sbn, digests.into()));
        last = Some(sbn);
        rest = tail;
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(rows: &[(u32, &[Vec<u8>])]) -> Vec<u8> {
        let mut b = Vec::new();
        for (sbn, packets) in rows {
            b.extend_from_slice(&sbn.to_be_bytes());
            b.extend_from_slice(&(packets.len() as u16).to_be_bytes());
            for p in *packets {
                b.extend_from_slice(&packet_digest(p));
            }
        }
        b
    }

    #[test]
    fn authentic_forged_and_unknown() {
        let packets: Vec<Vec<u8>> = (0..3u8).map(|i| vec![i; 100]).collect();
        let body = answer(&[(5, &packets)]);
        let rows = parse_digests(&body, 0..10, |_| 3).unwrap();
        let mut book = DigestBook::new();
        for (sbn, d) in rows {
            book.insert(sbn, d);
        }
        assert_eq!(book.check(5, 1, &packets[1]), Verdict::Authentic);
        assert_eq!(book.check(5, 1, &packets[2]), Verdict::Forged);
        assert_eq!(book.check(5, 3, &packets[0]), Verdict::Forged, "ESI past n");
        assert_eq!(book.check(6, 0, &packets[0]), Verdict::Unknown);
        assert_eq!(book.first_missing(4..7), Some(4));
        book.forget_before(6);
        assert_eq!(book.check(5, 1, &packets[1]), Verdict::Unknown);
    }

    #[test]
    fn malformed_answers_are_refused() {
        let packets: Vec<Vec<u8>> = (0..2u8).map(|i| vec![i; 10]).collect();
        let good = answer(&[(1, &packets), (2, &packets)]);
        assert_eq!(parse_digests(&good, 0..3, |_| 2).unwrap().len(), 2);
        assert!(parse_digests(&good, 0..2, |_| 2).is_err(), "2 not asked");
        assert!(parse_digests(&good, 0..3, |_| 3).is_err(), "wrong n");
        assert!(parse_digests(&good[..good.len() - 1], 0..3, |_| 2).is_err());
        let twice = answer(&[(1, &packets), (1, &packets)]);
        assert!(parse_digests(&twice, 0..3, |_| 2).is_err());
        assert!(parse_digests(&[], 0..3, |_| 2).unwrap().is_empty());
    }

    #[test]
    fn the_book_is_bounded() {
        let mut book = DigestBook::new();
        for sbn in 0..(MAX_BOOK_CODEWORDS as u32 + 10) {
            book.insert(sbn, vec![0u8; 16].into());
        }
        assert_eq!(book.rows.len(), MAX_BOOK_CODEWORDS);
        assert!(!book.has(9) && book.has(10));
    }
}
