//! `isnode status`: a server's state in the terminal, from `GET /v1/status`.

use std::fmt::Write as _;
use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use isnode_proto::status::{MemberHealth, StatusBody};

use crate::cli::StatusArgs;

/// Prints the status once, or every second with `--watch`.
pub(crate) fn run(args: &StatusArgs) -> anyhow::Result<ExitCode> {
    let tls = isnode_recv::control::tls_config(args.ca_cert.as_deref())?;
    let client =
        isnode_recv::control::ControlClient::with_tls(&args.server, Duration::from_secs(5), tls)
            .with_token(args.token.as_deref());
    loop {
        let status = client.status()?;
        let text = render(&status);
        let mut out = std::io::stdout().lock();
        if args.watch {
            // Clear the screen and go home, then draw.
            write!(out, "\x1b[2J\x1b[H")?;
        }
        out.write_all(text.as_bytes())?;
        out.flush()?;
        if !args.watch {
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// The status as text: a summary line, then one table per section.
pub(crate) fn render(s: &StatusBody) -> String {
    let mut o = String::new();
    let streaming = s.sessions.iter().filter(|x| x.state == "streaming").count();
    let last = s.egress.last().copied().unwrap_or_default();
    let failed = s
        .members
        .iter()
        .filter(|m| m.health == MemberHealth::Failed)
        .count();
    let _ = writeln!(
        o,
        "isnode {} · engine {} · up {}",
        s.version,
        s.engine,
        clock(s.uptime_s as f64)
    );
    let _ = writeln!(
        o,
        "sessions {streaming} streaming ({} started, {} refused) · broadcasts {} · egress {} (UDP {}, HTTP {})",
        s.totals.sessions_started,
        s.totals.sessions_refused,
        s.broadcasts.len(),
        rate(last.udp_bps + last.http_bps),
        rate(last.udp_bps),
        rate(last.http_bps),
    );
    let ratio = s
        .cache
        .hit_ratio
        .map_or("-".to_string(), |r| format!("{:.1} %", r * 100.0));
    let _ = writeln!(
        o,
        "cache {ratio} hits ({} of {} used, {} evictions) · members {}/{} ok{}",
        bytes(s.cache.bytes),
        bytes(s.cache.pool_bytes),
        s.cache.evictions,
        s.members.len() - failed,
        s.members.len(),
        if failed > 0 {
            " (FAILED: see read errors)"
        } else {
            ""
        },
    );
    titles(&mut o, s);
    sessions(&mut o, s);
    broadcasts(&mut o, s);
    o
}

fn titles(o: &mut String, s: &StatusBody) {
    let rows = s
        .titles
        .iter()
        .map(|t| {
            vec![
                t.name.clone(),
                if t.content_type.is_empty() {
                    "-".into()
                } else {
                    t.content_type.clone()
                },
                bytes(t.size_bytes),
                clock(t.duration_s),
                rate(t.bitrate_bps),
                t.sessions.to_string(),
                match &t.problem {
                    Some(p) => format!("bad: {p}"),
                    None => "ok".into(),
                },
            ]
        })
        .collect();
    table(
        o,
        "TITLES",
        &[
            "NAME", "TYPE", "SIZE", "DURATION", "BITRATE", "SESSIONS", "STATUS",
        ],
        rows,
    );
}

fn sessions(o: &mut String, s: &StatusBody) {
    let rows = s
        .sessions
        .iter()
        .map(|x| {
            let state = match (x.state.as_str(), x.paused) {
                ("streaming", true) => "paused".to_string(),
                (st, _) => st.to_string(),
            };
            vec![
                x.id.clone(),
                x.title.clone(),
                clock(x.position_s),
                rate(x.rate_bps),
                x.loss_rate
                    .map_or("-".to_string(), |l| format!("{:.2} %", l * 100.0)),
                x.peer.clone(),
                state,
            ]
        })
        .collect();
    table(
        o,
        "SESSIONS",
        &["ID", "TITLE", "POSITION", "RATE", "LOSS", "PEER", "STATE"],
        rows,
    );
}

fn broadcasts(o: &mut String, s: &StatusBody) {
    let rows = s
        .broadcasts
        .iter()
        .map(|b| {
            vec![
                b.id.clone(),
                b.title.clone(),
                b.scheme.clone(),
                b.channels.to_string(),
                b.viewers.to_string(),
                rate(b.send_rate_bps),
            ]
        })
        .collect();
    table(
        o,
        "BROADCASTS",
        &["ID", "TITLE", "SCHEME", "CHANNELS", "VIEWERS", "RATE"],
        rows,
    );
}

/// Appends a titled table with columns as wide as their widest cell (`(none)` when
/// there are no rows).
fn table(o: &mut String, title: &str, head: &[&str], rows: Vec<Vec<String>>) {
    let _ = writeln!(o, "\n{title} ({})", rows.len());
    if rows.is_empty() {
        let _ = writeln!(o, "  (none)");
        return;
    }
    let mut width: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
    for r in &rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&width)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        format!("  {}", padded.join("  ").trim_end())
    };
    let _ = writeln!(o, "{}", line(head.to_vec()));
    for r in &rows {
        let _ = writeln!(o, "{}", line(r.iter().map(String::as_str).collect()));
    }
}

fn rate(bps: u64) -> String {
    let v = bps as f64;
    match bps {
        0..=999 => format!("{bps} bit/s"),
        1_000..=999_999 => format!("{:.1} kbit/s", v / 1e3),
        1_000_000..=999_999_999 => format!("{:.2} Mbit/s", v / 1e6),
        _ => format!("{:.2} Gbit/s", v / 1e9),
    }
}

fn bytes(n: u64) -> String {
    let v = n as f64;
    match n {
        0..=1023 => format!("{n} B"),
        1024..=1_048_575 => format!("{:.1} KiB", v / 1024.0),
        1_048_576..=1_073_741_823 => format!("{:.1} MiB", v / 1_048_576.0),
        _ => format!("{:.2} GiB", v / 1_073_741_824.0),
    }
}

fn clock(s: f64) -> String {
    if !s.is_finite() || s < 0.0 {
        return "-".into();
    }
    let t = s as u64;
    let (h, m, sec) = (t / 3600, (t % 3600) / 60, t % 60);
    if h > 0 {
        format!("{h}:{m:02}:{sec:02}")
    } else {
        format!("{m}:{sec:02}")
    }
}
