//! The viewers' load for the other processes on the volume: the server samples what
//! [`LoadSampler`] sees (the live streams, the late ones, the smallest playback slack, the
//! session reads) and writes it to `VOLUME/run/viewer-pace.json`
//! ([`isnode_store::viewer_pace`]) when the change would change the pace of background work
//! (other changes a second later; none, no write: [`WriteRule`]), so that `isnode volume
//! rebuild` and `isnode volume scrub` beside it yield to its viewers exactly as its own
//! background scrub does. The thread holds the server's mark on the volume
//! ([`ServerMark`]: the file counts while it is held). It samples every [`SAMPLE_EVERY_MS`]
//! ms while there is load, and every [`IDLE_SAMPLE_MS`] without: a data-plane thread that
//! takes its first stream wakes it at once (`Wakes::pace`). The file is removed when
//! the server stops.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use isnode_store::pace::ViewerLoad;
use isnode_store::viewer_pace::{
    self, ServerMark, ViewerPaceFile, WriteRule, IDLE_SAMPLE_MS, SAMPLE_EVERY_MS,
};
use std::os::fd::AsFd;

use crate::scrub::{LoadSampler, Viewers};
use isnode_sys::clock::Clock;
use isnode_sys::event::{wait_any, Event};
use isnode_sys::stop::Stop;

/// The viewer-pace writer: what it holds.
pub(crate) struct Pace {
    /// The volume's directory.
    pub volume: PathBuf,
    /// The viewers whose load it writes.
    pub viewers: Viewers,
    /// The server's clock.
    pub clock: Clock,
    /// The server's stop.
    pub stop: Arc<Stop>,
    /// Set when a data-plane thread takes its first stream: it samples at once.
    pub first_stream: Arc<Event>,
}

/// The thread's body: writes the file until the server stops, then removes it.
pub(crate) fn run(p: Pace) {
    let mut mark = Mark::default();
    let mut sampler = LoadSampler::new(p.viewers.clone());
    let mut rule = WriteRule::default();
    let mut warned = false;
    let volume = &p.volume;
    while !p.stop.is_stopped() {
        mark.hold(volume);
        let load = sampler.sample();
        let now_ms = p.clock.now_ns() / 1_000_000;
        if rule.due(load, now_ms) {
            write(volume, load, &mut warned);
        }
        let events = [p.stop.as_fd(), p.first_stream.as_fd()];
        match wait_any(&events, next_sample_in(load)) {
            Some(0) => break,
            Some(_) => p.first_stream.clear(),
            None => {}
        }
    }
    viewer_pace::remove(volume);
    drop(mark);
}

/// The server's mark on the volume ([`ServerMark`]), taken at the first sample it is free
/// (another process may hold it for a while: a server stopping on the same volume).
#[derive(Default)]
struct Mark {
    held: Option<ServerMark>,
    /// Tries that found the lock held (a reader holds it for microseconds: only a few in a
    /// row say another server).
    busy_tries: u32,
    warned: bool,
}

/// Tries finding the lock held before saying so.
const BUSY_TRIES_TO_WARN: u32 = 3;

impl Mark {
    /// Takes the mark if it is not held yet; the first failure is logged.
    fn hold(&mut self, volume: &std::path::Path) {
        if self.held.is_some() {
            return;
        }
        match ServerMark::take(volume) {
            Ok(Some(m)) => self.held = Some(m),
            Ok(None) => {
                self.busy_tries += 1;
                if self.busy_tries < BUSY_TRIES_TO_WARN || self.warned {
                    return;
                }
                self.warned = true;
                tracing::warn!(
                    "{} is held by another process (a server on this volume?): taken when it is free",
                    viewer_pace::lock_path(volume).display()
                );
            }
            Err(e) if !self.warned => {
                self.warned = true;
                tracing::warn!(
                    "locking {}: {e} (a rebuild or scrub beside the server runs at its full rate)",
                    viewer_pace::lock_path(volume).display()
                );
            }
            Err(_) => {}
        }
    }
}

/// How long until the next sample: [`SAMPLE_EVERY_MS`] while anything loads the server,
/// [`IDLE_SAMPLE_MS`] without (a first stream wakes the thread earlier).
fn next_sample_in(load: ViewerLoad) -> Duration {
    let idle = load.streams == 0 && load.late_streams == 0 && load.session_reads == 0;
    Duration::from_millis(match idle {
        true => IDLE_SAMPLE_MS,
        false => SAMPLE_EVERY_MS,
    })
}

/// Writes the file of `load`; the first failure of a run of failures is logged.
fn write(volume: &std::path::Path, load: ViewerLoad, warned: &mut bool) {
    let file = ViewerPaceFile::new(load, SystemTime::now());
    match viewer_pace::write(volume, &file) {
        Ok(()) => *warned = false,
        Err(e) if !*warned => {
            *warned = true;
            tracing::warn!(
                "writing {}: {e} (a rebuild or scrub beside the server runs at its full rate)",
                viewer_pace::path(volume).display()
            );
        }
        Err(_) => {}
    }
}
