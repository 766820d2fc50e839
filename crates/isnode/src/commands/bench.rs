//! `isnode bench ...`.

use std::process::ExitCode;

use anyhow::Context;

use crate::cli::CodecBenchArgs;

/// `bench codec`: our codec with the active kernel (`ISNODE_FEC_KERNEL` forces one), or with
/// `--compare` every kernel beside the peer codecs.
pub(super) fn codec(args: &CodecBenchArgs) -> anyhow::Result<ExitCode> {
    use isnode_bench::codec;
    let cfg = codec::CodecBenchConfig {
        k: args.k,
        m: args.m,
        symbol_len_bytes: args.symbol_size,
        seconds: args.seconds,
        seed: args.seed,
    };
    let (reports, skipped) = if args.compare {
        codec::run_compare(&cfg).context("running the codec comparison")?
    } else {
        let report = codec::run_codec_bench(&cfg).context("running the codec benchmark")?;
        (vec![report], Vec::new())
    };
    println!(
        "MB/s of source data per core (per CPU second of the benchmark thread); \
         enc_x / dec_x: ratio to our fastest kernel"
    );
    print!("{}", codec::format_table(&reports));
    for s in &skipped {
        println!("skipped: {s}");
    }
    let json = serde_json::to_string_pretty(&serde_json::json!({
        "reports": reports,
        "skipped": skipped,
    }))?;
    if let Some(path) = &args.json {
        std::fs::write(path, &json).with_context(|| format!("writing {}", path.display()))?;
    } else {
        println!("{json}");
    }
    Ok(ExitCode::SUCCESS)
}

/// `bench serve`: prints the table, and writes JSON with `--json`.
pub(super) fn serve(args: &crate::cli::ServeBenchArgs) -> anyhow::Result<ExitCode> {
    use isnode_bench::serve::{ServeBenchConfig, Sink};
    let cfg = ServeBenchConfig {
        isnode_exe: std::env::current_exe().context("finding the isnode binary")?,
        engines: args.engines.clone(),
        streams: args.streams,
        bitrate_bps: args.bitrate,
        seconds: args.seconds,
        objects: args.objects,
        cache_size_bytes: args.cache_size,
        sink: match args.sink {
            crate::cli::Sink::Loopback => Sink::Loopback,
            crate::cli::Sink::Ifb => Sink::Ifb,
        },
        device_segmentation: args.device_segmentation,
        protection: match args.encrypted {
            true => isnode_bench::serve::Protection::ClearAndEncrypted,
            false => isnode_bench::serve::Protection::Clear,
        },
    };
    let report = isnode_bench::serve::run(&cfg).context("running the serve benchmark")?;
    println!("{}", isnode_bench::serve::format_table(&report));
    if let Some(path) = &args.json {
        write_json(path, &report)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `bench load`: a progress line while it runs, then the table, and JSON with `--json`.
pub(super) fn load(args: &crate::cli::LoadBenchArgs) -> anyhow::Result<ExitCode> {
    use isnode_bench::load::{self, Confinement, LoadBenchConfig, NetMode, NginxVariant};
    let nginx = args
        .nginx
        .iter()
        .filter(|v| !v.is_empty())
        .map(|v| match v.as_str() {
            "sendfile" => Ok(NginxVariant::Sendfile),
            "aio" => Ok(NginxVariant::Aio),
            "directio" => Ok(NginxVariant::Directio),
            "tls" => Ok(NginxVariant::Tls),
            other => {
                anyhow::bail!("unknown nginx variant {other:?} (sendfile, aio, directio, tls)")
            }
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let cfg = LoadBenchConfig {
        isnode_exe: std::env::current_exe().context("finding the isnode binary")?,
        engines: args
            .engines
            .iter()
            .filter(|e| !e.is_empty())
            .cloned()
            .collect(),
        nginx,
        titles: args.titles,
        bitrate_bps: args.bitrate,
        title_s: args.title_seconds,
        seconds: args.seconds,
        streams: args.streams,
        max_streams: args.max_streams,
        bisect_steps: args.bisect_steps,
        pass_fraction: args.pass_fraction,
        startup_buffer_s: args.startup_buffer,
        cache_size_bytes: args.cache_size,
        seed: args.seed,
        net: match args.net {
            crate::cli::LoadNet::Veth => NetMode::Veth,
            crate::cli::LoadNet::Loopback => NetMode::Loopback,
        },
        confine: Confinement::default(),
        disk_admission: match args.disk_admission {
            Some(percent) => load::DiskAdmission::AtReadLimit { percent },
            None => load::DiskAdmission::Off,
        },
    };
    // One run per memory limit (one unlimited run without any).
    let memory: Vec<Option<u64>> = match args.memory_limit.is_empty() {
        true => vec![None],
        false => args.memory_limit.iter().map(|m| Some(*m)).collect(),
    };
    let mut reports = Vec::new();
    for memory_limit_bytes in memory {
        let cfg = LoadBenchConfig {
            confine: Confinement {
                memory_limit_bytes,
                disk_read_limit_bps: args.disk_read_limit,
            },
            ..cfg.clone()
        };
        let bar = indicatif::ProgressBar::new_spinner();
        bar.enable_steady_tick(std::time::Duration::from_millis(200));
        let report = load::run(&cfg, &mut |msg| bar.set_message(msg.to_string()));
        bar.finish_and_clear();
        let report = report.context("running the load benchmark")?;
        print!("{}", load::report::format_table(&report));
        reports.push(report);
    }
    write_load_outputs(args, &reports)?;
    Ok(ExitCode::SUCCESS)
}

/// The figures and JSON of `bench load`: those of the one run, or, for several memory
/// limits, the last run's figures, the sweep's, and every report (`{"sweep": [...]}`).
fn write_load_outputs(
    args: &crate::cli::LoadBenchArgs,
    reports: &[isnode_bench::load::LoadReport],
) -> anyhow::Result<()> {
    use isnode_bench::load;
    let Some(last) = reports.last() else {
        return Ok(());
    };
    if let Some(dir) = &args.plots {
        let mut written = load::plots::write(last, dir)?;
        if last.confinement.is_some() {
            written.extend(load::plots::write_sweep(reports, dir)?);
        }
        for p in written {
            println!("wrote {}", p.display());
        }
    }
    match (&args.json, reports) {
        (None, _) => Ok(()),
        (Some(path), [one]) => write_json(path, one),
        (Some(path), many) => {
            let json = serde_json::json!({
                "command": std::env::args().collect::<Vec<_>>().join(" "),
                "sweep": many,
            });
            std::fs::write(path, serde_json::to_string_pretty(&json)?)
                .with_context(|| format!("writing {}", path.display()))
        }
    }
}

/// `bench startup`: the table, and JSON with `--json`.
pub(super) fn startup(args: &crate::cli::StartupBenchArgs) -> anyhow::Result<ExitCode> {
    use isnode_bench::startup::{self, Mode, StartupBenchConfig};
    let isnode_exe = std::env::current_exe().context("finding the isnode binary")?;
    let cfg = StartupBenchConfig {
        client_exe: args
            .client_exe
            .clone()
            .unwrap_or_else(|| isnode_exe.clone()),
        isnode_exe,
        engine: args.engine.clone(),
        bitrates_bps: args.bitrates.clone(),
        modes: args
            .modes
            .iter()
            .map(|m| Mode::parse(m))
            .collect::<anyhow::Result<_>>()?,
        sessions: args.sessions,
        concurrency: args.concurrency,
        seed: args.seed,
    };
    let report = startup::run(&cfg).context("running the start-up benchmark")?;
    print!("{}", startup::format_table(&report));
    if let Some(path) = &args.json {
        write_json(path, &report)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `bench upload`: the table, and JSON with `--json`.
pub(super) fn upload(args: &crate::cli::UploadBenchArgs) -> anyhow::Result<ExitCode> {
    use isnode_bench::upload::{self, UploadBenchConfig};
    let cfg = UploadBenchConfig {
        isnode_exe: std::env::current_exe().context("finding the isnode binary")?,
        bitrate_bps: args.bitrate,
        seconds: args.seconds,
        rounds: args.rounds,
    };
    let report = upload::run(&cfg).context("running the upload benchmark")?;
    print!("{}", upload::format_table(&report));
    if let Some(path) = &args.json {
        write_json(path, &report)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `bench verify`: the table, and JSON with `--json`.
pub(super) fn verify(args: &crate::cli::VerifyBenchArgs) -> anyhow::Result<ExitCode> {
    use isnode_bench::verify::{self, VerifyBenchConfig};
    let cfg = VerifyBenchConfig {
        isnode_exe: std::env::current_exe().context("finding the isnode binary")?,
        bitrate_bps: args.bitrate,
        seconds: args.seconds,
        rounds: args.rounds,
        seed: args.seed,
        player_loss: args.player_loss.clone(),
        player_rounds: args.player_rounds,
    };
    let report = verify::run(&cfg).context("running the verification benchmark")?;
    print!("{}", verify::format_table(&report));
    if let Some(path) = &args.json {
        write_json(path, &report)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `bench placement`: the table, JSON with `--json`, the SVG with `--plot`.
pub(super) fn placement(args: &crate::cli::PlacementBenchArgs) -> anyhow::Result<ExitCode> {
    use isnode_bench::placement::{self, PlacementBenchConfig};
    anyhow::ensure!(
        args.nodes.iter().all(|&n| (1..=10_000).contains(&n)),
        "--nodes: each size must be 1 to 10000"
    );
    anyhow::ensure!(
        args.max_replicas.iter().all(|&r| r >= 1),
        "--max-replicas: each must be at least 1"
    );
    anyhow::ensure!(
        args.hot_share_of_node > 0.0,
        "--hot-share-of-node must be above 0"
    );
    anyhow::ensure!(
        args.load_bound == 0.0 || args.load_bound >= 1.0,
        "--load-bound must be 0 (off) or at least 1"
    );
    anyhow::ensure!(
        (1..=100_000).contains(&args.requests_per_node)
            && (1..=1000).contains(&args.titles_per_node),
        "--requests-per-node must be 1 to 100000 and --titles-per-node 1 to 1000"
    );
    let cfg = PlacementBenchConfig {
        nodes: args.nodes.clone(),
        max_replicas: args.max_replicas.clone(),
        requests_per_node: args.requests_per_node,
        titles_per_node: args.titles_per_node,
        hot_share_of_node: args.hot_share_of_node,
        load_bound: (args.load_bound > 0.0).then_some(args.load_bound),
        seed: args.seed,
    };
    let report = placement::run(&cfg);
    print!("{}", placement::format_table(&report));
    if let Some(path) = &args.json {
        write_json(path, &report)?;
    }
    if let Some(path) = &args.plot {
        std::fs::write(path, placement::plot_balance(&report))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `bench soak`: progress on stderr, the summary, JSON and plots; with `--check`, exit 1
/// unless the run was clean.
pub(super) fn soak(args: &crate::cli::SoakBenchArgs) -> anyhow::Result<ExitCode> {
    use isnode_bench::soak::{self, SoakConfig};
    anyhow::ensure!(
        args.minutes > 0.0 && args.minutes <= 24.0 * 60.0,
        "--minutes must be above 0 and at most a day"
    );
    anyhow::ensure!(
        (1..=2000).contains(&args.sessions),
        "--sessions must be 1 to 2000"
    );
    anyhow::ensure!(
        (1..=100).contains(&args.titles),
        "--titles must be 1 to 100"
    );
    anyhow::ensure!(
        (4..=3600).contains(&args.title_seconds),
        "--title-seconds must be 4 to 3600"
    );
    let cfg = SoakConfig {
        isnode_exe: std::env::current_exe().context("finding the isnode binary")?,
        seconds: args.minutes * 60.0,
        sessions: args.sessions,
        titles: args.titles,
        title_s: args.title_seconds,
        bitrate_bps: args.bitrate,
        seed: args.seed,
        cache_size_bytes: args.cache_size_bytes,
    };
    let report = soak::run(&cfg, &mut |m| eprintln!("soak: {m}")).context("running the soak")?;
    print!("{}", soak::format_table(&report));
    if let Some(path) = &args.json {
        write_json(path, &report)?;
    }
    if let Some(dir) = &args.plots {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let (rss, fds) = soak::plots(&report);
        for (name, svg) in [("soak-rss.svg", rss), ("soak-fds.svg", fds)] {
            let path = dir.join(name);
            std::fs::write(&path, svg).with_context(|| format!("writing {}", path.display()))?;
        }
    }
    Ok(if args.check && !report.clean() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Writes a benchmark's report as JSON to `path`, with the command line that made it.
fn write_json(path: &std::path::Path, report: &impl serde::Serialize) -> anyhow::Result<()> {
    let json = serde_json::json!({
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "report": report,
    });
    std::fs::write(path, serde_json::to_string_pretty(&json)?)
        .with_context(|| format!("writing {}", path.display()))
}

/// Refuses `bench background` flags out of their ranges (`clients` and `title_s` as the
/// run will use them: `--check` has its own).
fn check_background_args(
    args: &crate::cli::BackgroundBenchArgs,
    clients: usize,
    title_s: u64,
) -> anyhow::Result<()> {
    anyhow::ensure!((1..=500).contains(&clients), "--clients must be 1 to 500");
    anyhow::ensure!(args.max_clients <= 500, "--max-clients must be at most 500");
    anyhow::ensure!(args.bisect_steps <= 10, "--bisect-steps must be at most 10");
    anyhow::ensure!(
        args.prebuffer_ms <= 10_000,
        "--prebuffer-ms must be at most 10000"
    );
    anyhow::ensure!(
        (-20..=19).contains(&args.client_nice),
        "--client-nice must be -20 to 19"
    );
    anyhow::ensure!(
        (4..=3600).contains(&title_s),
        "--title-seconds must be 4 to 3600"
    );
    anyhow::ensure!(
        args.disk_read_limit >= 1 << 20,
        "--disk-read-limit must be at least 1 MiB/s"
    );
    anyhow::ensure!(
        args.memory_limit >= 32 << 20,
        "--memory-limit must be at least 32 MiB"
    );
    Ok(())
}

/// `bench background`.
pub(super) fn background(args: &crate::cli::BackgroundBenchArgs) -> anyhow::Result<ExitCode> {
    use crate::cli::{BackgroundPriorityArg, CoresArg};
    use isnode_bench::background::{self, BackgroundConfig, BackgroundPriority, Cores, CpuLoad};
    let (clients, bitrate_bps, title_s) = match args.check {
        true => (2, 2_000_000, 8),
        false => (args.clients, args.bitrate, args.title_seconds),
    };
    check_background_args(args, clients, title_s)?;
    let blocks: Vec<Option<u32>> = match args.block_sizes.is_empty() {
        true => vec![None],
        false => args.block_sizes.iter().map(|b| Some(*b)).collect(),
    };
    let mut reports = Vec::new();
    for block_len in blocks {
        let cfg = BackgroundConfig {
            isnode_exe: std::env::current_exe().context("finding the isnode binary")?,
            server_exe: args.server_exe.clone(),
            client_nice: args.client_nice,
            prebuffer_ms: args.prebuffer_ms,
            clients,
            max_clients: if args.check { 0 } else { args.max_clients },
            bisect_steps: args.bisect_steps,
            bitrate_bps,
            title_s,
            disk_read_bps: args.disk_read_limit,
            memory_bytes: args.memory_limit,
            cache_size_bytes: args.cache_size_bytes,
            scrub_rate_bps: args.scrub_rate_bps,
            block_len,
            cpu_load: match args.cpu_load {
                true => CpuLoad::OneCore,
                false => CpuLoad::Idle,
            },
            cores: match args.cores {
                CoresArg::Split => Cores::Split,
                CoresArg::Shared => Cores::Shared,
            },
            priority: match args.background_priority {
                BackgroundPriorityArg::Low => BackgroundPriority::Low,
                BackgroundPriorityArg::Normal => BackgroundPriority::Normal,
            },
            dir: args.dir.clone(),
            seed: args.seed,
        };
        let report = background::run(&cfg, &mut |m| eprintln!("background: {m}"))
            .context("running the background benchmark")?;
        print!("{}", background::format_table(&report));
        reports.push(report);
    }
    if let Some(path) = &args.json {
        write_json(path, &reports)?;
    }
    let all_identical = reports
        .iter()
        .flat_map(|r| &r.rows)
        .all(|r| r.identical == r.clients);
    Ok(if args.check && !all_identical {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Most bytes of one recorded timeline file.
const MAX_TIMELINE_FILE_BYTES: u64 = 4 << 20;

/// `isnode bench timelines`: the recorded timelines drawn as one SVG.
pub(super) fn timelines(args: &crate::cli::TimelinesBenchArgs) -> anyhow::Result<ExitCode> {
    use anyhow::Context as _;
    use isnode_bench::timelines::{plot, Timeline};
    use std::io::Read as _;
    let mut all = Vec::with_capacity(args.files.len());
    for f in &args.files {
        let mut text = String::new();
        std::fs::File::open(f)
            .with_context(|| format!("opening {}", f.display()))?
            .take(MAX_TIMELINE_FILE_BYTES + 1)
            .read_to_string(&mut text)
            .with_context(|| format!("reading {}", f.display()))?;
        anyhow::ensure!(
            text.len() as u64 <= MAX_TIMELINE_FILE_BYTES,
            "{}: larger than {MAX_TIMELINE_FILE_BYTES} bytes",
            f.display()
        );
        let t: Timeline = serde_json::from_str(&text)
            .with_context(|| format!("{}: not a recorded timeline", f.display()))?;
        t.check()
            .map_err(|e| anyhow::anyhow!("{}: {e}", f.display()))?;
        all.push(t);
    }
    let svg = plot(&args.title, &args.y_label, &all);
    std::fs::write(&args.out, svg).with_context(|| format!("writing {}", args.out.display()))?;
    println!("wrote {}", args.out.display());
    Ok(ExitCode::SUCCESS)
}
