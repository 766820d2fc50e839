//! HTTPS for the load benchmark: one self-signed certificate and key per run (made by
//! `isnode cert`, served by isnode and nginx alike), and the paced readers' side of TLS
//! (rustls in user space: a handshake bounded by a deadline before the stream is handed to
//! a receiver thread, then non-blocking reads through `read_tls` / `process_new_packets` /
//! `reader()`), trusting that certificate only.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};

/// The longest a connection and its TLS handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// A reader's receive buffer (`SO_RCVBUF`; the kernel doubles it). The readers stand in
/// for players on other machines, but on veth and loopback the kernel hands the server's
/// pages (`sendfile`) to their receive queues as they are: a paced reader's queue,
/// autotuned up to `tcp_rmem`'s maximum, keeps them charged to the server's memory.
/// Measured: with autotuned queues, 38 HTTP readers under a 128 MiB limit left 33 MB of
/// such pages charged to isnode and its memory cgroup's OOM killer ended it. 256 KiB
/// still holds 1 s of an 8 Mbit/s stream beside what the reader has taken.
const READER_RCVBUF_BYTES: usize = 256 << 10;

/// The run's certificate and key (PEM files) and a client configuration that trusts that
/// certificate only.
pub(crate) struct TlsPair {
    /// The certificate (PEM).
    pub(crate) cert: PathBuf,
    /// Its private key (PEM).
    pub(crate) key: PathBuf,
    /// The readers' configuration.
    pub(crate) client: Arc<rustls::ClientConfig>,
}

impl TlsPair {
    /// Makes a self-signed pair for `host` (and `localhost`) in `dir` with `isnode cert`.
    pub(crate) fn make(isnode_exe: &Path, dir: &Path, host: &str) -> anyhow::Result<TlsPair> {
        let out = Command::new(isnode_exe)
            .arg("cert")
            .arg("--out")
            .arg(dir)
            .args(["--name", host, "--name", "localhost"])
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {} cert", isnode_exe.display()))?;
        if !out.status.success() {
            bail!(
                "isnode cert failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        // nginx's master reads the key as root before its workers drop privileges; isnode
        // reads it as this user: the owner-only mode `isnode cert` gives is enough.
        let client = client_config(&cert)?;
        Ok(TlsPair { cert, key, client })
    }
}

/// A client configuration (ring, TLS 1.2 and 1.3, ALPN `http/1.1`) whose only trusted root
/// is the certificate in the PEM file `cert`.
fn client_config(cert: &Path) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    let mut roots = rustls::RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("reading {}", cert.display()))?;
    for c in certs {
        let c = c.with_context(|| format!("parsing {}", cert.display()))?;
        roots.add(c).context("trusting the run's certificate")?;
    }
    if roots.is_empty() {
        bail!("{}: no PEM certificate", cert.display());
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS client configuration")?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Bounds the receive queue of a reader's connection ([`READER_RCVBUF_BYTES`]).
fn bound_receive_queue(s: &TcpStream) -> anyhow::Result<()> {
    isnode_sys::net::set_receive_buffer(s, READER_RCVBUF_BYTES)
        .context("setting a reader's receive buffer")
}

/// A reader's connection: plain TCP, or TLS over it.
pub(crate) enum Wire {
    /// Plain HTTP.
    Plain(TcpStream),
    /// HTTPS.
    Tls(Box<TlsWire>),
}

impl Wire {
    /// Connects to `addr` and sends `request` (over TLS for `host` when `tls` is given);
    /// the connection is non-blocking afterwards.
    pub(crate) fn connect(
        addr: SocketAddr,
        host: &str,
        tls: Option<&Arc<rustls::ClientConfig>>,
        request: &[u8],
    ) -> anyhow::Result<Wire> {
        match tls {
            Some(config) => Ok(Wire::Tls(Box::new(TlsWire::connect(
                addr, host, config, request,
            )?))),
            None => {
                let mut s = TcpStream::connect_timeout(&addr, HANDSHAKE_TIMEOUT)
                    .with_context(|| format!("connecting to {addr}"))?;
                bound_receive_queue(&s)?;
                s.write_all(request).context("sending the request")?;
                s.set_nonblocking(true)?;
                Ok(Wire::Plain(s))
            }
        }
    }

    /// Reads what is ready, as a non-blocking `TcpStream` does (`Ok(0)`: the end).
    pub(crate) fn read(&mut self, dst: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Wire::Plain(s) => s.read(dst),
            Wire::Tls(t) => t.read(dst),
        }
    }

    /// Sends `data` (a request on a kept-alive connection).
    pub(crate) fn write_all(&mut self, data: &[u8]) -> std::io::Result<()> {
        match self {
            Wire::Plain(s) => s.write_all(data),
            Wire::Tls(t) => t.write_all(data),
        }
    }

    /// Whether bytes already received wait to be read (decrypted plaintext: no readiness
    /// of the socket will announce them).
    pub(crate) fn buffered(&self) -> bool {
        match self {
            Wire::Plain(_) => false,
            Wire::Tls(t) => t.plaintext_bytes > 0,
        }
    }

    /// The socket, to poll.
    pub(crate) fn fd(&self) -> RawFd {
        match self {
            Wire::Plain(s) => s.as_raw_fd(),
            Wire::Tls(t) => t.tcp.as_raw_fd(),
        }
    }
}

/// A TLS client connection on a non-blocking socket.
pub(crate) struct TlsWire {
    tcp: TcpStream,
    tls: rustls::ClientConnection,
    /// Decrypted bytes not yet read.
    plaintext_bytes: usize,
}

impl TlsWire {
    /// Connects, completes the handshake within [`HANDSHAKE_TIMEOUT`] (blocking), sends
    /// `request`, then makes the socket non-blocking.
    fn connect(
        addr: SocketAddr,
        host: &str,
        config: &Arc<rustls::ClientConfig>,
        request: &[u8],
    ) -> anyhow::Result<TlsWire> {
        let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
        let mut tcp = TcpStream::connect_timeout(&addr, HANDSHAKE_TIMEOUT)
            .with_context(|| format!("connecting to {addr}"))?;
        bound_receive_queue(&tcp)?;
        // The handshake's last flight and the request leave in separate writes: without
        // this, Nagle holds the request until the server acknowledges the flight.
        tcp.set_nodelay(true)?;
        let name = ServerName::try_from(host.to_string())
            .with_context(|| format!("{host:?} as a TLS server name"))?;
        let mut tls = rustls::ClientConnection::new(config.clone(), name)
            .context("a TLS client connection")?;
        while tls.is_handshaking() || tls.wants_write() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                bail!("the TLS handshake with {addr} took over {HANDSHAKE_TIMEOUT:?}");
            }
            tcp.set_read_timeout(Some(left))?;
            tcp.set_write_timeout(Some(left))?;
            if !tls.is_handshaking() {
                tls.write_tls(&mut tcp).context("sending the request")?;
                continue;
            }
            tls.complete_io(&mut tcp)
                .with_context(|| format!("the TLS handshake with {addr}"))?;
            if !tls.is_handshaking() {
                tls.writer().write_all(request)?;
            }
        }
        tcp.set_nonblocking(true)?;
        Ok(TlsWire {
            tcp,
            tls,
            plaintext_bytes: 0,
        })
    }

    /// Plaintext already decrypted, else what the socket has (decrypted); `WouldBlock`
    /// when neither gives a byte.
    fn read(&mut self, dst: &mut [u8]) -> std::io::Result<usize> {
        self.flush()?;
        loop {
            match self.tls.reader().read(dst) {
                Ok(n) => {
                    self.plaintext_bytes = self.plaintext_bytes.saturating_sub(n);
                    return Ok(n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                // The peer closed TCP without close_notify: the end, for a reader.
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) => return Err(e),
            }
            // Nothing decrypted is waiting: the reader's buffer stays within one read of
            // the socket (rustls refuses more while 16 KiB of plaintext wait).
            self.tls.read_tls(&mut self.tcp)?;
            let state = self
                .tls
                .process_new_packets()
                .map_err(std::io::Error::other)?;
            self.plaintext_bytes = state.plaintext_bytes_to_read();
        }
    }

    /// Queues `data` and sends what TLS has to send.
    fn write_all(&mut self, data: &[u8]) -> std::io::Result<()> {
        self.tls.writer().write_all(data)?;
        self.flush()
    }

    /// Sends the TLS records waiting (as much as the socket takes now).
    fn flush(&mut self) -> std::io::Result<()> {
        while self.tls.wants_write() {
            match self.tls.write_tls(&mut self.tcp) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::thread::JoinHandle;

    /// A self-signed pair for 127.0.0.1 written in `dir` as `NAME-cert.pem`, `NAME-key.pem`.
    fn pair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let p = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
        let cert = dir.join(format!("{name}-cert.pem"));
        let key = dir.join(format!("{name}-key.pem"));
        std::fs::write(&cert, p.cert.pem()).unwrap();
        std::fs::write(&key, p.signing_key.serialize_pem()).unwrap();
        (cert, key)
    }

    /// Accepts one connection over TLS with `cert`, reads a request head, answers `body`
    /// with a `200` and closes (close_notify); the request, or why it failed.
    fn serve_once(
        listener: TcpListener,
        (cert, key): (PathBuf, PathBuf),
        body: Vec<u8>,
    ) -> JoinHandle<Result<Vec<u8>, String>> {
        std::thread::spawn(move || {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert)
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            let key = rustls_pki_types::PrivateKeyDer::from_pem_file(&key).unwrap();
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(chain, key)
                .unwrap();
            let (tcp, _) = listener.accept().map_err(|e| e.to_string())?;
            tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            tcp.set_write_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let conn = rustls::ServerConnection::new(Arc::new(config)).unwrap();
            let mut s = rustls::StreamOwned::new(conn, tcp);
            let mut request = Vec::new();
            let mut byte = [0u8; 1];
            while !request.ends_with(b"\r\n\r\n") && request.len() < 4096 {
                s.read_exact(&mut byte).map_err(|e| e.to_string())?;
                request.push(byte[0]);
            }
            let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
            s.write_all(head.as_bytes()).map_err(|e| e.to_string())?;
            s.write_all(&body).map_err(|e| e.to_string())?;
            s.conn.send_close_notify();
            s.flush().map_err(|e| e.to_string())?;
            Ok(request)
        })
    }

    /// Waits up to 100 ms for `fd` to be readable.
    fn wait_readable(fd: RawFd) {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, its length passed.
        #[allow(unsafe_code)]
        unsafe {
            libc::poll(&mut p, 1, 100)
        };
    }

    #[test]
    fn a_paced_reader_gets_every_byte_through_tls_and_sees_what_waits_decrypted() {
        let dir = tempfile::tempdir().unwrap();
        let files = pair(dir.path(), "run");
        let config = client_config(&files.0).unwrap();
        let body: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = serve_once(listener, files, body.clone());
        let request = b"GET /t HTTP/1.1\r\nHost: localhost\r\n\r\n";
        let mut wire = Wire::connect(addr, "127.0.0.1", Some(&config), request).unwrap();
        let (mut got, mut buf, mut saw_buffered) = (Vec::new(), [0u8; 1000], false);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            assert!(
                Instant::now() < deadline,
                "no end after {} bytes",
                got.len()
            );
            saw_buffered |= wire.buffered();
            if !wire.buffered() {
                wait_readable(wire.fd());
            }
            match wire.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("reading: {e}"),
            }
        }
        assert_eq!(server.join().unwrap().unwrap(), request);
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
        assert_eq!(&got[..head.len()], head.as_bytes());
        assert!(got[head.len()..] == body[..], "the body differs");
        // 1000-byte reads of 16 KiB records: the rest of each waits decrypted.
        assert!(saw_buffered);
    }

    #[test]
    fn a_server_with_another_certificate_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let trusted = pair(dir.path(), "run");
        let other = pair(dir.path(), "other");
        let config = client_config(&trusted.0).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = serve_once(listener, other, b"secret".to_vec());
        let e = Wire::connect(addr, "127.0.0.1", Some(&config), b"GET / HTTP/1.1\r\n\r\n")
            .err()
            .expect("a certificate the reader does not trust");
        assert!(format!("{e:#}").contains("TLS handshake"), "{e:#}");
        assert!(server.join().unwrap().is_err());
    }

    #[test]
    fn a_file_without_a_certificate_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("empty.pem");
        std::fs::write(&p, "no certificate here\n").unwrap();
        let e = client_config(&p).err().unwrap();
        assert!(format!("{e:#}").contains("no PEM certificate"), "{e:#}");
    }
}
