//! The `sendfile` engine: each burst (a run of stored packets of one block) goes from the
//! segment file's page-cache pages straight into the session's connected UDP socket, which
//! segments it by `UDP_SEGMENT` into the stored packets. No byte passes through user memory
//! and no copy is made into socket buffers: the kernel hands the pages to the socket, as
//! nginx's `sendfile` does for HTTP.
//!
//! The page cache takes the block pool's place for this engine: the files are opened
//! buffered (not O_DIRECT) and shared by the thread's sessions of a title, and the block
//! checksum is not checked before sending (each packet carries its CRC32C, which the client
//! checks: a damaged packet is an erasure there). A block that cannot be read (a failed
//! member: `sendfile` fails or comes up short) goes to the degraded path, which rebuilds it
//! from the other members through the pool.

use std::fs::File;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::sync::Arc;

use isnode_pool::objects::ObjectInfo;
use isnode_serve_config::EngineKind;
use isnode_serve_core::admission::LOOKAHEAD_CODEWORDS;
use isnode_serve_core::pacer::{blocks_of, Burst};

use crate::active::{Active, Sent};
use crate::rebuild::Hedge;
use crate::segment_files::session_socket;
use crate::worker::{readable_end, Worker};

impl Worker {
    /// Starts the page-cache reads of each session's next [`LOOKAHEAD_CODEWORDS`]
    /// codewords once per codeword: a `sendfile` of a block not in the page cache would
    /// block the thread (every session of it) on the disk.
    pub(crate) fn advise_ahead(&mut self, sessions: &mut [Active]) {
        for a in sessions.iter_mut() {
            let c = a.pacer.codeword();
            if a.pacer.is_done()
                || a.read_ahead_at == Some(c)
                || !a.s.validated.load(std::sync::atomic::Ordering::Acquire)
            {
                continue;
            }
            let obj = &a.s.object;
            let ahead = c.saturating_add(LOOKAHEAD_CODEWORDS);
            let end = readable_end(obj).min(ahead);
            if end == ahead {
                a.read_ahead_at = Some(c);
            }
            for (member, block) in blocks_of(&obj.layout, c..end) {
                self.files.advise(obj, member, block);
            }
        }
    }

    /// Sends one burst with `sendfile`; a block that cannot be read goes to the degraded path.
    pub(crate) fn send_sendfile(&mut self, a: &mut Active, b: &Burst) -> Sent {
        let obj: Arc<ObjectInfo> = a.s.object.clone();
        let p = obj.layout.params().packet_len() as usize;
        let multicast = self.deps.multicast;
        let dest = a.dest_for_mut(b);
        if dest.conn.is_none() {
            match session_socket(dest.addr, p, multicast) {
                Ok(s) => dest.conn = Some(s),
                Err(e) => {
                    self.send_error(&e);
                    return Sent::Yes;
                }
            }
        }
        let len = b.len() as usize * p;
        let offset = obj.layout.block_offset(b.block) + u64::from(b.first_in_block) * p as u64;
        let (Some(conn), Some(file)) = (&a.dest_for(b).conn, self.files.get(&obj, b.member)) else {
            return self.degraded(a, &obj, b, Hedge::No);
        };
        match sendfile_all(conn, file, offset, len) {
            Ok(()) => {
                self.count(a, EngineKind::Sendfile, u64::from(b.len()), len as u64);
                Sent::Yes
            }
            Err(SendfileError::Socket(e)) => {
                self.send_error(&e);
                Sent::Yes
            }
            Err(SendfileError::File(why)) => {
                let path = obj.seg_paths.get(b.member as usize);
                let at = path.map_or_else(String::new, |p| p.display().to_string());
                self.deps
                    .members
                    .count_error(b.member, &format!("{at}: block {}: {why}", b.block));
                self.degraded(a, &obj, b, Hedge::No)
            }
        }
    }
}

/// Why a `sendfile` did not send the whole run.
enum SendfileError {
    /// The socket refused (counted as a send error; the packets are lost like a drop).
    Socket(std::io::Error),
    /// The file could not give the bytes (an I/O error, or it is shorter than the layout).
    File(String),
}

/// Sends `len` bytes of `file` at `offset` into `conn` with one `sendfile` (one datagram,
/// segmented by the socket's `UDP_SEGMENT`).
fn sendfile_all(
    conn: &UdpSocket,
    file: &File,
    offset: u64,
    len: usize,
) -> Result<(), SendfileError> {
    let mut off =
        libc::off_t::try_from(offset).map_err(|_| SendfileError::File("offset".into()))?;
    // SAFETY: both descriptors are open for the call; `off` is a valid off_t the kernel
    // advances; no user memory is read or written.
    let r = unsafe { libc::sendfile(conn.as_raw_fd(), file.as_raw_fd(), &mut off, len) };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::EIO) | Some(libc::EBADF) | Some(libc::EINVAL) => {
                SendfileError::File(e.to_string())
            }
            _ => SendfileError::Socket(e),
        });
    }
    if r as usize != len {
        return Err(SendfileError::File(format!(
            "short read: {r} of {len} bytes"
        )));
    }
    Ok(())
}
