//! The front of the browser tests: one loopback HTTP port that serves the test's own pages
//! and files under `/player/`, optionally a directory of static files under `/ref/` (a
//! reference ladder segmented by ffmpeg, kept-alive connections as a web server's), and
//! passes every other connection, byte for byte, to an `isnode serve` (so the pages and the
//! node share an origin). The node's answers and the static files can be shaped to a rate
//! (one token bucket shared by every connection, charged 16 KiB at a time); a connection the
//! browser closes (an aborted request) stops being charged at once, as a closed TCP
//! connection stops on a real link: before each charge the browser's socket is polled for a
//! hang-up, so at most the one charge already made for it is spent on it.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Largest request head read before deciding where a connection goes.
const MAX_HEAD: usize = 64 * 1024;
/// How long an idle connection is kept.
const IDLE: Duration = Duration::from_secs(60);
/// Bytes passed per charge of the shaper.
pub(crate) const CHUNK: usize = 16 * 1024;

/// A rate shared by every connection's answers: `0` is unlimited.
#[derive(Default)]
pub(crate) struct Shaper {
    rate_bps: AtomicU64,
    /// When the link is next free.
    next: Mutex<Option<Instant>>,
    /// Bytes charged so far.
    charged_bytes: AtomicU64,
    /// Answers being sent (shaped copies under way).
    sending: AtomicU64,
}

impl Shaper {
    /// Sets the rate, bits per second (`0`: unlimited).
    pub(crate) fn set_rate(&self, bps: u64) {
        self.rate_bps.store(bps, Ordering::Relaxed);
    }

    /// Bytes charged against the link so far.
    pub(crate) fn charged_bytes(&self) -> u64 {
        self.charged_bytes.load(Ordering::Relaxed)
    }

    /// Answers being sent now.
    pub(crate) fn sending(&self) -> u64 {
        self.sending.load(Ordering::Relaxed)
    }

    /// Waits until `n` bytes may pass.
    fn take(&self, n: usize) {
        self.charged_bytes.fetch_add(n as u64, Ordering::Relaxed);
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
    /// The shaper of the node's answers and the static files.
    pub shaper: Arc<Shaper>,
    stop: Arc<AtomicBool>,
}

/// What the front serves besides the node.
struct Served {
    /// `/player/P`: body and type.
    files: HashMap<String, (Vec<u8>, String)>,
    /// `/ref/PATH`: files under this directory, if any.
    static_root: Option<PathBuf>,
}

impl Front {
    /// Listens on a free loopback port: `GET /player/P` answers `files[P]` (body, type),
    /// anything else goes to `node`.
    pub(crate) fn start(node: SocketAddr, files: HashMap<String, (Vec<u8>, String)>) -> Front {
        Front::start_with_static(node, files, None)
    }

    /// As [`Front::start`], and `GET /ref/PATH` answers the file `static_root/PATH` (shaped,
    /// on kept-alive connections).
    pub(crate) fn start_with_static(
        node: SocketAddr,
        files: HashMap<String, (Vec<u8>, String)>,
        static_root: Option<PathBuf>,
    ) -> Front {
        let listener = TcpListener::bind(("127.0.0.1", 0)).expect("binding the front");
        let addr = listener.local_addr().expect("the front's address");
        listener
            .set_nonblocking(true)
            .expect("nonblocking listener");
        let shaper = Arc::new(Shaper::default());
        let stop = Arc::new(AtomicBool::new(false));
        let served = Arc::new(Served { files, static_root });
        let (sh, st) = (shaper.clone(), stop.clone());
        std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((c, _)) => {
                        let (served, sh) = (served.clone(), sh.clone());
                        std::thread::spawn(move || connection(c, node, &served, &sh));
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

/// Reads one request head (to its blank line) into `buf`, which may already hold the start
/// of it; the head's length, or `None` at the end of the connection or past [`MAX_HEAD`].
fn read_head(c: &mut TcpStream, buf: &mut Vec<u8>) -> Option<usize> {
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Some(end + 4);
        }
        if buf.len() > MAX_HEAD {
            return None;
        }
        match c.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(chunk.get(..n)?),
        }
    }
}

/// The path of a request head.
fn request_path(head: &[u8]) -> String {
    let line = String::from_utf8_lossy(head);
    line.split_whitespace().nth(1).unwrap_or("").to_string()
}

/// One browser connection: a page or file of ours, static files, or a pipe to the node.
fn connection(mut c: TcpStream, node: SocketAddr, served: &Served, shaper: &Shaper) {
    let _ = c.set_nonblocking(false);
    let _ = c.set_read_timeout(Some(IDLE));
    let mut buf = Vec::new();
    let Some(len) = read_head(&mut c, &mut buf) else {
        return;
    };
    let path = request_path(buf.get(..len).unwrap_or_default());
    if let Some(p) = path.strip_prefix("/player/") {
        let p = p.split('?').next().unwrap_or("");
        let answer = match served.files.get(p) {
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
            None => NOT_FOUND.to_vec(),
        };
        let _ = c.write_all(&answer);
        let _ = c.shutdown(Shutdown::Both);
        return;
    }
    // The browser's own request: answered here, so that no connection to the node is
    // opened in a run of the static files (the browser would reuse it for them).
    if path == "/favicon.ico" {
        let _ = c.write_all(NOT_FOUND);
        let _ = c.shutdown(Shutdown::Both);
        return;
    }
    if let (Some(root), true) = (&served.static_root, path.starts_with("/ref/")) {
        static_files(c, root, buf, shaper);
        return;
    }
    pipe(c, node, &buf, shaper);
}

/// `404`, closing.
const NOT_FOUND: &[u8] =
    b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/// Passes the connection to the node: requests unshaped, answers shaped.
fn pipe(c: TcpStream, node: SocketAddr, head: &[u8], shaper: &Shaper) {
    let Ok(mut up) = TcpStream::connect_timeout(&node, Duration::from_secs(5)) else {
        return;
    };
    let _ = up.set_read_timeout(Some(IDLE));
    if up.write_all(head).is_err() {
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
    // Answers: node to browser, shaped, until either end closes.
    let _ = shaped_copy(&mut up, &c, shaper);
    let _ = c.shutdown(Shutdown::Both);
    let _ = up.shutdown(Shutdown::Both);
}

/// Whether the browser has hung up `c` (closed or reset it): `poll` with no wait.
fn hung_up(c: &TcpStream) -> bool {
    let mut p = libc::pollfd {
        fd: c.as_raw_fd(),
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one valid pollfd, a zero timeout.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n > 0 && p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
}

/// Copies `from` to the browser `c`, charging the shaper [`CHUNK`] bytes at a time and
/// checking for a hang-up before each charge; `Err` when the browser has gone.
fn shaped_copy(from: &mut impl Read, mut c: &TcpStream, shaper: &Shaper) -> Result<(), ()> {
    shaper.sending.fetch_add(1, Ordering::Relaxed);
    let mut chunk = vec![0u8; CHUNK];
    let r = loop {
        let n = match from.read(&mut chunk) {
            Ok(0) | Err(_) => break Ok(()),
            Ok(n) => n,
        };
        if hung_up(c) {
            break Err(());
        }
        shaper.take(n);
        if c.write_all(chunk.get(..n).unwrap_or_default()).is_err() {
            break Err(());
        }
    };
    shaper.sending.fetch_sub(1, Ordering::Relaxed);
    r
}

/// The content type of a static file by its extension.
fn static_type(path: &Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()) {
        Some("m3u8") => "application/vnd.apple.mpegurl",
        Some("mpd") => "application/dash+xml",
        Some("m4s") | Some("mp4") => "video/mp4",
        _ => "application/octet-stream",
    }
}

/// The file under `root` of a `/ref/PATH` request path (no `..`, no query), if any.
fn static_file(root: &Path, path: &str) -> Option<PathBuf> {
    let rel = Path::new(path.strip_prefix("/ref/")?.split('?').next()?);
    if !rel.components().all(|c| matches!(c, Component::Normal(_))) {
        return None;
    }
    Some(root.join(rel)).filter(|p| p.is_file())
}

/// Answers `/ref/PATH` requests on a kept-alive connection (`buf` holds the first request
/// head and anything read after it), each whole file shaped, until the browser closes.
fn static_files(mut c: TcpStream, root: &Path, mut buf: Vec<u8>, shaper: &Shaper) {
    while let Some(len) = read_head(&mut c, &mut buf) {
        let path = request_path(buf.get(..len).unwrap_or_default());
        buf.drain(..len);
        let Some(file) = static_file(root, &path) else {
            let _ = c.write_all(NOT_FOUND);
            break;
        };
        let Ok(mut f) = std::fs::File::open(&file) else {
            break;
        };
        let size = f.metadata().map(|m| m.len()).unwrap_or(0);
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: {}\r\nContent-Length: {size}\r\n\
             Cache-Control: no-store\r\nAccess-Control-Allow-Origin: *\r\n\r\n",
            static_type(&file)
        );
        let mut answer = std::io::Cursor::new(head.into_bytes()).chain(&mut f);
        if shaped_copy(&mut answer, &c, shaper).is_err() {
            break;
        }
    }
    let _ = c.shutdown(Shutdown::Both);
}
