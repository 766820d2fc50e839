//! Property tests over random durations, rates, codeword sizes and waits: every scheme
//! but harmonic-as-published delivers every byte on time within the wait, and no plan
//! beats the lower bound b·ln(1 + D/w).

use isnode_broadcast::sim::{simulate, Arrivals};
use isnode_broadcast::{lower_bound_bps, plan, PlanRequest, Scheme, SchemeParams, Title};
use proptest::prelude::*;

fn schemes() -> impl Strategy<Value = Scheme> {
    prop_oneof![
        Just(Scheme::Staggered),
        Just(Scheme::Pyramid),
        (1u64..60).prop_map(|width| Scheme::Skyscraper { width }),
        Just(Scheme::Fast),
        Just(Scheme::Pagoda),
        Just(Scheme::CautiousHarmonic),
        (1u32..6).prop_map(|m| Scheme::QuasiHarmonic { m }),
        (1u32..6).prop_map(|m| Scheme::Polyharmonic { m }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn on_time_within_the_wait_and_above_the_bound(
        codewords in 1u64..300,
        codeword_bytes in 1000u64..400_000,
        bitrate_bps in 100_000u64..20_000_000,
        wait_codewords in 1u64..40,
        wait_extra in 0.0f64..0.99,
        scheme in schemes(),
        seed in any::<u64>(),
    ) {
        let title = Title::new(codewords, codeword_bytes, bitrate_bps).unwrap();
        let tau = title.codeword_airtime_s();
        let max_wait_s = (wait_codewords as f64 + wait_extra) * tau;
        let req = PlanRequest { title, max_wait_s, scheme, client_cap_bps: None };
        let p = match plan(&req) {
            Ok(p) => p,
            // Polyharmonic's m slots must fit in the wait; nothing else may fail here.
            Err(e) => {
                prop_assert!(matches!(scheme, Scheme::Polyharmonic { m } if u64::from(m) > wait_codewords), "{e}");
                return Ok(());
            }
        };
        let sim = simulate(&p, Arrivals::Sample { boundaries: 24, random: 12, seed });
        prop_assert_eq!(sim.max_late_bytes, 0, "{} late", scheme);
        prop_assert!(sim.max_wait_s <= max_wait_s + 1e-9);
        prop_assert!(p.client.worst_wait_s <= max_wait_s + 1e-9);
        let bound = lower_bound_bps(title.duration_s(), bitrate_bps as f64, p.client.worst_wait_s);
        prop_assert!(p.server_rate_bps >= bound * (1.0 - 1e-9), "{} {} < {}", scheme, p.server_rate_bps, bound);
        prop_assert!(sim.peak_receive_bps <= p.server_rate_bps * (1.0 + 1e-9));
        if let Scheme::Skyscraper { .. } = scheme {
            prop_assert!(sim.max_channels <= 2);
        }
        if scheme == Scheme::Staggered {
            prop_assert_eq!((sim.max_channels, sim.peak_buffer_bytes), (1, 0));
        }
    }

    #[test]
    fn every_scheme_name_plans_or_explains(name in proptest::sample::select(Scheme::NAMES.to_vec())) {
        let scheme = Scheme::parse(name, SchemeParams::default()).unwrap();
        let title = Title::from_duration(600.0, 4_000_000, 223 * 1408).unwrap();
        let p = plan(&PlanRequest { title, max_wait_s: 10.0, scheme, client_cap_bps: None }).unwrap();
        prop_assert!(p.client.worst_wait_s <= 10.0);
        prop_assert!(p.segments.iter().map(|s| s.codewords).sum::<u64>() == title.codewords);
    }
}
