//! Which rung of a title's ladder `isnode play TITLE` plays: a sans-IO, deterministic state
//! machine fed the session's measurements and the caller's clock ([`Abr`]).
//!
//! The ladder's rungs go up in bitrate. Each knows the loss its FEC repairs on its own: the
//! share of a codeword's symbols that are repair symbols, `m / (k + m)` (12.5 % with the
//! default k = 223, m = 32). Play starts on the highest rung not above the cap
//! (`--max-bitrate-bps`, and a first estimate when one is given), then, on each
//! [`Observation`] (the measured loss over the loss meter's window, the receive rate of valid
//! symbols):
//!
//! - **down one rung** when the loss exceeds [`AbrConfig::loss_margin`] of what the rung's FEC
//!   repairs ([`Reason::Loss`]: the rest waits on repair over HTTP, which a lower rate relieves
//!   when the loss comes from congestion), or when the receive rate falls below
//!   [`AbrConfig::rate_behind`] of the rung's bitrate ([`Reason::Rate`]: the stream falls
//!   behind its playout);
//! - **up one rung** once the loss has stayed at or below [`AbrConfig::clean_loss`] of what
//!   the rung above repairs, and the rate has kept up, for [`AbrConfig::up_after`] without a
//!   break ([`Reason::Clean`]), never above the cap. A step down soon after a step up (within
//!   twice the clean period) doubles the clean period asked before the next step up (up to
//!   [`MAX_UP_AFTER`]): a rung that does not hold is not tried again at once.
//!
//! After every switch observations are ignored for [`AbrConfig::settle`] (the new session's
//! meter starts empty). An observation without a measurement (`None`) neither breaks nor
//! extends a clean period. The caller carries a switch out at the next segment boundary.

use std::time::Duration;

/// One rung of the ladder as the decision sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rung {
    /// The rendition's bitrate, bit/s.
    pub bitrate_bps: u64,
    /// The loss its FEC repairs alone: repair symbols / encoding symbols of a codeword.
    pub repairable_loss: f64,
}

impl Rung {
    /// A rung of `bitrate_bps` whose codewords have `source` source and `repair` repair
    /// symbols.
    pub fn new(bitrate_bps: u64, source: u32, repair: u32) -> Rung {
        let n = f64::from(source) + f64::from(repair);
        Rung {
            bitrate_bps,
            repairable_loss: if n > 0.0 { f64::from(repair) / n } else { 0.0 },
        }
    }
}

/// Thresholds and periods of the decision.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AbrConfig {
    /// No rung above this bitrate is played (bit/s).
    pub max_bitrate_bps: u64,
    /// A first estimate of the available rate (bit/s): play starts on the highest rung not
    /// above it (None: not above the cap only).
    pub start_estimate_bps: Option<u64>,
    /// Step down when the loss exceeds this share of what the rung's FEC repairs.
    pub loss_margin: f64,
    /// A period is clean while the loss is at or below this share of what the rung above
    /// repairs.
    pub clean_loss: f64,
    /// Step down when the receive rate is below this share of the rung's bitrate.
    pub rate_behind: f64,
    /// Clean time before a step up.
    pub up_after: Duration,
    /// Observations ignored after a switch (and at the start).
    pub settle: Duration,
}

impl Default for AbrConfig {
    fn default() -> Self {
        AbrConfig {
            max_bitrate_bps: u64::MAX,
            start_estimate_bps: None,
            loss_margin: 0.75,
            clean_loss: 0.25,
            rate_behind: 0.7,
            up_after: Duration::from_secs(4),
            settle: Duration::from_millis(1500),
        }
    }
}

/// The longest clean period asked before a step up (after repeated failed steps up).
pub const MAX_UP_AFTER: Duration = Duration::from_secs(60);

/// Why the rung changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// The first rung: the highest the cap (and the first estimate) allow.
    Start,
    /// Loss beyond what the rung's FEC repairs (with the margin).
    Loss,
    /// The receive rate fell behind the rung's bitrate.
    Rate,
    /// A clean period: one rung up.
    Clean,
}

/// What the session measured at one time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Observation {
    /// Time on the caller's clock (monotonic, from any origin).
    pub at: Duration,
    /// Loss rate over the meter's window, in [0, 1] (None: not measured yet).
    pub loss: Option<f64>,
    /// Rate of valid symbols received over the caller's window, bit/s (None: not measured).
    pub received_bps: Option<u64>,
}

/// A decided switch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Switch {
    /// The rung left (index in the ladder, lowest bitrate first).
    pub from: usize,
    /// The rung to play.
    pub to: usize,
    /// Why.
    pub reason: Reason,
}

/// A ladder the decision cannot work on.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum AbrError {
    /// No rung.
    #[error("a title to adapt over needs at least one rung")]
    Empty,
    /// Rungs not in increasing bitrate.
    #[error("the rungs must go up in bitrate (rung {0} is not above the one before)")]
    NotIncreasing(usize),
    /// A share outside [0, 1] or a repairable loss outside it.
    #[error("{0} must be in [0, 1]")]
    NotAShare(&'static str),
}

/// The rung decision (see the module documentation).
#[derive(Clone, Debug)]
pub struct Abr {
    rungs: Vec<Rung>,
    config: AbrConfig,
    current: usize,
    /// Observations before this are ignored.
    settle_until: Duration,
    /// Start of the current clean period.
    clean_since: Option<Duration>,
    /// Clean time asked before the next step up.
    up_after: Duration,
    /// When the last step up happened.
    last_up: Option<Duration>,
}

fn share(v: f64, what: &'static str) -> Result<(), AbrError> {
    if (0.0..=1.0).contains(&v) {
        Ok(())
    } else {
        Err(AbrError::NotAShare(what))
    }
}

impl Abr {
    /// The decision over `rungs` (lowest bitrate first), starting at `at` on the rung
    /// [`Abr::current`] names.
    pub fn new(rungs: Vec<Rung>, config: AbrConfig, at: Duration) -> Result<Abr, AbrError> {
        if rungs.is_empty() {
            return Err(AbrError::Empty);
        }
        for (i, w) in rungs.windows(2).enumerate() {
            if w[1].bitrate_bps <= w[0].bitrate_bps {
                return Err(AbrError::NotIncreasing(i + 1));
            }
        }
        for r in &rungs {
            share(r.repairable_loss, "a rung's repairable loss")?;
        }
        share(config.loss_margin, "loss_margin")?;
        share(config.clean_loss, "clean_loss")?;
        share(config.rate_behind, "rate_behind")?;
        let cap = config
            .start_estimate_bps
            .map_or(config.max_bitrate_bps, |e| e.min(config.max_bitrate_bps));
        let current = highest_under(&rungs, cap);
        Ok(Abr {
            rungs,
            config,
            current,
            settle_until: at + config.settle,
            clean_since: None,
            up_after: config.up_after,
            last_up: None,
        })
    }

    /// The rung to play now.
    pub fn current(&self) -> usize {
        self.current
    }

    /// The ladder.
    pub fn rungs(&self) -> &[Rung] {
        &self.rungs
    }

    /// The clean time asked before the next step up.
    pub fn up_after(&self) -> Duration {
        self.up_after
    }

    /// Takes one observation; a switch if one is decided (the rung is then already
    /// [`Abr::current`]).
    pub fn observe(&mut self, obs: Observation) -> Option<Switch> {
        if obs.at < self.settle_until {
            return None;
        }
        let rung = self.rungs[self.current];
        let lossy = obs
            .loss
            .is_some_and(|l| l > self.config.loss_margin * rung.repairable_loss);
        let behind = obs
            .received_bps
            .is_some_and(|r| (r as f64) < self.config.rate_behind * rung.bitrate_bps as f64);
        if lossy || behind {
            self.clean_since = None;
            if self.current == 0 {
                return None;
            }
            let reason = if lossy { Reason::Loss } else { Reason::Rate };
            if self
                .last_up
                .is_some_and(|up| obs.at.saturating_sub(up) < self.up_after * 2)
            {
                self.up_after = (self.up_after * 2).min(MAX_UP_AFTER);
            }
            return Some(self.switch(self.current - 1, reason, obs.at));
        }
        let top = highest_under(&self.rungs, self.config.max_bitrate_bps);
        if self.current >= top {
            self.clean_since = None;
            return None;
        }
        // Unmeasured: neither breaks nor extends the clean period.
        let loss = obs.loss?;
        let above = self.rungs[self.current + 1];
        if loss > self.config.clean_loss * above.repairable_loss {
            self.clean_since = None;
            return None;
        }
        let since = *self.clean_since.get_or_insert(obs.at);
        if obs.at.saturating_sub(since) < self.up_after {
            return None;
        }
        self.last_up = Some(obs.at);
        Some(self.switch(self.current + 1, Reason::Clean, obs.at))
    }

    fn switch(&mut self, to: usize, reason: Reason, at: Duration) -> Switch {
        let from = self.current;
        self.current = to;
        self.clean_since = None;
        self.settle_until = at + self.config.settle;
        Switch { from, to, reason }
    }
}

/// A path's rate is measured for a first estimate only if the probe's bytes after its first
/// read span at least this long, or are at least [`MIN_PROBE_BYTES`] (a few reads coming
/// at once tell nothing of a rate).
pub const MIN_PROBE_SPAN: Duration = Duration::from_millis(10);
/// See [`MIN_PROBE_SPAN`].
pub const MIN_PROBE_BYTES: u64 = 32 << 10;
/// The share of the measured rate a first estimate allows for a rung's bitrate: the stream
/// carries repair symbols on top (1/7 more at k = 223, m = 32; 1/3 at k = 12, m = 4) and
/// headers, and a TCP probe measures the path before the stream competes with anything.
pub const PROBE_HEADROOM: f64 = 0.7;

/// The first estimate of a probe that read `bytes` after its first read over `span`:
/// [`PROBE_HEADROOM`] of their rate, or None when the sample is too short to tell a rate.
pub fn first_estimate_bps(bytes: u64, span: Duration) -> Option<u64> {
    if span.is_zero() || (span < MIN_PROBE_SPAN && bytes < MIN_PROBE_BYTES) {
        return None;
    }
    let bps = bytes as f64 * 8.0 / span.as_secs_f64() * PROBE_HEADROOM;
    Some(bps.min(u64::MAX as f64) as u64)
}

/// The highest rung whose bitrate is at most `cap` (the lowest if none is).
fn highest_under(rungs: &[Rung], cap: u64) -> usize {
    rungs
        .iter()
        .rposition(|r| r.bitrate_bps <= cap)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
