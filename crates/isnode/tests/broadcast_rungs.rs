//! A title with renditions broadcast per rung (issue 31, item 5): a 3-rung ffmpeg ladder
//! (H.264 + AAC, 2 s GOPs aligned, 10 s, low bitrates) in a volume of small codewords,
//! `POST /v1/broadcasts` naming the title on a real `isnode serve` in a network namespace
//! of the test's own (multicast on its loopback). Each rung runs its own plan on its own
//! groups; the server's egress, read from the kernel's multicast counters of the
//! namespace (`IpExt: OutMcastOctets`, less each datagram's IP and UDP headers), is the
//! sum of the rungs' plans over the same span within 2 % with 1 and with 10 receivers
//! (`isnode play show --broadcast --rung N`, pinned to the three rungs in turn), and every
//! receiver's output is its rung's file byte for byte and decodes without a complaint
//! (`ffmpeg -v error -i out -f null -`: empty stderr). A receiver behind injected loss
//! past what the rungs' FEC repairs (`isnode play --loss 0.3 --loss-step 7:0`, on a 24 s
//! ladder) steps down rung by rung, then back up once the loss has ended, and its output
//! decodes whole.
//!
//! These tests need root (a network namespace), iproute2 and Debian's `ffmpeg` package
//! (`bash scripts/test` installs them); without them they fail, saying so.

mod serve_support;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use serve_support::media::{check_cmaf_runs, check_down_then_up, decodes_cleanly, encode_rung};
use serve_support::netns::Netns;
use serve_support::{command, isnode, text, Server, Vol, SMALL_SHAPE};

/// The ladder: size, video bitrate.
const LADDER: [(&str, &str); 3] = [
    ("256x144", "150k"),
    ("320x180", "300k"),
    ("480x270", "600k"),
];
/// Seconds of media of the egress test's ladder.
const SECONDS: &str = "10";
/// Seconds of media of the lossy receivers' ladder: room for two steps down (each waits
/// for the new rung's schedule), a clean period and a step up.
const LOSSY_SECONDS: &str = "24";
/// The lossy receiver's loss: 30 % from play's start, past the 25 % the rungs' FEC
/// repairs (k = 12, m = 4; what the code cannot decode is repaired over HTTP), ending
/// 7 s in (the second step down is decided about 5 s in).
const LOSSY: [&str; 6] = ["--loss", "0.3", "--seed", "3", "--loss-step", "7:0"];
/// Bytes of the IPv4 and UDP headers of a datagram (the plans count UDP payload).
const IP_UDP_HEADER_BYTES: f64 = 28.0;

/// The tests of this file run one at a time (each measures the server's pacing on a
/// machine of 2 cores).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The container of the ladder's rungs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Container {
    Ts,
    Cmaf,
}

/// The ladder, `seconds` long, ingested as title `show` (small codewords: k = 12, m = 4);
/// the rung files.
fn ladder(vol: &Vol, container: Container, seconds: &str) -> Vec<PathBuf> {
    let cmaf = container == Container::Cmaf;
    let files: Vec<PathBuf> = LADDER
        .iter()
        .enumerate()
        .map(|(i, &r)| encode_rung(vol.dir.path(), &format!("r{i}"), r, cmaf, seconds))
        .collect();
    let mut args = vec!["ingest", "--name", "show"];
    args.extend(files.iter().map(|f| f.to_str().expect("utf-8 path")));
    let out = isnode(vol, &args);
    assert!(out.status.success(), "{}", text(&out));
    files
}

/// The kernel's multicast output counters of the calling thread's network namespace:
/// (datagrams, IP bytes) from `/proc/thread-self/net/netstat` (`IpExt`). A GSO send is one
/// datagram of the counter with one IP and UDP header, as the payload it carries.
fn mcast_out() -> (f64, f64) {
    let text = std::fs::read_to_string("/proc/thread-self/net/netstat")
        .expect("reading /proc/thread-self/net/netstat");
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("IpExt:")).collect();
    assert_eq!(rows.len(), 2, "IpExt header and values: {text}");
    let names: Vec<&str> = rows[0].split_whitespace().collect();
    let values: Vec<&str> = rows[1].split_whitespace().collect();
    let get = |name: &str| -> f64 {
        let i = names
            .iter()
            .position(|n| *n == name)
            .unwrap_or_else(|| panic!("no {name} in IpExt: {text}"));
        values[i].parse().expect("a counter")
    };
    (get("OutMcastPkts"), get("OutMcastOctets"))
}

/// The UDP payload bytes the namespace has sent to multicast groups so far.
fn mcast_payload_bytes() -> f64 {
    let (pkts, octets) = mcast_out();
    octets - pkts * IP_UDP_HEADER_BYTES
}

/// Each rung broadcast's time (seconds since its start), by id.
fn elapsed(server: &Server, ids: &[String]) -> Vec<f64> {
    ids.iter()
        .map(|id| {
            let b = server
                .req("GET", &format!("/v1/broadcasts/{id}"), None)
                .json();
            b["elapsed_s"].as_f64().expect("elapsed_s")
        })
        .collect()
}

/// The namespace's multicast payload bytes so far and each rung's time then: the counters
/// read between two readings of the rungs' times, placed at their middle (the requests take
/// milliseconds under load: read after the counters, the plans' span would be short).
fn sample(server: &Server, ids: &[String]) -> (f64, Vec<f64>) {
    let before = elapsed(server, ids);
    let bytes = mcast_payload_bytes();
    let after = elapsed(server, ids);
    let mid = before
        .iter()
        .zip(&after)
        .map(|(a, b)| (a + b) / 2.0)
        .collect();
    (bytes, mid)
}

/// A receiver of the title, pinned to `rung` (None: the decision picks), with `extra` flags.
struct Receiver {
    child: Child,
    out: PathBuf,
    stats: PathBuf,
    err: PathBuf,
    rung: Option<usize>,
}

fn start_receiver(
    server: &Server,
    vol: &Vol,
    i: usize,
    rung: Option<usize>,
    extra: &[&str],
) -> Receiver {
    let (out, stats, err) = (
        vol.path(&format!("out-{i}.ts")),
        vol.path(&format!("st-{i}.json")),
        vol.path(&format!("err-{i}.txt")),
    );
    let mut cmd = command();
    cmd.args(["play", "show", "--broadcast", "--server", &server.url()])
        .arg("--out")
        .arg(&out)
        .arg("--stats-json")
        .arg(&stats)
        .args(["--max-seconds", "75"])
        .args(extra);
    if let Some(r) = rung {
        cmd.args(["--rung", &r.to_string()]);
    }
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).expect("log"))
        .spawn()
        .expect("spawning isnode play --broadcast");
    Receiver {
        child,
        out,
        stats,
        err,
        rung,
    }
}

/// How a receiver may end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    /// Exit 0: every codeword on time.
    Clean,
    /// Exit 0, or 1 with codewords late (repaired over HTTP after their playing time, as a
    /// receiver behind loss past the FEC's must be), never lost.
    LateAllowed,
}

/// Waits for every receiver (each within `deadline`); their stats JSON.
fn finish(receivers: &mut [Receiver], deadline: Instant, ending: Ending) -> Vec<Value> {
    receivers
        .iter_mut()
        .map(|r| {
            loop {
                if let Some(status) = r.child.try_wait().expect("waiting") {
                    let late_only = ending == Ending::LateAllowed && status.code() == Some(1);
                    assert!(
                        status.success() || late_only,
                        "a receiver failed: {status}: {}",
                        std::fs::read_to_string(&r.err).unwrap_or_default()
                    );
                    break;
                }
                if Instant::now() > deadline {
                    let _ = r.child.kill();
                    panic!(
                        "a receiver did not finish in time: {}",
                        std::fs::read_to_string(&r.err).unwrap_or_default()
                    );
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            serde_json::from_slice(&std::fs::read(&r.stats).expect("stats")).expect("JSON")
        })
        .collect()
}

/// The rungs' groups: none shared between two rungs, none beyond the server's per-broadcast
/// cap (what one receiver socket joins).
fn check_groups(rungs: &[Value]) {
    let mut seen: HashSet<String> = HashSet::new();
    for (i, b) in rungs.iter().enumerate() {
        let mut mine: HashSet<String> = HashSet::new();
        for c in b["channels"].as_array().expect("channels") {
            for k in ["source", "repair"] {
                let a: SocketAddr = c[k].as_str().expect("ip:port").parse().expect("ip:port");
                mine.insert(a.ip().to_string());
            }
        }
        assert!(mine.len() <= 16, "rung {i}: {} groups", mine.len());
        assert!(
            mine.is_disjoint(&seen),
            "rung {i} shares a group: {mine:?} {seen:?}"
        );
        seen.extend(mine);
        assert_eq!(b["rung"]["title"], "show", "{b}");
        assert_eq!(b["rung"]["rendition"], i, "{b}");
        assert_eq!(b["object"]["name"], format!("show@{i}"), "{b}");
    }
}

/// Runs `receivers` to their end and measures the egress meanwhile: the measured payload
/// bytes over the rungs' plans' bytes over the same span (and over the plans plus the most
/// FDT bytes, at most one instance per channel and second).
fn measured_run(
    server: &Server,
    rungs: &[Value],
    mut receivers: Vec<Receiver>,
) -> ((f64, f64), Vec<(Receiver, Value)>) {
    let ids: Vec<String> = rungs
        .iter()
        .map(|b| b["id"].as_str().expect("id").to_string())
        .collect();
    let counted0 = server.metrics().get("isnode_broadcast_bytes_sent_total");
    let (sent0, e0) = sample(server, &ids);
    let stats = finish(
        &mut receivers,
        Instant::now() + Duration::from_secs(60),
        Ending::Clean,
    );
    let (sent1, e1) = sample(server, &ids);
    let counted = server.metrics().get("isnode_broadcast_bytes_sent_total") - counted0;
    let mut planned = 0.0;
    let mut fdt_max = 0.0;
    for (i, b) in rungs.iter().enumerate() {
        planned += serve_support::planned::planned_bytes(b, e0[i], e1[i]);
        let channels = b["channels"].as_array().expect("channels").len() as f64;
        let fdt = b["fdt_xml"].as_str().expect("fdt").len() as f64 + 64.0;
        fdt_max += channels * ((e1[i] - e0[i]).ceil() + 1.0) * fdt;
    }
    let sent = sent1 - sent0;
    eprintln!(
        "{} receivers: egress {:.3} Mbit/s over {:.1} s (kernel multicast counters): {:.4} of \
         the rungs' plans over the same span ({:.4} with the most FDT bytes)",
        receivers.len(),
        sent * 8.0 / (e1[0] - e0[0]) / 1e6,
        e1[0] - e0[0],
        sent / planned,
        sent / (planned + fdt_max)
    );
    eprintln!(
        "  the kernel's count / the server's own (isnode_broadcast_bytes_sent_total, read \
         around the span): {:.4}",
        sent / counted
    );
    let ratios = (sent / planned, sent / (planned + fdt_max));
    (ratios, receivers.into_iter().zip(stats).collect())
}

/// Every output is its rung's file byte for byte, decodes cleanly, and came on time.
fn check_outputs(done: &[(Receiver, Value)], files: &[PathBuf]) {
    for (r, st) in done {
        let rung = r.rung.expect("pinned");
        let out = std::fs::read(&r.out).expect("an output");
        let want = std::fs::read(&files[rung]).expect("the rung's file");
        assert!(
            out == want,
            "rung {rung}: the output is not the rung's file: {st}"
        );
        decodes_cleanly(r.out.to_str().expect("utf-8 path"));
        assert_eq!(st["title"], "show", "{st}");
        assert_eq!(st["object"], format!("show@{rung}"), "{st}");
        assert_eq!(st["codewords_lost"], 0, "{st}");
        assert_eq!(st["late_codewords"], 0, "{st}");
        assert_eq!(
            st["rung_timeline"].as_array().map(Vec::len),
            Some(1),
            "{st}"
        );
    }
}

#[test]
fn a_title_is_broadcast_per_rung_and_egress_is_the_sum_of_the_plans() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let ns = Netns::with_loopback_multicast();
    ns.run(|| {
        let vol = Vol::create(SMALL_SHAPE);
        let files = ladder(&vol, Container::Ts, SECONDS);
        let server = Server::start(&vol, &[]);
        let body =
            json!({"object": "show", "scheme": "cautious-harmonic", "max_wait_s": 2.0, "duration_s": 300.0})
                .to_string();
        let r = server.req("POST", "/v1/broadcasts", Some(&body));
        assert_eq!(r.status, 201, "{}", r.body);
        let title = r.json();
        assert_eq!(title["title"], "show", "{title}");
        let rungs = title["rungs"].as_array().expect("rungs").clone();
        assert_eq!(rungs.len(), LADDER.len(), "{title}");
        check_groups(&rungs);
        let sum: u64 = rungs.iter().map(|b| b["send_rate_bps"].as_u64().unwrap()).sum();
        assert_eq!(title["send_rate_bps"].as_u64(), Some(sum), "{title}");
        let listed = server.req("GET", "/v1/broadcasts", None).json();
        assert_eq!(listed["broadcasts"].as_array().map(Vec::len), Some(LADDER.len()));
        // Named groups cannot be split over a title's rungs.
        let named = json!({"object": "show", "scheme": "fast", "max_wait_s": 2.0,
            "source_groups": ["239.255.1.1"], "repair_groups": ["239.255.1.2"]});
        let r = server.req("POST", "/v1/broadcasts", Some(&named.to_string()));
        assert_eq!(r.status, 400, "{}", r.body);

        let mut worst = Vec::new();
        for n in [1usize, 10] {
            let receivers: Vec<Receiver> = (0..n)
                .map(|i| {
                    let rung = (LADDER.len() - 1 + i) % LADDER.len();
                    start_receiver(&server, &vol, 100 * n + i, Some(rung), &[])
                })
                .collect();
            let ((to_plan, with_fdt), done) = measured_run(&server, &rungs, receivers);
            check_outputs(&done, &files);
            worst.push((n, to_plan, with_fdt));
        }
        for (n, to_plan, with_fdt) in worst {
            assert!(to_plan >= 0.98, "{n} receivers: egress {to_plan} of the plans");
            assert!(with_fdt <= 1.02, "{n} receivers: egress {with_fdt} of the plans + FDT");
        }
        // The title's delete knows its rungs are broadcast: refused, then forced.
        let r = server.req("DELETE", "/v1/objects/show", None);
        assert_eq!(r.status, 409, "{}", r.body);
        assert!(r.body.contains("show@"), "names the rendition: {}", r.body);
        let r = server.req("DELETE", "/v1/objects/show?force=true", None);
        assert_eq!(r.status, 204, "{}", r.body);
        let listed = server.req("GET", "/v1/broadcasts", None).json();
        assert_eq!(listed["broadcasts"].as_array().map(Vec::len), Some(0), "{listed}");
    });
}

#[test]
fn a_lossy_receiver_steps_down_rung_by_rung_then_up_and_its_output_decodes() {
    lossy_receiver_steps_down_then_up(Container::Ts);
}

#[test]
fn a_lossy_receiver_of_a_cmaf_title_switches_track_by_track() {
    lossy_receiver_steps_down_then_up(Container::Cmaf);
}

/// A receiver behind loss past the FEC's that ends part way ([`LOSSY`]), on a title of
/// `container` rungs: its timeline steps down for loss at increasing boundaries, then back
/// up once clean, and its output decodes (TS whole; CMAF one initialization segment per
/// rung played, each run on its own).
fn lossy_receiver_steps_down_then_up(container: Container) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let ns = Netns::with_loopback_multicast();
    ns.run(move || {
        let vol = Vol::create(SMALL_SHAPE);
        ladder(&vol, container, LOSSY_SECONDS);
        let server = Server::start(&vol, &[]);
        let body =
            json!({"object": "show", "scheme": "cautious-harmonic", "max_wait_s": 2.0}).to_string();
        let r = server.req("POST", "/v1/broadcasts", Some(&body));
        assert_eq!(r.status, 201, "{}", r.body);
        let mut receivers = vec![start_receiver(&server, &vol, 0, None, &LOSSY)];
        let deadline = Instant::now() + Duration::from_secs(80);
        let st = finish(&mut receivers, deadline, Ending::LateAllowed).remove(0);
        let steps = check_down_then_up(&st);
        let timeline = st["rung_timeline"].as_array().expect("a timeline");
        assert_eq!(timeline[0]["to"], "show@2", "the top rung first: {st}");
        assert_eq!(st["codewords_lost"], 0, "{st}");
        // The wait for each rung's first byte from its tuning in (the stall of a switch).
        for r in st["rung_receptions"].as_array().expect("receptions") {
            eprintln!(
                "reception of {}: first byte {:.3} s after tuning in (plan worst wait {:.3} s)",
                r["object"].as_str().unwrap_or("?"),
                r["first_byte_s"].as_f64().unwrap_or(f64::NAN),
                r["plan_worst_wait_s"].as_f64().unwrap_or(f64::NAN)
            );
        }
        eprintln!(
            "lossy receiver: {} late codewords (max {:.3} s), {} codewords repaired over HTTP",
            st["late_codewords"],
            st["max_late_s"].as_f64().unwrap_or(0.0),
            st["rung_receptions"].as_array().map_or(0, |a| a
                .iter()
                .filter_map(|r| r["repair"]["codewords_repaired"].as_u64())
                .sum::<u64>())
        );
        let out: &Path = &receivers[0].out;
        match container {
            Container::Ts => {
                decodes_cleanly(out.to_str().expect("utf-8 path"));
                let bytes = std::fs::read(out).expect("the output");
                assert_eq!(bytes.len() % 188, 0, "whole TS packets");
            }
            Container::Cmaf => check_cmaf_runs(out, steps.len()),
        }
    });
}
