//! Adaptive repair end to end (issue 10): `isnode play` reports its measured loss in its
//! keepalives and the server sends only the stored repair symbols that loss needs. A clean
//! client soon gets only a few repair symbols per codeword; a client behind 5 % loss gets
//! (nearly) all of them and its output is byte-identical. The test prints the bandwidth
//! saved at 0 %, 1 % and 5 % loss (the figure in docs/benchmarks.md).

mod serve_support;

use std::time::{Duration, Instant};

use serve_support::*;

/// Bitrate of the title: at 20 Mbit/s a codeword (223 × 1408 bytes) lasts 0.126 s.
const BITRATE: u64 = 20_000_000;
/// Seconds of the title.
const SECONDS: f64 = 5.0;

/// What one session cost the server, from the metrics before and after it.
struct Cost {
    repair_sent: f64,
    repair_skipped: f64,
    bytes_sent: f64,
    loss_reports: f64,
}

impl Cost {
    /// Share of the bytes a fixed m would have sent that adaptive repair saved.
    fn saved(&self, packet_len: f64) -> f64 {
        let skipped = self.repair_skipped * packet_len;
        skipped / (self.bytes_sent + skipped)
    }
}

fn counters(server: &Server) -> [f64; 4] {
    let m = server.metrics();
    [
        m.get("isnode_repair_packets_sent_total"),
        m.get("isnode_repair_packets_skipped_total"),
        m.get("isnode_bytes_sent_total{engine=\"gso\"}"),
        m.get("isnode_loss_reports_total"),
    ]
}

/// Plays the title through `loss` injected loss; its statistics, output and server cost.
fn session(server: &Server, vol: &Vol, loss: &str) -> (serde_json::Value, Vec<u8>, Cost) {
    let before = counters(server);
    let extra = [
        "--loss",
        loss,
        "--seed",
        "3",
        "--as-fast-as-possible",
        "--timeout-s",
        "5",
        "--max-seconds",
        "30",
    ];
    let deadline = Instant::now() + Duration::from_secs(40);
    let (stats, out) = play_to_end(
        server,
        vol,
        "title.ts",
        &format!("loss-{loss}"),
        &extra,
        deadline,
    );
    let after = counters(server);
    let d = |i: usize| after[i] - before[i];
    let cost = Cost {
        repair_sent: d(0),
        repair_skipped: d(1),
        bytes_sent: d(2),
        loss_reports: d(3),
    };
    (stats, out, cost)
}

#[test]
fn repair_follows_the_reported_loss() {
    let vol = Vol::create(&[]);
    let bytes = vol.add_ts("title.ts", BITRATE, SECONDS, 5);
    let server = Server::start(&vol, &["--engine", "gso"]);
    let packet_len = 1408.0 + 28.0; // E + the data header: only for the printed figure
    let mut figures = Vec::new();
    for loss in ["0", "0.01", "0.05"] {
        let (stats, out, cost) = session(&server, &vol, loss);
        assert!(
            out == bytes,
            "loss {loss}: output differs from the source: {stats}"
        );
        assert_eq!(stats["codewords_unrecoverable"], 0, "loss {loss}: {stats}");
        assert!(
            stats["loss_reports_sent"].as_u64().unwrap_or(0) >= 1 && cost.loss_reports >= 1.0,
            "loss {loss}: no loss report reached the server: {stats}"
        );
        let total = cost.repair_sent + cost.repair_skipped;
        assert!(total > 0.0, "loss {loss}: no repair counted");
        match loss {
            // Clean: after the first report (about 1 s in), 4 of 32 repair symbols per
            // codeword; over the whole session most repair packets stay home.
            "0" => assert!(
                cost.repair_skipped > 0.4 * total,
                "clean client: {} repair packets sent, {} skipped",
                cost.repair_sent,
                cost.repair_skipped
            ),
            // 5 %: the policy wants all 32; the reported loss measured over the window
            // may start a little low, so allow a small share skipped.
            "0.05" => {
                let reported = stats["max_reported_loss_rate"].as_f64().unwrap_or(0.0);
                assert!(reported > 0.02, "5 % loss reported as {reported}: {stats}");
                assert!(
                    cost.repair_skipped < 0.15 * total,
                    "lossy client: {} repair packets sent, {} skipped",
                    cost.repair_sent,
                    cost.repair_skipped
                );
            }
            _ => {}
        }
        figures.push((
            loss,
            cost.repair_sent,
            cost.repair_skipped,
            cost.saved(packet_len),
        ));
    }
    eprintln!(
        "adaptive repair, {} Mbit/s title of {SECONDS} s:",
        BITRATE / 1_000_000
    );
    eprintln!(
        "{:>6} {:>12} {:>15} {:>15}",
        "loss", "repair sent", "repair skipped", "bytes saved"
    );
    for (loss, sent, skipped, saved) in figures {
        eprintln!(
            "{loss:>6} {sent:>12} {skipped:>15} {:>14.1}%",
            saved * 100.0
        );
    }
}
