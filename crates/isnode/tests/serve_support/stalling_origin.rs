//! An S3 endpoint that stops answering: it takes every connection and holds it without a
//! word, except that a request whose path holds `missing` (when asked) is answered
//! `404 NoSuchKey`. For the tests of what strangers can do to an edge whose origin stalls.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Which requests the stalling origin still answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answers {
    /// None: every connection is held.
    Nothing,
    /// `404` for a path holding `/missing`; every other connection held.
    MissingNames,
}

/// The running endpoint; stopped when dropped (held connections close then).
pub(crate) struct StallingOrigin {
    /// Its address.
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl StallingOrigin {
    pub(crate) fn start(answers: Answers) -> StallingOrigin {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        let s = s.clone();
                        std::thread::spawn(move || hold(conn, answers, &s));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        StallingOrigin { addr, stop }
    }
}

impl Drop for StallingOrigin {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Answers `conn` with `404` if `answers` says so for its request, else holds it silent
/// until the endpoint stops.
fn hold(mut conn: TcpStream, answers: Answers, stop: &AtomicBool) {
    if answers == Answers::MissingNames && asks_missing(&mut conn) {
        let body = "<Error><Code>NoSuchKey</Code></Error>";
        let _ = write!(
            conn,
            "HTTP/1.1 404 Not Found\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        return;
    }
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether the request head on `conn` (read within 2 s) asks for a `/missing` path.
fn asks_missing(conn: &mut TcpStream) -> bool {
    if conn.set_nonblocking(false).is_err()
        || conn.set_read_timeout(Some(Duration::from_secs(2))).is_err()
    {
        return false;
    }
    let mut head = Vec::new();
    let mut b = [0u8; 512];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16_384 {
        match conn.read(&mut b) {
            Ok(0) | Err(_) => return false,
            Ok(n) => head.extend_from_slice(&b[..n]),
        }
    }
    let text = String::from_utf8_lossy(&head);
    text.lines().next().is_some_and(|l| l.contains("/missing"))
}
