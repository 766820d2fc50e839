//! Property tests of data packets: round trips, corruption detection, robustness.

use isnode_wire::{
    build_data_packet, internet_checksum_partial, parse_data_packet, parse_packet,
    seal_data_packet, CrcStatus, DataPacketId, DATA_HEADER_LEN, MAX_SBN,
};
use proptest::prelude::*;

fn arb_id() -> impl Strategy<Value = DataPacketId> {
    (any::<u32>(), 1..=u32::MAX, 0..=MAX_SBN, any::<u8>())
        .prop_map(|(tsi, toi, sbn, esi)| DataPacketId { tsi, toi, sbn, esi })
}

fn arb_symbol() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 1..300)
}

fn sealed(id: &DataPacketId, symbol: &[u8]) -> Vec<u8> {
    let mut p = vec![0u8; DATA_HEADER_LEN + symbol.len()];
    p[DATA_HEADER_LEN..].copy_from_slice(symbol);
    seal_data_packet(&mut p, id).unwrap();
    p
}

proptest! {
    #[test]
    fn seal_and_build_round_trip(id in arb_id(), symbol in arb_symbol()) {
        let p = sealed(&id, &symbol);
        let mut q = vec![0xEEu8; DATA_HEADER_LEN + symbol.len() + 7];
        let n = build_data_packet(&mut q, &id, &symbol).unwrap();
        prop_assert_eq!(&q[..n], &p[..]);
        let d = parse_data_packet(&p).unwrap();
        prop_assert_eq!(d.id, id);
        prop_assert_eq!(d.symbol, &symbol[..]);
        let a = parse_packet(&p).unwrap();
        prop_assert_eq!(a.data_id(), Some(id));
        prop_assert_eq!(a.crc, CrcStatus::Valid);
        prop_assert_eq!(a.payload, &symbol[..]);
        prop_assert_eq!(a.lct.codepoint, 5);
        prop_assert_eq!(a.lct.header_len, 24);
        prop_assert!(!a.lct.close_object && !a.lct.close_session && !a.dataless);
        prop_assert_eq!(a.fti, None);
        prop_assert_eq!(a.fdt_instance_id, None);
    }

    #[test]
    fn any_single_bit_flip_is_detected(id in arb_id(), symbol in arb_symbol(), bit in any::<prop::sample::Index>()) {
        let mut p = sealed(&id, &symbol);
        let bit = bit.index(p.len() * 8);
        p[bit / 8] ^= 1 << (bit % 8);
        // The strict receive check rejects every flip: the CRC covers every byte but its
        // own field, which the comparison covers.
        prop_assert!(parse_data_packet(&p).is_err(), "bit {} flipped", bit);
        // The general parser never reports a valid CRC for it. It may report Absent: a flip
        // of S, O, H, C or HDR_LEN or of the HET moves or hides EXT_CRC.
        match parse_packet(&p) {
            Err(_) => {}
            Ok(a) => prop_assert!(a.crc != CrcStatus::Valid, "bit {} flipped, parsed as {:?}", bit, a),
        }
        if !(0..24).contains(&bit) && !(16 * 8..18 * 8).contains(&bit) {
            // Outside the first LCT word and the EXT_CRC HET/HEL, the header keeps its
            // layout and the general parser reports the corruption itself.
            if let Ok(a) = parse_packet(&p) {
                prop_assert_eq!(a.crc, CrcStatus::Invalid, "bit {}", bit);
            }
        }
    }

    #[test]
    fn parse_never_panics_on_random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = parse_packet(&bytes);
        let _ = parse_data_packet(&bytes);
    }

    #[test]
    fn parse_never_panics_on_lct_like_bytes(
        first in 0x10u8..0x20, second in any::<u8>(), hdr_len in any::<u8>(), cp in prop_oneof![Just(0u8), Just(5u8), any::<u8>()],
        rest in proptest::collection::vec(any::<u8>(), 0..120),
    ) {
        let mut b = vec![first, second, hdr_len, cp];
        b.extend(rest);
        let _ = parse_packet(&b);
    }

    #[test]
    fn parse_never_panics_on_mutated_packets(
        id in arb_id(), symbol in arb_symbol(),
        muts in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut p = sealed(&id, &symbol);
        for (i, v) in muts {
            let i = i.index(p.len());
            p[i] = v;
        }
        let c = cut.index(p.len() + 1);
        let _ = parse_packet(&p[..c]);
        let _ = parse_packet(&p);
        let _ = parse_data_packet(&p[..c]);
        let _ = parse_data_packet(&p);
    }

    #[test]
    fn checksum_is_ones_complement_sum(bytes in proptest::collection::vec(any::<u8>(), 0..300), split in any::<prop::sample::Index>()) {
        // One's-complement addition is associative: the sum of two even-length halves,
        // folded, equals the sum of the whole.
        let s = split.index(bytes.len() + 1) & !1;
        let (a, b) = bytes.split_at(s);
        let sum = u32::from(internet_checksum_partial(a)) + u32::from(internet_checksum_partial(b));
        let folded = ((sum & 0xFFFF) + (sum >> 16)) as u16;
        let whole = internet_checksum_partial(&bytes);
        // 0x0000 and 0xFFFF are both zero in one's complement.
        prop_assert!(folded == whole || (folded == 0xFFFF && whole == 0) || (folded == 0 && whole == 0xFFFF));
    }
}

#[test]
fn crc_field_flip_is_invalid() {
    let id = DataPacketId {
        tsi: 1,
        toi: 2,
        sbn: 3,
        esi: 4,
    };
    for bit in 20 * 8..24 * 8 {
        let mut p = sealed(&id, &[7; 64]);
        p[bit / 8] ^= 1 << (bit % 8);
        assert_eq!(parse_packet(&p).unwrap().crc, CrcStatus::Invalid);
        assert!(matches!(
            parse_data_packet(&p),
            Err(isnode_wire::WireError::CrcMismatch { .. })
        ));
    }
}

#[test]
fn default_packet_is_1436_bytes() {
    let id = DataPacketId {
        tsi: 1,
        toi: 1,
        sbn: 0,
        esi: 0,
    };
    assert_eq!(sealed(&id, &[0; 1408]).len(), 1436);
}
