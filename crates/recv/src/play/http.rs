//! `isnode play NAME --http 127.0.0.1:PORT`: the decoded stream, served progressively to a
//! local player over HTTP/1.1 (`mpv http://127.0.0.1:PORT/`, `ffmpeg -i http://...`).
//!
//! The playout writes the object into a file (`--out FILE`, or a temporary file unlinked as
//! soon as it is made, so that nothing is left however the process ends) through
//! [`HttpOut`]; every path of the listener serves that file as it grows:
//! - `GET`/`HEAD` with `Content-Length` of the whole object (known from the start);
//! - a single `Range` (parsed by [`isnode_proto::range`]): `206`; `416` past the end;
//!   several ranges are answered with the whole body (`200`, as RFC 9110 allows);
//! - bytes not received yet are waited for, at most [`STALL_LIMIT`] without progress (then
//!   the connection is closed); the body is never anything but the object's bytes in order.
//!
//! At most [`MAX_CONNECTIONS`] requests are served at once (more get `503`); each connection
//! serves one request (`Connection: close`). After the session, `play` keeps serving until
//! no request has been active for `--http-linger-s`.

use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;
use isnode_proto::range::{parse_range, RangeRequest};

/// Requests served at once at most.
pub(super) const MAX_CONNECTIONS: usize = 8;
/// Longest a response waits for the stream to make progress.
pub(super) const STALL_LIMIT: Duration = Duration::from_secs(30);
/// Longest request head read, bytes.
const MAX_HEAD_BYTES: usize = 8192;

/// How far the output file is written.
#[derive(Debug, Default)]
struct Progress {
    written: u64,
    /// The playout finished (or gave up): no more bytes will come.
    done: bool,
}

/// What the writer and the connections share.
struct Stream {
    /// The output file, read by every connection (a temporary one is already unlinked).
    file: File,
    len: u64,
    content_type: String,
    progress: Mutex<Progress>,
    grew: Condvar,
    /// Requests being served.
    active: AtomicUsize,
    /// When the last request ended (for the linger).
    last_end: Mutex<Instant>,
    stop: AtomicBool,
}

impl Stream {
    fn lock(&self) -> std::sync::MutexGuard<'_, Progress> {
        self.progress.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until byte `at` is written (or the stream ended, or `STALL_LIMIT` passed);
    /// returns how many bytes from `at` are there now.
    fn available(&self, at: u64) -> u64 {
        let mut p = self.lock();
        let deadline = Instant::now() + STALL_LIMIT;
        while p.written <= at && !p.done && !self.stop.load(Ordering::Relaxed) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            p = self
                .grew
                .wait_timeout(p, left.min(Duration::from_millis(200)))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        p.written.saturating_sub(at)
    }
}

/// The playout's output: appends to the file and wakes the connections waiting for it.
pub struct HttpOut {
    file: File,
    stream: Arc<Stream>,
}

impl Write for HttpOut {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write(buf)?;
        self.stream.lock().written += n as u64;
        self.stream.grew.notify_all();
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl Drop for HttpOut {
    fn drop(&mut self) {
        self.stream.lock().done = true;
        self.stream.grew.notify_all();
    }
}

/// The listener of `--http` and its thread.
pub struct HttpServe {
    stream: Arc<Stream>,
    addr: SocketAddr,
    thread: Option<JoinHandle<()>>,
}

/// A MIME type from the object name's extension (what a player would be told).
fn content_type_of(name: &str) -> &'static str {
    let ext = name.rsplit('.').next().unwrap_or("").to_ascii_lowercase();
    match ext.as_str() {
        "ts" | "m2ts" | "mts" => "video/mp2t",
        "mp4" | "m4v" => "video/mp4",
        "m4a" => "audio/mp4",
        "mkv" => "video/x-matroska",
        "webm" => "video/webm",
        _ => "application/octet-stream",
    }
}

/// The bound listener of `--http`, before the session is known.
pub struct HttpListener(TcpListener);

impl HttpListener {
    /// Binds `addr` (checked before the session is asked for).
    pub fn bind(addr: SocketAddr) -> anyhow::Result<HttpListener> {
        let l = TcpListener::bind(addr).with_context(|| format!("--http: binding {addr}"))?;
        Ok(HttpListener(l))
    }

    /// Starts serving the object `name` whose output has `len` bytes, written to `out` (a
    /// file path; `-` is refused) or a temporary file; returns the server and the
    /// playout's writer.
    pub fn serve(
        self,
        name: &str,
        len: u64,
        out: Option<&Path>,
    ) -> anyhow::Result<(HttpServe, HttpOut)> {
        anyhow::ensure!(
            out.is_none_or(|p| p.as_os_str() != "-"),
            "--http serves the stream to a player: it cannot go with --out -"
        );
        let listener = self.0;
        let addr = listener.local_addr()?;
        let (path, temp) = match out {
            Some(p) => (p.to_path_buf(), false),
            None => {
                let p = std::env::temp_dir().join(format!(
                    "isnode-play-{}-{:016x}.part",
                    std::process::id(),
                    rand::random::<u64>()
                ));
                (p, true)
            }
        };
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .with_context(|| format!("creating {}", path.display()))?;
        if temp {
            // Unlinked at once: the file lives while its descriptors do, and nothing is
            // left behind however the process ends.
            std::fs::remove_file(&path).with_context(|| format!("unlinking {}", path.display()))?;
        }
        let reader = file
            .try_clone()
            .with_context(|| format!("reopening {}", path.display()))?;
        let stream = Arc::new(Stream {
            file: reader,
            len,
            content_type: content_type_of(name).to_string(),
            progress: Mutex::default(),
            grew: Condvar::new(),
            active: AtomicUsize::new(0),
            last_end: Mutex::new(Instant::now()),
            stop: AtomicBool::new(false),
        });
        listener.set_nonblocking(true)?;
        let s = stream.clone();
        let thread = std::thread::spawn(move || accept_loop(&listener, &s));
        tracing::info!("serving the stream on http://{addr}/");
        let out = HttpOut {
            file,
            stream: stream.clone(),
        };
        Ok((
            HttpServe {
                stream,
                addr,
                thread: Some(thread),
            },
            out,
        ))
    }
}

impl HttpServe {
    /// The listening address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves on until no request has been active for `linger`, then stops.
    pub fn linger(self, linger: Duration) {
        loop {
            let idle = self.stream.active.load(Ordering::Acquire) == 0;
            let since = self
                .stream
                .last_end
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .elapsed();
            if idle && since >= linger {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for HttpServe {
    fn drop(&mut self) {
        self.stream.stop.store(true, Ordering::Relaxed);
        self.stream.grew.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, s: &Arc<Stream>) {
    while !s.stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((conn, _)) => {
                if s.active.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
                    let _ = answer_head(&conn, "503 Service Unavailable", &[], 0);
                    end_request(s);
                    continue;
                }
                let s = s.clone();
                std::thread::spawn(move || {
                    if let Err(e) = serve_one(conn, &s) {
                        tracing::debug!("--http connection: {e}");
                    }
                    end_request(&s);
                });
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => {
                tracing::warn!("--http accept: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

fn end_request(s: &Stream) {
    *s.last_end.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    s.active.fetch_sub(1, Ordering::AcqRel);
}

/// Reads a request head (bounded): the method and the `Range` header value.
fn read_head(conn: &mut TcpStream) -> io::Result<(String, Option<Vec<u8>>)> {
    conn.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        if head.len() > MAX_HEAD_BYTES {
            return Err(io::Error::other("request head too long"));
        }
        let n = conn.read(&mut buf)?;
        if n == 0 {
            return Err(io::Error::other("connection closed in the request head"));
        }
        head.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&head);
    let mut lines = text.split("\r\n");
    let method = lines
        .next()
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or("")
        .to_string();
    let range = lines.find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case("range")
            .then(|| v.trim().as_bytes().to_vec())
    });
    Ok((method, range))
}

fn answer_head(
    mut conn: &TcpStream,
    status: &str,
    headers: &[(&str, String)],
    len: u64,
) -> io::Result<()> {
    let mut h = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {len}\r\nAccept-Ranges: bytes\r\nConnection: close\r\n"
    );
    for (k, v) in headers {
        h.push_str(&format!("{k}: {v}\r\n"));
    }
    h.push_str("\r\n");
    conn.write_all(h.as_bytes())
}

fn serve_one(mut conn: TcpStream, s: &Stream) -> io::Result<()> {
    let (method, range) = read_head(&mut conn)?;
    if method != "GET" && method != "HEAD" {
        return answer_head(&conn, "405 Method Not Allowed", &[], 0);
    }
    let ct = ("Content-Type", s.content_type.clone());
    let (status, r) = match parse_range(range.as_deref(), s.len) {
        RangeRequest::Partial(v) if v.len() == 1 => ("206 Partial Content", v[0].clone()),
        RangeRequest::Unsatisfiable => {
            let cr = ("Content-Range", format!("bytes */{}", s.len));
            return answer_head(&conn, "416 Range Not Satisfiable", &[cr], 0);
        }
        RangeRequest::Malformed | RangeRequest::TooMany => {
            return answer_head(&conn, "400 Bad Request", &[], 0)
        }
        _ => ("200 OK", 0..s.len),
    };
    let mut headers = vec![ct];
    if status.starts_with("206") {
        let cr = format!("bytes {}-{}/{}", r.start, r.end - 1, s.len);
        headers.push(("Content-Range", cr));
    }
    answer_head(&conn, status, &headers, r.end - r.start)?;
    if method == "HEAD" {
        return Ok(());
    }
    send_body(&mut conn, s, r)
}

/// Sends bytes `r` of the output file as they are written.
fn send_body(conn: &mut TcpStream, s: &Stream, r: std::ops::Range<u64>) -> io::Result<()> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut at = r.start;
    while at < r.end {
        let ready = s.available(at);
        if ready == 0 {
            return Err(io::Error::other(format!("the stream stopped at byte {at}")));
        }
        let n = ready.min(r.end - at).min(buf.len() as u64) as usize;
        s.file.read_exact_at(&mut buf[..n], at)?;
        conn.write_all(&buf[..n])?;
        at += n as u64;
    }
    Ok(())
}
