//! Fuzz the keepalive datagram parser (every UDP datagram on the server's keepalive port
//! reaches it): it must never panic, and what it accepts (version 1, or version 2 with a
//! loss report) is a session id and report whose datagram is exactly the input.
#![no_main]

use isnode_proto::keepalive::{
    keepalive_datagram, keepalive_datagram_with_loss, parse_keepalive, parse_keepalive_report,
    LOSS_UNITS,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let report = parse_keepalive_report(data);
    assert_eq!(parse_keepalive(data), report.map(|k| k.id));
    if let Some(k) = report {
        let back = match k.loss {
            Some(loss) => {
                assert!(loss.units() <= LOSS_UNITS);
                keepalive_datagram_with_loss(k.id, loss)
            }
            None => keepalive_datagram(k.id),
        }
        .expect("an accepted id can be sent");
        assert_eq!(&back[..], data);
    }
});
