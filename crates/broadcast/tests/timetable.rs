//! A receiver's plan (the timetable only, no simulated figures) is the server's plan.

use isnode_broadcast::{plan, plan_with, Figures, PlanRequest, Scheme, SchemeParams, Title};

#[test]
fn the_timetable_only_plan_has_the_same_segments_and_channels() {
    let title = Title::from_duration(300.0, 4_000_000, 223 * 1408).expect("title");
    for scheme in Scheme::all(SchemeParams::default()) {
        let req = PlanRequest {
            title,
            max_wait_s: 5.0,
            scheme,
            client_cap_bps: None,
        };
        let (full, quick) = (
            plan(&req).expect("plan"),
            plan_with(&req, Figures::TimetableOnly).expect("timetable"),
        );
        assert_eq!(full.segments, quick.segments, "{scheme}");
        assert_eq!(full.channels, quick.channels, "{scheme}");
        assert_eq!(full.server_rate_bps, quick.server_rate_bps, "{scheme}");
        assert_eq!(
            (full.playout, full.reception),
            (quick.playout, quick.reception)
        );
        assert_eq!(quick.client.arrivals, 0, "{scheme}: no figures simulated");
    }
}
