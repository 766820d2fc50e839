//! Fuzz the keepalive and token datagram parsers (every UDP datagram on the server's
//! keepalive port, and every datagram at a client's port while it waits for its token,
//! reaches one): they must never panic, and what they accept is exactly the input.
#![no_main]

use isnode_proto::auth::{parse_token_datagram, token_datagram};
use isnode_proto::keepalive::{keepalive_datagram, parse_keepalive, LOSS_UNITS};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(k) = parse_keepalive(data) {
        if let Some(loss) = k.loss {
            assert!(loss.units() <= LOSS_UNITS);
        }
        let back = keepalive_datagram(k.id, &k.secret, k.loss).expect("an accepted id can be sent");
        assert_eq!(&back[..], data);
    }
    if let Some(token) = parse_token_datagram(data) {
        assert_eq!(&token_datagram(&token)[..], data);
    }
});
