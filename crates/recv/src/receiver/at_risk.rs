//! What a repair needs to know of the receive core: the codeword that would be released as
//! lost next, and which of its symbols are in (see [`crate::repair`]). Read-only: the
//! repaired symbols go in through [`Receiver::push`] like any datagram.

use super::{Receiver, State};

/// The next codeword to release when it is not decoded and the core has given it up: it
/// would be released as lost at the next [`Receiver::poll_output`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AtRisk {
    /// Source Block Number.
    pub sbn: u32,
    /// Source symbols k of the codeword.
    pub source_symbols: u32,
    /// For each of its n = k + m ESIs, whether a valid symbol is in.
    pub present: Vec<bool>,
}

impl Receiver {
    /// The codeword that would be released as lost next, if any (see [`AtRisk`]).
    pub fn at_risk(&self) -> Option<AtRisk> {
        let sbn = self.next_release;
        if sbn >= self.end || !self.given_up(sbn) {
            return None;
        }
        let slot = self.slots.get(&sbn);
        if slot.is_some_and(|s| !matches!(s.state, State::Collecting { .. })) {
            return None;
        }
        let n = self.encoding_symbols(sbn);
        let present = (0..n)
            .map(|esi| {
                slot.is_some_and(|s| {
                    let (word, bit) = ((esi / 64) as usize, 1u64 << (esi % 64));
                    s.seen.bits.get(word).is_some_and(|w| w & bit != 0)
                })
            })
            .collect();
        Some(AtRisk {
            sbn,
            source_symbols: self.partition.source_symbols(sbn),
            present,
        })
    }
}
