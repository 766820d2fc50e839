//! Interoperability with the `flute` crate, a standard FLUTE implementation:
//!
//! * `flute::receiver::MultiReceiver` reconstructs objects from isnode's FDT and data packets
//!   (source symbols only, in any order, and with losses repaired by repair symbols);
//! * isnode's parser reads every packet `flute::sender::Sender` sends, and its FDT.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use flute::core::UDPEndpoint;
use flute::receiver::writer::ObjectWriterBufferBuilder;
use flute::receiver::MultiReceiver;
use flute::sender;

use isnode_wire::fdt::{build_fdt_packets, reassemble_fdt, FdtFile, FdtInstance, FecOti};
use isnode_wire::partition::Partition;
use isnode_wire::{build_data_packet, parse_packet, CrcStatus, DataPacketId, DATA_HEADER_LEN};

const TSI: u32 = 7;
const TOI: u32 = 1;
/// Seconds between the NTP epoch (1900) and the Unix epoch (1970).
const NTP_UNIX_OFFSET: u64 = 2_208_988_800;

fn object_bytes(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 24) as u8
        })
        .collect()
}

fn ntp_seconds(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_secs() + NTP_UNIX_OFFSET
}

fn fdt_for(name: &str, len: u64, oti: FecOti, now: SystemTime) -> FdtInstance {
    FdtInstance {
        instance_id: 1,
        expires: ntp_seconds(now + Duration::from_secs(3600)),
        files: vec![FdtFile {
            toi: TOI,
            content_location: name.to_string(),
            content_length: len,
            transfer_length: len,
            content_type: Some("video/mp2t".into()),
            content_encoding: None,
            fec_oti: Some(oti),
        }],
    }
}

/// Source symbol `esi` of block `sbn`, zero-padded to E bytes.
fn source_symbol(data: &[u8], part: &Partition, sbn: u32, esi: u32) -> Vec<u8> {
    let e = part.symbol_len as usize;
    let start = (part.first_symbol(sbn) + u64::from(esi)) as usize * e;
    let end = (start + e).min(data.len());
    let mut s = data[start..end].to_vec();
    s.resize(e, 0);
    s
}

/// All data packets of an object as ingest stores them: every block with ESIs
/// 0..k + (max_n - B). Repair symbols come from `repairs` if given, else are zero.
fn all_data_packets(
    data: &[u8],
    oti: &FecOti,
    repairs: &BTreeMap<(u32, u32), Vec<u8>>,
) -> BTreeMap<(u32, u32), Vec<u8>> {
    let part = oti.partition(data.len() as u64).unwrap();
    let e = oti.symbol_len as usize;
    let mut out = BTreeMap::new();
    for sbn in 0..part.blocks() {
        let k = part.source_symbols(sbn);
        for esi in 0..oti.encoding_symbols(k) {
            let mut pkt = vec![0u8; DATA_HEADER_LEN + e];
            let symbol = if esi < k {
                source_symbol(data, &part, sbn, esi)
            } else {
                repairs
                    .get(&(sbn, esi))
                    .cloned()
                    .unwrap_or_else(|| vec![0; e])
            };
            let id = DataPacketId {
                tsi: TSI,
                toi: TOI,
                sbn,
                esi: esi as u8,
            };
            assert_eq!(
                build_data_packet(&mut pkt, &id, &symbol).unwrap(),
                pkt.len()
            );
            out.insert((sbn, esi), pkt);
        }
    }
    out
}

/// Pushes packets into a fresh flute receiver and returns the object it reconstructed.
fn flute_receive<'a>(
    packets: impl IntoIterator<Item = &'a Vec<u8>>,
    now: SystemTime,
) -> (Vec<u8>, String) {
    let writer = Rc::new(ObjectWriterBufferBuilder::new(true));
    let mut receiver = MultiReceiver::new(writer.clone(), None, false);
    let endpoint = UDPEndpoint::new(None, "224.0.0.1".to_owned(), 3000);
    for p in packets {
        receiver
            .push(&endpoint, p, now)
            .expect("flute accepts the packet");
    }
    let objects = writer.objects.borrow();
    assert_eq!(objects.len(), 1, "flute created one object");
    let obj = objects[0].borrow();
    assert!(obj.complete, "flute completed the object");
    assert!(!obj.error, "flute reports no error");
    (obj.data.clone(), obj.meta.content_location.clone())
}

/// Deterministic shuffle (Fisher-Yates with xorshift).
fn shuffle<T>(v: &mut [T], seed: u64) {
    let mut x = seed | 1;
    for i in (1..v.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
}

fn receive_source_only(len: usize, e: u32, b: u32, max_n: u32, name: &str, seed: u64) {
    let now = SystemTime::now();
    let data = object_bytes(len, seed as u32);
    let oti = FecOti::rs28(e, b, max_n).unwrap();
    let fdt = fdt_for(name, len as u64, oti, now);
    let fdt_packets = build_fdt_packets(&fdt, TSI, 1400).unwrap();
    let all = all_data_packets(&data, &oti, &BTreeMap::new());
    let part = oti.partition(len as u64).unwrap();
    assert_eq!(
        all.len() as u64,
        part.total_symbols() + u64::from(part.blocks()) * u64::from(max_n - b)
    );
    // Every stored packet has the same size, and parses back with a valid CRC.
    for p in all.values() {
        assert_eq!(p.len(), DATA_HEADER_LEN + e as usize);
        assert_eq!(parse_packet(p).unwrap().crc, CrcStatus::Valid);
    }
    let mut source: Vec<&Vec<u8>> = all
        .iter()
        .filter(|((sbn, esi), _)| *esi < part.source_symbols(*sbn))
        .map(|(_, p)| p)
        .collect();
    shuffle(&mut source, seed);
    let (got, location) = flute_receive(fdt_packets.iter().chain(source), now);
    assert_eq!(location, name);
    assert_eq!(got.len(), data.len());
    assert!(got == data, "flute reconstructed the object byte for byte");
}

#[test]
fn flute_receives_small_codewords() {
    // E=64, B=8, max_n=12: 4 blocks (7, 7, 6, 6 symbols), last symbol 36 bytes + 28 padding.
    receive_source_only(
        8 * 64 * 3 + 100,
        64,
        8,
        12,
        "clips/Tom & Jerry <\"1\">.ts",
        1,
    );
}

#[test]
fn flute_receives_default_shape() {
    // The isnode default: E=1408, k=223, n=255; two full codewords and a short third one.
    receive_source_only(
        2 * 223 * 1408 + 5000,
        1408,
        223,
        255,
        "movies/feature.ts",
        2,
    );
}

#[test]
fn flute_receives_one_short_block() {
    receive_source_only(1, 1408, 223, 255, "tiny", 3);
}

/// Runs a flute sender on `data` with FEC Encoding ID 5 and returns all its packets.
fn flute_sender_packets(data: &[u8], e: u16, b: u8, m: u8, name: &str) -> Vec<Vec<u8>> {
    let oti = flute::core::Oti::new_reed_solomon_rs28(e, b, m).unwrap();
    let endpoint = UDPEndpoint::new(None, "224.0.0.1".to_owned(), 3000);
    let mut s = sender::Sender::new(endpoint, u64::from(TSI), &oti, &Default::default());
    let url = url_for(name);
    let obj = sender::ObjectDesc::create_from_buffer(
        data.to_vec(),
        "video/mp2t",
        &url,
        false,
        sender::TransferConfig {
            oti: Some(oti.clone()),
            ..Default::default()
        },
    )
    .unwrap();
    s.add_object(0, obj).unwrap();
    s.publish(SystemTime::now()).unwrap();
    let mut out = Vec::new();
    for _ in 0..1_000_000 {
        let now = SystemTime::now();
        match s.read(now) {
            Some(p) => out.push(p),
            None if s.get_objects_in_fdt().is_empty() => break,
            None => {}
        }
    }
    out
}

fn url_for(name: &str) -> url::Url {
    url::Url::parse(&format!("file:///{name}")).unwrap()
}

#[test]
fn flute_repairs_isnode_losses_with_repair_symbols() {
    // Real repair symbols: take them from flute's own RS(GF(2^8)) encoder, wrap them in isnode
    // packets, drop up to m source symbols per block and let flute decode.
    let (e, b, m) = (64u16, 8u8, 4u8);
    let len = 8 * 64 * 3 + 100;
    let data = object_bytes(len, 9);
    let name = "repair/me.ts";
    let mut repairs = BTreeMap::new();
    let oti = FecOti::rs28(u32::from(e), u32::from(b), u32::from(b + m)).unwrap();
    let part = oti.partition(len as u64).unwrap();
    for p in flute_sender_packets(&data, e, b, m, name) {
        let a = parse_packet(&p).unwrap();
        if a.lct.toi == u128::from(TOI) && a.esi >= part.source_symbols(a.sbn) {
            repairs.insert((a.sbn, a.esi), a.payload.to_vec());
        }
    }
    assert_eq!(repairs.len(), part.blocks() as usize * usize::from(m));

    let now = SystemTime::now();
    let fdt = fdt_for(name, len as u64, oti, now);
    let all = all_data_packets(&data, &oti, &repairs);
    let mut kept: Vec<&Vec<u8>> = Vec::new();
    for ((sbn, esi), p) in &all {
        let k = part.source_symbols(*sbn);
        // Lose source symbols 0, 2, 4 (and 6 where k > 6) of every block; send every repair.
        let lost = *esi < k && esi % 2 == 0;
        if !lost {
            kept.push(p);
        }
    }
    let fdt_packets = build_fdt_packets(&fdt, TSI, 1400).unwrap();
    let (got, _) = flute_receive(fdt_packets.iter().chain(kept), now);
    assert!(got == data, "flute decoded isnode packets with losses");
}

#[test]
fn isnode_parses_flute_sender_stream_and_fdt() {
    let (e, b, m) = (1408u16, 223u8, 32u8);
    let len = 223 * 1408 + 777;
    let data = object_bytes(len, 5);
    let name = "movies/a.ts";
    let packets = flute_sender_packets(&data, e, b, m, name);
    let parsed: Vec<_> = packets.iter().map(|p| parse_packet(p).unwrap()).collect();
    assert!(parsed.iter().all(|p| p.crc == CrcStatus::Absent));

    // flute's FDT: Compact No-Code with in-band FTI, as isnode sends it.
    let fdt_id = parsed
        .iter()
        .find_map(|p| p.fdt_instance_id)
        .expect("flute sends an FDT");
    let xml = reassemble_fdt(&parsed, fdt_id).expect("whole FDT received");
    let fdt = FdtInstance::from_xml(&xml).unwrap();
    let file = fdt.files.iter().find(|f| f.toi == TOI).unwrap();
    assert_eq!(file.content_location, format!("file:///{name}"));
    assert_eq!(file.transfer_length, len as u64);
    assert_eq!(file.content_type.as_deref(), Some("video/mp2t"));
    let oti = file.fec_oti.unwrap();
    assert_eq!(oti, FecOti::rs28(1408, 223, 255).unwrap());

    // flute's data packets carry the same symbols as isnode's (up to the padding of the
    // last one), with the same partitioning and FEC Payload IDs.
    let part = oti.partition(len as u64).unwrap();
    let mut seen = 0;
    for a in parsed.iter().filter(|a| a.lct.toi == u128::from(TOI)) {
        assert_eq!(a.lct.codepoint, 5);
        let fti = a.fti.expect("flute sends EXT_FTI in-band");
        assert_eq!(fti.transfer_length, len as u64);
        assert_eq!(fti.oti, oti);
        let k = part.source_symbols(a.sbn);
        assert!(a.esi < oti.encoding_symbols(k), "ESI within k + max_n - B");
        if a.esi < k {
            let ours = source_symbol(&data, &part, a.sbn, a.esi);
            assert_eq!(&ours[..a.payload.len()], a.payload);
            assert!(ours[a.payload.len()..].iter().all(|&z| z == 0));
            seen += 1;
        }
    }
    assert_eq!(seen, part.total_symbols());
}
