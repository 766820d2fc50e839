//! The planner against the published closed forms, and the simulation's verdicts.

use isnode_broadcast::sim::{simulate, Arrivals};
use isnode_broadcast::{
    harmonic_number, pagoda_streams, plan, skyscraper_channels, Plan, PlanError, PlanRequest,
    Ratio, Scheme, SchemeParams, Title,
};

const WHOLE: Arrivals = Arrivals::WholePeriod {
    random: 16,
    seed: 42,
};

fn plan_of(title: Title, wait_s: f64, scheme: Scheme) -> Plan {
    let req = PlanRequest {
        title,
        max_wait_s: wait_s,
        scheme,
        client_cap_bps: None,
    };
    plan(&req).unwrap_or_else(|e| panic!("{scheme}: {e}"))
}

/// The seed's clip with codewords of 4375 bytes (τ = 10 ms), so that a 5 s wait is exactly
/// 500 codewords and the closed forms apply without rounding: 180 s = 36 slots.
fn fine_clip() -> Title {
    Title::from_duration(180.0, 3_500_000, 4375).unwrap()
}

fn multiple(p: &Plan) -> f64 {
    p.server_multiple()
}

#[test]
fn cautious_harmonic_costs_the_seeds_16_26_mbps() {
    let p = plan_of(fine_clip(), 5.0, Scheme::CautiousHarmonic);
    assert_eq!(p.segments.len(), 36);
    assert!(
        (p.server_rate_bps / 1e6 - 16.26).abs() < 0.005,
        "{}",
        p.server_rate_bps
    );
    assert!((multiple(&p) - (harmonic_number(35) + 0.5)).abs() < 1e-9);
    assert_eq!(p.client.late_bytes, 0);
}

#[test]
fn harmonic_family_matches_closed_forms_at_the_planned_segment_count() {
    let t = fine_clip();
    let hb = plan_of(t, 5.0, Scheme::Harmonic);
    assert!((multiple(&hb) - harmonic_number(36)).abs() < 1e-9);
    let phb = plan_of(t, 5.0, Scheme::Polyharmonic { m: 4 });
    // Slots of 125 codewords, wait 4 slots, 144 segments: H(147) − H(3).
    assert_eq!(phb.segments.len(), 144);
    let want = harmonic_number(147) - harmonic_number(3);
    assert!((multiple(&phb) - want).abs() < 1e-9, "{}", multiple(&phb));
    assert!((phb.client.worst_wait_s - 5.0).abs() < 1e-9);
}

#[test]
fn quasi_harmonic_matches_its_closed_form_when_fragments_are_whole_codewords() {
    // Slots of 105 codewords: segments 2, 3, 4 cut into 3, 5, 7 fragments exactly (m = 2).
    let t = Title::new(420, 1000, 8000).unwrap(); // τ = 1 s
    let p = plan_of(t, 105.0, Scheme::QuasiHarmonic { m: 2 });
    let want = 1.0 + 2.0 / 3.0 + 2.0 / 5.0 + 2.0 / 7.0;
    assert!((multiple(&p) - want).abs() < 1e-9, "{}", multiple(&p));
    let sim = simulate(&p, WHOLE);
    assert_eq!(sim.max_late_bytes, 0);
}

#[test]
fn fixed_rate_schemes_match_their_channel_counts() {
    let t = fine_clip();
    let n = 36;
    assert_eq!(plan_of(t, 5.0, Scheme::Staggered).channels.len(), n);
    assert_eq!(plan_of(t, 5.0, Scheme::Fast).channels.len(), 6); // 2^6 − 1 ≥ 36
    assert_eq!(
        plan_of(t, 5.0, Scheme::Pagoda).channels.len() as u64,
        pagoda_streams(n as u64)
    );
    let sky = plan_of(t, 5.0, Scheme::Skyscraper { width: 52 });
    assert_eq!(sky.channels.len() as u64, skyscraper_channels(36.0, 52).0);
    let fast = plan_of(t, 5.0, Scheme::Fast);
    for p in [&sky, &fast] {
        assert!((multiple(p) - p.channels.len() as f64).abs() < 1e-9);
    }
}

#[test]
fn pyramid_is_geometric_and_beats_its_alpha_e_closed_form() {
    let t = fine_clip();
    let p = plan_of(t, 5.0, Scheme::Pyramid);
    for w in p
        .segments
        .windows(2)
        .take(p.segments.len().saturating_sub(2))
    {
        let ratio = w[1].codewords as f64 / w[0].codewords as f64;
        assert!(ratio > 1.0, "{ratio}");
    }
    assert!(multiple(&p) <= p.nominal.server_multiple + 1e-9);
    assert!(p.client.worst_wait_s <= 5.0 + 1e-9);
    assert!(p.client.max_channels <= 2);
}

#[test]
fn harmonic_as_published_delivers_late_for_some_arrivals() {
    let t = Title::new(60, 1000, 8000).unwrap(); // 60 s, τ = 1 s
    let p = plan_of(t, 6.0, Scheme::Harmonic);
    let sim = simulate(&p, WHOLE);
    assert!(sim.late_arrivals > 0, "harmonic must show its lateness");
    // An arrival that finds every channel at the start of its cycle is on time.
    let at_zero = sim.arrivals.iter().find(|r| r.arrival == Ratio::ZERO);
    assert_eq!(at_zero.map(|r| r.late_bytes), Some(0));
    // The planner reports it too.
    assert!(p.client.late_bytes > 0);
}

#[test]
fn every_other_scheme_is_on_time_for_every_arrival() {
    let titles = [
        Title::new(60, 1000, 8000).unwrap(),
        Title::new(97, 1000, 8000).unwrap(),
        Title::from_duration(180.0, 3_500_000, 223 * 1408).unwrap(),
    ];
    for t in titles {
        for scheme in Scheme::all(SchemeParams::default()) {
            if scheme == Scheme::Harmonic {
                continue;
            }
            let p = plan_of(t, 6.0, scheme);
            let sim = simulate(&p, WHOLE);
            assert_eq!(sim.max_late_bytes, 0, "{scheme} on {t:?}");
            assert!(sim.max_wait_s <= 6.0 + 1e-9, "{scheme}: {}", sim.max_wait_s);
            assert!(p.client.worst_wait_s >= sim.max_wait_s - 1e-9, "{scheme}");
        }
    }
}

fn lcm(a: Ratio, b: Ratio) -> Ratio {
    assert_eq!((a.denom(), b.denom()), (1, 1));
    let (x, y) = (a.numer(), b.numer());
    let (mut g, mut h) = (x, y);
    while h != 0 {
        (g, h) = (h, g % h);
    }
    Ratio::int(x / g * y)
}

#[test]
fn a_sender_walks_each_channel_in_order_without_overlap() {
    let t = Title::new(97, 1000, 8000).unwrap();
    for scheme in Scheme::all(SchemeParams::default()) {
        let p = plan_of(t, 6.0, scheme);
        for c in &p.channels {
            // A whole number of every lane's cycle (the periods are whole τ here).
            let cycle = c.lanes.iter().fold(Ratio::ONE, |a, l| lcm(a, l.period));
            let per_cycle: u64 = c
                .lanes
                .iter()
                .map(|l| l.codewords_per_cycle() * (cycle / l.period).numer() as u64)
                .sum();
            let mut t = Ratio::ZERO;
            let mut sent = 0;
            while let Some(tx) = p.next_transmission(c.index, t) {
                if tx.start >= cycle {
                    break;
                }
                assert!(tx.start >= t, "{scheme} channel {}", c.index);
                let seg = &p.segments[tx.segment];
                assert!(
                    (seg.first_codeword..seg.first_codeword + seg.codewords).contains(&tx.codeword)
                );
                t = tx.start + tx.airtime;
                sent += 1;
            }
            assert_eq!(sent, per_cycle, "{scheme} channel {}", c.index);
        }
    }
}

#[test]
fn a_tune_in_lists_the_channels_of_every_delivery() {
    let t = Title::new(97, 1000, 8000).unwrap();
    for scheme in Scheme::all(SchemeParams::default()) {
        let p = plan_of(t, 6.0, scheme);
        let tune = p.tune_in(Ratio::new(7, 3));
        assert!(tune.playback_start >= tune.arrival);
        for d in &tune.deliveries {
            assert!(d.from() >= tune.arrival, "{scheme}");
            assert!(tune
                .listens
                .iter()
                .any(|l| l.channel == d.channel && l.from <= d.from() && d.to() <= l.to));
        }
        let cw: Ratio = tune
            .deliveries
            .iter()
            .map(|d| d.hi - d.lo)
            .fold(Ratio::ZERO, |a, b| a + b);
        assert_eq!(cw, Ratio::int(97), "{scheme}: every codeword once");
    }
}

#[test]
fn bad_requests_get_clear_errors() {
    let t = Title::new(100, 313_984, 3_500_000).unwrap();
    let req = |wait, scheme, cap| PlanRequest {
        title: t,
        max_wait_s: wait,
        scheme,
        client_cap_bps: cap,
    };
    let e = plan(&req(0.5, Scheme::Fast, None)).unwrap_err();
    assert!(matches!(e, PlanError::WaitTooShort { .. }), "{e}");
    assert!(
        e.to_string().contains("shorter than 1 codeword airtime"),
        "{e}"
    );
    assert!(matches!(
        plan(&req(-1.0, Scheme::Fast, None)),
        Err(PlanError::BadSeconds { .. })
    ));
    let e = plan(&req(2.0, Scheme::Polyharmonic { m: 4 }, None)).unwrap_err();
    assert!(matches!(e, PlanError::Parameter { name: "m", .. }), "{e}");
    let e = plan(&req(5.0, Scheme::Harmonic, Some(4_000_000))).unwrap_err();
    assert!(matches!(e, PlanError::ClientBandwidth { .. }), "{e}");
    // Staggered receives one channel at the title's bitrate: within a cap of b.
    assert!(plan(&req(5.0, Scheme::Staggered, Some(3_500_000))).is_ok());
    assert!(matches!(Title::new(0, 1, 1), Err(PlanError::Empty { .. })));
}

#[test]
fn a_client_cap_makes_pyramid_use_fewer_or_slower_channels() {
    let t = fine_clip();
    let free = plan_of(t, 5.0, Scheme::Pyramid);
    let cap = (free.client.peak_receive_bps * 0.8) as u64;
    let req = PlanRequest {
        title: t,
        max_wait_s: 5.0,
        scheme: Scheme::Pyramid,
        client_cap_bps: Some(cap),
    };
    match plan(&req) {
        Ok(p) => assert!(p.client.peak_receive_bps <= cap as f64),
        Err(e) => assert!(matches!(e, PlanError::ClientBandwidth { .. })),
    }
}
