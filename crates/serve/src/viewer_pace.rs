//! The viewers' load for the other processes on the volume: every
//! [`WRITE_EVERY_MS`] ms the server rewrites `VOLUME/run/viewer-pace.json`
//! ([`isnode_store::viewer_pace`]) with what [`LoadSampler`] sees (the live streams, the
//! late ones, the smallest playback slack, the session reads), so that `isnode volume
//! rebuild` and `isnode volume scrub` beside it yield to its viewers exactly as its own
//! background scrub does. The file is removed when the server stops.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use isnode_store::viewer_pace::{self, ViewerPaceFile, WRITE_EVERY_MS};

use crate::scrub::LoadSampler;
use crate::server::Shared;

/// The thread's body: writes the file until the server stops, then removes it.
pub(crate) fn run(sh: Arc<Shared>, volume: PathBuf) {
    let mut sampler = LoadSampler::new(&sh);
    let mut warned = false;
    let every = Duration::from_millis(WRITE_EVERY_MS);
    while isnode_store::pace::sleep_unless_stopped(every, &sh.shutdown).is_continue() {
        let file = ViewerPaceFile::new(sampler.sample(&sh), SystemTime::now());
        match viewer_pace::write(&volume, &file) {
            Ok(()) => warned = false,
            Err(e) if !warned => {
                warned = true;
                tracing::warn!(
                    "writing {}: {e} (a rebuild or scrub beside the server runs at its full rate)",
                    viewer_pace::path(&volume).display()
                );
            }
            Err(_) => {}
        }
        if sh.shutdown.load(Ordering::Acquire) {
            break;
        }
    }
    viewer_pace::remove(&volume);
}
