//! Seeded, deterministic packet impairment: Gilbert-Elliott burst loss and byte corruption.
//!
//! This kernel has no netem, so isnode injects loss itself, on receive (`isnode play --loss`)
//! or in a relay between processes (`isnode relay`). The loss model is the two-state
//! Gilbert-Elliott chain in its simple form: in the *good* state every packet passes, in the
//! *bad* state every packet is lost. With `p` = P(good → bad) and `r` = P(bad → good),
//!
//! ```text
//! average loss rate   P = p / (p + r)       (the stationary share of the bad state)
//! mean burst length   L = 1 / r             (a run of losses is geometric)
//! so                  r = 1 / L,  p = P·r / (1 − P)
//! ```
//!
//! Without a burst length the losses are independent (Bernoulli with rate P), which is the
//! same chain with `L = 1 / (1 − P)`. A burst length is feasible only if `p <= 1`, i.e.
//! `L >= P / (1 − P)`: a loss rate of 60 % cannot be made of isolated losses.
//!
//! Corruption is independent of loss: each packet that is not lost is corrupted with
//! probability `corrupt` by XOR-ing one byte at a uniformly random position with a random
//! non-zero value (which CRC32C always detects).
//!
//! Everything is driven by a ChaCha8 generator seeded with the given seed: the same seed and
//! the same sequence of packet lengths give the same decisions on every machine.

use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Parameters of an [`Impairer`]; also the `--loss/--burst/--corrupt/--seed` flags of
/// `isnode play` (injected on receive) and `isnode relay` (injected on forwarding).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ImpairConfig {
    /// Average loss rate P in `[0, 1]` (Gilbert-Elliott).
    pub loss: f64,
    /// Mean length of a loss burst, in packets (>= 1); default: independent losses.
    pub burst: Option<f64>,
    /// Probability in `[0, 1]` that a packet that is not lost gets one byte flipped.
    pub corrupt: f64,
    /// Seed of the injected loss and corruption.
    pub seed: u64,
}

impl Default for ImpairConfig {
    fn default() -> Self {
        ImpairConfig {
            loss: 0.0,
            burst: None,
            corrupt: 0.0,
            seed: 0,
        }
    }
}

impl ImpairConfig {
    /// True if this configuration never drops nor corrupts a packet.
    pub fn is_transparent(&self) -> bool {
        self.loss <= 0.0 && self.corrupt <= 0.0
    }
}

/// Invalid impairment parameters.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ImpairError {
    /// A probability is outside `[0, 1]` (or not a number).
    #[error("{what} must be a probability in [0, 1], got {value}")]
    NotAProbability {
        /// Which parameter.
        what: &'static str,
        /// The value given.
        value: f64,
    },
    /// The burst length is below 1 packet (or not a number).
    #[error("--burst must be a mean burst length of at least 1 packet, got {0}")]
    BurstTooShort(f64),
    /// The loss rate cannot be made of bursts that short.
    #[error(
        "a loss rate of {loss} needs a mean burst length of at least {min_burst:.3} packets \
         (bursts are separated by at least one received packet), got {burst}"
    )]
    Infeasible {
        /// The loss rate.
        loss: f64,
        /// The burst length given.
        burst: f64,
        /// The smallest feasible burst length, P / (1 - P).
        min_burst: f64,
    },
    /// A loss step's time is not a time (negative, infinite or not a number).
    #[error("a loss step's time must be seconds >= 0, got {0}")]
    NotATime(f64),
    /// A loss step that cannot be taken.
    #[error("--loss-step {after_s}:{loss}")]
    Step {
        /// The step's time.
        after_s: f64,
        /// The step's loss rate.
        loss: f64,
        /// What is wrong with it.
        #[source]
        source: Box<ImpairError>,
    },
}

/// What an [`Impairer`] did to one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The packet passes unchanged.
    Pass,
    /// The packet is lost: the caller must drop it.
    Drop,
    /// One byte of the packet was flipped in place; the caller delivers it.
    Corrupted,
}

/// Counters of an [`Impairer`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ImpairStats {
    /// Packets seen.
    pub packets: u64,
    /// Packets dropped.
    pub dropped: u64,
    /// Packets corrupted (and delivered).
    pub corrupted: u64,
}

/// A seeded Gilbert-Elliott loss and corruption generator (see the module documentation).
#[derive(Clone, Debug)]
pub struct Impairer {
    rng: ChaCha8Rng,
    /// P(good → bad).
    p: f64,
    /// P(bad → good).
    r: f64,
    corrupt: f64,
    bad: bool,
    stats: ImpairStats,
}

fn check_probability(what: &'static str, value: f64) -> Result<(), ImpairError> {
    if (0.0..=1.0).contains(&value) {
        Ok(())
    } else {
        Err(ImpairError::NotAProbability { what, value })
    }
}

impl Impairer {
    /// Builds an impairer, checking the parameters.
    pub fn new(config: &ImpairConfig) -> Result<Impairer, ImpairError> {
        check_probability("--loss", config.loss)?;
        check_probability("--corrupt", config.corrupt)?;
        let loss = config.loss;
        let (p, r) = if loss >= 1.0 {
            (1.0, 0.0)
        } else {
            match config.burst {
                None => (loss, 1.0 - loss),
                Some(burst) => {
                    if burst.is_nan() || burst < 1.0 {
                        return Err(ImpairError::BurstTooShort(burst));
                    }
                    let r = 1.0 / burst;
                    let p = loss * r / (1.0 - loss);
                    if p > 1.0 + 1e-12 {
                        return Err(ImpairError::Infeasible {
                            loss,
                            burst,
                            min_burst: loss / (1.0 - loss),
                        });
                    }
                    (p.min(1.0), r)
                }
            }
        };
        let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
        // Start in the stationary distribution so that short runs have the right mean.
        let bad = loss > 0.0 && rng.random_bool(loss);
        Ok(Impairer {
            rng,
            p,
            r,
            corrupt: config.corrupt,
            bad,
            stats: ImpairStats::default(),
        })
    }

    /// Decides the fate of one packet; on [`Verdict::Corrupted`] one byte of `packet` has
    /// been flipped. An empty packet can be dropped but not corrupted.
    pub fn apply(&mut self, packet: &mut [u8]) -> Verdict {
        self.stats.packets += 1;
        let lost = self.bad;
        // Transition for the next packet.
        self.bad = if self.bad {
            !(self.r > 0.0 && self.rng.random_bool(self.r))
        } else {
            self.p > 0.0 && self.rng.random_bool(self.p)
        };
        if lost {
            self.stats.dropped += 1;
            return Verdict::Drop;
        }
        if self.corrupt > 0.0 && !packet.is_empty() && self.rng.random_bool(self.corrupt) {
            let at = self.rng.random_range(0..packet.len());
            let flip: u8 = self.rng.random_range(1..=255);
            packet[at] ^= flip;
            self.stats.corrupted += 1;
            return Verdict::Corrupted;
        }
        Verdict::Pass
    }

    /// Counters so far.
    pub fn stats(&self) -> ImpairStats {
        self.stats
    }

    /// True if it never drops nor corrupts a packet from now on.
    fn is_transparent(&self) -> bool {
        self.p <= 0.0 && !self.bad && self.corrupt <= 0.0
    }
}

/// One `--loss-step SECONDS:LOSS` (of `isnode relay` and `isnode play`): the loss rate
/// from a time on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LossStep {
    /// Seconds after the schedule's start (the relay's first datagram; play's start).
    pub after_s: f64,
    /// The loss rate from then on, in [0, 1].
    pub loss: f64,
}

impl std::str::FromStr for LossStep {
    type Err = String;

    /// `SECONDS:LOSS`, e.g. `8:0.25`.
    fn from_str(s: &str) -> Result<LossStep, String> {
        let (t, l) = s
            .split_once(':')
            .ok_or_else(|| format!("{s:?}: a loss step is SECONDS:LOSS, e.g. 8:0.25"))?;
        let after_s: f64 = t
            .trim()
            .parse()
            .map_err(|e| format!("{t:?}: not seconds: {e}"))?;
        let loss: f64 = l
            .trim()
            .parse()
            .map_err(|e| format!("{l:?}: not a loss rate: {e}"))?;
        if !after_s.is_finite() || after_s < 0.0 {
            return Err(format!("{t:?}: seconds must be >= 0"));
        }
        Ok(LossStep { after_s, loss })
    }
}

/// A step not taken yet.
#[derive(Clone, Debug)]
struct Pending {
    at: Duration,
    loss: f64,
    impairer: Impairer,
}

/// An [`Impairer`] whose loss rate changes at the times of its [`LossStep`]s: from a step's
/// time on, the loss is the step's, the burst length and corruption the configuration's,
/// drawn from the seed `seed + step number` (1 for the earliest step). The caller tells the
/// time since the schedule's start ([`ScheduledImpairer::advance`]).
#[derive(Clone, Debug)]
pub struct ScheduledImpairer {
    now: Impairer,
    /// The steps not taken yet, the latest first (popped in time order).
    pending: Vec<Pending>,
    /// Counters of the impairers replaced by a step.
    before: ImpairStats,
}

impl ScheduledImpairer {
    /// The impairment of `config`, changed by `steps` (in any order); every step checked.
    pub fn new(
        config: &ImpairConfig,
        steps: &[LossStep],
    ) -> Result<ScheduledImpairer, ImpairError> {
        let now = Impairer::new(config)?;
        let mut steps = steps.to_vec();
        steps.sort_by(|a, b| a.after_s.total_cmp(&b.after_s));
        let mut pending = steps
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let err = |source| ImpairError::Step {
                    after_s: s.after_s,
                    loss: s.loss,
                    source: Box::new(source),
                };
                let at = Duration::try_from_secs_f64(s.after_s)
                    .map_err(|_| err(ImpairError::NotATime(s.after_s)))?;
                let step = ImpairConfig {
                    loss: s.loss,
                    seed: config.seed.wrapping_add(i as u64 + 1),
                    ..*config
                };
                let impairer = Impairer::new(&step).map_err(err)?;
                Ok(Pending {
                    at,
                    loss: s.loss,
                    impairer,
                })
            })
            .collect::<Result<Vec<_>, ImpairError>>()?;
        pending.reverse();
        Ok(ScheduledImpairer {
            now,
            pending,
            before: ImpairStats::default(),
        })
    }

    /// True if neither the impairment now nor any step ever drops or corrupts a packet.
    pub fn is_transparent(&self) -> bool {
        self.now.is_transparent() && self.pending.iter().all(|p| p.impairer.is_transparent())
    }

    /// Takes the steps due `since_start` after the schedule's start.
    pub fn advance(&mut self, since_start: Duration) {
        while self.pending.last().is_some_and(|p| since_start >= p.at) {
            if let Some(p) = self.pending.pop() {
                tracing::info!(
                    "injected loss {} from {:.1} s on",
                    p.loss,
                    p.at.as_secs_f64()
                );
                self.before = self.before.plus(self.now.stats());
                self.now = p.impairer;
            }
        }
    }

    /// Decides the fate of one packet (see [`Impairer::apply`]).
    pub fn apply(&mut self, packet: &mut [u8]) -> Verdict {
        self.now.apply(packet)
    }

    /// Counters so far, over every step taken.
    pub fn stats(&self) -> ImpairStats {
        self.before.plus(self.now.stats())
    }
}

impl ImpairStats {
    /// The counters of both.
    pub fn plus(self, other: ImpairStats) -> ImpairStats {
        ImpairStats {
            packets: self.packets + other.packets,
            dropped: self.dropped + other.dropped,
            corrupted: self.corrupted + other.corrupted,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `n` packets, returns (loss rate, mean burst length, corrupt rate among delivered).
    fn measure(config: &ImpairConfig, n: usize) -> (f64, f64, f64) {
        let mut imp = Impairer::new(config).unwrap();
        let mut buf = [0u8; 16];
        let (mut lost, mut bursts, mut run, mut corrupt) = (0u64, 0u64, 0u64, 0u64);
        for _ in 0..n {
            match imp.apply(&mut buf) {
                Verdict::Drop => {
                    lost += 1;
                    run += 1;
                }
                v => {
                    if run > 0 {
                        bursts += 1;
                        run = 0;
                    }
                    if v == Verdict::Corrupted {
                        corrupt += 1;
                        assert_ne!(buf, [0u8; 16], "a corrupted packet differs");
                        buf = [0u8; 16];
                    }
                }
            }
        }
        if run > 0 {
            bursts += 1;
        }
        let s = imp.stats();
        assert_eq!(
            (s.packets, s.dropped, s.corrupted),
            (n as u64, lost, corrupt)
        );
        let delivered = n as u64 - lost;
        (
            lost as f64 / n as f64,
            lost as f64 / bursts.max(1) as f64,
            corrupt as f64 / delivered.max(1) as f64,
        )
    }

    #[test]
    fn gilbert_elliott_rate_and_burst() {
        for &(loss, burst) in &[(0.05, 4.0), (0.01, 1.0), (0.2, 10.0), (0.1, 2.5)] {
            let cfg = ImpairConfig {
                loss,
                burst: Some(burst),
                corrupt: 0.0,
                seed: 7,
            };
            let (rate, mean_burst, _) = measure(&cfg, 1_000_000);
            assert!(
                (rate - loss).abs() < 0.1 * loss,
                "loss {loss} burst {burst}: measured rate {rate}"
            );
            assert!(
                (mean_burst - burst).abs() < 0.1 * burst,
                "loss {loss} burst {burst}: measured burst {mean_burst}"
            );
        }
    }

    #[test]
    fn independent_losses_without_burst() {
        let cfg = ImpairConfig {
            loss: 0.1,
            burst: None,
            corrupt: 0.0,
            seed: 1,
        };
        let (rate, mean_burst, _) = measure(&cfg, 500_000);
        assert!((rate - 0.1).abs() < 0.005, "{rate}");
        // Bernoulli: mean run of losses is 1 / (1 - P).
        assert!((mean_burst - 1.0 / 0.9).abs() < 0.02, "{mean_burst}");
    }

    #[test]
    fn corruption_rate() {
        let cfg = ImpairConfig {
            loss: 0.1,
            burst: Some(3.0),
            corrupt: 0.02,
            seed: 3,
        };
        let (_, _, corrupt) = measure(&cfg, 500_000);
        assert!((corrupt - 0.02).abs() < 0.002, "{corrupt}");
    }

    #[test]
    fn deterministic_for_a_seed() {
        let cfg = ImpairConfig {
            loss: 0.3,
            burst: Some(2.0),
            corrupt: 0.1,
            seed: 42,
        };
        let run = |cfg: &ImpairConfig| {
            let mut imp = Impairer::new(cfg).unwrap();
            (0..2000)
                .map(|i| {
                    let mut b = vec![i as u8; 1 + i % 50];
                    let v = imp.apply(&mut b);
                    (v, b)
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(run(&cfg), run(&cfg));
        assert_ne!(run(&cfg), run(&ImpairConfig { seed: 43, ..cfg }));
    }

    #[test]
    fn extremes_and_errors() {
        let mut none = Impairer::new(&ImpairConfig::default()).unwrap();
        let mut all = Impairer::new(&ImpairConfig {
            loss: 1.0,
            ..Default::default()
        })
        .unwrap();
        for _ in 0..1000 {
            assert_eq!(none.apply(&mut [1, 2, 3]), Verdict::Pass);
            assert_eq!(all.apply(&mut [1, 2, 3]), Verdict::Drop);
        }
        assert!(ImpairConfig::default().is_transparent());
        let bad = |loss, burst, corrupt| {
            Impairer::new(&ImpairConfig {
                loss,
                burst,
                corrupt,
                seed: 0,
            })
            .err()
        };
        assert!(matches!(
            bad(1.5, None, 0.0),
            Some(ImpairError::NotAProbability { .. })
        ));
        assert!(matches!(
            bad(0.1, None, -0.1),
            Some(ImpairError::NotAProbability { .. })
        ));
        assert!(matches!(
            bad(f64::NAN, None, 0.0),
            Some(ImpairError::NotAProbability { .. })
        ));
        assert!(matches!(
            bad(0.1, Some(0.5), 0.0),
            Some(ImpairError::BurstTooShort(_))
        ));
        assert!(matches!(
            bad(0.6, Some(1.0), 0.0),
            Some(ImpairError::Infeasible { .. })
        ));
        assert!(bad(0.5, Some(1.0), 0.0).is_none());
        // Corrupting an empty packet is a no-op, never a panic.
        let mut c = Impairer::new(&ImpairConfig {
            corrupt: 1.0,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(c.apply(&mut []), Verdict::Pass);
        assert_eq!(c.apply(&mut [0]), Verdict::Corrupted);
    }

    #[test]
    fn loss_steps_parse_and_are_checked() {
        let s: LossStep = "8:0.25".parse().unwrap();
        assert_eq!(
            s,
            LossStep {
                after_s: 8.0,
                loss: 0.25
            }
        );
        assert!("8".parse::<LossStep>().is_err());
        assert!("-1:0.1".parse::<LossStep>().is_err());
        assert!("x:0.1".parse::<LossStep>().is_err());
        // A step's loss is checked as --loss is, and named.
        let bad = ScheduledImpairer::new(&ImpairConfig::default(), &["1:1.5".parse().unwrap()])
            .unwrap_err();
        assert!(
            matches!(&bad, ImpairError::Step { source, .. }
                if matches!(**source, ImpairError::NotAProbability { .. })),
            "{bad:?}"
        );
        assert_eq!(bad.to_string(), "--loss-step 1:1.5");
        let never = LossStep {
            after_s: f64::NAN,
            loss: 0.1,
        };
        assert!(ScheduledImpairer::new(&ImpairConfig::default(), &[never]).is_err());
    }

    /// Steps given in any order are taken in time order, each from its time on, with the
    /// counters summed over them.
    #[test]
    fn a_schedule_changes_the_loss_at_its_steps() {
        let steps: Vec<LossStep> = ["12:0", "5:1"].iter().map(|s| s.parse().unwrap()).collect();
        let mut imp = ScheduledImpairer::new(&ImpairConfig::default(), &steps).unwrap();
        assert!(!imp.is_transparent(), "a step loses packets");
        let run = |imp: &mut ScheduledImpairer, at_s: u64| {
            imp.advance(Duration::from_secs(at_s));
            (0..100)
                .filter(|_| imp.apply(&mut [0u8; 4]) == Verdict::Drop)
                .count()
        };
        assert_eq!(run(&mut imp, 0), 0, "no loss before the first step");
        assert_eq!(run(&mut imp, 4), 0);
        assert_eq!(run(&mut imp, 5), 100, "loss 1 from 5 s on");
        assert_eq!(run(&mut imp, 11), 100);
        assert_eq!(run(&mut imp, 12), 0, "the loss ends at 12 s");
        assert_eq!(
            imp.stats(),
            ImpairStats {
                packets: 500,
                dropped: 200,
                corrupted: 0
            }
        );
        let none = ScheduledImpairer::new(&ImpairConfig::default(), &["3:0".parse().unwrap()]);
        assert!(none.unwrap().is_transparent());
    }
}
