//! A standard FLUTE receiver (the `flute` crate) reconstructs objects from the
//! packets isnode stores, repairing losses with isnode's own repair symbols.

use std::rc::Rc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use flute::core::UDPEndpoint;
use flute::receiver::writer::ObjectWriterBufferBuilder;
use flute::receiver::MultiReceiver;
use isnode_store::io::{AlignedBuf, BlockFile};
use isnode_store::{IngestOptions, Layout, Volume, VolumeParams};
use isnode_wire::fdt::{build_fdt_packets, FdtFile, FdtInstance, FecOti};

fn data(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 32) as u8
        })
        .collect()
}

/// Every stored packet of object `name`, by codeword, in ESI order, read straight from the segment files.
fn stored_packets(vol: &Volume, name: &str) -> Vec<Vec<Vec<u8>>> {
    let rec = vol.object(name).unwrap();
    let layout = Layout::new(*vol.params(), rec.size_bytes).unwrap();
    let p = *vol.params();
    let mut buf = AlignedBuf::new(p.block_len as usize);
    let mut out = Vec::new();
    for sbn in 0..layout.codewords() {
        let mut cw = Vec::new();
        for member in 0..p.members {
            let run = layout.member_run(sbn, member);
            let file = BlockFile::open_read(&vol.segment_path(member, rec.toi)).unwrap();
            for (i, _esi) in run.esis.clone().enumerate() {
                let (block, off) = layout.packet_position(run.first_packet + i as u64);
                file.read_block(&mut buf, block * u64::from(p.block_len))
                    .unwrap();
                cw.push(buf.as_slice()[off..off + p.packet_len() as usize].to_vec());
            }
        }
        out.push(cw);
    }
    out
}

fn check_flute_receives(params: VolumeParams, len: usize, drop_per_codeword: usize, seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let mut vol = Volume::create(dir.path(), params, None).unwrap();
    let bytes = data(len, seed);
    let opts = IngestOptions {
        name: "movie.ts".into(),
        bitrate_bps: 1_000_000,
        content_type: "video/mp2t".into(),
        replace: false,
    };
    let rec =
        isnode_store::ingest(&mut vol, &opts, &mut &bytes[..], len as u64, &mut |_| {}).unwrap();

    let now = SystemTime::now();
    let expires = (now + Duration::from_secs(3600))
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 2_208_988_800;
    let oti = FecOti::rs28(
        params.symbol_len,
        params.source_symbols,
        params.source_symbols + params.repair_symbols,
    )
    .unwrap();
    let fdt = FdtInstance {
        instance_id: 1,
        expires,
        files: vec![FdtFile {
            toi: rec.toi,
            content_location: rec.name.clone(),
            content_length: rec.size_bytes,
            transfer_length: rec.size_bytes,
            content_type: Some(rec.content_type.clone()),
            content_encoding: None,
            fec_oti: Some(oti),
        }],
    };
    let mut packets = build_fdt_packets(&fdt, vol.tsi(), 1400).unwrap();
    let mut x = seed | 1;
    for mut cw in stored_packets(&vol, "movie.ts") {
        // Lose `drop_per_codeword` packets at random positions, source ones included.
        for _ in 0..drop_per_codeword.min(cw.len()) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let i = (x % cw.len() as u64) as usize;
            cw.remove(i);
        }
        packets.extend(cw);
    }
    let writer = Rc::new(ObjectWriterBufferBuilder::new(true));
    let mut receiver = MultiReceiver::new(writer.clone(), None, false);
    let endpoint = UDPEndpoint::new(None, "127.0.0.1".to_owned(), 3000);
    for p in &packets {
        receiver
            .push(&endpoint, p, now)
            .expect("flute accepts isnode packets");
    }
    let objects = writer.objects.borrow();
    assert_eq!(objects.len(), 1);
    let obj = objects[0].borrow();
    assert!(obj.complete && !obj.error, "flute completed the object");
    assert_eq!(obj.meta.content_location, "movie.ts");
    assert!(
        obj.data == bytes,
        "flute reconstructed the object byte for byte"
    );
}

#[test]
fn flute_decodes_isnode_parity_default_shape() {
    // 3 codewords and a bit: RFC 5052 partitioning gives 4 codewords of ~168 source symbols,
    // each with 32 repair symbols; lose 32 packets of each.
    check_flute_receives(VolumeParams::default(), 1408 * 223 * 3 + 1000, 32, 5);
}

#[test]
fn flute_decodes_isnode_parity_small_shape() {
    let p = VolumeParams {
        symbol_len: 64,
        source_symbols: 20,
        repair_symbols: 4,
        members: 6,
        block_len: 4096,
    };
    for (len, seed) in [(1usize, 1u64), (64 * 20, 2), (64 * 20 * 7 + 33, 3)] {
        check_flute_receives(p, len, 4, seed);
    }
}
