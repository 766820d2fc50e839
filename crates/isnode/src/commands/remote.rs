//! `isnode ingest FILE --server URL`, `isnode rm NAME --server URL` and `isnode ls --server
//! URL`: the same commands against a server's volume, over `PUT`, `DELETE` and `GET
//! /v1/objects[/{name}]` (docs/protocol.md, "Upload", "Delete" and "Objects").

use std::fs::File;
use std::io::Read;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use indicatif::ProgressBar;
use isnode_proto::{ErrorBody, ObjectInfo, ObjectList, ObjectStatus};

use crate::cli::{IngestArgs, LsArgs, RemoteArgs, RmArgs};

/// Longest wait for a connection to the server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest answer body read (an object's JSON or an error).
const MAX_ANSWER_BYTES: u64 = 1 << 20;
/// Largest object list read (about 100 000 objects).
const MAX_LIST_BYTES: u64 = 64 << 20;
/// Longest wait for the whole object list.
const LIST_TIMEOUT: Duration = Duration::from_secs(60);

/// `ingest FILE --server URL`: uploads the file (or stdin, chunked unless `--size`).
pub(super) fn upload(server: &str, args: &IngestArgs) -> anyhow::Result<ExitCode> {
    let name = super::ingest::object_name(&args.file, args)?;
    if args.bitrate == Some(0) {
        bail!("--bitrate must be greater than 0");
    }
    let url = format!(
        "{}/v1/objects/{}{}",
        isnode_recv::control::base_url(server),
        encode(&name),
        query(args)
    );
    let stdin = args.file.as_os_str() == "-";
    let (mut src, len): (Box<dyn Read>, Option<u64>) = if stdin {
        (Box::new(std::io::stdin().lock()), args.size)
    } else {
        let f =
            File::open(&args.file).with_context(|| format!("opening {}", args.file.display()))?;
        let len = f
            .metadata()
            .with_context(|| format!("reading the size of {}", args.file.display()))?
            .len();
        if args.size.is_some_and(|s| s != len) {
            bail!(
                "{} is {len} bytes, but --size says {}",
                args.file.display(),
                args.size.unwrap_or(0)
            );
        }
        (Box::new(f), Some(len))
    };
    let bar = crate::progress::bytes(len.unwrap_or(0), "upload");
    let mut body = Counted {
        inner: &mut src,
        done: 0,
        bar: &bar,
    };
    // The server may refuse before the body (412, 507): it answers instead of `100`.
    let mut req = agent(&args.remote)?
        .put(&url)
        .header("expect", "100-continue");
    if let Some(len) = len {
        req = req.header("content-length", len.to_string());
    }
    if !args.replace {
        req = req.header("if-none-match", "*");
    }
    if let Some(t) = &args.remote.token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let resp = req
        .send(ureq::SendBody::from_reader(&mut body))
        .with_context(|| format!("uploading to {url}"))?;
    bar.finish_and_clear();
    let o: ObjectInfo = serde_json::from_str(&answer(resp, 201, "upload", &name)?)
        .context("reading the server's description of the object")?;
    println!(
        "uploaded {:?}: {} bytes, {} bit/s, {:.1} s, {} codewords (k={}, m={}, E={}), TOI {}",
        o.name,
        o.size_bytes,
        o.bitrate_bps,
        o.duration_s,
        o.codewords,
        o.source_symbols,
        o.repair_symbols,
        o.symbol_size,
        o.toi
    );
    Ok(ExitCode::SUCCESS)
}

/// `PUT /v1/titles/NAME`: groups the objects `renditions` (uploaded) into title `name`.
pub(super) fn put_title(
    server: &str,
    remote: &RemoteArgs,
    name: &str,
    renditions: &[String],
    replace: bool,
) -> anyhow::Result<()> {
    let url = format!(
        "{}/v1/titles/{}",
        isnode_recv::control::base_url(server),
        encode(name)
    );
    let body = serde_json::json!({ "renditions": renditions, "replace": replace }).to_string();
    let mut req = agent(remote)?
        .put(&url)
        .header("content-type", "application/json");
    if let Some(t) = &remote.token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let resp = req
        .send(body.as_bytes())
        .with_context(|| format!("recording the title at {url}"))?;
    answer(resp, 201, "title", name)?;
    Ok(())
}

/// `rm NAME --server URL [--force]`.
pub(super) fn remove(server: &str, args: &RmArgs) -> anyhow::Result<ExitCode> {
    let url = format!(
        "{}/v1/objects/{}{}",
        isnode_recv::control::base_url(server),
        encode(&args.name),
        if args.force { "?force=true" } else { "" }
    );
    let mut req = agent(&args.remote)?.delete(&url);
    if let Some(t) = &args.remote.token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let resp = req.call().with_context(|| format!("deleting {url}"))?;
    answer(resp, 204, "delete", &args.name)?;
    println!("deleted {:?}", args.name);
    Ok(ExitCode::SUCCESS)
}

/// `ls --server URL [--json]`: the server's objects, complete, bad and filling, as `ls`
/// prints the local volume's.
pub(super) fn list(server: &str, args: &LsArgs) -> anyhow::Result<ExitCode> {
    let url = format!("{}/v1/objects", isnode_recv::control::base_url(server));
    let tls = isnode_recv::control::tls_config(args.remote.ca_cert.as_deref())?;
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_connect(Some(CONNECT_TIMEOUT))
        .timeout_global(Some(LIST_TIMEOUT))
        .tls_config(tls)
        .build()
        .new_agent();
    let (status, body) = get_list(&agent, &url, args)?;
    if status != 200 {
        bail!("listing {url}: server answered {status}: {}", reason(&body));
    }
    let list: ObjectList =
        serde_json::from_str(&body).with_context(|| format!("the object list of {url}"))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(ExitCode::SUCCESS);
    }
    super::objects::print_header();
    for o in &list {
        print_listed(o);
    }
    super::title::print_title_rows(&server_titles(&agent, server, args)?);
    Ok(ExitCode::SUCCESS)
}

/// `GET url` with the token of `args`: the status and the body (at most
/// [`MAX_LIST_BYTES`]).
fn get_list(agent: &ureq::Agent, url: &str, args: &LsArgs) -> anyhow::Result<(u16, String)> {
    let mut req = agent.get(url);
    if let Some(t) = &args.remote.token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let mut resp = req.call().with_context(|| format!("listing {url}"))?;
    let status = resp.status().as_u16();
    let body = resp
        .body_mut()
        .with_config()
        .limit(MAX_LIST_BYTES)
        .read_to_string()
        .with_context(|| format!("reading the list from {url}"))?;
    Ok((status, body))
}

/// The server's titles with renditions (`GET /v1/titles`; none from a server without
/// the route).
fn server_titles(
    agent: &ureq::Agent,
    server: &str,
    args: &LsArgs,
) -> anyhow::Result<Vec<isnode_store::TitleRecord>> {
    let url = format!("{}/v1/titles", isnode_recv::control::base_url(server));
    let (status, body) = get_list(agent, &url, args)?;
    match status {
        200 => serde_json::from_str(&body).with_context(|| format!("the titles of {url}")),
        404 => Ok(Vec::new()),
        s => bail!("listing {url}: server answered {s}: {}", reason(&body)),
    }
}

/// One object of a server's list as `ls` prints a row.
fn print_listed(o: &ObjectInfo) {
    let status = match o.status {
        ObjectStatus::Ok => "ok".to_string(),
        ObjectStatus::Bad => format!("bad: {}", o.problem.as_deref().unwrap_or("")),
        ObjectStatus::Filling => format!(
            "filling: {} of {} codewords",
            o.front_codewords.unwrap_or(0),
            o.codewords
        ),
    };
    let row = super::objects::RowFields {
        name: &o.name,
        size_bytes: o.size_bytes,
        bitrate_bps: o.bitrate_bps,
        duration_s: o.duration_s,
        codewords: o.codewords,
        fec: (o.source_symbols, o.repair_symbols, o.symbol_size),
        toi: o.toi,
    };
    super::objects::print_line(&row, &status);
}

/// An agent without a global timeout (an upload takes as long as it takes).
pub(super) fn agent(remote: &RemoteArgs) -> anyhow::Result<ureq::Agent> {
    let tls = isnode_recv::control::tls_config(remote.ca_cert.as_deref())?;
    Ok(ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_connect(Some(CONNECT_TIMEOUT))
        .tls_config(tls)
        .build()
        .new_agent())
}

/// The answer's body if its status is `expect`, else an error quoting the server.
pub(super) fn answer(
    mut resp: ureq::http::Response<ureq::Body>,
    expect: u16,
    what: &str,
    name: &str,
) -> anyhow::Result<String> {
    let status = resp.status().as_u16();
    let body = resp
        .body_mut()
        .with_config()
        .limit(MAX_ANSWER_BYTES)
        .read_to_string()
        .unwrap_or_default();
    if status == expect {
        return Ok(body);
    }
    bail!(
        "{what} of {name:?}: server answered {status}: {}",
        reason(&body)
    )
}

/// What a server's error answer says: its JSON `error`, else the first 200 characters.
fn reason(body: &str) -> String {
    serde_json::from_str::<ErrorBody>(body)
        .map(|e| e.error)
        .unwrap_or_else(|_| body.chars().take(200).collect())
}

/// The upload's query: `bitrate_bps` and `content_type` when given.
fn query(args: &IngestArgs) -> String {
    let mut q = Vec::new();
    if let Some(b) = args.bitrate {
        q.push(format!("bitrate_bps={b}"));
    }
    if let Some(t) = &args.content_type {
        q.push(format!("content_type={}", encode(t)));
    }
    if args.encrypt {
        q.push("encrypt=on".into());
    }
    match q.is_empty() {
        true => String::new(),
        false => format!("?{}", q.join("&")),
    }
}

/// Percent-encodes all but RFC 3986's unreserved characters.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A reader that moves the progress bar.
struct Counted<'a> {
    inner: &'a mut dyn Read,
    done: u64,
    bar: &'a ProgressBar,
}

impl Read for Counted<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.done += n as u64;
        self.bar.set_position(self.done);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_percent_encoded() {
        assert_eq!(encode("a b/ü.ts"), "a%20b%2F%C3%BC.ts");
        assert_eq!(encode("Movie-1_x~.mp4"), "Movie-1_x~.mp4");
    }
}
