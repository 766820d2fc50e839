//! Fuzz the reading back of segment-file packets: a real codeword's stored packets are
//! damaged as the input says (lost, bytes flipped, replaced by other bytes, cut short) and
//! offered to the store's assembler, as `volume cat`, `check` and the server's degraded
//! path do. It must never panic; a damaged packet is never taken as good; and while at
//! most m symbols are bad the codeword is rebuilt byte for byte.
#![no_main]

use isnode_fec::Code;
use isnode_store::codeword::{Assembler, SymbolCheck, Want};
use isnode_store::{Layout, VolumeParams};
use isnode_wire::{build_data_packet, DataPacketId, DATA_HEADER_LEN};
use libfuzzer_sys::fuzz_target;

const E: usize = 64;
const PARAMS: VolumeParams = VolumeParams {
    symbol_len: E as u32,
    source_symbols: 8,
    repair_symbols: 4,
    members: 6,
    block_len: 4096,
};

fuzz_target!(|data: &[u8]| {
    let Some((&seed, mut rest)) = data.split_first() else {
        return;
    };
    let k = PARAMS.source_symbols as usize;
    let n = k + PARAMS.repair_symbols as usize;
    let layout = Layout::new(PARAMS, (k * E) as u64).expect("layout");
    assert_eq!(layout.encoding_symbols(0) as usize, n);
    let source: Vec<Vec<u8>> = (0..k)
        .map(|i| {
            (0..E)
                .map(|j| seed.wrapping_mul(31).wrapping_add((i * E + j) as u8))
                .collect()
        })
        .collect();
    let mut repair = vec![vec![0u8; E]; n - k];
    let code = Code::new(k, n).expect("code");
    {
        let src: Vec<&[u8]> = source.iter().map(Vec::as_slice).collect();
        let mut rep: Vec<&mut [u8]> = repair.iter_mut().map(Vec::as_mut_slice).collect();
        code.encode(&src, &mut rep).expect("encode");
    }
    let symbols: Vec<&Vec<u8>> = source.iter().chain(&repair).collect();
    let mut asm = Assembler::new(E, n);
    asm.begin(&layout, 0);
    let mut damaged = 0;
    for (esi, symbol) in symbols.iter().enumerate() {
        let id = DataPacketId {
            tsi: 7,
            toi: 3,
            sbn: 0,
            esi: esi as u8,
        };
        let mut packet = vec![0u8; DATA_HEADER_LEN + E];
        let len = build_data_packet(&mut packet, &id, symbol).expect("build");
        packet.truncate(len);
        let (&action, tail) = rest.split_first().unwrap_or((&0, &[]));
        rest = tail;
        let offered: Option<Vec<u8>> = match action % 5 {
            0 | 1 => Some(packet.clone()),
            2 => None,
            3 => {
                let mut flipped = packet.clone();
                let at = usize::from(action) * 7 % flipped.len();
                flipped[at] ^= 1 << (action % 8);
                Some(flipped)
            }
            _ => {
                let take = usize::from(action >> 3).min(rest.len());
                let (junk, tail) = rest.split_at(take);
                rest = tail;
                Some(junk.to_vec())
            }
        };
        let intact = offered.as_deref() == Some(packet.as_slice());
        damaged += usize::from(!intact);
        asm.offer(esi as u32, offered.as_deref(), &id);
        let check = asm.checks()[esi];
        assert_eq!(
            check == SymbolCheck::Good,
            intact,
            "symbol {esi}: {check:?}"
        );
    }
    let rebuilt = asm.rebuild(Want::All);
    if damaged <= n - k {
        rebuilt.expect("at most m symbols lost: the codeword rebuilds");
        for (esi, symbol) in symbols.iter().enumerate() {
            assert_eq!(asm.symbol(esi as u32), symbol.as_slice(), "symbol {esi}");
        }
    } else {
        assert!(rebuilt.is_err(), "{damaged} of {n} lost, yet rebuilt");
    }
});
