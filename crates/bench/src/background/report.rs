//! [`BackgroundReport`] as text: the ramp, the phases, their traces.

use super::{BackgroundReport, CpuLoad, PhaseRow};

/// The report as tables.
pub fn format_table(r: &BackgroundReport) -> String {
    let mut s = format!(
        "disk {} read-limited to {:.1} MB/s, memory {} MiB; {} KiB blocks; titles of {:.1} \
         Mbit/s, {} s; background priority {:?}; clients at nice {}, {} ms buffered; cores \
         {:?}; load average {} -> {}\n",
        r.disk,
        r.disk_read_bps as f64 / 1e6,
        r.memory_bytes >> 20,
        r.block_len >> 10,
        r.bitrate_bps as f64 / 1e6,
        r.title_s,
        r.priority,
        r.client_nice,
        r.prebuffer_ms,
        r.cores,
        r.load_average.0,
        r.load_average.1,
    );
    s.push_str("alone, ramp:\n  ");
    let ramp: Vec<String> = r
        .ramp
        .iter()
        .map(|l| {
            let refused = match l.refused {
                0 => String::new(),
                n => format!(", {n} refused"),
            };
            format!(
                "{}/{} ({} MiB pool{refused}; {} stalled, {} late bursts, min slack {} ms)",
                l.valid,
                l.clients,
                l.pool_bytes >> 20,
                l.streams_stalled,
                l.late_bursts,
                l.min_slack_ms.map_or("-".into(), |m| m.to_string()),
            )
        })
        .collect();
    s.push_str(&ramp.join("\n  "));
    let all_valid = r.ramp.iter().any(|l| l.valid == l.clients);
    s.push_str(&format!(
        "\n{} {} (pool {} MiB)\n",
        match all_valid {
            true => "most clients valid alone:",
            false => "no level valid alone; the phases at the first level:",
        },
        r.clients,
        r.pool_bytes >> 20
    ));
    s.push_str(&phases(&r.rows));
    s.push_str(&traces(&r.rows));
    s.push_str(&format!(
        "rebuild alone (no server): {:.2} MB/s\n",
        r.rebuild_alone_mb_s
    ));
    s
}

/// A phase's name with its competing load.
fn label(x: &PhaseRow) -> String {
    match x.cpu_load {
        CpuLoad::Idle => x.phase.clone(),
        CpuLoad::OneCore => format!("{}, busy core", x.phase),
    }
}

fn phases(rows: &[PhaseRow]) -> String {
    let mut s = format!(
        "{:<30} {:>7} {:>9} {:>11} {:>9} {:>12} {:>12} {:>10} {:>15}\n",
        "phase",
        "valid",
        "identical",
        "late bursts",
        "underruns",
        "min slack ms",
        "late samples",
        "serve MB/s",
        "background MB/s"
    );
    for x in rows {
        s.push_str(&format!(
            "{:<30} {:>3}/{:<3} {:>9} {:>11} {:>9} {:>12} {:>12} {:>10.2} {:>15}\n",
            label(x),
            x.valid,
            x.clients,
            x.identical,
            x.late_bursts,
            x.underruns,
            x.min_slack_ms.map_or("-".into(), |m| m.to_string()),
            x.late_samples,
            x.serve_read_mb_s,
            x.background_mb_s.map_or("-".into(), |m| format!("{m:.2}")),
        ));
    }
    s
}

fn traces(rows: &[PhaseRow]) -> String {
    let mut s = format!(
        "{:<30} {:>15} {:>12} {:>9} {:>12} {:>16} {:>8}\n",
        "trace",
        "streams stalled",
        "worst second",
        "disk use",
        "server CPU s",
        "background CPU s",
        "refused"
    );
    for x in rows {
        let t = &x.trace;
        s.push_str(&format!(
            "{:<30} {:>15} {:>12.2} {:>9} {:>12.1} {:>16} {:>8}\n",
            label(x),
            t.streams_with_underruns,
            t.worst_second,
            t.disk_busy.map_or("-".into(), |d| format!("{d:.2}")),
            t.server_cpu_s,
            t.background_cpu_s.map_or("-".into(), |c| format!("{c:.1}")),
            t.refused,
        ));
    }
    s
}
