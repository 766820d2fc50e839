//! CENC `cbcs` over hand-built fragmented MP4s: whatever the NAL units and audio samples,
//! decrypting the rewritten file by the rules a player follows (`tenc` pattern, `senc`
//! subsamples, the constant IV restarting at each subsample, `trun` offsets) gives back
//! every sample; the clear parts stay clear; the fragment index and the descriptor of the
//! encrypted file are those of the clear one.

use super::*;
use crate::boxes::{be32, child, children};
use crate::cenc_fragment::protect_fragment;
use crate::index::{Indexer, MediaIndex};
use proptest::prelude::*;

fn bx(kind: &[u8; 4], content: &[u8]) -> Vec<u8> {
    let mut b = (8 + content.len() as u32).to_be_bytes().to_vec();
    b.extend_from_slice(kind);
    b.extend_from_slice(content);
    b
}

fn full(kind: &[u8; 4], flags: u32, rest: &[u8]) -> Vec<u8> {
    let mut c = flags.to_be_bytes().to_vec();
    c.extend_from_slice(rest);
    bx(kind, &c)
}

fn words(w: &[u32]) -> Vec<u8> {
    w.iter().flat_map(|v| v.to_be_bytes()).collect()
}

/// A toy block cipher (a byte-wise bijection): enough to check the chaining and layout.
struct Toy;

impl BlockCipher for Toy {
    fn encrypt_block(&self, b: &mut [u8; 16]) {
        for (i, x) in b.iter_mut().enumerate() {
            *x = x.rotate_left(3) ^ 0x5a ^ i as u8;
        }
    }
}

impl crate::cenc_clear::BlockDecipher for Toy {
    fn decrypt_block(&self, b: &mut [u8; 16]) {
        toy_decrypt(b);
    }
}

fn toy_decrypt(b: &mut [u8; 16]) {
    for (i, x) in b.iter_mut().enumerate() {
        *x = (*x ^ 0x5a ^ i as u8).rotate_right(3);
    }
}

/// Inverse of [`cbc_pattern`] under [`Toy`].
fn cbc_pattern_decrypt(iv: &[u8; 16], data: &mut [u8], crypt: u8, skip: u8) {
    let mut chain = *iv;
    let period = usize::from(crypt) + usize::from(skip);
    for (i, block) in data.chunks_exact_mut(16).enumerate() {
        if skip != 0 && i % period >= usize::from(crypt) {
            continue;
        }
        let c: [u8; 16] = block.try_into().unwrap();
        let mut p = c;
        toy_decrypt(&mut p);
        for (x, k) in p.iter_mut().zip(chain.iter()) {
            *x ^= k;
        }
        block.copy_from_slice(&p);
        chain = c;
    }
}

fn trak(id: u32, handler: &[u8; 4], entry: Vec<u8>) -> Vec<u8> {
    let tkhd = full(b"tkhd", 3, &words(&[0, 0, id, 0, 0]));
    let mdhd = full(b"mdhd", 0, &words(&[0, 0, 12_800, 0, 0]));
    let hdlr = full(b"hdlr", 0, &[&words(&[0])[..], handler, &[0; 13]].concat());
    let stsd = full(b"stsd", 0, &[&words(&[1])[..], &entry].concat());
    let stbl = bx(b"stbl", &stsd);
    let minf = bx(b"minf", &stbl);
    let mdia = bx(b"mdia", &[mdhd, hdlr, minf].concat());
    bx(b"trak", &[tkhd, mdia].concat())
}

/// ftyp + moov: an H.264 track 1 (4-byte NAL lengths), an AAC track 2.
fn init() -> Vec<u8> {
    let avcc = bx(b"avcC", &[1, 0x64, 0, 0x1e, 0xff, 0xe0, 0, 0]);
    let mut v = vec![0u8; 78];
    v[24..26].copy_from_slice(&320u16.to_be_bytes());
    v[26..28].copy_from_slice(&240u16.to_be_bytes());
    let avc1 = bx(b"avc1", &[v, avcc].concat());
    let mut a = vec![0u8; 28];
    a[16..18].copy_from_slice(&2u16.to_be_bytes());
    a[24..28].copy_from_slice(&(48_000u32 << 16).to_be_bytes());
    let mp4a = bx(b"mp4a", &a);
    let trex_v = full(b"trex", 0, &words(&[1, 1, 512, 0, 0x0101_0000]));
    let trex_a = full(b"trex", 0, &words(&[2, 1, 1024, 0, 0]));
    let mvex = bx(b"mvex", &[trex_v, trex_a].concat());
    let moov = bx(
        b"moov",
        &[trak(1, b"vide", avc1), trak(2, b"soun", mp4a), mvex].concat(),
    );
    [bx(b"ftyp", b"iso6\0\0\0\0iso6cmfc"), moov].concat()
}

/// A video sample of NAL units `(type, payload length)` (4-byte lengths).
fn video_sample(nals: &[(u8, usize)], seed: u8) -> Vec<u8> {
    let mut s = Vec::new();
    for (i, &(t, n)) in nals.iter().enumerate() {
        s.extend_from_slice(&(n as u32 + 1).to_be_bytes());
        s.push(0x60 | t);
        s.extend((0..n).map(|j| (j as u8).wrapping_mul(31) ^ seed ^ i as u8));
    }
    s
}

/// moof + mdat of `video` then `audio` samples (trun data offsets, default-base-is-moof).
fn fragment(seq: u32, video: &[Vec<u8>], audio: &[Vec<u8>]) -> Vec<u8> {
    let traf = |id: u32, samples: &[Vec<u8>], offset: u32| {
        let tfhd = full(b"tfhd", 0x02_0000, &words(&[id]));
        let tfdt = full(b"tfdt", 0x0100_0000, &(u64::from(seq) * 5120).to_be_bytes());
        let mut rest = words(&[samples.len() as u32, offset]);
        for s in samples {
            rest.extend(words(&[s.len() as u32]));
        }
        let trun = full(b"trun", 0x201, &rest);
        bx(b"traf", &[tfhd, tfdt, trun].concat())
    };
    let build = |vo: u32, ao: u32| {
        let mfhd = full(b"mfhd", 0, &words(&[seq]));
        bx(
            b"moof",
            &[mfhd, traf(1, video, vo), traf(2, audio, ao)].concat(),
        )
    };
    let len = build(0, 0).len() as u32;
    let vlen: u32 = video.iter().map(|s| s.len() as u32).sum();
    let moof = build(len + 8, len + 8 + vlen);
    let mdat = bx(b"mdat", &[video.concat(), audio.concat()].concat());
    [moof, mdat].concat()
}

/// The samples of track `id` in a moof + mdat (`frag`), by its `trun`'s offset and sizes;
/// and the subsamples of its `senc` (empty without one).
fn samples_of(frag: &[u8], id: u32) -> (Vec<Vec<u8>>, Vec<Vec<Subsample>>) {
    let moof = &frag[8..be32(frag, 0).unwrap() as usize];
    for (_, traf) in children(moof).filter(|(k, _)| k == b"traf") {
        if be32(child(traf, b"tfhd").unwrap(), 4) != Some(id) {
            continue;
        }
        let trun = child(traf, b"trun").unwrap();
        let n = be32(trun, 4).unwrap() as usize;
        let mut at = be32(trun, 8).unwrap() as usize;
        let mut out = Vec::new();
        for i in 0..n {
            let size = be32(trun, 12 + 4 * i).unwrap() as usize;
            out.push(frag[at..at + size].to_vec());
            at += size;
        }
        let mut subs = Vec::new();
        if let Some(senc) = child(traf, b"senc") {
            assert_eq!(be32(senc, 4).unwrap() as usize, n);
            let mut p = 8;
            for _ in 0..n {
                let k = crate::boxes::be16(senc, p).unwrap() as usize;
                p += 2;
                let mut s = Vec::new();
                for _ in 0..k {
                    let c = crate::boxes::be16(senc, p).unwrap();
                    let q = be32(senc, p + 2).unwrap();
                    s.push((c, q));
                    p += 6;
                }
                subs.push(s);
            }
            // saio points at the first entry, from the moof's first byte.
            let saio = child(traf, b"saio").unwrap();
            let off = be32(saio, 8).unwrap() as usize;
            assert_eq!(&frag[off - 4..off], &(n as u32).to_be_bytes());
        }
        return (out, subs);
    }
    panic!("no traf for track {id}");
}

/// The whole file encrypted, as the binary's shell does it.
fn encrypt_file(init: &[u8], frags: &[Vec<u8>], p: &CencParams) -> (Vec<u8>, Vec<Vec<u8>>) {
    let moov_at = be32(init, 0).unwrap() as usize;
    let (moov, tracks) = protect_moov(&init[moov_at + 8..], p).unwrap();
    assert_eq!(tracks.len(), 2);
    let mut file = [&init[..moov_at], &moov[..]].concat();
    let mut out = Vec::new();
    for f in frags {
        let moof_len = be32(f, 0).unwrap() as usize;
        let mut mdat = f[moof_len..].to_vec();
        let moof = protect_fragment(&f[..moof_len], &mut mdat, &tracks, p, &Toy).unwrap();
        let frag = [moof, mdat].concat();
        file.extend_from_slice(&frag);
        out.push(frag);
    }
    (file, out)
}

fn index(data: &[u8]) -> MediaIndex {
    let mut ix = Indexer::new();
    ix.feed(data);
    ix.finish()
}

fn nal() -> impl Strategy<Value = (u8, usize)> {
    (prop::sample::select(vec![1u8, 5, 6, 7, 8, 9]), 0usize..400)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn decrypting_by_the_players_rules_gives_every_sample_back(
        video in prop::collection::vec(prop::collection::vec(nal(), 1..6), 1..6),
        audio in prop::collection::vec(1usize..300, 1..6),
        key_id in any::<[u8; 16]>(),
        iv in any::<[u8; 16]>(),
    ) {
        let p = CencParams { key_id, iv };
        let vs: Vec<Vec<u8>> = video.iter().enumerate().map(|(i, n)| video_sample(n, i as u8)).collect();
        let aus: Vec<Vec<u8>> = audio.iter().map(|&n| (0..n).map(|j| j as u8 ^ 0x33).collect()).collect();
        let init = init();
        let frags: Vec<Vec<u8>> = (0..2).map(|s| fragment(s, &vs, &aus)).collect();
        let (file, enc) = encrypt_file(&init, &frags, &p);
        for frag in &enc {
            let (got, subs) = samples_of(frag, 1);
            prop_assert_eq!(got.len(), vs.len());
            for ((clear, mut s), sub) in vs.iter().zip(got).zip(&subs) {
                let total: usize = sub.iter().map(|&(c, q)| usize::from(c) + q as usize).sum();
                prop_assert_eq!(total, clear.len());
                let mut at = 0;
                for &(c, q) in sub {
                    at += usize::from(c);
                    cbc_pattern_decrypt(&iv, &mut s[at..at + q as usize], PATTERN.0, PATTERN.1);
                    at += q as usize;
                }
                prop_assert_eq!(&s, clear);
                prop_assert!(sub.len() <= MAX_SUBSAMPLES);
            }
            let (got, subs) = samples_of(frag, 2);
            prop_assert!(subs.is_empty(), "audio has no senc");
            for (clear, mut s) in aus.iter().zip(got) {
                if clear.len() >= 16 {
                    prop_assert_ne!(&s, clear);
                }
                cbc_pattern_decrypt(&iv, &mut s, 1, 0);
                prop_assert_eq!(&s, clear);
            }
        }
        // The fragment index and the descriptor are the clear file's.
        let clear_ix = index(&[init.clone(), frags.concat()].concat());
        let enc_ix = index(&file);
        let times = |ix: &MediaIndex| ix.fragments.as_ref().map(|f| {
            f.fragments.iter().map(|g| (g.decode_start, g.duration, g.samples)).collect::<Vec<_>>()
        });
        prop_assert_eq!(times(&enc_ix), times(&clear_ix));
        prop_assert_eq!(
            enc_ix.rendition.as_ref().map(|r| r.codecs()),
            clear_ix.rendition.as_ref().map(|r| r.codecs())
        );
    }

    #[test]
    fn clearing_the_encrypted_file_gives_the_clear_file_byte_for_byte(
        video in prop::collection::vec(prop::collection::vec(nal(), 1..6), 1..6),
        audio in prop::collection::vec(1usize..300, 1..6),
        key_id in any::<[u8; 16]>(),
        iv in any::<[u8; 16]>(),
    ) {
        use crate::cenc_clear::{clear_fragment, clear_moov};
        let p = CencParams { key_id, iv };
        let vs: Vec<Vec<u8>> = video.iter().enumerate().map(|(i, n)| video_sample(n, i as u8)).collect();
        let aus: Vec<Vec<u8>> = audio.iter().map(|&n| (0..n).map(|j| j as u8 ^ 0x5c).collect()).collect();
        let init = init();
        let frags: Vec<Vec<u8>> = (0..3).map(|s| fragment(s, &vs, &aus)).collect();
        let (file, enc) = encrypt_file(&init, &frags, &p);
        let moov_at = be32(&file, 0).unwrap() as usize;
        let moov_len = be32(&file, moov_at).unwrap() as usize;
        let cm = clear_moov(&file[moov_at + 8..moov_at + moov_len]).unwrap();
        prop_assert_eq!(cm.iv, iv);
        prop_assert_eq!(cm.tracks.len(), 2);
        let mut out = [&file[..moov_at], &cm.moov[..]].concat();
        for frag in &enc {
            let moof_len = be32(frag, 0).unwrap() as usize;
            let mut mdat = frag[moof_len..].to_vec();
            let moof = clear_fragment(&frag[..moof_len], &mut mdat, &cm.tracks, &cm.iv, &Toy).unwrap();
            out.extend_from_slice(&moof);
            out.extend_from_slice(&mdat);
        }
        prop_assert!(out == [init, frags.concat()].concat(), "not the clear file");
    }

    #[test]
    fn no_panic_on_any_moof(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        let p = CencParams { key_id: [1; 16], iv: [2; 16] };
        let tracks = [Track { track_id: 1, kind: TrackKind::Video { length_size: 4, hevc: false }, default_size: 0 }];
        let mut moof = bx(b"moof", &bytes);
        let mut mdat = bx(b"mdat", &bytes);
        let _ = protect_fragment(&moof, &mut mdat, &tracks, &p, &Toy);
        moof.truncate(moof.len() / 2);
        let _ = protect_fragment(&moof, &mut mdat, &tracks, &p, &Toy);
        let _ = protect_moov(&bytes, &p);
        let _ = crate::cenc_clear::clear_fragment(&moof, &mut mdat, &tracks, &[2; 16], &Toy);
        let _ = crate::cenc_clear::clear_moov(&bytes);
        let _ = video_subsamples(&bytes, 4, false);
    }
}

#[test]
fn the_init_segment_names_the_scheme_key_and_system() {
    let p = CencParams {
        key_id: [7; 16],
        iv: [9; 16],
    };
    let init = init();
    let moov_at = be32(&init, 0).unwrap() as usize;
    let (moov, tracks) = protect_moov(&init[moov_at + 8..], &p).unwrap();
    assert_eq!(
        tracks,
        [
            Track {
                track_id: 1,
                kind: TrackKind::Video {
                    length_size: 4,
                    hevc: false
                },
                default_size: 0
            },
            Track {
                track_id: 2,
                kind: TrackKind::Audio,
                default_size: 0
            },
        ]
    );
    let has = |needle: &[u8]| moov.windows(needle.len()).any(|w| w == needle);
    assert!(has(b"encv") && has(b"enca") && has(b"frma") && has(b"cbcs"));
    assert!(has(&COMMON_SYSTEM_ID) && has(&[7; 16]) && has(&[9; 16]));
    // A second pass refuses: the file is encrypted already.
    assert!(protect_moov(&moov[8..], &p).is_err());
    // Not fragmented: refused.
    let no_mvex: Vec<u8> = children(&init[moov_at + 8..])
        .filter(|(k, _)| k != b"mvex")
        .flat_map(|(k, c)| bx(&k, c))
        .collect();
    assert!(protect_moov(&no_mvex, &p).is_err());
}
