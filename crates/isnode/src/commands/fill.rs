//! `isnode fill TITLE... --server URL [--rate-bps N] [--wait]`: pre-fills titles from the
//! server's origin ahead of demand (`POST /v1/fills`), and with `--wait` follows them
//! (`GET /v1/fills`) until each ends (docs/protocol.md, "Origin fills").

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::{json, Value};

use crate::cli::FillArgs;

/// The server when `--server` is not given.
const DEFAULT_SERVER: &str = "http://127.0.0.1:7878";
/// Pause between two looks at the fills (`--wait`).
const POLL: Duration = Duration::from_secs(1);

/// `fill`.
pub(super) fn run(args: &FillArgs) -> anyhow::Result<ExitCode> {
    let server = args.remote.server.as_deref().unwrap_or(DEFAULT_SERVER);
    let base = isnode_recv::control::base_url(server);
    let agent = super::remote::agent(&args.remote)?;
    let url = format!("{base}/v1/fills");
    let mut body = json!({ "titles": args.titles });
    if let Some(r) = args.rate_bps {
        body["rate_bps"] = json!(r);
    }
    let mut req = agent.post(&url);
    if let Some(t) = &args.remote.token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let resp = req
        .send_json(&body)
        .with_context(|| format!("asking {url}"))?;
    let text = super::remote::answer(resp, 202, "pre-fill", &args.titles.join(", "))?;
    let answer: Vec<Value> = serde_json::from_str(&text).context("reading the answer")?;
    let mut refused = false;
    for t in &answer {
        let state = t["state"].as_str().unwrap_or("?");
        refused |= state == "refused";
        match t["error"].as_str() {
            Some(e) => println!("{}: {state} ({e})", t["name"]),
            None => println!("{}: {state}", t["name"]),
        }
    }
    if args.wait && !follow(&agent, &args.remote, &url, args)? {
        refused = true;
    }
    Ok(if refused {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Follows the named fills until each is done or failed (or `--wait-timeout-s`); whether
/// all are done.
fn follow(
    agent: &ureq::Agent,
    remote: &crate::cli::RemoteArgs,
    url: &str,
    args: &FillArgs,
) -> anyhow::Result<bool> {
    let deadline = Instant::now() + Duration::from_secs(args.wait_timeout_s);
    loop {
        let mut req = agent.get(url);
        if let Some(t) = &remote.token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let resp = req.call().with_context(|| format!("asking {url}"))?;
        let text = super::remote::answer(resp, 200, "fill list", "")?;
        let list: Value = serde_json::from_str(&text).context("reading the fills")?;
        let fills = list["fills"].as_array().cloned().unwrap_or_default();
        let mut open = 0;
        let mut failed = false;
        for name in &args.titles {
            let Some(f) = fills.iter().find(|f| f["name"].as_str() == Some(name)) else {
                continue; // present already, or forgotten: nothing to follow
            };
            let phase = f["phase"].as_str().unwrap_or("?");
            eprintln!(
                "{name}: {phase} {}/{} bytes, {} bit/s",
                f["filled_bytes"], f["size_bytes"], f["rate_bps"]
            );
            match phase {
                "done" => {}
                "failed" => failed = true,
                _ => open += 1,
            }
        }
        if open == 0 {
            return Ok(!failed);
        }
        if Instant::now() >= deadline {
            bail!("{open} fills still running after {} s", args.wait_timeout_s);
        }
        std::thread::sleep(POLL);
    }
}
