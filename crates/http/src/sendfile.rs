//! Response bytes that lie in a view of a file (`isnode_sys::fileview`: the server's HTTP
//! mirror) go to a plain TCP socket with `sendfile` instead of `writev`: the socket takes
//! the file's pages, and no byte is copied on the way out. hyper hands its writer the
//! body's buffers unchanged (vectored writes), so the writer sees where they lie; the bytes
//! sent are the bytes the buffers show (the mapping and the file share their pages).
//! TLS streams encrypt in user space and write as before.

use std::io::{self, IoSlice};
use std::os::fd::AsFd;
use std::task::{Context, Poll};

use isnode_sys::fileview::{sendfile, view_of};
use std::pin::Pin;

use tokio::io::{AsyncWrite, Interest};

/// A stream that may send bytes of a view's file itself.
pub trait FileSend {
    /// Whether it does ([`FileSend::poll_send_file`]); if not, it writes the bytes.
    const SENDS_FILES: bool;

    /// Sends `len` bytes of `file` from `offset` (`sendfile`).
    fn poll_send_file(
        &self,
        cx: &mut Context<'_>,
        file: std::os::fd::RawFd,
        offset: u64,
        len: usize,
    ) -> Poll<io::Result<usize>>;
}

impl FileSend for tokio::net::TcpStream {
    const SENDS_FILES: bool = true;

    fn poll_send_file(
        &self,
        cx: &mut Context<'_>,
        file: std::os::fd::RawFd,
        offset: u64,
        len: usize,
    ) -> Poll<io::Result<usize>> {
        // Bounded: each turn either sends, fails, or returns Pending with a waker set.
        for _ in 0..4 {
            if let Err(e) = std::task::ready!(self.poll_write_ready(cx)) {
                return Poll::Ready(Err(e));
            }
            let sent = self.try_io(Interest::WRITABLE, || {
                sendfile(self.as_fd(), file, offset, len)
            });
            match sent {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                r => return Poll::Ready(r),
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl<S> FileSend for tokio_rustls::server::TlsStream<S> {
    const SENDS_FILES: bool = false;

    fn poll_send_file(
        &self,
        _: &mut Context<'_>,
        _: std::os::fd::RawFd,
        _: u64,
        _: usize,
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(Err(io::Error::other("a TLS stream does not send files")))
    }
}

/// A vectored write of `bufs` to `stream`: its first buffer sent from its view's file if it
/// lies in one (and the stream sends files), else the buffers before the first such buffer
/// (or all of them) written as usual.
pub(crate) fn poll_write_views<S: FileSend + AsyncWrite + Unpin>(
    stream: &mut S,
    cx: &mut Context<'_>,
    bufs: &[IoSlice<'_>],
) -> Poll<io::Result<usize>> {
    let in_view = bufs
        .iter()
        .enumerate()
        .filter(|_| S::SENDS_FILES)
        .find_map(|(i, b)| Some((i, view_of(b)?)));
    match in_view {
        Some((0, (file, offset))) => {
            let len = bufs.first().map_or(0, |b| b.len());
            stream.poll_send_file(cx, file, offset, len)
        }
        Some((first, _)) => Pin::new(stream).poll_write_vectored(cx, &bufs[..first]),
        None => Pin::new(stream).poll_write_vectored(cx, bufs),
    }
}
