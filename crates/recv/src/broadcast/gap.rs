//! Loss on a broadcast channel's source group, told from the order of its packets (sans-IO).
//!
//! A channel sends its codewords one after the other, each as its source packets in ESI
//! order `0..k` on the source group (repair packets go to the repair group). So on the
//! source group the packet after `(sbn, esi)` is `(sbn, esi + 1)`, or `(next, 0)` once
//! `esi` was the codeword's last (`k - 1`). Anything else after the first packet seen is a
//! loss: a jump within a codeword, the head of a new codeword (it starts past ESI 0), or
//! the tail of the previous one (it ended before `k - 1`), counted in packets. An ESI lower than the last one
//! of the same codeword starts a new transmission of it (a channel of one codeword sends
//! it again and again); the same packet twice is a duplicate. The first packet seen may be
//! anywhere in a codeword (the channel was joined while it was being sent): no loss. (A
//! network that reorders packets may be taken for a lossy one: the repair groups are
//! joined for nothing, which costs bandwidth, not bytes.)

/// The last source packet seen on one channel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SourceOrder {
    last: Option<(u32, u32)>,
}

impl SourceOrder {
    /// Takes the source packet `(sbn, esi)` of a codeword of `k` source packets, the
    /// codeword of the previous one having `k_of_last` (asked only when the codeword
    /// changes); how many source packets went missing just before it (0: none; whole
    /// codewords lost in between are not counted). Repair packets (`esi >= k`) and
    /// duplicates are ignored.
    pub fn push(
        &mut self,
        (sbn, esi): (u32, u32),
        k: u32,
        k_of_last: impl FnOnce(u32) -> u32,
    ) -> u32 {
        if esi >= k {
            return 0;
        }
        let Some((last_sbn, last_esi)) = self.last else {
            self.last = Some((sbn, esi));
            return 0;
        };
        if (sbn, esi) == (last_sbn, last_esi) {
            return 0; // a duplicate
        }
        self.last = Some((sbn, esi));
        if sbn == last_sbn && esi > last_esi {
            return esi - last_esi - 1;
        }
        // A new transmission: of another codeword, or of this one again.
        let tail_lost = k_of_last(last_sbn).saturating_sub(last_esi.saturating_add(1));
        esi.saturating_add(tail_lost)
    }
}

#[cfg(test)]
mod tests {
    use super::SourceOrder;

    const K: u32 = 4;

    fn run(packets: &[(u32, u32)]) -> Vec<bool> {
        let mut o = SourceOrder::default();
        packets.iter().map(|&p| o.push(p, K, |_| K) > 0).collect()
    }

    #[test]
    fn an_unbroken_sequence_across_codewords_and_a_wrap_loses_nothing() {
        let seq = [
            (5, 2),
            (5, 3),
            (6, 0),
            (6, 1),
            (6, 2),
            (6, 3),
            (0, 0),
            (0, 1),
        ];
        assert!(run(&seq).iter().all(|g| !g));
    }

    #[test]
    fn a_jump_within_a_codeword_is_a_loss() {
        assert_eq!(run(&[(1, 0), (1, 2)]), [false, true]);
    }

    #[test]
    fn a_lost_head_is_a_loss() {
        assert_eq!(run(&[(1, 2), (1, 3), (2, 1)]), [false, false, true]);
    }

    #[test]
    fn a_lost_tail_is_a_loss() {
        assert_eq!(run(&[(1, 1), (1, 2), (2, 0)]), [false, false, true]);
    }

    #[test]
    fn the_first_packet_seen_is_never_a_loss_nor_a_repair_packet() {
        assert_eq!(run(&[(3, 2)]), [false]);
        assert_eq!(run(&[(3, 0), (3, K), (3, K + 5), (3, 1)]), [false; 4]);
    }

    #[test]
    fn a_duplicate_is_not_a_loss() {
        assert_eq!(run(&[(1, 0), (1, 1), (1, 1), (1, 2)]), [false; 4]);
    }

    #[test]
    fn a_channel_of_one_codeword_wraps_onto_it() {
        let whole = [(0, 0), (0, 1), (0, 2), (0, 3), (0, 0), (0, 1)];
        assert!(run(&whole).iter().all(|g| !g));
        assert_eq!(
            run(&[(0, 2), (0, 3), (0, 1)]),
            [false, false, true],
            "head lost"
        );
        assert_eq!(
            run(&[(0, 1), (0, 2), (0, 0)]),
            [false, false, true],
            "tail lost"
        );
    }

    #[test]
    fn a_short_last_codeword_ends_at_its_own_k() {
        let mut o = SourceOrder::default();
        assert_eq!(o.push((7, 0), 2, |_| 2), 0);
        assert_eq!(o.push((7, 1), 2, |_| 2), 0);
        assert_eq!(
            o.push((0, 0), K, |_| 2),
            0,
            "7 had two source packets: none lost"
        );
    }

    /// The packets missing are counted: within a codeword, and a tail and a head together.
    #[test]
    fn the_missing_packets_are_counted() {
        let mut o = SourceOrder::default();
        let counts: Vec<u32> = [(1, 1), (1, 3), (2, 2), (2, 3), (3, 0)]
            .iter()
            .map(|&p| o.push(p, K, |_| K))
            .collect();
        assert_eq!(counts, [0, 1, 2, 0, 0], "ESI 2 of 1; 0 and 1 of 2");
    }
}
