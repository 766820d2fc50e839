use super::*;
use crate::sender::object_packets;
use isnode_wire::fdt::{build_fdt_packets, FdtFile};
use proptest::prelude::*;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const T0: Duration = Duration::ZERO;

fn params(len: u64, e: u32, b: u32, m: u32) -> SessionParams {
    SessionParams {
        tsi: 0xA1B2_C3D4,
        toi: 7,
        transfer_length: len,
        symbol_len: e,
        max_source_block_len: b,
        repair_symbols: m,
        start_codeword: 0,
    }
}

fn random_data(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..len).map(|_| rng.random()).collect()
}

/// Feeds `packets` in order, draining the output after each one; then finishes and drains.
/// Checks the output is contiguous and covers the stream exactly. Returns the output
/// (lost ranges as zeros) and the lost codewords with their ranges.
fn run(rx: &mut Receiver, packets: &[Vec<u8>]) -> (Vec<u8>, Vec<(u32, u64, u64)>) {
    let mut out = Vec::new();
    let mut lost = Vec::new();
    let mut next = rx.output_start();
    let mut drain = |rx: &mut Receiver, out: &mut Vec<u8>, lost: &mut Vec<_>| {
        while let Some(o) = rx.poll_output() {
            assert_eq!(o.offset(), next, "output is in order and contiguous");
            assert!(!o.is_empty());
            next += o.len();
            match o {
                Output::Data { bytes, .. } => out.extend_from_slice(&bytes),
                Output::Lost { sbn, offset, len } => {
                    out.resize(out.len() + len as usize, 0);
                    lost.push((sbn, offset, len));
                }
            }
        }
    };
    for (i, p) in packets.iter().enumerate() {
        rx.push(p, Duration::from_millis(i as u64));
        drain(rx, &mut out, &mut lost);
    }
    rx.finish();
    drain(rx, &mut out, &mut lost);
    assert!(rx.is_complete());
    assert_eq!(out.len() as u64, rx.output_len(), "output keeps its length");
    (out, lost)
}

/// Reorders by sorting on index + a random offset below `window`: no packet moves by
/// `window` places or more.
fn local_shuffle(packets: &mut Vec<Vec<u8>>, window: usize, rng: &mut ChaCha8Rng) {
    let mut keyed: Vec<(usize, Vec<u8>)> = packets
        .drain(..)
        .enumerate()
        .map(|(i, p)| (i + rng.random_range(0..window.max(1)), p))
        .collect();
    keyed.sort_by_key(|(k, _)| *k);
    packets.extend(keyed.into_iter().map(|(_, p)| p));
}

/// Erasure plan of one codeword: which ESIs to drop and which to corrupt.
struct Plan {
    drop: Vec<usize>,
    corrupt: Vec<usize>,
}

/// Builds the received sequence from the codewords and per-codeword plans, with duplicates
/// and foreign packets mixed in.
fn stream(
    cws: &[Vec<Vec<u8>>],
    plans: &[Plan],
    dup_rate: f64,
    rng: &mut ChaCha8Rng,
) -> (Vec<Vec<u8>>, u64) {
    let mut seq = Vec::new();
    let mut corrupted = 0;
    for (cw, plan) in cws.iter().zip(plans) {
        for (esi, p) in cw.iter().enumerate() {
            if plan.drop.contains(&esi) {
                continue;
            }
            let mut p = p.clone();
            if plan.corrupt.contains(&esi) {
                let at = rng.random_range(0..p.len());
                p[at] ^= rng.random_range(1..=255u8);
                corrupted += 1;
            } else if rng.random_bool(dup_rate) {
                seq.push(p.clone());
            }
            seq.push(p);
        }
    }
    (seq, corrupted)
}

fn erasures(n: usize, count: usize, rng: &mut ChaCha8Rng) -> Plan {
    let mut esis: Vec<usize> = (0..n).collect();
    esis.shuffle(rng);
    esis.truncate(count);
    let split = rng.random_range(0..=count);
    Plan {
        corrupt: esis[..split].to_vec(),
        drop: esis[split..].to_vec(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

    /// Loss, corruption, duplication and reordering within the code's limit: the output is
    /// byte-identical.
    #[test]
    fn within_limit_is_byte_identical(
        len in 1usize..6000,
        e in 1u32..48,
        b in 1u32..24,
        m in 1u32..10,
        seed in any::<u64>(),
        start_frac in 0.0f64..1.0,
    ) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let data = random_data(len, seed);
        let mut p = params(len as u64, e, b, m);
        let cws = object_packets(&data, &p).unwrap();
        let start = ((cws.len() as f64 * start_frac) as u32).min(cws.len() as u32 - 1);
        p.start_codeword = if rng.random_bool(0.3) { start } else { 0 };
        let plans: Vec<Plan> = cws
            .iter()
            .map(|cw| {
                let count = rng.random_range(0..=m as usize);
                erasures(cw.len(), count, &mut rng)
            })
            .collect();
        let first = p.start_codeword as usize;
        let (mut seq, corrupted) = stream(&cws[first..], &plans[first..], 0.05, &mut rng);
        // A foreign packet: another TOI.
        let mut other = cws[0][0].clone();
        isnode_wire::seal_data_packet(&mut other, &isnode_wire::DataPacketId {
            tsi: p.tsi, toi: p.toi + 1, sbn: 0, esi: 0,
        }).unwrap();
        seq.insert(rng.random_range(0..=seq.len()), other);
        let n_min = cws.iter().map(Vec::len).min().unwrap();
        local_shuffle(&mut seq, n_min, &mut rng);
        // The shuffle moves packets by up to n_min places of the *received* sequence, which
        // can span any number of codewords when the ones between lost most of their packets;
        // so the early give-up (tested on its own) is switched off here and the codewords
        // are judged at the end of the stream.
        let no_horizon = ReceiverConfig { loss_horizon: u32::MAX, ..ReceiverConfig::default() };
        let mut rx = Receiver::new(p.clone(), no_horizon).unwrap();
        let (out, lost) = run(&mut rx, &seq);
        prop_assert!(lost.is_empty(), "lost {:?}", lost);
        let from = rx.output_start() as usize;
        prop_assert_eq!(&out[..], &data[from..]);
        let s = rx.stats();
        prop_assert_eq!(s.packets_corrupt, corrupted);
        prop_assert_eq!(s.packets_foreign, 1);
        prop_assert_eq!(s.codewords_decoded, s.codewords_total);
        prop_assert_eq!(s.bytes_recovered, rx.output_len());
        prop_assert_eq!(s.packets_received, seq.len() as u64);
        // Every planned erasure is either counted corrupt or lost.
        let planned: u64 = plans[first..].iter().map(|p| (p.drop.len() + p.corrupt.len()) as u64).sum();
        prop_assert_eq!(s.packets_lost + s.packets_corrupt, planned);
    }

    /// More erasures than m in some codewords: exactly those are reported lost, with their
    /// byte ranges, the others are byte-identical, and the output keeps its length.
    #[test]
    fn beyond_limit_reports_exact_ranges(
        len in 1usize..5000,
        e in 1u32..40,
        b in 1u32..16,
        m in 1u32..6,
        seed in any::<u64>(),
    ) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let data = random_data(len, seed ^ 1);
        let p = params(len as u64, e, b, m);
        let cws = object_packets(&data, &p).unwrap();
        let mut doomed = Vec::new();
        let plans: Vec<Plan> = cws
            .iter()
            .enumerate()
            .map(|(sbn, cw)| {
                let n = cw.len();
                let count = if rng.random_bool(0.4) {
                    doomed.push(sbn as u32);
                    rng.random_range(m as usize + 1..=n)
                } else {
                    rng.random_range(0..=m as usize)
                };
                erasures(n, count, &mut rng)
            })
            .collect();
        let (mut seq, _) = stream(&cws, &plans, 0.02, &mut rng);
        let n_min = cws.iter().map(Vec::len).min().unwrap();
        local_shuffle(&mut seq, n_min, &mut rng);
        // The shuffle moves packets by up to n_min places of the *received* sequence, which
        // can span any number of codewords when the ones between lost most of their packets;
        // so the early give-up (tested on its own) is switched off here and the codewords
        // are judged at the end of the stream.
        // Whole codewords: each doomed codeword is one Lost piece of its full range.
        let no_horizon = ReceiverConfig {
            loss_horizon: u32::MAX,
            release: Release::Codeword,
            ..ReceiverConfig::default()
        };
        let mut rx = Receiver::new(p.clone(), no_horizon).unwrap();
        let (out, lost) = run(&mut rx, &seq);
        let part = rx.partition().to_owned();
        let expect: Vec<(u32, u64, u64)> = doomed
            .iter()
            .map(|&s| (s, part.block_offset(s), part.block_bytes(s)))
            .collect();
        prop_assert_eq!(&lost, &expect);
        prop_assert_eq!(&rx.stats().codewords_unrecoverable, &doomed);
        for sbn in 0..part.blocks() {
            let (a, z) = (part.block_offset(sbn) as usize, (part.block_offset(sbn) + part.block_bytes(sbn)) as usize);
            if doomed.contains(&sbn) {
                prop_assert!(out[a..z].iter().all(|&x| x == 0));
            } else {
                prop_assert_eq!(&out[a..z], &data[a..z]);
            }
        }
        let s = rx.stats();
        prop_assert_eq!(s.bytes_lost + s.bytes_recovered, len as u64);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

    /// Instant release under any loss, corruption, duplication and local reordering: the
    /// output is in order and covers the stream exactly once (checked by `run`); every byte
    /// released as data is the original byte; a Lost piece is always the tail of an
    /// unrecoverable codeword (its intact prefix may have gone out as data); the codewords
    /// within the code's limit are byte-identical.
    #[test]
    fn instant_release_never_contradicts(
        len in 1usize..5000,
        e in 1u32..40,
        b in 1u32..16,
        m in 1u32..6,
        seed in any::<u64>(),
        shuffle in any::<bool>(),
        horizon in prop_oneof![Just(u32::MAX), 1u32..4],
    ) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let data = random_data(len, seed ^ 2);
        let p = params(len as u64, e, b, m);
        let cws = object_packets(&data, &p).unwrap();
        let mut doomed = Vec::new();
        let plans: Vec<Plan> = cws
            .iter()
            .enumerate()
            .map(|(sbn, cw)| {
                let n = cw.len();
                let count = if rng.random_bool(0.4) {
                    doomed.push(sbn as u32);
                    rng.random_range(m as usize + 1..=n)
                } else {
                    rng.random_range(0..=m as usize)
                };
                erasures(n, count, &mut rng)
            })
            .collect();
        let (mut seq, _) = stream(&cws, &plans, 0.02, &mut rng);
        if shuffle {
            let n_min = cws.iter().map(Vec::len).min().unwrap();
            local_shuffle(&mut seq, n_min, &mut rng);
        }
        let cfg = ReceiverConfig { loss_horizon: horizon, ..ReceiverConfig::default() };
        let mut rx = Receiver::new(p.clone(), cfg).unwrap();
        let (out, lost) = run(&mut rx, &seq);
        let part = rx.partition().to_owned();
        let mut lost_bytes = vec![false; len];
        for &(sbn, offset, l) in &lost {
            // The tail of codeword `sbn`, starting on a symbol boundary.
            let (a, z) = (part.block_offset(sbn), part.block_offset(sbn) + part.block_bytes(sbn));
            prop_assert!(offset >= a && offset + l == z, "lost {offset}+{l} of {a}..{z}");
            prop_assert_eq!((offset - a) % u64::from(e), 0);
            lost_bytes[offset as usize..(offset + l) as usize].iter_mut().for_each(|x| *x = true);
        }
        for i in 0..len {
            if !lost_bytes[i] {
                prop_assert_eq!(out[i], data[i], "byte {} released as data differs", i);
            }
        }
        let s = rx.stats();
        // Without early give-up, exactly the doomed codewords are lost.
        if horizon == u32::MAX {
            prop_assert_eq!(&s.codewords_unrecoverable, &doomed);
        }
        let lost_sbns: Vec<u32> = lost.iter().map(|l| l.0).collect();
        prop_assert_eq!(&s.codewords_unrecoverable, &lost_sbns);
        let ranges: Vec<(u32, u64, u64)> = s.lost_ranges.iter().map(|r| (r.sbn, r.offset, r.len)).collect();
        prop_assert_eq!(&ranges, &lost);
        prop_assert_eq!(s.bytes_lost + s.bytes_recovered, len as u64);
        prop_assert_eq!(s.bytes_lost, lost.iter().map(|l| l.2).sum::<u64>());
    }
}

#[test]
fn instant_release_follows_the_source_symbols() {
    let data = random_data(3000, 9);
    let p = params(3000, 100, 10, 3); // 3 codewords of 10 source symbols
    let cws = object_packets(&data, &p).unwrap();
    let mut rx = Receiver::new(p, ReceiverConfig::default()).unwrap();
    // In order and intact: every source symbol goes out as it arrives.
    for esi in 0..3 {
        rx.push(&cws[0][esi], T0);
        let Some(Output::Data { sbn, offset, bytes }) = rx.poll_output() else {
            panic!("symbol {esi} released at once")
        };
        assert_eq!((sbn, offset), (0, esi as u64 * 100));
        assert_eq!(bytes, data[esi * 100..esi * 100 + 100]);
        assert_eq!(rx.poll_output(), None);
    }
    // ESI 3 missing: 4..=9 wait; the first repair symbol completes k and the rest goes.
    for pkt in &cws[0][4..10] {
        rx.push(pkt, T0);
        assert_eq!(rx.poll_output(), None, "waits behind the missing ESI 3");
    }
    rx.push(&cws[0][10], T0);
    let Some(Output::Data { offset, bytes, .. }) = rx.poll_output() else {
        panic!("decoded")
    };
    assert_eq!((offset, &bytes[..]), (300, &data[300..1000]));
    assert_eq!(rx.stats().codewords_decoded, 1);
    // Codeword 1 gets its first 4 source symbols and nothing else: they go out, and when
    // the stream moves on (horizon 2) the rest is Lost, exactly its range.
    for pkt in &cws[1][..4] {
        rx.push(pkt, T0);
    }
    let Some(Output::Data { offset, bytes, .. }) = rx.poll_output() else {
        panic!("prefix")
    };
    assert_eq!((offset, &bytes[..]), (1000, &data[1000..1400]));
    rx.finish();
    assert_eq!(
        rx.poll_output(),
        Some(Output::Lost {
            sbn: 1,
            offset: 1400,
            len: 600
        })
    );
    assert_eq!(
        rx.poll_output(),
        Some(Output::Lost {
            sbn: 2,
            offset: 2000,
            len: 1000
        })
    );
    assert_eq!(rx.poll_output(), None);
    let s = rx.stats();
    assert_eq!(s.codewords_unrecoverable, vec![1, 2]);
    assert_eq!((s.bytes_recovered, s.bytes_lost), (1400, 1600));
}

#[test]
fn decodes_at_k_and_counts_repairs() {
    let data = random_data(1000, 1);
    let p = params(1000, 100, 10, 3);
    let cws = object_packets(&data, &p).unwrap();
    let mut rx = Receiver::new(p, ReceiverConfig::default()).unwrap();
    // Drop ESIs 0 and 5; feed 1..=4, 6..=9, then repair 10: the 9th distinct symbol is not k.
    for esi in [1, 2, 3, 4, 6, 7, 8, 9, 10] {
        assert!(matches!(
            rx.push(&cws[0][esi], T0),
            PacketClass::Symbol { decoded: false, .. }
        ));
    }
    assert_eq!(rx.poll_output(), None);
    assert_eq!(
        rx.push(&cws[0][11], T0),
        PacketClass::Symbol {
            sbn: 0,
            esi: 11,
            decoded: true
        }
    );
    assert_eq!(rx.push(&cws[0][12], T0), PacketClass::Redundant);
    assert_eq!(rx.push(&cws[0][12], T0), PacketClass::Duplicate);
    let Some(Output::Data { bytes, offset, sbn }) = rx.poll_output() else {
        panic!("decoded")
    };
    assert_eq!((sbn, offset, &bytes[..]), (0, 0, &data[..]));
    assert!(rx.is_complete());
    let s = rx.stats();
    assert_eq!(s.symbols_repaired, 2);
    assert_eq!(s.packets_valid, 11);
    assert_eq!(s.packets_lost, 2);
    assert_eq!(
        s.packets_missed, 2,
        "ESIs 0 and 5, below the highest seen (12)"
    );
    assert_eq!(s.packets_duplicate, 1);
}

#[test]
fn horizon_declares_loss_without_finish() {
    let data = random_data(4000, 2);
    let p = params(4000, 100, 10, 2); // 4 codewords of 10 source symbols
    let cws = object_packets(&data, &p).unwrap();
    let mut rx = Receiver::new(
        p,
        ReceiverConfig {
            loss_horizon: 1,
            release: Release::Codeword,
            ..ReceiverConfig::default()
        },
    )
    .unwrap();
    // Codeword 0 gets only 9 symbols.
    for pkt in &cws[0][..9] {
        rx.push(pkt, T0);
    }
    for pkt in &cws[1] {
        rx.push(pkt, T0);
    }
    assert_eq!(rx.poll_output(), None, "codeword 0 still has a chance");
    rx.push(&cws[2][0], T0);
    assert_eq!(
        rx.poll_output(),
        Some(Output::Lost {
            sbn: 0,
            offset: 0,
            len: 1000
        })
    );
    assert!(matches!(
        rx.poll_output(),
        Some(Output::Data { sbn: 1, .. })
    ));
    assert_eq!(rx.poll_output(), None);
    // A late symbol of the lost codeword is redundant, never an output.
    assert_eq!(rx.push(&cws[0][9], T0), PacketClass::Redundant);
    assert_eq!(rx.poll_output(), None);
    rx.finish();
    let rest: Vec<_> = std::iter::from_fn(|| rx.poll_output()).collect();
    assert_eq!(rest.len(), 2);
    assert!(rest.iter().all(|o| matches!(o, Output::Lost { .. })));
    assert_eq!(rx.stats().codewords_unrecoverable, vec![0, 2, 3]);
    // Codeword 0: ESI 9 (late, redundant) counts, nothing below it is missing; codeword 2
    // got ESI 0 only; codeword 3 nothing: its 10 source symbols.
    assert_eq!(rx.stats().packets_missed, 10);
}

#[test]
fn classifies_bad_packets() {
    let data = random_data(300, 3);
    let p = params(300, 100, 3, 1);
    let cws = object_packets(&data, &p).unwrap();
    let mut rx = Receiver::new(p.clone(), ReceiverConfig::default()).unwrap();
    assert_eq!(rx.push(&[], T0), PacketClass::Corrupt);
    assert_eq!(rx.push(&[0x10; 40], T0), PacketClass::Corrupt);
    for at in [0, 3, 8, 12, 20, 25, 27, 28, 127] {
        let mut bad = cws[0][0].clone();
        bad[at] ^= 0x40;
        assert_eq!(rx.push(&bad, T0), PacketClass::Corrupt, "flip at {at}");
    }
    assert_eq!(rx.push(&cws[0][0][..60], T0), PacketClass::Corrupt);
    // Valid packets of another session, an SBN past the end, a wrong symbol length.
    let other = params(300, 100, 3, 1);
    let foreign = object_packets(
        &data,
        &SessionParams {
            tsi: 9,
            ..other.clone()
        },
    )
    .unwrap();
    assert_eq!(rx.push(&foreign[0][0], T0), PacketClass::Foreign);
    let id = |sbn, esi| isnode_wire::DataPacketId {
        tsi: p.tsi,
        toi: p.toi,
        sbn,
        esi,
    };
    let mut buf = vec![0u8; 128];
    isnode_wire::seal_data_packet(&mut buf, &id(1, 0)).unwrap();
    assert_eq!(rx.push(&buf, T0), PacketClass::Foreign);
    isnode_wire::seal_data_packet(&mut buf, &id(0, 4)).unwrap();
    assert_eq!(rx.push(&buf, T0), PacketClass::Foreign, "ESI >= n");
    let mut short = vec![0u8; 60];
    isnode_wire::seal_data_packet(&mut short, &id(0, 0)).unwrap();
    assert_eq!(rx.push(&short, T0), PacketClass::Foreign, "wrong E");
    let s = rx.stats();
    assert_eq!((s.packets_corrupt, s.packets_foreign), (12, 4));
    assert_eq!(rx.poll_output(), None);
}

fn fdt_for(p: &SessionParams, transfer_length: u64) -> FdtInstance {
    FdtInstance {
        instance_id: 3,
        expires: 4_000_000_000,
        files: vec![FdtFile {
            toi: p.toi,
            content_location: "movie.ts".into(),
            content_length: transfer_length,
            transfer_length,
            content_type: Some("video/mp2t".into()),
            content_encoding: None,
            fec_oti: Some(p.fec_oti()),
        }],
    }
}

#[test]
fn verifies_the_fdt() {
    let p = params(5000, 64, 10, 4);
    // A matching FDT in 3 packets, out of order, one duplicated.
    let packets = build_fdt_packets(&fdt_for(&p, 5000), p.tsi, 200).unwrap();
    assert!(packets.len() >= 2);
    let mut rx = Receiver::new(p.clone(), ReceiverConfig::default()).unwrap();
    assert_eq!(rx.fdt_check(), &FdtCheck::NotReceived);
    for pkt in packets.iter().rev().chain(packets.iter()) {
        assert_eq!(rx.push(pkt, T0), PacketClass::Fdt);
    }
    assert_eq!(rx.fdt_check(), &FdtCheck::Verified);
    // A contradicting FDT.
    let mut rx = Receiver::new(p.clone(), ReceiverConfig::default()).unwrap();
    for pkt in build_fdt_packets(&fdt_for(&p, 4999), p.tsi, 200).unwrap() {
        rx.push(&pkt, T0);
    }
    assert!(matches!(rx.fdt_check(), FdtCheck::Mismatch(r) if r.contains("Transfer-Length")));
    // A corrupt FDT packet is an erasure, not a mismatch.
    let mut rx = Receiver::new(p.clone(), ReceiverConfig::default()).unwrap();
    let mut bad = packets[0].clone();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    assert_eq!(rx.push(&bad, T0), PacketClass::Corrupt);
    assert_eq!(rx.fdt_check(), &FdtCheck::NotReceived);
    assert!(verify_fdt(b"<nope", &p).is_err());
    let other = SessionParams {
        toi: 8,
        ..p.clone()
    };
    assert!(verify_fdt(fdt_for(&other, 5000).to_xml().as_bytes(), &p)
        .unwrap_err()
        .contains("TOI 7"));
}

#[test]
fn empty_object_and_bad_params() {
    let mut rx = Receiver::new(params(0, 100, 10, 2), ReceiverConfig::default()).unwrap();
    assert!(rx.is_complete());
    assert_eq!(rx.poll_output(), None);
    assert_eq!(rx.output_len(), 0);
    assert!(Receiver::new(params(10, 100, 250, 10), ReceiverConfig::default()).is_err());
    assert!(Receiver::new(params(10, 0, 10, 2), ReceiverConfig::default()).is_err());
    assert!(Receiver::new(params(10, 100, 10, 0), ReceiverConfig::default()).is_err());
    let mut p = params(1000, 100, 5, 1);
    p.start_codeword = 3;
    assert!(Receiver::new(p, ReceiverConfig::default()).is_err());
}

/// Defect 2 of issue 7: one CRC-valid datagram of the session with a far-future SBN (a stray,
/// a replay, a bit of another run) must not make the receiver give up every earlier codeword.
#[test]
fn far_future_packet_does_not_zero_the_output() {
    let data = random_data(40_000, 7);
    let p = params(40_000, 100, 10, 2); // 40 codewords of 10 source symbols
    let cws = object_packets(&data, &p).unwrap();
    let last = cws.len() - 1;
    let mut rx = Receiver::new(p, ReceiverConfig::default()).unwrap();
    // Before the stream: the last codeword's first symbol with forged bytes, twice.
    let mut stray = cws[last][0].clone();
    stray[isnode_wire::DATA_HEADER_LEN] ^= 0xFF;
    isnode_wire::seal_data_packet(
        &mut stray,
        &isnode_wire::DataPacketId {
            tsi: 0xA1B2_C3D4,
            toi: 7,
            sbn: last as u32,
            esi: 0,
        },
    )
    .unwrap();
    let mut seq = vec![stray.clone(), stray];
    seq.extend(cws.iter().flatten().cloned());
    let (out, lost) = run(&mut rx, &seq);
    assert_eq!(lost, vec![], "no codeword given up");
    assert_eq!(out, data);
    assert_eq!(
        rx.stats().packets_foreign,
        2,
        "the strays are counted foreign"
    );
}

/// The other side of the window: a stream that really moved further ahead than the window
/// (an outage) is followed once k distinct symbols of one codeword beyond it are in, while
/// repeats of one stray symbol never are.
#[test]
fn follows_a_stream_that_jumped_past_the_window() {
    let data = random_data(40_000, 8);
    let p = params(40_000, 100, 10, 2); // 40 codewords of 10 source symbols
    let cws = object_packets(&data, &p).unwrap();
    let config = ReceiverConfig::default();
    assert_eq!(config.effective_window_codewords(), 16);
    let mut rx = Receiver::new(p, config).unwrap();
    let mut seq: Vec<Vec<u8>> = cws[0].clone();
    // One symbol far ahead, many times over: a stray, not a stream.
    seq.extend(std::iter::repeat_n(cws[35][0].clone(), 50));
    // The outage: codewords 1..30 never arrive.
    seq.extend(cws[30..].iter().flatten().cloned());
    let (out, lost) = run(&mut rx, &seq);
    let lost: Vec<u32> = lost.iter().map(|l| l.0).collect();
    assert_eq!(
        lost,
        (1..=30).collect::<Vec<_>>(),
        "the codeword that resynchronised is lost too"
    );
    assert_eq!(out[..1000], data[..1000]);
    assert_eq!(out[31_000..], data[31_000..]);
    assert_eq!(rx.stats().codewords_decoded, 10);
}

#[test]
fn window_is_at_least_the_loss_horizon_plus_two() {
    let c = ReceiverConfig {
        loss_horizon: 20,
        window_codewords: 4,
        ..ReceiverConfig::default()
    };
    assert_eq!(c.effective_window_codewords(), 22);
    let c = ReceiverConfig {
        loss_horizon: u32::MAX,
        window_codewords: 4,
        ..ReceiverConfig::default()
    };
    assert_eq!(c.effective_window_codewords(), u32::MAX);
}
