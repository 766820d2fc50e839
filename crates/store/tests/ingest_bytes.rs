//! Ingest writes exactly the bytes the format prescribes (docs/format.md), whatever its
//! inner pipeline: every segment file, every packet digest row and every block checksum
//! equals those of a plain reference prefabrication written here one codeword at a time
//! (the single-threaded algorithm ingest used before its codewords were encoded in
//! parallel), for the same input and the volume's TSI. Shapes with many codewords per
//! block, blocks spanning many codewords, a short last codeword and a short last block.

use isnode_fec::Code;
use isnode_store::{IngestOptions, Layout, Volume, VolumeParams};
use isnode_wire::digest::{packet_digest, DIGEST_LEN};
use isnode_wire::DataPacketId;

/// The segment files, digest rows and block CRC32Cs of an object, as the reference makes them.
struct Expected {
    segments: Vec<Vec<u8>>,
    digests: Vec<(u32, Vec<u8>)>,
    block_crcs: Vec<Vec<u32>>,
}

/// Prefabricates `data` the plain way: encode, frame, lay out, pad blocks with zeros.
fn reference(params: VolumeParams, data: &[u8], tsi: u32, toi: u32) -> Expected {
    let layout = Layout::new(params, data.len() as u64).unwrap();
    let e = params.symbol_len as usize;
    let m = params.repair_symbols as usize;
    let plen = params.packet_len() as usize;
    let block_len = params.block_len as usize;
    let per_block = params.packets_per_block() as usize;
    let mut packets: Vec<Vec<Vec<u8>>> = vec![Vec::new(); params.members as usize];
    let mut digests = Vec::new();
    let mut at = 0usize;
    for sbn in 0..layout.codewords() {
        let k = layout.source_symbols(sbn) as usize;
        let len = layout.codeword_data_len(sbn) as usize;
        let mut source = vec![0u8; k * e];
        source[..len].copy_from_slice(&data[at..at + len]);
        at += len;
        let mut repair = vec![0u8; m * e];
        let code = Code::new(k, k + m).unwrap();
        let src: Vec<&[u8]> = source.chunks_exact(e).collect();
        let mut rep: Vec<&mut [u8]> = repair.chunks_exact_mut(e).collect();
        code.encode(&src, &mut rep).unwrap();
        let mut row = vec![0u8; (k + m) * DIGEST_LEN];
        for member in 0..params.members {
            for esi in layout.member_run(sbn, member).esis {
                let i = esi as usize;
                let symbol = match i < k {
                    true => &source[i * e..(i + 1) * e],
                    false => &repair[(i - k) * e..(i - k + 1) * e],
                };
                let id = DataPacketId {
                    tsi,
                    toi,
                    sbn,
                    esi: esi as u8,
                };
                let mut p = vec![0u8; plen];
                isnode_wire::build_data_packet(&mut p, &id, symbol).unwrap();
                row[i * DIGEST_LEN..(i + 1) * DIGEST_LEN].copy_from_slice(&packet_digest(&p));
                packets[member as usize].push(p);
            }
        }
        digests.push((sbn, row));
    }
    let mut segments = Vec::new();
    let mut block_crcs = Vec::new();
    for list in &packets {
        let mut seg = Vec::new();
        let mut crcs = Vec::new();
        for chunk in list.chunks(per_block) {
            let mut block = vec![0u8; block_len];
            for (q, p) in chunk.iter().enumerate() {
                block[q * plen..(q + 1) * plen].copy_from_slice(p);
            }
            crcs.push(crc32c::crc32c(&block));
            seg.extend_from_slice(&block);
        }
        segments.push(seg);
        block_crcs.push(crcs);
    }
    Expected {
        segments,
        digests,
        block_crcs,
    }
}

/// Ingests `len` bytes with `params` and compares everything stored with the reference.
fn ingest_matches_reference(params: VolumeParams, len: usize) {
    let dir = tempfile::tempdir().unwrap();
    let mut vol = Volume::create(&dir.path().join("vol"), params, None).unwrap();
    let data: Vec<u8> = (0..len)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let opts = IngestOptions {
        name: "pinned.ts".into(),
        bitrate_bps: 1_000_000,
        content_type: "video/mp2t".into(),
        replace: false,
    };
    // Small reads, as a pipe or a socket gives them.
    let mut src = SmallReads(data.as_slice());
    let rec = isnode_store::ingest(&mut vol, &opts, &mut src, len as u64, &mut |_| {}).unwrap();
    assert_eq!(rec.content_crc32c, crc32c::crc32c(&data));
    let want = reference(params, &data, vol.tsi(), rec.toi);
    for (m, seg) in want.segments.iter().enumerate() {
        let got = std::fs::read(vol.segment_path(m as u32, rec.toi)).unwrap();
        assert_eq!(got.len(), seg.len(), "member {m}: segment length");
        if let Some(at) = got.iter().zip(seg).position(|(a, b)| a != b) {
            panic!("member {m}: segment differs first at byte {at}");
        }
    }
    let codewords = rec.codewords;
    let digests = vol.catalog().digests(rec.toi, 0, codewords).unwrap();
    assert_eq!(digests, want.digests, "packet digest rows");
    let rows = vol.catalog().all_block_rows(rec.toi, u64::MAX).unwrap();
    let layout = Layout::new(params, len as u64).unwrap();
    let blocks = isnode_store::rows::validate_all_blocks(&layout, &rows).unwrap();
    for (m, member) in blocks.iter().enumerate() {
        let crcs: Vec<u32> = member.iter().map(|b| b.crc32c).collect();
        assert_eq!(crcs, want.block_crcs[m], "member {m}: block CRC32Cs");
    }
}

/// A reader giving at most 1000 bytes per call.
struct SmallReads<'a>(&'a [u8]);

impl std::io::Read for SmallReads<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(1000).min(self.0.len());
        buf[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Ok(n)
    }
}

#[test]
fn many_codewords_per_block_and_a_short_last_codeword() {
    let params = VolumeParams {
        symbol_len: 64,
        source_symbols: 20,
        repair_symbols: 4,
        members: 6,
        block_len: 4096,
    };
    ingest_matches_reference(params, 300 * 64 * 20 + 777);
}

#[test]
fn default_shape_several_blocks_per_member() {
    // 64 KiB blocks of 1436-byte packets (45 a block), 223 + 32 symbols over 8 members:
    // a member's run of a codeword (32 packets) spans block boundaries.
    ingest_matches_reference(VolumeParams::default(), 3 * 223 * 1408 * 12 + 5);
}

#[test]
fn one_mib_blocks_span_many_codewords() {
    // The default before 64 KiB (volumes made then keep it): 730 packets a block, about 22
    // codewords of one member's runs in each.
    let params = VolumeParams {
        block_len: 1 << 20,
        ..VolumeParams::default()
    };
    ingest_matches_reference(params, 3 * 223 * 1408 * 12 + 5);
}

#[test]
fn one_byte_and_exactly_one_codeword() {
    let params = VolumeParams {
        symbol_len: 128,
        source_symbols: 12,
        repair_symbols: 4,
        members: 4,
        block_len: 8192,
    };
    ingest_matches_reference(params, 1);
    ingest_matches_reference(params, 12 * 128);
}
