//! Fuzz the keepalive datagram parser (every UDP datagram on the server's keepalive port
//! reaches it): it must never panic, and what it accepts is a session id whose datagram
//! is exactly the input.
#![no_main]

use isnode_proto::keepalive::{keepalive_datagram, parse_keepalive};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(id) = parse_keepalive(data) {
        let back = keepalive_datagram(id).expect("an accepted id can be sent");
        assert_eq!(&back[..], data);
    }
});
