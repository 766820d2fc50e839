//! A data-plane thread that dies must not leave the server half-alive (issue 7, defect 8):
//! the API used to keep routing sessions to a dead thread while answering 200. Now the
//! process stops with an error that says why.

mod serve_support;

use std::time::{Duration, Instant};

use serve_support::*;

#[test]
fn a_panicking_data_plane_thread_stops_the_server_loudly() {
    let vol = Vol::create(&[]);
    vol.add_ts("clip.ts", 2_000_000, 2.0, 1);
    // `ISNODE_FAULT=plane-panic` (debug builds): a data-plane thread panics on its first session.
    let mut server = Server::start_env(
        &vol,
        &["--threads", "1"],
        &[("ISNODE_FAULT", "plane-panic")],
    );
    let port = free_port();
    let _rx = udp("127.0.0.1".parse().unwrap(), port).unwrap();
    let created = server.post_session("clip.ts", port);
    assert_eq!(created.status, 201, "{}", created.body);
    let status = server.wait_exit(Instant::now() + Duration::from_secs(20));
    let log = server.log_text();
    assert!(!status.success(), "the server exited successfully:\n{log}");
    assert!(
        log.contains("data-plane thread 0 panicked") && log.contains("injected fault"),
        "the failure is not said:\n{log}"
    );
}
