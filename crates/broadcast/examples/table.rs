//! Prints every scheme's plan for a title: `cargo run --example table -- 180 3500000 5 313984`.

use isnode_broadcast::{plan, sim, PlanRequest, Scheme, SchemeParams, Title};

fn main() {
    let a: Vec<f64> = std::env::args()
        .skip(1)
        .filter_map(|s| s.parse().ok())
        .collect();
    let (d, b, w, cw) = match a.as_slice() {
        [d, b, w, cw] => (*d, *b as u64, *w, *cw as u64),
        _ => (180.0, 3_500_000, 5.0, 313_984),
    };
    let title = match Title::from_duration(d, b, cw) {
        Ok(t) => t,
        Err(e) => return eprintln!("{e}"),
    };
    for scheme in Scheme::all(SchemeParams::default()) {
        let req = PlanRequest {
            title,
            max_wait_s: w,
            scheme,
            client_cap_bps: None,
        };
        match plan(&req) {
            Ok(p) => {
                let s = sim::simulate(
                    &p,
                    sim::Arrivals::WholePeriod {
                        random: 16,
                        seed: 7,
                    },
                );
                println!(
                    "{:<22} seg {:>5} ch {:>5} server {:>7.2} Mb/s ({:>6.2}x, nominal {:>6.2}x) wait {:>6.2} s recv {:>7.2} Mb/s ch@once {:>4} buf {:>6.1} MB late_arrivals {}/{} maxlate {}",
                    p.scheme.to_string(), p.segments.len(), p.channels.len(), p.server_rate_bps / 1e6, p.server_multiple(), p.nominal.server_multiple, p.client.worst_wait_s,
                    s.peak_receive_bps / 1e6, s.max_channels, s.peak_buffer_bytes as f64 / 1e6, s.late_arrivals, s.arrivals.len(), s.max_late_bytes
                );
            }
            Err(e) => println!("{scheme}: {e}"),
        }
    }
}
