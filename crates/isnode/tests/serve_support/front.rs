//! The front of the browser tests: one loopback HTTP port that serves the test's own pages
//! and files under `/player/` and passes every other connection, byte for byte, to an
//! `isnode serve` (so the pages and the node share an origin). The node's answers can be
//! shaped to a rate (a token bucket shared by every connection); a connection the browser
//! closes stops being charged at once, as a closed TCP connection stops on a real link.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Largest request head read before deciding where a connection goes.
const MAX_HEAD: usize = 64 * 1024;
/// How long an idle connection is kept.
const IDLE: Duration = Duration::from_secs(60);
/// Bytes passed per charge of the shaper.
const CHUNK: usize = 16 * 1024;

/// A rate shared by every connection's answers: `0` is unlimited.
#[derive(Default)]
pub(crate) struct Shaper {
    rate_bps: AtomicU64,
    /// When the link is next free.
    next: Mutex<Option<Instant>>,
}

impl Shaper {
    /// Sets the rate, bits per second (`0`: unlimited).
    pub(crate) fn set_rate(&self, bps: u64) {
        self.rate_bps.store(bps, Ordering::Relaxed);
    }

    /// Waits until `n` bytes may pass.
    fn take(&self, n: usize) {
        let bps = self.rate_bps.load(Ordering::Relaxed);
        if bps == 0 {
            return;
        }
        let cost = Duration::from_secs_f64(n as f64 * 8.0 / bps as f64);
        let until = {
            let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
            let now = Instant::now();
            let start = next.filter(|t| *t > now).unwrap_or(now);
            *next = Some(start + cost);
            start + cost
        };
        std::thread::sleep(until.saturating_duration_since(Instant::now()));
    }
}

/// The front: its listener thread runs until dropped.
pub(crate) struct Front {
    /// Its address.
    pub addr: SocketAddr,
    /// The shaper of the node's answers.
    pub shaper: Arc<Shaper>,
    stop: Arc<AtomicBool>,
}

impl Front {
    /// Listens on a free loopback port: `GET /player/P` answers `files[P]` (body, type),
    /// anything else goes to `node`.
    pub(crate) fn start(node: SocketAddr, files: HashMap<String, (Vec<u8>, String)>) -> Front {
        let listener = TcpListener::bind(("127.0.0.1", 0)).expect("binding the front");
        let addr = listener.local_addr().expect("the front's address");
        listener
            .set_nonblocking(true)
            .expect("nonblocking listener");
        let shaper = Arc::new(Shaper::default());
        let stop = Arc::new(AtomicBool::new(false));
        let files = Arc::new(files);
        let (sh, st) = (shaper.clone(), stop.clone());
        std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((c, _)) => {
                        let (files, sh) = (files.clone(), sh.clone());
                        std::thread::spawn(move || connection(c, node, &files, &sh));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Front { addr, shaper, stop }
    }

    /// `http://ADDR`.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// One browser connection: a page or file of ours, or a pipe to the node.
fn connection(
    mut c: TcpStream,
    node: SocketAddr,
    files: &HashMap<String, (Vec<u8>, String)>,
    shaper: &Shaper,
) {
    let _ = c.set_nonblocking(false);
    let _ = c.set_read_timeout(Some(IDLE));
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
        if head.len() > MAX_HEAD {
            return;
        }
    }
    let line = String::from_utf8_lossy(&head);
    let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
    if let Some(p) = path.strip_prefix("/player/") {
        let p = p.split('?').next().unwrap_or("");
        let answer = match files.get(p) {
            Some((body, kind)) => {
                let mut a = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\
                     Cache-Control: no-store\r\nConnection: close\r\n\r\n",
                    body.len()
                )
                .into_bytes();
                a.extend_from_slice(body);
                a
            }
            None => {
                b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec()
            }
        };
        let _ = c.write_all(&answer);
        let _ = c.shutdown(Shutdown::Both);
        return;
    }
    let Ok(mut up) = TcpStream::connect_timeout(&node, Duration::from_secs(5)) else {
        return;
    };
    let _ = up.set_read_timeout(Some(IDLE));
    if up.write_all(&head).is_err() {
        return;
    }
    let (Ok(mut c2), Ok(mut up2)) = (c.try_clone(), up.try_clone()) else {
        return;
    };
    // Requests: browser to node, unshaped.
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut c2, &mut up2);
        let _ = up2.shutdown(Shutdown::Write);
    });
    // Answers: node to browser, shaped; a write error (the browser closed) ends it.
    let mut chunk = vec![0u8; CHUNK];
    loop {
        let n = match up.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        shaper.take(n);
        if c.write_all(&chunk[..n]).is_err() {
            break;
        }
    }
    let _ = c.shutdown(Shutdown::Both);
    let _ = up.shutdown(Shutdown::Both);
}
