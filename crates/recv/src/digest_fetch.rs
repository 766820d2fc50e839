//! Fetching packet digests ahead of the stream (the I/O shell around
//! [`crate::digests`]): a thread asks the server's digest route for the next codewords
//! whenever the receive loop says some are missing, and hands the answers back without
//! ever blocking the loop.

use std::ops::Range;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use isnode_wire::partition::Partition;

use crate::control::ControlClient;
use crate::receiver::Receiver;

/// Codewords per request.
pub const FETCH_CODEWORDS: u32 = 64;
/// How far ahead of the release point digests are wanted: the receive window plus one
/// request's worth, so the next request goes out long before its packets come.
pub fn ahead_codewords(window_codewords: u32) -> u32 {
    window_codewords.saturating_add(FETCH_CODEWORDS)
}
/// Failed requests for one range before its codewords are left unauthenticated (their
/// packets dropped as unverified).
const MAX_FAILURES: u32 = 8;
/// Wait after a failed request before the next.
const RETRY_AFTER: Duration = Duration::from_millis(250);

/// The encoding symbols of each codeword of a session: k(sbn) + m, from its partition
/// (no receive core needed).
pub fn symbols_of(
    partition: Partition,
    repair_symbols: u32,
) -> impl Fn(u32) -> u32 + Send + 'static {
    move |sbn| partition.source_symbols(sbn) + repair_symbols
}

/// The requests that cover codewords `range`: `(from, count)`, [`FETCH_CODEWORDS`] at most.
fn requests(range: Range<u32>) -> impl Iterator<Item = (u32, u32)> {
    range
        .clone()
        .step_by(FETCH_CODEWORDS as usize)
        .map(move |from| (from, FETCH_CODEWORDS.min(range.end - from)))
}

/// Fetches the digests of `from..from + ahead` (cut at `end`), now (before a stream
/// starts).
pub fn fetch_now(
    control: &ControlClient,
    object: &str,
    from: u32,
    ahead: u32,
    end: u32,
    symbols: &(impl Fn(u32) -> u32 + ?Sized),
) -> anyhow::Result<crate::digests::DigestRows> {
    let mut rows = Vec::new();
    for (at, count) in requests(from..from.saturating_add(ahead).min(end)) {
        rows.extend(control.digests(object, at, count, symbols)?);
    }
    Ok(rows)
}

/// A thread fetching digests on request.
pub struct DigestFetcher {
    ask: Option<mpsc::Sender<u32>>,
    answers: mpsc::Receiver<crate::digests::DigestRows>,
    /// The request in flight (its first codeword), if any.
    pending: Option<u32>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl DigestFetcher {
    /// Starts the thread for `object`, whose codeword `sbn` has `symbols(sbn)` packets.
    pub fn start(
        control: Arc<ControlClient>,
        object: String,
        symbols: impl Fn(u32) -> u32 + Send + 'static,
    ) -> DigestFetcher {
        let (ask, asked) = mpsc::channel::<u32>();
        let (answer, answers) = mpsc::channel();
        let handle = std::thread::spawn(move || {
            while let Ok(from) = asked.recv() {
                let rows = match control.digests(&object, from, FETCH_CODEWORDS, &symbols) {
                    Ok(rows) => rows,
                    Err(e) => {
                        tracing::warn!("packet digests of {object} from codeword {from}: {e:#}");
                        std::thread::sleep(RETRY_AFTER);
                        Vec::new()
                    }
                };
                if answer.send(rows).is_err() {
                    return;
                }
            }
        });
        DigestFetcher {
            ask: Some(ask),
            answers,
            pending: None,
            handle: Some(handle),
        }
    }

    /// Starts a thread that fetches the digests of `ranges`, in that order, once each (a
    /// broadcast receiver: the codewords of its channels in the order it joins them);
    /// [`DigestFetcher::pump`] takes them in.
    pub fn start_ranges(
        control: Arc<ControlClient>,
        object: String,
        symbols: impl Fn(u32) -> u32 + Send + 'static,
        ranges: Vec<std::ops::Range<u32>>,
    ) -> DigestFetcher {
        let (answer, answers) = mpsc::channel();
        let handle = std::thread::spawn(move || {
            for r in ranges {
                let mut failures = 0;
                'range: for (at, count) in requests(r) {
                    loop {
                        if failures >= MAX_FAILURES {
                            break 'range;
                        }
                        match control.digests(&object, at, count, &symbols) {
                            Ok(rows) => {
                                if answer.send(rows).is_err() {
                                    return;
                                }
                                break;
                            }
                            Err(e) => {
                                tracing::warn!(
                                    "packet digests of {object} from codeword {at}: {e:#}"
                                );
                                failures += 1;
                                std::thread::sleep(RETRY_AFTER);
                            }
                        }
                    }
                }
            }
        });
        DigestFetcher {
            ask: None,
            answers,
            pending: None,
            handle: Some(handle),
        }
    }

    /// Takes the answers that came in into `rx`, and asks for more when `rx` misses the
    /// digests of a codeword within `ahead` of its release point (one request at a time).
    pub fn pump(&mut self, rx: &mut Receiver, ahead: u32) {
        while let Ok(rows) = self.answers.try_recv() {
            self.pending = None;
            for (sbn, digests) in rows {
                rx.add_digests(sbn, digests);
            }
        }
        if self.pending.is_some() {
            return;
        }
        if let Some(from) = rx.digests_missing(ahead) {
            if let Some(ask) = &self.ask {
                if ask.send(from).is_ok() {
                    self.pending = Some(from);
                }
            }
        }
    }
}

impl Drop for DigestFetcher {
    fn drop(&mut self) {
        // Closing the request channel ends the thread after its request in flight (bounded
        // by the control client's timeout); it is not waited for.
        self.ask.take();
        drop(self.handle.take());
    }
}
