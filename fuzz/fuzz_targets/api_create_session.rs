//! Fuzz the control API's session bodies: `POST /v1/sessions` (parsed as the handler does)
//! and `POST /v1/sessions/{id}/control`. They must never panic; a session request it
//! accepts streams only to the HTTP peer, at a port not below the server's lowest, from a
//! finite, non-negative start time given alone.
#![no_main]

use isnode_proto::SessionControl;
use isnode_serve::fuzzing::{create_session, MIN_PORT, PEER};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((dest, start_codeword, start_at_s)) = create_session(data) {
        assert_eq!(dest.ip(), PEER.ip(), "packets go to the peer only");
        assert!(dest.port() >= MIN_PORT, "port {}", dest.port());
        if let Some(t) = start_at_s {
            assert!(t.is_finite() && t >= 0.0, "start_at_s {t}");
            assert_eq!(start_codeword, 0, "both starts given");
        }
    }
    if let Ok(control) = serde_json::from_slice::<SessionControl>(data) {
        let again = serde_json::to_vec(&control).expect("a control serializes");
        let back: SessionControl = serde_json::from_slice(&again).expect("its own JSON parses");
        assert_eq!(back, control);
    }
});
