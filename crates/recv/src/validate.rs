//! Return routability, the client's side (`isnode_proto::auth`): the server streams only
//! after the client has echoed the token datagram it sent to the stream's port.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use isnode_proto::auth::{parse_token_datagram, Key, TOKEN_DATAGRAM_LEN};

/// Waits on `socket` up to `wait` for a token datagram from an address `from_server`
/// accepts; its token. Other datagrams are skipped: a flood of strays cannot make the
/// client give up before `wait` is over, nor hold it past it.
pub fn await_token(
    socket: &UdpSocket,
    wait: Duration,
    from_server: impl Fn(SocketAddr) -> bool,
) -> anyhow::Result<Key> {
    let previous = socket
        .read_timeout()
        .context("reading the socket's timeout")?;
    let deadline = Instant::now() + wait;
    let mut buf = [0u8; TOKEN_DATAGRAM_LEN + 1];
    let mut result = None;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        socket
            .set_read_timeout(Some(left))
            .context("setting the socket's timeout")?;
        let (n, from) = match socket.recv_from(&mut buf) {
            Ok(got) => got,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                break
            }
            Err(e) => return Err(e).context("waiting for the session's token"),
        };
        let token = buf.get(..n).and_then(parse_token_datagram);
        if let (Some(token), true) = (token, from_server(from)) {
            result = Some(token);
            break;
        }
    }
    socket
        .set_read_timeout(previous)
        .context("restoring the socket's timeout")?;
    match result {
        Some(token) => Ok(token),
        None => bail!(
            "no token datagram from the server within {} ms: the server cannot reach this \
             socket (firewall, NAT, or a wrong --bind), so it will not stream",
            wait.as_millis()
        ),
    }
}
