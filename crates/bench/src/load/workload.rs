//! The load's workload, sans IO: which title each session plays, when it starts and how long
//! it lasts. Pure and deterministic for a seed.
//!
//! - Popularity: Zipf, `p_i ∝ 1 / i^s` for title `i = 1..=T` (s = 0.729 by default: Dan et
//!   al.'s θ = 0.271).
//! - Arrivals: Poisson at the rate `λ = N / m` that holds `N` concurrent sessions on average
//!   (Little's law, `m` the mean session length, [`mean_session_s`]).
//! - Session length: with probability `1 − a` the whole title; with probability `a`
//!   (early abandonment) an exponential time of mean `f × title`, clamped to
//!   `[min_session_s, title]`.
//! - Warm start: so the load is at `N` from the first seconds, `N` sessions start in the
//!   first second, each lasting a uniform fraction `(0, 1]` of a drawn length (clamped to
//!   `min_session_s`), as sessions already in progress would; arrivals follow from then on.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// Parameters of a schedule.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkloadConfig {
    /// Number of titles `T` (at least 1).
    pub titles: usize,
    /// Length of every title, seconds.
    pub title_s: f64,
    /// Concurrent sessions to hold on average (`N`).
    pub concurrency: usize,
    /// Arrivals are drawn in `[0, horizon_s)`.
    pub horizon_s: f64,
    /// Zipf exponent `s` of the popularity (0.729).
    pub zipf_exponent: f64,
    /// Probability `a` that a session is abandoned early.
    pub abandon_probability: f64,
    /// Mean abandoned length as a fraction `f` of the title.
    pub abandon_mean_fraction: f64,
    /// Shortest session, seconds.
    pub min_session_s: f64,
    /// Seed of the schedule.
    pub seed: u64,
}

impl WorkloadConfig {
    /// The defaults of `bench load` for `titles`, `title_s`, `concurrency` and `horizon_s`:
    /// exponent 0.729, half of the sessions abandoned after a mean of a quarter of the title,
    /// at least 2 s each.
    pub fn new(titles: usize, title_s: f64, concurrency: usize, horizon_s: f64) -> Self {
        WorkloadConfig {
            titles,
            title_s,
            concurrency,
            horizon_s,
            zipf_exponent: 0.729,
            abandon_probability: 0.5,
            abandon_mean_fraction: 0.25,
            min_session_s: 2.0,
            seed: 1,
        }
    }
}

/// One planned session.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionPlan {
    /// When the client asks for the title, seconds from the start of the run.
    pub start_s: f64,
    /// Index of the title (0 is the most popular).
    pub title: usize,
    /// How long the client plays, seconds (at most the title).
    pub length_s: f64,
}

/// Popularity of each title: `p_i ∝ 1 / i^s`, summing to 1 (empty for no titles).
pub fn zipf_probabilities(titles: usize, exponent: f64) -> Vec<f64> {
    let w: Vec<f64> = (1..=titles).map(|i| (i as f64).powf(-exponent)).collect();
    let sum: f64 = w.iter().sum();
    w.into_iter().map(|x| x / sum).collect()
}

/// The shortest session of `cfg`, no longer than the title.
fn min_len_s(cfg: &WorkloadConfig) -> f64 {
    cfg.min_session_s.clamp(0.0, cfg.title_s.max(0.0))
}

/// Mean session length `m` of `cfg`, seconds (analytic): `(1 − a) D + a E[clamp(X, lo, D)]`
/// with `X` exponential of mean `μ = f D`: `E = lo + μ (e^{−lo/μ} − e^{−D/μ})`.
pub fn mean_session_s(cfg: &WorkloadConfig) -> f64 {
    let d = cfg.title_s.max(0.0);
    let lo = min_len_s(cfg);
    let mu = cfg.abandon_mean_fraction * d;
    let abandoned = if mu > 0.0 {
        lo + mu * ((-lo / mu).exp() - (-d / mu).exp())
    } else {
        lo
    };
    let a = cfg.abandon_probability.clamp(0.0, 1.0);
    (1.0 - a) * d + a * abandoned
}

/// Draws a title index by inverse transform over the cumulative popularity.
fn draw_title(cum: &[f64], rng: &mut StdRng) -> usize {
    let u: f64 = rng.random();
    cum.partition_point(|&c| c <= u)
        .min(cum.len().saturating_sub(1))
}

/// Draws a session length from the documented distribution.
fn draw_length(cfg: &WorkloadConfig, rng: &mut StdRng) -> f64 {
    let d = cfg.title_s.max(0.0);
    if rng.random::<f64>() >= cfg.abandon_probability {
        return d;
    }
    let mu = cfg.abandon_mean_fraction * d;
    let u: f64 = rng.random();
    let x = -mu * (1.0 - u).ln();
    x.clamp(min_len_s(cfg), d)
}

/// The schedule of `cfg`, sorted by start time: the warm start, then Poisson arrivals.
pub fn schedule(cfg: &WorkloadConfig) -> Vec<SessionPlan> {
    if cfg.titles == 0 || cfg.concurrency == 0 || cfg.title_s <= 0.0 || cfg.horizon_s <= 0.0 {
        return Vec::new();
    }
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let mut cum = zipf_probabilities(cfg.titles, cfg.zipf_exponent);
    let mut acc = 0.0;
    for p in &mut cum {
        acc += *p;
        *p = acc;
    }
    let mut plans = Vec::new();
    let warm_s = cfg.horizon_s.min(1.0);
    for _ in 0..cfg.concurrency {
        let start_s = rng.random::<f64>() * warm_s;
        let title = draw_title(&cum, &mut rng);
        let frac = 1.0 - rng.random::<f64>();
        let length_s = (draw_length(cfg, &mut rng) * frac).clamp(min_len_s(cfg), cfg.title_s);
        plans.push(SessionPlan {
            start_s,
            title,
            length_s,
        });
    }
    let rate_per_s = cfg.concurrency as f64 / mean_session_s(cfg).max(1e-3);
    let mut t = 0.0;
    loop {
        t += -(1.0 - rng.random::<f64>()).ln() / rate_per_s;
        if t >= cfg.horizon_s {
            break;
        }
        let title = draw_title(&cum, &mut rng);
        let length_s = draw_length(cfg, &mut rng);
        plans.push(SessionPlan {
            start_s: t,
            title,
            length_s,
        });
    }
    plans.sort_by(|a, b| a.start_s.total_cmp(&b.start_s));
    plans
}

/// Sessions of `plans` in progress at `t_s` (started, not yet ended).
pub fn active_at(plans: &[SessionPlan], t_s: f64) -> usize {
    plans
        .iter()
        .filter(|p| p.start_s <= t_s && t_s < p.start_s + p.length_s)
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cfg_strategy() -> impl Strategy<Value = WorkloadConfig> {
        (
            1usize..40,
            1.0f64..120.0,
            1usize..300,
            0.5f64..60.0,
            0.0f64..1.0,
            0.05f64..1.0,
            any::<u64>(),
        )
            .prop_map(|(titles, title_s, n, horizon_s, a, f, seed)| {
                let mut c = WorkloadConfig::new(titles, title_s, n, horizon_s);
                c.abandon_probability = a;
                c.abandon_mean_fraction = f;
                c.seed = seed;
                c
            })
    }

    proptest! {
        #[test]
        fn every_planned_session_is_within_its_bounds(cfg in cfg_strategy()) {
            let plans = schedule(&cfg);
            prop_assert!(plans.len() >= cfg.concurrency);
            for w in plans.windows(2) {
                prop_assert!(w[0].start_s <= w[1].start_s);
            }
            for p in &plans {
                prop_assert!(p.title < cfg.titles);
                prop_assert!(p.start_s >= 0.0 && p.start_s < cfg.horizon_s);
                prop_assert!(p.length_s >= min_len_s(&cfg) - 1e-9);
                prop_assert!(p.length_s <= cfg.title_s + 1e-9);
            }
        }

        #[test]
        fn the_schedule_is_a_function_of_its_seed(cfg in cfg_strategy()) {
            prop_assert_eq!(schedule(&cfg), schedule(&cfg));
        }

        #[test]
        fn zipf_probabilities_sum_to_one_and_fall(t in 1usize..500, s in 0.0f64..2.0) {
            let p = zipf_probabilities(t, s);
            prop_assert_eq!(p.len(), t);
            prop_assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-9);
            for w in p.windows(2) {
                prop_assert!(w[0] >= w[1]);
            }
        }

        #[test]
        fn the_mean_length_lies_between_the_shortest_and_the_title(cfg in cfg_strategy()) {
            let m = mean_session_s(&cfg);
            prop_assert!(m >= min_len_s(&cfg) - 1e-9 && m <= cfg.title_s + 1e-9);
        }
    }

    #[test]
    fn the_drawn_lengths_average_to_the_analytic_mean() {
        let cfg = WorkloadConfig::new(20, 60.0, 200, 3000.0);
        let plans = schedule(&cfg);
        let arrivals: Vec<_> = plans.iter().skip(cfg.concurrency).collect();
        let mean = arrivals.iter().map(|p| p.length_s).sum::<f64>() / arrivals.len() as f64;
        let m = mean_session_s(&cfg);
        assert!((mean - m).abs() < 0.05 * m, "drawn {mean}, analytic {m}");
    }

    #[test]
    fn the_load_holds_about_n_sessions_and_the_first_title_is_the_most_popular() {
        let cfg = WorkloadConfig::new(20, 30.0, 100, 600.0);
        let plans = schedule(&cfg);
        for t in [0.9, 10.0, 100.0, 300.0, 550.0] {
            let n = active_at(&plans, t) as f64;
            assert!((60.0..140.0).contains(&n), "{n} sessions at {t} s");
        }
        let mut counts = vec![0usize; cfg.titles];
        for p in &plans {
            counts[p.title] += 1;
        }
        let share = counts[0] as f64 / plans.len() as f64;
        let want = zipf_probabilities(20, 0.729)[0];
        assert!(
            (share - want).abs() < 0.03,
            "title 0: {share} of sessions, want {want}"
        );
        assert!(counts[0] > counts[19], "{counts:?}");
    }
}
