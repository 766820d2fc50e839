//! Fuzz the receive core with sequences of packets: real packets of a small object in any
//! order, forged but CRC-valid packets (any SBN/ESI, this or another session), raw bytes,
//! FDT packets, polls and the end of the stream. It must never panic, the output must be
//! in order and cover the stream exactly, and without forged symbols of the session every
//! decoded codeword must be the object's bytes.
#![no_main]

use std::time::Duration;

use isnode_recv::receiver::{Output, Receiver, ReceiverConfig, Release, SessionParams};
use isnode_recv::sender::object_packets;
use isnode_wire::fdt::{build_fdt_packets, FdtFile, FdtInstance};
use isnode_wire::{seal_data_packet, DataPacketId, DATA_HEADER_LEN};
use libfuzzer_sys::fuzz_target;

/// Reads the fuzz input front to back; zeros once it is used up.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        let Some((&b, rest)) = self.0.split_first() else {
            return 0;
        };
        self.0 = rest;
        b
    }

    fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.byte(), self.byte()])
    }

    fn bytes(&mut self, len: usize) -> &[u8] {
        let (now, rest) = self.0.split_at(len.min(self.0.len()));
        self.0 = rest;
        now
    }
}

/// The output so far: checks order and contiguity, keeps what was decoded.
struct Sink {
    next: u64,
    decoded: Vec<(u64, Vec<u8>)>,
}

impl Sink {
    fn drain(&mut self, rx: &mut Receiver) {
        while let Some(o) = rx.poll_output() {
            assert_eq!(o.offset(), self.next, "in order, contiguous");
            assert!(!o.is_empty());
            self.next += o.len();
            if let Output::Data { offset, bytes, .. } = o {
                self.decoded.push((offset, bytes));
            }
        }
    }
}

fn params(input: &mut Input<'_>) -> SessionParams {
    SessionParams {
        tsi: 0x5EED,
        toi: 1,
        transfer_length: u64::from(input.u16() % 3000),
        symbol_len: 1 + u32::from(input.byte() % 24),
        max_source_block_len: 1 + u32::from(input.byte() % 12),
        repair_symbols: 1 + u32::from(input.byte() % 5),
        start_codeword: u32::from(input.byte() % 3),
    }
}

fn fdt_packets(p: &SessionParams) -> Vec<Vec<u8>> {
    let fdt = FdtInstance {
        instance_id: 2,
        expires: 1,
        files: vec![FdtFile {
            toi: p.toi,
            content_location: "f".into(),
            content_length: p.transfer_length,
            transfer_length: p.transfer_length,
            content_type: None,
            content_encoding: None,
            fec_oti: Some(p.fec_oti()),
        }],
    };
    build_fdt_packets(&fdt, p.tsi, 64).unwrap_or_default()
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let p = params(&mut input);
    let config = ReceiverConfig {
        loss_horizon: u32::from(input.byte() % 4),
        window_codewords: u32::from(input.byte() % 8),
        release: if input.byte() & 1 == 0 {
            Release::Instant
        } else {
            Release::Codeword
        },
    };
    let Ok(mut rx) = Receiver::new(p.clone(), config) else {
        return;
    };
    let object: Vec<u8> = (0..p.transfer_length)
        .map(|i| (i * 31 % 251) as u8)
        .collect();
    let cws = object_packets(&object, &p).expect("valid parameters give packets");
    let fdt = fdt_packets(&p);
    let mut sink = Sink {
        next: rx.output_start(),
        decoded: Vec::new(),
    };
    let mut forged = false;
    let mut now = Duration::ZERO;
    for _ in 0..2000 {
        if input.0.is_empty() {
            break;
        }
        now += Duration::from_millis(1);
        match input.byte() % 6 {
            0 if !cws.is_empty() => {
                let cw = &cws[usize::from(input.u16()) % cws.len()];
                let packet = &cw[usize::from(input.byte()) % cw.len()];
                rx.push(packet, now);
            }
            1 => {
                let sbn = u32::from(input.u16()) << 8 | u32::from(input.byte());
                let esi = input.byte();
                let other = input.byte();
                let len = DATA_HEADER_LEN
                    + if other & 1 == 0 {
                        p.symbol_len as usize
                    } else {
                        1 + usize::from(other >> 1)
                    };
                let tsi = if other & 2 == 0 { p.tsi } else { p.tsi ^ 1 };
                forged |= tsi == p.tsi;
                let mut packet = vec![other; len];
                let id = DataPacketId {
                    tsi,
                    toi: p.toi,
                    sbn: sbn & 0xFF_FFFF,
                    esi,
                };
                if seal_data_packet(&mut packet, &id).is_ok() {
                    rx.push(&packet, now);
                }
            }
            2 => {
                // The fuzzer can solve the CRC comparison: raw bytes may be forgeries too.
                forged = true;
                let len = usize::from(input.byte());
                let raw = input.bytes(len).to_vec();
                rx.push(&raw, now);
            }
            3 if !fdt.is_empty() => {
                rx.push(&fdt[usize::from(input.byte()) % fdt.len()], now);
            }
            4 => sink.drain(&mut rx),
            _ => rx.finish(),
        }
        sink.drain(&mut rx);
    }
    rx.finish();
    sink.drain(&mut rx);
    assert!(rx.is_complete());
    assert_eq!(sink.next, p.transfer_length, "the output covers the stream");
    let s = rx.stats();
    assert_eq!(
        s.codewords_decoded as usize + s.codewords_unrecoverable.len(),
        s.codewords_total as usize
    );
    assert_eq!(s.bytes_recovered + s.bytes_lost, rx.output_len());
    if !forged {
        for (offset, bytes) in &sink.decoded {
            let at = *offset as usize;
            assert_eq!(
                &object[at..at + bytes.len()],
                &bytes[..],
                "decoded codeword at {at}"
            );
        }
    }
});
