//! Adaptive repair in the simulation: each client reports the loss it saw about once a
//! second, as keepalives carry it; the server sends the repair symbols
//! `repair_policy::repair_symbols` gives for it (`Pacer::set_repair_limit`), as the data
//! plane does. The network's budget follows the policy, not what the server sends: a
//! codeword loses at most as many symbols as the policy (for the reports around the
//! codeword) says are sent, so a server that sends fewer is caught by a lost codeword.

use isnode_proto::keepalive::LossReport;
use isnode_serve_core::repair_policy::repair_symbols;

use super::{SimMutation, World};

/// How often a client reports its loss (a keepalive's period).
pub(super) const REPORT_EVERY_NS: u64 = 1_000_000_000;

/// A session's loss reports and what its network did since the last one.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct LossWindow {
    /// The last report and the one before it (the pacer keeps a codeword's count when a
    /// report comes in the middle of it).
    pub(super) last: Option<LossReport>,
    pub(super) before: Option<LossReport>,
    /// When the next report is due.
    pub(super) next_ns: u64,
    /// Packets sent, and taken by the network, since the last report.
    pub(super) sent: u64,
    pub(super) taken: u64,
}

impl World {
    /// The most symbols the network may take of a codeword of session `i` now: what the
    /// repair policy sends for the last two reports (m before the first).
    pub(super) fn repair_budget(&self, i: usize) -> u32 {
        let s = &self.sessions[i];
        let p = self.objs[s.obj].layout.params();
        let (k, m) = (p.source_symbols, p.repair_symbols);
        repair_symbols(s.loss.last, k, m).min(repair_symbols(s.loss.before, k, m))
    }

    /// Session `i`'s client reports its loss if one is due; the server applies it.
    pub(super) fn report_loss(&mut self, i: usize) {
        let now = self.now_ns;
        let s = &mut self.sessions[i];
        if now < s.loss.next_ns {
            return;
        }
        if s.loss.next_ns == 0 {
            // The first report comes a period after the start.
            s.loss.next_ns = now + REPORT_EVERY_NS;
            return;
        }
        let rate = match s.loss.sent {
            0 => 0.0,
            n => s.loss.taken as f64 / n as f64,
        };
        let report = LossReport::from_rate(rate);
        s.loss = super::repair::LossWindow {
            last: Some(report),
            before: s.loss.last,
            next_ns: now + REPORT_EVERY_NS,
            sent: 0,
            taken: 0,
        };
        let p = self.objs[s.obj].layout.params();
        let limit = match self.cfg.mutation {
            SimMutation::RepairIgnoresLoss => 0,
            _ => repair_symbols(Some(report), p.source_symbols, p.repair_symbols),
        };
        if let Some(pacer) = s.pacer.as_mut() {
            pacer.set_repair_limit(Some(limit));
        }
        self.report.loss_reports += 1;
    }
}
