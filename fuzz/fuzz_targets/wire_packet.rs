//! Fuzz the ALC/LCT packet parsers: `parse_packet` and `parse_data_packet` must never panic;
//! a packet that parses as an isnode data packet must survive a reseal and re-parse.
#![no_main]

use isnode_wire::{
    internet_checksum_partial, parse_data_packet, parse_packet, seal_data_packet, CrcStatus,
    DATA_HEADER_LEN,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = internet_checksum_partial(data);
    let strict = parse_data_packet(data);
    let parsed = parse_packet(data);
    if let Ok(d) = &strict {
        // The strict check implies the general parser agrees.
        let a = parsed.as_ref().expect("a strict data packet parses");
        assert_eq!(a.crc, CrcStatus::Valid);
        assert_eq!(a.data_id(), Some(d.id));
        assert_eq!(a.payload, d.symbol);
    }
    let Ok(a) = parsed else { return };
    let Some(id) = a.data_id() else { return };
    if a.lct.header_len + 4 != DATA_HEADER_LEN || a.payload.is_empty() {
        return;
    }
    // Reseal a copy as an isnode data packet and parse it back.
    let mut copy = data.to_vec();
    if seal_data_packet(&mut copy, &id).is_ok() {
        let d = parse_data_packet(&copy).expect("a resealed packet parses");
        assert_eq!(d.id, id);
        assert_eq!(d.symbol, &data[DATA_HEADER_LEN..]);
        let b = parse_packet(&copy).expect("a resealed packet parses");
        assert_eq!(b.crc, CrcStatus::Valid);
        assert_eq!(b.data_id(), Some(id));
    }
});
