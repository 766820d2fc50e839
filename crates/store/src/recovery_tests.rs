//! Recovery at open against a live ingest (needs the ingest: kept out of `volume.rs`).

use std::io::Read;
use std::sync::{mpsc, Mutex};

use crate::{crash, IngestOptions};
use crate::{Volume, VolumeParams};

fn small_params() -> VolumeParams {
    VolumeParams {
        symbol_len: 64,
        source_symbols: 20,
        repair_symbols: 4,
        members: 6,
        block_len: 4096,
    }
}

/// A source that, at its first read, says so and waits to be let go.
struct Gated {
    data: Vec<u8>,
    pos: usize,
    started: Option<mpsc::Sender<()>>,
    go: mpsc::Receiver<()>,
}

impl Read for Gated {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if let Some(started) = self.started.take() {
            let _ = started.send(());
            let _ = self.go.recv();
        }
        let n = buf.len().min(self.data.len() - self.pos);
        buf[..n].copy_from_slice(&self.data[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// Defect 1 of issue 7: an ingest that commits between recovery's snapshot of
/// `writing` rows and its lock probe must keep its object. Needs the crash-point
/// hook, which exists in debug builds only.
#[test]
#[cfg_attr(
    not(debug_assertions),
    ignore = "crash-point hooks exist only in debug builds"
)]
fn recovery_keeps_an_object_committed_after_its_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("vol");
    drop(Volume::create(&root, small_params(), None).unwrap());
    let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    let (started_tx, started_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    let ingest_root = root.clone();
    let len = data.len() as u64;
    let mut src = Gated {
        data,
        pos: 0,
        started: Some(started_tx),
        go: go_rx,
    };
    let ingester = std::thread::spawn(move || {
        let mut vol = Volume::open(&ingest_root)?;
        let opts = IngestOptions {
            name: "fresh".into(),
            bitrate_bps: 1_000_000,
            content_type: "application/octet-stream".into(),
            replace: false,
        };
        let r = crate::ingest(&mut vol, &opts, &mut src, len, &mut |_| {});
        let _ = done_tx.send(());
        r
    });
    // The ingest is now `writing`, holding its lock, blocked on its input.
    started_rx.recv().unwrap();
    let opener = std::thread::current().id();
    let done_rx = Mutex::new(done_rx);
    let hook = crash::hook::set(move |name| {
        if name == "recover-snapshot" && std::thread::current().id() == opener {
            // Let the ingest finish and commit between the snapshot and the probe.
            let _ = go_tx.send(());
            let _ = done_rx.lock().unwrap().recv();
        }
    });
    let vol = Volume::open(&root).unwrap();
    drop(hook);
    let committed = ingester.join().unwrap().unwrap();
    let listed = vol
        .object("fresh")
        .expect("the committed object was removed");
    assert_eq!(listed.toi, committed.toi);
    for m in 0..vol.params().members {
        let seg = vol.segment_path(m, committed.toi);
        assert!(seg.is_file(), "{} was removed", seg.display());
    }
    let reopened = Volume::open(&root).unwrap();
    assert_eq!(reopened.object("fresh").unwrap().toi, committed.toi);
}
