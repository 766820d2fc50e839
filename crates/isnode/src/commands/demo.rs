//! `isnode demo`: the whole path on loopback, in a temporary volume of its own.
//!
//! Generate an MPEG-TS stream, ingest it as prefabricated packets, serve it to
//! several concurrent clients through lossy, corrupting relays with a member
//! disk failed, check that every client wrote the original bytes, then find
//! and rebuild the failed member.
//!
//! The demo never opens the user's volume (`--volume`): it fails a member disk
//! on purpose, so it creates its own volume in a temporary directory, removed
//! on every exit path when the directory guard drops.

use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use anyhow::{ensure, Context};
use isnode_recv::{PlayConfig, PlayStats, Relay, RelayArgs};
use isnode_store::{CheckOptions, IngestOptions, Volume, VolumeParams};

use crate::cli::DemoArgs;

const DEMO_OBJECT: &str = "demo.ts";

/// Impairment of one demo client's relay.
#[derive(Clone, Copy, Debug)]
struct Impairment {
    /// Probability of losing a packet.
    loss: f64,
    /// Mean length of a loss burst in packets (`None`: independent losses).
    burst: Option<f64>,
    /// Probability of corrupting a packet.
    corrupt: f64,
}

/// The demo clients, one relay each.
const CLIENTS: [Impairment; 4] = [
    Impairment {
        loss: 0.0,
        burst: None,
        corrupt: 0.0,
    },
    Impairment {
        loss: 0.03,
        burst: None,
        corrupt: 0.005,
    },
    Impairment {
        loss: 0.05,
        burst: Some(4.0),
        corrupt: 0.0,
    },
    Impairment {
        loss: 0.02,
        burst: Some(2.0),
        corrupt: 0.01,
    },
];

/// Runs the demo in a temporary volume; the user's volume is not touched.
pub(super) fn run(args: &DemoArgs) -> anyhow::Result<ExitCode> {
    let dir = tempfile::Builder::new()
        .prefix("isnode-demo-")
        .tempdir()
        .context("creating the demo's temporary directory")?;
    let root = dir.path().join("volume");
    let mut vol = Volume::create(&root, VolumeParams::default(), None)
        .with_context(|| format!("creating the demo volume {}", root.display()))?;
    print_volume(&vol);

    let original = ingest_stream(&mut vol, args)?;
    super::objects::ls(
        &root,
        &crate::cli::LsArgs {
            json: false,
            remote: crate::cli::RemoteArgs {
                server: None,
                token: None,
                ca_cert: None,
            },
        },
    )?;
    fail_member(&vol, dir.path())?;
    let all_identical = serve_clients(&root, args, &original)?;
    let clean = find_and_rebuild(&mut vol)?;

    ensure!(all_identical, "a client's output differs from the original");
    ensure!(clean, "the volume is still damaged after repair");
    println!("== demo passed: every client got the original bytes through loss, corruption and a failed disk, and the disk was rebuilt");
    Ok(ExitCode::SUCCESS)
}

fn print_volume(vol: &Volume) {
    let p = vol.params();
    println!(
        "== temporary volume {} (removed at exit; your volume is not used): {} members, \
         RS(k={}, m={}) over GF(2^8), {}-byte symbols",
        vol.root().display(),
        p.members,
        p.source_symbols,
        p.repair_symbols,
        p.symbol_len
    );
}

/// Step 1: a test stream, ingested as prefabricated packets; returns its bytes.
fn ingest_stream(vol: &mut Volume, args: &DemoArgs) -> anyhow::Result<Vec<u8>> {
    let cfg = isnode_media::TsGenConfig {
        bitrate_bps: args.bitrate,
        duration_s: args.duration,
        seed: 7,
    };
    let mut original = Vec::new();
    isnode_media::generate_ts(&cfg, &mut original)?;
    let info = isnode_media::probe(&original, original.len() as u64)?;
    let opts = IngestOptions {
        name: DEMO_OBJECT.into(),
        bitrate_bps: info.require_bitrate()?,
        content_type: info.content_type.into(),
        replace: false,
    };
    let t = Instant::now();
    let rec = isnode_store::ingest(
        vol,
        &opts,
        &mut original.as_slice(),
        original.len() as u64,
        &mut |_| {},
    )?;
    println!(
        "== ingested {:?}: {} bytes of {} at {} bit/s (detected), {} codewords, in {:.2} s",
        rec.name,
        rec.size_bytes,
        info.container,
        rec.bitrate_bps,
        rec.codewords,
        t.elapsed().as_secs_f64()
    );
    Ok(original)
}

/// Step 2a: fail a member disk by moving its directory out of the volume
/// (into `scratch`, the demo's temporary directory).
fn fail_member(vol: &Volume, scratch: &Path) -> anyhow::Result<()> {
    let member = vol.params().members / 2;
    let member_dir = &vol.members()[member as usize];
    let aside = scratch.join(format!("failed-member-{member}"));
    std::fs::rename(member_dir, &aside).with_context(|| format!("failing member {member}"))?;
    println!(
        "== member {member} failed ({} moved away)",
        member_dir.display()
    );
    Ok(())
}

/// Step 2b: serve the object to every client through its lossy relay; true if
/// every client wrote the original bytes.
fn serve_clients(root: &Path, args: &DemoArgs, original: &[u8]) -> anyhow::Result<bool> {
    // The control API over HTTPS, with a self-signed pair made for the demo.
    let (cert, key) = super::cert::make_pair(&root.with_file_name("tls"), &[])?;
    let serve_args = isnode_serve::ServeConfig {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        tls_cert: Some(cert.clone()),
        tls_key: Some(key),
        ..Default::default()
    };
    let server = isnode_serve::start(root, &serve_args).context("starting the server")?;
    let base = server.url();
    println!(
        "== serving on {base} (engine {:?}); {} clients through lossy relays",
        server.engine(),
        CLIENTS.len()
    );
    let out_dir = tempfile::tempdir()?;
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    let mut relays = Vec::new();
    for (i, impairment) in CLIENTS.into_iter().enumerate() {
        let out = out_dir.path().join(format!("client-{i}.ts"));
        let (relay, client) = start_client(i, impairment, (&base, &cert), out, args, &stop)?;
        relays.push(relay);
        clients.push(client);
    }
    let results: Vec<anyhow::Result<PlayStats>> = clients
        .into_iter()
        .map(|c| {
            c.join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("client panicked")))
        })
        .collect();
    stop.store(true, Ordering::Relaxed);
    for r in relays {
        let _ = r.join();
    }
    let metrics = server.metrics();
    server.shutdown();
    let all_identical = print_clients(&results, out_dir.path(), original)?;
    print_server(&metrics);
    Ok(all_identical)
}

/// A relay with `impairment` in front of a client that plays the demo object into `out`.
fn start_client(
    i: usize,
    impairment: Impairment,
    (base, ca_cert): (&str, &Path),
    out: PathBuf,
    args: &DemoArgs,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<(JoinHandle<()>, JoinHandle<anyhow::Result<PlayStats>>)> {
    let socket = UdpSocket::bind("127.0.0.1:0")?;
    let mut relay_args = RelayArgs::new("127.0.0.1:0".parse()?, socket.local_addr()?);
    relay_args.impair.loss = impairment.loss;
    relay_args.impair.burst = impairment.burst;
    relay_args.impair.corrupt = impairment.corrupt;
    relay_args.impair.seed = 100 + i as u64;
    relay_args.max_seconds = args.duration + 60.0;
    let relay = Relay::bind(&relay_args)?;
    let relay_port = relay.local_addr()?.port();
    let relay_stop = stop.clone();
    let relay = std::thread::spawn(move || {
        let _ = relay.run(&relay_stop);
    });
    let mut play = PlayConfig::new(DEMO_OBJECT);
    play.server = base.to_string();
    play.ca_cert = Some(ca_cert.to_path_buf());
    play.session_port = Some(relay_port);
    play.out = Some(out);
    play.timeout_s = 10.0;
    let client = std::thread::spawn(move || isnode_recv::play_on(&play, socket));
    Ok((relay, client))
}

/// Prints one row per client; true if every client wrote the original bytes.
fn print_clients(
    results: &[anyhow::Result<PlayStats>],
    out_dir: &Path,
    original: &[u8],
) -> anyhow::Result<bool> {
    let mut all_identical = true;
    println!("   client  loss  burst  corrupt  lost  corrupt  repaired  startup_ms  identical");
    for (i, (r, imp)) in results.iter().zip(CLIENTS).enumerate() {
        let s = match r {
            Ok(s) => s,
            Err(e) => {
                all_identical = false;
                println!("   {i:>6} failed: {e:#}");
                continue;
            }
        };
        let same = std::fs::read(out_dir.join(format!("client-{i}.ts")))? == original;
        all_identical &= same;
        println!(
            "   {i:>6} {:>4.0}% {:>6} {:>7.1}% {:>5} {:>8} {:>9} {:>11} {:>10}",
            imp.loss * 100.0,
            imp.burst.map_or("-".to_string(), |b| format!("{b:.0}")),
            imp.corrupt * 100.0,
            s.packets_lost,
            s.packets_corrupt,
            s.symbols_repaired,
            s.startup_delay_ms
                .map_or("-".to_string(), |d| d.to_string()),
            if same { "yes" } else { "NO" }
        );
    }
    Ok(all_identical)
}

fn print_server(metrics: &isnode_serve::MetricsSnapshot) {
    println!(
        "== server: {} packets sent, {} blocks read from disk for {} cache hits (one copy shared by all sessions), \
         {} symbols of the failed member rebuilt before sending, member errors {:?}",
        metrics.packets_sent.iter().sum::<u64>(),
        metrics.cache_misses,
        metrics.cache_hits,
        metrics.symbols_rebuilt,
        metrics.member_errors
    );
}

/// Step 3: find the failed member and rebuild it from the others; true if the
/// volume checks clean afterwards.
fn find_and_rebuild(vol: &mut Volume) -> anyhow::Result<bool> {
    let report = isnode_store::check(vol, CheckOptions { repair: false }, &mut |_| {})?;
    println!(
        "== volume check: {} damaged segment(s), data lost: {}",
        report.damage.len(),
        !report.unrecoverable.is_empty()
    );
    let t = Instant::now();
    let repaired = isnode_store::check(vol, CheckOptions { repair: true }, &mut |_| {})?;
    let verify = isnode_store::check(vol, CheckOptions { repair: false }, &mut |_| {})?;
    println!(
        "== repair rebuilt {} segment(s) in {:.2} s; re-check: {}",
        repaired.damage.iter().filter(|d| d.repaired).count(),
        t.elapsed().as_secs_f64(),
        if verify.damaged() { "DAMAGED" } else { "clean" }
    );
    Ok(!verify.damaged())
}
