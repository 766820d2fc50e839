//! Member loss and corruption through the CLI: `cat` returns identical bytes
//! while the code can rebuild, `volume check` names the damage, `--repair`
//! rebuilds it; beyond the code's limit, `cat` and `check` say so clearly.

mod common;

use std::fs;
use std::path::PathBuf;

use common::{Rng, Vol, DEFAULT_CODEWORD, SMALL_CODEWORD};

/// Asserts that `volume check` fails and names each of `members`.
#[track_caller]
fn assert_check_names(v: &Vol, members: &[usize]) -> String {
    let out = v.check(false);
    let text = format!("{}{}", out.text(), out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "volume check should report damage:\n{text}"
    );
    for m in members {
        assert!(
            text.contains(&format!("member {m}")),
            "volume check does not name member {m}:\n{text}"
        );
    }
    assert!(!text.contains("DATA LOSS"), "{text}");
    text
}

/// `check --repair` exits 0, a following check is clean, and `cat` is identical.
#[track_caller]
fn assert_repairs(v: &Vol, objects: &[(&str, &[u8])]) {
    let out = v.check(true);
    assert!(
        out.status.success(),
        "volume check --repair failed ({}):\n{}{}",
        out.status,
        out.text(),
        out.stderr
    );
    assert!(out.text().contains("repaired"), "{}", out.text());
    v.assert_clean();
    for (name, data) in objects {
        v.assert_cat(name, data);
    }
}

#[test]
fn lose_each_member_in_turn() {
    let v = Vol::default_shape();
    // Four codewords, the last one short; and a second object smaller than one codeword.
    let a = common::random_bytes(1, 3 * DEFAULT_CODEWORD + 12_345);
    let b = common::random_bytes(2, 50_000);
    v.ingest("a", &a);
    v.ingest("b", &b);
    let members = v.member_count();
    assert_eq!(members, 8);
    for m in 0..members {
        let dir = v.member(m);
        let aside = PathBuf::from(format!("{}.gone", dir.display()));
        fs::rename(&dir, &aside).unwrap();
        let out = v.cat("a").ok();
        assert!(out.stdout == a, "cat a with member {m} lost: bytes differ");
        assert!(
            out.stderr.contains(&format!("member {m}")),
            "cat should say which member is missing:\n{}",
            out.stderr
        );
        v.assert_cat("b", &b);
        assert_check_names(&v, &[m]);
        assert_repairs(&v, &[("a", &a), ("b", &b)]);
        assert!(
            dir.join("MEMBER").is_file(),
            "repair did not recreate member {m}"
        );
        fs::remove_dir_all(&aside).unwrap();
    }
    v.assert_no_orphans();
}

/// A segment file lost while its member directory is there (a file system
/// restored without it), and a segment file cut short.
#[test]
fn lost_and_truncated_segment_files() {
    let v = Vol::small();
    let a = common::random_bytes(3, 30 * SMALL_CODEWORD + 1);
    v.ingest("a", &a);
    let segs = v.segment_files();
    assert_eq!(segs.len(), 6);
    fs::remove_file(&segs[2]).unwrap();
    v.assert_cat("a", &a);
    assert_check_names(&v, &[2]);
    assert_repairs(&v, &[("a", &a)]);

    // 30 codewords x 4 packets = 3 blocks per member: keep only the first.
    let f = fs::OpenOptions::new().write(true).open(&segs[4]).unwrap();
    f.set_len(4096).unwrap();
    drop(f);
    v.assert_cat("a", &a);
    assert_check_names(&v, &[4]);
    assert_repairs(&v, &[("a", &a)]);
    v.assert_no_orphans();
}

#[test]
fn flipped_bytes_in_one_member() {
    let mut rng = Rng::from_env("flipped_bytes_in_one_member");
    let v = Vol::small();
    let a = common::random_bytes(4, 40 * SMALL_CODEWORD - 7);
    v.ingest("a", &a);
    let members = v.member_count();
    for round in 0..3 {
        // Any damage within one member is within what the code rebuilds.
        let m = rng.below(members as u64) as usize;
        let seg = v
            .member(m)
            .join("objects")
            .join(format!("{}.seg", v.object("a").unwrap()["toi"]));
        let mut bytes = fs::read(&seg).unwrap();
        let flips = 1 + rng.below(40);
        for _ in 0..flips {
            let at = rng.below(bytes.len() as u64) as usize;
            bytes[at] ^= 1 << rng.below(8);
        }
        fs::write(&seg, &bytes).unwrap();
        eprintln!("round {round}: {flips} bit flips in member {m}");
        v.assert_cat("a", &a);
        assert_check_names(&v, &[m]);
        assert_repairs(&v, &[("a", &a)]);
    }
}

/// A few flipped bytes spread over several members: each flip damages at most
/// one symbol, so no codeword loses more than m = 4 (small shape).
#[test]
fn flipped_bytes_across_members() {
    let mut rng = Rng::from_env("flipped_bytes_across_members");
    let v = Vol::small();
    let a = common::random_bytes(5, 25 * SMALL_CODEWORD + 99);
    let b = common::random_bytes(6, 7 * SMALL_CODEWORD);
    v.ingest("a", &a);
    v.ingest("b", &b);
    let segs = v.segment_files();
    let mut hit = Vec::new();
    for _ in 0..4 {
        let seg = &segs[rng.below(segs.len() as u64) as usize];
        let mut bytes = fs::read(seg).unwrap();
        let at = rng.below(bytes.len() as u64) as usize;
        bytes[at] ^= 0xff;
        fs::write(seg, &bytes).unwrap();
        let m: usize = seg
            .parent()
            .unwrap()
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        eprintln!("flipped byte {at} of {}", seg.display());
        hit.push(m);
    }
    v.assert_cat("a", &a);
    v.assert_cat("b", &b);
    assert_check_names(&v, &hit);
    assert_repairs(&v, &[("a", &a), ("b", &b)]);
}

/// A stored packet of the default shape: 1408 bytes of symbol and its header.
const PACKET_BYTES: u64 = 1436;

/// Default shape: flipped bytes in the packets of one member (a bad disk).
#[test]
fn flipped_bytes_default_shape() {
    let mut rng = Rng::from_env("flipped_bytes_default_shape");
    let v = Vol::default_shape();
    let a = common::random_bytes(7, 2 * DEFAULT_CODEWORD + 1000);
    v.ingest("a", &a);
    let m = rng.below(8) as usize;
    let seg = &v.segment_files()[m];
    let mut bytes = fs::read(seg).unwrap();
    // Within the packets actually stored: each whole codeword puts 31 or 32 packets of 1436
    // bytes on a member, laid from the start of its blocks, `block_len / 1436` a block.
    let block = u64::from(isnode_store::VolumeParams::default().block_len);
    let per_block = block / PACKET_BYTES;
    for _ in 0..10 {
        let p = rng.below(2 * 31);
        let within = rng.below(PACKET_BYTES);
        let at = (p / per_block) * block + (p % per_block) * PACKET_BYTES + within;
        bytes[at as usize] ^= 0x5a;
    }
    fs::write(seg, &bytes).unwrap();
    v.assert_cat("a", &a);
    assert_check_names(&v, &[m]);
    assert_repairs(&v, &[("a", &a)]);
}

/// Losing two members exceeds what the code rebuilds.
#[test]
fn beyond_the_code() {
    for small in [true, false] {
        let v = if small {
            Vol::small()
        } else {
            Vol::default_shape()
        };
        let cw = if small {
            SMALL_CODEWORD
        } else {
            DEFAULT_CODEWORD
        };
        let a = common::random_bytes(8, 2 * cw + 10);
        v.ingest("a", &a);
        for m in [1, 3] {
            fs::rename(v.member(m), v.dir.path().join(format!("gone-{m}"))).unwrap();
        }
        let out = v.cat("a").fails_with(&["codeword", "only"]);
        assert!(out.stderr.contains("\"a\""), "{}", out.stderr);
        assert!(out.stdout.len() < a.len());

        let out = v.check(false);
        let text = format!("{}{}", out.text(), out.stderr);
        assert_eq!(out.status.code(), Some(1), "{text}");
        assert!(
            text.contains("DATA LOSS") && text.contains("codeword"),
            "{text}"
        );
        assert!(
            text.contains("member 1") && text.contains("member 3"),
            "{text}"
        );

        // Repair cannot invent data: it says so and keeps failing.
        let out = v.check(true);
        let text = format!("{}{}", out.text(), out.stderr);
        assert_eq!(out.status.code(), Some(1), "{text}");
        assert!(text.contains("DATA LOSS"), "{text}");
        v.cat("a").fails_with(&["codeword"]);

        // Bringing one member back makes the object readable and repairable again.
        fs::remove_dir_all(v.member(3)).unwrap_or(());
        fs::rename(v.dir.path().join("gone-3"), v.member(3)).unwrap();
        v.assert_cat("a", &a);
        assert_repairs(&v, &[("a", &a)]);
    }
}

/// Ingest while a member is missing writes the others (a degraded write) and marks the
/// member failed; a rebuild once it is back makes the volume whole.
#[test]
fn ingest_with_a_member_missing() {
    let v = Vol::small();
    let a = common::random_bytes(9, 6 * SMALL_CODEWORD);
    v.ingest("a", &a);
    let aside = v.dir.path().join("member-3-aside");
    fs::rename(v.member(3), &aside).unwrap();
    let b = common::random_bytes(10, 6 * SMALL_CODEWORD);
    let input = v.input("b.bin", &b);
    let out = v.run(&[
        "ingest",
        input.to_str().unwrap(),
        "--name",
        "b",
        "--bitrate",
        "1000",
    ]);
    // A degraded write: the other members are written, the object reads back whole, and
    // the member is marked failed until a rebuild writes its segment.
    assert!(
        out.status.success(),
        "degraded ingest failed: {}",
        out.stderr
    );
    v.assert_cat("b", &b);
    v.assert_cat("a", &a);
    let check = v.check(false);
    assert!(
        check.text().contains("member 3: failed"),
        "{}",
        check.text()
    );
    fs::rename(&aside, v.member(3)).unwrap();
    let rebuilt = v.run(&["volume", "rebuild", "--member", "3"]);
    assert!(rebuilt.status.success(), "{}", rebuilt.stderr);
    v.assert_clean();
    v.assert_cat("b", &b);
    v.assert_no_orphans();
}
