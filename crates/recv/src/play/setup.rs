//! A session as the receive loop takes it ([`SessionSetup`]) and the source its datagrams
//! may come from ([`SourceFilter`]): plain data built before the loop starts, a leaf shared
//! by the loop (`session`), the resume that replaces a session (`resume`) and the
//! statistics (`stats`).

use std::net::{IpAddr, SocketAddr};

use crate::control::{SessionInfo, SessionInfoExt};
use crate::receiver::{verify_fdt, FdtCheck, SessionParams};

/// Receive buffer asked for the session's socket (`SO_RCVBUFFORCE`, else `SO_RCVBUF`).
pub(crate) const RECV_BUFFER_BYTES: usize = 8 << 20;

/// Which datagrams the receive loop takes, by their source address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceFilter {
    /// Datagrams from every address (`--accept-from any`).
    Any,
    /// Datagrams whose source IP is one of these, from any port (the server sends from the
    /// ephemeral ports of its data-plane sockets). IPv4-mapped IPv6 addresses count as IPv4.
    Ips(Vec<IpAddr>),
}

impl SourceFilter {
    /// Datagrams from `ip` only.
    pub fn ip(ip: IpAddr) -> SourceFilter {
        SourceFilter::Ips(vec![ip])
    }

    /// Whether a datagram from `from` (None: unknown) is taken.
    pub fn accepts(&self, from: Option<SocketAddr>) -> bool {
        match self {
            SourceFilter::Any => true,
            SourceFilter::Ips(ips) => from.is_some_and(|from| {
                let ip = from.ip().to_canonical();
                ips.iter().any(|a| a.to_canonical() == ip)
            }),
        }
    }
}

/// A session as the receive loop needs it: from the server's answer, or preset (tests, demos).
#[derive(Clone, Debug, PartialEq)]
pub struct SessionSetup {
    /// Object name (for the statistics).
    pub object: String,
    /// Server session id, if any.
    pub session_id: Option<String>,
    /// Receiver parameters.
    pub params: SessionParams,
    /// The object's bitrate, for pacing.
    pub bitrate_bps: u64,
    /// The FDT check of the session answer.
    pub fdt_session: FdtCheck,
    /// Where the session's datagrams may come from.
    pub source: SourceFilter,
}

impl SessionSetup {
    /// From the server's session answer (checked), taking datagrams from `source`.
    pub fn from_info(info: &SessionInfo, source: SourceFilter) -> anyhow::Result<SessionSetup> {
        let params = info.params()?;
        let fdt_session = if info.fdt_xml.is_empty() {
            FdtCheck::NotReceived
        } else {
            match verify_fdt(info.fdt_xml.as_bytes(), &params) {
                Ok(()) => FdtCheck::Verified,
                Err(r) => FdtCheck::Mismatch(r),
            }
        };
        Ok(SessionSetup {
            object: info.object.name.clone(),
            session_id: Some(info.id.clone()),
            params,
            bitrate_bps: info.object.bitrate_bps,
            fdt_session,
            source,
        })
    }
}

impl SessionSetup {
    /// Bytes of the output: the object from the start codeword's first byte to its end.
    pub fn output_len(&self) -> anyhow::Result<u64> {
        let part = self.params.partition()?;
        let start = part.block_offset(self.params.start_codeword);
        Ok(self.params.transfer_length.saturating_sub(start))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_filter_compares_ips_of_any_port() {
        let server = SourceFilter::ip([127, 0, 0, 1].into());
        assert!(server.accepts(Some("127.0.0.1:40000".parse().unwrap())));
        assert!(
            server.accepts(Some("[::ffff:127.0.0.1]:9".parse().unwrap())),
            "mapped IPv4"
        );
        assert!(!server.accepts(Some("127.0.0.2:40000".parse().unwrap())));
        assert!(!server.accepts(Some("[::1]:40000".parse().unwrap())));
        assert!(!server.accepts(None), "an unknown source is not the server");
        let v6 = SourceFilter::ip("::1".parse().unwrap());
        assert!(v6.accepts(Some("[::1]:1".parse().unwrap())));
        assert!(SourceFilter::Any.accepts(None));
        assert!(!SourceFilter::Ips(vec![]).accepts(Some("127.0.0.1:1".parse().unwrap())));
    }
}
