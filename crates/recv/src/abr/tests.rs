use super::*;
use proptest::prelude::*;

fn ladder() -> Vec<Rung> {
    [150_000, 300_000, 600_000]
        .into_iter()
        .map(|b| Rung::new(b, 223, 32))
        .collect()
}

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

fn obs(at_ms: u64, loss: f64) -> Observation {
    Observation {
        at: ms(at_ms),
        loss: Some(loss),
        received_bps: None,
    }
}

/// Feeds `loss` every 100 ms over `[from, to)`; the switches decided, with their times.
fn run(abr: &mut Abr, from_ms: u64, to_ms: u64, loss: f64) -> Vec<(u64, Switch)> {
    (from_ms..to_ms)
        .step_by(100)
        .filter_map(|t| abr.observe(obs(t, loss)).map(|s| (t, s)))
        .collect()
}

#[test]
fn starts_on_the_highest_rung_the_cap_and_estimate_allow() {
    let at = Duration::ZERO;
    assert_eq!(
        Abr::new(ladder(), AbrConfig::default(), at)
            .unwrap()
            .current(),
        2
    );
    let capped = AbrConfig {
        max_bitrate_bps: 400_000,
        ..AbrConfig::default()
    };
    assert_eq!(Abr::new(ladder(), capped, at).unwrap().current(), 1);
    let estimated = AbrConfig {
        start_estimate_bps: Some(200_000),
        ..AbrConfig::default()
    };
    assert_eq!(Abr::new(ladder(), estimated, at).unwrap().current(), 0);
    let below_all = AbrConfig {
        max_bitrate_bps: 1,
        ..AbrConfig::default()
    };
    assert_eq!(Abr::new(ladder(), below_all, at).unwrap().current(), 0);
}

#[test]
fn refuses_ladders_it_cannot_work_on() {
    let c = AbrConfig::default();
    assert_eq!(
        Abr::new(vec![], c, Duration::ZERO).unwrap_err(),
        AbrError::Empty
    );
    let mut down = ladder();
    down.swap(0, 1);
    assert_eq!(
        Abr::new(down, c, Duration::ZERO).unwrap_err(),
        AbrError::NotIncreasing(1)
    );
    let bad = AbrConfig {
        loss_margin: 1.5,
        ..c
    };
    assert!(Abr::new(ladder(), bad, Duration::ZERO).is_err());
}

/// Loss past what the FEC repairs steps down one rung at a time (each after the settle
/// period), stays on the lowest, and a clean period steps back up one rung at a time.
#[test]
fn steps_down_under_loss_and_back_up_when_clean() {
    let mut abr = Abr::new(ladder(), AbrConfig::default(), Duration::ZERO).unwrap();
    assert!(
        run(&mut abr, 0, 5_000, 0.0).is_empty(),
        "clean on the top rung"
    );
    let down = run(&mut abr, 5_000, 15_000, 0.20);
    let moves: Vec<_> = down.iter().map(|(_, s)| (s.from, s.to, s.reason)).collect();
    assert_eq!(moves, [(2, 1, Reason::Loss), (1, 0, Reason::Loss)]);
    assert_eq!(down[0].0, 5_000, "at the first lossy observation");
    assert_eq!(down[1].0, 6_500, "after the settle period");
    let up = run(&mut abr, 15_000, 40_000, 0.0);
    let moves: Vec<_> = up.iter().map(|(_, s)| (s.from, s.to, s.reason)).collect();
    assert_eq!(moves, [(0, 1, Reason::Clean), (1, 2, Reason::Clean)]);
    assert_eq!(up[0].0, 19_000, "after a clean period of up_after");
    assert_eq!(
        up[1].0,
        19_000 + 1_500 + 4_000,
        "settle, then another clean period"
    );
}

/// Loss the FEC repairs (below the margin) moves nothing; loss below the clean share of
/// the rung above does not break a clean period, loss above it does.
#[test]
fn repairable_loss_keeps_the_rung_and_slows_the_step_up() {
    let mut abr = Abr::new(ladder(), AbrConfig::default(), Duration::ZERO).unwrap();
    // 0.75 × 12.5 % = 9.4 %: 9 % stays.
    assert!(run(&mut abr, 0, 20_000, 0.09).is_empty());
    let mut low = Abr::new(
        ladder(),
        AbrConfig {
            max_bitrate_bps: 200_000,
            ..AbrConfig::default()
        },
        Duration::ZERO,
    )
    .unwrap();
    assert_eq!(low.current(), 0);
    assert!(
        run(&mut low, 0, 20_000, 0.05).is_empty(),
        "capped: never up"
    );
}

#[test]
fn a_clean_period_broken_by_some_loss_starts_again() {
    let mut abr = Abr::new(
        ladder(),
        AbrConfig {
            start_estimate_bps: Some(150_000),
            ..AbrConfig::default()
        },
        Duration::ZERO,
    )
    .unwrap();
    assert!(run(&mut abr, 1_500, 4_500, 0.0).is_empty());
    // 5 % > 0.25 × 12.5 %: the clean period breaks, without a step down (5 % is repaired).
    assert!(abr.observe(obs(4_500, 0.05)).is_none());
    let up = run(&mut abr, 4_600, 20_000, 0.0);
    assert_eq!(up[0].0, 8_600, "a whole clean period from the break");
}

#[test]
fn a_receive_rate_behind_steps_down_and_unmeasured_observations_change_nothing() {
    let mut abr = Abr::new(ladder(), AbrConfig::default(), Duration::ZERO).unwrap();
    let none = Observation {
        at: ms(2_000),
        loss: None,
        received_bps: None,
    };
    assert!(abr.observe(none).is_none());
    let slow = Observation {
        at: ms(2_100),
        loss: Some(0.0),
        received_bps: Some(300_000),
    };
    let s = abr.observe(slow).unwrap();
    assert_eq!((s.from, s.to, s.reason), (2, 1, Reason::Rate));
    // Unmeasured observations neither start nor break a clean period.
    let mut t = 4_000;
    assert!(abr.observe(obs(t, 0.0)).is_none());
    while t < 7_900 {
        t += 100;
        let o = Observation {
            at: ms(t),
            loss: None,
            received_bps: None,
        };
        assert!(abr.observe(o).is_none());
    }
    let s = abr.observe(obs(8_000, 0.0)).unwrap();
    assert_eq!((s.to, s.reason), (2, Reason::Clean));
}

/// A rung that does not hold after a step up is tried again only after twice the clean
/// period, and so on up to the bound.
#[test]
fn a_failed_step_up_doubles_the_clean_period() {
    let mut abr = Abr::new(ladder(), AbrConfig::default(), Duration::ZERO).unwrap();
    run(&mut abr, 2_000, 2_100, 0.5); // 2 -> 1
    let up = run(&mut abr, 3_600, 10_000, 0.0);
    assert_eq!(up.len(), 1);
    let t_up = up[0].0;
    let down = run(&mut abr, t_up + 1_500, t_up + 1_600, 0.5);
    assert_eq!(down.len(), 1);
    assert_eq!(abr.up_after(), Duration::from_secs(8));
    for _ in 0..10 {
        abr.up_after = (abr.up_after * 2).min(MAX_UP_AFTER);
    }
    assert_eq!(abr.up_after(), MAX_UP_AFTER);
}

proptest! {
    /// Whatever the observations: the rung stays in the ladder and under the cap (or the
    /// lowest), moves one rung at a time, only after the settle period, down only on loss
    /// or rate and up only on a clean period, and the same inputs give the same decisions.
    #[test]
    fn decisions_are_bounded_and_deterministic(
        steps in proptest::collection::vec(
            (0u64..700, proptest::option::of(0.0f64..0.6), proptest::option::of(0u64..900_000)),
            1..200,
        ),
        cap in 100_000u64..1_000_000,
    ) {
        let config = AbrConfig { max_bitrate_bps: cap, ..AbrConfig::default() };
        let mut a = Abr::new(ladder(), config, Duration::ZERO).unwrap();
        let mut b = a.clone();
        let top = highest_under(&ladder(), cap);
        let mut at = Duration::ZERO;
        let mut last_switch: Option<Duration> = None;
        for (dt, loss, rate) in steps {
            at += ms(dt);
            let o = Observation { at, loss, received_bps: rate };
            let before = a.current();
            let s = a.observe(o);
            prop_assert_eq!(s, b.observe(o));
            prop_assert!(a.current() <= top.max(before));
            if let Some(s) = s {
                prop_assert_eq!(s.from, before);
                prop_assert_eq!(s.to.abs_diff(s.from), 1);
                prop_assert!(last_switch.is_none_or(|t| at >= t + config.settle));
                let rung = ladder()[s.from];
                match s.reason {
                    Reason::Clean => {
                        prop_assert!(s.to > s.from);
                        prop_assert!(loss.is_some());
                    }
                    Reason::Loss => prop_assert!(
                        loss.is_some_and(|l| l > config.loss_margin * rung.repairable_loss)
                    ),
                    Reason::Rate => prop_assert!(rate.is_some()),
                    Reason::Start => prop_assert!(false, "Start is never decided"),
                }
                last_switch = Some(at);
            }
            prop_assert_eq!(a.current(), b.current());
        }
    }
}

/// A probe's first estimate: 0.7 of its rate, none from a sample too short to tell one,
/// and play starts on the highest rung under it and the cap.
#[test]
fn a_probe_gives_a_first_estimate_when_it_tells_a_rate() {
    // 125 000 bytes in 1 s: 1 Mbit/s, 0.7 of it allowed.
    assert_eq!(
        first_estimate_bps(125_000, Duration::from_secs(1)),
        Some(700_000)
    );
    // A slow path read for the probe's whole budget: few bytes, a long span.
    assert_eq!(
        first_estimate_bps(12_500, Duration::from_millis(400)),
        Some(175_000)
    );
    // A fast path: many bytes in under the least span.
    assert_eq!(
        first_estimate_bps(256 << 10, Duration::from_millis(2)),
        Some((262_144.0 * 8.0 / 0.002 * PROBE_HEADROOM) as u64)
    );
    // Nothing after the first read, or a few reads at once: no rate.
    assert_eq!(first_estimate_bps(0, Duration::ZERO), None);
    assert_eq!(first_estimate_bps(16 << 10, Duration::ZERO), None);
    assert_eq!(first_estimate_bps(16 << 10, Duration::from_millis(1)), None);
    let start = |estimate| {
        let config = AbrConfig {
            start_estimate_bps: estimate,
            ..AbrConfig::default()
        };
        Abr::new(ladder(), config, Duration::ZERO)
            .unwrap()
            .current()
    };
    // 400 kbit/s measured: 280 kbit/s allowed, the 150 kbit/s rung (300 kbit/s is above).
    assert_eq!(start(first_estimate_bps(50_000, Duration::from_secs(1))), 0);
    assert_eq!(
        start(first_estimate_bps(125_000, Duration::from_secs(1))),
        2
    );
    assert_eq!(start(None), 2, "no estimate: the top");
}
