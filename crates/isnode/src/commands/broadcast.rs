//! `isnode broadcast plan` and `plot`: thin shells over `isnode-broadcast`.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context};
use isnode_bench::plot::{self, Chart, LineStyle, Series};
use isnode_broadcast::{lower_bound_bps, Plan, PlanRequest, Scheme, SchemeParams, Title};
use isnode_store::Volume;
use serde::Serialize;

use crate::cli::{BroadcastPlanArgs, BroadcastPlotArgs, BroadcastTitleArgs};

/// One row of the table (and of its JSON).
#[derive(Serialize)]
struct Row {
    scheme: String,
    segments: usize,
    channels: usize,
    server_rate_bps: f64,
    server_multiple: f64,
    nominal_multiple: f64,
    worst_wait_s: f64,
    client_channels: usize,
    client_peak_receive_bps: f64,
    client_peak_buffer_bytes: u64,
    late_bytes: u64,
    notes: Vec<String>,
}

impl Row {
    fn of(p: &Plan) -> Row {
        Row {
            scheme: p.scheme.to_string(),
            segments: p.segments.len(),
            channels: p.channels.len(),
            server_rate_bps: p.server_rate_bps,
            server_multiple: p.server_multiple(),
            nominal_multiple: p.nominal.server_multiple,
            worst_wait_s: p.client.worst_wait_s,
            client_channels: p.client.max_channels,
            client_peak_receive_bps: p.client.peak_receive_bps,
            client_peak_buffer_bytes: p.client.peak_buffer_bytes,
            late_bytes: p.client.late_bytes,
            notes: p.notes.clone(),
        }
    }
}

/// The title: from the catalog, or from `--duration` and `--bitrate`.
fn title_of(root: &Path, args: &BroadcastTitleArgs) -> anyhow::Result<(String, Title)> {
    if let Some(name) = &args.title {
        let vol = Volume::open(root).with_context(|| format!("opening {}", root.display()))?;
        let o = vol.object(name)?;
        let codeword_bytes = u64::from(o.source_symbols) * u64::from(o.symbol_len);
        let t = Title::new(u64::from(o.codewords), codeword_bytes, o.bitrate_bps)
            .with_context(|| format!("title {name:?}"))?;
        return Ok((name.clone(), t));
    }
    let (Some(duration), Some(bitrate)) = (args.duration, args.bitrate) else {
        bail!("give a stored title, or --duration and --bitrate");
    };
    let t = Title::from_duration(duration, bitrate, args.codeword_bytes)?;
    Ok((format!("{duration} s at {bitrate} bit/s"), t))
}

fn params(args: &BroadcastTitleArgs) -> SchemeParams {
    SchemeParams {
        skyscraper_width: args.width,
        quasi_harmonic_m: args.quasi_m,
        polyharmonic_m: args.poly_m,
    }
}

/// `broadcast plan`.
pub(super) fn plan(root: &Path, args: &BroadcastPlanArgs) -> anyhow::Result<ExitCode> {
    let (label, title) = title_of(root, &args.title)?;
    let params = params(&args.title);
    let schemes = match &args.scheme {
        Some(name) => vec![Scheme::parse(name, params)?],
        None => Scheme::all(params),
    };
    let request = |scheme| PlanRequest {
        title,
        max_wait_s: args.max_wait,
        scheme,
        client_cap_bps: args.client_cap,
    };
    if let (Some(_), true) = (&args.scheme, args.json) {
        let p = isnode_broadcast::plan(&request(schemes[0]))?;
        println!("{}", serde_json::to_string_pretty(&p)?);
        return Ok(ExitCode::SUCCESS);
    }
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    for s in schemes {
        match isnode_broadcast::plan(&request(s)) {
            Ok(p) => rows.push(Row::of(&p)),
            Err(e) if args.scheme.is_none() => failures.push(format!("{s}: {e}")),
            Err(e) => return Err(e.into()),
        }
    }
    if rows.is_empty() {
        bail!("no scheme can be planned:\n  {}", failures.join("\n  "));
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        print_table(&label, &title, args.max_wait, &rows);
    }
    for f in &failures {
        eprintln!("isnode: {f}");
    }
    Ok(ExitCode::SUCCESS)
}

fn print_table(label: &str, t: &Title, max_wait_s: f64, rows: &[Row]) {
    println!(
        "{label}: {} codewords of {} B ({:.1} s, codeword airtime {:.3} s), max wait {max_wait_s} s, \
         lower bound {:.2} Mbit/s",
        t.codewords,
        t.codeword_payload_bytes,
        t.duration_s(),
        t.codeword_airtime_s(),
        lower_bound_bps(t.duration_s(), t.bitrate_bps as f64, max_wait_s) / 1e6
    );
    println!(
        "{:<22} {:>8} {:>8} {:>11} {:>8} {:>9} {:>7} {:>9} {:>11} {:>10} {:>6}",
        "SCHEME",
        "SEGMENTS",
        "CHANNELS",
        "SERVER_MBPS",
        "x_RATE",
        "NOMINAL_x",
        "WAIT_S",
        "CLIENT_CH",
        "CLIENT_MBPS",
        "BUFFER_MB",
        "LATE"
    );
    for r in rows {
        println!(
            "{:<22} {:>8} {:>8} {:>11.2} {:>8.2} {:>9.2} {:>7.2} {:>9} {:>11.2} {:>10.1} {:>6}",
            r.scheme,
            r.segments,
            r.channels,
            r.server_rate_bps / 1e6,
            r.server_multiple,
            r.nominal_multiple,
            r.worst_wait_s,
            r.client_channels,
            r.client_peak_receive_bps / 1e6,
            r.client_peak_buffer_bytes as f64 / 1e6,
            if r.late_bytes > 0 { "LATE" } else { "0" }
        );
    }
    for r in rows.iter().filter(|r| !r.notes.is_empty()) {
        println!("  {}: {}", r.scheme, r.notes.join("; "));
    }
}

/// `broadcast plot`.
pub(super) fn plot(root: &Path, args: &BroadcastPlotArgs) -> anyhow::Result<ExitCode> {
    let (label, title) = title_of(root, &args.title)?;
    let params = params(&args.title);
    let b = title.bitrate_bps as f64;
    let mut series = Vec::new();
    for name in &args.schemes {
        let scheme = Scheme::parse(name, params)?;
        let mut points = Vec::new();
        for &w in &args.waits {
            let req = PlanRequest {
                title,
                max_wait_s: w,
                scheme,
                client_cap_bps: None,
            };
            match isnode_broadcast::plan(&req) {
                Ok(p) => points.push((w, p.server_rate_bps / b)),
                Err(e) => eprintln!("isnode: {scheme} at {w} s: {e}"),
            }
        }
        series.push(Series {
            name: scheme.to_string(),
            points,
        });
    }
    let d = title.duration_s();
    series.push(Series {
        name: "bound ln(1+D/w)".to_string(),
        points: args
            .waits
            .iter()
            .map(|&w| (w, lower_bound_bps(d, b, w) / b))
            .collect(),
    });
    let chart = Chart {
        title: "Periodic broadcast: server bandwidth against the maximum wait".to_string(),
        subtitle: format!(
            "{label}; {} B codewords; planned at codeword granularity",
            title.codeword_payload_bytes
        ),
        x_label: "maximum start-up wait, s".to_string(),
        y_label: "server bandwidth, multiples of the bitrate".to_string(),
    };
    let svg = plot::lines(&chart, &series, LineStyle::Marked);
    std::fs::write(&args.out, svg).with_context(|| format!("writing {}", args.out.display()))?;
    println!("wrote {}", args.out.display());
    Ok(ExitCode::SUCCESS)
}
