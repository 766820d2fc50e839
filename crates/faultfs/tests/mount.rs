//! The fault file system mounted for real: each fault reaches `pread(2)` through the
//! kernel, and switching back to no fault gives the backing bytes again. A machine that
//! cannot mount fails this test, saying what is missing.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use isnode_faultfs::fault::{FaultKind, Plan, Target};
use isnode_faultfs::FaultMount;

const LEN: usize = 256 * 1024;

fn pattern() -> Vec<u8> {
    (0..LEN).map(|i| (i * 7 + i / 4096) as u8).collect()
}

/// Reads `len` bytes at `offset` with one `pread`.
fn pread(f: &File, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let n = f.read_at(&mut buf, offset)?;
    buf.truncate(n);
    Ok(buf)
}

#[test]
fn every_fault_reaches_the_reader_and_can_be_switched_off() {
    let dir = tempfile::tempdir().unwrap();
    let backing = dir.path().join("backing");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir_all(backing.join("objects")).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    let data = pattern();
    std::fs::write(backing.join("objects/1.seg"), &data).unwrap();
    std::fs::write(backing.join("objects/2.seg"), &data).unwrap();

    let m = FaultMount::mount(&backing, &mnt, 42).unwrap_or_else(|e| panic!("{e}"));
    let f1 = File::open(mnt.join("objects/1.seg")).expect("open through the mount");
    let f2 = File::open(mnt.join("objects/2.seg")).unwrap();
    assert_eq!(std::fs::read(mnt.join("objects/1.seg")).unwrap(), data);
    let names: Vec<_> = std::fs::read_dir(mnt.join("objects"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");

    // EIO on every read.
    m.set(Plan::all(FaultKind::Eio));
    let e = pread(&f1, 0, 4096).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");

    // EIO on a byte range of one file: the rest reads as before.
    m.set(Plan {
        kind: FaultKind::Eio,
        target: Target::Range {
            file: "objects/1.seg".into(),
            bytes: 65536..131072,
        },
    });
    assert_eq!(pread(&f1, 0, 65536).unwrap(), data[..65536]);
    assert!(pread(&f1, 65536, 4096).is_err());
    assert!(pread(&f1, 60000, 8192).is_err(), "overlapping read");
    assert_eq!(pread(&f1, 131072, 4096).unwrap(), data[131072..135168]);
    assert_eq!(pread(&f2, 65536, 4096).unwrap(), data[65536..69632]);

    // Delayed reads.
    m.set(Plan::all(FaultKind::Delay { delay_ms: 200 }));
    let t = Instant::now();
    assert_eq!(pread(&f1, 4096, 4096).unwrap(), data[4096..8192]);
    assert!(
        t.elapsed() >= Duration::from_millis(200),
        "{:?}",
        t.elapsed()
    );

    // Short reads: fewer bytes, but the right ones.
    m.set(Plan::all(FaultKind::Short));
    let got = pread(&f1, 8192, 65536).unwrap();
    assert!(!got.is_empty() && got.len() < 65536, "{}", got.len());
    assert_eq!(got, data[8192..8192 + got.len()]);

    // Flipped bits.
    m.set(Plan::all(FaultKind::Flip { per_read: 3 }));
    let got = pread(&f1, 0, 65536).unwrap();
    assert_eq!(got.len(), 65536);
    let diff = got.iter().zip(&data).filter(|(a, b)| a != b).count();
    assert!((1..=3).contains(&diff), "{diff} bytes differ");

    // Off again: the backing bytes, and the page cache did not keep a faulty copy.
    m.set(Plan::pass());
    assert_eq!(pread(&f1, 0, 65536).unwrap(), data[..65536]);
    let s = m.stats();
    assert!(
        s.eio >= 3 && s.delayed >= 1 && s.short >= 1 && s.flipped >= 1,
        "{s:?}"
    );

    // Writes pass through too.
    std::fs::write(mnt.join("objects/3.seg"), b"written").unwrap();
    assert_eq!(
        std::fs::read(backing.join("objects/3.seg")).unwrap(),
        b"written"
    );
    drop((f1, f2));
    m.unmount().expect("unmount");
    assert!(!mnt.join("objects").exists(), "still mounted after unmount");
}
