//! A data-plane thread's own record of each stream it serves ([`Active`]: its pacer, its
//! destinations, its read-ahead and hold state), what a send attempt came to ([`Sent`]),
//! and the thread's send engine ([`Mode`]).

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;

use isnode_proto::keepalive::LossReport;
use isnode_serve_config::EngineKind;
use isnode_serve_core::pacer::RepairCounts;
use isnode_serve_core::schedule::Schedule;
use isnode_sys::net::RawAddr;

use crate::baseline::Baseline;
use crate::stream::StreamShared;
use crate::uring::UringSender;

/// One session on this thread.
pub(crate) struct Active {
    pub(crate) s: Arc<StreamShared>,
    pub(crate) pacer: Schedule,
    /// Where the packets go: the session's address, or a broadcast channel's source group.
    pub(crate) dest: Dest,
    /// A broadcast channel's repair group (its repair packets go there).
    pub(crate) repair_dest: Option<Dest>,
    /// Codeword up to which read-ahead was done.
    pub(crate) read_ahead_at: Option<u32>,
    /// Not before this time (ns): its last burst had to wait for a block.
    pub(crate) retry_at_ns: u64,
    /// Since when (ns) its next step has been waiting for a block (0: it is not waiting);
    /// waited longer than `hedge_after_ms`, the block's member is slow (`hedge`).
    pub(crate) waiting_since_ns: u64,
    /// State of the baseline engine (`traditional` only).
    pub(crate) baseline: Option<Box<Baseline>>,
    /// The loss report the pacer's repair limit was last set from.
    pub(crate) applied_loss: Option<LossReport>,
    /// The pacer's repair counts already added to the metrics.
    pub(crate) repair_counted: RepairCounts,
    /// Held at its object's fill front: its pacer is paused until the front passes.
    pub(crate) held: bool,
}

/// One destination of a data-plane entry.
pub(crate) struct Dest {
    pub(crate) addr: SocketAddr,
    pub(crate) raw: RawAddr,
    /// Its connected, segmenting socket (`sendfile` only; made on first send).
    pub(crate) conn: Option<UdpSocket>,
}

impl Dest {
    pub(crate) fn new(addr: SocketAddr) -> Dest {
        Dest {
            raw: RawAddr::new(&addr),
            addr,
            conn: None,
        }
    }
}

impl Active {
    /// Where burst `b` goes: a broadcast channel's repair packets to its repair group,
    /// everything else to the main destination.
    pub(crate) fn dest_for(&self, b: &isnode_serve_core::pacer::Burst) -> &Dest {
        match &self.repair_dest {
            Some(r) if self.is_repair(b) => r,
            _ => &self.dest,
        }
    }

    /// [`Active::dest_for`], mutable (the `sendfile` engine keeps a socket per destination).
    pub(crate) fn dest_for_mut(&mut self, b: &isnode_serve_core::pacer::Burst) -> &mut Dest {
        let repair = self.is_repair(b);
        match &mut self.repair_dest {
            Some(r) if repair => r,
            _ => &mut self.dest,
        }
    }

    /// Whether burst `b` carries repair symbols (a burst is one member's run: all source
    /// or all repair).
    pub(crate) fn is_repair(&self, b: &isnode_serve_core::pacer::Burst) -> bool {
        b.esis.start >= self.s.object.layout.source_symbols(b.sbn)
    }
}

/// Whether a step went out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sent {
    /// Sent (or deliberately skipped): the pacer moves on.
    Yes,
    /// Sent together with the start of the steps after it: the pacer has already moved
    /// past everything sent (`send.rs`'s joined sends).
    Taken,
    /// Not now (block not in memory yet, pool full): retry the same step later.
    Later,
}

/// The send engine of one data-plane thread.
pub(crate) enum Mode {
    Gso,
    Mmsg,
    Uring(Box<UringSender>),
    /// The seed papers' baseline (`baseline.rs`).
    Traditional,
    /// `sendfile` from the page cache (`sendfile.rs`).
    Sendfile,
}

impl Mode {
    /// The engine every packet a session sends is counted under, whatever the path
    /// (FDT datagrams and rebuilt packets included).
    pub(crate) fn engine(&self) -> EngineKind {
        match self {
            Mode::Traditional => EngineKind::Traditional,
            Mode::Uring(_) => EngineKind::UringZc,
            Mode::Mmsg => EngineKind::Sendmmsg,
            Mode::Gso => EngineKind::Gso,
            Mode::Sendfile => EngineKind::Sendfile,
        }
    }
}
