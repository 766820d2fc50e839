//! Fuzz the client's parser of the digest route's answers (bytes from the server): it must
//! never panic nor allocate beyond the input, and what it accepts lies in the asked range,
//! in order, with the announced number of digests per codeword.
#![no_main]

use isnode_recv::digests::{parse_digests, DigestBook};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((head, body)) = data.split_first_chunk::<5>() else {
        return;
    };
    let from = u32::from(u16::from_be_bytes([head[0], head[1]]));
    let count = u32::from(head[2]) + 1;
    let n = u32::from(head[3]).max(1);
    let symbols = move |sbn: u32| {
        if sbn % 2 == 0 {
            n
        } else {
            n.saturating_sub(head[4] as u32 % 4).max(1)
        }
    };
    if let Ok(rows) = parse_digests(body, from..from + count, symbols) {
        let mut book = DigestBook::new();
        let mut last = None;
        for (sbn, d) in rows {
            assert!((from..from + count).contains(&sbn));
            assert!(last.is_none_or(|l| l < sbn));
            assert_eq!(d.len(), symbols(sbn) as usize * 16);
            last = Some(sbn);
            book.insert(sbn, d);
            let _ = book.check(sbn, 0, body);
        }
    }
});
