//! Re-binding the receive core to another copy of the same object (`isnode play`'s
//! failover between edges that filled one origin version independently): from the
//! release point on, packets must name the new copy's TSI and TOI and match its digests.

use super::{Receiver, ReceiverError, Slot, State};

impl Receiver {
    /// The stream goes on from codeword `from`, which must be the release point, as another
    /// copy of the same object (same bytes and codeword layout, checked by the caller):
    /// from now on a data packet counts only if it names `tsi` and `toi`. Everything the
    /// core holds of codewords `from` and later is dropped (their symbols, the digests
    /// booked for them, the codewords seen past the window, a partial FDT instance); the
    /// new stream sends them again. What was released stays released: the source symbols
    /// of codeword `from` already out are not released twice. Codewords before `from` are
    /// out and untouched.
    pub fn rebind(&mut self, from: u32, tsi: u32, toi: u32) -> Result<(), ReceiverError> {
        if from != self.next_release {
            return Err(ReceiverError::Params(format!(
                "re-binding at codeword {from}, not at the release point {}",
                self.next_release
            )));
        }
        self.params.tsi = tsi;
        self.params.toi = toi;
        let e = self.params.symbol_len as usize;
        let n = self.encoding_symbols(from) as usize;
        for (&sbn, slot) in self.slots.range_mut(from..) {
            *slot = match sbn == from {
                true => released_prefix(slot, n, e),
                false => Slot::new(),
            };
        }
        self.ahead.clear();
        // The new stream has shown nothing yet: no codeword from `from` on is given up for
        // what the old one sent past it.
        self.max_sbn = self
            .max_sbn
            .and_then(|m| from.checked_sub(1).map(|p| m.min(p)));
        if let Some(book) = &mut self.digests {
            book.forget_from(from);
        }
        self.fdt = None;
        Ok(())
    }
}

/// A slot holding only the source symbols of `slot` already released (a prefix, `n`
/// symbols of `e` bytes): they are out, so the codeword's other symbols must agree with
/// them whichever copy sends them, and the decode needs them (they are not released twice).
fn released_prefix(slot: &Slot, n: usize, e: usize) -> Slot {
    let r = slot.released as usize;
    let prefix = match &slot.state {
        State::Collecting { buf, .. } => buf.get(..r * e),
        State::Decoded(bytes) => bytes.get(..r * e),
        State::Released => None,
    };
    let mut kept = Slot::new();
    kept.released = slot.released;
    let Some(prefix) = prefix.filter(|_| r > 0 && r < n) else {
        return kept;
    };
    let mut buf = vec![0u8; n * e];
    buf[..r * e].copy_from_slice(prefix);
    for esi in 0..r {
        kept.seen.insert(esi as u8);
    }
    kept.high = slot.released;
    kept.state = State::Collecting {
        buf,
        present: (0..n).map(|i| i < r).collect(),
    };
    kept
}

#[cfg(test)]
mod tests {
    use super::super::{Output, PacketClass, ReceiverConfig, SessionParams};
    use super::*;
    use crate::sender::object_packets;
    use proptest::prelude::*;
    use std::time::Duration;

    fn params(tsi: u32, toi: u32, len: u64) -> SessionParams {
        SessionParams {
            tsi,
            toi,
            transfer_length: len,
            symbol_len: 64,
            max_source_block_len: 6,
            repair_symbols: 3,
            start_codeword: 0,
        }
    }

    fn data(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    /// The digests of a codeword's packets, in ESI order.
    fn digests(packets: &[Vec<u8>]) -> Box<[u8]> {
        packets
            .iter()
            .flat_map(|p| isnode_wire::digest::packet_digest(p))
            .collect()
    }

    fn drain(rx: &mut Receiver, out: &mut Vec<u8>) {
        while let Some(o) = rx.poll_output() {
            match o {
                Output::Data { offset, bytes, .. } => {
                    assert_eq!(offset, out.len() as u64, "in order, contiguous");
                    out.extend_from_slice(&bytes);
                }
                Output::Lost { sbn, .. } => panic!("codeword {sbn} lost"),
            }
        }
    }

    /// Two copies of one object (A: TSI 1 TOI 7, B: TSI 2 TOI 9); the receiver takes A's
    /// packets up to `cut` (in stream order), re-binds to B at its release point, and
    /// takes B's packets from there with `drop_b` of each codeword's symbols lost and A's
    /// stale packets mixed in: the output is the object, each byte once.
    fn fail_over(len: usize, cut: usize, drop_b: &[usize], stale_every: usize) -> Vec<u8> {
        let bytes = data(len, 3);
        let (pa, pb) = (params(1, 7, len as u64), params(2, 9, len as u64));
        let a = object_packets(&bytes, &pa).unwrap();
        let b = object_packets(&bytes, &pb).unwrap();
        let mut rx = Receiver::new(pa.clone(), ReceiverConfig::default()).unwrap();
        rx.authenticate(64);
        for (sbn, cw) in a.iter().enumerate() {
            rx.add_digests(sbn as u32, digests(cw));
        }
        let mut out = Vec::new();
        let t = Duration::ZERO;
        let a_flat: Vec<&Vec<u8>> = a.iter().flatten().collect();
        for p in a_flat.iter().take(cut) {
            rx.push(p, t);
            drain(&mut rx, &mut out);
        }
        let from = rx.next_release();
        if rx.is_complete() {
            return out;
        }
        assert!(
            matches!(rx.push(&b[from as usize][0], t), PacketClass::Foreign),
            "B before the re-bind"
        );
        assert!(
            rx.rebind(from + 1, 2, 9).is_err(),
            "only at the release point"
        );
        rx.rebind(from, 2, 9).unwrap();
        assert_eq!(
            rx.digests_of(from),
            None,
            "A's digests from `from` on dropped"
        );
        assert_eq!(
            rx.push(&b[from as usize][0], t),
            PacketClass::Unverified,
            "B's digests not yet booked"
        );
        for (sbn, cw) in b.iter().enumerate().skip(from as usize) {
            rx.add_digests(sbn as u32, digests(cw));
        }
        let mut stale = a_flat.iter().skip(cut).cycle();
        for (i, cw) in b.iter().enumerate().skip(from as usize) {
            let lose = drop_b.get(i).copied().unwrap_or(0) % 4; // m = 3: at most 3 lost
            for (esi, p) in cw.iter().enumerate() {
                if stale_every > 0 && esi % stale_every == 0 {
                    if let Some(s) = stale.next() {
                        let class = rx.push(s, t);
                        assert!(matches!(class, PacketClass::Foreign), "{class:?}");
                    }
                }
                if esi >= lose {
                    rx.push(p, t);
                    drain(&mut rx, &mut out);
                }
            }
        }
        rx.finish();
        drain(&mut rx, &mut out);
        assert!(rx.is_complete());
        assert_eq!(rx.stats().packets_forged, 0);
        out
    }

    #[test]
    fn a_rebound_stream_finishes_the_object_byte_identical() {
        let len = 64 * 6 * 5 + 100;
        // Mid-codeword (a prefix of codeword 2 released), at a codeword boundary, at 0.
        for cut in [0, 9 * 2 + 4, 9 * 3, 9 * 5] {
            assert_eq!(fail_over(len, cut, &[1, 2, 3, 0, 2, 1], 2), data(len, 3));
        }
    }

    #[test]
    fn the_old_streams_digests_and_fdt_go_with_it() {
        let len = 1000;
        let pa = params(1, 7, len);
        let mut rx = Receiver::new(pa, ReceiverConfig::default()).unwrap();
        rx.authenticate(8);
        rx.add_digests(0, vec![0u8; 16 * 9].into());
        rx.add_digests(1, vec![0u8; 16 * 9].into());
        rx.rebind(0, 2, 9).unwrap();
        assert_eq!(rx.digests_of(0), None);
        assert_eq!(rx.digests_missing(4), Some(0));
        assert_eq!((rx.params().tsi, rx.params().toi), (2, 9));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn any_cut_and_loss_within_the_code_gives_the_object(
            len in 1usize..2500,
            cut in 0usize..400,
            drop_b in proptest::collection::vec(0usize..4, 0..12),
            stale_every in 0usize..5,
        ) {
            prop_assert_eq!(fail_over(len, cut, &drop_b, stale_every), data(len, 3));
        }
    }
}
