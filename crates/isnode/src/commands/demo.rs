//! `isnode demo`: the whole path on loopback, on the default volume.
//!
//! Generate an MPEG-TS stream, ingest it as prefabricated packets, serve it to
//! several concurrent clients through lossy, corrupting relays with a member
//! disk failed, check that every client wrote the original bytes, then find
//! and rebuild the failed member.

use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{ensure, Context};
use isnode_recv::{PlayArgs, PlayStats, Relay, RelayArgs};
use isnode_store::{CheckOptions, IngestOptions, Volume};

use crate::cli::DemoArgs;

const DEMO_OBJECT: &str = "demo.ts";

/// Loss, mean burst length, and corruption of each demo client's relay.
const CLIENTS: [(f64, Option<f64>, f64); 4] = [
    (0.0, None, 0.0),
    (0.03, None, 0.005),
    (0.05, Some(4.0), 0.0),
    (0.02, Some(2.0), 0.01),
];

/// Runs the demo.
pub fn run(root: &Path, args: &DemoArgs) -> anyhow::Result<ExitCode> {
    let mut vol =
        Volume::open_or_create(root).with_context(|| format!("opening {}", root.display()))?;
    let p = *vol.params();
    println!(
        "== volume {}: {} members, RS(k={}, m={}) over GF(2^8), {}-byte symbols",
        root.display(),
        p.members,
        p.source_symbols,
        p.repair_symbols,
        p.symbol_len
    );

    // 1. A test stream, ingested as prefabricated packets.
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
        replace: true,
    };
    let t = Instant::now();
    let rec = isnode_store::ingest(
        &mut vol,
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
    super::objects::ls(root, &crate::cli::LsArgs { json: false })?;

    // 2. Fail a member disk, then serve to several clients through lossy relays.
    let member = p.members / 2;
    let member_dir = vol.members()[member as usize].clone();
    let aside = PathBuf::from(format!("{}.failed-demo", member_dir.display()));
    let _ = std::fs::remove_dir_all(&aside);
    std::fs::rename(&member_dir, &aside).with_context(|| format!("failing member {member}"))?;
    println!(
        "== member {member} failed ({} moved away)",
        member_dir.display()
    );
    let serve_args = isnode_serve::ServeArgs {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        ..Default::default()
    };
    let server = isnode_serve::start(root, &serve_args).context("starting the server")?;
    let base = format!("http://{}", server.local_addr());
    println!(
        "== serving on {base} (engine {:?}); {} clients through lossy relays",
        server.engine(),
        CLIENTS.len()
    );
    let out_dir = tempfile::tempdir()?;
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    let mut relays = Vec::new();
    for (i, (loss, burst, corrupt)) in CLIENTS.into_iter().enumerate() {
        let socket = UdpSocket::bind("127.0.0.1:0")?;
        let mut relay_args = RelayArgs::new("127.0.0.1:0".parse()?, socket.local_addr()?);
        relay_args.impair.loss = loss;
        relay_args.impair.burst = burst;
        relay_args.impair.corrupt = corrupt;
        relay_args.impair.seed = 100 + i as u64;
        relay_args.max_seconds = args.duration + 60.0;
        let relay = Relay::bind(&relay_args)?;
        let relay_port = relay.local_addr()?.port();
        let relay_stop = stop.clone();
        relays.push(std::thread::spawn(move || relay.run(&relay_stop)));
        let mut play = PlayArgs::new(DEMO_OBJECT);
        play.server = base.clone();
        play.session_port = Some(relay_port);
        play.out = Some(out_dir.path().join(format!("client-{i}.ts")));
        play.timeout_s = 10.0;
        clients.push(std::thread::spawn(move || {
            isnode_recv::play_on(&play, socket)
        }));
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
    let mut all_identical = true;
    println!("   client  loss  burst  corrupt  lost  corrupt  repaired  startup_ms  identical");
    for (i, r) in results.iter().enumerate() {
        let (loss, burst, corrupt) = CLIENTS[i];
        match r {
            Ok(s) => {
                let out = std::fs::read(out_dir.path().join(format!("client-{i}.ts")))?;
                let same = out == original;
                all_identical &= same;
                println!(
                    "   {i:>6} {:>4.0}% {:>6} {:>7.1}% {:>5} {:>8} {:>9} {:>11} {:>10}",
                    loss * 100.0,
                    burst.map_or("-".to_string(), |b| format!("{b:.0}")),
                    corrupt * 100.0,
                    s.packets_lost,
                    s.packets_corrupt,
                    s.symbols_repaired,
                    s.startup_delay_ms
                        .map_or("-".to_string(), |d| d.to_string()),
                    if same { "yes" } else { "NO" }
                );
            }
            Err(e) => {
                all_identical = false;
                println!("   {i:>6} failed: {e:#}");
            }
        }
    }
    println!(
        "== server: {} packets sent, {} blocks read from disk for {} cache hits (one copy shared by all sessions), \
         {} symbols of the failed member rebuilt before sending, member errors {:?}",
        metrics.packets_sent.iter().sum::<u64>(),
        metrics.cache_misses,
        metrics.cache_hits,
        metrics.symbols_rebuilt,
        metrics.member_errors
    );

    // 3. Find the failed member and rebuild it from the others.
    let report = isnode_store::check(&mut vol, CheckOptions { repair: false }, &mut |_| {})?;
    println!(
        "== volume check: {} damaged segment(s), data lost: {}",
        report.damage.len(),
        !report.unrecoverable.is_empty()
    );
    let t = Instant::now();
    let repaired = isnode_store::check(&mut vol, CheckOptions { repair: true }, &mut |_| {})?;
    let verify = isnode_store::check(&mut vol, CheckOptions { repair: false }, &mut |_| {})?;
    println!(
        "== repair rebuilt {} segment(s) in {:.2} s; re-check: {}",
        repaired.damage.iter().filter(|d| d.repaired).count(),
        t.elapsed().as_secs_f64(),
        if verify.damaged() { "DAMAGED" } else { "clean" }
    );
    std::fs::remove_dir_all(&aside).with_context(|| format!("removing {}", aside.display()))?;
    ensure!(all_identical, "a client's output differs from the original");
    ensure!(
        !verify.damaged(),
        "the volume is still damaged after repair"
    );
    println!("== demo passed: every client got the original bytes through loss, corruption and a failed disk, and the disk was rebuilt");
    Ok(ExitCode::SUCCESS)
}
