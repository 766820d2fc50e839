//! Fuzz the keepalive and token datagram parsers (every UDP datagram on the server's
//! keepalive port, and every datagram at a client's port while it waits for its token,
//! reaches one), the keepalive MAC check and the replay window: they must never panic,
//! what they accept is exactly the input, and a counter is taken at most once.
#![no_main]

use isnode_proto::auth::{parse_token_datagram, token_datagram};
use isnode_proto::keepalive::{keepalive_datagram, parse_keepalive, ReplayWindow, LOSS_UNITS};
use libfuzzer_sys::fuzz_target;

/// A key to authenticate fuzzed datagrams with.
const KEY: [u8; 16] = [0x5a; 16];

fuzz_target!(|data: &[u8]| {
    if let Some(k) = parse_keepalive(data) {
        if let Some(loss) = k.loss {
            assert!(loss.units() <= LOSS_UNITS);
        }
        // The datagram the fields make with KEY: the same bytes up to the MAC, authentic
        // with KEY; the fuzzed one is authentic exactly when its MAC is that one.
        let back =
            keepalive_datagram(k.id, &KEY, k.counter, k.loss).expect("an accepted id can be sent");
        assert_eq!(&back[..32], &data[..32]);
        let again = parse_keepalive(&back).expect("a made datagram parses");
        assert!(again.authentic(&KEY));
        assert_eq!(k.authentic(&KEY), back[..] == data[..]);
    }
    let mut window = ReplayWindow::default();
    for c in data.chunks(8).take(64) {
        let mut b = [0u8; 8];
        b[..c.len()].copy_from_slice(c);
        let counter = u64::from_be_bytes(b);
        if window.take(counter) {
            assert!(!window.take(counter), "a counter is taken once");
        }
    }
    if let Some(token) = parse_token_datagram(data) {
        assert_eq!(&token_datagram(&token)[..], data);
    }
});
