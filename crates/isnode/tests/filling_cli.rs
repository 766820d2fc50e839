//! `isnode ls` and `isnode volume check` through the real binary on a volume holding an
//! interrupted origin fill: the filling object is listed with its front, its committed
//! blocks are verified, and a flipped byte in one of them is damage.

mod serve_support;

use serde_json::Value;
use serve_support::{isnode, text, Vol, SMALL_SHAPE};

/// Fills 20 000 of the 50 000 bytes of `f.ts` (3 codewords of 12 × 1408 bytes: 1 committed)
/// and leaves the fill as a crash would; its TOI.
fn interrupted_fill(vol: &Vol) -> u32 {
    let mut v = isnode_store::Volume::open(&vol.root).unwrap();
    let spec = isnode_store::FillSpec {
        name: "f.ts".into(),
        size_bytes: 50_000,
        bitrate_bps: 1_000_000,
        content_type: "video/mp2t".into(),
        origin_etag: "\"abc\"".into(),
    };
    let mut f = isnode_store::Fill::begin_or_resume(&mut v, &spec).unwrap();
    let bytes: Vec<u8> = (0..20_000u32).map(|i| (i * 7 + i / 300) as u8).collect();
    f.push(&mut v, &bytes).unwrap();
    assert_eq!(f.commit(&mut v).unwrap(), 1);
    f.toi()
}

#[test]
fn ls_and_check_show_a_filling_object() {
    let vol = Vol::create(SMALL_SHAPE);
    let toi = interrupted_fill(&vol);

    let out = isnode(&vol, &["ls", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let list: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let f = list
        .iter()
        .find(|o| o["name"] == "f.ts")
        .expect("f.ts listed");
    assert_eq!(f["status"], "filling", "{f}");
    assert_eq!(f["state"], "filling", "{f}");
    assert_eq!(f["front_codewords"], 1, "{f}");
    assert_eq!(f["codewords"], 3, "{f}");
    assert_eq!(f["origin_etag"], "\"abc\"", "{f}");
    let out = isnode(&vol, &["ls"]);
    assert!(
        text(&out).contains("filling: 1 of 3 codewords"),
        "{}",
        text(&out)
    );

    let out = isnode(&vol, &["volume", "check", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let filling = &report["report"]["filling"][0];
    assert_eq!(filling["object"], "f.ts", "{report}");
    assert_eq!(filling["front_codewords"], 1, "{report}");
    // One block per member holds the committed packets.
    assert_eq!(filling["blocks"], 4, "{report}");

    // A flipped byte in a committed packet of member 0 is damage (exit 1).
    let seg = vol.root.join(format!("members/0/objects/{toi}.seg"));
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[100] ^= 1;
    std::fs::write(&seg, bytes).unwrap();
    let out = isnode(&vol, &["volume", "check"]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("filling object") && t.contains("f.ts"), "{t}");
}
