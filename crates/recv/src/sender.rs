//! Builds the packets of an object the way isnode's ingest does, for tests and demos that
//! need a stream without a server: RFC 5052 partitioning, RFC 5510 encoding, sealed
//! isnode data packets (28-byte header + E-byte symbol).

use isnode_fec::Code;
use isnode_wire::partition::Partition;
use isnode_wire::{build_data_packet, DataPacketId, DATA_HEADER_LEN};

use crate::receiver::SessionParams;

/// The packets of every codeword of `data` under `params` (from codeword 0, whatever
/// `params.start_codeword` says): `result[sbn][esi]`, k source packets then m repair packets.
pub fn object_packets(data: &[u8], params: &SessionParams) -> anyhow::Result<Vec<Vec<Vec<u8>>>> {
    anyhow::ensure!(
        data.len() as u64 == params.transfer_length,
        "data length {} differs from the transfer length {}",
        data.len(),
        params.transfer_length
    );
    let e = params.symbol_len as usize;
    let m = params.repair_symbols as usize;
    let part = Partition::new(
        params.transfer_length,
        params.symbol_len,
        params.max_source_block_len,
    )?;
    let mut out = Vec::with_capacity(part.blocks() as usize);
    for sbn in 0..part.blocks() {
        let k = part.source_symbols(sbn) as usize;
        let start = part.block_offset(sbn) as usize;
        let bytes = &data[start..start + part.block_bytes(sbn) as usize];
        let mut symbols = vec![vec![0u8; e]; k + m];
        for (i, chunk) in bytes.chunks(e).enumerate() {
            symbols[i][..chunk.len()].copy_from_slice(chunk);
        }
        let (source, repair) = symbols.split_at_mut(k);
        let source: Vec<&[u8]> = source.iter().map(|s| &s[..]).collect();
        let mut repair: Vec<&mut [u8]> = repair.iter_mut().map(|s| &mut s[..]).collect();
        Code::new(k, k + m)?.encode(&source, &mut repair)?;
        let mut packets = Vec::with_capacity(k + m);
        for (esi, symbol) in symbols.iter().enumerate() {
            let mut packet = vec![0u8; DATA_HEADER_LEN + e];
            let id = DataPacketId {
                tsi: params.tsi,
                toi: params.toi,
                sbn,
                esi: u8::try_from(esi)?,
            };
            build_data_packet(&mut packet, &id, symbol)?;
            packets.push(packet);
        }
        out.push(packets);
    }
    Ok(out)
}
