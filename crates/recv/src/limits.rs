//! What the client accepts from a server: plausibility limits on what a session or broadcast
//! announces (object size, bitrate, the duration they imply, symbol size, the memory of the
//! receive window), checked before anything is allocated or written; and the bound of the
//! queue between the receive loop and the playout thread.
//!
//! A server (or whoever answers in its place) can announce anything; without these checks
//! a made-up answer could make the client allocate without bound, write terabytes, or wait
//! for weeks. Every limit has a default and a flag of `isnode play` ([`AnnounceLimits`]).

use std::time::Duration;

use isnode_wire::{DATA_HEADER_LEN, MAX_SYMBOL_LEN};

/// Default `--max-object-bytes`: 256 GiB (a 4K title of several hours).
pub const DEFAULT_MAX_OBJECT_BYTES: u64 = 256 << 30;
/// Default `--min-bitrate-bps`: 1 kbit/s.
pub const DEFAULT_MIN_BITRATE_BPS: u64 = 1_000;
/// Default `--max-bitrate-bps`: 10 Gbit/s.
pub const DEFAULT_MAX_BITRATE_BPS: u64 = 10_000_000_000;
/// Default `--max-title-s`: 48 h of playing time.
pub const DEFAULT_MAX_TITLE_S: f64 = 172_800.0;
/// Default `--max-queue-bytes`: 64 MiB between the receive loop and the playout.
pub const DEFAULT_MAX_QUEUE_BYTES: u64 = 64 << 20;
/// The receive window (codewords collected ahead of the release point, n·E bytes each)
/// may hold at most this many bytes.
pub const MAX_WINDOW_BYTES: u64 = 256 << 20;
/// The largest UDP payload: a symbol must fit in one datagram with its header.
const MAX_UDP_PAYLOAD_BYTES: usize = 65_507;
/// The queue to playout holds at least this much media time (the server's start-up burst
/// builds a lead of under a second: four seconds leave room for jitter and a decode wait).
const QUEUE_MEDIA_TIME: Duration = Duration::from_secs(4);
/// The queue to playout holds at least this many codewords (a whole one is one piece with
/// `--release codeword`).
const QUEUE_MIN_CODEWORDS: u64 = 4;
/// The queue to playout holds at least this many bytes.
const QUEUE_MIN_BYTES: u64 = 1 << 20;

/// An announcement the client refuses, with the limit it breaks.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Implausible {
    /// The object is larger than `--max-object-bytes`.
    #[error(
        "the server announces an object of {size_bytes} bytes, more than --max-object-bytes \
         {limit}"
    )]
    ObjectSize {
        /// Announced size.
        size_bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// The bitrate is outside [`--min-bitrate-bps`, `--max-bitrate-bps`].
    #[error(
        "the server announces a bitrate of {bitrate_bps} bit/s, outside [{min}, {max}] \
         (--min-bitrate-bps, --max-bitrate-bps)"
    )]
    Bitrate {
        /// Announced bitrate.
        bitrate_bps: u64,
        /// `--min-bitrate-bps`.
        min: u64,
        /// `--max-bitrate-bps`.
        max: u64,
    },
    /// Size and bitrate give a playing time longer than `--max-title-s`.
    #[error(
        "the server announces {size_bytes} bytes at {bitrate_bps} bit/s: {duration_s:.0} s of \
         playing time, more than --max-title-s {limit_s:.0}"
    )]
    Duration {
        /// Announced size.
        size_bytes: u64,
        /// Announced bitrate.
        bitrate_bps: u64,
        /// The playing time they imply.
        duration_s: f64,
        /// `--max-title-s`.
        limit_s: f64,
    },
    /// A symbol that cannot travel in one UDP datagram.
    #[error(
        "the server announces a symbol size of {symbol_len} bytes, outside [1, {max}] (one \
         packet per UDP datagram)"
    )]
    SymbolSize {
        /// Announced E.
        symbol_len: u32,
        /// The largest E that fits.
        max: usize,
    },
    /// The receive window would need more memory than [`MAX_WINDOW_BYTES`].
    #[error(
        "a receive window of {window_codewords} codewords of {codeword_bytes} bytes needs \
         {window_bytes} bytes, more than {limit} (lower --window-codewords)"
    )]
    Window {
        /// Codewords in the window.
        window_codewords: u32,
        /// n·E of a full codeword.
        codeword_bytes: u64,
        /// Their product.
        window_bytes: u64,
        /// [`MAX_WINDOW_BYTES`].
        limit: u64,
    },
}

/// The limits on what a server announces (the flags of `isnode play`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AnnounceLimits {
    /// `--max-object-bytes`.
    pub max_object_bytes: u64,
    /// `--min-bitrate-bps`.
    pub min_bitrate_bps: u64,
    /// `--max-bitrate-bps`.
    pub max_bitrate_bps: u64,
    /// `--max-title-s`.
    pub max_title_s: f64,
}

impl Default for AnnounceLimits {
    fn default() -> Self {
        AnnounceLimits {
            max_object_bytes: DEFAULT_MAX_OBJECT_BYTES,
            min_bitrate_bps: DEFAULT_MIN_BITRATE_BPS,
            max_bitrate_bps: DEFAULT_MAX_BITRATE_BPS,
            max_title_s: DEFAULT_MAX_TITLE_S,
        }
    }
}

/// What a server announced about the stream, as far as the limits look at it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Announced {
    /// Object size L in bytes.
    pub size_bytes: u64,
    /// Object bitrate.
    pub bitrate_bps: u64,
    /// Encoding symbol length E.
    pub symbol_len: u32,
    /// Encoding symbols n = B + m of a full codeword.
    pub encoding_symbols: u32,
}

impl Announced {
    /// What an object description (a session's or a broadcast's) announces.
    pub fn of(o: &isnode_proto::ObjectInfo) -> Announced {
        Announced {
            size_bytes: o.size_bytes,
            bitrate_bps: o.bitrate_bps,
            symbol_len: o.symbol_size,
            encoding_symbols: o.source_symbols.saturating_add(o.repair_symbols),
        }
    }

    /// Bytes of a full codeword's encoding symbols (n·E): what the receiver holds per
    /// codeword being collected.
    pub fn codeword_bytes(&self) -> u64 {
        u64::from(self.encoding_symbols) * u64::from(self.symbol_len)
    }

    /// Playing time of the object at its bitrate, in seconds (infinite at bitrate 0).
    pub fn duration_s(&self) -> f64 {
        if self.bitrate_bps == 0 {
            return f64::INFINITY;
        }
        self.size_bytes as f64 * 8.0 / self.bitrate_bps as f64
    }
}

impl AnnounceLimits {
    /// Checks `a`, with a receive window of `window_codewords`, against the limits: the
    /// first one broken.
    pub fn check(&self, a: &Announced, window_codewords: u32) -> Result<(), Implausible> {
        if a.size_bytes > self.max_object_bytes {
            return Err(Implausible::ObjectSize {
                size_bytes: a.size_bytes,
                limit: self.max_object_bytes,
            });
        }
        if a.bitrate_bps < self.min_bitrate_bps.max(1) || a.bitrate_bps > self.max_bitrate_bps {
            return Err(Implausible::Bitrate {
                bitrate_bps: a.bitrate_bps,
                min: self.min_bitrate_bps,
                max: self.max_bitrate_bps,
            });
        }
        let duration_s = a.duration_s();
        if duration_s > self.max_title_s {
            return Err(Implausible::Duration {
                size_bytes: a.size_bytes,
                bitrate_bps: a.bitrate_bps,
                duration_s,
                limit_s: self.max_title_s,
            });
        }
        let max_symbol = MAX_SYMBOL_LEN.min(MAX_UDP_PAYLOAD_BYTES - DATA_HEADER_LEN);
        if a.symbol_len == 0 || a.symbol_len as usize > max_symbol {
            return Err(Implausible::SymbolSize {
                symbol_len: a.symbol_len,
                max: max_symbol,
            });
        }
        let window_bytes = u64::from(window_codewords).saturating_mul(a.codeword_bytes());
        if window_bytes > MAX_WINDOW_BYTES {
            return Err(Implausible::Window {
                window_codewords,
                codeword_bytes: a.codeword_bytes(),
                window_bytes,
                limit: MAX_WINDOW_BYTES,
            });
        }
        Ok(())
    }
}

/// The bound of the queue between the receive loop and the playout, in bytes of media (a
/// lost piece counts its length too): four seconds of media at `bitrate_bps` or four
/// codewords of `codeword_bytes`, whichever is more, at least 1 MiB, at most
/// `max_queue_bytes` (`--max-queue-bytes`).
pub fn queue_limit_bytes(bitrate_bps: u64, codeword_bytes: u64, max_queue_bytes: u64) -> u64 {
    let media = u64::try_from(u128::from(bitrate_bps) * QUEUE_MEDIA_TIME.as_millis() / 8 / 1000)
        .unwrap_or(u64::MAX);
    media
        .max(codeword_bytes.saturating_mul(QUEUE_MIN_CODEWORDS))
        .max(QUEUE_MIN_BYTES)
        .min(max_queue_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn movie() -> Announced {
        Announced {
            size_bytes: 10_000_000,
            bitrate_bps: 4_000_000,
            symbol_len: 1408,
            encoding_symbols: 255,
        }
    }

    #[test]
    fn a_plain_title_passes() {
        assert_eq!(AnnounceLimits::default().check(&movie(), 16), Ok(()));
    }

    #[test]
    fn each_limit_is_enforced() {
        let l = AnnounceLimits::default();
        let huge = Announced {
            size_bytes: 1 << 40,
            bitrate_bps: 1_000_000_000,
            ..movie()
        };
        assert!(matches!(
            l.check(&huge, 16),
            Err(Implausible::ObjectSize { .. })
        ));
        for bitrate_bps in [0, 1, 999, 20_000_000_000] {
            let a = Announced {
                bitrate_bps,
                ..movie()
            };
            assert!(
                matches!(l.check(&a, 16), Err(Implausible::Bitrate { .. })),
                "{bitrate_bps}"
            );
        }
        let slow = Announced {
            size_bytes: 100 << 30,
            bitrate_bps: 1_000_000,
            ..movie()
        };
        let e = l.check(&slow, 16).unwrap_err();
        assert!(matches!(e, Implausible::Duration { .. }), "{e}");
        assert!(e.to_string().contains("--max-title-s"), "{e}");
        for symbol_len in [0, 65_480] {
            let a = Announced {
                symbol_len,
                ..movie()
            };
            assert!(matches!(
                l.check(&a, 16),
                Err(Implausible::SymbolSize { .. })
            ));
        }
        let wide = Announced {
            symbol_len: 65_000,
            ..movie()
        };
        assert_eq!(l.check(&wide, 16), Ok(()));
        assert!(matches!(
            l.check(&wide, 64),
            Err(Implausible::Window { .. })
        ));
    }

    #[test]
    fn queue_limit_is_sized_and_bounded() {
        // 4 Mbit/s: 4 s are 2 MB, more than 4 codewords of 359 040 bytes.
        assert_eq!(queue_limit_bytes(4_000_000, 359_040, 64 << 20), 2_000_000);
        // A slow stream: four codewords.
        assert_eq!(queue_limit_bytes(100_000, 359_040, 64 << 20), 4 * 359_040);
        // At least 1 MiB, at most the absolute bound.
        assert_eq!(queue_limit_bytes(1_000, 1_000, 64 << 20), 1 << 20);
        assert_eq!(queue_limit_bytes(u64::MAX, 1, 64 << 20), 64 << 20);
    }
}
