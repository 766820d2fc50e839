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
/// Wait after a failed request before the next (doubling after each, up to
/// [`MAX_RETRY_AFTER`]).
const RETRY_AFTER: Duration = Duration::from_millis(250);
/// Longest wait between two requests for the same codewords.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(4);

/// What the fetching thread hands back for one request.
enum Answer {
    /// Digest rows, the one asked for first.
    Rows(crate::digests::DigestRows),
    /// The codeword asked for could not be had after [`MAX_FAILURES`] tries: why.
    GaveUp(String),
}

/// Asks `fetch` for the digests from codeword `from` until an answer holds that codeword,
/// waiting (`sleep`) longer after each failure (an error, or an answer without it, as from
/// a catalog that lacks the row); gives up after [`MAX_FAILURES`] tries.
fn fetch_with_backoff(
    from: u32,
    fetch: &mut dyn FnMut(u32) -> anyhow::Result<crate::digests::DigestRows>,
    sleep: &mut dyn FnMut(Duration),
) -> Answer {
    let mut wait = RETRY_AFTER;
    let mut why = String::new();
    for _ in 0..MAX_FAILURES {
        match fetch(from) {
            Ok(rows) if rows.first().is_some_and(|(sbn, _)| *sbn == from) => {
                return Answer::Rows(rows)
            }
            Ok(_) => why = format!("the server's answer lacks codeword {from}"),
            Err(e) => why = format!("{e:#}"),
        }
        sleep(wait);
        wait = (wait * 2).min(MAX_RETRY_AFTER);
    }
    Answer::GaveUp(format!(
        "packet digests from codeword {from}: {why} (gave up after {MAX_FAILURES} tries)"
    ))
}

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
    answers: mpsc::Receiver<Answer>,
    /// Why fetching stopped, if it gave up (no more requests are made).
    gave_up: Option<String>,
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
                let mut fetch = |from| {
                    let r = control.digests(&object, from, FETCH_CODEWORDS, &symbols);
                    if let Err(e) = &r {
                        tracing::warn!("packet digests of {object} from codeword {from}: {e:#}");
                    }
                    r
                };
                let got = fetch_with_backoff(from, &mut fetch, &mut std::thread::sleep);
                let gave_up = matches!(got, Answer::GaveUp(_));
                if answer.send(got).is_err() || gave_up {
                    return;
                }
            }
        });
        DigestFetcher {
            ask: Some(ask),
            answers,
            gave_up: None,
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
                                if answer.send(Answer::Rows(rows)).is_err() {
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
            gave_up: None,
            pending: None,
            handle: Some(handle),
        }
    }

    /// Takes the answers that came in into `rx`, and asks for more when `rx` misses the
    /// digests of a codeword within `ahead` of its release point (one request at a time).
    /// After it gave up ([`DigestFetcher::gave_up`]) it asks for nothing more.
    pub fn pump(&mut self, rx: &mut Receiver, ahead: u32) {
        while let Ok(answer) = self.answers.try_recv() {
            self.pending = None;
            match answer {
                Answer::Rows(rows) => {
                    for (sbn, digests) in rows {
                        rx.add_digests(sbn, digests);
                    }
                }
                Answer::GaveUp(why) => {
                    tracing::error!("{why}: their packets are dropped as unverified");
                    self.gave_up = Some(why);
                }
            }
        }
        if self.pending.is_some() || self.gave_up.is_some() {
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

impl DigestFetcher {
    /// Why fetching gave up (the server could not give some codeword's digests after
    /// [`MAX_FAILURES`] tries), if it did.
    pub fn gave_up(&self) -> Option<&str> {
        self.gave_up.as_deref()
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A server whose answers lack the codeword asked for (a catalog missing its row) is
    /// asked a bounded number of times, with growing waits, and then given up on (issue 21:
    /// the client asked again at once, in a tight loop, forever).
    #[test]
    fn a_missing_row_is_asked_for_with_backoff_then_given_up() {
        let mut asked = 0;
        let mut fetch = |from: u32| {
            asked += 1;
            Ok(vec![(from + 1, vec![0u8; 16].into())])
        };
        let mut waits = Vec::new();
        let got = fetch_with_backoff(7, &mut fetch, &mut |d| waits.push(d));
        let Answer::GaveUp(why) = got else {
            panic!("an answer without codeword 7 was taken");
        };
        assert!(why.contains("lacks codeword 7"), "{why}");
        assert_eq!(asked, MAX_FAILURES);
        assert_eq!(waits.first(), Some(&RETRY_AFTER));
        assert!(waits.windows(2).all(|w| w[1] >= w[0]));
        assert_eq!(waits.last(), Some(&MAX_RETRY_AFTER));
        // An answer holding it is taken at once.
        let mut fetch = |from: u32| Ok(vec![(from, vec![0u8; 16].into())]);
        let got = fetch_with_backoff(7, &mut fetch, &mut |_| panic!("no wait"));
        assert!(matches!(got, Answer::Rows(r) if r.len() == 1));
    }
}
