//! Generated MPEG-TS: structure checked by an independent parser, and probe round trips.

use std::collections::HashMap;

use isnode_media::ts::PCR_MODULUS;
use isnode_media::{
    generate_ts, generate_ts_with_first_pcr, probe, probe_ts, BitrateUnknown, Container,
    MediaError, TsGenConfig, DEFAULT_FIRST_PCR, PROBE_WINDOW,
};

const PKT: usize = 188;

fn gen(bitrate_bps: u64, duration_s: f64, seed: u64) -> Vec<u8> {
    let cfg = TsGenConfig {
        bitrate_bps,
        duration_s,
        seed,
    };
    let mut out = Vec::new();
    let n = generate_ts(&cfg, &mut out).expect("generate");
    assert_eq!(n, out.len() as u64);
    assert_eq!(n, cfg.byte_len().unwrap());
    out
}

/// Bitwise CRC-32/MPEG-2, independent of the crate's table-driven one.
fn crc_bitwise(data: &[u8]) -> u32 {
    let mut crc = 0xFFFF_FFFFu32;
    for &byte in data {
        for i in (0..8).rev() {
            let bit = (byte >> i) & 1;
            let top = (crc >> 31) as u8;
            crc <<= 1;
            if top ^ bit == 1 {
                crc ^= 0x04C1_1DB7;
            }
        }
    }
    crc
}

struct Pkt<'a> {
    offset: usize,
    pid: u16,
    pusi: bool,
    afc: u8,
    cc: u8,
    pcr: Option<u64>,
    payload: &'a [u8],
}

fn parse(ts: &[u8]) -> Vec<Pkt<'_>> {
    assert_eq!(ts.len() % PKT, 0);
    ts.chunks(PKT)
        .enumerate()
        .map(|(i, p)| {
            assert_eq!(p[0], 0x47, "sync byte of packet {i}");
            let afc = (p[3] >> 4) & 3;
            assert_ne!(afc, 0, "reserved adaptation_field_control in packet {i}");
            let mut payload_start = 4;
            let mut pcr = None;
            if afc & 2 != 0 {
                let len = p[4] as usize;
                assert!(len <= 183);
                if afc == 2 {
                    assert_eq!(len, 183, "AF-only packet must have a 183-byte AF");
                }
                if len > 0 && p[5] & 0x10 != 0 {
                    let base = ((p[6] as u64) << 25)
                        | ((p[7] as u64) << 17)
                        | ((p[8] as u64) << 9)
                        | ((p[9] as u64) << 1)
                        | ((p[10] as u64) >> 7);
                    let ext = (((p[10] & 1) as u64) << 8) | p[11] as u64;
                    assert!(ext < 300);
                    pcr = Some(base * 300 + ext);
                }
                payload_start = 5 + len;
            }
            Pkt {
                offset: i * PKT,
                pid: ((p[1] as u16 & 0x1F) << 8) | p[2] as u16,
                pusi: p[1] & 0x40 != 0,
                afc,
                cc: p[3] & 0x0F,
                pcr,
                payload: if afc & 1 != 0 {
                    &p[payload_start..]
                } else {
                    &[]
                },
            }
        })
        .collect()
}

/// The section in a PSI packet (pointer_field 0), checked with the independent CRC.
fn section(p: &Pkt) -> Vec<u8> {
    assert!(p.pusi);
    assert_eq!(p.payload[0], 0, "pointer_field");
    let s = &p.payload[1..];
    let len = (((s[1] & 0x0F) as usize) << 8) | s[2] as usize;
    let s = s[..3 + len].to_vec();
    assert_eq!(crc_bitwise(&s), 0, "CRC of section with table_id {}", s[0]);
    // And the stored CRC equals a fresh computation over the body.
    let body = &s[..s.len() - 4];
    assert_eq!(
        crc_bitwise(body).to_be_bytes(),
        s[s.len() - 4..],
        "stored CRC"
    );
    s
}

fn pts_of(pes: &[u8]) -> u64 {
    assert_eq!(&pes[..3], &[0, 0, 1], "PES start code");
    assert_eq!(pes[3], 0xE0, "video stream_id");
    assert_eq!(pes[7] & 0xC0, 0x80, "PTS_DTS_flags = PTS only");
    let p = &pes[9..14];
    assert_eq!(p[0] & 0xF1, 0x21);
    assert_eq!(p[2] & 1, 1);
    assert_eq!(p[4] & 1, 1);
    (((p[0] as u64 >> 1) & 7) << 30)
        | ((p[1] as u64) << 22)
        | ((p[2] as u64 >> 1) << 15)
        | ((p[3] as u64) << 7)
        | (p[4] as u64 >> 1)
}

/// Full structural check of a generated stream at `bitrate`, first PCR `first_pcr`.
fn check_structure(ts: &[u8], bitrate: u64, first_pcr: u64) {
    let pkts = parse(ts);
    let mut last_cc: HashMap<u16, u8> = HashMap::new();
    let mut last_pcr: Option<(usize, u64)> = None;
    let mut last_pat: Option<usize> = None;
    let mut pcr_count = 0;
    let mut pes_count = 0;
    let mut pmt_seen = false;
    let tick = |off: usize| (off as u128 * 8 * 27_000_000 / bitrate as u128) as u64;
    for p in &pkts {
        // Continuity counters: +1 mod 16 on payload packets, unchanged on AF-only packets.
        if p.pid != 0x1FFF {
            if let Some(&prev) = last_cc.get(&p.pid) {
                let want = if p.afc & 1 != 0 {
                    (prev + 1) & 0xF
                } else {
                    prev
                };
                assert_eq!(p.cc, want, "CC on PID {:#x} at byte {}", p.pid, p.offset);
            }
            last_cc.insert(p.pid, p.cc);
        }
        match p.pid {
            0 => {
                let s = section(p);
                assert_eq!(s[0], 0x00);
                assert_eq!(
                    &s[8..12],
                    &[0x00, 0x01, 0xF0, 0x00],
                    "program 1 -> PMT 0x1000"
                );
                if let Some(prev) = last_pat {
                    let gap = tick(p.offset) - tick(prev);
                    assert!(gap <= 27_000_000 / 10 + tick(2 * PKT), "PAT gap {gap}");
                }
                last_pat = Some(p.offset);
            }
            0x1000 => {
                let s = section(p);
                assert_eq!(s[0], 0x02);
                assert_eq!(&s[8..10], &[0xE1, 0x00], "PCR PID 0x100");
                assert_eq!(s[12], 0x02, "stream type MPEG-2 video");
                assert_eq!(&s[13..15], &[0xE1, 0x00], "elementary PID 0x100");
                pmt_seen = true;
            }
            0x100 => {
                if let Some(pcr) = p.pcr {
                    pcr_count += 1;
                    // PCR consistent with the byte position at the nominal bitrate.
                    let want = (first_pcr + tick(p.offset + 10)) % PCR_MODULUS;
                    assert_eq!(pcr, want, "PCR at byte {}", p.offset);
                    if let Some((_, prev)) = last_pcr {
                        let gap = (pcr + PCR_MODULUS - prev) % PCR_MODULUS;
                        assert!(gap <= 27_000_000 * 40 / 1000, "PCR gap {gap} ticks");
                    }
                    last_pcr = Some((p.offset, pcr));
                }
                if p.pusi {
                    pes_count += 1;
                    let pts = pts_of(p.payload);
                    // Presented after it arrives: PTS ahead of the current PCR.
                    let now_90k = ((first_pcr + tick(p.offset)) % PCR_MODULUS) / 300;
                    let ahead = (pts + (1 << 33) - now_90k) % (1 << 33);
                    assert!(
                        ahead > 0 && ahead < 90_000,
                        "PTS {pts} vs clock {now_90k} at byte {}",
                        p.offset
                    );
                    assert_eq!(&p.payload[14..18], &[0, 0, 1, 0xB3], "sequence header");
                }
            }
            0x1FFF => assert!(p.payload.iter().all(|&b| b == 0xFF)),
            other => panic!("unexpected PID {other:#x}"),
        }
    }
    assert!(pmt_seen);
    assert!(pcr_count >= 2);
    assert!(pes_count >= 1);
    // The first PCR comes early, the last within 40 ms of the end.
    let (last_off, _) = last_pcr.unwrap();
    assert!(tick(ts.len()) - tick(last_off) <= 27_000_000 * 40 / 1000);
}

fn assert_close(got: f64, want: f64, rel: f64, what: &str) {
    assert!(
        (got - want).abs() <= want * rel,
        "{what}: got {got}, want {want} within {:.2} %",
        rel * 100.0
    );
}

#[test]
fn generated_streams_are_valid_and_probe_to_nominal_bitrate() {
    for &(bitrate, duration) in &[
        (100_000u64, 4.0f64),
        (1_000_000, 3.0),
        (4_000_000, 2.5),
        (20_000_000, 1.5),
        (1_500_000, 0.3),
    ] {
        let ts = gen(bitrate, duration, bitrate ^ 7);
        let expected_len = (bitrate as f64 * duration / 8.0 / 188.0).round() as usize * 188;
        assert_eq!(ts.len(), expected_len);
        check_structure(&ts, bitrate, DEFAULT_FIRST_PCR);
        let info = probe(&ts[..], ts.len() as u64).unwrap();
        assert_eq!(info.container, Container::MpegTs);
        assert_eq!(info.content_type, "video/mp2t");
        assert_eq!(info.bitrate_unknown, None);
        let b = info.bitrate_bps.unwrap();
        assert_close(b as f64, bitrate as f64, 0.005, "bitrate");
        let d = info.duration_s.unwrap();
        // The length is rounded to whole packets.
        let slack = 188.0 * 8.0 / bitrate as f64;
        assert!(
            (d - duration).abs() <= duration * 0.005 + slack,
            "duration {d} vs {duration}"
        );
        assert_eq!(info.require_bitrate().unwrap(), b);
    }
}

#[test]
fn generation_is_deterministic_per_seed() {
    let a = gen(2_000_000, 1.0, 42);
    assert_eq!(a, gen(2_000_000, 1.0, 42));
    assert_ne!(a, gen(2_000_000, 1.0, 43));
}

#[test]
fn pcr_wrap_inside_the_stream() {
    let cfg = TsGenConfig {
        bitrate_bps: 3_000_000,
        duration_s: 2.0,
        seed: 9,
    };
    let first = PCR_MODULUS - 27_000_000; // wraps after 1 s
    let mut ts = Vec::new();
    generate_ts_with_first_pcr(&cfg, first, &mut ts).unwrap();
    check_structure(&ts, 3_000_000, first);
    let info = probe(&ts[..], ts.len() as u64).unwrap();
    assert_close(
        info.bitrate_bps.unwrap() as f64,
        3e6,
        0.005,
        "bitrate across wrap",
    );
}

#[test]
fn large_file_probed_from_head_and_tail_only() {
    // 20 Mbit/s x 4 s = 10 MB: head and tail windows are disjoint.
    let ts = gen(20_000_000, 4.0, 5);
    assert!(ts.len() > 2 * PROBE_WINDOW);
    let len = ts.len() as u64;
    let head = &ts[..1 << 20];
    // An unaligned tail start: the prober realigns to packet boundaries.
    let tail = &ts[ts.len() - (1 << 20) - 77..];
    let info = probe_ts(head, tail, len).unwrap();
    assert_close(info.bitrate_bps.unwrap() as f64, 20e6, 0.005, "bitrate");
    assert_close(info.duration_s.unwrap(), 4.0, 0.005, "duration");
    // The whole-object probe through a file agrees.
    let path = std::env::temp_dir().join(format!("isnode-media-test-{}.ts", std::process::id()));
    std::fs::write(&path, &ts).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    let from_file = probe(&file, len);
    std::fs::remove_file(&path).unwrap();
    assert_eq!(from_file.unwrap(), info);
}

#[test]
fn truncated_ts_is_refused() {
    let ts = gen(1_000_000, 1.0, 1);
    let cut = &ts[..ts.len() - 65];
    let err = probe(cut, cut.len() as u64).unwrap_err();
    assert!(matches!(
        err,
        MediaError::Truncated {
            container: Container::MpegTs,
            ..
        }
    ));
    assert_eq!(
        err.to_string(),
        format!(
            "MPEG-TS is truncated: {} bytes is not a whole number of 188-byte packets (last packet has 123 bytes)",
            cut.len()
        )
    );

    // Whole number of packets, but the last one is not a packet.
    let mut bad = ts.clone();
    let n = bad.len();
    bad[n - 188] = 0x00;
    let err = probe(&bad[..], n as u64).unwrap_err();
    assert!(matches!(err, MediaError::Truncated { .. }), "{err}");
    assert!(err.to_string().contains("sync byte 0x47"), "{err}");

    // The source ends before the declared length.
    let err = probe(&ts[..ts.len() - 188], ts.len() as u64).unwrap_err();
    assert!(matches!(err, MediaError::Truncated { .. }), "{err}");
    assert!(
        err.to_string().contains("before the declared length"),
        "{err}"
    );
}

#[test]
fn ts_without_pcr_has_no_bitrate() {
    let mut ts = Vec::new();
    for _ in 0..20 {
        ts.extend_from_slice(&[0x47, 0x1F, 0xFF, 0x10]);
        ts.extend_from_slice(&[0xFF; 184]);
    }
    let info = probe(&ts[..], ts.len() as u64).unwrap();
    assert_eq!(info.container, Container::MpegTs);
    assert_eq!(info.bitrate_bps, None);
    assert_eq!(info.bitrate_unknown, Some(BitrateUnknown::NoPcr));
    let err = info.require_bitrate().unwrap_err();
    assert_eq!(
        err.to_string(),
        "no PCR found in the MPEG-TS: pass --bitrate"
    );
}

#[test]
fn invalid_generator_configs_are_refused() {
    for (bitrate_bps, duration_s) in [
        (50_000, 1.0),
        (1_000_000, 0.0),
        (1_000_000, f64::NAN),
        (1_000_000, -1.0),
        (1_000_000, 0.0001),
    ] {
        let cfg = TsGenConfig {
            bitrate_bps,
            duration_s,
            seed: 0,
        };
        let err = generate_ts(&cfg, &mut Vec::new()).unwrap_err();
        assert!(matches!(err, MediaError::InvalidConfig(_)), "{err}");
    }
}

#[test]
fn unknown_bytes_are_not_checked() {
    let data = b"just some text, not media at all".repeat(10);
    let info = probe(&data[..], data.len() as u64).unwrap();
    assert_eq!(info.container, Container::Unknown);
    assert_eq!(info.content_type, "application/octet-stream");
    assert!(info
        .require_bitrate()
        .unwrap_err()
        .to_string()
        .ends_with("pass --bitrate"));
}
