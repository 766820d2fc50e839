//! Where a load run's clients and servers sit: [`NetMode`] as asked, [`Net`] as set up.

use serde::{Deserialize, Serialize};

use crate::netns::{Entered, VethNamespace};

/// Where the clients run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetMode {
    /// In a network namespace of their own behind a veth pair (root and iproute2 needed).
    Veth,
    /// In the root namespace, over loopback (no root needed; no device between the two).
    Loopback,
}

/// The network of a run: the servers' and the clients' addresses.
pub(crate) enum Net {
    /// Both on 127.0.0.1.
    Loopback,
    /// Clients inside the namespace.
    Veth(VethNamespace),
}

impl Net {
    pub(super) fn new(mode: NetMode) -> anyhow::Result<Net> {
        Ok(match mode {
            NetMode::Loopback => Net::Loopback,
            NetMode::Veth => Net::Veth(VethNamespace::create()?),
        })
    }

    /// The address the servers listen on.
    pub(crate) fn server_host(&self) -> &str {
        match self {
            Net::Loopback => "127.0.0.1",
            Net::Veth(ns) => ns.host_ip(),
        }
    }

    /// The address of the clients.
    pub(crate) fn client_host(&self) -> &str {
        match self {
            Net::Loopback => "127.0.0.1",
            Net::Veth(ns) => ns.peer_ip(),
        }
    }

    /// Moves the calling thread to the clients' side until the guard is dropped.
    pub(crate) fn enter(&self) -> anyhow::Result<Option<Entered>> {
        match self {
            Net::Loopback => Ok(None),
            Net::Veth(ns) => ns.enter().map(Some),
        }
    }

    pub(super) fn describe(&self) -> String {
        match self {
            Net::Loopback => "loopback (clients and servers in the root namespace, 127.0.0.1; \
                              no device between them)"
                .into(),
            Net::Veth(ns) => format!(
                "veth (clients in namespace {} at {}, servers in the root namespace at {})",
                ns.name(),
                ns.peer_ip(),
                ns.host_ip()
            ),
        }
    }
}
