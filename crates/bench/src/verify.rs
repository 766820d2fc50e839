//! `isnode bench verify`: what packet authentication costs the client.
//!
//! Two measurements, side by side in one run:
//!
//! - **Per packet, per core**: the digest of a stored packet (`isnode_wire::digest`,
//!   SHA-256-128 over the whole packet) against its CRC32C check, over the same packets in
//!   memory: CPU seconds per GB of packets.
//! - **The client, end to end**: `isnode play` of one title from a local `isnode serve`,
//!   rounds alternating `--verify-digests on` and `off`, each round's client CPU
//!   (user + system, from `getrusage(RUSAGE_CHILDREN)` around the child) per GB of title.
//!   The difference is what authentication costs a viewer.
//!
//! - **The client at a player's cost** (issue 33): the same title played at its rate
//!   (`isnode play`, paced, digests checked, as a viewer runs it) with no loss and with
//!   each injected loss rate of `player_loss` (`--loss P`), beside `curl --limit-rate`
//!   fetching the same bytes at the same rate from the same server (`GET /o/NAME`), rounds
//!   alternating; each client's CPU per GB of title and its ratio to curl's. The title must
//!   be long enough (tens of seconds) that start-up does not dominate.
//!
//! Machines here are shared and noisy: the rounds alternate so drift hits both modes, and
//! the report gives every round.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};
use isnode_store::{Volume, VolumeParams};
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::cputime::thread_cpu_time;
use crate::harness::server::{self, ServerSpec};

/// What to measure.
#[derive(Clone, Debug)]
pub struct VerifyBenchConfig {
    /// The isnode binary (server and client).
    pub isnode_exe: PathBuf,
    /// Bitrate of the title (the server paces at it: a round takes `seconds`).
    pub bitrate_bps: u64,
    /// Playing time of the title, seconds.
    pub seconds: u64,
    /// Rounds per mode.
    pub rounds: usize,
    /// Seed of the title's bytes.
    pub seed: u64,
    /// Injected loss rates of the player rounds besides no loss (e.g. 0.01, 0.05); the
    /// player rounds are skipped when `player_rounds` is 0.
    pub player_loss: Vec<f64>,
    /// Rounds of the player comparison (curl and `isnode play` at the title's rate).
    pub player_rounds: usize,
}

/// One client of the player comparison: CPU per GB of title at the title's rate.
#[derive(Clone, Debug, Serialize)]
pub struct PlayerRow {
    /// `curl` or `isnode play`.
    pub client: String,
    /// Injected loss rate (`isnode play --loss`), 0 for curl.
    pub loss: f64,
    /// Client CPU seconds per GB of title, every round.
    pub cpu_s_per_gb: Vec<f64>,
    /// Their median.
    pub median_cpu_s_per_gb: f64,
    /// The median over curl's.
    pub times_curl: f64,
}

/// The client's CPU in one mode.
#[derive(Clone, Debug, Serialize)]
pub struct ClientRow {
    /// `on` or `off` (`--verify-digests`).
    pub verify_digests: String,
    /// Client CPU seconds per GB of title, every round.
    pub cpu_s_per_gb: Vec<f64>,
    /// Their median.
    pub median_cpu_s_per_gb: f64,
}

/// The whole run.
#[derive(Clone, Debug, Serialize)]
pub struct VerifyReport {
    /// CPU seconds per GB of 1436-byte packets: SHA-256-128 digest, one core.
    pub digest_s_per_gb: f64,
    /// The same for the CRC32C check every packet already gets.
    pub crc32c_s_per_gb: f64,
    /// Title bytes per round.
    pub title_bytes: u64,
    /// The client with and without verification.
    pub client: Vec<ClientRow>,
    /// Median with minus median without, CPU seconds per GB of title.
    pub verification_s_per_gb: f64,
    /// The title's rate in the player comparison, bit/s.
    pub bitrate_bps: u64,
    /// The player comparison: curl first, then `isnode play` at each loss rate.
    pub player: Vec<PlayerRow>,
}

/// Runs the benchmark.
pub fn run(cfg: &VerifyBenchConfig) -> anyhow::Result<VerifyReport> {
    if cfg.rounds == 0 || cfg.seconds == 0 || cfg.bitrate_bps < 8 {
        bail!("nothing to measure: give rounds, seconds and a bitrate");
    }
    let (digest_s_per_gb, crc32c_s_per_gb) = per_packet();
    let dir = tempfile::tempdir()?;
    let vol = dir.path().join("vol");
    let title_bytes = make_title(&vol, cfg)?;
    let (_server, base) = server::start(&ServerSpec::new(
        &cfg.isnode_exe,
        &vol,
        "127.0.0.1",
        "gso",
        64 << 20,
    ))?;
    let modes = ["on", "off"];
    let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    for round in 0..cfg.rounds {
        for (i, mode) in modes.iter().enumerate() {
            let s = play_cpu_s(cfg, &base, mode, dir.path(), round)?;
            cpu[i].push(s / (title_bytes as f64 / 1e9));
        }
    }
    let client: Vec<ClientRow> = modes
        .iter()
        .zip(cpu)
        .map(|(mode, v)| ClientRow {
            verify_digests: mode.to_string(),
            median_cpu_s_per_gb: median(&v),
            cpu_s_per_gb: v,
        })
        .collect();
    let verification_s_per_gb = client[0].median_cpu_s_per_gb - client[1].median_cpu_s_per_gb;
    let player = player_rows(cfg, &base, dir.path(), title_bytes)?;
    Ok(VerifyReport {
        digest_s_per_gb,
        crc32c_s_per_gb,
        title_bytes,
        client,
        verification_s_per_gb,
        bitrate_bps: cfg.bitrate_bps,
        player,
    })
}

/// The player comparison: rounds alternating curl and `isnode play` at every loss rate (no
/// loss first), each client's CPU per GB of title.
fn player_rows(
    cfg: &VerifyBenchConfig,
    base: &str,
    dir: &Path,
    title_bytes: u64,
) -> anyhow::Result<Vec<PlayerRow>> {
    if cfg.player_rounds == 0 {
        return Ok(Vec::new());
    }
    let mut losses = vec![0.0];
    losses.extend(cfg.player_loss.iter().copied().filter(|l| *l > 0.0));
    if losses.iter().any(|l| !(0.0..1.0).contains(l)) {
        bail!("loss rates must lie in [0, 1)");
    }
    let gb = title_bytes as f64 / 1e9;
    let mut curl = Vec::new();
    let mut play: Vec<Vec<f64>> = vec![Vec::new(); losses.len()];
    for round in 0..cfg.player_rounds {
        curl.push(curl_cpu_s(cfg, base, title_bytes)? / gb);
        for (i, loss) in losses.iter().enumerate() {
            play[i].push(player_cpu_s(cfg, base, *loss, dir, round)? / gb);
        }
    }
    let curl_median = median(&curl);
    let row = |client: &str, loss: f64, v: Vec<f64>| PlayerRow {
        client: client.to_string(),
        loss,
        median_cpu_s_per_gb: median(&v),
        times_curl: median(&v) / curl_median,
        cpu_s_per_gb: v,
    };
    let mut rows = vec![row("curl", 0.0, curl)];
    for (loss, v) in losses.into_iter().zip(play) {
        rows.push(row("isnode play", loss, v));
    }
    Ok(rows)
}

/// `curl --limit-rate` of the whole title over HTTP at its rate; its CPU seconds. Checks
/// that it fetched every byte.
fn curl_cpu_s(cfg: &VerifyBenchConfig, base: &str, title_bytes: u64) -> anyhow::Result<f64> {
    let before = children_cpu_s();
    let out = Command::new("curl")
        .args(["-sS", "--fail", "--max-time"])
        .arg((cfg.seconds * 3 + 30).to_string())
        .args(["--limit-rate", &(cfg.bitrate_bps / 8).to_string()])
        .args(["-o", "/dev/null", "-w", "%{size_download}"])
        .arg(format!("{base}/o/verify.ts"))
        .stderr(Stdio::inherit())
        .output()
        .context("running curl (is it installed?)")?;
    let cpu = children_cpu_s() - before;
    let got = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || got.trim() != title_bytes.to_string() {
        bail!(
            "curl did not fetch the title whole: {}, {got} of {title_bytes} bytes",
            out.status
        );
    }
    Ok(cpu)
}

/// One `isnode play` of the title at its rate (paced playout, digests checked), with
/// `loss` injected; its CPU seconds. Checks that it played the title whole.
fn player_cpu_s(
    cfg: &VerifyBenchConfig,
    base: &str,
    loss: f64,
    dir: &Path,
    round: usize,
) -> anyhow::Result<f64> {
    let stats = dir.join(format!("player-{loss}-{round}.json"));
    let before = children_cpu_s();
    let status = Command::new(&cfg.isnode_exe)
        .args(["play", "verify.ts", "--server", base])
        .args(["--loss", &loss.to_string(), "--seed", &round.to_string()])
        .arg("--stats-json")
        .arg(&stats)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .context("running isnode play")?;
    let cpu = children_cpu_s() - before;
    let v: serde_json::Value = serde_json::from_slice(
        &std::fs::read(&stats).with_context(|| format!("reading {}", stats.display()))?,
    )?;
    if !status.success() || v["codewords_unrecoverable"] != 0 || v["authenticated"] != true {
        bail!("isnode play --loss {loss} did not play the title whole and authenticated: {status}");
    }
    std::thread::sleep(Duration::from_millis(200));
    Ok(cpu)
}

/// (digest, CRC32C) CPU seconds per GB over 64 MiB of 1436-byte packets, one core.
fn per_packet() -> (f64, f64) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let packets: Vec<Vec<u8>> = (0..(64 << 20) / 1436)
        .map(|_| (0..1436).map(|_| rng.random()).collect())
        .collect();
    let gb = (packets.len() * 1436) as f64 / 1e9;
    let time = |f: &dyn Fn(&[u8]) -> u8| {
        let t0 = thread_cpu_time().unwrap_or_default();
        let mut acc = 0u8;
        for p in &packets {
            acc ^= f(p);
        }
        std::hint::black_box(acc);
        (thread_cpu_time().unwrap_or_default() - t0).as_secs_f64() / gb
    };
    let digest = time(&|p| isnode_wire::digest::packet_digest(p)[0]);
    let crc = time(&|p| crc32c::crc32c(p) as u8);
    (digest, crc)
}

/// A title of random bytes, ingested into a new volume; its length.
fn make_title(vol: &Path, cfg: &VerifyBenchConfig) -> anyhow::Result<u64> {
    let mut v = Volume::create(vol, VolumeParams::default(), None)?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(cfg.seed);
    let len = usize::try_from(cfg.bitrate_bps / 8 * cfg.seconds)?;
    crate::common::ingest_random_title(&mut v, "verify.ts", cfg.bitrate_bps, len, &mut rng)?;
    Ok(len as u64)
}

/// One `isnode play` of the title with `--verify-digests mode`; its CPU seconds. Checks
/// that it played the title whole and authenticated as asked.
fn play_cpu_s(
    cfg: &VerifyBenchConfig,
    base: &str,
    mode: &str,
    dir: &Path,
    round: usize,
) -> anyhow::Result<f64> {
    let stats = dir.join(format!("verify-{mode}-{round}.json"));
    let before = children_cpu_s();
    let status = Command::new(&cfg.isnode_exe)
        .args([
            "play",
            "verify.ts",
            "--server",
            base,
            "--as-fast-as-possible",
        ])
        .args(["--verify-digests", mode, "--stats-json"])
        .arg(&stats)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .context("running isnode play")?;
    let cpu = children_cpu_s() - before;
    let v: serde_json::Value = serde_json::from_slice(
        &std::fs::read(&stats).with_context(|| format!("reading {}", stats.display()))?,
    )?;
    if !status.success() || v["codewords_unrecoverable"] != 0 {
        bail!("isnode play --verify-digests {mode} did not play the title whole: {status}");
    }
    if v["authenticated"] != (mode == "on") {
        bail!(
            "isnode play --verify-digests {mode}: authenticated = {}",
            v["authenticated"]
        );
    }
    std::thread::sleep(Duration::from_millis(200));
    Ok(cpu)
}

/// User + system CPU of the waited-for children so far, seconds.
#[allow(unsafe_code)]
fn children_cpu_s() -> f64 {
    // SAFETY: all-zero bytes are a valid rusage; getrusage writes into it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a writable rusage.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s.get(s.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The report as a table.
pub fn format_table(r: &VerifyReport) -> String {
    let mut s = format!(
        "per packet, one core: SHA-256-128 digest {:.3} s/GB, CRC32C {:.3} s/GB\n",
        r.digest_s_per_gb, r.crc32c_s_per_gb
    );
    s.push_str(&format!(
        "isnode play of a {:.1} MB title, client CPU s per title GB:\n",
        r.title_bytes as f64 / 1e6
    ));
    for row in &r.client {
        let rounds: Vec<String> = row.cpu_s_per_gb.iter().map(|v| format!("{v:.3}")).collect();
        s.push_str(&format!(
            "  --verify-digests {:<3}  median {:.3}  rounds [{}]\n",
            row.verify_digests,
            row.median_cpu_s_per_gb,
            rounds.join(", ")
        ));
    }
    s.push_str(&format!(
        "verification costs the client {:.3} CPU s per title GB\n",
        r.verification_s_per_gb
    ));
    if !r.player.is_empty() {
        s.push_str(&format!(
            "at the title's rate ({:.1} Mbit/s), client CPU s per title GB:\n",
            r.bitrate_bps as f64 / 1e6
        ));
    }
    for row in &r.player {
        let rounds: Vec<String> = row.cpu_s_per_gb.iter().map(|v| format!("{v:.3}")).collect();
        let who = match row.client.as_str() {
            "curl" => "curl --limit-rate".to_string(),
            c => format!("{c}, loss {:.0} %", row.loss * 100.0),
        };
        s.push_str(&format!(
            "  {who:<26} median {:.3}  {:.2} x curl  rounds [{}]\n",
            row.median_cpu_s_per_gb,
            row.times_curl,
            rounds.join(", ")
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_the_table() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert!(median(&[]).is_nan());
        let r = VerifyReport {
            digest_s_per_gb: 0.5,
            crc32c_s_per_gb: 0.05,
            title_bytes: 25_000_000,
            client: vec![ClientRow {
                verify_digests: "on".into(),
                cpu_s_per_gb: vec![1.0],
                median_cpu_s_per_gb: 1.0,
            }],
            verification_s_per_gb: 0.4,
            bitrate_bps: 8_000_000,
            player: vec![
                PlayerRow {
                    client: "curl".into(),
                    loss: 0.0,
                    cpu_s_per_gb: vec![1.5],
                    median_cpu_s_per_gb: 1.5,
                    times_curl: 1.0,
                },
                PlayerRow {
                    client: "isnode play".into(),
                    loss: 0.05,
                    cpu_s_per_gb: vec![2.7],
                    median_cpu_s_per_gb: 2.7,
                    times_curl: 1.8,
                },
            ],
        };
        let t = format_table(&r);
        assert!(
            t.contains("0.400") && t.contains("--verify-digests on"),
            "{t}"
        );
        assert!(
            t.contains("8.0 Mbit/s")
                && t.contains("isnode play, loss 5 %")
                && t.contains("1.80 x curl"),
            "{t}"
        );
    }
}
